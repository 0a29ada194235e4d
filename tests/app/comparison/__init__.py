"""Tests of convnet.app.comparison: --compare's table, picture and verdict."""

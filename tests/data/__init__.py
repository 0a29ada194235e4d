"""Tests of convnet.data: the data providers and what guards them."""

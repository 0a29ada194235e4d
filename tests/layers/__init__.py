"""Tests of the layer library (layers/, installed as convnet.layers)."""

"""Tests of convnet.simulate: the predicted schedule and its cost model."""

"""Tests of convnet.runtime.step: the executor and its parts."""

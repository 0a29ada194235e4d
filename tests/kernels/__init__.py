"""Tests of the array math (kernels/, installed as convnet.kernels)."""

"""Tests of convnet.runtime: executing a plan on devices, threads and processes."""

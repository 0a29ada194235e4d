"""Tests of convnet.runtime.devices: the device protocol and the collectives."""

"""Tests of convnet.config: reading cuda-convnet and cuda-convnet2 config files."""

"""Tests of convnet.app: the command line, checkpoints and run options."""

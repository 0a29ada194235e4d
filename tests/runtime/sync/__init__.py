"""Tests of convnet.runtime.sync: replicas running apart (local SGD, async)."""

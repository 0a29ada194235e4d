"""Tests of the CUDA backend: the kernel sources, CudaDevice, and runs on a GPU."""

"""Tests of convnet.runtime.processes: runs of several processes under MPI."""

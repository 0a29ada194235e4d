"""Logical devices: what one offers (:mod:`~convnet.runtime.devices.base`), CPU workers and CUDA streams.

:mod:`~convnet.runtime.devices.backends` picks the kind and makes them;
:mod:`~convnet.runtime.devices.collectives` sums gradients across them. The bottom of the
runtime: imports only ``kernels`` and the base modules of ``convnet``.
"""

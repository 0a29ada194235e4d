"""Running a plan on logical devices: one training step or evaluation at a time.

Sub-packages, from the top of the map down (each imports only those below it):
:mod:`~convnet.runtime.sync` (replicas that run apart: local SGD, async),
:mod:`~convnet.runtime.step` (the step executor: tasks, workers, weights, update),
:mod:`~convnet.runtime.processes` (ranks over MPI: cluster, communicator, couriers),
:mod:`~convnet.runtime.devices` (CPU and CUDA logical devices, all-reduce).
:mod:`convnet.runtime.gradcheck` (``--check-grads``) stands apart: it needs only the layers.
The runtime may import ``plan``, ``layers``, ``config`` and ``kernels``; never ``app``.
Start reading at :mod:`convnet.runtime.step.executor`.
"""

"""Running a plan on logical devices.

:mod:`convnet.runtime.device` says what a logical device offers;
:mod:`convnet.runtime.devices` (CPU workers) and :mod:`convnet.runtime.cuda_device`
(CUDA GPUs) implement it; :mod:`convnet.runtime.collectives`
sums gradients across them; :mod:`convnet.runtime.tasks` turns a plan into the
tasks each device's worker runs (:mod:`convnet.runtime.workers`);
:mod:`convnet.runtime.executor` runs one training step or evaluation, keeping
the weights in a :mod:`convnet.runtime.weights` store and updating them with
:mod:`convnet.runtime.optimizer` (hyper-parameters per weight array from
:mod:`convnet.runtime.learning_rules`); :mod:`convnet.runtime.batch_check` and
:mod:`convnet.runtime.non_finite` word what goes wrong with a minibatch.
A run over several processes: :mod:`convnet.runtime.cluster` (ranks, devices,
the communicator; :mod:`convnet.runtime.mpi_comm` over MPI),
:mod:`convnet.runtime.rank_tasks` (each rank's tasks, with sends and
receives) and :mod:`convnet.runtime.transfers` (carrying them out).
"""

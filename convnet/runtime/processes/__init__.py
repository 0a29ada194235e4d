"""A run over several processes: ranks, the communicator (MPI) and the message couriers.

:mod:`~convnet.runtime.processes.cluster` says which rank holds which logical devices;
:mod:`~convnet.runtime.processes.communicator` is the one interface, MPI behind it; the
couriers and message layout carry ``--sync async`` traffic.  May import
:mod:`convnet.runtime.devices` only.
"""

"""Replica synchronisation modes whose replicas run apart: ``--sync local:K`` and ``async:S``.

Each wraps the lockstep :mod:`convnet.runtime.step` executor with one thread per replica
(:mod:`~convnet.runtime.sync.replica_threads`).  May import every other runtime sub-package.
"""

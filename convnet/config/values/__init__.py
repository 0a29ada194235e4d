"""The values a config file holds: typed scalars and lists, neurons, schedules.

With where each came from (:mod:`~convnet.config.values.location`) and "did you mean"
hints, so every error points at its file, section and key.  The bottom of ``config``:
imports only ``kernels`` and the base modules of ``convnet``.
"""

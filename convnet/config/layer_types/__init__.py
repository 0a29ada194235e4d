"""The layer types of the config language: one descriptor per ``type=`` value, with its rules.

The descriptor table (:mod:`~convnet.config.layer_types.table`) and each type's shape,
weight-shape and memory rules.  May import :mod:`convnet.config.values` only.
"""

"""A multi-device training engine for cuda-convnet2 style network configs.

The package turns a layer-def and a layer-params file into a typed layer graph
(:mod:`convnet.config`), plans where every layer replica runs and which copies
cross devices (:mod:`convnet.plan.planner`), and walks that plan on logical devices.
The layer library and the array math live in the folders ``layers/`` and
``kernels/`` and install as :mod:`convnet.layers` and :mod:`convnet.kernels`.
"""

__version__ = "0.1.0"

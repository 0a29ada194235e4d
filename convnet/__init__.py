"""A multi-device training engine for cuda-convnet2 style network configs.

The package turns a layer-def and a layer-params file into a typed layer graph
(:mod:`convnet.config`), plans where every layer replica runs and which copies
cross devices (:mod:`convnet.plan.planner`), and walks that plan on logical devices.
The layer library and the array math live in the folders ``layers/`` and
``kernels/`` and install as :mod:`convnet.layers` and :mod:`convnet.kernels`.

From Python (docs/API.md): :func:`train` runs a training run as the command line does,
:func:`load` opens a trained net.  Importing the package loads neither numpy nor the
engine (the command line's early signal handling and ``--help`` depend on that): each
is imported when first called.
"""

from convnet.version import __version__  # noqa: F401 - the package's version


def train(**options):
    """Train a net with the command line's options as keywords; a
    :class:`~convnet.app.python_api.TrainingResult` (docs/API.md)."""
    from convnet.app.python_api import train as train_net

    return train_net(**options)


def load(path, **options):
    """The trained net saved in ``path``: a :class:`~convnet.app.python_api.TrainedNet`
    (docs/API.md)."""
    from convnet.app.python_api import load as load_net

    return load_net(path, **options)

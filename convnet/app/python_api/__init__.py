"""The engine from Python, for a notebook or a script (docs/API.md):
``convnet.train(...)`` and ``convnet.load(path)``.

Both take the command line's options as keywords (:mod:`.arguments`) and go the command
line's way through the engine: its parser, its option resolution and checks, the same
training run and the same opening of a saved net, so a keyword means what its option
means and a mistake raises the error the command line would print (a
:class:`convnet.errors.ConvnetError`, whose ``exit_code`` is the command line's).  The
top of :mod:`convnet.app`: it may import every part of it.
"""

from convnet.app.python_api.trained_net import TrainedNet, load
from convnet.app.python_api.training import TrainingResult, train

__all__ = ["TrainedNet", "TrainingResult", "load", "train"]

"""The application: the command line, training runs, comparisons, checkpoints and logs.

Sub-packages, from the top down (each imports only those below it and the modules here):
:mod:`~convnet.app.python_api` (``convnet.train``, ``convnet.load``),
:mod:`~convnet.app.command_line`, :mod:`~convnet.app.comparison` (``--compare``),
:mod:`~convnet.app.prediction` (``--simulate``, ``--auto-place``), :mod:`~convnet.app.run`
(one training run).  The modules directly here (options, checkpoints, the MPI launch)
are the base every sub-package uses.  The app may import every other package.
"""

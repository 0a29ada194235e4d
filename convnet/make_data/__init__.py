"""``python -m convnet.make_data``: images (a class-folder tree or the ILSVRC-2012 tars)
to the JPEG batches of cuda-convnet2's ``make-data.py``, which ``--data-provider image``
reads (docs/IMAGENET.md has the format and the options).

The parts, each with one job: ``sources`` (what to read: image references and labels,
from a folder tree) and ``ilsvrc`` (from the ILSVRC-2012 tars), ``convert`` (one image
to a square RGB JPEG), ``statistics`` (``data_mean`` and ``color_pca``), ``layout``
(which images go into which numbered batch), ``target`` (the target folder: what it may
hold, the settings file), ``writer`` (a batch folder written whole), ``skip_log``
(the log of skipped images), ``work`` (what the worker processes do), ``pool`` (the
worker processes), ``run`` (putting them together), ``cli`` (the command line) and
``launcher`` (its start, also of ``__main__``).

An application on top of the engine, beside ``convnet.app``: it may import
``convnet.data`` (the safe unpickler, batch ranges) and the modules directly in
``convnet/`` (errors, outputs, optional dependencies), nothing of ``convnet.app`` or
of the packages below ``data`` (tests/project/test_import_cycles.py checks it).
"""

"""The ``image`` provider: cuda-convnet2's JPEG batches, as its ``make-data.py`` writes them.

``meta`` reads and checks ``batches.meta``; ``batch_files`` finds the numbered
batches (a pickle, or a folder of sub-batch pickles) and reads their JPEG
strings and labels; ``labels`` turns label ids and lists of ids into the label
column and the label matrix; ``decode`` decodes a batch's JPEGs on a thread
pool into one uint8 array; ``provider`` puts them behind the shared
:class:`~convnet.data.base.DataProvider` pipeline (mean, crops, mirrors,
multiview).  Imports the shared modules of :mod:`convnet.data` (never its
``__init__``, the registry above it), :mod:`convnet.errors` and simplejpeg.
"""

from convnet.data.image.provider import ImageProvider

__all__ = ["ImageProvider"]

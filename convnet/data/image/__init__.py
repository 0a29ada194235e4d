"""The ``image`` provider: cuda-convnet2's JPEG batches, as its ``make-data.py`` writes them.

``meta`` reads and checks ``batches.meta``; ``batch_files`` finds the numbered
batches (a pickle, or a folder of sub-batch pickles) and reads their JPEG
strings and labels; ``labels`` turns label ids and lists of ids into the label
column and the label matrix; ``decode`` decodes a batch's JPEGs on a thread
pool into one uint8 array (whole images, or each one's crop window);
``provider`` puts them behind the shared :class:`~convnet.data.base.DataProvider`
interface (the crop windows and the draws of the augmentation in ``load_batch``,
the mean, mirrors and colour noise where the images become float, multiview).
Imports the shared modules of :mod:`convnet.data` (never its ``__init__``, the
registry above it), :mod:`convnet.kernels`, :mod:`convnet.errors` and simplejpeg.
"""

from convnet.data.image.provider import ImageProvider

__all__ = ["ImageProvider"]

"""Photos in class folders: reading such a tree safely (``sources``), one photo to the
square JPEG a batch stores (``convert``, with Pillow), and the provider that trains
straight from the tree (``provider``: ``--data-provider image`` on a folder of class
folders).  ``python -m convnet.make_data`` writes its batches with the same two parts,
so both serve the same pixels.  Imports :mod:`convnet.data.image` (its decoder), the
shared modules of :mod:`convnet.data` and :mod:`convnet.errors`; Pillow only when a
photo is converted.
"""

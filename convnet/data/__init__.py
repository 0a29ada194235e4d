"""Training data: providers of numbered batches, batch ranges and prefetching.

See :mod:`convnet.data.base` for the interface every provider implements; the
modules directly in the package are the shared parts and the small providers,
and ``image/`` (the JPEG batches) sits above them.  Here is the registry that
chooses a provider by the name given to ``--data-provider``: it is the one
place that knows every provider, so it sits above them all.
"""

from __future__ import annotations

import dataclasses
import difflib

from convnet.data.base import DataProvider
from convnet.data.options import DataOptions
from convnet.data.cifar import CifarProvider
from convnet.data.convnet_batches import ConvnetBatchesProvider
from convnet.data.digits import DigitsProvider
from convnet.data.dummy import DummyProvider
from convnet.data.image import ImageProvider
from convnet.data.photos.provider import PhotoFolderProvider, is_class_tree
from convnet.data.prefetch import BatchPrefetcher
from convnet.data.ranges import format_range, parse_range
from convnet.errors import DataError

__all__ = ["BatchPrefetcher", "DataOptions", "DataProvider", "PROVIDERS", "format_range",
           "make_provider", "parse_range"]

PROVIDERS: dict[str, type[DataProvider]] = {
    cls.name: cls for cls in (DigitsProvider, CifarProvider, ConvnetBatchesProvider, DummyProvider,
                              ImageProvider)
}


def make_provider(name: str, data_path: str | None = None,
                  options: DataOptions | None = None) -> DataProvider:
    """Build the provider registered as ``name``; ``data_path`` overrides ``options.data_path``."""
    options = options or DataOptions()
    if data_path is not None:
        options = dataclasses.replace(options, data_path=str(data_path))
    try:
        cls = PROVIDERS[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), PROVIDERS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise DataError(f"unknown data provider '{name}'{hint}; known: "
                        f"{', '.join(sorted(PROVIDERS))}") from None
    if is_class_tree(options.data_path):
        if cls is ImageProvider:
            return PhotoFolderProvider(options)  # photos in class folders, not batches yet
        if cls in (CifarProvider, ConvnetBatchesProvider):
            raise DataError(f"{options.data_path}: a folder of class folders, not "
                            f"'{name}' batches: train from it with --data-provider image, or "
                            "write batches with python -m convnet.make_data")
    return cls(options)

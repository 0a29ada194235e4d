"""Training data: providers of numbered batches, batch ranges and prefetching.

See :mod:`convnet.data.base` for the interface every provider implements and
:mod:`convnet.data.registry` for choosing one by name.
"""

from convnet.data.base import DataOptions, DataProvider
from convnet.data.prefetch import BatchPrefetcher
from convnet.data.ranges import format_range, parse_range
from convnet.data.registry import PROVIDERS, make_provider

__all__ = ["BatchPrefetcher", "DataOptions", "DataProvider", "PROVIDERS", "format_range",
           "make_provider", "parse_range"]

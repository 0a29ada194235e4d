"""Choosing a data provider by the name given to ``--data-provider``."""

from __future__ import annotations

import dataclasses
import difflib

from convnet.data.base import DataOptions, DataProvider
from convnet.data.cifar import CifarProvider
from convnet.data.convnet_batches import ConvnetBatchesProvider
from convnet.data.digits import DigitsProvider
from convnet.data.dummy import DummyProvider
from convnet.errors import DataError

PROVIDERS: dict[str, type[DataProvider]] = {
    cls.name: cls for cls in (DigitsProvider, CifarProvider, ConvnetBatchesProvider, DummyProvider)
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
    return cls(options)

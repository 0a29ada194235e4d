"""The connectivity tables of cuda-convnet v1's ``randSparse`` conv and local layers.

v1 drew, for an input with ``groups`` filter groups each reading ``filterChannels``
of its ``channels`` channels, ``overSample = groups * filterChannels / channels``
random permutations of the channels one after the other; group g reads the
entries ``g * filterChannels ... (g + 1) * filterChannels - 1``.  So every group
reads distinct channels and every channel is read by exactly ``overSample``
groups.  The draw here is the same, from the layer's own random generator
(:func:`layer_rng`: the run's seed and the layer's name), so every replica,
device and process of a run draws the same table, and a run with the same seed
draws it again; a checkpoint's table replaces the drawn one on resume.
"""

from __future__ import annotations

import zlib

import numpy as np


def layer_rng(seed: int, name: str) -> np.random.Generator:
    """The random generator a layer's initial weights (and tables) are drawn from."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def draw_table(rng: np.random.Generator, groups: int, channels: int,
               filter_channels: int) -> np.ndarray:
    """A table as v1 drew it (see the module docstring), float32 as the weights are
    stored: ``groups * filter_channels`` channel indices."""
    over_sample = groups * filter_channels // channels
    return np.concatenate([rng.permutation(channels) for _ in range(over_sample)]
                          ).astype(np.float32)


def table_error(table: np.ndarray, channels: int, filter_channels: int) -> str | None:
    """Why ``table`` cannot be an input's connectivity (a tampered or foreign
    checkpoint), or None: it must be whole permutations of the channels."""
    values = np.asarray(table, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
        return "holds values that are not channel indices"
    if values.size % channels or values.size % filter_channels:
        return f"has {values.size} entries, not whole permutations of {channels} channels"
    blocks = np.sort(values.reshape(-1, channels), axis=1)
    if not np.array_equal(blocks, np.broadcast_to(np.arange(channels), blocks.shape)):
        return f"is not made of permutations of the channels 0..{channels - 1}"
    return None


def draw_tables(attrs: dict, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Input index -> its table, for each input of a conv or local layer (``attrs``)
    with ``randSparse``.  They come from a child of ``rng`` (``spawn``, which does not
    advance ``rng``), so the layer's initial weights are what they would be without."""
    sparse = [i for i, random in enumerate(attrs.get("randSparse") or ()) if random]
    if not sparse:
        return {}
    child = rng.spawn(1)[0]
    return {i: draw_table(child, attrs["groups"][i], attrs["channels"][i],
                          attrs["filterChannels"][i]) for i in sparse}


def connection_tables(ldef, seed: int) -> dict[int, np.ndarray]:
    """Input index -> the table a run with ``seed`` draws for ``ldef`` (what
    ``--print-plan`` shows), as integers; empty without ``randSparse``."""
    return {i: t.astype(np.int64)
            for i, t in draw_tables(ldef.attrs, layer_rng(seed, ldef.name)).items()}


__all__ = ["connection_tables", "draw_table", "draw_tables", "layer_rng", "table_error"]

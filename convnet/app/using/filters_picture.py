"""``--show-filters LAYER --out PNG``: a conv layer's filters as a grid, as shownet drew them.

Filters over three input channels (a first layer on colour images) are drawn in
colour, each scaled to its own range so that its pattern shows whatever its norm;
other filters are drawn channel by channel as grey tiles, one row per filter (at
most :data:`MAX_FILTER_ROWS` rows and :data:`MAX_CHANNEL_COLUMNS` channels; the
title says when some are left out).
"""

from __future__ import annotations

import math

import numpy as np

from convnet.app.options import RunOptions
from convnet.app.using.pictures import new_figure, save_figure
from convnet.app.using.saved_net import open_saved_net
from convnet.errors import ConfigError
from convnet.optional import require_matplotlib

MAX_FILTER_ROWS = 32
MAX_CHANNEL_COLUMNS = 16


def scaled_per_filter(weights: np.ndarray) -> np.ndarray:
    """(F, ...) weights with each filter mapped onto [0, 1] by its own min and max."""
    flat = weights.reshape(len(weights), -1)
    low = flat.min(axis=1, keepdims=True)
    span = np.maximum(flat.max(axis=1, keepdims=True) - low, 1e-12)
    return ((flat - low) / span).reshape(weights.shape)


def tile_grid(tiles: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """(rows*cols tiles of (h, w[, 3])) laid out with a one-pixel white gap."""
    count, h, w = tiles.shape[:3]
    extra = tiles.shape[3:]
    grid = np.ones((rows * (h + 1) + 1, cols * (w + 1) + 1) + extra, np.float32)
    for index in range(count):
        r, c = divmod(index, cols)
        grid[1 + r * (h + 1):1 + r * (h + 1) + h, 1 + c * (w + 1):1 + c * (w + 1) + w] = tiles[index]
    return grid


def filter_image(weights: np.ndarray) -> tuple[np.ndarray, str]:
    """The picture of conv weights (F, C, fs, fs) and what it shows."""
    filters, channels, size, _ = weights.shape
    scaled = scaled_per_filter(weights)
    if channels == 3:
        cols = math.ceil(math.sqrt(filters))
        return (tile_grid(scaled.transpose(0, 2, 3, 1), math.ceil(filters / cols), cols),
                "colour (RGB), each filter scaled to its own range")
    if channels == 1:
        cols = math.ceil(math.sqrt(filters))
        return (tile_grid(scaled[:, 0], math.ceil(filters / cols), cols),
                "each filter scaled to its own range")
    rows, cols = min(filters, MAX_FILTER_ROWS), min(channels, MAX_CHANNEL_COLUMNS)
    tiles = scaled[:rows, :cols].reshape(rows * cols, size, size)
    shown = f"rows: filters 0-{rows - 1}; columns: input channels 0-{cols - 1}"
    return tile_grid(tiles, rows, cols), shown + "\neach filter scaled to its own range"


def run_show_filters(opts: RunOptions) -> int:
    require_matplotlib("--show-filters")
    saved = open_saved_net(opts)
    try:
        layer = opts.show_filters
        net = saved.net
        if layer not in net.layers or net[layer].type != "conv":
            what = f"a {net[layer].type} layer" if layer in net.layers else "not a layer of the net"
            convs = ", ".join(l.name for l in net if l.type == "conv") or "none"
            raise ConfigError(f"--show-filters draws a conv layer's filters, but '{layer}' is "
                              f"{what} (conv layers: {convs})", file=net.layer_def_file)
        weights = saved.trainer.executor.state_arrays()[f"weights/{layer}/W0"]
    finally:
        saved.close()
    image, shown = filter_image(np.asarray(weights, np.float32))
    filters, channels, size, _ = weights.shape
    height, width = image.shape[:2]
    scale = max(0.04, min(0.12, 9.0 / max(width, height)))  # inches per pixel
    figure = new_figure(max(5.0, width * scale), max(3.0, height * scale + 0.8))
    axes = figure.add_subplot(1, 1, 1)
    axes.imshow(image, cmap="gray", interpolation="nearest", vmin=0, vmax=1)
    axes.set_axis_off()
    axes.set_title(f"{layer}: {filters} filters of {channels} x {size} x {size}\n({shown})",
                   fontsize=10)
    save_figure(figure, opts.out)
    return 0

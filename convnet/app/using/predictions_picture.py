"""``--show-preds N --out PNG``: N test images with the net's top-5 classes, as shownet drew them.

The images are the first N test cases of the run's test range as the net sees
them (the centre crop), with the mean added back so that they look like the
pictures they are; beside each, its five most probable classes as bars, the
true class's bar green (and named under the image when it is not among them), a
wrong top class red.
"""

from __future__ import annotations

import math

import numpy as np

from convnet.app.options import RunOptions
from convnet.app.using.pictures import new_figure, save_figure
from convnet.app.using.saved_net import SavedNet, open_saved_net, require_image_input
from convnet.errors import DataError
from convnet.optional import require_matplotlib

#: Most images one picture shows (shownet showed a page of them too).
MAX_IMAGES = 64
TOP = 5
PER_ROW = 4


def test_cases(saved: SavedNet, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs as the net reads them, the same images for the eye, labels) of the first
    ``count`` test cases: with several test views the inputs are the views."""
    provider = saved.provider
    shown, inputs, labels = [], [], []
    have = 0
    for batch_id in provider.test_batches:
        if have >= count:
            break
        if provider.num_views > 1:
            views, batch_labels = provider.get_test_views(batch_id)[:2]
            centre = views[0]
            inputs.append(views[:, :count - have])
        else:
            centre, batch_labels = provider.get_batch(batch_id, train=False)[:2]
            inputs.append(centre[:count - have])
        shown.append(centre[:count - have])
        labels.append(batch_labels[:count - have].reshape(-1))
        have += len(labels[-1])
    if not have:
        raise DataError("--show-preds shows test cases, but the test range selects none")
    # what the preprocessing subtracted, as it subtracted it (crop included)
    shape = (1,) + tuple(provider.image_shape)
    offset = provider.test_cases_from_pixels(np.zeros(shape, np.float32))
    offset = offset[0] if offset.ndim == 5 else offset
    joined = np.concatenate(inputs, axis=1 if inputs[0].ndim == 5 else 0)
    return joined, np.concatenate(shown) - offset, np.concatenate(labels).astype(np.int64)


def displayable(images: np.ndarray, pixel_max: float) -> np.ndarray:
    """(N, C, s, s) pixels in provider units -> (N, s, s[, 3]) in [0, 1] for imshow."""
    scaled = np.clip(images / pixel_max, 0.0, 1.0)
    return scaled[:, 0] if scaled.shape[1] == 1 else scaled.transpose(0, 2, 3, 1)


def draw(images, probs, labels, names, title):
    count = len(images)
    cols = min(PER_ROW, count)
    rows = math.ceil(count / cols)
    figure = new_figure(3.6 * cols, 1.7 * rows + 0.4)
    grid = figure.add_gridspec(rows, 2 * cols, width_ratios=[1, 1.4] * cols)
    for index in range(count):
        r, c = divmod(index, cols)
        picture = figure.add_subplot(grid[r, 2 * c])
        picture.imshow(images[index], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
        picture.set_xticks([])
        picture.set_yticks([])
        truth = int(labels[index])
        picture.set_xlabel(f"true: {names[truth]}", fontsize=8)
        bars = figure.add_subplot(grid[r, 2 * c + 1])
        order = np.argsort(-probs[index], kind="stable")[:TOP]
        colours = ["tab:green" if k == truth else
                   ("tab:red" if rank == 0 else "tab:gray") for rank, k in enumerate(order)]
        bars.barh(range(len(order)), probs[index][order], color=colours)
        bars.set_yticks(range(len(order)), [names[k] for k in order], fontsize=8)
        bars.invert_yaxis()
        bars.set_xlim(0, 1)
        bars.tick_params(axis="x", labelsize=7)
        bars.grid(axis="x", alpha=0.3)
    figure.suptitle(title, fontsize=10)
    return figure


def run_show_preds(opts: RunOptions) -> int:
    require_matplotlib("--show-preds")
    count = min(opts.show_preds, MAX_IMAGES)
    saved = open_saved_net(opts)
    try:
        require_image_input(saved, "--show-preds")
        inputs, shown, labels = test_cases(saved, count)
        probs = saved.probabilities(inputs)
        names = saved.label_names
        pixel_max = saved.provider.pixel_max
    finally:
        saved.close()
    note = f" (at most {MAX_IMAGES} are drawn)" if opts.show_preds > MAX_IMAGES else ""
    title = (f"{len(labels)} test cases with the top {TOP} classes: green the true class, "
             f"red a wrong top class{note}")
    save_figure(draw(displayable(shown, pixel_max), probs, labels, names, title), opts.out)
    return 0

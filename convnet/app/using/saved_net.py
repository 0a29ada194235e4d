"""A saved run opened for use: its data provider, net, plan and weights, and the
test-mode class probabilities of image columns.

Built as ``--test-only`` builds it (:mod:`convnet.app.run.assembly` and the
trainer's checkpoint restore), so a checkpoint that does not fit the net is
refused with the same line, and forward passes run on the run's devices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from convnet.app.options import RunOptions
from convnet.app.run.assembly import build_net_and_plan, make_data_provider, make_executor
from convnet.app.run.training import Trainer
from convnet.app.using.shown_names import shown_name
from convnet.config import parse_net
from convnet.config.model import NetConfig
from convnet.errors import ConfigError, DataError


@dataclass
class SavedNet:
    """The parts of a saved run a user of the trained net needs."""

    opts: RunOptions
    provider: object
    net: NetConfig
    trainer: Trainer
    probs_layer: str

    @property
    def label_names(self) -> list[str]:
        """The provider's class names, else the class numbers, as every output can show
        them (a class folder's name that is not UTF-8 escaped)."""
        names = list(getattr(self.provider, "label_names", []) or [])
        width = self.num_classes
        return [shown_name(str(name)) for name in names[:width]] if len(names) >= width \
            else [str(k) for k in range(width)]

    @property
    def num_classes(self) -> int:
        shape = self.net[self.probs_layer].output_shape
        return int(np.prod(shape))

    def probabilities(self, images: np.ndarray) -> np.ndarray:
        """(N, classes) test-mode probabilities of preprocessed images: (N, C, s, s), or
        (V, N, C, s, s) views, whose probabilities are averaged as --multiview-test does."""
        views = images if images.ndim == 5 else images[None]
        count = views.shape[1]
        short = self.trainer.plan.num_shards - count  # every shard needs a case
        if short > 0:
            views = np.concatenate([views, np.repeat(views[:, -1:], short, axis=1)], axis=1)
        labels = np.zeros((views.shape[1], 1), np.float32)  # read by the cost layer only
        total = 0
        for view in views:
            total = total + self.trainer.features([view, labels], self.probs_layer)
        return (total / len(views))[:count].astype(np.float32)

    def close(self) -> None:
        self.trainer.executor.close()


def probability_layer(net: NetConfig, cost_layer: str) -> str:
    """The layer whose outputs are the class probabilities: the one the reported
    cost.logreg layer reads (as --multiview-test averages them)."""
    if net[cost_layer].type != "cost.logreg":
        raise ConfigError(f"the net's class probabilities are what a cost.logreg layer "
                          f"reads, but its reported cost layer '{cost_layer}' is "
                          f"{net[cost_layer].type}; choose one with --logreg-name",
                          file=net.layer_def_file)
    return net[cost_layer].inputs[1]


def open_saved_net(opts: RunOptions) -> SavedNet:
    """The run ``--load-file`` names, with its weights on the run's devices."""
    parse_net(opts.layer_def, opts.layer_params)  # config errors before loading any data
    provider = make_data_provider(opts)
    net, plan = build_net_and_plan(opts, provider)
    executor = make_executor(opts, net, plan)
    try:
        trainer = Trainer(opts, provider, net, plan, executor, save_dir=None, announce=False)
        trainer.restore(opts.resume)
        return SavedNet(opts, provider, net, trainer,
                        probability_layer(net, trainer.cost_layer))
    except BaseException:
        executor.close()
        raise


def image_input_problem(provider, net: NetConfig) -> str | None:
    """Why the net's input cannot come from image files, or None when it can: the
    provider's pixels must be pictures (1 or 3 channels) and the net may read no data
    column but the images (0) and the labels (1)."""
    shape = tuple(getattr(provider, "image_shape", ()))
    if getattr(provider, "pixel_max", None) is None:
        return f"the '{provider.name}' data are not pictures an image file could give"
    if len(shape) != 3 or shape[0] not in (1, 3) or shape[1] != shape[2]:
        return (f"the '{provider.name}' data are {'x'.join(map(str, shape))} per case, not "
                "square grey or colour images")
    extra = sorted({int(l.attrs.get("dataIdx", 0)) for l in net if l.is_data} - {0, 1})
    if extra:
        return f"the net also reads data column {extra[0]}, which no image file gives"
    return None


def require_image_input(saved: SavedNet, what: str) -> None:
    problem = image_input_problem(saved.provider, saved.net)
    if problem is not None:
        raise DataError(f"{what} needs a net whose input is an image: {problem}")

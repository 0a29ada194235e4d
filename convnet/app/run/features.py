"""``--write-features``: a layer's test-mode outputs for every test batch, as .npz files.

A product of its own, written after the training (or with ``--test-only``) rather
than part of the epoch loop in :mod:`convnet.app.run.training`.  The layer and
the folder are checked when the trainer is made, so that a wrong name or a
folder that cannot be made fails before any training.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Callable

import numpy as np

from convnet.app.invocation import shown_path
from convnet.app.options import RunOptions
from convnet.app.run.log import RunLog
from convnet.config.model import NetConfig
from convnet.errors import ConfigError, DataError
from convnet.filekind import cannot_write_folder
from convnet.outputs import file_name_part, refuse_existing, write_output
from convnet.plan.ops import Plan


def feature_folder(opts: RunOptions) -> Path:
    """``--feature-path``, else ``features-LAYER`` in the save path (or the current folder);
    LAYER as :func:`~convnet.outputs.file_name_part` makes it, so that the folder stays
    inside the save path whatever the layer is called."""
    base = Path(opts.save_path) if opts.save_path else Path(".")
    return Path(opts.feature_path or base / f"features-{file_name_part(opts.write_features)}")


def feature_files(opts: RunOptions, test_batches) -> list[tuple[int, Path]]:
    """(batch, file) of every features file the run writes."""
    folder = feature_folder(opts)
    return [(batch_id, folder / f"data_batch_{batch_id}.npz") for batch_id in test_batches]


def check_feature_layer(opts: RunOptions, net: NetConfig, plan: Plan, test_batches,
                        make_folder: bool) -> None:
    """Refuse a ``--write-features`` layer the net lacks or does not compute; with
    ``make_folder`` (the process that writes) check now that the folder can be made
    and refuse features files already there unless ``--overwrite`` (not after the
    training: a folder that cannot be made or a file that may not be replaced fails
    early).  The folder is made only to write the features, so a run that fails
    before leaves none."""
    layer = opts.write_features
    if layer is None:
        return
    if layer not in net.layers:
        close = difflib.get_close_matches(layer, list(net.layers), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"--write-features names '{layer}', which is not a layer of "
                          f"the net{hint}", file=net.layer_def_file)
    placement = plan.layers.get(layer)
    if placement is None or not placement.devices:
        raise ConfigError(f"--write-features: layer '{layer}' is not computed (nothing "
                          f"reads it)", file=net.layer_def_file)
    if not make_folder:
        return
    reason = cannot_write_folder(feature_folder(opts))
    if reason is not None:
        raise DataError(f"cannot create feature folder {feature_folder(opts)}: {reason}")
    for _, target in feature_files(opts, test_batches):
        refuse_existing(target, opts.overwrite, keep="give another --feature-path")


def write_features(opts: RunOptions, provider, layer_outputs: Callable[[list, str], np.ndarray],
                   log: RunLog, root: bool) -> None:
    """FEATURE_PATH/data_batch_N.npz for every test batch N: ``data`` (cases x
    features, float32, the layer's test-mode output) and ``labels``.

    ``layer_outputs(batch, layer)`` computes the outputs; every process of a run
    computes them (the executor needs all ranks), only the ``root`` writes, each
    file atomically and never through a link (:func:`~convnet.outputs.write_output`).
    """
    layer = opts.write_features
    folder = feature_folder(opts)
    if not opts.save_path and not opts.feature_path:
        log.note(f"features of '{layer}' go to {folder.resolve()} (no --feature-path "
                 "or --save-path given: the current folder)")
    for batch_id, target in feature_files(opts, provider.test_batches):
        batch = provider.get_batch(batch_id, train=False, epoch=0)
        feats = layer_outputs(batch, layer)
        if not root:
            continue
        labels = batch[1].reshape(-1)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_output(target, lambda file: np.savez(file, data=feats, labels=labels))
        except OSError as error:
            raise DataError(f"cannot write features to {target}: {error.strerror}") from None
        log.note(f"wrote {feats.shape[0]} x {feats.shape[1]} features of '{layer}' "
                 f"to {shown_path(target)}")

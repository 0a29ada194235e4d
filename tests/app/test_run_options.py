"""RunOptions: the command line, then a checkpoint, then the bundled example, then defaults."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import numpy as np
import pytest

from convnet.app import bundled_example
from convnet.app.checkpoint import CHECKPOINT_NAME, save_checkpoint
from convnet.app.command_line.parser import build_parser
from convnet.app.options import RunOptions, resolve_options
from convnet.app.saved_options import options_for_checkpoint
from convnet.errors import CheckpointError, UsageError
from tests.support import ROOT

EXAMPLES = ROOT / "examples"


def resolve(*argv: str) -> RunOptions:
    return resolve_options(build_parser().parse_args(list(argv)))


def test_no_arguments_give_the_bundled_example():
    opts = resolve()
    assert (opts.layer_def, opts.layer_params) == (bundled_example.LAYER_DEF,
                                                   bundled_example.LAYER_PARAMS)
    assert (opts.gpu, opts.epochs, opts.data_provider) == (bundled_example.GPU,
                                                           bundled_example.EPOCHS, "digits")
    assert (opts.mini, opts.seed, opts.backend, opts.resume) == (128, 0, "auto", None)
    with pytest.raises(FrozenInstanceError):
        opts.mini = 64


def test_a_named_net_gets_the_plain_defaults():
    opts = resolve("--layer-def", str(EXAMPLES / "digits-single.cfg"),
                   "--layer-params", str(EXAMPLES / "digits-params.cfg"),
                   "--data-dims", "1x8x8")
    assert (opts.gpu, opts.epochs, opts.data_provider) == ((0,), 1, "dummy")


def test_a_layer_def_needs_its_params():
    with pytest.raises(UsageError, match="--layer-def needs --layer-params"):
        resolve("--layer-def", str(EXAMPLES / "digits-single.cfg"))


def test_saved_options_show_through_and_the_command_line_wins(tmp_path):
    saved = options_for_checkpoint(resolve("--mini", "64", "--seed", "5", "--gpu", "1,0"))
    save_checkpoint(tmp_path / CHECKPOINT_NAME, {"weights/x/W0": np.zeros(2, np.float32)},
                    {"options": saved})
    opts = resolve("--load-file", str(tmp_path), "--seed", "7")
    assert (opts.mini, opts.seed, opts.gpu) == (64, 7, (1, 0))
    assert opts.resume.checkpoint == tmp_path / CHECKPOINT_NAME
    assert opts.resume.saved_options["seed"] == 5
    assert set(opts.resume.keys) == {"weights/x/W0"}


def test_the_sync_mode_is_saved_and_resumed(tmp_path):
    assert resolve().sync == "sync"
    saved = options_for_checkpoint(resolve("--sync", "Local:04"))
    assert saved["sync"] == "local:4"
    save_checkpoint(tmp_path / CHECKPOINT_NAME, {}, {"options": saved})
    assert resolve("--load-file", str(tmp_path)).sync == "local:4"
    assert resolve("--load-file", str(tmp_path), "--sync", "sync").sync == "sync"
    save_checkpoint(tmp_path / CHECKPOINT_NAME, {}, {"options": {**saved, "sync": "local:0"}})
    with pytest.raises(CheckpointError, match="saved option 'sync' has the bad value"):
        resolve("--load-file", str(tmp_path))


def test_a_saved_value_is_held_to_the_command_line_rules(tmp_path):
    saved = options_for_checkpoint(resolve())
    save_checkpoint(tmp_path / CHECKPOINT_NAME, {}, {"options": {**saved, "mini": 0}})
    with pytest.raises(CheckpointError, match="saved option 'mini' has the bad value 0"):
        resolve("--load-file", str(tmp_path))


def test_image_size_is_refused_where_no_photo_folder_reads_it(tmp_path):
    """--image-size sizes the photos of a class-folder tree; given for other data (or for
    make-data's batches, stored at make-data's --size) it would be ignored without a word."""
    with pytest.raises(UsageError, match="--image-size .* the 'digits' data has its own"):
        resolve("--image-size", "16")
    batches = tmp_path / "batches"
    (batches / "data_batch_0").mkdir(parents=True)
    (batches / "batches.meta").write_bytes(b"")
    with pytest.raises(UsageError, match="make-data's --size"):
        resolve("--data-provider", "image", "--data-path", str(batches), "--image-size", "16")
    photos = tmp_path / "photos"
    (photos / "cat").mkdir(parents=True)
    assert resolve("--data-provider", "image", "--data-path", str(photos),
                   "--image-size", "16").image_size == 16


def test_image_size_has_make_data_s_largest_size():
    """--image-size S does what make-data's --size S does, up to the same 4096."""
    with pytest.raises(UsageError, match="--image-size: at most 4096 pixels"):
        build_parser().parse_args(["--image-size", "4097"])
    assert build_parser().parse_args(["--image-size", "4096"]).image_size == 4096

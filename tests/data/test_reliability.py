"""Hostile data inputs: huge ranges, array bombs, bad batch metadata, files that are not files.

Each of these once ended in a traceback, a hang or gigabytes of memory; now
each is a :class:`DataError` naming the file (a clean one-line error, exit 1,
from the command line) before anything large is allocated.
"""

from __future__ import annotations

import os
import re
import pickle
import signal
import time

import numpy as np
import pytest

from convnet.data import parse_range
from convnet.data.safe_pickle import _multiarray
from convnet.data.ranges import MAX_BATCHES
from convnet.data.safe_pickle import load_pickle
from convnet.errors import DataError
from tests.support.cli import DUMMY, assert_clean_error, run_cli
from tests.data.test_cifar import cifar, make_cifar
from tests.data.test_convnet_batches import make_batches, provider


@pytest.mark.parametrize("text", ["1-100000000", "1-99999999999", "0-5,7-99999999999999999999"])
def test_huge_range_is_refused_before_it_is_expanded(text):
    began = time.perf_counter()
    with pytest.raises(DataError, match=f"names .* batches; a range may name at most {MAX_BATCHES}"):
        parse_range(text)
    # refused at once; expanding the smallest of these ranges takes about 7 s and 4 GB
    assert time.perf_counter() - began < 2.0


def test_largest_allowed_range_still_parses():
    assert len(parse_range(f"1-{MAX_BATCHES}")) == MAX_BATCHES


@pytest.mark.parametrize("text", ["１-５", "1-٣"])
def test_non_ascii_digits_are_not_batch_numbers(text):
    with pytest.raises(DataError, match="cannot read"):
        parse_range(text)


def test_huge_range_on_the_command_line_is_a_usage_error():
    proc = run_cli(*DUMMY[:-4], "--train-range", "1-99999999999", "--epochs", "1", timeout=60)
    assert_clean_error(proc, 2, "--train-range", "a range may name at most")


_reconstruct = _multiarray._reconstruct


class _Call:
    """Pickles as a call of ``fn(*args)``: what a hostile file can ask for."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


@pytest.mark.parametrize("bomb", [
    _Call(np.ndarray, (2_000_000, 3072), "B"),
    _Call(np.ndarray, 6_000_000_000),
    _Call(_reconstruct, np.ndarray, (2_000_000, 3072), np.dtype(np.uint8)),
], ids=["ndarray-2d", "ndarray-1d", "reconstruct"])
def test_array_larger_than_the_file_is_refused_before_allocation(tmp_path, bomb):
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({"data": bomb, "labels": [0]}, protocol=2))
    assert path.stat().st_size < 400
    with pytest.raises(DataError, match="more than the whole file"):
        load_pickle(path)


def test_honest_arrays_still_load(tmp_path):
    path = tmp_path / "batch"
    array = np.arange(3072 * 4, dtype=np.uint8).reshape(4, 3072)
    for protocol in (2, 4, 5):
        path.write_bytes(pickle.dumps({"data": array}, protocol=protocol))
        assert np.array_equal(load_pickle(path)["data"], array)


@pytest.mark.parametrize("num_vis", [-3, float("inf"), float("nan"), 192.7, True, "192", 0])
def test_bad_num_vis_is_a_clear_error(tmp_path, num_vis):
    make_batches(tmp_path)
    meta = pickle.loads((tmp_path / "batches.meta").read_bytes())
    meta["num_vis"] = num_vis
    (tmp_path / "batches.meta").write_bytes(pickle.dumps(meta))
    with pytest.raises(DataError, match="'num_vis' should be a positive whole number"):
        provider(tmp_path)


def test_num_vis_as_a_whole_float_or_one_element_array_is_accepted(tmp_path):
    make_batches(tmp_path)
    meta = pickle.loads((tmp_path / "batches.meta").read_bytes())
    for value in (192.0, np.array([192])):
        meta["num_vis"] = value
        (tmp_path / "batches.meta").write_bytes(pickle.dumps(meta))
        assert provider(tmp_path).image_shape == (3, 8, 8)


def test_ragged_labels_are_a_clear_error(tmp_path):
    make_cifar(tmp_path)
    batch = pickle.loads((tmp_path / "data_batch_1").read_bytes())
    batch["labels"] = [[1, 2], 3] + batch["labels"][2:]
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps(batch))
    with pytest.raises(DataError, match="data_batch_1: labels should be one class index per "
                                        "image, found a ragged list"):
        cifar(tmp_path).get_batch(1, train=False)


def _replace_with(path, kind):
    path.unlink()
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind, words", [
    ("folder", "is a folder, not a regular file"),
    ("fifo", "is a FIFO (named pipe), not a regular file"),
    ("zero", "is a link to /dev/zero, a character device, not a regular file"),
])
def test_batch_that_is_not_a_file_says_what_it_is(tmp_path, kind, words):
    make_cifar(tmp_path)
    _replace_with(tmp_path / "data_batch_2", kind)
    with pytest.raises(DataError, match=f"names batch 2 .*data_batch_2\\), which {re.escape(words)}"):
        cifar(tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_loading_a_fifo_or_device_returns_at_once(tmp_path, kind):
    path = tmp_path / "batch"
    path.write_bytes(b"")
    _replace_with(path, kind)
    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("load_pickle hung"))
    signal.alarm(10)
    try:
        with pytest.raises(DataError, match="cannot read it: it is"):
            load_pickle(path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)

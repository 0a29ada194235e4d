"""The restricted unpickler: real formats load, code never runs, damage is a DataError."""

from __future__ import annotations

import os
import pickle
import struct

import numpy as np
import pytest

from convnet.data.safe_pickle import load_dict, load_pickle
from convnet.errors import DataError


# -- Python 2 pickles, as the CIFAR-10 "python version" files were written -----
# Python 3 cannot write Python 2 ``str`` opcodes, so these few helpers emit the
# protocol-2 opcodes that Python 2's cPickle wrote for dicts of numpy arrays.

def _py2_str(text: str) -> bytes:
    raw = text.encode("latin1")
    return b"U" + bytes([len(raw)]) + raw


def _py2_int(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)


def _py2_array(array: np.ndarray) -> bytes:
    array = np.ascontiguousarray(array)
    dtype = array.dtype
    byteorder = "|" if dtype.itemsize == 1 else dtype.str[0]
    out = (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n" + _py2_int(0) + b"\x85"
           + _py2_str("b") + b"\x87R")
    out += b"(" + _py2_int(1) + b"(" + b"".join(_py2_int(d) for d in array.shape) + b"t"
    out += b"cnumpy\ndtype\n" + _py2_str(dtype.str[1:]) + _py2_int(0) + _py2_int(1) + b"\x87R"
    out += (b"(" + _py2_int(3) + _py2_str(byteorder) + b"NNN" + _py2_int(-1) + _py2_int(-1)
            + _py2_int(0) + b"tb")
    raw = array.tobytes()
    return out + b"\x89T" + struct.pack("<i", len(raw)) + raw + b"tb"


def _py2_value(value) -> bytes:
    if isinstance(value, np.ndarray):
        return _py2_array(value)
    if isinstance(value, str):
        return _py2_str(value)
    if isinstance(value, (int, np.integer)):
        return _py2_int(int(value))
    if isinstance(value, list):
        return b"](" + b"".join(_py2_value(v) for v in value) + b"e"
    raise TypeError(f"no Python 2 encoding for {type(value).__name__}")


def py2_dumps(obj: dict) -> bytes:
    """A dict of str keys -> arrays / str / int / lists, pickled as Python 2 did."""
    items = b"".join(_py2_str(k) + _py2_value(v) for k, v in obj.items())
    return b"\x80\x02}(" + items + b"u."


# -- tests ----------------------------------------------------------------------

class _RunsCode:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_runs_code_is_refused_and_does_not_run(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "evil"
    path.write_bytes(pickle.dumps({"data": _RunsCode(str(marker))}))
    with pytest.raises(DataError, match="refuses to load code") as info:
        load_pickle(path)
    assert str(path) in str(info.value) and "system" in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize("payload", [
    b"cbuiltins\neval\n(S'1+1'\ntR.",
    b"cnumpy\nload\n(S'x'\ntR.",
    b"c__builtin__\ngetattr\n(S'x'\nS'y'\ntR.",
])
def test_other_globals_are_refused(tmp_path, payload):
    path = tmp_path / "bad"
    path.write_bytes(payload)
    with pytest.raises(DataError, match="refuses to load code"):
        load_pickle(path)


def test_codecs_encode_is_limited_to_latin1(tmp_path):
    path = tmp_path / "bad"
    path.write_bytes(b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00xX\x04\x00\x00\x00zlib\x86R.")
    with pytest.raises(DataError, match="not a readable pickle"):
        load_pickle(path)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_python3_pickles_of_arrays_load_and_bytes_keys_become_str(tmp_path, protocol):
    data = np.arange(24, dtype=np.uint8).reshape(2, 12)
    path = tmp_path / "batch"
    path.write_bytes(pickle.dumps({b"data": data, b"labels": [1, 2], "mean": np.float32(0.5),
                                   "names": {"a", "b"}}, protocol=protocol))
    batch = load_dict(path, ("data", "labels"))
    np.testing.assert_array_equal(batch["data"], data)
    assert batch["labels"] == [1, 2] and batch["mean"] == np.float32(0.5)
    assert batch["names"] == {"a", "b"}


def test_python2_pickle_loads(tmp_path):
    data = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    mean = np.linspace(0, 1, 6, dtype=np.float32).reshape(6, 1)
    path = tmp_path / "data_batch_1"
    path.write_bytes(py2_dumps({"batch_label": "training batch 1 of 5", "data": data,
                                "labels": [3, 9], "mean": mean}))
    batch = load_dict(path, ("data", "labels"))
    np.testing.assert_array_equal(batch["data"], data)
    np.testing.assert_array_equal(batch["mean"], mean)
    assert batch["labels"] == [3, 9] and batch["batch_label"] == "training batch 1 of 5"


def test_truncated_pickle(tmp_path):
    path = tmp_path / "batch"
    full = pickle.dumps({"data": np.zeros((10, 3072), np.uint8), "labels": list(range(10))})
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(DataError, match="truncated") as info:
        load_pickle(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage" * 10, b"PK\x03\x04junk"])
def test_garbage_is_a_data_error(tmp_path, content):
    path = tmp_path / "batch"
    path.write_bytes(content)
    with pytest.raises(DataError, match=str(path)):
        load_pickle(path)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_pickle(tmp_path / "nope")
    with pytest.raises(DataError, match="cannot read"):
        load_pickle(tmp_path)


def test_wrong_structure(tmp_path):
    path = tmp_path / "batch"
    path.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(DataError, match="expected a pickled dict, found list"):
        load_dict(path, ("data",))
    path.write_bytes(pickle.dumps({"fine_labels": [1], "data": 0}))
    with pytest.raises(DataError, match=r"missing key\(s\) 'labels' \(found: data, fine_labels\)"):
        load_dict(path, ("data", "labels"))

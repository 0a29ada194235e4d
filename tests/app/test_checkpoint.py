"""Checkpoints: round trip, safe format, damaged files, failed writes."""

from __future__ import annotations

import errno
import json

import numpy as np
import pytest

import convnet.app.checkpoint as checkpoint
from convnet.app.checkpoint import load_checkpoint, save_checkpoint
from convnet.errors import CheckpointError


def sample():
    rng = np.random.default_rng(0)
    arrays = {"weights/conv1/W0": rng.standard_normal((4, 3, 5, 5)).astype(np.float32),
              "weights/conv1/B": np.zeros(4, np.float32),
              "momentum/conv1/W0": rng.standard_normal((4, 3, 5, 5)).astype(np.float32),
              "rng/state": np.arange(6, dtype=np.uint64), "scalar": np.float64(2.5),
              "file": np.array([1, 2]), "allow_pickle": np.array(True)}
    meta = {"epoch": 3, "batch": 2, "options": {"train_range": "1-5", "mini": 128},
            "costs": [np.float32(1.25), 0.5], "layers": ("conv1",), "nan": float("nan")}
    return arrays, meta


def test_round_trip(tmp_path):
    arrays, meta = sample()
    path = tmp_path / "sub" / "dir" / "ckpt.npz"
    save_checkpoint(path, arrays, meta)
    loaded, loaded_meta = load_checkpoint(path)
    assert set(loaded) == set(arrays)
    for key, array in arrays.items():
        np.testing.assert_array_equal(loaded[key], array)
        assert loaded[key].dtype == np.asarray(array).dtype
        assert loaded[key].shape == np.asarray(array).shape
    assert loaded_meta["epoch"] == 3 and loaded_meta["options"]["train_range"] == "1-5"
    assert loaded_meta["costs"] == [1.25, 0.5] and loaded_meta["layers"] == ["conv1"]
    assert np.isnan(loaded_meta["nan"])
    assert sorted(p.name for p in path.parent.iterdir()) == ["ckpt.npz"]


def test_is_a_plain_npz_without_pickles(tmp_path):
    arrays, meta = sample()
    path = tmp_path / "ckpt.npz"
    save_checkpoint(path, arrays, meta)
    with np.load(path, allow_pickle=False) as archive:
        header = json.loads(archive["__checkpoint__"].tobytes())
        np.testing.assert_array_equal(archive["weights/conv1/W0"], arrays["weights/conv1/W0"])
    assert header["format"] == "convnet-checkpoint" and header["version"] == 1
    assert header["meta"]["epoch"] == 3


def test_overwrite_replaces(tmp_path):
    path = tmp_path / "ckpt.npz"
    save_checkpoint(path, {"a": np.ones(3)}, {"v": 1})
    save_checkpoint(path, {"b": np.zeros(2)}, {"v": 2})
    arrays, meta = load_checkpoint(path)
    assert list(arrays) == ["b"] and meta == {"v": 2}


@pytest.mark.parametrize("arrays, meta, error", [
    ({"__checkpoint__": np.ones(1)}, {}, ValueError),
    ({"": np.ones(1)}, {}, ValueError),
    ({"x": np.array([object()])}, {}, ValueError),
    ({"x": np.ones(1)}, {"bad": object()}, TypeError),
    ({"x": np.ones(1)}, [1, 2], TypeError),
])
def test_programming_errors_are_not_written(tmp_path, arrays, meta, error):
    with pytest.raises(error):
        save_checkpoint(tmp_path / "ckpt.npz", arrays, meta)
    assert list(tmp_path.iterdir()) == []


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="ckpt.npz: checkpoint file does not exist"):
        load_checkpoint(tmp_path / "ckpt.npz")
    with pytest.raises(CheckpointError, match="is a folder, not a regular file"):
        load_checkpoint(tmp_path)


def test_not_a_checkpoint(tmp_path):
    random_bytes = tmp_path / "random.npz"
    random_bytes.write_bytes(np.random.default_rng(0).bytes(5000))
    with pytest.raises(CheckpointError, match=r"random.npz: not a checkpoint \(not an .npz"):
        load_checkpoint(random_bytes)
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        load_checkpoint(empty)
    plain = tmp_path / "plain.npz"
    np.savez(plain, weights=np.ones(3))
    with pytest.raises(CheckpointError, match="plain.npz: not a checkpoint .* without the"):
        load_checkpoint(plain)
    npy = tmp_path / "array.npy"
    np.save(npy, np.ones(3))
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        load_checkpoint(npy)


def test_foreign_or_newer_header(tmp_path):
    for header, message in [({"format": "other", "version": 1}, "unknown format marker"),
                            ({"format": "convnet-checkpoint", "version": 99, "arrays": [],
                              "meta": {}}, "version 99 is newer")]:
        path = tmp_path / "x.npz"
        np.savez(path, __checkpoint__=np.frombuffer(json.dumps(header).encode(), np.uint8))
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(path)
    path = tmp_path / "y.npz"
    np.savez(path, __checkpoint__=np.frombuffer(b"\xff{", np.uint8))
    with pytest.raises(CheckpointError, match="damaged checkpoint header"):
        load_checkpoint(path)


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.999])
def test_truncated(tmp_path, fraction):
    path = tmp_path / "ckpt.npz"
    save_checkpoint(path, *sample())
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(CheckpointError, match="ckpt.npz: truncated or corrupt"):
        load_checkpoint(path)


def test_flipped_byte_inside_an_array(tmp_path):
    path = tmp_path / "ckpt.npz"
    arrays, meta = sample()
    save_checkpoint(path, arrays, meta)
    data = bytearray(path.read_bytes())
    start = data.find(arrays["weights/conv1/W0"].tobytes())
    assert start > 0
    data[start + 100] ^= 0xFF  # array payload only; the zip CRC must catch it
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="truncated or corrupt .*CRC"):
        load_checkpoint(path)


def test_missing_member_is_damage(tmp_path):
    path = tmp_path / "ckpt.npz"
    header = {"format": "convnet-checkpoint", "version": 1, "arrays": ["a", "b"], "meta": {}}
    np.savez(path, __checkpoint__=np.frombuffer(json.dumps(header).encode(), np.uint8),
             a=np.ones(2))
    with pytest.raises(CheckpointError, match="array list does not match"):
        load_checkpoint(path)


def test_disk_full_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.npz"
    save_checkpoint(path, {"w": np.ones(3)}, {"step": 1})

    def full_disk(file, members):
        file.write(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "_write_npz", full_disk)
    with pytest.raises(CheckpointError, match="cannot write checkpoint .*ckpt.npz: No space left"):
        save_checkpoint(path, {"w": np.zeros(3)}, {"step": 2})
    arrays, meta = load_checkpoint(path)
    assert meta == {"step": 1} and arrays["w"].tolist() == [1, 1, 1]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]


def test_failed_rename_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.npz"
    save_checkpoint(path, {"w": np.ones(3)}, {"step": 1})

    def no_rename(source, target):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(checkpoint.os, "replace", no_rename)
    with pytest.raises(CheckpointError, match="Permission denied"):
        save_checkpoint(path, {"w": np.zeros(3)}, {"step": 2})
    monkeypatch.undo()
    assert load_checkpoint(path)[1] == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]


def test_unwritable_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CheckpointError, match="cannot write checkpoint"):
        save_checkpoint(blocker / "ckpt.npz", {"w": np.ones(1)}, {})


def test_save_removes_stale_temp_files_of_the_same_target(tmp_path):
    stale = tmp_path / ".ckpt.npz.123.abcd.tmp"
    stale.write_bytes(b"half written")
    other = tmp_path / ".other.npz.123.abcd.tmp"
    other.write_bytes(b"someone else's")
    save_checkpoint(tmp_path / "ckpt.npz", {"w": np.ones(1)}, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.npz.123.abcd.tmp", "ckpt.npz"]

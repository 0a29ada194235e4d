"""Saving and loading training state without pickle, atomically.

Format
------
A checkpoint is an ordinary ``.npz`` archive (uncompressed zip of ``.npy``
members) that ``numpy.load(path, allow_pickle=False)`` reads: one member per
array, named by its key (keys may contain ``/``, e.g. ``weights/conv1/W0``,
``momentum/conv1/W0``), plus one reserved member ``__checkpoint__``: a uint8
array holding UTF-8 JSON ``{"format": "convnet-checkpoint", "version": 1,
"arrays": [keys...], "meta": {...}}``.  ``meta`` goes through JSON, so tuples
come back as lists and dict keys as strings; numpy scalars and arrays in it are
stored as plain numbers and lists.  Arrays of Python objects are refused.

Atomicity
---------
:func:`save_checkpoint` writes through :func:`convnet.outputs.write_output`: a
temporary file ``.<name>.<pid>.<random>.tmp`` in the target's directory, fsynced
and renamed onto the target with ``os.replace`` (a link there is replaced, never
followed), then the directory fsynced.  A process killed at any moment
therefore leaves either the previous checkpoint or the new one, never a mix.
Its temporary file may remain; the next save to the same target deletes such
leftovers (one writer per target: a training run holds its save path's lock,
see :mod:`convnet.app.run.folder`).  A failed write (full disk,
unwritable directory) raises :class:`CheckpointError`, removes its temporary
file and leaves the previous checkpoint untouched.

Reading
-------
A checkpoint is untrusted input: :class:`CheckpointReader` reads the header
first and each array only on request, after checking its declared size (see
there), and :mod:`convnet.app.run.resume_state` asks only for the arrays the net
uses, as float32 of the exact shapes it needs.

Save directories
----------------
A training run keeps one checkpoint in its save path, :data:`CHECKPOINT_NAME`,
replaced at every save; ``--load-file`` names that file or the save path
(:func:`find_checkpoint`).
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from convnet.errors import CheckpointError
from convnet.filekind import not_a_regular_file
from convnet.outputs import remove_stale_temps, write_output

#: The checkpoint file inside a training run's save path.
CHECKPOINT_NAME = "checkpoint.npz"

FORMAT = "convnet-checkpoint"
VERSION = 1
HEADER_KEY = "__checkpoint__"
_ZIP_MAGIC = b"PK\x03\x04"
#: The JSON header is counters, options and the array names: far below this.
MAX_HEADER_BYTES = 16 * 2**20


def find_checkpoint(path: str | os.PathLike, option: str = "--load-file") -> Path:
    """The checkpoint file ``path`` names: the file itself, or the save path holding one
    (``option``: the option that named it, for the error)."""
    path = Path(path)
    if path.is_dir():
        inside = path / CHECKPOINT_NAME
        if not inside.exists():
            raise CheckpointError(f"{path}: a folder without a {CHECKPOINT_NAME}; {option} "
                                  f"takes a checkpoint file or the save path holding one")
        return inside
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"checkpoint meta cannot hold {type(value).__name__} values ({value!r})")


def _header(arrays: dict[str, np.ndarray], meta: dict) -> np.ndarray:
    if not isinstance(meta, dict):
        raise TypeError(f"checkpoint meta must be a dict, got {type(meta).__name__}")
    for key, array in arrays.items():
        if not isinstance(key, str) or not key or key == HEADER_KEY:
            raise ValueError(f"checkpoint array key {key!r} is empty, not a string or reserved")
        if np.asarray(array).dtype.hasobject:
            raise ValueError(f"checkpoint array {key!r} holds Python objects; only plain "
                             "numeric arrays can be saved")
    text = json.dumps({"format": FORMAT, "version": VERSION, "arrays": sorted(arrays),
                       "meta": meta}, default=_json_default)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def _write_npz(file: BinaryIO, members: dict[str, np.ndarray]) -> None:
    """Write ``members`` as an uncompressed .npz.  (Not ``np.savez``: its keyword
    arguments would clash with keys like ``file``.)"""
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, array in members.items():
            with archive.open(key + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)


def save_checkpoint(path: str | os.PathLike, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """Atomically write ``arrays`` and JSON-able ``meta`` to ``path`` (parents created)."""
    path = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(path)
    members = {HEADER_KEY: _header(arrays, meta), **arrays}
    try:
        os.makedirs(directory, exist_ok=True)
        remove_stale_temps(path)
        write_output(path, lambda file: _write_npz(file, members))
    except OSError as error:
        raise CheckpointError(f"cannot write checkpoint {path}: "
                              f"{error.strerror or error}") from error


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Read a checkpoint written by :func:`save_checkpoint`: ``(arrays, meta)``.

    Anything else (missing, truncated, corrupt, a plain .npz, a newer format)
    raises :class:`CheckpointError` naming the path and the reason.
    """
    with CheckpointReader(path) as reader:
        return {key: reader.read(key) for key in reader.keys}, reader.meta


class CheckpointReader:
    """An open checkpoint: its header at once, each array only when asked for.

    A checkpoint is untrusted input.  Nothing is decompressed before its size is
    known to be sane: the header member is bounded by :data:`MAX_HEADER_BYTES`,
    and an array's ``.npy`` header (shape and dtype) is read and checked against
    the zip directory's uncompressed size before any of its data, so a small
    archive cannot expand into gigabytes, and arrays nobody asks for (weights of
    layers the net does not have) are never decompressed at all.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        problem = not_a_regular_file(self.path)
        if problem == "does not exist":
            raise CheckpointError(f"{self.path}: checkpoint file does not exist")
        if problem is not None:
            raise CheckpointError(f"{self.path}: {problem}; a checkpoint is a .npz file")
        self._archive = None
        try:
            with open(self.path, "rb") as file:
                if file.read(4) != _ZIP_MAGIC:
                    raise CheckpointError(f"{self.path}: not a checkpoint (not an .npz archive)")
            self._archive = zipfile.ZipFile(self.path)
            self._members = self._member_table()
            if HEADER_KEY not in self._members:
                raise CheckpointError(f"{self.path}: not a checkpoint (an .npz without the "
                                      f"'{HEADER_KEY}' entry)")
            header = _read_header(self.path, self._read_header_member())
            self.keys = sorted(set(self._members) - {HEADER_KEY})
            if self.keys != sorted(set(header["arrays"])):
                raise CheckpointError(f"{self.path}: damaged checkpoint (its array list does "
                                      "not match its contents)")
            self.meta: dict = header["meta"]
        except BaseException as error:
            self.close()
            if isinstance(error, Exception) and not isinstance(error, CheckpointError):
                raise self._damaged(error) from None
            raise

    def __enter__(self) -> "CheckpointReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._archive is not None:
            self._archive.close()
            self._archive = None

    def _member_table(self) -> dict[str, zipfile.ZipInfo]:
        infos = self._archive.infolist()
        members = {info.filename.removesuffix(".npy"): info for info in infos}
        if len(members) != len(infos):
            raise CheckpointError(f"{self.path}: damaged checkpoint (an array is stored twice)")
        return members

    def _read_header_member(self) -> np.ndarray:
        info = self._members[HEADER_KEY]
        if info.file_size > MAX_HEADER_BYTES:
            raise CheckpointError(f"{self.path}: damaged checkpoint header (its "
                                  f"{info.file_size:,} bytes are more than a header holds)")
        header = self.read(HEADER_KEY)
        if header.dtype != np.uint8 or header.ndim != 1:
            raise CheckpointError(f"{self.path}: damaged checkpoint header (not UTF-8 bytes)")
        return header

    def shape(self, key: str) -> tuple[int, ...]:
        """The shape of array ``key``, from its ``.npy`` header alone."""
        info = self._members.get(key)
        if info is None:
            raise CheckpointError(f"{self.path}: the checkpoint has no '{key}'")
        try:
            with self._archive.open(info) as member:
                return tuple(int(d) for d in _npy_header(member)[0])
        except Exception as error:  # zipfile, numpy.lib.format and OSError all report damage
            raise self._damaged(error) from None

    def read(self, key: str, shape: tuple[int, ...] | None = None,
             dtype: np.dtype | None = None) -> np.ndarray:
        """Array ``key``; with ``shape``/``dtype``, refused unless it has exactly those."""
        info = self._members.get(key)
        if info is None:
            raise CheckpointError(f"{self.path}: the checkpoint has no '{key}'")
        try:
            with self._archive.open(info) as member:
                have_shape, fortran, have_dtype = _npy_header(member)
                self._check_member(key, info, member.tell(), have_shape, have_dtype,
                                   shape, dtype)
                data = bytearray(math.prod(have_shape) * have_dtype.itemsize)
                if member.readinto(data) != len(data) or member.read(1):
                    raise ValueError("its size does not match its header")
        except CheckpointError:
            raise
        except Exception as error:  # zipfile, numpy.lib.format and OSError all report damage
            raise self._damaged(error) from None
        return np.frombuffer(data, have_dtype).reshape(have_shape, order="F" if fortran else "C")

    def _check_member(self, key, info, header_bytes, have_shape, have_dtype, shape, dtype):
        if have_dtype.hasobject or have_dtype.kind not in "biuf" or \
                (dtype is not None and have_dtype != np.dtype(dtype)):
            wanted = f"{np.dtype(dtype).name} " if dtype is not None else "numeric "
            raise CheckpointError(f"{self.path}: damaged checkpoint: '{key}' holds "
                                  f"{have_dtype.name} values, not {wanted}ones")
        if shape is not None and tuple(have_shape) != tuple(shape):
            raise CheckpointError(f"{self.path}: does not fit this net: '{key}' has shape "
                                  f"{tuple(have_shape)}, the net needs {tuple(shape)}")
        if info.file_size != header_bytes + math.prod(have_shape) * have_dtype.itemsize:
            raise CheckpointError(f"{self.path}: damaged checkpoint: '{key}' is "
                                  f"{info.file_size:,} bytes unpacked, which does not match "
                                  f"its shape {tuple(have_shape)} and type {have_dtype.name}")

    def _damaged(self, error: Exception) -> CheckpointError:
        return CheckpointError(f"{self.path}: truncated or corrupt checkpoint "
                               f"({type(error).__name__}: {error})")


def _npy_header(member) -> tuple:
    """(shape, fortran order, dtype) from an ``.npy`` member's header, its data unread."""
    version = np.lib.format.read_magic(member)
    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                   else np.lib.format.read_array_header_2_0)
    return read_header(member)


def _read_header(path: str, raw: np.ndarray) -> dict:
    try:
        header = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise CheckpointError(f"{path}: damaged checkpoint header ({error})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a convnet checkpoint (unknown format marker)")
    version = header.get("version")
    if type(version) is not int or version < 1:
        raise CheckpointError(f"{path}: damaged checkpoint header (format version "
                              f"{short_repr(version)} is not a version number)")
    if version > VERSION:
        raise CheckpointError(f"{path}: checkpoint format version {version} is newer than "
                              f"this program reads ({VERSION}); upgrade to load it")
    arrays = header.get("arrays")
    if not isinstance(arrays, list) or not all(isinstance(k, str) for k in arrays) \
            or not isinstance(header.get("meta"), dict):
        raise CheckpointError(f"{path}: damaged checkpoint header (no array list or meta)")
    return header


def short_repr(value: Any) -> str:
    """A value from an untrusted file, for an error message: repr, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."

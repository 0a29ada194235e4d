"""Loading untrusted pickles (CIFAR-10 and cuda-convnet batch files).

A pickle can name any importable callable and have it called while loading,
so a downloaded batch file could run code.  :func:`load_pickle` resolves
globals from a fixed table instead of importing anything: plain containers
come from pickle opcodes and need no globals at all, and the table holds only
what numpy arrays, dtypes and scalars need to rebuild themselves.  Any other
global is refused with a :class:`DataError` before it is looked up.

The table, by what writes it:

* numpy arrays, protocols 0-4: ``numpy.core.multiarray._reconstruct``,
  ``numpy.ndarray``, ``numpy.dtype`` (``numpy._core`` under numpy 2), the
  first two only for arrays no larger than the file (:class:`_BoundedArrays`);
* numpy arrays, protocol 5: ``numpy.core.numeric._frombuffer``;
* numpy scalars: ``numpy.core.multiarray.scalar``;
* Python 3 bytes at protocol 2: ``_codecs.encode`` (latin-1 only), and
  ``bytes()`` for an empty string (no arguments only: ``bytes(N)`` would
  allocate N bytes), as lists of JPEG strings hold them;
* sets: ``builtins.set`` / ``frozenset`` (``__builtin__`` in Python 2 files).

Files written by Python 2 (the CIFAR-10 "python version") are read with
``encoding='latin1'``, which is what numpy needs to rebuild their arrays; their
dict keys then arrive as ``str``.  Files written by Python 3 may have ``bytes``
keys such as ``b'data'``: :func:`load_dict` turns those into ``str``.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import numpy as np

from convnet.errors import DataError
from convnet.filekind import not_a_regular_file

try:  # numpy >= 2 keeps the implementation in numpy._core
    from numpy._core import multiarray as _multiarray
    from numpy._core import numeric as _numeric
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core import multiarray as _multiarray
    from numpy.core import numeric as _numeric


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """Stand-in for ``_codecs.encode`` as protocol-2 pickles use it for bytes."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"unexpected _codecs.encode(..., {encoding!r})")
    return text.encode("latin1")


def _empty_bytes(*args) -> bytes:
    """Stand-in for ``bytes`` as protocol-2 pickles call it for ``b""``."""
    if args:
        raise pickle.UnpicklingError("bytes() with arguments (only the empty string is "
                                     "pickled that way)")
    return b""


_ALLOWED: dict[tuple[str, str], Any] = {("_codecs", "encode"): _latin1_encode,
                                         ("numpy", "dtype"): np.dtype}
for _core in ("numpy.core", "numpy._core"):
    _ALLOWED[(f"{_core}.multiarray", "scalar")] = _multiarray.scalar
    _ALLOWED[(f"{_core}.numeric", "_frombuffer")] = _numeric._frombuffer
for _builtins in ("builtins", "__builtin__"):
    _ALLOWED[(_builtins, "set")] = set
    _ALLOWED[(_builtins, "frozenset")] = frozenset
    _ALLOWED[(_builtins, "bytes")] = _empty_bytes


class _BoundedArrays:
    """The allow-list's array constructors, refusing arrays larger than the file.

    An array in an honest pickle gets its bytes from the file, so it can never
    be larger than the file; a 200-byte pickle that asks ``numpy.ndarray`` for
    a 2,000,000 x 3072 array (6 GB, uninitialised) is refused before anything
    is allocated.  ``ndarray`` stands for the class both where a pickle calls
    it and where it passes it to ``_reconstruct``.
    """

    def __init__(self, path: str, limit: int):
        self._path = path
        self._limit = limit

    def _check(self, shape, dtype) -> None:
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        if not all(isinstance(d, int) and d >= 0 for d in dims):
            raise DataError(f"{self._path}: the pickle declares an array of shape {shape!r}")
        size = np.dtype(dtype).itemsize
        for d in dims:
            size *= d
        if size > self._limit:
            raise DataError(f"{self._path}: the pickle declares an array of {size} bytes, "
                            f"more than the whole file ({self._limit} bytes) can hold")

    def ndarray(self, shape, dtype=float, *args, **kwargs) -> np.ndarray:
        self._check(shape, dtype)
        return np.ndarray(shape, dtype, *args, **kwargs)

    def reconstruct(self, cls, shape, dtype) -> np.ndarray:
        self._check(shape, dtype)
        return _multiarray._reconstruct(np.ndarray if cls == self.ndarray else cls, shape, dtype)


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, path: str, size: int):
        super().__init__(file, encoding="latin1")
        self._path = path
        arrays = _BoundedArrays(path, size)
        self._allowed = dict(_ALLOWED)
        self._allowed[("numpy", "ndarray")] = arrays.ndarray
        for core in ("numpy.core", "numpy._core"):
            self._allowed[(f"{core}.multiarray", "_reconstruct")] = arrays.reconstruct

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise DataError(f"{self._path}: refuses to load code: the pickle names "
                            f"'{module}.{name}', which is not an array or a plain container"
                            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise DataError(f"{self._path}: refuses to load code: the pickle uses a persistent id")


def load_pickle(path: str | os.PathLike) -> Any:
    """Unpickle ``path`` allowing only containers, scalars and numpy arrays.

    Every failure (missing, not a regular file, unreadable, truncated or
    corrupt file, refused global, an array larger than the file) raises
    :class:`DataError` naming the path.
    """
    path = os.fspath(path)
    what = not_a_regular_file(path)
    if what == "does not exist":
        raise DataError(f"{path}: file does not exist")
    if what is not None:
        raise DataError(f"{path}: cannot read it: it {what}")
    try:
        with open(path, "rb") as file:
            return _RestrictedUnpickler(file, path, os.fstat(file.fileno()).st_size).load()
    except DataError:
        raise
    except FileNotFoundError:
        raise DataError(f"{path}: file does not exist") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    except EOFError:
        raise DataError(f"{path}: pickle is truncated (file ends too early)") from None
    except Exception as exc:  # the unpickler raises many types on corrupt input
        raise DataError(f"{path}: not a readable pickle ({type(exc).__name__}: {exc})") from None


def load_dict(path: str | os.PathLike, required: tuple[str, ...]) -> dict[str, Any]:
    """Load a pickled dict, normalise ``bytes`` keys to ``str`` and check ``required`` keys."""
    obj = load_pickle(path)
    if not isinstance(obj, dict):
        raise DataError(f"{os.fspath(path)}: expected a pickled dict, found {type(obj).__name__}")
    result = {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}
    missing = [k for k in required if k not in result]
    if missing:
        found = ", ".join(sorted(str(k) for k in result)) or "nothing"
        raise DataError(f"{os.fspath(path)}: missing key(s) {', '.join(map(repr, missing))} "
                        f"(found: {found})")
    return result

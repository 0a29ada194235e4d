"""Writing one batch folder whole or not at all.

A batch is the folder ``data_batch_N`` of sub-batch pickles ``data_batch_N.0``,
``data_batch_N.1``, ... (the original reader loads every file in the folder), each a
dict ``{'data': [JPEG, ...], 'labels': [[label], ...]}`` pickled with protocol 2.

The JPEGs are pickled as the original's files hold them: as Python 2 byte strings
(the ``SHORT_BINSTRING`` / ``BINSTRING`` opcodes), which Python 2 loads as ``str``
and Python 3 as ``str`` under ``encoding='latin1'`` (turn each back with
``.encode('latin1')``) or as ``bytes`` under ``encoding='bytes'``.  Python 3's own
protocol-2 form of ``bytes`` (a call of ``_codecs.encode`` on a Unicode copy) would
make the files half as large again and many times slower to load.  The parts are written (each through
:func:`convnet.outputs.write_output`) into a hidden folder
``.data_batch_N.<pid>.<random>.tmp`` beside it, which is renamed to ``data_batch_N``
only when every part is there: a batch folder exists only complete, and a run killed
mid-batch leaves only a hidden folder, which the next run removes.  A folder being
replaced (``--overwrite``) is first renamed aside and removed after the new one is
in place.

Labels are lists of one label: the original's provider picks one label of each
image's list (``l[randint(len(l))]``) and cannot read plain ints, which its own
``make-data.py`` wrote.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import secrets
import shutil
import struct

from convnet.outputs import write_output

#: Protocol 2: the newest that the original (Python 2) can read.
PICKLE_PROTOCOL = 2


def batch_name(number: int) -> str:
    return f"data_batch_{number}"


def part_names(number: int, parts: int) -> list[str]:
    return [f"{batch_name(number)}.{k}" for k in range(parts)]


def sub_batches(jpegs: list[bytes], labels: list[int], sub_batch_size: int) -> list[dict]:
    """The sub-batch dicts of one batch."""
    return [{"data": jpegs[start:start + sub_batch_size],
             "labels": [[label] for label in labels[start:start + sub_batch_size]]}
            for start in range(0, len(jpegs), sub_batch_size)]


class _OriginalPickler(pickle._Pickler):
    """Python's own pickler at protocol 2, with ``bytes`` written as Python 2 ``str``."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_byte_string(self, data: bytes) -> None:
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<I", len(data)) + data)
        self.memoize(data)

    dispatch[bytes] = save_byte_string


def pickle_sub_batch(part: dict) -> bytes:
    """One sub-batch pickled as the original's make-data.py (Python 2) pickled it."""
    out = io.BytesIO()
    _OriginalPickler(out, protocol=PICKLE_PROTOCOL).dump(part)
    return out.getvalue()


def write_batch(target: str, number: int, parts: list[dict]) -> None:
    """Write ``parts`` as the folder ``data_batch_<number>`` of ``target``, atomically."""
    final = os.path.join(target, batch_name(number))
    temp = _hidden(target, number, "tmp")
    os.mkdir(temp)
    try:
        for name, part in zip(part_names(number, len(parts)), parts):
            write_output(os.path.join(temp, name), pickle_sub_batch(part))
        if os.path.lexists(final):
            aside = _hidden(target, number, "old")
            os.rename(final, aside)
            os.rename(temp, final)
            _remove_tree(aside)
        else:
            os.rename(temp, final)
    except BaseException:
        _remove_tree(temp)
        raise


def _hidden(target: str, number: int, kind: str) -> str:
    return os.path.join(target, f".{batch_name(number)}.{os.getpid()}.{secrets.token_hex(4)}.{kind}")


def _remove_tree(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def complete_parts(target: str, number: int) -> list[str] | None:
    """The part files of a complete batch folder (``data_batch_N.0`` to ``.K-1``, regular
    files, nothing else), or None when the batch is missing or not whole."""
    folder = os.path.join(target, batch_name(number))
    if os.path.islink(folder) or not os.path.isdir(folder):
        return None
    names = os.listdir(folder)
    expected = part_names(number, len(names))
    if not names or sorted(names) != sorted(expected):
        return None
    paths = [os.path.join(folder, name) for name in expected]
    return paths if all(os.path.isfile(p) and not os.path.islink(p) for p in paths) else None


_BATCH_FOLDER = re.compile(r"^data_batch_(\d+)$")


def remove_other_batches(target: str, keep: set[int]) -> None:
    """Remove the batch folders whose numbers are not in ``keep`` (an earlier run's
    batches that this run does not write)."""
    for name in os.listdir(target):
        match = _BATCH_FOLDER.match(name)
        if match and int(match.group(1)) not in keep:
            _remove_tree(os.path.join(target, name))


_LEFTOVER = re.compile(r"^\.data_batch_\d+\.\d+\.[0-9a-f]+\.(tmp|old)$")


def remove_leftovers(target: str) -> None:
    """Remove the hidden folders of batches that a killed run left half-written."""
    for name in os.listdir(target):
        if _LEFTOVER.match(name):
            _remove_tree(os.path.join(target, name))

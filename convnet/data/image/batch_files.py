"""Finding and reading the numbered JPEG batches of a folder.

``data_batch_N`` is either one pickle or, as ``make-data.py`` writes it, a
folder of sub-batch pickles ``data_batch_N.0``, ``data_batch_N.1``, ... read in
the order of their numbers and joined.  Each pickle is a dict with ``data``, a
list of JPEG byte strings (``str`` in files Python 2 wrote, read back as the
same bytes), and ``labels``, one entry per image: a label id or a list of
label ids.  Pickles are untrusted and go through the safe unpickler.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from convnet.data.safe_pickle import load_dict
from convnet.errors import DataError

_BATCH = re.compile(r"^data_batch_(\d+)$", re.ASCII)


@dataclass
class RawBatch:
    """A batch as stored: its JPEGs and labels, and which file holds which cases."""

    jpegs: list[bytes]
    labels: list
    parts: list[tuple[str, int]]  # (file, number of cases), in order

    def where(self, case: int) -> str:
        """``FILE, case K`` for the batch's case ``case`` (K counts within that file)."""
        for path, count in self.parts:
            if case < count:
                return f"{path}, case {case}"
            case -= count
        raise IndexError(case)


def sub_batch_files(path: str, batch_id: int) -> list[str]:
    """The sub-batch pickles of folder ``path`` (``data_batch_N.K``), in the order of K."""
    pattern = re.compile(rf"^data_batch_{batch_id}\.(\d+)$", re.ASCII)
    found = sorted((int(m.group(1)), m.group(0)) for m in map(pattern.match, os.listdir(path))
                   if m and os.path.isfile(os.path.join(path, m.group(0))))
    return [os.path.join(path, name) for _, name in found]


def available_batches(folder: str) -> list[int]:
    """Numbers of the batches in ``folder``: pickles, and folders holding sub-batches."""
    found = []
    for match in map(_BATCH.match, os.listdir(folder)):
        if not match:
            continue
        path = os.path.join(folder, match.group(0))
        batch_id = int(match.group(1))
        if os.path.isfile(path) or (os.path.isdir(path) and sub_batch_files(path, batch_id)):
            found.append(batch_id)
    return sorted(found)


def batch_files(path: str, batch_id: int) -> list[str]:
    return sub_batch_files(path, batch_id) if os.path.isdir(path) else [path]


def read_batch(path: str, batch_id: int) -> RawBatch:
    """Every sub-batch of batch ``batch_id`` (stored at ``path``), joined."""
    batch = RawBatch([], [], [])
    for file in batch_files(path, batch_id):
        part = load_dict(file, ("data", "labels"))
        jpegs, labels = _jpeg_strings(part["data"], file), part["labels"]
        if not isinstance(labels, (list, tuple)) or len(labels) != len(jpegs):
            found = f"{len(labels)} labels" if isinstance(labels, (list, tuple)) \
                else type(labels).__name__
            raise DataError(f"{file}: 'labels' should be a list of one label (or one list of "
                            f"labels) per image, for {len(jpegs)} images; found {found}")
        batch.jpegs.extend(jpegs)
        batch.labels.extend(labels)
        batch.parts.append((file, len(jpegs)))
    return batch


def count_cases(path: str, batch_id: int) -> int:
    return sum(len(_jpeg_strings(load_dict(f, ("data",))["data"], f))
               for f in batch_files(path, batch_id))


def _jpeg_strings(data, file: str) -> list[bytes]:
    """``data`` as a list of bytes; Python 2's ``str`` arrives as latin-1 text."""
    if not isinstance(data, (list, tuple)):
        raise DataError(f"{file}: 'data' should be a list of JPEG byte strings, found "
                        f"{type(data).__name__}")
    try:
        out = [s.encode("latin1") if isinstance(s, str) else s for s in data]
    except UnicodeEncodeError:
        raise DataError(f"{file}: 'data' holds text that is not JPEG bytes") from None
    bad = next((i for i, s in enumerate(out) if not isinstance(s, bytes)), None)
    if bad is not None:
        raise DataError(f"{file}, case {bad}: 'data' should hold JPEG byte strings, found "
                        f"{type(out[bad]).__name__}")
    return out

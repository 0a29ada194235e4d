"""Labels of a JPEG batch: a label id per image, or a list of label ids per image.

cuda-convnet2's ImageNet provider served two label columns: column 1 one label
per case (for a case with several labels, one of them drawn at random) and
column 2 the cases x classes matrix with a 1 at every label of a case (what a
``cost.bce``-style head reads).  :class:`LabelSets` holds a batch's labels as
one flat array of ids with a start and a count per case, so both columns are
built by array operations.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from convnet.errors import DataError


@dataclass(frozen=True)
class LabelSets:
    ids: np.ndarray  # int64, every case's label ids one after another
    starts: np.ndarray  # int64 (N,): where each case's ids start in ``ids``
    counts: np.ndarray  # int64 (N,): how many ids each case has (>= 1)
    lists: bool  # whether the batch stored lists of ids (then column 2 is served)

    def pick(self, rng: np.random.Generator | None) -> np.ndarray:
        """One label per case, float32 ``(N,)``: a uniformly random one of each case's ids
        (``rng`` may be None when every case has exactly one)."""
        offsets = 0 if rng is None or (self.counts == 1).all() else rng.integers(0, self.counts)
        return self.ids[self.starts + offsets].astype(np.float32)

    def matrix(self, num_classes: int) -> np.ndarray:
        """The cases x classes float32 matrix: 1 at each of a case's labels."""
        out = np.zeros((len(self.counts), num_classes), np.float32)
        out[np.repeat(np.arange(len(self.counts)), self.counts), self.ids] = 1.0
        return out

    def subset(self, keep: np.ndarray) -> "LabelSets":
        """The label sets of the cases where ``keep`` is True, in order."""
        counts = self.counts[keep]
        picked = np.repeat(keep, self.counts)
        return LabelSets(self.ids[picked], np.cumsum(counts) - counts, counts, self.lists)


def label_sets(labels: list, offset: int, num_classes: int, where) -> LabelSets:
    """Check and convert stored labels (ids, or lists of ids, plus ``offset``).

    ``where(case)`` names a case for errors ("FILE, case K").
    """
    lists = any(isinstance(label, (list, tuple)) for label in labels)
    if lists:
        cases = [label if isinstance(label, (list, tuple)) else (label,) for label in labels]
        counts = np.fromiter(map(len, cases), np.int64, len(cases))
        flat = list(itertools.chain.from_iterable(cases))
    else:
        counts = np.ones(len(labels), np.int64)
        flat = labels
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise DataError(f"{where(int(empty[0]))}: the image has an empty list of labels")
    try:
        ids = np.asarray(flat)
    except (TypeError, ValueError):
        ids = np.asarray(flat, dtype=object)
    starts = np.cumsum(counts) - counts
    if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer) or ids.size == 0):
        bad = _first_not_an_id(flat)
        raise DataError(f"{where(_case_of(bad, starts))}: label {flat[bad]!r:.40} is not a "
                        "label id (a whole number) or a list of them")
    ids = ids.astype(np.int64) + offset
    out = np.flatnonzero((ids < 0) | (ids >= num_classes))
    if out.size:
        first = int(out[0])
        shifted = f" ({ids[first] - offset} + label_offset {offset})" if offset else ""
        raise DataError(f"{where(_case_of(first, starts))}: label {ids[first]}{shifted} is not "
                        f"a class index in 0..{num_classes - 1} (batches.meta has "
                        f"{num_classes} label_names)")
    return LabelSets(ids, starts, counts, lists)


def _first_not_an_id(flat: list) -> int:
    return next((i for i, v in enumerate(flat)
                 if isinstance(v, bool) or not isinstance(v, (int, np.integer))), 0)


def _case_of(index: int, starts: np.ndarray) -> int:
    """The case whose ids hold flat position ``index``."""
    return int(np.searchsorted(starts, index, side="right") - 1)

"""Label sets: the random label column, the label matrix and leaving cases out agree."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from convnet.data.image.labels import label_sets

CLASSES = 6
cases = st.lists(st.one_of(st.integers(0, CLASSES - 1),
                           st.lists(st.integers(0, CLASSES - 1), min_size=1, max_size=4,
                                    unique=True)), min_size=1, max_size=20)


def as_lists(labels):
    return [label if isinstance(label, list) else [label] for label in labels]


@settings(max_examples=60, deadline=None)
@given(cases, st.integers(0, 2 ** 32 - 1), st.data())
def test_picks_matrix_and_subsets_follow_each_cases_labels(labels, seed, data):
    sets = label_sets(labels, 0, CLASSES, where=str)
    lists = as_lists(labels)
    picked = sets.pick(np.random.default_rng(seed))
    assert all(int(p) in ids for p, ids in zip(picked, lists))
    matrix = sets.matrix(CLASSES)
    for row, ids in zip(matrix, lists):
        assert sorted(np.flatnonzero(row)) == sorted(ids)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(labels),
                                       max_size=len(labels))))
    kept = sets.subset(keep)
    np.testing.assert_array_equal(kept.matrix(CLASSES), matrix[keep])
    assert len(kept.starts) == len(kept.counts) == keep.sum()
    if keep.any():
        picks = kept.pick(np.random.default_rng(seed))
        assert all(int(p) in ids for p, ids in zip(picks, np.array(lists, object)[keep]))
    assert kept.lists == sets.lists == any(isinstance(l, list) for l in labels)


def test_offset_shifts_every_id():
    sets = label_sets([[3, 4], 5], -3, 3, where=str)
    np.testing.assert_array_equal(sets.matrix(3), [[1, 1, 0], [0, 0, 1]])

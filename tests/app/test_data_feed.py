"""The training loop's data feed: one loader for the whole run, staged minibatches.

What is checked: a run of three epochs makes one training prefetcher (so the first
batch of every epoch after the first is loaded ahead like the others), over every
(epoch, batch) of the run in order, at ``--prefetch``'s depth; each batch's next
minibatch is staged before its step; and how far ahead the batches are loaded
changes nothing in what the run trains (the same checkpoint, bitwise).
"""

from __future__ import annotations

import numpy as np

from convnet.app.command_line.main import main
from convnet.app.run import training
from convnet.data import BatchPrefetcher
from convnet.runtime.step.executor import Executor
from tests.support.cli import DUMMY, SINGLE_DEF, SINGLE_PARAMS

RUN = [*DUMMY, "--layer-def", str(SINGLE_DEF), "--layer-params", str(SINGLE_PARAMS),
       "--inner-size", "6", "--mini", "32", "--dummy-cases", "96"]


def test_one_loader_feeds_every_epoch_and_the_next_minibatch_is_staged(tmp_path, monkeypatch):
    made, staged = [], []

    class Recorded(BatchPrefetcher):
        def __init__(self, provider, batch_ids, train, *args, **kwargs):
            made.append((list(batch_ids), train, kwargs.get("depth")))
            super().__init__(provider, batch_ids, train, *args, **kwargs)

    real_stage = Executor.stage
    monkeypatch.setattr(training, "BatchPrefetcher", Recorded)
    monkeypatch.setattr(Executor, "stage",
                        lambda self, batch: staged.append(len(batch[0])) or real_stage(self,
                                                                                       batch))
    assert main([*RUN, "--epochs", "3", "--prefetch", "3",
                 "--save-path", str(tmp_path / "run")]) == 0
    training_loaders = [m for m in made if m[1]]
    assert training_loaders == [([(e, b) for e in (1, 2, 3) for b in (1, 2)], True, 3)]
    assert staged == [32, 32] * 6  # minibatches 2 and 3 of each of the six batches


def test_how_far_ahead_batches_load_changes_nothing_trained(tmp_path):
    for depth in ("1", "4"):
        assert main([*RUN, "--epochs", "2", "--color-noise", "0.2", "--prefetch", depth,
                     "--save-path", str(tmp_path / depth)]) == 0
    one, four = (np.load(tmp_path / d / "checkpoint.npz") for d in ("1", "4"))
    assert sorted(one.files) == sorted(four.files)
    arrays = [k for k in one.files if k != "__checkpoint__"]  # the meta holds run times
    assert arrays and all(np.array_equal(one[k], four[k]) for k in arrays)

"""The simulator's column of --compare when a net cannot be profiled at the minibatch
compared: that config's prediction is left out with a warning, not the comparison."""

from __future__ import annotations

from types import SimpleNamespace

from convnet.app.comparison import prediction
from convnet.app.comparison.prediction import predict_steps
from convnet.app.prediction.simulation import TooFewCasesToProfile
from convnet.config import load_net
from convnet.plan.planner import make_plan
from tests.support.cli import SINGLE_DEF, SINGLE_PARAMS

REFUSAL = ("--compare profiles this net as it is placed (it cannot run on one device), in 4 "
           "shards, at 4 cases and half of it, 2, which has fewer cases than shards: give "
           "--mini 8 or more")


class _Refusing:
    """A profiler for a net that cannot be profiled at this size (the 4-GPU data-model
    config at --mini 4, whose every config had trained and been timed when the error
    ended the comparison)."""

    def __init__(self, *args, **kwargs):
        raise TooFewCasesToProfile(REFUSAL)


def test_a_net_that_cannot_be_profiled_loses_its_prediction_not_the_comparison(monkeypatch):
    monkeypatch.setattr(prediction, "NetProfiler", _Refusing)
    net = load_net(SINGLE_DEF, SINGLE_PARAMS, data_dims={0: (1, 8, 8), 1: (1,)}, num_classes=10)
    results = [SimpleNamespace(name=name, sync="sync", failure=None, predicted_seconds=None)
               for name in ("a", "b")]
    notes = predict_steps(results, [None, None], [(net, make_plan(net, (0,), 64))] * 2, [])
    assert [r.predicted_seconds for r in results] == [None, None]  # n/a in the table
    assert notes == [f"a has no predicted ms: {REFUSAL}"]  # the net's one profile, once

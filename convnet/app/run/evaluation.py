"""Testing a net as it stands: the test batches' cost and error, and a layer's outputs.

The trainer tests at every test interval, ``--test-only`` once, and a trained net in
use (:mod:`convnet.app.using`) reads its class probabilities through
:meth:`Evaluator.features`.  With ``--multiview-test`` every test case is scored on the
softmax averaged over its views.
"""

from __future__ import annotations

import numpy as np

from convnet.app.run.log import TestResult
from convnet.app.run.minibatches import minibatches
from convnet.app.run.signals import raise_if_stopped
from convnet.config.model import NetConfig
from convnet.data import BatchPrefetcher
from convnet.data.host_buffers import HostBuffers
from convnet.errors import DataError
from convnet.plan.ops import Plan


class Evaluator:
    """Test-mode passes of ``executor`` (running ``plan`` of ``net``) over ``provider``'s
    batches, cut into minibatches of ``mini`` cases; ``cost_layer`` is the cost
    reported, ``test_views`` the views per test case."""

    def __init__(self, mini: int, provider, net: NetConfig, plan: Plan, executor,
                 cost_layer: str, test_views: int, buffers: HostBuffers | None = None):
        self.mini, self.provider, self.net, self.plan = mini, provider, net, plan
        self.executor, self.cost_layer, self.test_views = executor, cost_layer, test_views
        self.buffers = buffers  # what the test batches are loaded into

    def test(self) -> TestResult:
        """The test batches' mean cost and error."""
        if not self.provider.test_batches:
            raise DataError("the test range selects no batch")
        cost = error = 0.0
        cases = 0
        views = self.test_views > 1
        with BatchPrefetcher(self.provider, self.provider.test_batches, train=False,
                             views=views, stored=not views, buffers=self.buffers) as loader:
            for _, batch in loader:
                raise_if_stopped()
                batch_cost, batch_error, n = (self._test_views(batch) if views
                                              else self._test_batch(batch))
                cost += batch_cost
                error += batch_error
                cases += n
        return TestResult(cost / max(cases, 1), error / max(cases, 1), cases)

    def _test_batch(self, batch):
        cost = error = 0.0
        for part in minibatches(batch, self.mini, self.plan.num_pieces):
            result = self.executor.evaluate(part)
            costs = result.costs.get(self.cost_layer, {})
            cost += costs.get("cost", 0.0) * result.num_cases
            error += costs.get("error", 0.0) * result.num_cases
        return cost, error, len(batch[0])

    def _test_views(self, batch):
        """Average the softmax over the views, then score (multiview testing)."""
        views, labels, others = batch[0], batch[1], batch[2:]
        probs_layer = self.net[self.cost_layer].inputs[1]
        total = 0
        for v in range(views.shape[0]):
            total = total + self.features([views[v], labels, *others], probs_layer)
        probs = total / views.shape[0]
        truth = labels.reshape(-1).astype(np.int64)
        picked = np.maximum(probs[np.arange(len(truth)), truth], 1e-30)
        cost = float(-np.log(picked).sum())
        error = float((probs.argmax(axis=1) != truth).sum())
        return cost, error, len(truth)

    def features(self, batch, layer: str) -> np.ndarray:
        """``layer``'s test-mode outputs for ``batch``, one row per case."""
        parts = [self.executor.features(part, layer)
                 for part in minibatches(batch, self.mini, self.plan.num_pieces)]
        return np.concatenate(parts).reshape(len(batch[0]), -1)

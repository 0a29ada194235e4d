"""BatchPrefetcher: order, error propagation, no hangs, early close, bounded memory."""

from __future__ import annotations

import time

import numpy as np
import pytest

from convnet.data import BatchPrefetcher, DataOptions, make_provider
from convnet.errors import DataError
from tests.support.threads import within


class FakeProvider:
    def __init__(self, fail_at=None, delay=0.0):
        self.fail_at, self.delay, self.loaded = fail_at, delay, []

    def get_batch(self, batch_id, train, epoch):
        time.sleep(self.delay)
        if batch_id == self.fail_at:
            raise DataError(f"batch {batch_id} is broken")
        self.loaded.append(batch_id)
        return [np.full((2, 1), batch_id, np.float32), np.zeros((2, 1), np.float32)]

    def get_test_views(self, batch_id):
        return [np.full((3, 2, 1), batch_id, np.float32), np.zeros((2, 1), np.float32)]


def test_yields_the_provider_batches_in_order():
    provider = make_provider("dummy", options=DataOptions(cases_per_batch=16, inner_size=28))
    got = within(10, lambda: list(BatchPrefetcher(provider, [3, 1, 2], train=True, epoch=4)))
    assert [batch_id for batch_id, _ in got] == [3, 1, 2]
    for batch_id, (images, labels) in got:
        expected = provider.get_batch(batch_id, train=True, epoch=4)
        np.testing.assert_array_equal(images, expected[0])
        np.testing.assert_array_equal(labels, expected[1])


def test_views_mode():
    got = within(5, lambda: list(BatchPrefetcher(FakeProvider(), [7], train=False, views=True)))
    assert got[0][0] == 7 and got[0][1][0].shape == (3, 2, 1)


def test_loader_exception_reaches_the_consumer():
    prefetcher = BatchPrefetcher(FakeProvider(fail_at=2), [1, 2, 3], train=True, epoch=0)
    assert within(5, lambda: next(prefetcher))[0] == 1
    with pytest.raises(DataError, match="batch 2 is broken"):
        within(5, lambda: next(prefetcher))
    with pytest.raises(StopIteration):
        within(5, lambda: next(prefetcher))


def test_silently_dead_loader_does_not_hang(monkeypatch):
    monkeypatch.setattr(BatchPrefetcher, "_run", lambda self: None)
    prefetcher = BatchPrefetcher(FakeProvider(), [1, 2], train=True, epoch=0)
    with pytest.raises(DataError, match="stopped without delivering"):
        within(5, lambda: next(prefetcher))


def test_close_early_stops_loading():
    provider = FakeProvider(delay=0.02)
    prefetcher = BatchPrefetcher(provider, range(1, 200), train=True, epoch=0)
    within(5, lambda: next(prefetcher))
    within(5, prefetcher.close)
    loaded = len(provider.loaded)
    time.sleep(0.1)
    assert len(provider.loaded) == loaded < 10
    with pytest.raises(StopIteration):
        next(prefetcher)


def test_queue_is_bounded_and_context_manager_closes():
    provider = FakeProvider()
    with BatchPrefetcher(provider, range(1, 100), train=True, epoch=0, depth=1) as prefetcher:
        time.sleep(0.2)
        # one batch queued, one finished and waiting to be queued
        assert len(provider.loaded) <= 2
        within(5, lambda: next(prefetcher))
    assert not prefetcher._thread.is_alive()


def test_wait_seconds_counts_the_time_the_consumer_waited_not_the_time_it_worked():
    """Loading takes 0.1 s a batch; a consumer that works 0.3 s per batch waits only for
    the first, one that works not at all waits for each."""
    slow_consumer = BatchPrefetcher(FakeProvider(delay=0.1), range(4), train=True)
    for _ in slow_consumer:
        time.sleep(0.3)
    fast_consumer = BatchPrefetcher(FakeProvider(delay=0.1), range(4), train=True)
    list(fast_consumer)
    assert 0.08 < slow_consumer.wait_seconds < 0.3
    assert fast_consumer.wait_seconds > 0.35

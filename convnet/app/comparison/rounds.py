"""Timing the ``--compare`` configs in interleaved rounds: A B C, A B C, ...

Each config's training run is timed by its own log, but one config after the
other: a shared machine that slows down for a minute slows only the configs
trained in that minute, and the ranking changes from run to run.  After
training, the trained executors are therefore timed again side by side: in
each round, every config in turn runs one untimed step (its caches and
threads were just used by another config's step) and then
:data:`STEPS_PER_ROUND` timed steps on the same minibatch, drained (an
asynchronous run's queued shards finished), giving that round's seconds per
step.  A slow phase of the machine then falls into the same rounds of every
config, and :mod:`convnet.app.comparison.noise` compares the configs round by
round.  Each config's figure is its median over the rounds.
"""

from __future__ import annotations

import time

#: Rounds by default (``--rounds``): with 20 the digits example's verdict came out the
#: same in three runs in a row on this 2-core machine at load average 3-4, with 10 it
#: did not at load 5 (docs/BENCHMARKS.md).
DEFAULT_ROUNDS = 20

#: Timed steps of each config per round, after one untimed step.
STEPS_PER_ROUND = 3


def time_in_rounds(executors: list, batch: list, rounds: int,
                   steps: int = STEPS_PER_ROUND, on_round=None) -> list[list[float]]:
    """Seconds per step of every executor in each of ``rounds`` rounds (one list per
    executor, in their order); ``on_round(r)`` is called after round r (1-based)."""
    samples: list[list[float]] = [[] for _ in executors]
    for r in range(1, rounds + 1):
        for executor, seconds in zip(executors, samples):
            executor.step(batch, progress=1.0)
            executor.drain()
            start = time.perf_counter()
            for _ in range(steps):
                executor.step(batch, progress=1.0)
            executor.drain()
            seconds.append((time.perf_counter() - start) / steps)
        if on_round is not None:
            on_round(r)
    return samples

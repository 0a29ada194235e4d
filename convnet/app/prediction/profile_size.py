"""How large a minibatch ``--simulate`` and ``--auto-place`` profile, and how they say
what the profile is doing.

A prediction at ``--mini M`` does not need a profile at M: every operation's
time is fitted to a straight line in the cases of its shard
(:class:`convnet.simulate.costs.OpCost`), so a profile at S and S/2 cases is
extrapolated to M (the benchmark's ``--profile-mini``; docs/SIMULATE.md says how
far off that is).  ``--profile-mini S`` sets S; without it S is chosen so that
one profiled step takes about :data:`STEP_BUDGET_SECONDS`: the faster of two steps
of a probe minibatch (:data:`PROBE_CASES`) is timed (on the host in CPU time of the
thread that runs it, so that other work on the machine does not shrink the choice), and
S is the largest power of two up to M whose step, at the probe's time per case,
fits the budget.  The ImageNet
nets at 224x224 are then profiled at a few images instead of 128 (about 3 s per
8 images on a 2-core machine), the digits net at its whole minibatch.

The profile then runs in rounds (:class:`~convnet.app.prediction.simulation.NetProfiler`)
until :data:`PROFILE_BUDGET_SECONDS` are spent (at least one round, at most
:data:`MAX_ROUNDS`): the medians over more rounds move less from run to run, and a
large net still answers in seconds.  Each round and the choice of S is one line on
stderr, so a terminal or a pipe shows the profile moving.
"""

from __future__ import annotations

import sys
import time

#: Seconds one profiled step (the larger size) should take, for the automatic size.
STEP_BUDGET_SECONDS = 0.25

#: Cases of the probe step that the automatic size is computed from.
PROBE_CASES = 4

#: Seconds of profile rounds: rounds start until these are spent.
PROFILE_BUDGET_SECONDS = 12.0

#: The most rounds a profile takes.
MAX_ROUNDS = 5

#: The data-parallel block of a round (steps not counted, counted) for a net whose
#: step at the probe's size is already over the step budget: the ImageNet nets at
#: 224x224 (1-1.5 s a step) would spend most of the budget on the usual 3 + 4.
LARGE_NET_CONTENTION_STEPS = (1, 2)


def automatic_size(mini: int, probe_cases: int, probe_seconds: float, least: int) -> int:
    """The largest power of two up to ``mini`` (at least ``least``, and ``mini`` itself
    when its step fits) whose step fits :data:`STEP_BUDGET_SECONDS` at the probe's time
    per case (``probe_seconds`` for ``probe_cases``; an overestimate, since the probe's
    fixed costs are counted per case too)."""
    per_case = probe_seconds / max(probe_cases, 1)
    fits = int(STEP_BUDGET_SECONDS / per_case) if per_case > 0 else mini
    if fits >= mini:
        return mini
    size = 1
    while size * 2 <= fits:
        size *= 2
    return max(min(size, mini), min(least, mini))


class Progress:
    """Lines on stderr while a profile runs (``quiet`` for callers that print their own)."""

    def __init__(self, what: str, quiet: bool = False, stream=None):
        self._what, self._quiet = what, quiet
        self._stream = stream or sys.stderr
        self._start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def say(self, text: str) -> None:
        if not self._quiet:
            print(f"profiling {self._what}: {text} ({self.elapsed:.1f} s)", file=self._stream,
                  flush=True)

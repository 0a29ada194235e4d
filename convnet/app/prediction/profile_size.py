"""How large a minibatch ``--simulate`` and ``--auto-place`` profile, and how they say
what the profile is doing.

A prediction at ``--mini M`` does not need a profile at M: every operation's
time is fitted to a straight line in the cases of its shard
(:class:`convnet.simulate.costs.OpCost`), so a profile at S and S/2 cases is
extrapolated to M (docs/SIMULATE.md says how far off that is).  ``--profile-mini
S`` sets S; without it S is the largest power of two up to M whose forward pass
holds at most :data:`PROFILE_MULTIPLY_ADDS` multiply-adds, counted from the config
(:func:`convnet.plan.layer_cuts.net_work`).  The size is a function of the command
alone, so the same command profiles the same sizes every time: a size chosen from a
timed probe step changed with the machine's load, and two runs of one command then
extrapolated from different sizes.  The ImageNet nets at 224x224 (715 M
multiply-adds a case) are profiled at 16 images, the CIFAR and digits nets at their
whole minibatch of 128.

The profile then runs in rounds (:class:`~convnet.app.prediction.simulation.NetProfiler`)
while the next round, as long as the last one, still fits :data:`PROFILE_BUDGET_SECONDS`
(at least one round, at most :data:`MAX_ROUNDS`): the medians over more rounds move
less from run to run, and a large net still answers in seconds.  The choice of S and
each round are a line on stderr, so a terminal or a pipe shows the profile moving.
"""

from __future__ import annotations

import sys
import time

#: Multiply-adds of the forward pass of the larger profiled minibatch, for the
#: automatic size (16 images of the ImageNet nets at 224x224: about a second a step on
#: two cores).
PROFILE_MULTIPLY_ADDS = 12e9

#: The fewest cases per device a profile takes (a net profiled as placed is cut into
#: a shard per device).
LEAST_CASES_PER_DEVICE = 4

#: Seconds of profile rounds: a round starts while it is expected to end within them.
PROFILE_BUDGET_SECONDS = 20.0

#: The most rounds a profile takes: a small net's steps are a few milliseconds of
#: small operations, whose medians move with the machine's phases; with 5 rounds, two
#: profiles of the digits net, one of them beside two busy processes, lay up to 1.22
#: apart, with 15 (about 3 s) up to 1.16.
MAX_ROUNDS = 15

#: The data-parallel block of a round (steps not counted, counted) for a net whose
#: whole minibatch is over the multiply-add budget: the ImageNet nets at 224x224
#: (1 s a step at the profile's size) would spend most of the budget on the usual 3 + 4.
LARGE_NET_CONTENTION_STEPS = (1, 2)


def automatic_size(mini: int, multiply_adds_per_case: int, least: int) -> int:
    """The largest power of two up to ``mini`` (at least ``least``, and ``mini`` itself
    when it fits) whose forward pass holds at most :data:`PROFILE_MULTIPLY_ADDS`."""
    if mini * multiply_adds_per_case <= PROFILE_MULTIPLY_ADDS:
        return mini
    size = 1
    while (size * 2) * multiply_adds_per_case <= PROFILE_MULTIPLY_ADDS:
        size *= 2
    return max(min(size, mini), min(least, mini))


def is_large(mini: int, multiply_adds_per_case: int) -> bool:
    """Whether the whole minibatch is over the profile's multiply-add budget."""
    return mini * multiply_adds_per_case > PROFILE_MULTIPLY_ADDS


def another_round(rounds: int, elapsed: float, last_round: float,
                  budget: float = PROFILE_BUDGET_SECONDS) -> bool:
    """Whether a profile that has taken ``rounds`` rounds in ``elapsed`` seconds, the
    last in ``last_round``, takes one more: always a first, then while one more as
    long as the last ends within ``budget`` seconds."""
    if rounds == 0:
        return True
    return rounds < MAX_ROUNDS and elapsed + last_round <= budget


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

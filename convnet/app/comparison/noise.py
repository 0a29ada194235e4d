"""Whether one ``--compare`` config is faster than another beyond the machine's noise.

The configs are timed in interleaved rounds (:mod:`convnet.app.comparison.rounds`):
round r gives each config one figure, its seconds per step in that round.  A
shared machine's speed drifts in phases of seconds, and interleaving puts every
config into every phase, so the comparison is *paired*: for the fastest config X
(lowest median) and the runner-up Y, each round gives a ratio
``q_r = Y_r / X_r`` in which a slow phase slows both sides.

The verdict reads the median of those ratios and its distribution-free
confidence interval (the sign test's: the k-th smallest and k-th largest of the
R ratios, k the largest order whose interval covers the median with at least
:data:`CONFIDENCE`, from the binomial distribution of how many ratios fall
below the median).  The winner is *clear* when the whole interval lies above 1;
otherwise there is no clear winner, and the verdict gives the interval and the
ratios' *spread*: half their interquartile range, as a share of their median, the
same measure as each config's spread over its own rounds (:func:`spread`, the
table's column), so that the two can be read side by side (the ratios' is the
smaller where a slow round slows every config).  The rule needs no assumption on
the distribution of step times (a disturbed round is an outlier, not a shift
of a mean), and it needs at least :data:`MIN_ROUNDS` rounds to call anything
clear: with fewer, even a winner of every round is within what chance gives.
The fastest is the config that the rounds pair in its favour against each other
(the median of each other config's round ratios to it at least 1: it was faster in
at least half the rounds against each), not merely the lowest median step: on a
machine whose speed moves in phases, a config can have the lower median and still
lose most rounds to another.  Every config's step is read the same way
(:func:`paired_steps`: the reference's median step times the config's median round
ratio to it), so the fastest has the lowest step shown.  It is held against every other config,
not only the runner-up: where several are within the noise of it, the verdict names
them all (in the order they were given), which reads the same from run to run while
noise reorders them.

A lead must also be large enough to repeat: a config clearly beats another only
when the whole interval lies above ``1 + min_lead`` (``--min-lead``, by default
:data:`DEFAULT_MIN_LEAD`).  On the 2-core machine the same pair of digits configs
read 1.03x, 1.07x and 1.13x in three runs of 20 rounds, each interval excluding 1 in
some runs and not in others, so a verdict that counted any lead beyond the noise
changed from run to run (docs/BENCHMARKS.md); leads of a few per cent are ties on
such a machine, as continuous-benchmarking tools call them (airspeed velocity's
``--factor``, 1.1 by default).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

#: The least coverage of the interval of the median ratio.
CONFIDENCE = 0.95

#: The least lead, as a share, that a clear winner's whole interval must exceed.
DEFAULT_MIN_LEAD = 0.10


def interval_order(rounds: int, confidence: float = CONFIDENCE) -> int | None:
    """The largest k such that [k-th smallest, k-th largest] of ``rounds`` values holds
    their median with probability at least ``confidence``; None when no k does (too few
    rounds).  Coverage of order k is ``1 - 2 P(Binomial(rounds, 1/2) < k)``."""
    best, below = None, 0.0
    for k in range(1, rounds // 2 + 1):
        below += math.comb(rounds, k - 1) / 2 ** rounds  # P(Binomial < k)
        if 1 - 2 * below < confidence:
            break
        best = k
    return best


def _rounds_needed(confidence: float = CONFIDENCE) -> int:
    return next(n for n in range(1, 64) if interval_order(n, confidence) is not None)


#: The fewest rounds whose interval can exclude a ratio of 1 (6 at 95%).
MIN_ROUNDS = _rounds_needed()


def median_interval(values: list[float], confidence: float = CONFIDENCE
                    ) -> tuple[float, float] | None:
    """The distribution-free interval of the median of ``values`` (see the module
    docstring); None with fewer than :data:`MIN_ROUNDS` values."""
    k = interval_order(len(values), confidence)
    if k is None:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[-k]


def spread(samples: list[float]) -> float:
    """A config's spread over its rounds, as a share of its median: half the
    interquartile range (one disturbed round moves it little); 0 for one sample."""
    if len(samples) < 2:
        return 0.0
    low, _, high = statistics.quantiles(samples, n=4, method="inclusive")
    return (high - low) / 2 / statistics.median(samples)


@dataclass(frozen=True)
class Decision:
    """The fastest config against the runner-up, from their rounds."""

    fastest: str
    runner_up: str
    ratio: float  # median over rounds of runner-up seconds / fastest seconds
    interval: tuple[float, float] | None  # of that median; None: too few rounds
    wins: int  # rounds in which the fastest was faster
    rounds: int
    min_lead: float = 0.0  # the lead, as a share, the interval must lie above

    @property
    def clear(self) -> bool:
        return self.interval is not None and self.interval[0] > 1.0 + self.min_lead

    spread: float = 0.0  # half the ratios' interquartile range, as a share (see spread())

    @property
    def noise(self) -> float:
        """The machine's noise on this ratio, as a share: the ratios' spread."""
        return self.spread

    @property
    def ahead(self) -> bool:
        """Whether the rounds pair in the fastest's favour (faster in at least half)."""
        return self.ratio >= 1.0

    def text(self) -> str:
        """The pair's verdict: a clear winner, or none within the noise."""
        if self.clear:
            return (f"{self.fastest} is fastest, {self.ratio:.2f}x {self.runner_up}, clear "
                    f"(faster in {self.wins} of {self.rounds} rounds; "
                    f"{100 * CONFIDENCE:.0f}% interval of the ratio "
                    f"{self.interval[0]:.2f}-{self.interval[1]:.2f})")
        return Verdict(self, (self,), (self.fastest, self.runner_up)).text()


@dataclass(frozen=True)
class Verdict:
    """The fastest config against each other one: clear, or tied with some."""

    first: Decision  # the fastest against the runner-up
    ties: tuple[Decision, ...]  # the fastest against each config it does not clearly beat
    tied: tuple[str, ...]  # the fastest and the configs tied with it, in the given order

    @property
    def clear(self) -> bool:
        return not self.ties

    @property
    def noise(self) -> float:
        return max(d.noise for d in self.ties) if self.ties else self.first.noise

    def text(self) -> str:
        if self.clear:
            return self.first.text()
        names = ", ".join(self.tied[:-1]) + f" and {self.tied[-1]}"
        few = any(d.interval is None for d in self.ties)
        lead = self.first.min_lead
        why = (f"no lead of {100 * lead:.0f}% or more beyond this machine's noise" if lead
               else "within this machine's noise")
        if few:
            why += (f"; {self.first.rounds} rounds cannot tell, give --rounds {MIN_ROUNDS} "
                    "or more")
        d = self.first
        interval = (f", {100 * CONFIDENCE:.0f}% interval {d.interval[0]:.2f}-"
                    f"{d.interval[1]:.2f}" if d.interval is not None else "")
        widest = max(self.ties, key=lambda t: t.noise)
        spreads = f"the ratios' spread ±{100 * d.noise:.1f}%"
        if widest.noise > d.noise:
            spreads += f", ±{100 * widest.noise:.1f}% against {widest.runner_up}"
        return (f"no clear winner between {names} ({why}; median of the round ratios: "
                f"{d.fastest} {d.ratio:.2f}x {d.runner_up}, faster in {d.wins} of {d.rounds} "
                f"rounds{interval}; {spreads})")


def decide(rounds: dict[str, list[float]],
           min_lead: float = DEFAULT_MIN_LEAD) -> Verdict | None:
    """The fastest config (lowest median seconds per step over its rounds) against every
    other; ``rounds`` maps each config's name to its seconds per step, round by round,
    all of one length, in the order the configs were given.  The verdict is clear when
    the fastest clearly beats every other (by more than ``min_lead``); otherwise it
    names every config that the fastest does not clearly beat (in the given order, so
    that the same outcome reads the same).  None with fewer than two configs."""
    if len(rounds) < 2:
        return None
    x = leader(rounds)
    order = sorted((name for name in rounds if name != x),
                   key=lambda name: statistics.median(rounds[name]))
    duels = [pair(x, rounds[x], y, rounds[y], min_lead) for y in order]
    ties = tuple(d for d in duels if not d.clear)
    tied = {x} | {d.runner_up for d in ties}
    return Verdict(duels[0], ties, tuple(name for name in rounds if name in tied))


def reference(rounds: dict[str, list[float]]) -> str:
    """The config the rounds pair in favour of against the most others (the median of
    their round ratios to it at least 1), then the lowest median step."""
    def ahead_of(x: str) -> int:
        return sum(statistics.median(b / a for a, b in zip(rounds[x], rounds[y])) >= 1.0
                   for y in rounds if y != x)

    return min(rounds, key=lambda x: (-ahead_of(x), statistics.median(rounds[x])))


def paired_steps(rounds: dict[str, list[float]]) -> dict[str, float]:
    """Each config's step read from the rounds paired: the :func:`reference` config's
    median step times the median over the rounds of this config's step over the
    reference's, so that every config's figure rests on the same rounds (a slow round
    slows both sides of each ratio) and two figures compare as the rounds pair them."""
    ref = reference(rounds)
    base = statistics.median(rounds[ref])
    return {name: base * statistics.median(c / r for c, r in zip(times, rounds[ref]))
            for name, times in rounds.items()}


def leader(rounds: dict[str, list[float]]) -> str:
    """The config with the lowest :func:`paired_steps` figure (the reference, unless the
    rounds run in a circle), the first given of equals."""
    steps = paired_steps(rounds)
    return min(rounds, key=lambda name: steps[name])


def pair(x: str, x_rounds: list[float], y: str, y_rounds: list[float],
         min_lead: float = 0.0) -> Decision:
    """Config ``x`` against config ``y`` (``x`` taken as the faster), from their seconds
    per step in the same rounds; clear only by more than ``min_lead``."""
    ratios = [b / a for a, b in zip(x_rounds, y_rounds)]
    return Decision(fastest=x, runner_up=y, ratio=statistics.median(ratios),
                    interval=median_interval(ratios),
                    wins=sum(q > 1.0 for q in ratios), rounds=len(ratios),
                    min_lead=min_lead,
                    spread=spread(ratios))

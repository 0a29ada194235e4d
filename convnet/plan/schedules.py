"""The pipeline schedules: in which clock tick each stage works on each micro-batch.

A pass of a pipelined plan (docs/PIPELINE.md) is, per stage, a sequence of *items*:
the forward ``("F", m)`` or backward ``("B", m)`` of micro-batch m, each covering all
of the stage's layers.  A schedule is that sequence per stage:

* ``fill-drain`` (GPipe): every forward, then every backward;
* ``1f1b`` (one forward, one backward, as in PipeDream-flush): S - s warm-up forwards
  for stage s of S (the stages after it, plus one), then a backward and a forward in
  turn, then the backwards left.  A stage then holds at most min(M, S - s)
  micro-batches' activations between their forward and their backward, where
  fill-drain holds all M.

:func:`item_ticks` places the items in ticks, as if every item took one tick: an item
runs in the first tick after the one before it in its stage's sequence and after the
items it needs (the forward of the same micro-batch on the stage before, or for a
backward the backward on the stage after, or the last stage's own forward).  The
scheduler (:mod:`convnet.plan.scheduler`) orders the operations by these ticks, so
every operation comes after what it reads, and the ``--print-plan`` grid
(:mod:`convnet.plan.pipeline`) draws them.  Both schedules run a micro-batch's
backward on every stage in micro-batch order, so each layer adds its weight
gradients in the order 0..M-1 under either: the weights are bitwise the same.
"""

from __future__ import annotations

FILL_DRAIN = "fill-drain"
ONE_F_ONE_B = "1f1b"
#: The schedules ``--pipeline-schedule`` takes.
SCHEDULES = (FILL_DRAIN, ONE_F_ONE_B)
#: The default: as many ticks as fill-drain, the same weights, fewer activations held
#: (docs/PIPELINE.md, "Which schedule").
DEFAULT_SCHEDULE = ONE_F_ONE_B

Item = tuple[str, int]  # ("F" or "B", micro-batch)


def stage_sequence(schedule: str, stage: int, num_stages: int, micro_batches: int) -> list[Item]:
    """The items stage ``stage`` of ``num_stages`` runs in one pass, in order."""
    micros = range(micro_batches)
    if schedule == FILL_DRAIN:
        return [("F", m) for m in micros] + [("B", m) for m in micros]
    if schedule != ONE_F_ONE_B:
        raise ValueError(f"unknown pipeline schedule {schedule!r}")
    warm = min(micro_batches, num_stages - stage)
    sequence = [("F", m) for m in range(warm)]
    for m in range(micro_batches - warm):
        sequence += [("B", m), ("F", m + warm)]
    return sequence + [("B", m) for m in range(micro_batches - warm, micro_batches)]


def _needs(kind: str, stage: int, micro: int, last: int) -> tuple[str, int, int] | None:
    """The item of another stage (or the stage's own forward) that an item waits for."""
    if kind == "F":
        return ("F", stage - 1, micro) if stage else None
    return ("B", stage + 1, micro) if stage < last else ("F", stage, micro)


def item_ticks(schedule: str, num_stages: int,
               micro_batches: int) -> dict[tuple[str, int, int], int]:
    """(kind, stage, micro-batch) -> the tick it runs in (see the module docstring)."""
    sequences = [stage_sequence(schedule, s, num_stages, micro_batches)
                 for s in range(num_stages)]
    last = num_stages - 1
    next_item = [0] * num_stages
    ticks: dict[tuple[str, int, int], int] = {}
    tick = 0
    while any(n < len(seq) for n, seq in zip(next_item, sequences)):
        ready = []
        for s, seq in enumerate(sequences):
            if next_item[s] < len(seq):
                kind, m = seq[next_item[s]]
                need = _needs(kind, s, m, last)
                if need is None or ticks.get(need, tick) < tick:
                    ready.append((kind, s, m))
        if not ready:
            raise RuntimeError(f"the {schedule} schedule of {num_stages} stages is stuck")
        for item in ready:
            ticks[item] = tick
            next_item[item[1]] += 1
        tick += 1
    return ticks


__all__ = ["DEFAULT_SCHEDULE", "FILL_DRAIN", "ONE_F_ONE_B", "SCHEDULES", "item_ticks",
           "stage_sequence"]

"""The micro-batch pipeline of a plan, for ``--print-plan`` (docs/PIPELINE.md).

With ``--micro-batches M`` the scheduler (:mod:`convnet.plan.scheduler`) orders
each pass in clock ticks, by the plan's schedule (:mod:`convnet.plan.schedules`):
under fill-drain stage s forwards micro-batch m at tick m + s and, going back,
works on it at tick M + last stage + m + (last stage - s); under 1F1B each stage
alternates forwards and backwards.  This module shows that order per device as
a grid (a row per stage the device holds, a column per tick, ``F3``/``B3`` for the
forward/backward of micro-batch 3), and the share of ticks a device idles in (the
bubble), counted as if every stage took the same time; ``--simulate`` predicts the
real step from a profile.
"""

from __future__ import annotations

from convnet.config.model import NetConfig
from convnet.plan.memory import memory_peaks
from convnet.plan.ops import GradCopy, Plan, shard_bounds
from convnet.plan.scheduler import layer_stages
from convnet.plan.schedules import FILL_DRAIN, item_ticks

def _ticks(plan: Plan, net: NetConfig) -> dict[tuple[str, int, int], int]:
    """(kind, stage, micro-batch) -> tick, by the plan's schedule."""
    last = max(layer_stages(net, plan).values(), default=0)
    return item_ticks(plan.schedule, last + 1, plan.micro_batches)


def device_stages(plan: Plan, net: NetConfig) -> dict[int, list[int]]:
    """The pipeline stages each device works in (a device may hold several)."""
    stages = layer_stages(net, plan)
    out: dict[int, set[int]] = {d: set() for d in range(plan.num_devices)}
    for name, stage in stages.items():
        for device in plan.layers[name].devices:
            out[device].add(stage)
    return {d: sorted(s) for d, s in out.items()}


def tick_count(plan: Plan, net: NetConfig) -> int:
    """Ticks of one pass (2 (M + last stage) under either schedule)."""
    return max(_ticks(plan, net).values()) + 1


def grid(plan: Plan, net: NetConfig, device: int) -> dict[int, list[str]]:
    """stage -> one cell per tick of a pass: ``Fm``, ``Bm`` or ``.`` (idle)."""
    ticks = _ticks(plan, net)
    count = max(ticks.values()) + 1
    rows = {}
    for stage in device_stages(plan, net)[device]:
        cells = ["."] * count
        for (kind, s, m), tick in ticks.items():
            if s == stage:
                cells[tick] = f"{kind}{m}"
        rows[stage] = cells
    return rows


def bubble_share(plan: Plan, net: NetConfig, device: int) -> float:
    """The share of a pass's ticks in which ``device`` has nothing to do."""
    rows = grid(plan, net, device).values()
    ticks = tick_count(plan, net)
    busy = sum(any(row[t] != "." for row in rows) for t in range(ticks))
    return 1 - busy / ticks if rows else 1.0


def gradient_backlog(plan: Plan, net: NetConfig) -> list[int]:
    """Per device, the bytes of gradients for other devices' layers it may hold beyond
    the estimate of :mod:`convnet.plan.memory`: that estimate follows the plan's order,
    in which each such gradient is pulled right after it is made, but a later stage
    runs ahead of the stage before it, so in the worst case the gradients of several
    micro-batches wait for their pulls (all but one more than the estimate has): under
    fill-drain every micro-batch's of a pass; under 1F1B the earlier stage s pulls
    before each of its backwards and forwards at most min(M, S - s) micro-batches
    ahead of them, which bounds how far the later stage can run ahead."""
    stages = layer_stages(net, plan)
    count = max(stages.values(), default=0) + 1
    per_pass: dict[tuple[int, int], int] = {}
    for op in plan.ops:
        if isinstance(op, GradCopy):
            waiting = (plan.micro_batches if plan.schedule == FILL_DRAIN
                       else min(plan.micro_batches, count - stages[op.layer]))
            key = (op.src, op.pass_index)
            per_pass[key] = per_pass.get(key, 0) + op.nbytes * (waiting - 1)
    worst = [0] * plan.num_devices
    for (device, _), nbytes in per_pass.items():
        worst[device] = max(worst[device], nbytes)
    return [w // plan.micro_batches for w in worst]


def pipeline_summary(plan: Plan, net: NetConfig) -> dict:
    """The pipeline as JSON-able data: the schedule, each device's grid and bubble."""
    peaks, backlog = memory_peaks(plan, net), gradient_backlog(plan, net)
    return {
        "micro_batches": plan.micro_batches,
        "schedule": plan.schedule,
        "ticks_per_pass": tick_count(plan, net),
        "stages": layer_stages(net, plan),
        "devices": [{"device": d,
                     "grid": {str(s): cells for s, cells in grid(plan, net, d).items()},
                     "bubble_share": bubble_share(plan, net, d),
                     "activation_bytes_at_peak": peaks[d].activation_bytes,
                     "gradient_backlog_bytes": backlog[d]}
                    for d in range(plan.num_devices)],
    }


def pipeline_text(plan: Plan, net: NetConfig, byte_text) -> list[str]:
    """The ``--print-plan`` section: each device's grid, its bubble and the activation
    memory it holds at its peak (``byte_text`` formats bytes)."""
    peaks, backlog = memory_peaks(plan, net), gradient_backlog(plan, net)
    lines = [f"Pipeline: {plan.micro_batches} micro-batch(es) per shard "
             f"({', '.join(str(b - a) for a, b in _piece_sizes(plan))} cases), "
             f"{plan.schedule} schedule, {tick_count(plan, net)} ticks per pass",
             "Fm/Bm = forward/backward of micro-batch m, . = idle; bubble = idle ticks if "
             "every stage took as long (--simulate predicts the real step)"]
    for d in range(plan.num_devices):
        rows = grid(plan, net, d)
        waiting = (f", up to {byte_text(peaks[d].activation_bytes + backlog[d])} with its "
                   "gradients waiting to be pulled" if backlog[d] else "")
        lines.append(f"  device {d}: bubble {bubble_share(plan, net, d):.0%}, activation "
                     f"memory at the peak (est.) {byte_text(peaks[d].activation_bytes)}"
                     f"{waiting}")
        width = max((len(c) for row in rows.values() for c in row), default=1)
        for stage, cells in rows.items():
            row = " ".join(c.ljust(width) for c in cells)
            lines.append(f"    stage {stage}: {row}".rstrip())
    return lines


def _piece_sizes(plan: Plan) -> list[tuple[int, int]]:
    return shard_bounds(plan.shard_size, plan.micro_batches)

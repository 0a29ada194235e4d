"""The micro-batch pipeline of a plan, for ``--print-plan`` (docs/PIPELINE.md).

With ``--micro-batches M`` the scheduler (:mod:`convnet.plan.scheduler`) orders
each pass in clock ticks: stage s forwards micro-batch m at tick m + s and,
going back, works on it at tick m + (last stage - s).  This module shows that
order per device as a grid (a row per stage the device holds, a column per
tick, ``F3``/``B3`` for the forward/backward of micro-batch 3), and the share of
ticks a device idles in (the bubble), counted as if every stage took the same
time; ``--simulate`` predicts the real step from a profile.
"""

from __future__ import annotations

from convnet.config.model import NetConfig
from convnet.plan.memory import memory_peaks
from convnet.plan.ops import GradCopy, Plan, shard_bounds
from convnet.plan.scheduler import layer_stages

SCHEDULE = "fill-drain"


def device_stages(plan: Plan, net: NetConfig) -> dict[int, list[int]]:
    """The pipeline stages each device works in (a device may hold several)."""
    stages = layer_stages(net, plan)
    out: dict[int, set[int]] = {d: set() for d in range(plan.num_devices)}
    for name, stage in stages.items():
        for device in plan.layers[name].devices:
            out[device].add(stage)
    return {d: sorted(s) for d, s in out.items()}


def tick_count(plan: Plan, net: NetConfig) -> int:
    """Ticks of one pass: M + last stage going forward, as many coming back."""
    last = max(layer_stages(net, plan).values(), default=0)
    return 2 * (plan.micro_batches + last)


def grid(plan: Plan, net: NetConfig, device: int) -> dict[int, list[str]]:
    """stage -> one cell per tick of a pass: ``Fm``, ``Bm`` or ``.`` (idle)."""
    stages = layer_stages(net, plan)
    last = max(stages.values(), default=0)
    ticks = tick_count(plan, net)
    back = ticks // 2
    rows = {}
    for stage in device_stages(plan, net)[device]:
        cells = ["."] * ticks
        for m in range(plan.micro_batches):
            cells[m + stage] = f"F{m}"
            cells[back + m + last - stage] = f"B{m}"
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
    runs ahead of the stage before it, so in the worst case every micro-batch's
    gradients of a pass wait for their pulls (all but one more than the estimate has)."""
    per_pass: dict[tuple[int, int], int] = {}
    for op in plan.ops:
        if isinstance(op, GradCopy):
            key = (op.src, op.pass_index)
            per_pass[key] = per_pass.get(key, 0) + op.nbytes
    worst = [0] * plan.num_devices
    for (device, _), nbytes in per_pass.items():
        worst[device] = max(worst[device], nbytes)
    return [w * (plan.micro_batches - 1) // plan.micro_batches for w in worst]


def pipeline_summary(plan: Plan, net: NetConfig) -> dict:
    """The pipeline as JSON-able data: the schedule, each device's grid and bubble."""
    peaks, backlog = memory_peaks(plan, net), gradient_backlog(plan, net)
    return {
        "micro_batches": plan.micro_batches,
        "schedule": SCHEDULE,
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
             f"{SCHEDULE} schedule, {tick_count(plan, net)} ticks per pass",
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

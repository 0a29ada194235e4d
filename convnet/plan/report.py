"""What a plan costs, for a person (``--print-plan``) and for tools (``--print-plan=json``).

The figures are derived from the plan alone: parameter memory (weights, their
gradients and momentum, float32), an activation-memory estimate (every
activation and gradient buffer a device holds during one minibatch, copies
included: each is kept until the backward pass that needs it) and the bytes
each device sends and receives per minibatch through copies and all-reduces
(a ring-style all-reduce moves 2(R-1)/R of the gradient per device).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass

from convnet.config.model import NetConfig
from convnet.plan.ops import (FLOAT_BYTES, AllReduce, Backward, Copy, Forward, GradCopy, Load, Plan,
                          Update)

PARAM_COPIES = 3  # weights, gradient accumulator, momentum


@dataclass
class DeviceTotals:
    device: int
    physical: int
    param_bytes: int = 0
    activation_bytes: int = 0
    sent_bytes: int = 0
    received_bytes: int = 0
    loaded_bytes: int = 0


def device_totals(plan: Plan, net: NetConfig) -> list[DeviceTotals]:
    """Per-device memory and traffic of one minibatch."""
    totals = [DeviceTotals(d, plan.physical_devices[d]) for d in range(plan.num_devices)]
    for placement in plan.layers.values():
        for device in placement.devices:
            totals[device].param_bytes += placement.param_count * FLOAT_BYTES * PARAM_COPIES
    shard_bytes = {name: net[name].outputs * plan.shard_size * FLOAT_BYTES for name in plan.layers}
    for op in plan.ops:
        if isinstance(op, Load):
            totals[op.device].loaded_bytes += op.nbytes
            totals[op.device].activation_bytes += op.nbytes
        elif isinstance(op, Forward):
            totals[op.device].activation_bytes += shard_bytes[op.layer]
        elif isinstance(op, Backward):
            totals[op.device].activation_bytes += shard_bytes[op.layer]  # its gradient buffer
        elif isinstance(op, (Copy, GradCopy)):
            totals[op.src].sent_bytes += op.nbytes
            totals[op.dst].received_bytes += op.nbytes
            totals[op.dst].activation_bytes += op.nbytes if isinstance(op, Copy) else 0
        elif isinstance(op, AllReduce):
            r = len(op.replica_devices)
            moved = 2 * (r - 1) * op.nbytes // r
            for device in op.replica_devices:
                totals[device].sent_bytes += moved
                totals[device].received_bytes += moved
    return totals


def plan_summary(plan: Plan, net: NetConfig) -> dict:
    """The plan as plain JSON-able data."""
    return {
        "scheme": plan.scheme,
        "minibatch": plan.minibatch,
        "num_shards": plan.num_shards,
        "shard_size": plan.shard_size,
        "num_passes": plan.num_passes,
        "devices": [{"logical": d, "physical": p} for d, p in enumerate(plan.physical_devices)],
        "notes": plan.notes,
        "layers": [dict(asdict(p), replicas=p.replicas) for p in plan.layers.values()],
        "ops": [dict(asdict(op), kind=op.kind, devices=list(op.devices)) for op in plan.ops],
        "totals": [asdict(t) for t in device_totals(plan, net)],
    }


def plan_json(plan: Plan, net: NetConfig) -> str:
    return json.dumps(plan_summary(plan, net), indent=1)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _shape_text(shape) -> str:
    return "x".join(map(str, shape)) if shape else "-"


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return [line.rstrip() for line in lines]


def _op_text(op) -> str:
    if isinstance(op, Load):
        return f"load {op.layer}[s{op.shard}]"
    if isinstance(op, Forward):
        return f"fwd {op.layer}[s{op.shard}]"
    if isinstance(op, Backward):
        return f"bwd {op.layer}[s{op.shard}]"
    if isinstance(op, Copy):
        return f"copy {op.layer}[s{op.shard}] {op.src}->{op.dst} ({human_bytes(op.nbytes)})"
    if isinstance(op, GradCopy):
        return (f"gradcopy d{op.layer}[s{op.shard}] from {op.consumer} {op.src}->{op.dst} "
                f"({human_bytes(op.nbytes)})")
    if isinstance(op, AllReduce):
        return (f"allreduce {op.layer} over {','.join(map(str, op.replica_devices))} "
                f"({human_bytes(op.nbytes)})")
    if isinstance(op, Update):
        return f"update {op.layer}"
    raise TypeError(op)


def plan_text(plan: Plan, net: NetConfig) -> str:
    """A readable report: layers, the pass schedule per device, per-device totals."""
    physical = ",".join(map(str, plan.physical_devices))
    lines = [f"Scheme: {plan.scheme}.  Devices: logical 0..{plan.num_devices - 1} -> "
             f"physical {physical}.",
             f"Minibatch {plan.minibatch} -> {plan.num_shards} shard(s) of {plan.shard_size} "
             f"cases, {plan.num_passes} pass(es) per minibatch.", ""]
    rows = []
    for p in plan.layers.values():
        update = ""
        if p.update_period:
            update = (f"every {p.update_period} pass(es), "
                      f"{p.update_period * plan.minibatch // plan.num_passes} cases")
        rows.append([p.name, p.type, _shape_text(p.output_shape), f"{p.param_count:,}",
                     ",".join(map(str, p.devices)) or "-", p.replicas,
                     f"every {p.period}" if p.devices else "-", p.scheme, update,
                     "" if p.gpu_source == "config" else p.gpu_source])
    lines += ["Layers"] + _table(rows, ["layer", "type", "output", "params", "devices",
                                        "replicas", "runs", "scheme", "update", "placement"])
    lines += ["", "Schedule (per pass and device, in execution order)"]
    by_pass = defaultdict(lambda: defaultdict(list))
    for op in plan.ops:
        for d in op.devices:
            by_pass[op.pass_index][d].append(_op_text(op))
    for p in range(plan.num_passes):
        lines.append(f"pass {p}")
        for d in range(plan.num_devices):
            ops = by_pass[p][d]
            lines.append(f"  device {d}: " + ("; ".join(ops) if ops else "idle"))
    lines += ["", "Totals per device (per minibatch)"]
    rows = [[t.device, t.physical, human_bytes(t.param_bytes), human_bytes(t.activation_bytes),
             human_bytes(t.sent_bytes), human_bytes(t.received_bytes),
             human_bytes(t.loaded_bytes)] for t in device_totals(plan, net)]
    lines += _table(rows, ["device", "physical", "param memory", "activation memory (est.)",
                           "sent", "received", "loaded from host"])
    if plan.notes:
        lines += ["", "Notes"] + [f"  - {n}" for n in plan.notes]
    return "\n".join(lines)

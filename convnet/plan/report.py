"""What a plan costs, for a person (``--print-plan``) and for tools (``--print-plan=json``).

The figures are derived from the plan alone: parameter memory (weights, their
gradients and momentum, float32), the estimated peak memory of a training step
and the activation memory held at that peak (activations, copies included, the
state layers keep for their backward pass, gradients in flight, and the temporaries
of the layer call running then, also shown apart; see :mod:`convnet.plan.memory`), and
the bytes each device sends and receives per minibatch through copies and
all-reduces (a ring-style all-reduce moves 2(R-1)/R of the gradient per device), and
the statistics that bnorm layers with ``stats=global`` combine (each replica's to the
R-1 others, before the forward and again before the backward call).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from convnet.config.model import NetConfig
from convnet.config.layer_types.memory_rules import CPU_KERNELS, KernelMemory
from convnet.plan.memory import TEMPORARIES, memory_peaks
from convnet.plan.ops import FLOAT_BYTES, AllReduce, BatchStats, Copy, GradCopy, Load, Plan
from convnet.plan.pipeline import pipeline_summary, pipeline_text

PARAM_COPIES = 3  # weights, gradient accumulator, momentum


@dataclass
class DeviceTotals:
    device: int
    physical: int
    param_bytes: int = 0
    activation_bytes: int = 0  # held by the step at the device's peak
    temporaries_bytes: int = 0  # of which the running call's temporaries
    peak_bytes: int = 0  # everything at the peak: weights, momentum, gradients, activations
    sent_bytes: int = 0
    received_bytes: int = 0
    loaded_bytes: int = 0


def device_totals(plan: Plan, net: NetConfig, shared: frozenset[str] = frozenset(),
                  kernels: KernelMemory = CPU_KERNELS,
                  precision: str = "fp32") -> list[DeviceTotals]:
    """Per-device memory and traffic of one minibatch; ``shared``: the layers whose
    replicas hold one copy of the weight state, ``kernels`` and ``precision``: what the
    backend's kernels allocate and in which arithmetic (see :func:`memory_peaks`)."""
    totals = [DeviceTotals(d, plan.physical_devices[d], activation_bytes=peak.activation_bytes,
                           temporaries_bytes=peak.at_peak.get(TEMPORARIES, 0),
                           peak_bytes=peak.peak_bytes)
              for d, peak in enumerate(memory_peaks(plan, net, shared, kernels, precision))]
    for name, placement in plan.layers.items():
        for replica, device in enumerate(placement.devices):
            copies = 1 if replica and name in shared else PARAM_COPIES  # its gradient only
            totals[device].param_bytes += placement.param_count * FLOAT_BYTES * copies
    for op in plan.ops:
        if isinstance(op, Load):
            totals[op.device].loaded_bytes += op.nbytes
        elif isinstance(op, (Copy, GradCopy)):
            totals[op.src].sent_bytes += op.nbytes
            totals[op.dst].received_bytes += op.nbytes
        elif isinstance(op, AllReduce):
            r = len(op.replica_devices)
            moved = 2 * (r - 1) * op.nbytes // r
            for device in op.replica_devices:
                totals[device].sent_bytes += moved
                totals[device].received_bytes += moved
        elif isinstance(op, BatchStats):  # each replica's statistics to every other
            moved = (len(op.replica_devices) - 1) * op.nbytes
            for device in op.replica_devices:
                totals[device].sent_bytes += moved
                totals[device].received_bytes += moved
    return totals


def plan_summary(plan: Plan, net: NetConfig, shared: frozenset[str] = frozenset(),
                 kernels: KernelMemory = CPU_KERNELS, precision: str = "fp32") -> dict:
    """The plan as plain JSON-able data (``shared``, ``kernels``, ``precision``: as for
    :func:`device_totals`)."""
    return {
        "scheme": plan.scheme,
        "minibatch": plan.minibatch,
        "num_shards": plan.num_shards,
        "shard_size": plan.shard_size,
        "num_passes": plan.num_passes,
        "micro_batches": plan.micro_batches,
        "pipeline": pipeline_summary(plan, net),
        "devices": [{"logical": d, "physical": p} for d, p in enumerate(plan.physical_devices)],
        "notes": plan.notes,
        "layers": [dict(asdict(p), replicas=p.replicas) for p in plan.layers.values()],
        "ops": [dict(asdict(op), kind=op.kind, devices=list(op.devices)) for op in plan.ops],
        "totals": [asdict(t) for t in device_totals(plan, net, shared, kernels, precision)],
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


#: Short name of each op kind in the schedule table.
_OP_NAMES = {"load": "load", "forward": "fwd", "backward": "bwd", "copy": "copy",
             "gradcopy": "gradcopy", "allreduce": "allreduce", "update": "update",
             "batchstats": "stats"}


def byte_unit(values) -> tuple[str, int]:
    """One unit for a whole column: the largest that keeps its biggest value >= 1."""
    biggest = max((abs(v) for v in values), default=0)
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if biggest >= size:
            return unit, size
    return "B", 1


def _cell(op, device: int) -> str:
    """What one op does on ``device``, whose column it is in (its layer is in the row)."""
    shard = f"s{op.shard}" if hasattr(op, "shard") else ""  # with micro-batches: the piece
    if isinstance(op, BatchStats):
        return f"s{op.pieces[op.replica_devices.index(device)]}"
    if isinstance(op, GradCopy):
        return f"{shard} d({op.consumer}) from {op.src}"
    if isinstance(op, Copy):
        return f"{shard} from {op.src}"
    return shard or "*"


def _op_bytes(op) -> int:
    if isinstance(op, BatchStats):  # every replica's statistics to every other replica
        r = len(op.replica_devices)
        return r * (r - 1) * op.nbytes
    return getattr(op, "nbytes", 0) if isinstance(op, (Copy, GradCopy, AllReduce)) else 0


def schedule_rows(plan: Plan, pass_index: int) -> list[list]:
    """One row per step of a pass: consecutive ops of one kind and layer on distinct
    devices share a row (a data-parallel layer's replicas, a fan of copies), with one
    cell per device; the last field is the bytes the row copies or all-reduces."""
    rows: list[list] = []
    used: set[int] = set()
    for op in (o for o in plan.ops if o.pass_index == pass_index):
        name = _OP_NAMES[op.kind]
        if isinstance(op, BatchStats):
            name = f"{name}-{_OP_NAMES[op.phase]}"
        key = (name, op.layer)
        if not rows or tuple(rows[-1][:2]) != key or used & set(op.devices):
            rows.append([*key, [[] for _ in range(plan.num_devices)], 0])
            used = set()
        for d in op.devices:
            rows[-1][2][d].append(_cell(op, d))
        used |= set(op.devices)
        rows[-1][3] += _op_bytes(op)
    return rows


def schedule_text(plan: Plan) -> list[str]:
    """The schedule as one table per pass: a row per step, a column per device."""
    lines = []
    moved = [r[3] for p in range(plan.num_passes) for r in schedule_rows(plan, p)]
    unit, size = byte_unit(moved)
    header = ["op", "layer"] + [f"device {d}" for d in range(plan.num_devices)] + \
        [f"moved ({unit})"]
    for p in range(plan.num_passes):
        table = [[name, layer] + [", ".join(c) for c in cells] +
                 [f"{n / size:.2f}" if n else ""] for name, layer, cells, n in
                 schedule_rows(plan, p)]
        lines += [f"pass {p}"] + ["  " + line for line in _table(table, header)]
    return lines


def _piece_legend(plan: Plan) -> str:
    if plan.micro_batches == 1:
        return "sN = shard N"
    if plan.num_shards == 1:
        return "sN = micro-batch N"
    return f"sN = micro-batch N // {plan.num_shards} of shard N % {plan.num_shards}"


def plan_text(plan: Plan, net: NetConfig, shared: frozenset[str] = frozenset(),
              kernels: KernelMemory = CPU_KERNELS, precision: str = "fp32") -> str:
    """A readable report: layers, the pass schedule per device, per-device totals
    (``shared``, ``kernels``, ``precision``: as for :func:`device_totals`)."""
    physical = ",".join(map(str, plan.physical_devices))
    lines = [f"Scheme: {plan.scheme}.  Devices: logical 0..{plan.num_devices - 1} -> "
             f"physical {physical}.",
             f"Minibatch {plan.minibatch} -> {plan.num_shards} shard(s) of {plan.shard_size} "
             f"cases, {plan.num_passes} pass(es) per minibatch.", ""]
    rows = []
    for p in plan.layers.values():
        update = ""
        if p.frozen:
            update = "frozen (rates 0)"
        elif p.update_period:
            update = (f"every {p.update_period} pass(es), "
                      f"{p.update_period * plan.minibatch // plan.num_passes} cases")
        rows.append([p.name, p.type, _shape_text(p.output_shape), f"{p.param_count:,}",
                     ",".join(map(str, p.devices)) or "-", p.replicas,
                     f"every {p.period}" if p.devices else "-", p.scheme, update,
                     "" if p.gpu_source == "config" else p.gpu_source])
    lines += ["Layers"] + _table(rows, ["layer", "type", "output", "params", "devices",
                                        "replicas", "runs", "scheme", "update", "placement"])
    lines += ["", "Schedule (per pass, in execution order): a row is one step, a cell what that "
                  "device does;",
              _piece_legend(plan) +
              ", 'from D' = pulled from device D, d(L) = the gradient that layer L computed,",
              "* = every replica, moved = bytes copied or all-reduced"]
    if any(isinstance(op, BatchStats) for op in plan.ops):
        lines += ["stats-fwd/-bwd = a bnorm layer's batch statistics combined over its "
                  "replicas before fwd/bwd"]
    lines += schedule_text(plan)
    if plan.micro_batches > 1:
        lines += [""] + pipeline_text(plan, net, human_bytes)
    lines += ["", "Totals per device (per minibatch)"]
    totals = device_totals(plan, net, shared, kernels, precision)
    fields = ("param_bytes", "activation_bytes", "temporaries_bytes", "peak_bytes", "sent_bytes",
              "received_bytes", "loaded_bytes")
    names = ("param memory", "activation memory (est.)", "of which temporaries (est.)",
             "peak memory (est.)", "sent", "received",
             "loaded from host")
    units = [byte_unit([getattr(t, f) for t in totals]) for f in fields]
    rows = [[t.device, t.physical] + [f"{getattr(t, f) / size:.1f}" for f, (_, size) in
                                      zip(fields, units)] for t in totals]
    lines += _table(rows, ["device", "physical"] + [f"{name} ({unit})" for name, (unit, _) in
                                                    zip(names, units)])
    lines += ["peak memory: the weights and momentum, the weight gradients held at the peak "
              "and the activation memory then; param memory counts every weight gradient, "
              "so the peak can be less than param + activation memory"]
    notes = plan.notes + frozen_notes(plan)
    if notes:
        lines += ["", "Notes"] + [f"  - {n}" for n in notes]
    return "\n".join(lines)


def frozen_notes(plan: Plan) -> list[str]:
    """What freezing layers (all their rates 0) saves: no update or weight gradient for
    them, and no backward pass at all below the lowest layer that learns."""
    frozen = [p.name for p in plan.layers.values() if p.frozen]
    if not frozen:
        return []
    skipped = [name for name in frozen if not plan.layers[name].needs_backward]
    note = (f"frozen (epsW and epsB 0): {', '.join(frozen)}: no update and no weight "
            "gradients")
    if skipped:
        note += (f"; no backward pass at all for {', '.join(skipped)} (no layer below "
                 "learns)")
    return [note]

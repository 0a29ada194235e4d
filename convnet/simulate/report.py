"""The simulation as text (after ``--print-plan``) and as JSON (``--print-plan=json``)."""

from __future__ import annotations

import statistics

from convnet.config.layer_types.memory_rules import CPU_KERNELS, KernelMemory
from convnet.config.model import NetConfig
from convnet.plan.ops import Plan
from convnet.plan.report import byte_unit, device_totals
from convnet.runtime.step.weights import shared_weight_layers
from convnet.simulate.costs import CostModel
from convnet.simulate.schedule import Simulation

SPLIT = ("compute", "copy", "allreduce", "idle")


def peak_memory(plan: Plan, net: NetConfig, costs: CostModel, precision: str = "fp32",
                shared: frozenset[str] | None = None,
                kernels: KernelMemory = CPU_KERNELS) -> list[int]:
    """Bytes each device holds at most: the plan's peak estimate (convnet.plan.memory) in
    ``precision``, with one copy of the weights for the ``shared`` layers: as the run
    shares them where the caller knows (the run's own devices: its --sync and backend,
    and ``kernels``, what they allocate), else as a synchronous run in one process on the
    predicted devices would (on the host's workers; not on devices of their own)."""
    if shared is None:
        shared = shared_weight_layers(plan, net, sliced_in_one_memory=lambda devices:
                                      costs.shares_cores, synchronous=True, processes=1)
    return [t.peak_bytes for t in device_totals(plan, net, shared, kernels, precision)]


def unmodelled_text(modes: dict[str, str]) -> str | None:
    """What the prediction leaves out of a run whose replicated layers (``modes``: layer
    -> ``sync``, ``local:K`` or ``async:S``) do not all all-reduce every step: the
    simulator models the synchronous step only; None when they all do."""
    apart: dict[str, list[str]] = {}
    for layer, mode in modes.items():
        if mode != "sync":
            apart.setdefault(mode, []).append(layer)
    if not apart:
        return None
    groups = "; ".join(f"{mode} ({', '.join(layers)})" for mode, layers in apart.items())
    return (f"not modelled: {groups}; the step is predicted as under --sync sync, every "
            "replicated layer all-reduced every step")


def simulation_summary(sim: Simulation, costs: CostModel, plan: Plan, net: NetConfig,
                       peaks: list[int] | None = None,
                       modes: dict[str, str] | None = None) -> dict:
    """The JSON of the prediction; ``peaks``: each device's peak memory (:func:`peak_memory`
    of the run, else of a synchronous float32 run); ``modes``: the run's replicated
    layers' sync modes (``not_modelled``: :func:`unmodelled_text`)."""
    link, host = costs.link, costs.profile.host
    return {
        "device_kind": costs.kind.name,
        "assumed": costs.kind.assumed,
        "kind_source": costs.kind.source,
        "link": {"name": link.name, "bandwidth": link.bandwidth, "latency": link.latency,
                 "source": link.source},
        "speed_over_profiled": costs.speed,
        "host": {"cores": host.cores, "gemm_flops": host.gemm_flops,
                 "copy_bandwidth": host.copy_bandwidth},
        "dispatch_seconds_per_task": costs.profile.dispatch,
        "start_wake_seconds": costs.profile.start_wake,
        "wake_seconds": costs.profile.wake,
        "contention_median": (statistics.median(costs.profile.contention.values())
                              if costs.profile.contention else 1.0),
        "profile_shard_size": costs.profile.shard_size,
        "profile_small_shard_size": costs.profile.small_shard_size,
        "profile_rounds": costs.profile.rounds,
        "profile_run_share": costs.profile.run_share,
        "contention_measured": bool(costs.profile.contention),
        "side_by_side_rounds": costs.profile.side_by_side_rounds,
        "earlier_side_by_side_profiles": costs.profile.earlier_profiles,
        "profiled_step_seconds": costs.profile.step_seconds,
        "step_seconds": sim.step_seconds,
        "images_per_second": sim.images_per_second,
        "not_modelled": unmodelled_text(modes or {}),
        "devices": [{"device": s.device, **{k: getattr(s, k) for k in SPLIT},
                     "peak_memory_bytes": peak}
                    for s, peak in zip(sim.devices, peaks or peak_memory(plan, net, costs))],
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def side_by_side_line(profile) -> str:
    """What CPU workers sharing the host's cores cost each other, and where the figures
    are from: this profile's data-parallel steps, earlier profiles of the net on this
    machine (convnet.app.prediction.side_by_side), or neither."""
    earlier = (f"{profile.earlier_profiles} earlier profile(s) of this net on this machine"
               if profile.earlier_profiles else "")
    apart = ("its workers never ran side by side in this profile (other work kept them "
             "taking turns on one core)")
    if profile.contention:
        contention = statistics.median(profile.contention.values())
        if not profile.side_by_side_rounds:
            source = f"measured earlier: {apart}; the median of {earlier}"
        else:
            source = (f"measured: the net replicated on {profile.host.cores} cores in "
                      f"{profile.side_by_side_rounds} of {profile.parallel_rounds} round(s)"
                      + (f", the median with {earlier}" if earlier else ""))
        return (f"workers slow each other by {contention:.2f}x (median over operations), "
                f"a worker takes {_ms(profile.start_wake)} ms to start a step and "
                f"{_ms(profile.wake)} ms to wake from a wait [{source}]")
    if profile.parallel_rounds:
        return (f"workers slow each other by 1.00x and wake at once [assumed: {apart}, and "
                "no earlier profile of this net on this machine measured it; the step "
                "may be predicted short]")
    return ("workers slow each other by 1.00x and wake at once [assumed: not measured for "
            "this net, which was profiled as placed or on one core]")


def figure_lines(costs: CostModel, plan: Plan) -> list[str]:
    """What the prediction rests on, each figure labelled: [measured] on this machine,
    [fitted] from measurements (a line through two profiled sizes, or the simulation
    built on them), or [assumed] (not measured here)."""
    kind, link, profile = costs.kind, costs.link, costs.profile
    lines = [f"compute: each operation timed at {profile.small_shard_size:g} and "
             f"{profile.shard_size:g} cases per shard, medians over {profile.rounds} round(s) [measured]; a line "
             f"through the two sizes gives it at {plan.piece_size:g} cases"
             f"{' (one micro-batch)' if plan.micro_batches > 1 else ''} [fitted]"]
    if 1.0 - profile.run_share >= 0.005:  # what rounds to 1% or more
        lines.append(f"other work on the machine held a core for {1 - profile.run_share:.0%} "
                     f"of the time the profile could run (median over its blocks); each "
                     f"task is timed less its wait for a core, the parallel workers' "
                     f"blocks scaled to the time they really ran [measured]")
    if kind.assumed:
        lines.append(f"device kind '{kind.name}': {kind.source}; compute {costs.speed:.3g}x "
                     "the profiled host's [assumed]")
    if costs.shares_cores:
        lines.append(side_by_side_line(profile))
    measured = link.source.startswith("measured")
    lines.append(f"transfers over {link.name}: {link.bandwidth / 1e9:.3g} GB/s, "
                 f"{link.latency * 1e6:g} us each ({link.source}) "
                 f"[{'measured bandwidth; latency assumed' if measured else 'assumed'}]")
    return lines


def simulation_text(sim: Simulation, costs: CostModel, plan: Plan, net: NetConfig,
                    peaks: list[int] | None = None,
                    modes: dict[str, str] | None = None) -> str:
    """The text of the prediction (``peaks`` and ``modes`` as for
    :func:`simulation_summary`)."""
    lines = ["Simulation (one training step)"]
    lines += [f"  {line}" for line in figure_lines(costs, plan)]
    lines.append(f"  predicted step {_ms(sim.step_seconds)} ms, {sim.images_per_second:,.0f} "
                 f"images/s (minibatch {plan.minibatch}) [fitted: simulated from the figures "
                 "above]")
    unmodelled = unmodelled_text(modes or {})
    if unmodelled is not None:
        lines.append(f"  {unmodelled}")
    peaks = peaks or peak_memory(plan, net, costs)
    unit, size = byte_unit(peaks)
    rows = [[str(s.device)] + [_ms(getattr(s, k)) for k in SPLIT] + [f"{peak / size:.1f}"]
            for s, peak in zip(sim.devices, peaks)]
    header = ["device"] + [f"{k} (ms)" for k in SPLIT] + [f"peak memory ({unit})"]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)))
    lines.append("  times per device [fitted: simulated]; peak memory: the plan's estimate "
                 "(convnet/plan/memory.py), not measured")
    return "\n".join(lines)

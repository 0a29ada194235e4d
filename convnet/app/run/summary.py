"""What a training run says before its first step and after its last.

The banner names the config and its scheme, the backend and how logical
devices map to physical ones, the minibatch as it will really be cut, the
data, and where things are saved, so a person knows what is being measured
before waiting for it.  The closing summary gives the final and best test
error, the time, every file written and the command that trains further.
"""

from __future__ import annotations

import os
from pathlib import Path

from convnet.app.invocation import resume_command, shown_path
from convnet.data.ranges import format_range
from convnet.plan.ops import Plan


def cpu_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def oversubscription_warning(backend: str, num_devices: int) -> str | None:
    """A warning when logical CPU devices (one worker thread each) outnumber the cores:
    they then take turns, and timings measure the sharing rather than the scheme."""
    cores = cpu_cores()
    if backend != "cpu" or num_devices <= cores:
        return None
    return (f"{num_devices} logical CPU devices share {cores} core(s): they take turns, so "
            f"times and speedups measure that sharing, not the scheme")


def idle_devices_warning(plan: Plan) -> str | None:
    """A warning when ``--gpu`` gives logical devices that no layer's ``gpu=`` list names:
    they stay idle (a longer list does not spread a config wider than its ``gpu=`` lists)."""
    idle = sorted(set(range(plan.num_devices)) - set(plan.used_devices))
    if not idle:
        return None
    return (f"logical device(s) {format_range(idle)} of the {plan.num_devices} that --gpu "
            f"gives run no layer and stay idle: the config's gpu= lists name "
            f"{format_range(list(plan.used_devices))}")


def device_line(backend: str, plan: Plan, ranks: tuple[int, tuple[str, ...]] | None = None) -> str:
    """``logical -> physical`` for every device, in the backend's words; under mpiexec
    (``ranks``: devices per rank and every rank's host) with the rank and host of each,
    as in the processes table of ``--print-plan`` (physical numbers repeat across ranks)."""
    kind = "GPU" if backend == "cuda" else "CPU worker"

    def where(device: int) -> str:
        if ranks is None:
            return ""
        rank = device // ranks[0]
        return f"rank {rank} on {ranks[1][rank]}: "

    pairs = ", ".join(f"{d} -> {where(d)}{kind} {p}" for d, p in enumerate(plan.physical_devices))
    if ranks is None:
        cores = f" on {cpu_cores()} core(s)" if backend == "cpu" else ""
        return f"{backend} backend, logical device -> physical: {pairs}{cores}"
    cores = f" ({cpu_cores()} core(s) on rank 0's host)" if backend == "cpu" else ""
    return (f"{backend} backend on rank 0, logical device -> process and physical device: "
            f"{pairs}{cores}")


def minibatch_line(plan: Plan, batch_cases: int) -> str:
    """The minibatch as the run cuts it (capped at one data batch)."""
    mini = min(plan.minibatch, batch_cases)
    capped = f" (--mini {plan.minibatch} capped at a data batch)" if mini < plan.minibatch else ""
    shards = (f" = {plan.num_shards} shards of {mini // plan.num_shards}"
              if plan.num_shards > 1 else "")
    each = "each shard " if plan.num_shards > 1 else ""
    micro = (f", {each}in {plan.micro_batches} micro-batches (a pipeline)"
             if plan.micro_batches > 1 else "")
    return (f"minibatch {mini} cases{capped}{shards}{micro}, {plan.num_passes} pass(es) per "
            f"minibatch")


def start_banner(layer_def: Path, plan: Plan, backend: str, provider, batch_cases: int,
                 epochs: int, save_dir: Path | None, files: list[str],
                 ranks: tuple[int, tuple[str, ...]] | None = None,
                 device_note: str | None = None) -> list[str]:
    """The banner; ``device_note`` says how the devices were placed when nobody said
    (:func:`convnet.runtime.devices.backends.gpus_for_backend`)."""
    lines = [f"training {shown_path(layer_def)}: {plan.scheme} scheme; "
             f"{minibatch_line(plan, batch_cases)}",
             device_line(backend, plan, ranks) + (f" ({device_note})" if device_note else ""),
             f"data: {provider.name}, train batches {format_range(provider.train_batches)} "
             f"({batch_cases} cases in the first), test {format_range(provider.test_batches)}"
             f"{_trained_on_too(provider)}; {epochs} epoch(s)"]
    if save_dir is not None:
        lines.append(f"saving to {shown_path(save_dir)}/ ({', '.join(files)})")
    return lines


def _trained_on_too(provider) -> str:
    """The test batches that are also trained on (cuda-convnet's last step trains on
    every batch), whose test error is then not a held-out error; "" when none are."""
    both = sorted(set(provider.train_batches) & set(provider.test_batches))
    return f" ({format_range(both)} also trained on: not held out)" if both else ""


def data_wait_line(data_wait: float, train_seconds: float) -> str:
    """The time the training loop waited for its next batch, and its share of the loop."""
    share = data_wait / max(data_wait + train_seconds, 1e-9)
    return (f"waited {data_wait:.2f} s for training data: {100 * share:.1f}% of "
            f"{data_wait + train_seconds:.1f} s of training")


def where_text(epoch: int, batch_index: int, batches_per_epoch: int) -> str:
    """Where a saved run stands, e.g. 'end of epoch 3' or 'epoch 4, 2 of 5 batches done'."""
    if batch_index >= batches_per_epoch:
        return f"end of epoch {epoch}"
    if batch_index == 0:
        return f"end of epoch {epoch - 1}" if epoch > 1 else "start"
    return f"epoch {epoch}, {batch_index} of {batches_per_epoch} batches done"


def closing_summary(seconds: float, final: tuple[int, int, float] | None,
                    best: tuple[int, int, float] | None, saved: list[Path],
                    save_dir: Path | None, epochs: int, processes: int = 1,
                    kept: str | None = None) -> list[str]:
    """The closing lines; ``kept``: the line saying where a checkpoint this run did not
    replace stands, before the command that trains further."""
    lines = []
    if final is not None:
        text = f"finished in {seconds:.1f} s: final test error {100 * final[2]:.2f}%"
        if best is not None and best[2] < final[2]:
            text += f", best {100 * best[2]:.2f}% (epoch {best[0]}, batch {best[1]})"
        lines.append(text)
    if saved:
        lines.append("saved: " + ", ".join(shown_path(p) for p in saved))
    if kept is not None:
        lines.append(kept)
    if save_dir is not None and saved:
        lines.append(f"to train further: {resume_command(save_dir, epochs * 2, processes)}")
    return lines

"""What a ``--compare`` run concludes: speedups, the winner, and why a result may mislead.

Every scheme is ranked by one figure, the training run's images per second
(:attr:`ConfigResult.train_images_per_sec`, the median over the run's test
intervals): it covers every minibatch of the run.  The profiled steps after
training time a single minibatch with per-operation timing switched on; they
give the split of a step into compute, copies, all-reduce and idle, not the
ranking.  Speedups are against the config that runs on one device (the
first such), and efficiency is the speedup per device used.
"""

from __future__ import annotations


def baseline(results):
    """The first config that uses one device, or None."""
    return next((r for r in results if r.devices_used == 1), None)


def speedup(result, base) -> float | None:
    if base is None or not base.train_images_per_sec:
        return None
    return result.train_images_per_sec / base.train_images_per_sec


def efficiency(result, base) -> float | None:
    s = speedup(result, base)
    return None if s is None else s / result.devices_used


def idle_share(result) -> float:
    """The share of the profiled step its devices spent waiting, over the devices it uses
    (a device the config leaves unused is not waiting for anything)."""
    used = [t for t in result.times if t.busy > 0]
    total = sum(t.busy + t.idle for t in used)
    return sum(t.idle for t in used) / total if total else 0.0


def verdict(results, fmt_bytes) -> str:
    """One line: the fastest scheme, its speedup, and what it pays for it."""
    if not results:
        return ""
    best = max(results, key=lambda r: r.train_images_per_sec)
    base = baseline(results)
    text = f"fastest: {best.name} ({best.scheme}), {best.train_images_per_sec:.0f} img/s"
    s = speedup(best, base)
    if s is not None and best is not base:
        text += (f", {s:.2f}x the one-device {base.name} on {best.devices_used} device(s) "
                 f"({100 * efficiency(best, base):.0f}% efficiency)")
    costs = []
    if best.copy_bytes:
        costs.append(f"copies {fmt_bytes(best.copy_bytes)}")
    if best.allreduce_bytes:
        costs.append(f"all-reduces {fmt_bytes(best.allreduce_bytes)}")
    if best.is_async and best.increment_bytes:
        costs.append(f"increment sends {fmt_bytes(best.increment_bytes)}")
    if costs:
        text += f"; it pays {' and '.join(costs)} per minibatch"
    if best.times:
        text += f"{'; its' if not costs else ', and its'} devices idle " \
                f"{100 * idle_share(best):.0f}% of a step"
    return text


def _update_cases(result) -> dict[str, tuple[int, int]]:
    """(parameter count, cases per weight update) of every weight layer."""
    plan = result.plan
    return {name: (p.param_count, p.update_period * plan.minibatch // plan.num_passes)
            for name, p in plan.layers.items() if p.param_count}


def equivalence_warnings(results) -> list[str]:
    """Where a config trains another net than the first one (other layers or weights, or
    weights updated after another number of cases), so its errors do not compare."""
    if len(results) < 2:
        return []
    first, warnings = results[0], []
    reference = _update_cases(first)
    for r in results[1:]:
        mine = _update_cases(r)
        if set(mine) != set(reference) or any(mine[k][0] != reference[k][0] for k in mine):
            warnings.append(f"{r.name} has other weight layers than {first.name}; its costs and "
                            "errors are not those of the same net")
            continue
        for name, (_, cases) in sorted(mine.items()):
            if cases != reference[name][1]:
                warnings.append(f"{r.name} updates '{name}' every {cases} cases, {first.name} "
                                f"every {reference[name][1]}: not the same training (set "
                                f"updatePeriod in {r.layer_params.name})")
                break
    return warnings

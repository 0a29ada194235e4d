"""What a ``--compare`` run concludes: speedups, the winner, and why a result may mislead.

The schemes are timed in interleaved rounds after training
(:mod:`convnet.app.comparison.rounds`), and every figure here reads them paired,
round by round, as :mod:`convnet.app.comparison.noise` does: the fastest is the config
ahead of the others in the rounds (its rule), and every config's step is its round
ratio to the same reference config (:func:`~convnet.app.comparison.noise.paired_steps`),
from which img/s, speedups and the ranking follow (the medians of each config's own
rounds can say a config is faster while it lost most rounds).  The
profiled steps time a single minibatch with per-operation timing switched on;
they give the split of a step into compute, copies, all-reduce and idle, not
the ranking.  Speedups are against the config that runs on one device (the
first such), and efficiency is the speedup per device used; one above 100% is
explained (within the noise, or a real superlinear gain).  Beside the measured
ranking stands the simulator's (:attr:`ConfigResult.predicted_seconds`), with a
line where the two disagree.
"""

from __future__ import annotations

from convnet.app.comparison.noise import DEFAULT_MIN_LEAD, decide, leader, pair


def baseline(results):
    """The first config that uses one device, or None."""
    return next((r for r in results if r.devices_used == 1), None)


def speedup(result, base) -> float | None:
    """``result``'s img/s over ``base``'s (both from the steps read from the rounds
    paired); None without a one-device config."""
    if base is None or not base.images_per_sec:
        return None
    return result.images_per_sec / base.images_per_sec


def efficiency(result, base) -> float | None:
    s = speedup(result, base)
    return None if s is None else s / result.devices_used


def idle_share(result) -> float:
    """The share of the profiled step its devices spent waiting, over the devices it uses
    (a device the config leaves unused is not waiting for anything)."""
    used = [t for t in result.times if t.busy > 0]
    total = sum(t.busy + t.idle for t in used)
    return sum(t.idle for t in used) / total if total else 0.0


def fastest(results):
    """The config ahead of the others in the rounds (:func:`noise.leader`)."""
    if len(results) < 2:
        return results[0]
    name = leader({r.name: r.round_seconds for r in results})
    return next(r for r in results if r.name == name)


def verdict_lines(results, fmt_bytes, min_lead: float = DEFAULT_MIN_LEAD) -> list[str]:
    """The decision (a clear winner, by more than ``min_lead``, or not), what the winner
    pays, efficiencies above 100% explained, and the simulator's ranking beside the
    measured one."""
    if not results:
        return []
    decision = decide({r.name: r.round_seconds for r in results}, min_lead)
    lines = [decision.text() if decision else f"one config: {results[0].name}"]
    clear = decision is None or decision.clear
    lines.append(_winner_line(fastest(results), baseline(results), fmt_bytes, clear))
    lines += superlinear_notes(results)
    lines += prediction_lines(results)
    return lines


def _winner_line(best, base, fmt_bytes, clear: bool = True) -> str:
    """What the fastest (``clear``) or the config ahead in the rounds but within the noise
    of others measures and pays."""
    what = "fastest" if clear else "ahead in the rounds, within the noise"
    text = (f"{what}: {best.name} ({best.scheme}), {1000 * best.median_step_seconds:.2f} ms "
            f"per step, {best.images_per_sec:.0f} img/s")
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
                f"{100 * idle_share(best):.0f}% of a profiled step"
    return text


def superlinear_notes(results) -> list[str]:
    """A line for every config whose efficiency reads above 100%: within the noise of its
    ratio to the one-device config, or beyond it (a real superlinear gain)."""
    base, notes = baseline(results), []
    for r in results:
        e = efficiency(r, base)
        if e is None or e <= 1.0 or r is base:
            continue
        duel = pair(r.name, r.round_seconds, base.name, base.round_seconds)
        beyond = duel.interval is not None and duel.interval[0] > r.devices_used
        why = ("beyond the noise: each device works on a smaller shard, whose data stays "
               "in the caches where a whole minibatch's does not (a superlinear speedup)"
               if beyond else
               f"not beyond this machine's noise (the spread of its round ratios to "
               f"{base.name} ±{100 * duel.noise:.1f}%): read it as at most 100%")
        notes.append(f"efficiency above 100%: {r.name} {100 * e:.0f}%, {why}")
    return notes


def prediction_lines(results) -> list[str]:
    """The simulator's ranking beside the measured one, and where they disagree."""
    predicted = [r for r in results if r.predicted_seconds is not None]
    if len(predicted) < 2:
        return []
    by_prediction = sorted(predicted, key=lambda r: r.predicted_seconds)
    by_measure = sorted(predicted, key=lambda r: r.median_step_seconds)
    lines = ["predicted (simulator, one profile of the net): " + " < ".join(
                 f"{r.name} {1000 * r.predicted_seconds:.2f} ms" for r in by_prediction),
             "measured (the rounds, paired):                 " + " < ".join(
                 f"{r.name} {1000 * r.median_step_seconds:.2f} ms" for r in by_measure)]
    rank = {r.name: i for i, r in enumerate(by_prediction)}
    for i, a in enumerate(by_measure):
        later = [b for b in by_measure[i + 1:] if rank[b.name] < rank[a.name]]
        if later:
            lines.append(f"the prediction disagrees with the measurement: it ranks "
                         f"{later[0].name} before {a.name}")
            break
    return lines


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

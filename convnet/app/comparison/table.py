"""The text of a ``--compare`` run: one table per config, one per config and device.

Every number is formatted by one of the ``fmt_*`` functions below from the
exact figure in :class:`convnet.app.comparison.result.ConfigResult` (planner totals, log
rows, profiled step times), so a test can recompute each cell.
"""

from __future__ import annotations

from convnet.app.comparison.result import trained
from convnet.app.comparison.noise import DEFAULT_MIN_LEAD
from convnet.app.comparison.verdict import baseline, efficiency, speedup, verdict_lines
from convnet.plan.report import human_bytes


def fmt_bytes(n: float) -> str:
    return human_bytes(n)


def fmt_rate(images_per_sec: float) -> str:
    return f"{images_per_sec:.0f}"


def fmt_seconds(seconds: float) -> str:
    return f"{seconds:.1f}"


def fmt_ms(seconds: float) -> str:
    return f"{1000 * seconds:.2f}"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def fmt_share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def fmt_spread(value: float) -> str:
    return f"±{100 * value:.1f}%"


def fmt_cost(cost: float) -> str:
    return f"{cost:.4f}"


def fmt_error(error: float) -> str:
    return f"{100 * error:.2f}%"


#: The cell of a figure that a ``--sync async:S`` run cannot have (no lockstep step to
#: profile, no all-reduce).
ABSENT = "n/a"

#: The cell of a figure a config whose training failed never measured.
UNMEASURED = "-"


SCHEME_HEADER = ["config", "scheme", "passes", "devices used", "copied", "all-reduced",
                 "step ms", "spread", "img/s", "speedup", "efficiency", "predicted ms",
                 "wall s", "train cost", "train err", "test cost", "test err"]
#: The column added after SCHEME_HEADER's when some config's training failed: why.
NOTE = "note"
DEVICE_HEADER = ["config", "device", "param memory", "activations (est.)", "sent", "received",
                 "compute", "copy", "all-reduce", "idle"]


def scheme_rows(results) -> list[list[str]]:
    """One row per config; one whose training failed keeps the planner's cells, dashes
    for the measured ones, and says why in a last column (there only when one failed)."""
    rows = []
    base = baseline(trained(results))
    noted = any(r.failure for r in results)
    for r in results:
        planned = [r.name, r.scheme, str(r.num_passes),
                   f"{r.devices_used} of {r.plan.num_devices}", fmt_bytes(r.copy_bytes),
                   ABSENT if r.is_async else fmt_bytes(r.allreduce_bytes)]
        if r.failure:
            rows.append(planned + [UNMEASURED] * (len(SCHEME_HEADER) - len(planned))
                        + [r.failure])
            continue
        final = r.final
        rows.append(planned + [
            fmt_ms(r.median_step_seconds), fmt_spread(r.step_spread), fmt_rate(r.images_per_sec),
            fmt_ratio(speedup(r, base)), fmt_share(efficiency(r, base)),
            ABSENT if r.predicted_seconds is None else fmt_ms(r.predicted_seconds),
            fmt_seconds(r.wall_seconds), fmt_cost(final["cost"]), fmt_error(final["error"]),
            fmt_cost(final["test_cost"]), fmt_error(final["test_error"])] + [""] * noted)
    return rows


def device_rows(results) -> list[list[str]]:
    """One row per device a config uses (a one-device config draws no empty rows); the
    time split as shares of the profiled step."""
    rows = []
    for r in results:
        traffic = r.device_traffic
        for d in r.used_devices:
            totals = r.totals[d]
            if r.failure:
                timed = [UNMEASURED] * 4
            elif r.lockstep and r.times:
                t, step = r.times[d], r.mean_step_seconds
                timed = [fmt_share(part / step) for part in (t.compute, t.copy, t.allreduce,
                                                             t.idle)]
            else:
                timed = [ABSENT] * 4
            rows.append([r.name, f"{totals.device} ({totals.physical})",
                         fmt_bytes(totals.param_bytes), fmt_bytes(totals.activation_bytes),
                         fmt_bytes(traffic[d][0]), fmt_bytes(traffic[d][1])] + timed)
    return rows


def format_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Columns two spaces apart under a rule of dashes; text left, numbers right."""
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    numeric = [all(_numeric(row[i]) for row in rows) and bool(rows) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.rjust(w) if num else c.ljust(w)
                         for c, w, num in zip(cells, widths, numeric)).rstrip()

    return [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _numeric(cell: str) -> bool:
    if cell in ("-", ABSENT):
        return True
    text = cell.replace("%", "").lstrip("±").replace(".", "", 1).replace(" of ", "").rstrip("x")
    for unit in (" B", " KiB", " MiB", " GiB"):
        text = text.replace(unit, "")
    return text.isdigit() or (text.startswith("-") and text[1:].isdigit())


def comparison_table(results, warnings: list[str] = (),
                     min_lead: float = DEFAULT_MIN_LEAD) -> str:
    """The verdict (a clear winner leads by more than ``min_lead``), the two tables, what
    their columns mean, and ``warnings`` (what may make the comparison mislead)."""
    if not results:
        return "(nothing compared)"
    first, done = results[0], trained(results)
    rounds = max((len(r.round_seconds) for r in done), default=0)
    steps = max((len(r.step_seconds) for r in done), default=0)
    modes = {r.sync for r in results}
    shared_mode = f", --sync {first.sync}" if modes != {"sync"} and len(modes) == 1 else ""
    lines = [f"Schemes compared (minibatch {first.plan.minibatch}, "
             f"--gpu {','.join(map(str, first.plan.physical_devices))}{shared_mode}; "
             f"step: {rounds} interleaved rounds, read paired)"]
    failed = [r for r in results if r.failure]
    lines += format_table(SCHEME_HEADER + [NOTE] * bool(failed), scheme_rows(results))
    lines += [""] + [f"{r.name}: training failed ({r.failure}), left out of the timing, "
                     "the ranking and the picture; the planner's figures stand"
                     for r in failed]
    lines += verdict_lines(done, fmt_bytes, min_lead) + [f"warning: {w}" for w in warnings]
    lines += ["", "Per device used (memory and traffic per minibatch from the planner; the "
                  f"profiled split of a step, % of the mean of {steps} profiled steps)"]
    lines += format_table(DEVICE_HEADER, device_rows(results))
    lines += ["", "copied: activations and gradients copied between devices; all-reduced: "
                  "ring all-reduce traffic, summed over devices.",
              "step ms: seconds per training step from the rounds after training (each round "
              "times every config in turn on the same minibatch), read paired: the reference "
              "config's median step times the median over the rounds of this config's step "
              "over the reference's (the reference: the config faster in at least half the "
              "rounds against the most others); img/s, speedup and the ranking use it. "
              "spread: half the interquartile range of a config's rounds, as a share of their "
              "median; the verdict's spread is the same measure of the round ratios (smaller: "
              "a slow round slows every config).",
              "speedup: img/s over the one-device config's; efficiency: speedup per "
              "device used.",
              "predicted ms: the simulator's step from one short profile of the net "
              "(docs/SIMULATE.md).",
              "wall s, costs and errors: the run log's last row (train figures are means over "
              "its last test interval).",
              "param memory: weights, gradients and momentum (float32; replicas under "
              "--sync sync on CPU devices share one copy of weights and momentum, held on "
              "the first replica's device); activations: the plan's estimate of what a "
              "training step holds at the device's peak.",
              "compute: load + forward + backward + update; copy: activation and gradient "
              "copies; all-reduce includes waiting for the other replicas; idle: the rest of "
              "the step (waiting for inputs from other devices); shares of a step profiled "
              "with per-operation timing on, which slows it: the split, not the ranking."]
    if any(r.is_async for r in results):
        lines.append(f"{ABSENT} (--sync async runs): no all-reduce: each replica sends the "
                     "increment of each of its updates to the other replicas, and sent/received "
                     "count those per minibatch (a data-parallel net's from the shards each "
                     "replica trained); and a data-parallel net's replicas have no lockstep "
                     "step to profile per operation (their step ms times queued steps until "
                     "drained).")
    return "\n".join(lines)

"""The picture of a ``--compare`` run (matplotlib, Agg, no display needed).

One PNG, top to bottom:

* test error against wall time, one line per config (from the run logs;
  ``--compare`` tests after every data batch unless ``--test-freq`` says
  otherwise, so each line has a point per batch);
* the step time that ranks the configs (the interleaved rounds read paired, with
  the config's own rounds' interquartile range as an error bar), the same figure as
  the table's ``step ms``;
* for each config, a Gantt chart of one profiled training step (per-operation
  timing on, so it is longer than the ranked step; its title gives both): one
  row per device the config uses, coloured spans for compute (load, forward,
  backward, update), copies and all-reduces; the grey between spans is time a
  device waits.  All the Gantt charts share one time axis, so their lengths
  compare.
  A ``--sync async:S`` run has no lockstep step, so its panel says so and
  shows, per device, how many of the run's shards its replica trained.

A config whose training failed has nothing measured to draw: ``compare`` passes
only the configs that trained (the table says which failed).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from convnet.errors import ConvnetError
from convnet.outputs import write_output
from convnet.runtime.sync.replica_plans import async_replica_devices

DPI = 100
WIDTH_IN = 13.0
TOP_IN = 3.8
GANTT_BASE_IN = 0.9
GANTT_DEVICE_IN = 0.42
LEGEND_IN = 0.35  # the op-kind legend under the Gantt charts

#: Colour of each op kind in the Gantt charts (blues: compute; orange: copies; red: all-reduce).
KIND_COLOURS = {"load": "#a6bddb", "forward": "#4c72b0", "backward": "#233d6e",
                "update": "#7b9fd6", "forwardstats": "#8172b2", "backwardstats": "#5a4a8a",
                "copy": "#ee9a4d", "gradcopy": "#b35806", "allreduce": "#c44e52",
                "statsreduce": "#e377c2"}
KIND_LABELS = {"load": "load", "forward": "forward", "backward": "backward", "update": "update",
               "forwardstats": "batch statistics", "backwardstats": "gradient statistics",
               "copy": "copy", "gradcopy": "gradient copy", "allreduce": "all-reduce",
               "statsreduce": "statistics combined"}
WAIT_COLOUR = "#e8e8e8"


def figure_size(results) -> tuple[float, float]:
    """(width, height) in inches of the picture for these results."""
    gantt = sum(GANTT_BASE_IN + GANTT_DEVICE_IN * _rows(r) for r in results)
    # A whole number of quarter inches is exact in binary, so the PNG is exactly size * DPI.
    return WIDTH_IN, math.ceil((TOP_IN + gantt + LEGEND_IN) * 4) / 4


def figure_pixels(results) -> tuple[int, int]:
    """(width, height) in pixels of the PNG."""
    w, h = figure_size(results)
    return round(w * DPI), round(h * DPI)


def comparison_figure(results):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figure_size(results), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    heights = [TOP_IN] + [GANTT_BASE_IN + GANTT_DEVICE_IN * _rows(r) for r in results]
    grid = fig.add_gridspec(len(heights), 2, height_ratios=heights, width_ratios=[3, 2])
    colours = [f"C{i % 10}" for i in range(len(results))]
    _error_curves(fig.add_subplot(grid[0, 0]), results, colours)
    _step_bars(fig.add_subplot(grid[0, 1]), results, colours)
    span = max((r.timeline_seconds for r in results), default=0.0) * 1000 * 1.02 or 1.0
    lockstep = [row for row, r in enumerate(results, start=1) if r.lockstep]
    first = None
    for row, result in enumerate(results, start=1):
        if not result.lockstep:
            _async_panel(fig.add_subplot(grid[row, :]), result)
            continue
        ax = fig.add_subplot(grid[row, :], sharex=first)
        first = first or ax
        _gantt(ax, result, span, last=row == lockstep[-1])
    if first is not None:
        _kind_legend(fig, results)
    return fig


def write_comparison_png(results, path: Path) -> Path:
    """Draw the comparison into ``path`` (a PNG, replaced atomically, never through a link)."""
    fig = comparison_figure(results)
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_output(path, lambda file: fig.savefig(file, format="png", dpi=DPI))
    except OSError as error:
        raise ConvnetError(f"cannot write the picture {path}: {error.strerror}") from None
    return path


def _error_curves(ax, results, colours) -> None:
    for number, (result, colour) in enumerate(zip(results, colours), start=1):
        times = [row["cumulative_time"] for row in result.log_rows]
        errors = [100 * row["test_error"] for row in result.log_rows]
        ax.plot(times, errors, marker="o", markersize=3, color=colour,
                label=f"{number}: {result.name} ({result.scheme})")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("test error (%)")
    ax.set_title("Test error against wall time")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.tick_params(axis="x", pad=7)  # keeps "0" of both axes apart in the corner
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _rows(result) -> int:
    """Rows of a config's panel: the devices it uses."""
    return len(result.used_devices)


def _step_bars(ax, results, colours) -> None:
    xs = range(len(results))
    steps = [1000 * r.median_step_seconds for r in results]
    # the rounds' quartiles about the paired step, which may lie outside them
    errors = [[1000 * max(r.median_step_seconds - _quartile(r, 0), 0.0) for r in results],
              [1000 * max(_quartile(r, 2) - r.median_step_seconds, 0.0) for r in results]]
    ax.bar(list(xs), steps, 0.6, color=colours, yerr=errors, capsize=3,
           error_kw={"elinewidth": 0.8})
    # The numbers of the error panel's legend (names as long as the ImageNet configs'
    # would overlap one another under narrow bars), the step under each: a label above
    # a bar would cross its error bar.
    ax.set_xticks(list(xs), [f"{i}: {r.scheme}\n{v:.2f} ms" for i, (r, v)
                             in enumerate(zip(results, steps), start=1)], fontsize=8)
    ax.set_ylabel("ms per training step")
    ax.set_title("Step time (ranks the configs): the interleaved\n"
                 "rounds read paired, bar = the rounds' quartiles", fontsize=9)


def _quartile(result, index: int) -> float:
    """The first (0) or third (2) quartile of a config's rounds (its median with one)."""
    if len(result.round_seconds) < 2:
        return result.median_step_seconds
    return statistics.quantiles(result.round_seconds, n=4, method="inclusive")[index]


def _gantt(ax, result, span_ms: float, last: bool) -> None:
    devices = result.used_devices
    row = {d: i for i, d in enumerate(devices)}
    step_ms = 1000 * result.timeline_seconds
    for i in range(len(devices)):
        ax.broken_barh([(0, step_ms)], (i - 0.4, 0.8), facecolors=WAIT_COLOUR)
    spans: dict[tuple[int, str], list] = {}
    for t in result.timeline:
        if t.device in row:
            spans.setdefault((row[t.device], t.kind), []).append(
                (1000 * t.start, 1000 * (t.end - t.start)))
    for (i, kind), bars in sorted(spans.items()):
        ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=KIND_COLOURS.get(kind, "black"),
                       edgecolors="white", linewidth=0.3)
    ax.set_yticks(range(len(devices)),
                  [f"device {d} ({result.plan.physical_devices[d]})" for d in devices],
                  fontsize=8)
    ax.set_ylim(len(devices) - 0.5, -0.5)
    ax.set_xlim(0, span_ms)
    ax.set_title(f"{result.name}: {result.scheme}, {result.num_passes} pass(es); step "
                 f"{1000 * result.median_step_seconds:.2f} ms (from the rounds, paired); "
                 f"profiled split of a step of {result.profile_cases} cases, "
                 f"per-op timing on = {step_ms:.1f} ms", fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.3)
    if last:
        ax.set_xlabel("time within the profiled step (ms); grey = waiting")
    else:
        ax.tick_params(labelbottom=False)


def _async_panel(ax, result) -> None:
    """An async run's panel: no step to draw, and why; per device it uses, the shards its
    replica took from the shared queue (a faster replica takes more)."""
    devices = result.used_devices
    replicas = dict(zip(async_replica_devices(result.plan) or (), result.replica_shards))
    total = sum(result.replica_shards) or 1
    for i, d in enumerate(devices):
        text = (f"replica trained {replicas[d]} of the run's {total} shards "
                f"({100 * replicas[d] / total:.0f}%)" if d in replicas else "no replica")
        ax.text(0.01, i, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8)
    ax.set_yticks(range(len(devices)),
                  [f"device {d} ({result.plan.physical_devices[d]})" for d in devices],
                  fontsize=8)
    ax.set_ylim(len(devices) - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_title(f"{result.name}: {result.scheme}, --sync {result.sync}: asynchronous, "
                 f"no lockstep step to profile; step {1000 * result.median_step_seconds:.2f} "
                 "ms (from the rounds, paired)", fontsize=9, loc="left")


def _kind_legend(fig, results) -> None:
    """Under the Gantt charts, outside every axes, so it covers no title or bar."""
    from matplotlib.patches import Patch

    kinds = [k for k in KIND_COLOURS if any(t.kind == k for r in results for t in r.timeline)]
    handles = [Patch(color=KIND_COLOURS[k], label=KIND_LABELS[k]) for k in kinds]
    handles.append(Patch(color=WAIT_COLOUR, label="waiting"))
    fig.legend(handles=handles, ncols=len(handles), fontsize=8, loc="outside lower center",
               frameon=False)

"""The picture of one run's log: ``log.png`` next to ``log.csv``.

Two panels, cost (on a log scale once it spans more than a factor of 20) and error
(training means over each test interval, and the test result at its end), against
epochs: a row at the share of the epoch's batches trained when it was tested (rows
read back from a CSV, a resumed run's, the k-th of n rows of epoch e at e - 1 + k/n);
the title gives the config, the rows and the wall time so far.  The epoch axis has as
many ticks as fit in its width (matplotlib's ``MaxNLocator``, whole epochs once
there are more than a few), so its labels never run into each other, whether the run
is tested ten times in one epoch or once in each of 200.  Drawn only when matplotlib
is installed (the ``plot`` extra): training never needs it.  The run redraws it at
every test (:mod:`convnet.app.run.live_picture`).
"""

from __future__ import annotations

from pathlib import Path

from convnet.errors import ConvnetError
from convnet.outputs import write_output

PNG_NAME = "log.png"


def epoch_positions(epochs: list[int]) -> list[float]:
    """Where each row stands in epochs: the k-th of n rows of epoch e is at e - 1 + k/n."""
    counts: dict[int, int] = {}
    for e in epochs:
        counts[e] = counts.get(e, 0) + 1
    seen: dict[int, int] = {}
    out = []
    for e in epochs:
        seen[e] = seen.get(e, 0) + 1
        out.append(e - 1 + seen[e] / counts[e])
    return out


def log_figure(rows: list[dict], title: str):
    """The figure of ``rows`` (the log's rows, numbers as floats)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(10, 4), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    spread = epoch_positions([int(r["epoch"]) for r in rows])  # rows read from a CSV
    epochs = [r.get("epoch_position", at) for r, at in zip(rows, spread)]
    whole = bool(rows) and epochs[-1] >= 4  # whole-epoch ticks once there are a few
    marker = dict(marker="o", markersize=3) if len(rows) <= 60 else {}
    for ax, key, label, scale in ((fig.add_subplot(1, 2, 1), "cost", "cost", 1.0),
                                  (fig.add_subplot(1, 2, 2), "error", "error (%)", 100.0)):
        ax.plot(epochs, [scale * r[key] for r in rows], **marker,
                label="training (mean over the interval)")
        ax.plot(epochs, [scale * r[f"test_{key}"] for r in rows], **marker, label="test")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        if key == "cost" and _spans_decades(rows):
            ax.set_yscale("log")  # a falling cost's tail, not a flat line at zero
            ax.set_ylabel("cost (log scale)")
        ax.set_xlim(0, max(epochs[-1] if epochs else 1.0, 1.0))  # from the run's start
        ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", integer=whole))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    seconds = rows[-1]["cumulative_time"] if rows else 0.0
    fig.suptitle(f"{title}: {len(rows)} test(s), {seconds:.1f} s", fontsize=10)
    return fig


def _spans_decades(rows: list[dict]) -> bool:
    """Whether the costs are all positive and span more than a factor of 20."""
    costs = [r[k] for r in rows for k in ("cost", "test_cost")]
    return bool(costs) and min(costs) > 0 and max(costs) > 20 * min(costs)


def write_log_png(rows: list[dict], path: Path, title: str) -> Path:
    """Draw ``rows`` (the log's rows, numbers as floats) into ``path`` (replaced
    atomically: a link there is replaced, not followed)."""
    try:
        figure = log_figure(rows, title)
        write_output(path, lambda file: figure.savefig(file, format="png"))
    except OSError as error:
        raise ConvnetError(f"cannot write the picture {path}: {error.strerror}") from None
    return path

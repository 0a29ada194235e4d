"""The picture of one run's log: ``log.png`` next to ``log.csv``.

Two panels, cost and error (training means per interval, and the test
result at its end), against wall time; a second x axis on top gives the
epoch.  Written at the end of a run that has a save path, and only when
matplotlib is installed (the ``plot`` extra): training never needs it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    times = [r["cumulative_time"] for r in rows]
    epochs = epoch_positions([int(r["epoch"]) for r in rows])
    for ax, key, label, scale in ((fig.add_subplot(1, 2, 1), "cost", "cost", 1.0),
                                  (fig.add_subplot(1, 2, 2), "error", "error (%)", 100.0)):
        ax.plot(times, [scale * r[key] for r in rows], marker="o", markersize=3,
                label="training (mean over the interval)")
        ax.plot(times, [scale * r[f"test_{key}"] for r in rows], marker="s", markersize=3,
                label="test")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        if len(times) > 1 and times[-1] > times[0]:
            top = ax.secondary_xaxis("top", functions=(
                lambda t: np.interp(t, times, epochs), lambda e: np.interp(e, epochs, times)))
            top.set_xlabel("epoch", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def write_log_png(rows: list[dict], path: Path, title: str) -> Path:
    """Draw ``rows`` (the log's rows, numbers as floats) into ``path`` (replaced
    atomically: a link there is replaced, not followed)."""
    try:
        figure = log_figure(rows, title)
        write_output(path, lambda file: figure.savefig(file, format="png"))
    except OSError as error:
        raise ConvnetError(f"cannot write the picture {path}: {error.strerror}") from None
    return path

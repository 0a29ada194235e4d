"""What the pictures of a saved net share: the figure, and writing it as an output file."""

from __future__ import annotations

from pathlib import Path

from convnet.errors import ConvnetError
from convnet.outputs import write_output


def new_figure(width: float, height: float):
    """A matplotlib figure drawn off-screen (no display needed), sized in inches."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure, path: Path) -> None:
    """Write ``figure`` as a PNG at ``path`` (atomically; a link there is replaced)."""
    try:
        write_output(path, lambda file: figure.savefig(file, format="png"))
    except OSError as error:
        raise ConvnetError(f"cannot write the picture {path}: {error.strerror}") from None
    print(f"wrote {path}")

"""Optional dependencies: whether one is installed, and the error that names its extra.

The main install (``pip install -e .``) trains and prints; drawing needs
matplotlib, which the ``plot`` extra installs.  The commands that must draw
(``--plan-graph``, ``--compare`` with ``--save-path``) check before any work
is done, so a missing package is reported at once rather than after training.
"""

from __future__ import annotations

from convnet.errors import ConvnetError

PLOT_INSTALL = "pip install -e '.[plot]'"


def has_matplotlib() -> bool:
    """Whether matplotlib imports (found is not enough: a broken install fails later)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def require_matplotlib(what: str) -> None:
    """Raise a one-line error naming the ``plot`` extra unless matplotlib can be imported."""
    if not has_matplotlib():
        raise ConvnetError(f"{what} draws with matplotlib, which is not installed; install "
                           f"the 'plot' extra: {PLOT_INSTALL}") from None


ONNX_INSTALL = "pip install -e '.[onnx]'"


def require_onnx(what: str):
    """The ``onnx`` module, or a one-line error naming the ``onnx`` extra."""
    try:
        import onnx
    except ImportError:
        raise ConvnetError(f"{what} writes the model with the onnx package, which is not "
                           f"installed; install the 'onnx' extra: {ONNX_INSTALL}") from None
    return onnx

"""Optional dependencies: whether one is installed, and the error that names its extra.

The main install (``pip install -e .``) trains and prints; drawing needs
matplotlib, which the ``plot`` extra installs (with Pillow, which ``--predict`` reads
image files with), and ``python -m convnet.make_data``
needs Pillow (and scipy for the ILSVRC-2012 devkit), which the ``make-data`` extra
installs.  The commands that must draw (``--plan-graph``, ``--compare`` with
``--save-path``) and make-data check before any work is done, so a missing package
is reported at once rather than after training or converting.
"""

from __future__ import annotations

from convnet.errors import ConvnetError

PLOT_INSTALL = "pip install -e '.[plot]'"
MAKE_DATA_INSTALL = "pip install -e '.[make-data]'"


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


def require_for_make_data(module: str, package: str, what: str) -> None:
    """Raise a one-line error naming the ``make-data`` extra unless ``module`` imports;
    ``what`` says what needs it (``"reading meta.mat"``)."""
    try:
        __import__(module)
    except ImportError:
        raise ConvnetError(f"{what} needs {package}, which is not installed; install the "
                           f"'make-data' extra: {MAKE_DATA_INSTALL}") from None


def require_pillow(what: str):
    """The PIL.Image module, or a one-line error naming the extra that installs it (the
    ``plot`` extra's matplotlib brings Pillow)."""
    try:
        from PIL import Image
    except ImportError:
        raise ConvnetError(f"{what} reads images with Pillow, which is not installed; "
                           f"install the 'plot' extra: {PLOT_INSTALL}") from None
    return Image


ONNX_INSTALL = "pip install -e '.[onnx]'"


def require_onnx(what: str):
    """The ``onnx`` module, or a one-line error naming the ``onnx`` extra."""
    try:
        import onnx
    except ImportError:
        raise ConvnetError(f"{what} writes the model with the onnx package, which is not "
                           f"installed; install the 'onnx' extra: {ONNX_INSTALL}") from None
    return onnx


TENSORBOARD_INSTALL = "pip install -e '.[tensorboard]'"


def require_tensorboard(what: str):
    """The ``tensorboardX`` module (TensorBoard's event files without TensorFlow or
    PyTorch), or a one-line error naming the ``tensorboard`` extra."""
    try:
        import tensorboardX
    except ImportError:
        raise ConvnetError(f"{what} writes TensorBoard event files with the tensorboardX "
                           f"package, which is not installed; install the 'tensorboard' "
                           f"extra: {TENSORBOARD_INSTALL}") from None
    return tensorboardX

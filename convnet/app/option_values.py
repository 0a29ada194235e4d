"""The values each command-line option accepts, checked and converted in one place.

Every function here takes the text of one option value and returns it
converted, or raises :class:`argparse.ArgumentTypeError` with a message that
says what was expected.  The parser uses them as argparse ``type=`` functions,
and reading a checkpoint uses them again on the saved options, so a saved
value is held to the same rules as a typed one.
"""

from __future__ import annotations

import argparse
import difflib
import math

from convnet.data.options import MAX_IMAGE_SIDE
from convnet.errors import ConvnetError, DataError

PROVIDER_NAMES = ("digits", "cifar", "convnet-batches", "image", "dummy")
BACKEND_NAMES = ("auto", "cpu", "cuda")
#: Each logical device is a worker thread (and a CUDA stream); far more than any
#: machine has is a mistake, not a plan.
MAX_DEVICES = 64
#: The staleness bound of ``--sync async`` (steps a replica may run ahead of the slowest).
DEFAULT_STALENESS = 4


def flag(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected 0/1 or true/false, got '{text}'")


def gpu_list(text: str) -> tuple[int, ...]:
    try:
        gpus = tuple(_ascii_int(g) for g in str(text).split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of device numbers such as "
                                         f"0,1, got '{text}'") from None
    if any(g < 0 for g in gpus):
        raise argparse.ArgumentTypeError(f"device numbers are >= 0, got '{text}'")
    if len(gpus) > MAX_DEVICES or max(gpus) >= MAX_DEVICES:
        raise argparse.ArgumentTypeError(f"at most {MAX_DEVICES} devices, numbered 0 to "
                                         f"{MAX_DEVICES - 1}, got {len(gpus)} up to {max(gpus)}")
    return gpus


def _ascii_int(text: str) -> int:
    """``int()`` of ASCII digits only: Python's ``int`` also reads other scripts'
    digits (``'１２'`` is 12), which no option value means."""
    text = str(text).strip()
    if not text.isascii():
        raise ValueError(text)
    return int(text)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = _ascii_int(text)
    except ValueError:
        value = None
    if value is None or value < low:
        kind = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise argparse.ArgumentTypeError(f"expected {kind}, got '{text}'")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def image_side(text: str) -> int:
    """--image-size: make-data's --size, up to the same largest side."""
    value = positive_int(text)
    if value > MAX_IMAGE_SIDE:
        raise argparse.ArgumentTypeError(f"at most {MAX_IMAGE_SIDE} pixels (make-data's "
                                         f"largest --size), got {value}")
    return value


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0)


def _finite(text: str, low: float | None = None, high: float | None = None,
            hint: str = "") -> float:
    try:
        value = float(text) if str(text).isascii() else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (low is not None and value < low) or \
            (high is not None and value > high):
        bounds = ("a number" if low is None else
                  f"a number >= {low:g}" if high is None else
                  f"a number in {low:g}..{high:g}")
        raise argparse.ArgumentTypeError(f"expected {bounds}, got '{text}'{hint}")
    return value


def color_noise(text: str) -> float:
    return _finite(text, low=0.0)


def scalar_mean(text: str) -> float:
    return _finite(text)


def max_test_err(text: str) -> float:
    return _finite(text, 0.0, 1.0, hint=" (a fraction: 0.05 means 5%)")


def min_lead(text: str) -> float:
    """--min-lead PERCENT: a lead given in per cent (0 to 1000), as a share."""
    return _finite(text, 0.0, 1000.0, hint=" (per cent: 10 means a 10% lead)") / 100


def rank_timeout(text: str) -> float | None:
    """--rank-timeout SECONDS: a positive number, or 0 for no bound (None)."""
    seconds = _finite(text, low=0.0, hint=" (seconds; 0 waits without a bound)")
    return seconds or None


def batch_range(text: str) -> str:
    # Imported here, not above: the data package loads numpy, which --help does not need.
    from convnet.data.ranges import parse_range

    try:
        parse_range(text)
    except DataError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return str(text).strip()


def data_dims(text: str) -> str:
    # Imported here, not above: the config package is not needed for --help.
    from convnet.config.values.typed import parse_data_columns

    try:
        parse_data_columns(text)
    except ConvnetError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return str(text).strip()


def provider_name(text: str) -> str:
    if text in PROVIDER_NAMES:
        return text
    close = difflib.get_close_matches(text, PROVIDER_NAMES, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise argparse.ArgumentTypeError(f"unknown data provider '{text}' ({hint}known: "
                                     f"{', '.join(PROVIDER_NAMES)})")


def sync_mode(text: str) -> str:
    """``--sync``: ``sync`` (all-reduce the gradients every step), ``local:K`` (local
    SGD, averaging the weights every K >= 1 steps) or ``async[:S]`` (asynchronous, no
    replica more than S >= 0 steps ahead; ``async`` alone is ``async:4``), in that
    spelling (S written out)."""
    value = str(text).strip().lower()
    if value == "sync":
        return value
    if value == "async":
        return f"async:{DEFAULT_STALENESS}"
    kind, _, number = value.partition(":")
    try:
        if kind == "local" and _ascii_int(number) >= 1:
            return f"local:{_ascii_int(number)}"
        if kind == "async" and _ascii_int(number) >= 0:
            return f"async:{_ascii_int(number)}"
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected sync, local:K with K a positive integer "
                                     f"(e.g. local:4), or async[:S] with S a staleness bound "
                                     f">= 0 (e.g. async:2), got '{text}'")


def async_staleness(sync: str) -> int | None:
    """The S of a :func:`sync_mode` value ``async:S``; None otherwise."""
    return int(sync.partition(":")[2]) if sync.startswith("async:") else None


def slow_device(text: str) -> tuple[int | None, float]:
    """``--slow-device D:F`` or ``any:F`` (test-only): logical device D, or at every step
    one drawn at random (None), runs F >= 1 times slower (convnet/runtime/devices/slowdown.py)."""
    device, _, factor = str(text).strip().partition(":")
    try:
        if not factor.isascii():
            raise ValueError(factor)
        index = None if device.strip().lower() == "any" else _ascii_int(device)
        value = float(factor)
        if (index is None or 0 <= index < MAX_DEVICES) and 1.0 <= value <= 1000.0:
            return index, value
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected D:F or any:F, a logical device D (any: a "
                                     f"different one each step, drawn at random) and a "
                                     f"slowdown factor F from 1 to 1000 (e.g. 1:2), got "
                                     f"'{text}'")


def slow_device_text(value: tuple[int | None, float]) -> str:
    """A :func:`slow_device` value as the command line writes it (``1:3``, ``any:2.5``)."""
    device, factor = value
    return f"{'any' if device is None else device}:{factor:g}"


def layer_name(text: str) -> str:
    if not str(text).strip():
        raise argparse.ArgumentTypeError("expected a layer name")
    return str(text).strip()

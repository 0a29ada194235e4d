"""Small trained runs for the tests that use a saved net (tests/app/using)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from convnet.app.command_line.main import main
from convnet.data.digits import _split
from tests.support.cli import DUMMY, SINGLE_DEF, SINGLE_PARAMS


def train_digits(folder: Path) -> Path:
    """One epoch of the digits net on one device, saved in ``folder``; the folder."""
    code = main(["--no-progress", "--layer-def", str(SINGLE_DEF), "--layer-params",
                 str(SINGLE_PARAMS), "--epochs", "1", "--save-path", str(folder)])
    assert code == 0
    return folder


def train_dummy(folder: Path) -> Path:
    """One epoch of the digits net on dummy data (not pictures), saved in ``folder``."""
    code = main([*DUMMY, "--layer-def", str(SINGLE_DEF), "--layer-params", str(SINGLE_PARAMS),
                 "--epochs", "1", "--save-path", str(folder)])
    assert code == 0
    return folder


def digit_pngs(folder: Path, count: int = 5, scale: int = 1) -> np.ndarray:
    """The first test digits (batch 6) as 8-bit PNGs ``0.png``, ... (``scale`` times
    larger); their 0..255 pixels (count, 8, 8)."""
    from PIL import Image

    folder.mkdir(exist_ok=True)
    images = _split()[0][5][:count, 0]
    pixels = np.round(images * 255).astype(np.uint8)
    for i, p in enumerate(pixels):
        Image.fromarray(p).resize((8 * scale, 8 * scale), Image.NEAREST).save(folder / f"{i}.png")
    return pixels

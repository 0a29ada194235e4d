"""Small trained runs for the tests that use a saved net (tests/app/using)."""

from __future__ import annotations

from pathlib import Path

from convnet.app.command_line.main import main
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

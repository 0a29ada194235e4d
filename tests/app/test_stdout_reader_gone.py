"""A command whose standard output's reader goes away (``| head -1``) finishes its work:
the lines stop, the files it was asked to write are written, and it exits 0 with no
message about the pipe. It once stopped at the first line it could not print, exit 0,
so that ``python convnet.py ... --save-path R | head -1`` trained nothing and left no
checkpoint, and ``--auto-place ... | head -1`` wrote no config."""

from __future__ import annotations

import os
import subprocess

from tests.support.cli import DUMMY, SINGLE_DEF, SINGLE_PARAMS, command, start_cli


def test_training_goes_on_when_the_reader_of_its_lines_goes_away(tmp_path):
    run = tmp_path / "run"
    proc = start_cli("--layer-def", SINGLE_DEF, "--layer-params", SINGLE_PARAMS, *DUMMY,
                     "--epochs", "2", "--save-path", run)
    proc.stdout.close()  # the reader is gone before the first line
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Broken pipe" not in err and "Exception" not in err
    assert (run / "checkpoint.npz").exists() and (run / "log.csv").exists()


def test_auto_place_writes_its_config_when_the_reader_of_its_lines_and_progress_goes(
        tmp_path):
    out = tmp_path / "placed.cfg"
    proc = subprocess.Popen(command("--layer-def", SINGLE_DEF, "--layer-params", SINGLE_PARAMS,
                                    "--mini", "8", "--auto-place", "2", "--auto-place-out", out),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,  # 2>&1 | head
                            cwd=tmp_path, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0
    assert "gpu=" in out.read_text()

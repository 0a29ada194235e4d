"""Running the real ``convnet.py`` command in a subprocess, and what its tests share."""

from __future__ import annotations

import csv
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.support import ROOT

CONVNET = ROOT / "convnet.py"
EXAMPLES = ROOT / "examples"
HYBRID_DEF = EXAMPLES / "digits-hybrid.cfg"
HYBRID_PARAMS = EXAMPLES / "digits-hybrid-params.cfg"
SINGLE_DEF = EXAMPLES / "digits-single.cfg"
SINGLE_PARAMS = EXAMPLES / "digits-params.cfg"

#: Quick training on the digits (the bundled example's net and data).
DIGITS = ["--no-progress", "--mini", "64"]
#: The digits net on synthetic 1x8x8 data: no data file to read, so a run starts fast.
DUMMY = ["--no-progress", "--data-provider", "dummy", "--data-dims", "1x8x8",
         "--num-classes", "10", "--train-range", "1-2", "--test-range", "9", "--mini", "128"]


def command(*args) -> list[str]:
    return [sys.executable, str(CONVNET), *map(str, args)]


def run_cli(*args, timeout: float = 120, cwd: Path | None = None,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python convnet.py ARGS`` to the end; returns the finished process."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or ROOT, env=env)


def run_main(capsys, *args) -> tuple[int, str, str]:
    """The command run in this process (faster than a subprocess where nothing needs
    one): (exit status, stdout, stderr) through pytest's ``capsys``."""
    from convnet.app.command_line.main import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def start_cli(*args, cwd: Path | None = None, env: dict | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.Popen(command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd or ROOT, env=env)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """Assert a clean exit 0 and return the process."""
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\n" \
                                 f"stderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def assert_clean_error(proc: subprocess.CompletedProcess | tuple, code: int,
                       *fragments: str) -> str:
    """A user error: the given non-zero exit, exactly one ``error:`` line on stderr
    (warnings aside), no traceback, and every fragment in that line."""
    returncode, stderr = (proc if isinstance(proc, tuple)
                          else (proc.returncode, proc.stderr))
    assert returncode == code, f"exit {returncode}, expected {code}; stderr:\n{stderr}"
    assert "Traceback" not in stderr, stderr
    lines = [l for l in stderr.splitlines() if l.strip() and not l.startswith("warning:")]
    assert len(lines) == 1, f"expected one error line, got:\n{stderr}"
    line = lines[0]
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


def checkpoint_arrays(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    from convnet.app.checkpoint import load_checkpoint

    return load_checkpoint(path)


def assert_same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """Bitwise equal: same keys, shapes, dtypes and bytes."""
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert a[key].shape == b[key].shape, key
        assert a[key].tobytes() == b[key].tobytes(), f"{key} differs"


def read_log(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    return header, [dict(zip(header, r)) for r in rows[1:]]


def parse_test_line(stdout: str) -> tuple[float, float, int]:
    """(cost, error, cases) from the line ``--test-only`` prints."""
    for line in stdout.splitlines():
        if line.startswith("test cost "):
            words = line.split()
            return float(words[2]), float(words[4]), int(words[words.index("on") + 1])
    raise AssertionError(f"no test line in:\n{stdout}")


def write_batch_folder(folder: Path, batches: int = 3, cases: int = 100, side: int = 8,
                       channels: int = 1, classes: int = 10, seed: int = 0) -> Path:
    """A cuda-convnet batch folder (``data_batch_1..N`` pixels x cases, ``batches.meta``)
    of learnable images: each class a fixed pattern plus noise, pixels 0..255."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    num_vis = channels * side * side
    patterns = rng.uniform(0, 255, (classes, num_vis))
    all_data = []
    for b in range(1, batches + 1):
        labels = rng.integers(0, classes, cases)
        data = np.clip(patterns[labels] + rng.normal(0, 30, (cases, num_vis)), 0, 255)
        data = data.T.astype(np.uint8)  # pixels x cases
        all_data.append(data)
        with open(folder / f"data_batch_{b}", "wb") as f:
            pickle.dump({"data": data, "labels": labels.tolist(),
                         "batch_label": f"batch {b}"}, f, protocol=2)
    mean = np.concatenate(all_data, axis=1).mean(axis=1, keepdims=True)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"data_mean": mean, "num_vis": num_vis,
                     "label_names": [f"c{k}" for k in range(classes)]}, f, protocol=2)
    return folder

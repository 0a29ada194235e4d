"""Starting MPI runs from tests: find mpiexec and mpi4py, or say why a test must skip."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support import ROOT


def mpiexec() -> str | None:
    """The mpiexec that belongs to this Python's MPI (the mpich wheel's), else one on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def skip_reason() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install -e '.[mpi]')"
    if mpiexec() is None:
        return "no mpiexec next to this Python or on PATH (pip install -e '.[mpi]')"
    return None


needs_mpi = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


def env(**extra) -> dict:
    """The environment of a child process: this checkout first on the module path,
    one BLAS thread (several ranks share the cores)."""
    out = dict(os.environ, **extra)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), out.get("PYTHONPATH")) if p)
    out.setdefault("OPENBLAS_NUM_THREADS", "1")
    return out


def run_mpi(n: int, args: list[str], cwd, timeout: float = 120, **kwargs):
    """``mpiexec -n N python ARGS``; the completed process (output captured as text)."""
    return subprocess.run([mpiexec(), "-n", str(n), sys.executable, *args], cwd=cwd,
                          env=env(), capture_output=True, text=True, timeout=timeout, **kwargs)


def run_ranks(n: int, program, args: list[str], folder: Path, out: str,
              timeout: float = 60) -> list[dict]:
    """``mpiexec -n N python PROGRAM ARGS FOLDER/OUT``, which must succeed: the arrays each
    rank wrote to ``FOLDER/OUT.RANK.npz``, in rank order."""
    done = run_mpi(n, [str(program), *args, str(folder / out)], cwd=folder, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return [dict(np.load(folder / f"{out}.{rank}.npz")) for rank in range(n)]


def run_failing(n: int, program, args: list[str], folder: Path, out: str,
                seconds: float = 30) -> str:
    """Like :func:`run_ranks` for a run that must end on an error within ``seconds``
    (no hang), with no rank writing its results: its standard error."""
    started = time.monotonic()
    done = run_mpi(n, [str(program), *args, str(folder / out)], cwd=folder, timeout=seconds)
    assert time.monotonic() - started < seconds
    assert done.returncode != 0
    assert not list(folder.glob(f"{out}.*.npz"))  # no rank got to the end
    return done.stderr


def rank_pids(marker: str) -> dict[int, int]:
    """Rank -> pid of the ranks of the run started with ``env(CONVNET_TEST_RUN=marker)``
    that are alive now (read from /proc)."""
    pids = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ranks = [v[len(b"PMI_RANK="):] for v in environ if v.startswith(b"PMI_RANK=")]
        if f"CONVNET_TEST_RUN={marker}".encode() in environ and ranks:
            pids[int(ranks[0])] = int(entry.name)
    return pids


def rank_pid(marker: str, rank: int) -> int | None:
    """The pid of rank ``rank`` of the run started with ``env(CONVNET_TEST_RUN=marker)``,
    or None while it has not started."""
    return rank_pids(marker).get(rank)


def run_alone(args: list[str], cwd, timeout: float = 120):
    """``python ARGS`` without a launcher."""
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=timeout)

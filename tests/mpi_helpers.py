"""Starting MPI runs from tests: find mpiexec and mpi4py, or say why a test must skip."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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


def run_alone(args: list[str], cwd, timeout: float = 120):
    """``python ARGS`` without a launcher."""
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=timeout)

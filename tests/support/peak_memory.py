"""A training run's measured peak memory beside the fit check's estimate of it.

:func:`measured_peak` runs ``convnet.py ARGS`` in a child process (this module run as
a program) that first imports what a run imports (CuPy too, where installed: a run
asks whether there is a GPU) and makes one BLAS call, then reads
its resident size (the baseline), runs the command line in-process and reports its
high-water mark (``VmHWM``) less the baseline: what the run itself added.
:func:`estimated_peak` is the host-RAM figure the memory fit check compares with
the machine (the devices' peaks and the data pipeline, :mod:`convnet.app.run.memory_fit`).
Memory, unlike time, does not depend on the machine's load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support import ROOT

MARK = "PEAK-MEMORY "


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def measured_peak(args, timeout: float = 300) -> tuple[int, subprocess.CompletedProcess]:
    """(bytes the run of ``convnet.py args`` added to its process's peak resident
    size, the finished child)."""
    proc = subprocess.run([sys.executable, "-m", "tests.support.peak_memory", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    lines = [line for line in proc.stderr.splitlines() if line.startswith(MARK)]
    if proc.returncode or not lines:
        raise RuntimeError(f"the run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    report = json.loads(lines[-1][len(MARK):])
    return report["peak"] - report["baseline"], proc


def estimated_peak(args) -> int:
    """The fit check's host-RAM figure for ``convnet.py args`` on CPU devices."""
    from convnet.app.command_line.parser import build_parser
    from convnet.app.options import resolve_options
    from convnet.app.run import assembly
    from convnet.app.run.memory_fit import memory_pools, weight_sharing
    from convnet.data.memory import data_memory

    opts = resolve_options(build_parser().parse_args([str(a) for a in args]))
    provider = assembly.make_data_provider(opts)
    net, plan = assembly.build_net_and_plan(opts, provider)
    [pool] = memory_pools(plan, net, "cpu", shared=weight_sharing(plan, net, "cpu", opts.sync, 1),
                          data=data_memory(provider))
    return pool.needed


def _child(argv: list[str]) -> int:
    import numpy as np

    import convnet.app.command_line.commands  # noqa: F401 - what a run imports
    import convnet.app.run.training  # noqa: F401
    from convnet import kernels
    from convnet.app.command_line.main import main

    kernels.cuda_device_count()  # --backend auto asks for a GPU: CuPy's import, where installed

    np.dot(np.ones((64, 64), np.float32), np.ones((64, 64), np.float32))
    baseline = _status_bytes("VmRSS")
    code = main(argv)
    print(MARK + json.dumps({"baseline": baseline, "peak": _status_bytes("VmHWM")}),
          file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))

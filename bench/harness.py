"""What the training benchmarks share: configurations in their own processes taking
turns, the medians and percentiles of their step times, and the per-layer profile.

Each configuration runs in a child process (so that thread settings and the
allocator of one do not affect the others) that prints one JSON line when ready and
then answers commands on stdin with one JSON line each (:func:`serve`): ``run K``
times K steps, ``profile K`` profiles them, ``extra`` and ``memory`` return what the
worker measures besides time.  :func:`take_turns` runs the rounds: every worker does
its steps in turn, in alternating order, after one warm-up round.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time


def without_torch(no_torch: bool) -> bool:
    """``--no-torch``, or True (and said) when PyTorch is not installed: the run then
    times the engine only."""
    import importlib.util

    if not no_torch and importlib.util.find_spec("torch") is None:
        print("PyTorch is not installed: timing the engine only (pip install '.[bench]')")
        return True
    return no_torch


def add_winograd_option(ap) -> None:
    """``--no-winograd``: time the engine with direct convolutions (the engine's option
    of that name), for the before/after of the Winograd kernels in one script."""
    ap.add_argument("--no-winograd", action="store_true",
                    help="the engine computes every convolution directly (its --no-winograd)")


def winograd_choice(args) -> list[str]:
    """Applies ``--no-winograd`` in this process and returns the arguments that pass it
    on to the worker processes."""
    if not args.no_winograd:
        return []
    from convnet.kernels.conv import choice as conv_choice

    conv_choice.WINOGRAD = False
    return ["--no-winograd"]


def gemm_flops(net, mini: int) -> float:
    """FLOPs of one training step's conv/local/fc GEMMs (forward, dW and dx: 3x forward)."""
    total = 0
    for ldef in net:
        a = ldef.attrs
        if ldef.type in ("conv", "local"):
            outputs = a["modulesX"] ** 2
            for i in range(len(ldef.inputs)):
                k = a["channels"][i] // a["groups"][i] * a["filterSize"][i] ** 2
                total += 2 * a["filters"] * k * outputs * mini
        elif ldef.type == "fc":
            for shape in ldef.input_shapes:
                total += 2 * math.prod(shape) * a["outputs"] * mini
    return 3.0 * total


def reply(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve(step, profile=None, extra=None, memory=None) -> None:
    """Answer the parent's commands until ``quit`` (see the module docstring)."""
    handlers = {"profile": profile, "extra": extra, "memory": memory}
    for line in sys.stdin:
        cmd, *arg = line.split()
        if cmd == "run":
            walls, cpus = [], []
            for _ in range(int(arg[0])):
                w, c = time.perf_counter(), time.process_time()
                step()
                walls.append(time.perf_counter() - w)
                cpus.append(time.process_time() - c)
            reply({"wall": walls, "cpu": cpus})
        elif handlers.get(cmd) is not None:
            reply(handlers[cmd](*map(int, arg)))
        elif cmd == "quit":
            return
        else:
            reply({"error": f"unknown command {line.strip()!r}"})


def serve_two_halves(net, batches, ready: dict, warmups: int = 1) -> None:
    """The machine's bound for two devices, served: two one-device executors of ``net``,
    each training on its own half-minibatch of ``batches`` on its own worker thread, at
    the same time, and never meeting (no all-reduce, no shared weights).  A two-device
    step cannot beat this on the same cores; what it loses against it is the
    executor's.  Replies ``ready`` after ``warmups`` steps."""
    from concurrent.futures import ThreadPoolExecutor

    from convnet.plan.planner import make_plan
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor

    plan = make_plan(net, (0,), len(batches[0][0]))
    executors = [Executor(net, plan, make_devices((0,), "cpu"), seed=0, parallel=True)
                 for _ in batches]
    pool = ThreadPoolExecutor(len(batches))

    def step():
        for future in [pool.submit(ex.step, b) for ex, b in zip(executors, batches)]:
            future.result()

    for _ in range(warmups):
        step()
    reply(ready)
    try:
        serve(step)
    finally:
        pool.shutdown()
        for ex in executors:
            ex.close()


def resident_bytes() -> int:
    """The process's resident set size now (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


class Worker:
    """A child process running ``script`` with ``argv``; ``hello`` is its first line."""

    def __init__(self, label: str, script: str, argv: list[str], cwd: str):
        self.label = label
        self.proc = subprocess.Popen([sys.executable, script] + argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=cwd)
        self.hello = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: worker exited (code {self.proc.wait()})")
        return json.loads(line)

    def ask(self, command: str):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise RuntimeError(f"{self.label}: {answer['error']}")
        return answer

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
        except OSError:
            pass
        self.proc.wait(timeout=120)


def take_turns(workers: list[Worker], rounds: int, steps: int, warmup: int = 2):
    """Per worker label: (wall seconds of every step, CPU seconds of every step)."""
    for w in workers:
        w.ask(f"run {warmup}")
    walls = {w.label: [] for w in workers}
    cpus = {w.label: [] for w in workers}
    for r in range(rounds):
        for w in (workers if r % 2 == 0 else workers[::-1]):
            time.sleep(0.3)  # let the previous process's spinning threads go idle
            res = w.ask(f"run {steps}")
            walls[w.label] += res["wall"]
            cpus[w.label] += res["cpu"]
    return walls, cpus


def pct(values, q: float) -> float:
    values = sorted(values)
    i = (len(values) - 1) * q
    lo, hi = math.floor(i), math.ceil(i)
    return values[lo] + (values[hi] - values[lo]) * (i - lo)


def engine_profile(ex, batch, steps: int) -> dict:
    """Mean seconds per step of each (layer, operation, device) of ``ex`` over ``steps``
    training steps, and the steps' wall times."""
    per: dict = {}
    walls = []
    for seconds, timings in ex.timed_steps(batch, steps):
        walls.append(seconds)
        for t in timings:
            key = f"{t.layer}|{t.kind}|{t.device}"
            per[key] = per.get(key, 0.0) + (t.end - t.start) / steps
    return {"ops": per, "wall": walls}


def print_profile(label: str, prof: dict, top: int | None = None) -> None:
    """The profile as a table: mean ms per step of each operation, per device, the
    largest first (``top`` rows, or all)."""
    per: dict = {}
    devices = set()
    for key, seconds in prof["ops"].items():
        layer, kind, dev = key.split("|")
        devices.add(int(dev))
        per.setdefault((layer, kind), {})[int(dev)] = 1e3 * seconds
    devices = sorted(devices)
    wall = 1e3 * statistics.median(prof["wall"])
    print(f"\nProfile of {label}: mean ms per step of each operation, per device "
          f"(median step {wall:.1f} ms)")
    print(f"{'layer':<10} {'operation':<10}" + "".join(f" {'dev ' + str(d):>8}" for d in devices))
    rows = sorted(per.items(), key=lambda kv: -sum(kv[1].values()))
    totals = dict.fromkeys(devices, 0.0)
    for i, ((layer, kind), by_dev) in enumerate(rows):
        for d in devices:
            totals[d] += by_dev.get(d) or 0.0
        if top is not None and i >= top:
            continue
        cells = "".join(f" {by_dev[d]:8.2f}" if d in by_dev else f" {'':>8}" for d in devices)
        print(f"{layer:<10} {kind:<10}{cells}")
    if top is not None and len(rows) > top:
        print(f"({len(rows) - top} smaller rows not shown)")
    print(f"{'total':<10} {'':<10}" + "".join(f" {totals[d]:8.2f}" for d in devices))

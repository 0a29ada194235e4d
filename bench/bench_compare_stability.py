"""Does ``--compare`` give the same verdict when the same command runs three times in a row?

Runs the README's digits comparison (four configs: one device, data, model and
hybrid parallel, ``--gpu 0,1 --mini 64 --epochs 8``) ``--runs`` times in a row,
each in its own process, with the ``--rounds`` (and ``--min-lead``) given, and prints each run's
verdict line, its ranking by median step and the machine's load average, then
whether the verdicts agree.  Stability is what ``--rounds``' default must give
on a quiet machine (docs/BENCHMARKS.md):

    .venv/bin/python bench/bench_compare_stability.py --rounds 10 --runs 3

A verdict agrees with another when it names the same outcome: the same clear
winner, or no clear winner between the same configs (the noise figure itself
may move).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CONFIGS = ["single", "data", "model", "hybrid"]


def command(rounds: int, epochs: int, save: Path, min_lead: str | None) -> list[str]:
    params = [str(EXAMPLES / ("digits-hybrid-params.cfg" if c == "hybrid" else
                              "digits-params.cfg")) for c in CONFIGS]
    return [sys.executable, str(ROOT / "convnet.py"), "--compare",
            *[str(EXAMPLES / f"digits-{c}.cfg") for c in CONFIGS], "--layer-params", *params,
            "--gpu", "0,1", "--mini", "64", "--epochs", str(epochs), "--test-freq", "1",
            "--no-progress", "--rounds", str(rounds), "--save-path", str(save),
            *(["--min-lead", min_lead] if min_lead is not None else [])]


VERDICT = re.compile(r"^(?P<clear>\S+) is fastest, [\d.]+x \S+, clear"
                     r"|^no clear winner between (?P<tied>[^(]+) \(")


def outcome(text: str) -> tuple[str, str]:
    """(the verdict line, its outcome: 'X clear' or 'none of X, Y')."""
    for line in text.splitlines():
        m = VERDICT.match(line)
        if m:
            return line, (f"{m['clear']} clear" if m["clear"] else f"none of {m['tied']}")
    raise SystemExit(f"no verdict line in the output:\n{text}")


def ranking(text: str) -> str:
    line = next((l for l in text.splitlines() if l.startswith("measured (median")), "")
    return line.split(":", 1)[-1].strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--min-lead", default=None, metavar="PERCENT",
                    help="passed to --compare (default: its own)")
    args = ap.parse_args()
    outcomes = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for run in range(1, args.runs + 1):
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            done = subprocess.run(command(args.rounds, args.epochs, Path(tmp) / "c", args.min_lead),
                                  capture_output=True, text=True, env=env, cwd=tmp)
            seconds = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(f"run {run} failed:\n{done.stderr}")
        line, result = outcome(done.stdout)
        outcomes.append(result)
        print(f"run {run} (load average {load:.1f} before, {os.getloadavg()[0]:.1f} after, "
              f"{seconds:.0f} s): {line}")
        print(f"    measured: {ranking(done.stdout)}")
    same = len(set(outcomes)) == 1
    lead = "" if args.min_lead is None else f" --min-lead {args.min_lead}"
    print(f"--rounds {args.rounds}{lead}: {'the same verdict' if same else 'verdicts differ'} "
          f"in {args.runs} runs ({'; '.join(outcomes)})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

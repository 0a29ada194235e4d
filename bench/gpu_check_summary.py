"""The one-screen summary of ``make gpu-check`` (bench/gpu_check.sh), and summary.json.

    python bench/gpu_check_summary.py LOG_DIR [--no-gpu REASON] [--seconds N]

Reads what the stages left in LOG_DIR: ``stages.tsv`` (each stage's status, exit
status, seconds and limit), ``environment.json`` (versions and the self-test), the
``example`` and ``cifar10`` training logs, ``tests.xml`` (JUnit), ``bench.json``
(bench/bench_cuda.py), ``memory.json`` (bench/cuda_memory.py) and ``data.json``
(bench/cuda_data_wait.py).  A stage that left nothing is reported as such, never
guessed.  Exit status: 2 without a GPU, 1 when a stage failed or ran out of time,
else 0.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

MIB = 1 << 20


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def stages(log: Path) -> list[dict]:
    rows = []
    try:
        lines = (log / "stages.tsv").read_text().splitlines()
    except OSError:
        return rows
    for line in lines:
        name, status, code, seconds, limit, note = (line.split("\t") + [""] * 6)[:6]
        rows.append({"stage": name, "status": status, "exit": int(code) if code else None,
                     "seconds": int(seconds or 0), "limit": int(limit or 0), "note": note})
    return rows


def tests(log: Path) -> dict | None:
    """Counts and failing tests from pytest's JUnit XML (written even when interrupted)."""
    try:
        root = ElementTree.parse(log / "tests.xml").getroot()
    except (OSError, ElementTree.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    count = {k: sum(int(s.get(k, 0)) for s in suites)
             for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
              for case in root.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    return {"passed": count["tests"] - count["failures"] - count["errors"] - count["skipped"],
            "failed": count["failures"] + count["errors"], "skipped": count["skipped"],
            "failed_tests": failed}


def training(log: Path, stage: str) -> dict | None:
    """What a training run's log says: the device line, images/s of its last epoch line,
    its final test error, and its error line if it ended with one."""
    try:
        text = (log / f"{stage}.log").read_text(errors="replace")
    except OSError:
        return None
    out: dict = {}
    for line in text.splitlines():
        if "backend, logical device -> physical" in line:
            out["devices"] = line.strip()
        if re.match(r"\s*epoch\s+\d+", line) and "img/s" in line:
            found = re.search(r"([\d.]+)\s+img/s", line)
            out["images_per_s"] = float(found.group(1)) if found else None
        found = re.search(r"final test error ([\d.]+)%", line)
        if found:
            out["final_test_error_percent"] = float(found.group(1))
        if line.startswith("error:"):
            out["error"] = line[len("error: "):].strip()
        if line.startswith("warning:"):
            out.setdefault("warnings", []).append(line[len("warning: "):].strip())
    return out


def bench_ratios(bench: dict | None) -> dict | None:
    """Every ``<name>_engine_images_per_s`` with its ``<name>_torch_images_per_s``, as
    engine / PyTorch; other images/s figures as they are."""
    if not bench:
        return None
    out = {}
    for key, value in bench.items():
        if not key.endswith("_images_per_s") or not isinstance(value, (int, float)):
            continue
        found = re.match(r"(.+)_engine_images_per_s$", key)
        if found:
            torch = bench.get(f"{found.group(1)}_torch_images_per_s")
            out[found.group(1)] = {"engine": value, "torch": torch,
                                   "ratio": value / torch if torch else None}
        elif "_torch_images_per_s" not in key and "_engine_generic_" not in key:
            out[key[:-len("_images_per_s")]] = {"engine": value, "torch": None, "ratio": None}
    return out


def summarize(log: Path, no_gpu: str = "", seconds: int | None = None) -> dict:
    env = _json(log / "environment.json")
    return {"seconds": seconds, "no_gpu": no_gpu or None, "stages": stages(log),
            "environment": env["lines"] if env else None,
            "self_test": env["self_test"] if env else None,
            "example": training(log, "example"), "cifar10": training(log, "cifar10"),
            "tests": tests(log), "bench": bench_ratios(_json(log / "bench.json")),
            "memory": _json(log / "memory.json"), "data": _json(log / "data.json")}


def _n(value, digits=0) -> str:
    return "?" if value is None else f"{value:,.{digits}f}"


def text(summary: dict) -> list[str]:
    lines = [f"gpu-check summary ({_n(summary['seconds'])} s)"]
    if summary["no_gpu"]:
        lines.append(f"no GPU: {summary['no_gpu']}")
    for line in (summary["environment"] or [])[1:3]:
        lines.append("  " + line)
    lines.append("stages: " + ", ".join(
        f"{s['stage']} {s['status']}" + (f" ({s['seconds']} s of {s['limit']})"
                                         if s["status"] != "skipped" else
                                         " (budget spent)" if "budget" in s["note"] else "")
        for s in summary["stages"]))
    for result in summary["self_test"] or []:
        lines.append(f"GPU {result['gpu']} {result['text']}")
    if not summary["self_test"]:
        lines.append("self-test: no result" if summary["self_test"] is None else
                     "self-test: not run (no GPU)")
    for stage in ("example", "cifar10"):
        run = summary[stage]
        if not run:
            lines.append(f"{stage}: no result")
            continue
        part = (f"{stage}: {_n(run.get('images_per_s'))} img/s, final test error "
                f"{_n(run.get('final_test_error_percent'), 2)}%")
        if run.get("error"):
            part += f"; ERROR: {run['error'][:150]}"
        if stage == "example" and run.get("devices"):
            part += f"; {run['devices'].split('physical: ', 1)[-1]}"
        lines.append(part)
    for key, describe in (("tests", _tests_text), ("bench", _bench_text),
                          ("memory", _memory_text), ("data", _data_text)):
        value = summary[key]
        lines.append(f"{key}: no result" if value is None else describe(value))
    return lines


def _tests_text(t: dict) -> str:
    failed = ""
    if t["failed_tests"]:
        failed = (f"; failed: {', '.join(t['failed_tests'][:6])}"
                  + (" ..." if len(t["failed_tests"]) > 6 else ""))
    return f"tests: {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped{failed}"


def _bench_text(bench: dict) -> str:
    return "bench: " + "; ".join(
        f"{name} engine {_n(r['engine'])} img/s"
        + (f", PyTorch {_n(r['torch'])} img/s, engine/PyTorch {r['ratio']:.2f}"
           if r["ratio"] is not None else "") for name, r in bench.items())


def _memory_text(memory: dict) -> str:
    return "memory (CuPy pool, estimate): " + "; ".join(
        f"{c['config']} mini {c['mini']} --gpu {c['gpus']}: {_n(c['pool_bytes'] / MIB)} "
        f"MiB held, {_n(c['estimate_bytes'] / MIB)} MiB estimated "
        f"({c['pool_bytes'] / c['estimate_bytes']:.2f})" for c in memory["configs"])


def _data_text(data: dict) -> str:
    if data.get("error"):
        return f"data: the run failed: {data['error'][:200]}"
    return (f"data (--data-provider image, {data['config']}, --gpu {data['gpus']}): "
            f"waited {data['wait_seconds']:.2f} s for data, {data['wait_percent']:.1f}% of "
            f"{data['train_seconds']:.1f} s of training; {_n(data.get('images_per_s'))} img/s")


def exit_status(summary: dict) -> int:
    if summary["no_gpu"]:
        return 2
    return 1 if any(s["status"] in ("failed", "timeout") for s in summary["stages"]) else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--no-gpu", default="", help="why no GPU was usable ('' when one was)")
    ap.add_argument("--seconds", type=int, default=None, help="how long the check took")
    args = ap.parse_args(argv)
    summary = summarize(args.log, args.no_gpu, args.seconds)
    print("\n".join(text(summary)))
    (args.log / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return exit_status(summary)


if __name__ == "__main__":
    sys.exit(main())

"""The one-screen summary of ``make gpu-check`` (bench/gpu_check.sh), and summary.json.

    python bench/gpu_check_summary.py LOG_DIR [--no-gpu REASON] [--seconds N] [--budget N]

Reads what the stages left in LOG_DIR: ``stages.tsv`` (each stage's status, exit
status, seconds and limit), ``environment.json`` (versions and the self-test), the
JUnit XML of ``tests`` and ``proofs``, the ``example`` and ``cifar10`` training logs,
``memory.json`` (bench/cuda_memory.py), ``bench.json`` (bench/bench_cuda.py) and
``data.json`` (bench/cuda_data_wait.py).  summary.json holds all of it (the whole
benchmark, each engine column with its ratios to PyTorch in the same mode); the
screen shows the figures that decide something.  A stage that left nothing is
reported as such, never guessed.  Exit status: 2 without a GPU, 1 when a stage failed
or ran out of time, else 0.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_report import SAME_MODE, against_torch  # noqa: E402  (bench/, next to this script)

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


def tests(log: Path, stage: str) -> dict | None:
    """Counts and failing tests from a stage's JUnit XML (pytest writes it even when
    interrupted)."""
    try:
        root = ElementTree.parse(log / f"{stage}.xml").getroot()
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


def bench(log: Path) -> dict | None:
    """bench.json as bench/bench_cuda.py wrote it, each net with ``against_torch``."""
    results = _json(log / "bench.json")
    for table in (results or {}).get("nets", {}).values():
        table["against_torch"] = against_torch(table)
    return results


def summarize(log: Path, no_gpu: str = "", seconds: int | None = None,
              budget: int | None = None) -> dict:
    env = _json(log / "environment.json")
    return {"seconds": seconds, "budget": budget, "no_gpu": no_gpu or None,
            "stages": stages(log), "environment": env["lines"] if env else None,
            "self_test": env["self_test"] if env else None,
            "tests": tests(log, "tests"), "proofs": tests(log, "proofs"),
            "example": training(log, "example"), "cifar10": training(log, "cifar10"),
            "memory": _json(log / "memory.json"), "bench": bench(log),
            "data": _json(log / "data.json")}


def _n(value, digits=0) -> str:
    return "?" if value is None else f"{value:,.{digits}f}"


def text(summary: dict) -> list[str]:
    of = f" of {summary['budget']}" if summary.get("budget") else ""
    lines = [f"gpu-check summary ({_n(summary['seconds'])} s{of})"]
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
    for stage in ("tests", "proofs"):
        counts = summary[stage]
        lines.append(f"{stage}: no result" if counts is None else _tests_text(stage, counts))
    for stage in ("example", "cifar10"):
        lines.append(_training_text(stage, summary[stage]))
    lines.append("memory: no result" if summary["memory"] is None else
                 _memory_text(summary["memory"]))
    lines.extend(["bench: no result"] if summary["bench"] is None else
                 _bench_lines(summary["bench"]))
    lines.append("data: no result" if summary["data"] is None else _data_text(summary["data"]))
    return lines


def _tests_text(stage: str, t: dict) -> str:
    failed = ""
    if t["failed_tests"]:
        failed = (f"; failed: {', '.join(t['failed_tests'][:6])}"
                  + (" ..." if len(t["failed_tests"]) > 6 else ""))
    return f"{stage}: {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped{failed}"


def _training_text(stage: str, run: dict | None) -> str:
    if not run:
        return f"{stage}: no result"
    part = (f"{stage}: {_n(run.get('images_per_s'))} img/s, final test error "
            f"{_n(run.get('final_test_error_percent'), 2)}%")
    if run.get("error"):
        part += f"; ERROR: {run['error'][:150]}"
    if stage == "example" and run.get("devices"):
        part += f"; {run['devices'].split('physical: ', 1)[-1]}"
    return part


def _memory_text(memory: dict) -> str:
    return "memory (CuPy pool, estimate): " + "; ".join(
        f"{c['config']} mini {c['mini']} --gpu {c['gpus']}: {_n(c['pool_bytes'] / MIB)} "
        f"MiB held, {_n(c['estimate_bytes'] / MIB)} MiB estimated "
        f"({c['pool_bytes'] / c['estimate_bytes']:.2f})" for c in memory["configs"])


def _bench_lines(bench: dict) -> list[str]:
    """A table with a column per net: a row per engine column (img/s, x PyTorch in the
    same mode, ``eager`` where a CUDA graph was asked for and not captured) and per
    PyTorch mode, the default's memory against PyTorch fp32's; then the hybrid and what
    the budget left out."""
    nets = bench["nets"].values()
    lines = [f"bench, img/s (x: engine / PyTorch in the same mode, fp32 unless named; "
             f"minibatch {bench['mini']}):",
             _row("", list(bench["nets"]))]
    for column in dict.fromkeys(c for t in nets for c in t["engine"]):
        mode = SAME_MODE.get(column, "fp32")
        lines.append(_row(column + (f" (x {mode})" if mode not in ("fp32", column) else ""),
                          [_engine_cell(t, column) for t in nets]))
    for mode in dict.fromkeys(m for t in nets for m in t["torch"]):
        lines.append(_row(f"PyTorch {mode}", [_cell(t["torch"].get(mode)) for t in nets]))
    lines.append(_row("MiB: pool/PyTorch fp32", [_memory_cell(t) for t in nets]))
    hybrid = bench.get("hybrid")
    if hybrid:
        figures, ratio = hybrid["four_logical_devices"], hybrid["ratio_to_1gpu"]
        lines.append(f"  hybrid 4gpu-data-model on --gpu {hybrid['gpus']}: "
                     + (f"error: {figures['error'][:100]}" if "error" in figures else
                        f"{_n(figures.get('images_per_s'))} img/s"
                        + (f" = {ratio:.2f}x the 1gpu config" if ratio else "")))
    if bench.get("skipped"):
        lines.append(f"  left out ({bench['skipped'][0]['reason'].split(':')[0]}): "
                     + ", ".join(_left_out(s) for s in bench["skipped"]))
    return lines


def _left_out(column: dict) -> str:
    """'alexnet bf16', 'alexnet PyTorch tf32', 'the hybrid'."""
    if column["side"] == "hybrid":
        return "the hybrid"
    return f"{column['net']} {'PyTorch ' if column['side'] == 'torch' else ''}{column['column']}"


def _row(name: str, cells: list[str]) -> str:
    return f"  {name:24s}" + "".join(f"{c:>20s}" for c in cells)


def _cell(figures: dict | None) -> str:
    if figures is None:
        return "-"
    return "error" if "error" in figures else _n(figures.get("images_per_s"))


def _engine_cell(table: dict, column: str) -> str:
    figures = table["engine"].get(column)
    ratio = table["against_torch"].get(column, {}).get("speed")
    if figures is None or "error" in figures:
        return _cell(figures)
    return (_cell(figures) + (f" {ratio:.2f}x" if ratio is not None else "")
            + (" eager" if figures.get("eager_because") else ""))


def _memory_cell(table: dict) -> str:
    engine = table["engine"].get("default", {}).get("memory_bytes")
    torch = table["torch"].get("fp32", {}).get("memory_bytes")
    ratio = table["against_torch"].get("default", {}).get("memory")
    return (f"{_n(engine and engine / MIB)}/{_n(torch and torch / MIB)}"
            + (f" {ratio:.2f}x" if ratio is not None else ""))


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
    ap.add_argument("--budget", type=int, default=None, help="the seconds it was given")
    args = ap.parse_args(argv)
    summary = summarize(args.log, args.no_gpu, args.seconds, args.budget)
    print("\n".join(text(summary)))
    (args.log / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return exit_status(summary)


if __name__ == "__main__":
    sys.exit(main())

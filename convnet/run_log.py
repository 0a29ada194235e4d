"""What a training run tells its user: progress bar, per-test lines, CSV log, profile.

The CSV (``log.csv`` in the save path, one row per test interval) has the
columns of :data:`CSV_COLUMNS`, much like the Caffe2 trainer's log.
"""

from __future__ import annotations

import csv
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from convnet.errors import CheckpointError

CSV_COLUMNS = ("time_spent", "cumulative_time", "inputs_per_sec", "cost", "error", "epoch",
               "batch", "learning_rate", "test_cost", "test_error")


@dataclass
class TestResult:
    cost: float
    error: float
    cases: int


@dataclass
class TrainWindow:
    """Training figures summed since the last test line."""

    cost: float = 0.0
    error: float = 0.0
    cases: int = 0
    seconds: float = 0.0

    @property
    def mean_cost(self) -> float:
        return self.cost / self.cases if self.cases else float("nan")

    @property
    def mean_error(self) -> float:
        return self.error / self.cases if self.cases else float("nan")

    @property
    def images_per_second(self) -> float:
        return self.cases / self.seconds if self.seconds else 0.0


def progress_bar(total: int, initial: int, disable: bool):
    return tqdm(total=total, initial=initial, unit="batch", disable=disable, file=sys.stderr,
                dynamic_ncols=True, leave=False)


class RunLog:
    """Console lines and the CSV log of one run."""

    def __init__(self, save_dir: Path | None, cost_layer: str, plan, quiet: bool = False):
        self.cost_layer = cost_layer
        self.quiet = quiet
        self.cumulative_time = 0.0
        self.window = TrainWindow()
        self._interval_start = time.perf_counter()
        self._profile: dict[tuple[str, str, int], float] = defaultdict(float)
        self._profile_steps = 0
        self._csv_path = save_dir / "log.csv" if save_dir else None
        if self._csv_path is not None:
            try:
                save_dir.mkdir(parents=True, exist_ok=True)
                new = not self._csv_path.exists()
                with open(self._csv_path, "a", newline="") as f:
                    if new:
                        csv.writer(f).writerow(CSV_COLUMNS)
            except OSError as error:
                raise CheckpointError(f"cannot write to save path {save_dir}: "
                                      f"{error.strerror}") from None

    def accumulate_train(self, totals: dict) -> None:
        w = self.window
        w.cost += totals["cost"]
        w.error += totals["error"]
        w.cases += totals["cases"]
        w.seconds += totals["seconds"]

    def record(self, epoch: int, batch_id: int, test: TestResult, learning_rate: float,
               write=print) -> None:
        w = self.window
        now = time.perf_counter()
        spent = now - self._interval_start
        self._interval_start = now
        self.cumulative_time += spent
        line = (f"epoch {epoch:3d} batch {batch_id:3d}  train cost {w.mean_cost:.4f} "
                f"error {100 * w.mean_error:5.2f}%  |  test cost {test.cost:.4f} "
                f"error {100 * test.error:5.2f}%  |  {w.images_per_second:7.0f} img/s  "
                f"lr {learning_rate:.3g}")
        write(line)
        if self._csv_path is not None:
            row = (f"{spent:.3f}", f"{self.cumulative_time:.3f}", f"{w.images_per_second:.1f}",
                   f"{w.mean_cost:.6f}", f"{w.mean_error:.6f}", epoch, batch_id,
                   f"{learning_rate:.6g}", f"{test.cost:.6f}", f"{test.error:.6f}")
            try:
                with open(self._csv_path, "a", newline="") as f:
                    csv.writer(f).writerow(row)
            except OSError as error:
                raise CheckpointError(f"cannot append to {self._csv_path}: "
                                      f"{error.strerror}") from None
        self.window = TrainWindow()

    def print_test_only(self, test: TestResult) -> None:
        print(f"test cost {test.cost:.4f}  error {100 * test.error:.2f}%  ({test.cases} cases)")

    def note(self, text: str) -> None:
        print(text)

    def add_profile(self, timings) -> None:
        if not timings:
            return
        self._profile_steps += 1
        for t in timings:
            self._profile[(t.layer, t.kind, t.device)] += t.end - t.start

    def close(self) -> None:
        if self._profile_steps:
            print(self.profile_text())

    def profile_text(self) -> str:
        """Mean seconds per step of each (layer, operation kind), summed over devices."""
        per = defaultdict(float)
        for (layer, kind, _device), seconds in self._profile.items():
            per[(layer, kind)] += seconds / self._profile_steps
        total = sum(per.values()) or 1.0
        lines = [f"Profile (mean per step over {self._profile_steps} steps, all devices)",
                 f"{'layer':<16} {'operation':<10} {'ms':>9} {'share':>7}"]
        for (layer, kind), seconds in sorted(per.items(), key=lambda kv: -kv[1]):
            lines.append(f"{layer:<16} {kind:<10} {1000 * seconds:9.2f} "
                         f"{100 * seconds / total:6.1f}%")
        return "\n".join(lines)

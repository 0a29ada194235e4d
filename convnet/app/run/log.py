"""What a training run tells its user: progress bar, per-test lines, CSV log, profile.

The CSV (``log.csv`` in the save path) has one row per test interval, with
the columns of :data:`CSV_COLUMNS`, much like the Caffe2 trainer's log:

``time_spent``       wall-clock seconds of the interval (training, testing, saving)
``cumulative_time``  the sum of ``time_spent`` since the run began (kept across resumes)
``inputs_per_sec``   training cases per second of training step time in the interval
``cost``, ``error``  mean training cost and error (a fraction) over the interval
``epoch``, ``batch`` the epoch (from 1) and the number of the data batch just trained
``learning_rate``    epsW of the first weight layer at that point of the schedule
``test_cost``, ``test_error``  the test result at the end of the interval

Lines end in ``\n`` on every platform.  The progress bar (on stderr) counts
minibatches, shows the running training cost, and is drawn only when stderr
is a terminal: under a pipe or in a log file it would be a stream of
carriage-return fragments.
"""

from __future__ import annotations

import csv
import io
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from convnet.errors import CheckpointError, ConvnetError
from convnet.outputs import write_output

CSV_NAME = "log.csv"
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


def progress_bar(total: int, initial: int, disable: bool, unit: str = "minibatch"):
    """A bar of ``total`` units (minibatches, images) on stderr; off with ``disable`` or
    when stderr is not a terminal (a pipe or a file would get every redraw)."""
    return tqdm(total=total, initial=initial, unit=unit, file=sys.stderr,
                disable=disable or not _is_terminal(sys.stderr), dynamic_ncols=True,
                leave=False)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def read_log(path: Path) -> list[dict]:
    """The rows of a run's CSV log, numbers as floats (epoch and batch as ints)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as error:
        raise ConvnetError(f"cannot read the run log {path}: {error.strerror}") from None
    return [row_values(row) for row in rows]


def row_values(row: dict[str, str]) -> dict:
    """A CSV row's numbers: floats, the epoch and batch ints."""
    return {k: (int(v) if k in ("epoch", "batch") else float(v)) for k, v in row.items()}


def _append_no_follow(path: str, flags: int) -> int:
    """Open the log to append a row, refusing a link put in its place during the run."""
    return os.open(path, flags | os.O_NOFOLLOW)


def _test_of_row(row: list[str]) -> tuple[int, int, float] | None:
    """(epoch, batch, test error) of a CSV row kept from a resumed run (None if unreadable)."""
    try:
        return int(row[5]), int(row[6]), float(row[9])
    except ValueError:
        return None


def _history_row(row: list[str]) -> dict | None:
    """A CSV row kept from a resumed run as :func:`read_log` reads it (None if unreadable)."""
    try:
        return row_values(dict(zip(CSV_COLUMNS, row)))
    except ValueError:
        return None


class RunLog:
    """Console lines and the CSV log of one run.

    The CSV is written at the first :meth:`record` or checkpoint
    (:meth:`start`), not before, so a run that fails before either leaves an
    earlier run's log alone.
    A fresh run then starts a new ``log.csv``; a resumed run
    (``resume_rows`` = the rows its checkpoint had logged) keeps those rows
    and drops any logged after the checkpoint was written, so the log of an
    interrupted and resumed run has exactly one row per test interval, like
    an uninterrupted one.
    """

    def __init__(self, save_dir: Path | None, cost_layer: str, plan=None, quiet: bool = False,
                 test_lines: bool = True):
        self.cost_layer = cost_layer
        self.quiet = quiet
        self.test_lines = test_lines  # print a line at every test (--compare: --verbose)
        self.cumulative_time = 0.0
        self.window = TrainWindow()
        self.rows = 0  # data rows in the CSV, for the checkpoint
        self._interval_start = time.perf_counter()
        self._profile: dict[tuple[str, str, int], float] = defaultdict(float)
        self._profile_steps = 0
        self._host_waits = 0  # over the profiled steps (convnet.runtime.step.host_reads)
        self._csv_path = save_dir / CSV_NAME if save_dir else None
        self._resume_rows: int | None = None
        self._started = False
        self._kept = False  # the resumed rows are in tests and history
        self.tests: list[tuple[int, int, float]] = []  # (epoch, batch, test error) logged
        #: Every row of this run's log, resumed rows included, as :func:`read_log` reads
        #: them (kept without a CSV too: the Python API's history).
        self.history: list[dict] = []

    def resume_from(self, rows: int) -> None:
        """This run continues one whose checkpoint had logged ``rows`` CSV rows."""
        self._resume_rows = rows

    @property
    def csv_path(self) -> Path | None:
        return self._csv_path

    @property
    def started(self) -> bool:
        """Whether this run has begun its CSV (before that, a file at ``csv_path`` is an
        earlier run's)."""
        return self._started

    def restart_clock(self) -> None:
        """Start timing the current interval now (after loading, before training)."""
        self._interval_start = time.perf_counter()

    def _start_csv(self) -> list[list[str]]:
        """The rows the CSV starts with: none for a fresh run; for a resumed run, the
        rows the checkpoint knew of (fewer if the file has fewer)."""
        if self._resume_rows is None or not self._csv_path.exists():
            return []
        try:
            with open(self._csv_path, newline="") as f:
                lines = f.read().splitlines(keepends=True)
        except OSError as error:
            raise CheckpointError(f"cannot read {self._csv_path}: {error.strerror}") from None
        except UnicodeDecodeError:
            return []
        if not lines or next(csv.reader(lines[:1]), None) != list(CSV_COLUMNS):
            return []  # not our log: start a new one
        kept = []
        for line in lines[1:1 + self._resume_rows]:
            if not line.endswith("\n"):
                break  # a row cut short by a kill
            row = next(csv.reader([line]), None)
            if row is None or len(row) != len(CSV_COLUMNS):
                break
            kept.append(row)
        return kept

    @property
    def best_test(self) -> tuple[int, int, float] | None:
        """(epoch, batch, test error) of the lowest test error logged, resumed rows included."""
        return min(self.tests, key=lambda t: t[2]) if self.tests else None

    def start(self) -> None:
        """Begin this run's CSV, if not begun: the header and the rows a resumed run
        keeps, written whole (to a temporary file, then renamed).  Called at the first
        row, and before the first checkpoint, whose row count must describe the log
        beside it: never an earlier run's rows that ``--overwrite`` replaces."""
        if self._started or self._csv_path is None:
            return
        try:
            kept = self._start_csv()
            text = io.StringIO()
            writer = csv.writer(text, lineterminator="\n")
            writer.writerow(CSV_COLUMNS)
            writer.writerows(kept)
            write_output(self._csv_path, text.getvalue().encode())
        except OSError as error:
            raise CheckpointError(f"cannot write the log {self._csv_path}: "
                                  f"{error.strerror or error}") from None
        self._keep(kept)
        self.rows = len(kept)
        self._started = True

    def read_resumed(self) -> None:
        """The rows a resumed run keeps, in :attr:`tests` and :attr:`history`, for a run
        that trains no further: nothing is written."""
        if not self._started and self._csv_path is not None:
            self._keep(self._start_csv())

    def _keep(self, kept: list[list[str]]) -> None:
        if self._kept:
            return
        self._kept = True
        self.tests[:0] = [t for t in map(_test_of_row, kept) if t is not None]
        self.history[:0] = [r for r in map(_history_row, kept) if r is not None]

    def _write_row(self, row) -> None:
        self.start()
        try:
            with open(self._csv_path, "a", newline="", opener=_append_no_follow) as f:
                csv.writer(f, lineterminator="\n").writerow(row)
        except OSError as error:
            raise CheckpointError(f"cannot write the log {self._csv_path}: "
                                  f"{error.strerror or error}") from None
        self.rows += 1

    def accumulate_train(self, totals: dict) -> None:
        w = self.window
        w.cost += totals["cost"]
        w.error += totals["error"]
        w.cases += totals["cases"]
        w.seconds += totals["seconds"]

    def record(self, epoch: int, batch_id: int, test: TestResult, learning_rate: float,
               write=print, position: float | None = None) -> None:
        """A test line, its CSV row and its :attr:`history` row; ``position`` is where the
        run stands in epochs (e.g. 2.4), which the picture draws the row at."""
        w = self.window
        now = time.perf_counter()
        spent = now - self._interval_start
        self._interval_start = now
        self.cumulative_time += spent
        line = (f"epoch {epoch:3d} batch {batch_id:3d}  train cost {w.mean_cost:.4f} "
                f"error {100 * w.mean_error:5.2f}%  |  test cost {test.cost:.4f} "
                f"error {100 * test.error:5.2f}%  |  {w.images_per_second:7.0f} img/s  "
                f"lr {learning_rate:.3g}")
        if self.test_lines:
            write(line)
        self.tests.append((epoch, batch_id, test.error))
        row = (f"{spent:.3f}", f"{self.cumulative_time:.3f}", f"{w.images_per_second:.1f}",
               f"{w.mean_cost:.6f}", f"{w.mean_error:.6f}", str(epoch), str(batch_id),
               f"{learning_rate:.6g}", f"{test.cost:.6f}", f"{test.error:.6f}")
        if self._csv_path is not None:
            self._write_row(row)
        values = row_values(dict(zip(CSV_COLUMNS, row)))
        if position is not None:
            values["epoch_position"] = position
        self.history.append(values)
        self.window = TrainWindow()

    def print_test_only(self, test: TestResult, views: int = 1) -> None:
        how = f", {views} views averaged" if views > 1 else ""
        print(f"test cost {test.cost:.6f}  error {test.error:.6f} ({100 * test.error:.2f}%)  "
              f"on {test.cases} cases ({self.cost_layer}{how})")

    def note(self, text: str) -> None:
        print(text)

    def status(self, text: str) -> None:
        """A line about the run itself, not its results (stderr, like the bar)."""
        print(text, file=sys.stderr)

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=sys.stderr)

    def add_profile(self, timings, host_waits: int = 0) -> None:
        """One step's operation timings and the times its host waited for a device."""
        if not timings:
            return
        self._profile_steps += 1
        self._host_waits += host_waits
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
        waits = self._host_waits / self._profile_steps
        lines.append(f"host waits per step: {waits:.3g} (where the host waits for a device "
                     f"result; one per device at the step's end)")
        return "\n".join(lines)

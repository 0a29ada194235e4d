"""What redrawing ``log.png`` at every test costs a training run.

Trains the same run three ways, in turn, ``--repeat`` times each: with no redraws
during training (the picture drawn once at the end), with the run's own redraws (a
thread of their own, convnet/app/run/live_picture.py), and with every redraw drawn on
the training thread before it goes on; prints each run's seconds and the medians.
By default the bundled example for 10 epochs, tested after every batch (50 tests):

    flock /work/bench.lock .venv/bin/python bench/bench_log_picture.py --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from convnet.app.command_line.parser import build_parser  # noqa: E402
from convnet.app.options import resolve_options  # noqa: E402
from convnet.app.run import job, live_picture  # noqa: E402


def _on_the_training_thread(self) -> None:
    if self.enabled:
        with self._lock:
            self._draw()


MODES = {"no redraws": lambda self: None,
         "redrawn (its thread)": live_picture.LivePicture.update,
         "redrawn on the training thread": _on_the_training_thread}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    import matplotlib  # noqa: F401 - imported before timing, as by any run after its first

    seconds = {mode: [] for mode in MODES}
    for _ in range(args.repeat):
        for mode, update in MODES.items():
            live_picture.LivePicture.update = update
            with tempfile.TemporaryDirectory() as folder:
                opts = resolve_options(build_parser().parse_args(
                    ["--epochs", str(args.epochs), "--test-freq", "1", "--no-progress",
                     "--save-path", str(Path(folder) / "run")]))
                start = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):
                    job.run(opts)
                seconds[mode].append(time.perf_counter() - start)
    print(f"the bundled example, {args.epochs} epochs tested after every batch")
    for mode, values in seconds.items():
        print(f"{mode:<32} " + " ".join(f"{v:6.2f}" for v in values) +
              f"   median {statistics.median(values):.2f} s")


if __name__ == "__main__":
    main()

"""``log.png`` redrawn while the run trains: a picture to watch, as Darknet's chart.png.

Each test row asks for a redraw (:meth:`LivePicture.update`); a thread of its own
draws the rows logged so far (:func:`convnet.app.run.log_plot.write_log_png`, through
the one output path: whole or not at all, never through a link), so the training
loop never waits for matplotlib.  Drawing takes a core for 0.2-1 s on a 2-core machine,
while the training steps between two tests may take less, so the drawer

* always draws the newest rows, dropping requests that came while it drew;
* rests at least :data:`REST_FACTOR` times as long as its last drawing took before the
  next one, so that it takes at most a fifth of one core (the bundled example tested
  after every batch trains as fast as without it, docs/USAGE.md);
* runs at the lowest scheduling priority where the system allows one thread's to be
  set (Linux), so the device workers come first.

:meth:`LivePicture.finish` (the end of the run, or where it stops early) waits for the
drawer and draws the last rows itself, so the picture a run leaves always shows all
of them.  A drawing that fails in the thread is said once, as a warning, and training
goes on; without matplotlib there is no picture and no thread.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from convnet.app.invocation import shown_path
from convnet.app.run.log import RunLog
from convnet.app.run.log_plot import PNG_NAME, write_log_png
from convnet.errors import ConvnetError
from convnet.optional import has_matplotlib

#: The drawer rests this many times as long as its last drawing took.
REST_FACTOR = 4.0

#: Seconds :meth:`LivePicture.finish` waits for a drawing under way.
FINISH_WAIT = 30.0


class LivePicture:
    """The picture of ``log``'s rows beside its CSV, redrawn as rows come (see the
    module).  Nothing is drawn for a log without a CSV, or without matplotlib."""

    def __init__(self, log: RunLog, layer_def: Path):
        self._log = log
        self._layer_def = Path(layer_def)
        self.enabled = log.csv_path is not None and has_matplotlib()
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._drawn_rows = -1  # rows in the picture last drawn
        self._failure: str | None = None
        self._warned = False
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()

    @property
    def path(self) -> Path | None:
        csv_path = self._log.csv_path
        return csv_path.with_name(PNG_NAME) if csv_path is not None else None

    def update(self) -> None:
        """Ask for the rows logged so far to be drawn, without waiting for it."""
        if not self.enabled:
            return
        self._warn_failure()
        if self._thread is None:
            self._thread = threading.Thread(target=self._draw_while_asked, daemon=True,
                                            name="log-picture")
            self._thread.start()
        self._wanted.set()

    def finish(self) -> Path | None:
        """Stop the drawer and draw every row logged, unless already drawn; the picture's
        path, or None without a picture of this run (an earlier run's stays as it is)."""
        if not self.enabled or not self._log.started or not self._log.history:
            return None
        self._closing.set()
        if self._thread is not None:
            self._wanted.set()
            self._thread.join(FINISH_WAIT)
        with self._lock:
            if self._drawn_rows != len(self._log.history):
                self._draw()
        return self.path

    def _draw(self) -> None:
        rows = list(self._log.history)
        title = f"{self._layer_def.name}: {shown_path(self._log.csv_path)}"
        write_log_png(rows, self.path, title)
        self._drawn_rows = len(rows)

    def _draw_while_asked(self) -> None:
        lowest_priority()
        while True:
            self._wanted.wait()
            if self._closing.is_set():
                return
            self._wanted.clear()
            started = time.perf_counter()
            with self._lock:
                try:
                    self._draw()
                except (ConvnetError, Exception) as error:  # noqa: BLE001 - said once
                    self._failure = str(error)
                    return
            self._closing.wait(REST_FACTOR * (time.perf_counter() - started))

    def _warn_failure(self) -> None:
        if self._failure is not None and not self._warned:
            self._warned = True
            self._log.warn(f"{PNG_NAME} is no longer redrawn: {self._failure}")


def lowest_priority() -> None:
    """Give the calling thread the lowest scheduling priority, where a thread's own can
    be set (Linux: nice applies to a thread); elsewhere nothing changes."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass

"""log.png is redrawn while a run trains, on a thread of its own, and its labels are
readable however long the run."""

from __future__ import annotations

import time

import pytest

from convnet.app.run.live_picture import LivePicture
from convnet.app.run.log import RunLog, read_log
from convnet.app.run.log import TestResult as Tested
from convnet.app.run.log_plot import log_figure

pytest.importorskip("matplotlib")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _log_with_rows(folder, count: int) -> RunLog:
    log = RunLog(folder, "logprob")
    for i in range(count):
        log.accumulate_train({"cost": 2.0 / (i + 1), "error": 0.5 / (i + 1), "cases": 1,
                              "seconds": 0.01})
        log.record(1 + i // 5, i % 5 + 1, Tested(1.0 / (i + 1), 0.4 / (i + 1), 10), 0.01,
                   write=lambda line: None, position=(i + 1) / 5)
    return log


def _wait_for(condition, seconds: float = 60.0) -> bool:
    """Poll ``condition`` for up to ``seconds`` (a generous bound: the drawer shares a
    loaded machine)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_the_picture_is_drawn_while_the_run_goes_on_and_whole_at_its_end(tmp_path):
    log = _log_with_rows(tmp_path, 1)
    picture = LivePicture(log, tmp_path / "net.cfg")
    png = tmp_path / "log.png"
    picture.update()  # returns at once: the drawing is the thread's
    assert _wait_for(lambda: png.exists() and png.read_bytes()[:8] == PNG_SIGNATURE)
    drawn = png.stat().st_mtime_ns
    for i in range(3):  # more rows while the drawer may be busy or resting
        log.record(1, i + 2, Tested(0.5, 0.1, 10), 0.01, write=lambda line: None)
        picture.update()
    assert picture.finish() == png
    assert png.stat().st_mtime_ns >= drawn
    assert picture._drawn_rows == len(log.history) == len(read_log(tmp_path / "log.csv")) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv", "log.png"]  # no temps


def test_a_log_without_a_csv_has_no_picture_and_no_thread(tmp_path):
    log = RunLog(None, "logprob")
    picture = LivePicture(log, tmp_path / "net.cfg")
    log.record(1, 1, Tested(0.5, 0.1, 10), 0.01, write=lambda line: None)
    picture.update()
    assert picture._thread is None and picture.finish() is None
    assert log.history[0]["test_error"] == 0.1  # the history is kept all the same


def _overlapping_labels(figure) -> list[tuple[str, str]]:
    renderer = figure.canvas.get_renderer()
    pairs = []
    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            boxes = [t.get_window_extent(renderer) for t in labels]
            for i in range(len(boxes) - 1):
                if boxes[i].overlaps(boxes[i + 1]):
                    pairs.append((labels[i].get_text(), labels[i + 1].get_text()))
    return pairs


@pytest.mark.parametrize("tests, per_epoch", [(1, 1), (8, 8), (30, 1), (200, 5), (1000, 4)])
def test_no_tick_label_runs_into_another_in_short_or_long_runs(tests, per_epoch):
    rows = [{"cost": 2.0 / (i + 1), "error": 0.5 / (i + 1), "test_cost": 2.2 / (i + 1),
             "test_error": 0.6 / (i + 1), "epoch": 1 + i // per_epoch, "batch": i % per_epoch,
             "cumulative_time": 0.5 * i} for i in range(tests)]
    figure = log_figure(rows, "net.cfg: run/log.csv")
    figure.canvas.draw()
    assert _overlapping_labels(figure) == []
    x_labels = [t.get_text() for t in figure.axes[0].get_xticklabels() if t.get_text()]
    assert len(x_labels) >= 3  # an axis that says where the run stands
    assert all(ax.get_xlabel() == "epoch" for ax in figure.axes)

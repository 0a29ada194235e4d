"""--tensorboard DIR: every test's figures as TensorBoard event files, read back here."""

from __future__ import annotations

import struct

import pytest

from convnet.app.command_line.parser import build_parser
from convnet.app.options import resolve_options
from convnet.app.run import job, training
from convnet.app.run.log import read_log
from convnet.errors import ConvnetError, TrainingError, UsageError
from tests.support.cli import DUMMY

tensorboardX = pytest.importorskip("tensorboardX")


def scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """tag -> (step, value) of every scalar in the event files of ``folder`` (records: a
    length, its checksum, the Event message, its checksum)."""
    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def _options(*args):
    return resolve_options(build_parser().parse_args([*DUMMY, *map(str, args)]))


def test_every_test_is_a_point_of_each_scalar(tmp_path, capsys):
    job.run(_options("--epochs", "2", "--test-freq", "2", "--save-path", tmp_path / "run",
                          "--tensorboard", tmp_path / "tb"))
    rows = read_log(tmp_path / "run" / "log.csv")
    found = scalars(tmp_path / "tb")
    assert sorted(found) == ["cost/test", "cost/train", "error/test", "error/train",
                             "images_per_second", "learning_rate"]
    assert [v for _, v in found["error/test"]] == pytest.approx([r["test_error"] for r in rows])
    assert [v for _, v in found["cost/train"]] == pytest.approx([r["cost"] for r in rows])
    steps = [s for s, _ in found["error/test"]]
    assert len(steps) == len(rows) >= 2 and steps == sorted(steps) and steps[0] > 0


def test_tensorboard_needs_a_folder_and_a_run_that_fails_first_leaves_none(tmp_path,
                                                                          monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="--tensorboard: .* is not a folder"):
        _options("--tensorboard", tmp_path / "file")

    def fails(self, *args, **kwargs):
        raise TrainingError("NaN in the cost")

    monkeypatch.setattr(training.Trainer, "_train_batch", fails)
    with pytest.raises(TrainingError):
        job.run(_options("--tensorboard", tmp_path / "tb"))
    assert not (tmp_path / "tb").exists()


def test_a_folder_that_cannot_be_made_is_refused_before_any_training(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConvnetError, match=r"--tensorboard: cannot make event files in "
                                         r".*file/tb: .*file is not a folder"):
        _options("--tensorboard", tmp_path / "file" / "tb")


def test_a_full_disk_stops_the_event_files_with_one_warning_and_the_run_saves(
        tmp_path, monkeypatch, capsys):
    """The event files are a view of the log: when they cannot be written (a full disk)
    the run says so once and goes on, its checkpoint saved as ever."""
    import errno

    from tensorboardX import record_writer

    written = []

    def full_disk(self, data):
        if written:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(data)

    monkeypatch.setattr(record_writer.RecordWriter, "write", full_disk)
    job.run(_options("--epochs", "2", "--test-freq", "1", "--save-path", tmp_path / "run",
                     "--tensorboard", tmp_path / "tb"))
    err = capsys.readouterr().err
    assert err.count("warning: --tensorboard: cannot write into") == 1
    assert "No space left on device; no more event files this run" in err
    assert len(read_log(tmp_path / "run" / "log.csv")) == 4
    assert (tmp_path / "run" / "checkpoint.npz").is_file()


def test_runs_started_in_the_same_second_keep_their_own_event_files(tmp_path, monkeypatch):
    """tensorboardX names a file by the second and the host, and opens it with "wb": a
    second run in the same second would truncate the first run's file."""
    from types import SimpleNamespace

    from tensorboardX import event_file_writer

    from convnet.app.run.event_files import EventFiles

    monkeypatch.setattr(event_file_writer, "time", SimpleNamespace(time=lambda: 1.8e9))
    warnings = []
    for run in range(2):
        files = EventFiles(tmp_path, warn=warnings.append)
        files.add({"cost": 1.0, "test_cost": 2.0, "error": 0.5, "test_error": 0.25 + run,
                   "learning_rate": 0.1, "inputs_per_sec": 100.0}, step=1)
        files.close()
    assert len(list(tmp_path.iterdir())) == 2 and not warnings
    assert sorted(v for _, v in scalars(tmp_path)["error/test"]) == [0.25, 1.25]

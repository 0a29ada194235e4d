"""log.png is drawn where a run stops early, from the rows logged so far, so that the
banner's list of files holds (Ctrl-C and SIGTERM: tests/app/test_cli_kill.py)."""

from __future__ import annotations

import pytest

from convnet.app.command_line.parser import build_parser
from convnet.app.options import resolve_options
from convnet.app.run import job, training
from convnet.app.run.log import read_log
from convnet.errors import TrainingError
from tests.support.cli import DUMMY

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_an_error_after_training_started_still_draws_the_log(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    opts = resolve_options(build_parser().parse_args(
        [*DUMMY, "--train-range", "1-4", "--test-freq", "1", "--epochs", "1",
         "--save-path", str(folder)]))
    batches = {"trained": 0}
    train_batch = training.Trainer._train_batch

    def third_fails(self, *args, **kwargs):
        batches["trained"] += 1
        if batches["trained"] == 3:
            raise TrainingError("NaN in the cost")
        return train_batch(self, *args, **kwargs)

    monkeypatch.setattr(training.Trainer, "_train_batch", third_fails)
    with pytest.raises(TrainingError, match="training diverged in epoch 1"):
        job.run(opts)
    assert len(read_log(folder / "log.csv")) == 2  # two batches tested before the error
    assert (folder / "log.png").read_bytes()[:8] == PNG_SIGNATURE


def test_a_run_that_fails_before_its_log_leaves_an_earlier_picture_alone(tmp_path,
                                                                         monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    earlier = folder / "log.png"
    earlier.write_bytes(b"an earlier run's picture")
    opts = resolve_options(build_parser().parse_args(
        [*DUMMY, "--train-range", "1-4", "--epochs", "1", "--save-path", str(folder),
         "--overwrite"]))

    def fails(self, *args, **kwargs):
        raise TrainingError("NaN in the cost")

    monkeypatch.setattr(training.Trainer, "_train_batch", fails)
    with pytest.raises(TrainingError):
        job.run(opts)
    assert earlier.read_bytes() == b"an earlier run's picture"

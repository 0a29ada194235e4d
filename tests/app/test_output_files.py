"""Hostile output paths: every file a run writes is written whole through a temporary
file and a rename (a link planted at the target is replaced, never written through),
stays inside its folder whatever a layer is called, and replaces an existing file only
with --overwrite; --auto-place's config pair is written whole or not at all."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest

from convnet.app.command_line.main import main
from convnet.app.run.folder import LOCK_NAME, claim_run_folder
from convnet.errors import CheckpointError, UsageError
from convnet.optional import has_matplotlib
from tests.support.cli import (DUMMY, EXAMPLES, SINGLE_DEF, SINGLE_PARAMS, assert_clean_error,
                               ok, run_cli, run_main)

needs_matplotlib = pytest.mark.skipif(not has_matplotlib(), reason="draws a PNG")
VICTIM_TEXT = "not the run's to write\n"


def victim(tmp_path: Path) -> Path:
    """A file outside the run that a planted link points to."""
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT)
    return path


def untouched(path: Path) -> bool:
    return path.read_text() == VICTIM_TEXT


# ------------------------------------------------------------ links at the target
@needs_matplotlib
def test_a_link_planted_as_log_png_is_replaced_not_followed(tmp_path):
    target, run = victim(tmp_path), tmp_path / "run"
    run.mkdir()
    (run / "log.png").symlink_to(target)
    ok(run_cli(*DUMMY, "--epochs", "1", "--save-path", run, "--overwrite"))
    assert untouched(target)
    assert not (run / "log.png").is_symlink()
    assert (run / "log.png").read_bytes().startswith(b"\x89PNG")


def test_a_folder_holding_an_earlier_runs_picture_is_refused_before_training(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.png").symlink_to(victim(tmp_path))
    refused = run_cli(*DUMMY, "--epochs", "1", "--save-path", run)
    assert_clean_error(refused, 2, "log.png of an earlier run", "--overwrite")
    assert sorted(p.name for p in run.iterdir()) == ["log.png"]


def test_a_features_file_is_never_replaced_unasked_nor_written_through_a_link(tmp_path):
    target, feats = victim(tmp_path), tmp_path / "feats"
    feats.mkdir()
    (feats / "data_batch_9.npz").symlink_to(target)
    args = [*DUMMY, "--epochs", "1", "--write-features", "fc10", "--feature-path", feats]
    refused = run_cli(*args)
    line = assert_clean_error(refused, 2, str(feats / "data_batch_9.npz"), "--overwrite")
    assert "--feature-path" in line and "epoch" not in refused.stdout  # before any training
    assert untouched(target)
    ok(run_cli(*args, "--overwrite"))
    assert untouched(target)
    assert not (feats / "data_batch_9.npz").is_symlink()
    assert sorted(p.name for p in feats.iterdir()) == ["data_batch_9.npz"]  # no temporaries


def test_a_link_planted_as_the_lock_file_is_refused_not_written(tmp_path):
    target, run = victim(tmp_path), tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).symlink_to(target)
    with pytest.raises(CheckpointError, match="is a link"):
        with claim_run_folder(run):
            pass
    assert untouched(target)


@needs_matplotlib
def test_the_plan_graph_replaces_a_file_only_with_overwrite_and_never_through_a_link(
        tmp_path, capsys):
    target, png = victim(tmp_path), tmp_path / "graph.png"
    png.symlink_to(target)
    assert main(["--print-plan", "--plan-graph", str(png)]) == 2
    assert_clean_error((2, capsys.readouterr().err), 2, str(png), "--plan-graph", "--overwrite")
    assert main(["--print-plan", "--plan-graph", str(png), "--overwrite"]) == 0
    assert untouched(target) and not png.is_symlink()
    assert png.read_bytes().startswith(b"\x89PNG")


def test_a_link_put_in_place_of_the_log_during_a_run_is_not_appended_to(tmp_path):
    from convnet.app.run import log as run_log

    target, run = victim(tmp_path), tmp_path / "run"
    run.mkdir()
    log = run_log.RunLog(run, "logprob")
    result = run_log.TestResult(1.0, 0.5, 10)
    log.record(1, 1, result, 0.01, write=lambda line: None)
    (run / "log.csv").unlink()
    (run / "log.csv").symlink_to(target)
    with pytest.raises(CheckpointError, match="cannot write the log"):
        log.record(1, 2, result, 0.01, write=lambda line: None)
    assert untouched(target)


# ------------------------------------------------------------ names from the config
def test_a_layer_name_cannot_lead_features_out_of_the_save_path(tmp_path):
    """A layer called ``../../../x`` gets the folder ``features-.._.._.._x`` inside the
    save path, not ``x`` three folders up."""
    layer = "../../../x"
    layer_def, layer_params = tmp_path / "def.cfg", tmp_path / "params.cfg"
    layer_def.write_text(SINGLE_DEF.read_text().replace("fc10", layer))
    layer_params.write_text(SINGLE_PARAMS.read_text().replace("fc10", layer))
    run = tmp_path / "a" / "b" / "run"
    ok(run_cli("--layer-def", layer_def, "--layer-params", layer_params, *DUMMY,
               "--epochs", "1", "--save-path", run, "--write-features", layer))
    assert (run / "features-.._.._.._x" / "data_batch_9.npz").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "def.cfg", "params.cfg"]
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["b"]


# ------------------------------------------------------------ --overwrite for every output
@needs_matplotlib
def test_compare_refuses_an_earlier_table_before_training_anything(tmp_path):
    from tests.app.comparison.test_compare import digits_argv

    root = tmp_path / "cmp"
    root.mkdir()
    (root / "compare.txt").write_text("an earlier comparison\n")
    proc = run_cli(*digits_argv(root, epochs=1))
    assert_clean_error(proc, 2, str(root / "compare.txt"), "--save-path", "--overwrite")
    assert sorted(p.name for p in root.iterdir()) == ["compare.txt"]  # nothing trained


def test_a_folder_holding_only_an_earlier_runs_log_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.csv").write_text("an earlier run's log\n")
    with pytest.raises(UsageError, match=r"log\.csv of an earlier run.*--overwrite"):
        with claim_run_folder(run):
            pass
    with claim_run_folder(run, overwrite=True):
        pass
    assert (run / "log.csv").read_text() == "an earlier run's log\n"  # replaced only when written


# ------------------------------------------------------------ --auto-place: both or neither
class _FullDisk:
    """An open file whose every write fails as on a full disk."""

    def __init__(self, handle):
        self._handle = handle

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


def test_auto_place_on_a_full_disk_leaves_neither_file_and_a_retry_works(
        tmp_path, monkeypatch, capsys):
    from convnet.app.prediction import auto_place

    # a placement that changes an update period, so that a params file goes with it
    monkeypatch.setattr(auto_place, "changed_periods", lambda net, best: {"fc10": 1})
    out = tmp_path / "placed.cfg"
    argv = ["--layer-def", str(SINGLE_DEF), "--layer-params", str(SINGLE_PARAMS), *DUMMY,
            "--gpu", "0,1", "--auto-place", "2", "--auto-place-out", str(out)]
    real_open, opened = io.open, []

    def second_file_hits_a_full_disk(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if "w" not in mode:
            return handle
        opened.append(file)
        return _FullDisk(handle) if len(opened) == 2 else handle

    with monkeypatch.context() as full:
        full.setattr(io, "open", second_file_hits_a_full_disk)
        assert main(argv) == 1
    assert len(opened) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no config, no temporary file
    err = "".join(line for line in capsys.readouterr().err.splitlines(keepends=True)
                  if not line.startswith("profiling "))  # the profile's progress lines
    line = assert_clean_error((1, err), 1, "--auto-place: cannot write",
                              "No space left", "nothing written")
    assert str(out) in line
    assert main(argv) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["placed-params.cfg", "placed.cfg"]
    assert "\nupdatePeriod=1" in (tmp_path / "placed-params.cfg").read_text()


def test_a_run_removes_the_temporary_files_a_killed_run_left_in_its_folder(tmp_path, capsys):
    """A run killed mid-write leaves ``.NAME.PID.RANDOM.tmp`` beside the file it was
    writing; the next run to hold the folder removes those of every file a run writes
    there, and nothing else."""
    run = tmp_path / "run"
    code, _, err = run_main(capsys, *DUMMY, "--epochs", "1", "--save-path", run)
    assert code == 0, err
    left = [run / f".{name}.4242.0badf00d.tmp" for name in ("checkpoint.npz", "log.csv",
                                                             "log.png")]
    for path in left:
        path.write_bytes(b"half written")
    (run / ".notes.tmp").write_text("the user's")
    code, _, err = run_main(capsys, "--load-file", run, "--epochs", "2")
    assert code == 0, err
    assert not any(path.exists() for path in left)
    assert (run / ".notes.tmp").read_text() == "the user's"


def test_overwrite_never_replaces_a_file_the_run_reads(tmp_path, capsys):
    """--overwrite replaces earlier outputs, not the run's own config or checkpoint."""
    layers = tmp_path / "layers.cfg"
    layers.write_text(SINGLE_DEF.read_text())
    code, _, err = run_main(capsys, "--layer-def", layers, "--layer-params", SINGLE_PARAMS,
                            "--data-dims", "1x8x8", "--num-classes", "10", "--print-plan",
                            "--plan-graph", layers, "--overwrite")
    assert_clean_error((code, err), 2, f"--plan-graph {layers} is the --layer-def this run "
                                       "reads", "give another file")
    assert layers.read_text() == SINGLE_DEF.read_text()
    run = tmp_path / "run"
    code, _, err = run_main(capsys, *DUMMY, "--epochs", "1", "--save-path", run)
    assert code == 0, err
    saved = (run / "checkpoint.npz").read_bytes()
    code, _, err = run_main(capsys, "--load-file", run, "--export-onnx",
                            run / "checkpoint.npz", "--overwrite")
    assert_clean_error((code, err), 2, "--export-onnx", "is the --load-file checkpoint this "
                                       "run reads")
    assert (run / "checkpoint.npz").read_bytes() == saved


def test_a_run_that_fails_before_saving_anything_leaves_no_folder(tmp_path, capsys,
                                                                  monkeypatch):
    """A save folder the run made stays only if something was saved into it; one that
    was there before stays whatever happens."""
    from convnet.app.run import training

    def diverges(self, *args, **kwargs):
        raise training.TrainingError("NaN in the cost")

    monkeypatch.setattr(training.Trainer, "_train_batch", diverges)
    made, earlier = tmp_path / "new" / "run", tmp_path / "earlier"
    earlier.mkdir()
    for folder in (made, earlier):
        code, _, err = run_main(capsys, *DUMMY, "--epochs", "1", "--save-path", folder)
        assert_clean_error((code, err), 1, "training diverged")
    assert not made.exists() and (tmp_path / "new").is_dir()
    assert earlier.is_dir() and not any(earlier.iterdir())


def test_a_run_that_fails_first_leaves_no_features_folder(tmp_path, capsys, monkeypatch):
    """--write-features' folder is checked before training but made only to write the
    features, so a run that fails first leaves neither it nor its save folder."""
    from convnet.app.run import training

    def diverges(self, *args, **kwargs):
        raise training.TrainingError("NaN in the cost")

    monkeypatch.setattr(training.Trainer, "_train_batch", diverges)
    run = tmp_path / "run"
    code, _, err = run_main(capsys, *DUMMY, "--epochs", "1", "--save-path", run,
                            "--write-features", "fc10")
    assert_clean_error((code, err), 1, "training diverged")
    assert not run.exists()
    (tmp_path / "file").write_text("")
    code, _, err = run_main(capsys, *DUMMY, "--epochs", "1", "--write-features", "fc10",
                            "--feature-path", tmp_path / "file" / "feats")
    assert_clean_error((code, err), 1, "cannot create feature folder", "is not a folder")


def test_the_plan_graph_is_a_file_in_a_folder_that_exists(tmp_path, capsys):
    """A folder named as the picture is refused as a folder (it once offered --overwrite,
    which then failed after printing the plan), and a missing folder is not made."""
    for overwrite in ([], ["--overwrite"]):
        code = main(["--print-plan", "--plan-graph", str(tmp_path), *overwrite])
        out, err = capsys.readouterr()
        assert_clean_error((code, err), 2, f"--plan-graph: {tmp_path} is a folder")
        assert out == ""
    missing = tmp_path / "missing" / "graph.png"
    assert_clean_error((main(["--print-plan", "--plan-graph", str(missing)]),
                        capsys.readouterr().err), 2,
                       f"--plan-graph: the folder {missing.parent} does not exist")
    assert not missing.parent.exists()


def test_the_auto_place_params_file_is_checked_before_the_profile(tmp_path, capsys,
                                                                  monkeypatch):
    """The layer-params file --auto-place may write beside its layer-def file was checked
    only once the net was profiled and ranked, and with --overwrite it replaced the
    --layer-params file the run read when the names coincided."""
    monkeypatch.chdir(tmp_path)
    params = tmp_path / "y-params.cfg"
    params.write_text((EXAMPLES / "digits-hybrid-params.cfg").read_text())
    hybrid = ["--layer-def", EXAMPLES / "digits-hybrid.cfg", "--auto-place", "2"]
    code, out, err = run_main(capsys, *hybrid, "--layer-params", params,
                              "--auto-place-out", "y.cfg", "--overwrite")
    assert_clean_error((code, err), 2, f"--auto-place-out {params.name}", "--layer-params "
                       "this run reads")
    assert out == "" and "profiling" not in err and not (tmp_path / "y.cfg").exists()
    assert params.read_text() == (EXAMPLES / "digits-hybrid-params.cfg").read_text()
    (tmp_path / "z-params.cfg").write_text("earlier\n")
    code, out, err = run_main(capsys, *hybrid, "--layer-params", params,
                              "--auto-place-out", "z.cfg")
    assert_clean_error((code, err), 2, "z-params.cfg exists", "--overwrite")
    assert out == "" and "profiling" not in err

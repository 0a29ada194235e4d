"""A saved net's labels mean the classes it was trained on: a run resumed (or a net
used) on data whose classes are now others (a class folder added, renamed or removed
since) is refused, not trained on labels that have shifted under it."""

from __future__ import annotations

import pickle

import pytest

from tests.support.cli import SINGLE_DEF, SINGLE_PARAMS, assert_clean_error, run_main, \
    write_batch_folder

Image = pytest.importorskip("PIL.Image")


@pytest.fixture
def saved(tmp_path, capsys):
    """A run of one epoch on batches of classes c0..c9, and the bytes it saved."""
    data = write_batch_folder(tmp_path / "data", batches=2, cases=40)
    code, _, err = run_main(capsys, "--no-progress", "--layer-def", SINGLE_DEF,
                            "--layer-params", SINGLE_PARAMS, "--data-provider",
                            "convnet-batches", "--data-path", data, "--mini", "40",
                            "--epochs", "1", "--save-path", tmp_path / "run")
    assert code == 0, err
    return data, tmp_path / "run", (tmp_path / "run" / "checkpoint.npz").read_bytes()


def _rename_classes(data, names) -> None:
    meta_path = data / "batches.meta"
    meta = pickle.loads(meta_path.read_bytes())
    meta["label_names"] = names
    meta_path.write_bytes(pickle.dumps(meta, protocol=2))


def test_the_same_classes_resume(saved, capsys):
    _, run, _ = saved
    code, _, err = run_main(capsys, "--no-progress", "--load-file", run, "--epochs", "2")
    assert code == 0, err


def test_a_run_whose_classes_changed_is_refused_and_its_checkpoint_kept(saved, capsys):
    data, run, before = saved
    _rename_classes(data, ["ant"] + [f"c{k}" for k in range(9)])  # a class folder added
    code, _, err = run_main(capsys, "--no-progress", "--load-file", run, "--epochs", "2")
    assert_clean_error((code, err), 1, "checkpoint.npz", "class 0 was 'c0', now 'ant'",
                       "--init-from")
    assert (run / "checkpoint.npz").read_bytes() == before


def test_a_net_used_on_other_classes_is_refused(saved, tmp_path, capsys):
    data, run, _ = saved
    _rename_classes(data, [f"c{k}" for k in range(9)] + ["c10"])
    Image.new("L", (8, 8)).save(tmp_path / "one.png")
    code, _, err = run_main(capsys, "--load-file", run, "--predict", tmp_path / "one.png")
    assert_clean_error((code, err), 1, "class 9 was 'c9', now 'c10'")


def test_an_older_checkpoint_without_names_is_not_checked_and_damage_is_one_line(tmp_path):
    from types import SimpleNamespace

    from convnet.app.run.resume_state import check_classes
    from convnet.errors import CheckpointError

    data = SimpleNamespace(label_names=["a", "b"], name="image")
    check_classes(tmp_path / "c.npz", {}, data)  # saved before the names were kept
    dummy = {"label_names": ["class0", "class1"], "options": {"data_provider": "dummy"}}
    check_classes(tmp_path / "c.npz", dummy, data)  # made-up classes
    check_classes(tmp_path / "c.npz", {"label_names": ["a", "b"]}, data)
    with pytest.raises(CheckpointError, match="damaged checkpoint: its class names"):
        check_classes(tmp_path / "c.npz", {"label_names": "ab"}, data)

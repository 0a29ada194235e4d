"""Reruns: complete batches are kept, a half-written one is finished, and nothing a
user did not ask for is overwritten."""

from __future__ import annotations

import os
import shutil

from tests.support.image_trees import make_data, mixed_tree


def _files(folder):
    return {p.relative_to(folder): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_rerun_keeps_complete_batches_and_finishes_a_half_written_one(tmp_path):
    mixed_tree(tmp_path / "src")
    out = tmp_path / "out"
    assert make_data(tmp_path / "src", out, "--val-fraction", "0.3")[0] == 0
    first = _files(out)
    # a run killed while writing batch 1: its parts went to a hidden folder, never renamed
    hidden = out / f".data_batch_1.{os.getpid()}.0badc0de.tmp"
    (out / "data_batch_1").rename(hidden)
    (hidden / "data_batch_1.1").unlink()
    (out / "batches.meta").unlink()
    assert make_data(tmp_path / "src", out, "--val-fraction", "0.3")[0] == 0
    again = _files(out)
    assert not hidden.exists()
    assert again.keys() == first.keys()
    for name, (data, mtime) in again.items():
        assert data == first[name][0], name  # the same bytes, statistics included
        rewritten = name.parts[0] in ("data_batch_1", "batches.meta", "make-data.log")
        assert (mtime == first[name][1]) != rewritten, name


def test_another_settings_target_is_refused_and_left_as_it_is(tmp_path, capsys):
    mixed_tree(tmp_path / "src")
    out = tmp_path / "out"
    assert make_data(tmp_path / "src", out)[0] == 0
    before = _files(out)
    code, err = make_data(tmp_path / "src", out, "--size", "20", capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "--overwrite" in err
    assert _files(out) == before
    assert make_data(tmp_path / "src", out, "--size", "20", "--overwrite")[0] == 0
    assert all(data != before[name][0] for name, (data, _) in _files(out).items()
               if name.parts[0].startswith("data_batch_"))


def test_a_folder_of_other_files_is_refused(tmp_path, capsys):
    mixed_tree(tmp_path / "src")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "thesis.tex").write_text("precious")
    code, err = make_data(tmp_path / "src", tmp_path / "out", capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "other files" in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["thesis.tex"]
    assert make_data(tmp_path / "src", tmp_path / "out", "--overwrite")[0] == 0
    assert (tmp_path / "out" / "thesis.tex").read_text() == "precious"


def test_changed_sources_are_not_resumed(tmp_path, capsys):
    mixed_tree(tmp_path / "src")
    assert make_data(tmp_path / "src", tmp_path / "out")[0] == 0
    shutil.copy(tmp_path / "src" / "cat" / "a.jpg", tmp_path / "src" / "cat" / "z.jpg")
    code, err = make_data(tmp_path / "src", tmp_path / "out", capsys=capsys)
    assert code == 2 and "other sources or settings" in err


def test_overwrite_removes_the_earlier_runs_batches_it_does_not_write(tmp_path):
    mixed_tree(tmp_path / "src")
    out = tmp_path / "out"
    assert make_data(tmp_path / "src", out, "--batch-size", "2")[0] == 0
    assert (out / "data_batch_5").is_dir()
    (out / "notes.txt").write_text("mine")
    assert make_data(tmp_path / "src", out, "--batch-size", "4", "--overwrite")[0] == 0
    assert sorted(p.name for p in out.glob("data_batch_*")) == \
        ["data_batch_0", "data_batch_1", "data_batch_2"]
    assert (out / "notes.txt").read_text() == "mine"


def test_the_same_sources_moved_elsewhere_resume(tmp_path, capsys):
    mixed_tree(tmp_path / "src")
    mixed_tree(tmp_path / "val")
    out = tmp_path / "out"
    assert make_data(tmp_path / "src", out, "--val-dir", str(tmp_path / "val"))[0] == 0
    first = _files(out)
    (tmp_path / "src").rename(tmp_path / "moved")
    (tmp_path / "val").rename(tmp_path / "moved-val")
    capsys.readouterr()
    assert make_data(tmp_path / "moved", out, "--val-dir", f"{tmp_path}/./moved-val/")[0] == 0
    assert "0 written now, 6 kept from an earlier run" in capsys.readouterr().out
    assert all(_files(out)[name] == first[name] for name in first
               if name.parts[0].startswith("data_batch_"))

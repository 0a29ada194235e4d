"""Bad input to make-data: one line on stderr, a non-zero exit, no half batch."""

from __future__ import annotations

import errno
import os

import pytest

from convnet.make_data import writer
from tests.support.image_trees import image_bytes, make_data, mixed_tree


def _one_line(code: int, err: str, expected_code: int, *fragments: str) -> None:
    assert code == expected_code, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, err


def test_a_missing_source_folder(tmp_path, capsys):
    _one_line(*make_data(tmp_path / "nowhere", tmp_path / "out", capsys=capsys), 1,
              "does not exist")
    assert not (tmp_path / "out").exists()


def test_a_source_without_class_folders(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jpg").write_bytes(image_bytes(20, 20, 1))
    _one_line(*make_data(tmp_path / "src", tmp_path / "out", capsys=capsys), 1,
              "no class folders")


def test_an_empty_class_folder(tmp_path, capsys):
    mixed_tree(tmp_path / "src")
    (tmp_path / "src" / "empty").mkdir()
    (tmp_path / "src" / "empty" / "readme.txt").write_text("nothing here")
    _one_line(*make_data(tmp_path / "src", tmp_path / "out", capsys=capsys), 1,
              "empty", "no image files")


def test_a_single_class_is_refused_naming_the_folders_inside_it(tmp_path, capsys):
    """``photos/dataset/cat``, ``photos/dataset/dog`` read from ``photos``: one class,
    'dataset', whose every image has label 0 (a net would learn nothing from it)."""
    for name in ("cat", "dog"):
        (tmp_path / "src" / "dataset" / name).mkdir(parents=True)
        (tmp_path / "src" / "dataset" / name / "x.jpg").write_bytes(image_bytes(20, 20, 1))
    _one_line(*make_data(tmp_path / "src", tmp_path / "out", capsys=capsys), 1,
              "one class folder, 'dataset'", "two or more",
              f"its folders cat, dog may be the classes: read {tmp_path / 'src' / 'dataset'}")
    assert not (tmp_path / "out").exists()


def test_class_folders_that_are_the_parts_of_a_data_set_are_refused(tmp_path, capsys):
    """``photos/{train,val,test}/cat/...`` read from ``photos``: classes 'test', 'train'
    and 'val', each image labelled by the part it is in."""
    for part in ("train", "val", "test"):
        for name in ("cat", "dog"):
            (tmp_path / "src" / part / name).mkdir(parents=True)
            (tmp_path / "src" / part / name / "x.jpg").write_bytes(image_bytes(20, 20, 1))
    _one_line(*make_data(tmp_path / "src", tmp_path / "out", capsys=capsys), 1,
              "its folders test, train, val hold class folders (cat, dog)",
              "the parts of a data set, not classes")


def test_no_readable_image_at_all(tmp_path, capsys):
    for name in ("a", "b"):
        (tmp_path / "src" / name).mkdir(parents=True)
        (tmp_path / "src" / name / "x.jpg").write_bytes(b"garbage")
    _one_line(*make_data(tmp_path / "src", tmp_path / "out", capsys=capsys), 1,
              "no training image could be read", "make-data.log")


def test_a_target_that_is_a_file(tmp_path, capsys):
    mixed_tree(tmp_path / "src")
    (tmp_path / "out").write_text("x")
    _one_line(*make_data(tmp_path / "src", tmp_path / "out", capsys=capsys), 1, "not a folder")


def test_a_target_that_cannot_be_made(tmp_path, capsys):
    mixed_tree(tmp_path / "src")
    (tmp_path / "file").write_text("x")
    _one_line(*make_data(tmp_path / "src", tmp_path / "file" / "out", capsys=capsys), 1,
              "cannot create the target folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_target_that_cannot_be_written(tmp_path, capsys):
    mixed_tree(tmp_path / "src")
    (tmp_path / "out").mkdir()
    (tmp_path / "out").chmod(0o500)
    try:
        _one_line(*make_data(tmp_path / "src", tmp_path / "out", capsys=capsys), 1,
                  "cannot write")
    finally:
        (tmp_path / "out").chmod(0o700)


def test_a_full_disk_leaves_complete_batches_only(tmp_path, capsys, monkeypatch):
    mixed_tree(tmp_path / "src")
    real_write = writer.write_output
    written = []

    def fills_up(path, content):
        if len(written) == 3:  # batch 0's two parts, then one part of batch 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        written.append(path)
        real_write(path, content)

    monkeypatch.setattr(writer, "write_output", fills_up)
    _one_line(*make_data(tmp_path / "src", tmp_path / "out", capsys=capsys), 1,
              "No space left on device", "rerun")
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["data_batch_0", "make-data.json", "make-data.log"]
    monkeypatch.setattr(writer, "write_output", real_write)
    assert make_data(tmp_path / "src", tmp_path / "out")[0] == 0
    assert (tmp_path / "out" / "batches.meta").is_file()


def test_ctrl_c_leaves_complete_batches_only(tmp_path, capsys, monkeypatch):
    mixed_tree(tmp_path / "src")
    real_write = writer.write_output
    calls = []

    def interrupted(path, content):
        calls.append(path)
        if len(calls) == 4:  # the second part of batch 1
            raise KeyboardInterrupt
        real_write(path, content)

    monkeypatch.setattr(writer, "write_output", interrupted)
    code, err = make_data(tmp_path / "src", tmp_path / "out", capsys=capsys)
    assert (code, err) == (130, "interrupted\n")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == \
        ["data_batch_0", "make-data.json", "make-data.log"]


@pytest.mark.parametrize("options, fragment", [
    (("--size", "0"), "--size"), (("--size", "5000"), "at most 4096"),
    (("--quality", "101"), "--quality"),
    (("--val-fraction", "1"), "--val-fraction"),
    (("--batch-size", "2", "--sub-batch-size", "4"), "--sub-batch-size"),
    (("--frobnicate",), "--frobnicate")])
def test_bad_options(tmp_path, capsys, options, fragment):
    mixed_tree(tmp_path / "src")
    _one_line(*make_data(tmp_path / "src", tmp_path / "out", *options, capsys=capsys), 2,
              fragment)


def test_a_target_inside_the_source_tree(tmp_path, capsys):
    mixed_tree(tmp_path / "src")
    _one_line(*make_data(tmp_path / "src", tmp_path / "src" / "batches", capsys=capsys), 2,
              "inside --src-dir")
    assert not (tmp_path / "src" / "batches").exists()


def test_both_test_splits_at_once(tmp_path, capsys):
    mixed_tree(tmp_path / "src")
    _one_line(*make_data(tmp_path / "src", tmp_path / "out", "--val-dir", str(tmp_path / "src"),
                         "--val-fraction", "0.2", capsys=capsys), 2, "give one")


def test_a_small_batch_size_alone_makes_one_sub_batch_a_batch(tmp_path):
    """``--batch-size 12`` without ``--sub-batch-size`` is what a user with a few photos
    types: the sub-batch shrinks to the batch instead of refusing the default 1024."""
    from convnet.make_data.cli import options_from

    options = options_from(["--src-dir", str(tmp_path), "--tgt-dir", str(tmp_path / "out"),
                            "--batch-size", "12"])
    assert (options.batch_size, options.sub_batch_size) == (12, 12)
    assert options_from(["--src-dir", str(tmp_path), "--tgt-dir", str(tmp_path / "out")]
                        ).sub_batch_size == 1024


def test_a_target_on_a_read_only_file_system_says_so(tmp_path, capsys, monkeypatch):
    """The reason given is the real one: a read-only mount, not a permission."""
    mixed_tree(tmp_path / "src")
    (tmp_path / "out").mkdir()
    real_statvfs = os.statvfs

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "access", lambda path, mode: False)
    monkeypatch.setattr(os, "statvfs", lambda path: ReadOnly() if str(path).endswith("out")
                        else real_statvfs(path))
    _one_line(*make_data(tmp_path / "src", tmp_path / "out", capsys=capsys), 1,
              "cannot write into the target folder", "is on a read-only file system")


def test_without_pillow_make_data_says_which_extra_to_install(tmp_path):
    """Pillow comes with the make-data extra: its absence is one line, not a traceback
    from an import."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['PIL'] = None; "
            "from convnet.make_data.launcher import main; sys.exit(main())")
    proc = subprocess.run([sys.executable, "-c", code, "--src-dir", str(tmp_path),
                           "--tgt-dir", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=60)
    _one_line(proc.returncode, proc.stderr, 1, "needs Pillow", "'make-data' extra")

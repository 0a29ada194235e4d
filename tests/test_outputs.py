"""convnet.outputs: the one way every output file is written (atomically, never
through a link), and file names made from config names."""

from __future__ import annotations

import errno
import os

import pytest

from convnet.errors import UsageError
from convnet.outputs import file_name_part, refuse_existing, write_output, write_outputs


def test_a_link_at_the_target_is_replaced_and_its_target_kept(tmp_path):
    kept = tmp_path / "kept"
    kept.write_text("kept")
    link = tmp_path / "out"
    link.symlink_to(kept)
    write_output(link, b"new")
    assert kept.read_text() == "kept"
    assert not link.is_symlink() and link.read_bytes() == b"new"


def test_a_failed_set_leaves_nothing_and_the_previous_files_alone(tmp_path, monkeypatch):
    first, second = tmp_path / "a.cfg", tmp_path / "b.cfg"
    second.write_text("previous")
    calls = []

    def full_on_the_second(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_on_the_second)
    with pytest.raises(OSError, match="No space left"):
        write_outputs([(first, b"one"), (second, b"two")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.cfg"]
    assert second.read_text() == "previous"


def test_refuse_existing_names_the_file_and_the_option(tmp_path):
    dangling = tmp_path / "out.png"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match=r"out\.png exists.*give another X.*--overwrite"):
        refuse_existing(dangling, False, keep="give another X")
    refuse_existing(dangling, True)
    refuse_existing(tmp_path / "absent", False)


@pytest.mark.parametrize("name,safe", [("fc10", "fc10"), ("../../x", ".._.._x"),
                                       ("..", "__"), (".", "_"), ("a\\b", "a_b"),
                                       ("a\0b", "a_b"), ("my layer", "my layer"),
                                       ("...x", "...x")])
def test_file_name_part_keeps_a_name_in_its_folder(name, safe):
    assert file_name_part(name) == safe

"""What the ranks of a multi-process run compare at start-up: every option that changes
what they do together, the config files and checkpoint by contents, and nothing that a
rank may set for itself; the comparison names each differing item and what each rank has."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from convnet.app.command_line.parser import build_parser
from convnet.app.options import resolve_options
from convnet.app.saved_options import Resume
from convnet.app.rank_agreement import check_started_alike, disagreements, run_description
from convnet.errors import UsageError
from convnet.runtime.processes.communicator import LocalCommunicator
from tests.support.cli import HYBRID_DEF, HYBRID_PARAMS

BASE = ["--gpu", "0", "--no-progress"]


def _described(*argv, resume: Path | None = None, no_winograd: bool = False) -> dict:
    opts = resolve_options(build_parser().parse_args([*BASE, *map(str, argv)]))
    if resume is not None:
        opts = dataclasses.replace(opts, resume=Resume(resume, (), {}, {}))
    return run_description(opts, no_winograd)


def _only_difference(rank0: dict, rank1: dict) -> str:
    differences = disagreements([rank0, rank1])
    assert len(differences) == 1, differences
    return differences[0]


@pytest.mark.parametrize("option, value0, value1", [
    ("--epochs", "2", "4"), ("--mini", "128", "64"), ("--seed", "0", "3"),
    ("--sync", "sync", "local:2"), ("--test-freq", "1", "2"),
    ("--train-range", "1-4", "1-3"), ("--max-test-err", "0.5", "0.4"),
    ("--slow-device", "0:3", "any:2.5"),
])
def test_a_differing_option_is_named_with_each_ranks_value(option, value0, value1):
    text = _only_difference(_described(option, value0), _described(option, value1))
    assert text == f"{option}: rank 0 has {value0}, rank 1 has {value1}"


def test_an_option_given_on_one_rank_only_is_named():
    text = _only_difference(_described(), _described("--train-range", "1-3"))
    assert text == "--train-range: rank 0 has none, rank 1 has 1-3"


def test_config_files_are_compared_by_contents_not_by_path(tmp_path):
    same_def, same_params = tmp_path / "a.cfg", tmp_path / "a-params.cfg"
    shutil.copy(HYBRID_DEF, same_def)
    shutil.copy(HYBRID_PARAMS, same_params)
    original = _described("--layer-def", HYBRID_DEF, "--layer-params", HYBRID_PARAMS)
    assert disagreements([original, _described("--layer-def", same_def,
                                               "--layer-params", same_params)]) == []
    edited = tmp_path / "b-params.cfg"
    edited.write_text(HYBRID_PARAMS.read_text().replace("epsW=", "epsW=0.5*", 1))
    text = _only_difference(original, _described("--layer-def", same_def,
                                                  "--layer-params", edited))
    assert text.startswith(f"the contents of --layer-params: rank 0 has {HYBRID_PARAMS} "
                           f"(sha256 ")
    assert f"rank 1 has {edited} (sha256 " in text
    edited_def = tmp_path / "b.cfg"
    edited_def.write_text(HYBRID_DEF.read_text() + "\n")
    text = _only_difference(original, _described("--layer-def", edited_def,
                                                  "--layer-params", HYBRID_PARAMS))
    assert text.startswith("the contents of --layer-def: ")


def test_the_checkpoint_is_compared_by_contents(tmp_path):
    first, copy, other = (tmp_path / n for n in ("a.npz", "b.npz", "c.npz"))
    first.write_bytes(b"checkpoint one")
    copy.write_bytes(b"checkpoint one")
    other.write_bytes(b"checkpoint two")
    assert disagreements([_described(resume=first), _described(resume=copy)]) == []
    text = _only_difference(_described(resume=first), _described(resume=other))
    assert text.startswith(f"the contents of --load-file: rank 0 has {first} (sha256 ")
    assert _only_difference(_described(), _described(resume=first)).startswith(
        "the contents of --load-file: rank 0 has none, rank 1 has ")


def test_what_a_rank_may_set_for_itself_is_not_compared(tmp_path):
    """Device numbers of its own machine, where rank 0 alone writes, its own bound."""
    features = ["--write-features", "probs"]
    rank0 = _described(*features, "--save-path", tmp_path / "a", "--feature-path",
                       tmp_path / "f", "--rank-timeout", "30")
    rank1 = _described(*features, "--gpu", "1", "--save-path", tmp_path / "b", "--overwrite",
                       "--rank-timeout", "0")
    assert disagreements([rank0, rank1]) == []


def test_what_every_rank_takes_part_in_must_agree(tmp_path):
    """A checkpoint is gathered from every rank, so a save path given on one rank only
    would leave the others out; every rank's --gpu count makes the logical devices."""
    assert _only_difference(_described("--save-path", tmp_path / "a"), _described()) == \
        f"--save-path: rank 0 has {tmp_path / 'a'}, rank 1 has none"
    assert _only_difference(_described(), _described("--gpu", "0,1")) == \
        "--gpu: rank 0 has 0 (1 device(s)), rank 1 has 0,1 (2 device(s))"
    assert _only_difference(_described(), _described(no_winograd=True)) == \
        "--no-winograd: rank 0 has False, rank 1 has True"


def test_ranks_with_the_same_value_are_grouped():
    two, four = _described("--epochs", "2"), _described("--epochs", "4")
    assert disagreements([two, four, two]) == ["--epochs: ranks 0, 2 have 2, rank 1 has 4"]


def test_several_differences_are_all_named_in_one_line():
    comm = type("TwoRanks", (LocalCommunicator,), {"size": 2})()
    descriptions = [_described("--epochs", "2"), _described("--epochs", "4", "--seed", "1")]
    comm.allgather = lambda obj, what="": descriptions
    opts = resolve_options(build_parser().parse_args(BASE))
    with pytest.raises(UsageError) as error:
        check_started_alike(comm, opts, False)
    assert str(error.value) == (
        "the ranks were started differently: ranks disagree on --seed: rank 0 has 0, rank 1 "
        "has 1; --epochs: rank 0 has 2, rank 1 has 4 (start every rank with the same "
        "options, config files and checkpoint)")
    assert "\n" not in str(error.value)

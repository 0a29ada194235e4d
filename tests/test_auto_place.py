"""--auto-place N: the candidate family, the gpu= rewrite, and the command end to end
(the file it writes loads, plans and trains unchanged; bad usage is a one-line error)."""

from __future__ import annotations

import pytest

from cli_helpers import (DUMMY, EXAMPLES, HYBRID_DEF, HYBRID_PARAMS, SINGLE_DEF, SINGLE_PARAMS,
                         run_cli)
from convnet.config import parse_net
from convnet.config.gpu_lines import set_gpu_lines
from convnet.config.shapes import infer_shapes
from convnet.plan.placements import candidates, conv_part

DIGITS_DIMS = {0: (1, 8, 8), 1: (1,)}


def _digits_net():
    return infer_shapes(parse_net(SINGLE_DEF, SINGLE_PARAMS), DIGITS_DIMS, 10)


def test_the_family_on_the_digits_net():
    net = _digits_net()
    assert conv_part(net) == ["conv1", "conv2", "pool1"]
    family = {c.name: c.gpus for c in candidates(net, 2)}
    assert list(family) == ["one device", "data-parallel", "conv data-parallel, rest on 0",
                            "conv data-parallel, towers model-parallel"]
    layers = ["conv1", "conv2", "pool1", "fca", "fcb", "fc10", "probs", "logprob"]
    assert family["one device"] == dict.fromkeys(layers, (0,))
    assert family["data-parallel"] == dict.fromkeys(layers, (0, 1))
    assert family["conv data-parallel, rest on 0"] == {
        **dict.fromkeys(layers[:3], (0, 1)), **dict.fromkeys(layers[3:], (0,))}
    assert family["conv data-parallel, towers model-parallel"] == {
        **dict.fromkeys(layers[:3], (0, 1)), "fca": (0,), "fcb": (1,), "fc10": (0,),
        "probs": (0,), "logprob": (0,)}


def test_identical_candidates_are_dropped():
    assert [c.name for c in candidates(_digits_net(), 1)] == ["one device"]


def test_gpu_lines_are_replaced_added_and_removed_and_nothing_else_changes():
    text = ("# a comment\n[a]\ntype=fc\nGPU = 0  # keep me\n\n[b]\ntype=fc\n; note\n"
            "inputs=a\n\n[c]\ntype=fc\ngpu=1\n")
    out = set_gpu_lines(text, "x.cfg", {"a": (0, 1), "b": (1,), "c": None})
    assert out == ("# a comment\n[a]\ntype=fc\nGPU = 0,1  # keep me\n\n[b]\ntype=fc\n; note\n"
                   "inputs=a\ngpu=1\n\n[c]\ntype=fc\n")


def test_written_file_loads_plans_and_trains_unchanged(tmp_path):
    out = tmp_path / "placed.cfg"
    done = run_cli("--layer-def", HYBRID_DEF, "--layer-params", HYBRID_PARAMS, *DUMMY,
                   "--gpu", "0,1", "--auto-place", "2", "--auto-place-out", out)
    assert done.returncode == 0, done.stderr
    assert "not a valid plan: one device" in done.stdout  # updatePeriod=2 needs replicas
    best = done.stdout.strip().splitlines()[-1]
    assert best.startswith("best: conv data-parallel") and best.endswith(f"written to {out}")
    original, written = HYBRID_DEF.read_text(), out.read_text()
    assert [l for l in written.splitlines() if not l.startswith("gpu=")] == \
        [l for l in original.splitlines() if not l.startswith("gpu=")]
    trained = run_cli("--layer-def", out, "--layer-params", HYBRID_PARAMS, *DUMMY,
                      "--gpu", "0,1", "--epochs", "1")
    assert trained.returncode == 0, trained.stderr


def test_default_output_is_in_the_current_folder_and_is_not_overwritten(tmp_path):
    args = ["--layer-def", SINGLE_DEF, "--layer-params", SINGLE_PARAMS, *DUMMY,
            "--gpu", "0,1", "--auto-place", "2"]
    done = run_cli(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "digits-single-auto-2.cfg"
    header = done.stdout.splitlines()[1].split()
    assert header[:2] == ["rank", "placement"] and "idle" in header
    assert done.stdout.strip().splitlines()[-1].endswith("written to digits-single-auto-2.cfg")
    trained = run_cli("--layer-def", out, "--layer-params", SINGLE_PARAMS, *DUMMY,
                      "--gpu", "0,1", "--epochs", "1")
    assert trained.returncode == 0, trained.stderr
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 2 and "exists" in again.stderr and "--overwrite" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    assert run_cli(*args, "--overwrite", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("args,words", [
    (["--gpu", "0", "--auto-place", "2"], "--gpu lists 1"),
    (["--gpu", "0,1", "--auto-place", "0"], "--auto-place"),
    (["--gpu", "0,1", "--auto-place-out", "x.cfg"], "give --auto-place N too"),
    (["--gpu", "0,1", "--auto-place", "2", "--print-plan"], "cannot be combined"),
    (["--gpu", "0,1", "--auto-place", "2", "--auto-place-out", "no/such/dir/x.cfg"],
     "does not exist"),
])
def test_bad_usage_is_a_one_line_error(args, words, tmp_path):
    done = run_cli("--layer-def", EXAMPLES / "digits-single.cfg", "--layer-params",
                   SINGLE_PARAMS, *args, cwd=tmp_path)
    assert done.returncode == 2
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr

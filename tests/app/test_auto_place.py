"""--auto-place N: the candidate family, the gpu= rewrite, and the command end to end
(the file it writes loads, plans and trains unchanged; bad usage is a one-line error)."""

from __future__ import annotations

import pytest

from tests.support.cli import (DUMMY, EXAMPLES, HYBRID_DEF, HYBRID_PARAMS, SINGLE_DEF,
                               SINGLE_PARAMS, run_cli)
from convnet.config import parse_net
from convnet.config.gpu_lines import set_gpu_lines
from convnet.config.shapes import infer_shapes
from convnet.plan.placements import candidates, conv_part
from convnet.plan.planner import make_plan

DIGITS_DIMS = {0: (1, 8, 8), 1: (1,)}


def _digits_net():
    return infer_shapes(parse_net(SINGLE_DEF, SINGLE_PARAMS), DIGITS_DIMS, 10)


def test_the_family_on_the_digits_net():
    net = _digits_net()
    assert conv_part(net) == ["conv1", "conv2", "pool1"]
    family = {c.name: c for c in candidates(net, 2)}
    every, once = ", updatePeriod=1 (an update every pass)", \
        ", updatePeriod=2 (one update per minibatch)"
    assert list(family) == ["one device", "data-parallel",
                            "conv data-parallel, rest on 0" + every,
                            "conv data-parallel, rest on 0" + once,
                            "conv data-parallel, towers model-parallel" + every,
                            "conv data-parallel, towers model-parallel" + once]
    layers = ["conv1", "conv2", "pool1", "fca", "fcb", "fc10", "probs", "logprob"]
    weights = ["conv1", "conv2", "fca", "fcb", "fc10"]
    assert family["one device"].gpus == dict.fromkeys(layers, (0,))
    assert family["one device"].update_periods == dict.fromkeys(weights, 1)
    assert family["data-parallel"].gpus == dict.fromkeys(layers, (0, 1))
    assert family["conv data-parallel, rest on 0" + every].gpus == {
        **dict.fromkeys(layers[:3], (0, 1)), **dict.fromkeys(layers[3:], (0,))}
    # the replicated conv layers are active every 2 passes: they update every 2
    assert family["conv data-parallel, rest on 0" + every].update_periods == {
        "conv1": 2, "conv2": 2, "fca": 1, "fcb": 1, "fc10": 1}
    assert family["conv data-parallel, rest on 0" + once].update_periods == \
        dict.fromkeys(weights, 2)
    assert family["conv data-parallel, towers model-parallel" + once].gpus == {
        **dict.fromkeys(layers[:3], (0, 1)), "fca": (0,), "fcb": (1,), "fc10": (0,),
        "probs": (0,), "logprob": (0,)}


def test_every_candidate_plans_and_four_devices_add_intermediate_replica_counts():
    net = _digits_net()
    family = candidates(net, 4)
    names = [c.name for c in family]
    assert any(n.startswith("conv data-parallel, rest data-parallel on 2") for n in names)
    # P = 4: update periods 1, 2 and 4 of the single-replica layers
    assert sum(n.startswith("conv data-parallel, rest on 0,") for n in names) == 3
    for candidate in family:
        make_plan(candidate.apply(net), (0, 1, 2, 3), 128)  # all within the SPEC's rules


def test_identical_candidates_are_dropped():
    assert [c.name for c in candidates(_digits_net(), 1)] == ["one device"]


def test_gpu_lines_are_replaced_added_and_removed_and_nothing_else_changes():
    text = ("# a comment\n[a]\ntype=fc\nGPU = 0  # keep me\n\n[b]\ntype=fc\n; note\n"
            "inputs=a\n\n[c]\ntype=fc\ngpu=1\n")
    out = set_gpu_lines(text, "x.cfg", {"a": (0, 1), "b": (1,), "c": None})
    assert out == ("# a comment\n[a]\ntype=fc\nGPU = 0,1  # keep me\n\n[b]\ntype=fc\n; note\n"
                   "inputs=a\ngpu=1\n\n[c]\ntype=fc\n")


def test_key_lines_are_set_in_place_added_to_a_section_or_with_a_new_section():
    from convnet.config.gpu_lines import set_key_lines

    text = "[a]\nepsW=0.1\nUpdatePeriod = 2 # two passes\n\n[b]\nepsW=0.1\n"
    out = set_key_lines(text, "p.cfg", "updatePeriod", {"a": "1", "b": "4", "c": "2"})
    assert out == ("[a]\nepsW=0.1\nUpdatePeriod = 1 # two passes\n\n[b]\nepsW=0.1\n"
                   "updatePeriod=4\n\n[c]\nupdatePeriod=2\n")


def test_written_file_loads_plans_and_trains_unchanged(tmp_path):
    out = tmp_path / "placed.cfg"
    done = run_cli("--layer-def", HYBRID_DEF, "--layer-params", HYBRID_PARAMS, *DUMMY,
                   "--gpu", "0,1", "--auto-place", "2", "--auto-place-out", out)
    assert done.returncode == 0, done.stderr
    assert "not a valid plan" not in done.stdout  # every candidate sets its update periods
    best = done.stdout.strip().splitlines()[-1]
    assert best.startswith(("best: ", "best (the simplest of the tie): "))
    assert f"written to {out}" in best
    assert any(l.startswith(("ranks 1-", "no tie: ", "noise: not measured"))
               for l in done.stdout.splitlines())
    original, written = HYBRID_DEF.read_text(), out.read_text()
    assert [l for l in written.splitlines() if not l.startswith("gpu=")] == \
        [l for l in original.splitlines() if not l.startswith("gpu=")]
    params = tmp_path / "placed-params.cfg"
    if "placed-params.cfg" in best:  # update periods changed: only those lines differ
        assert [l for l in params.read_text().splitlines()
                if not l.startswith("updatePeriod=")] == \
            [l for l in HYBRID_PARAMS.read_text().splitlines()
             if not l.startswith("updatePeriod=")]
    else:
        assert not params.exists()
    trained = run_cli("--layer-def", out, "--layer-params",
                      params if params.exists() else HYBRID_PARAMS, *DUMMY,
                      "--gpu", "0,1", "--epochs", "1")
    assert trained.returncode == 0, trained.stderr


def test_a_chosen_update_period_is_written_to_a_params_file(tmp_path):
    """The hybrid params file says updatePeriod=2; a candidate that updates every pass
    needs 1, and only those lines change."""
    from convnet.app.prediction.auto_place import Ranked, changed_periods
    from convnet.config.gpu_lines import set_key_lines

    net = infer_shapes(parse_net(HYBRID_DEF, HYBRID_PARAMS), DIGITS_DIMS, 10)
    every = next(c for c in candidates(net, 2) if "updatePeriod=1" in c.name)
    plan = make_plan(every.apply(net), (0, 1), 128)
    periods = changed_periods(net, Ranked(every, plan, None))
    assert periods == {"fca": 1, "fcb": 1, "fc10": 1}
    text = set_key_lines(HYBRID_PARAMS.read_text(), str(HYBRID_PARAMS), "updatePeriod",
                         {k: str(v) for k, v in periods.items()})
    parsed = parse_net(HYBRID_DEF, HYBRID_PARAMS)
    assert text.count("\nupdatePeriod=1") == 3 and "\nupdatePeriod=2" not in text
    written = tmp_path / "p.cfg"
    written.write_text(text)
    assert parse_net(HYBRID_DEF, written).layers["fca"].params["updatePeriod"] == 1
    assert parsed.layers["fca"].params["updatePeriod"] == 2


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


def test_candidates_within_the_profiles_noise_tie_and_the_simplest_comes_first():
    """Predicted steps of 100, 101 and 102 ms with a noise of 1.5%: the first two tie, and
    one device (the simplest) comes before data-parallel; 3% apart is no tie."""
    from types import SimpleNamespace

    from convnet.app.prediction.auto_place import Ranked, prediction_noise, ties_first

    net = _digits_net()
    family = {c.name: c for c in candidates(net, 2)}

    def ranked(name, ms):
        plan = make_plan(family[name].apply(net), (0, 1), 128)
        return Ranked(family[name], plan, SimpleNamespace(step_seconds=ms / 1000))

    towers = "conv data-parallel, towers model-parallel, updatePeriod=2 (one update per minibatch)"
    fastest_first = [ranked("data-parallel", 100), ranked(towers, 100.5),
                     ranked("one device", 101), ranked("conv data-parallel, rest on 0, "
                                                       "updatePeriod=1 (an update every pass)",
                                                       103)]
    order, tied = ties_first(fastest_first, 0.015)
    assert tied == 3
    assert [r.candidate.name for r in order] == ["one device", "data-parallel", towers,
                                                 fastest_first[3].candidate.name]
    assert ties_first(fastest_first, 0.004) == (fastest_first, 1)
    assert ties_first(fastest_first, None) == (fastest_first, 1)  # not measured: no tie

    class Round:  # a round's model predicting the plan at a fixed step
        def __init__(self, ms):
            self.ms = ms

        def predict(self, plan):
            return SimpleNamespace(step_seconds=self.ms / 1000)

    assert prediction_noise(None, [Round(98), Round(100), Round(104)]) == \
        pytest.approx(3 / 100)
    assert prediction_noise(None, [Round(98)]) is None

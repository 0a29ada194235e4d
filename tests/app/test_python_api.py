"""The Python API (docs/API.md): its example run as the doc shows it, results that are the
run's, errors that are the command line's, and options taken from the parser."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import numpy as np
import pytest

import convnet
from convnet.app.command_line.parser import build_parser
from convnet.app.python_api.arguments import command_line
from convnet.app.run.log import read_log
from convnet.errors import ConfigError, UsageError
from tests.support import ROOT

API_DOC = ROOT / "docs" / "API.md"

#: The figures that change from run to run: timings.
TIMINGS = re.compile(r"\d+ img/s|finished in [\d.]+ s|, [\d.]+ s(?=[,)])")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _doc_blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", API_DOC.read_text(), re.S)


def _numbers_and_words(text: str) -> tuple[list[float], str]:
    text = TIMINGS.sub("<timing>", text)
    return [float(n) for n in NUMBER.findall(text)], NUMBER.sub("#", text)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The doc's example run where the doc runs it (the repository's root, here a folder
    with its examples), with what it printed and the names it made."""
    folder = tmp_path_factory.mktemp("api")
    (folder / "examples").symlink_to(ROOT / "examples")
    code = _doc_blocks("python")[0]
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return folder, done.stdout


def test_the_doc_example_prints_what_the_doc_shows(example):
    _, printed = example
    shown = _doc_blocks("text")[0]
    got_numbers, got_words = _numbers_and_words(printed)
    doc_numbers, doc_words = _numbers_and_words(shown)
    assert got_words == doc_words
    assert got_numbers == pytest.approx(doc_numbers, rel=1e-3, abs=2e-4)


def test_the_result_is_the_runs_log_and_the_loaded_net_predicts_its_test_error(example):
    folder, _ = example
    result = convnet.train(load_file=folder / "runs" / "api", no_progress=True)  # nothing more
    rows = read_log(folder / "runs" / "api" / "log.csv")
    assert [r["test_error"] for r in result.history] == [r["test_error"] for r in rows]
    assert result.test_error == rows[-1]["test_error"]
    with result.load() as net:
        images, labels = net.test_batch()
        probs = net.predict(images)
        assert probs.shape == (len(images), 10) and probs.dtype == np.float32
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
        wrong = float(np.mean(probs.argmax(axis=1) != labels.reshape(-1)))
        assert wrong == pytest.approx(result.test_error, abs=1e-6)  # the run's last test
        assert "Scheme: data." in net.plan_text() and net.plan.num_devices == 2
        with pytest.raises(UsageError, match="exists"):
            net.export_onnx(folder / "runs" / "api" / "digits.onnx")  # no overwrite


def test_errors_are_the_command_lines_as_exceptions(tmp_path):
    with pytest.raises(UsageError, match="unknown option 'mni' \\(did you mean mini\\?\\)"):
        convnet.train(mni=64)
    with pytest.raises(UsageError, match="argument --mini: expected a positive integer"):
        convnet.train(mini=0)
    with pytest.raises(UsageError, match="--print-plan is not what convnet.train does"):
        convnet.train(print_plan=True)
    bad = tmp_path / "bad.cfg"
    bad.write_text("[data]\ntype=data\ndataIdx=0\n\n[fc]\ntype=fc\ninputs=nowhere\n")
    with pytest.raises(ConfigError) as raised:
        convnet.train(layer_def=bad, layer_params=bad)
    assert raised.value.exit_code == 2
    with pytest.raises(UsageError, match="is a switch"):
        convnet.train(overwrite="yes")


def test_every_option_of_the_parser_is_a_keyword_including_new_ones():
    parser = build_parser()
    parser.add_argument("--a-new-option", type=int)  # as another group would add one
    argv = command_line(parser, {"gpu": [0, 1], "mini": 64, "sync": ["sync", "local:4"],
                                 "force_save": False, "overwrite": True, "print_plan": "json",
                                 "no_progress": False, "a_new_option": 3, "seed": None},
                        "test")
    args = parser.parse_args(argv)
    assert (args.gpu, args.mini, args.sync, args.force_save, args.overwrite,
            args.print_plan, args.no_progress, args.a_new_option, args.seed) == \
        ((0, 1), 64, ["sync", "local:4"], False, True, "json", False, 3, None)
    for action in build_parser()._actions:  # every option maps to itself
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        value = True if action.nargs in (0, "?") else ["1"] if action.nargs == "+" else "1"
        flag = command_line(build_parser(), {action.dest: value}, "test")[0]
        assert flag.split("=")[0] in action.option_strings


def test_importing_the_package_loads_no_engine():
    done = subprocess.run([sys.executable, "-c", "import sys, convnet; print(sorted(m for m in "
                           "sys.modules if m.startswith(('convnet', 'numpy'))))"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.strip() == "['convnet', 'convnet.version']"

"""Configs written for cuda-convnet and cuda-convnet2 load as the originals read them.

One small config per leniency or feature the originals had: key case, a key
given twice, several data columns, cost heads of different widths, v1's
randSparse, wball, the dropout fork's ``dropout=`` and ``cost.ce``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from convnet.errors import ConfigWarning
from tests.config_helpers import DATA_LAYERS, WEIGHT_PARAMS, config_error, load_text, write_pair

ROOT = Path(__file__).resolve().parent.parent
CONV = "[conv]\ntype=conv\ninputs=data\nfilters=4\nfilterSize=3\nchannels=3\npadding=1\n"
CONV_PARAMS = "[conv]\n" + WEIGHT_PARAMS
LOGREG_HEAD = """
[fc]
type=fc
inputs=conv
outputs=5

[probs]
type=softmax
inputs=fc

[cost]
type=cost.logreg
inputs=labels,probs
"""
HEAD_PARAMS = "\n[fc]\n" + WEIGHT_PARAMS


def test_key_names_ignore_case_as_configparser_did(tmp_path):
    """filterSize = filtersize = FILTERSIZE, in both files; v1 aliases too."""
    body = CONV.replace("channels", "Channels").replace("filterSize", "FILTERSIZE")
    body = body.replace("filters=", "numfilters=").replace("type=conv", "TYPE=conv")
    params = CONV_PARAMS.replace("epsW", "epsw").replace("momB", "MOMB")
    net = load_text(tmp_path, DATA_LAYERS + body, params)
    plain = load_text(tmp_path, DATA_LAYERS + CONV, CONV_PARAMS)
    assert net["conv"].attrs == plain["conv"].attrs and net["conv"].params == plain["conv"].params


def test_layer_names_stay_case_sensitive(tmp_path):
    err = config_error(tmp_path, DATA_LAYERS + CONV, CONV_PARAMS.replace("[conv]", "[Conv]"))
    assert err.section == "Conv" and err.suggestion == "conv"


def test_a_key_given_twice_takes_its_last_value_with_one_warning(tmp_path):
    body = CONV.replace("filters=4", "filters=4\nFilters=6")
    with pytest.warns(ConfigWarning) as caught:
        net = load_text(tmp_path, DATA_LAYERS + body, CONV_PARAMS)
    assert net["conv"].attrs["filters"] == 6
    (warning,) = caught
    text = str(warning.message)
    first = (DATA_LAYERS + body).splitlines().index("filters=4") + 1
    assert text.startswith(f"{tmp_path / 'layers.cfg'} [conv] key 'Filters': line {first + 1}: ")
    assert f"lines {first} and {first + 1}" in text and "\n" not in text


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "convnet.py"), *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_the_warning_is_one_line_on_stderr(tmp_path):
    """On the command line: one 'warning:' line, no traceback, no quoted source."""
    body = CONV.replace("filters=4", "filters=4\nfilters=6") + LOGREG_HEAD
    paths = write_pair(tmp_path, DATA_LAYERS + body, CONV_PARAMS + HEAD_PARAMS)
    done = _cli("--print-plan", "--layer-def", str(paths[0]), "--layer-params", str(paths[1]),
                "--data-dims", "3x8x8", "--num-classes", "5")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "given twice" in lines[0]

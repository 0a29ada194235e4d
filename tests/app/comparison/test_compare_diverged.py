"""``--compare`` with a config whose training diverges: the others are still compared.

digits-data gets a layer-params file whose learning rates are so large that its
first steps produce NaNs.  The comparison must go on: its row says where it
diverged and shows dashes for what it never measured, the one config left is
ranked alone, the picture leaves it out, and the exit status is 1 (after the
table) with one line naming the failed config.  When every config diverges the
command ends with one error line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from convnet.app.command_line.main import main
from tests.app.comparison.test_compare import EXAMPLES, PNG_SIGNATURE, parse_tables

PARAMS = EXAMPLES / "digits-params.cfg"
CONFIGS = [str(EXAMPLES / "digits-single.cfg"), str(EXAMPLES / "digits-data.cfg")]


def _huge_rates(folder: Path) -> Path:
    """digits-params.cfg with learning rates a million: the net's outputs overflow at once."""
    lines = [("epsW=1e6" if line.startswith("epsW=") else
              "epsB=1e6" if line.startswith("epsB=") else line)
             for line in PARAMS.read_text().splitlines()]
    path = folder / "huge-params.cfg"
    path.write_text("\n".join(lines) + "\n")
    return path


def _compare(params: list[Path], *extra: str) -> list[str]:
    return ["--compare", *CONFIGS, "--layer-params", *map(str, params), "--gpu", "0,1",
            "--mini", "64", "--epochs", "1", "--rounds", "2", "--no-progress", *extra]


def test_a_diverging_config_is_reported_in_its_row_and_the_others_are_ranked(
        tmp_path, capsys):
    pytest.importorskip("matplotlib")
    save = tmp_path / "save"
    status = main(_compare([PARAMS, _huge_rates(tmp_path)], "--save-path", str(save)))
    out, err = capsys.readouterr()
    assert status == 1
    assert err.strip().splitlines()[-1] == (
        "error: --compare: 1 of 2 configs failed: digits-data (diverged at epoch 1, batch 1)")
    scheme_table, device_table = parse_tables(out)[:2]
    single, data = scheme_table
    assert single["config"] == "digits-single" and data["config"] == "digits-data"
    assert data["note"] == "diverged at epoch 1, batch 1"
    assert single["note"] == ""
    for column in ("step ms", "spread", "img/s", "speedup", "efficiency", "wall s",
                   "train cost", "test err"):
        assert data[column] == "-", column
        assert single[column] != "-", column
    assert single["speedup"] == "1.00x"
    assert data["scheme"] == "data"  # the planner's figures stand: it was planned
    assert {r["compute"] for r in device_table if r["config"] == "digits-data"} == {"-"}
    assert "one config: digits-single" in out  # ranked alone, the failed one left out
    assert "fastest: digits-single" in out
    assert (save / "compare.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "digits-data" in (save / "compare.txt").read_text()


def test_every_config_diverging_ends_with_one_error_line(tmp_path, capsys):
    huge = _huge_rates(tmp_path)
    status = main(_compare([huge, huge]))
    out, err = capsys.readouterr()
    assert status == 1
    assert err.strip().splitlines() == [
        "error: --compare: every config failed: digits-single (diverged at epoch 1, batch 1), "
        "digits-data (diverged at epoch 1, batch 1)"]
    assert "Schemes compared" not in out

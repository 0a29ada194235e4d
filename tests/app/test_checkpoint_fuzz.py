"""Fuzzing the fields of a real checkpoint: whatever a header or meta field is changed
to, loading it for a resumed run ends in success or a clean :class:`ConvnetError`
(a one-line message), never another exception, a hang or a huge allocation."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convnet.app.checkpoint import load_checkpoint, save_checkpoint
from convnet.app.command_line.parser import build_parser
from convnet.app.options import resolve_options
from convnet.app.saved_options import RESUMABLE
from convnet.app.run.resume_state import read_counters, read_state
from convnet.errors import ConvnetError
from tests.support.checkpoints import net_and_plan, npy_bytes, rebuild
from tests.support.cli import DUMMY, ok, run_cli

COUNTERS = ("step", "epoch", "batch_index", "cumulative_time", "log_rows")

HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.lists(st.integers(min_value=-3, max_value=10**6), max_size=6),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
    st.sampled_from(["/etc/passwd", "/dev/zero", "1-99999999999", "0,1", "１２", "3x224x224",
                     "128", "cifar", "x" * 5000]))

FIELDS = st.one_of(st.tuples(st.just("options"), st.sampled_from(RESUMABLE)),
                   st.tuples(st.just("counters"), st.sampled_from(COUNTERS)),
                   st.tuples(st.just("meta"), st.sampled_from(["options", "counters", "rng"])),
                   st.tuples(st.just("header"), st.sampled_from(["version", "format",
                                                                  "arrays", "meta"])))


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A real run's checkpoint, its contents, and the net and plan that resume it."""
    folder = tmp_path_factory.mktemp("fuzz") / "run"
    ok(run_cli(*DUMMY, "--epochs", "1", "--save-path", folder))
    checkpoint = folder / "checkpoint.npz"
    return checkpoint, load_checkpoint(checkpoint), net_and_plan(folder)


def _resume(path: Path, net, plan) -> None:
    """What a resumed run reads from a checkpoint, in the order it reads it."""
    opts = resolve_options(build_parser().parse_args(["--load-file", str(path), "--test-only"]))
    read_counters(opts.resume.checkpoint, opts.resume.meta)
    read_state(opts.resume.checkpoint, net, plan)


def _loads_or_fails_cleanly(path: Path, net, plan) -> None:
    try:
        _resume(path, net, plan)
    except ConvnetError as error:
        text = str(error)
        assert text and len(text) < 2000, text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=FIELDS, value=HOSTILE)
def test_any_field_value_loads_or_fails_cleanly(real, field, value):
    checkpoint, (arrays, meta), (net, plan) = real
    section, key = field
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "mutated.npz"
        if section == "header":
            rebuild(checkpoint, path, **{key: value})
        else:
            changed = {name: dict(part) if isinstance(part, dict) else part
                       for name, part in meta.items()}
            if section == "meta":
                changed[key] = value
            else:
                changed[section][key] = value
            save_checkpoint(path, arrays, changed)
        _loads_or_fails_cleanly(path, net, plan)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(["<f4", ">f4", "<f8", "<i4", "|u1", "|b1", "<c8", "<U2"]),
       shape=st.lists(st.integers(min_value=0, max_value=40), max_size=3),
       extra=st.sampled_from([0, 1, 4096, 32 * 2**20]), which=st.integers(0, 10**6))
def test_any_weight_member_loads_or_fails_cleanly(real, dtype, shape, extra, which):
    """Wrong dtypes, shapes and sizes, up to 32 MiB of deflated padding (a bomb)."""
    checkpoint, (arrays, _), (net, plan) = real
    key = sorted(arrays)[which % len(arrays)]
    with tempfile.TemporaryDirectory() as scratch:
        path = rebuild(checkpoint, Path(scratch) / "mutated.npz",
                       {key: npy_bytes(shape, dtype, extra)})
        _loads_or_fails_cleanly(path, net, plan)

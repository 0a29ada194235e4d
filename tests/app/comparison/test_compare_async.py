"""``--compare`` with ``--sync async:S`` runs beside lockstep ones.

An async run is trained and shown like the others (test error against wall
time, the training run's img/s, its table row), while what it cannot have, a
lockstep step to profile per operation, is shown as absent: ``n/a`` cells and
a Gantt panel that says so.  Its traffic is the increments its replicas sent,
recomputed here from the shards each replica trained.  One replica is
synchronous SGD bit for bit, so the one-device config's async run must log
exactly what its sync run logs (which also checks that the shards a step only
queued are counted in their own test interval).
"""

from __future__ import annotations

import csv

import pytest

from convnet.app.command_line.parser import build_parser
from tests.app.comparison.test_compare import paired_steps_of
from convnet.app.comparison.compare import compare
from convnet.app.comparison.plot import comparison_figure, figure_pixels
from convnet.app.comparison.table import ABSENT, fmt_bytes, fmt_ms
from convnet.app.comparison.verdict import verdict_lines
from tests.app.comparison.test_compare import (EXAMPLES, PNG_SIGNATURE, overlaps, parse_tables,
                                               text_boxes)

PARAMS = EXAMPLES / "digits-params.cfg"
#: Minibatches of (up to) 64 in one epoch: 5 training batches of 300 digits, 5 each.
STEPS = 5 * 5


@pytest.fixture(scope="module")
def async_comparison(tmp_path_factory):
    save = tmp_path_factory.mktemp("compare-async")
    args = build_parser().parse_args([
        "--compare", str(EXAMPLES / "digits-single.cfg"), str(EXAMPLES / "digits-data.cfg"),
        "--layer-params", str(PARAMS), "--gpu", "0,1", "--mini", "64", "--epochs", "1",
        "--no-progress", "--sync", "sync", "async:2", "--rounds", "2", "--save-path",
        str(save)])
    printed = []
    results, picture = compare(args, out=printed.append, profile_steps=1, predict=False)
    return save, results, picture, "\n".join(printed)


def _log(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_async_runs_are_trained_and_tabled_beside_the_others(async_comparison):
    save, results, _, text = async_comparison
    scheme_table, device_table = parse_tables(text)[:2]
    names = ["digits-single-sync", "digits-single-async2", "digits-data-sync",
             "digits-data-async2"]
    assert [r.name for r in results] == [row["config"] for row in scheme_table] == names
    for result, row in zip(results, scheme_table):
        log = _log(save / result.name / "log.csv")
        assert len(log) == 5  # a test per data batch, as for every run
        # async runs are timed in the rounds too: steps queued, then drained
        assert len(result.round_seconds) == 2
        assert row["step ms"] == fmt_ms(paired_steps_of(results)[result.name])
        is_async = result.sync == "async:2"
        assert result.lockstep is not is_async
        assert (row["all-reduced"] == ABSENT) is is_async
        assert (result.step_seconds == []) is is_async and (result.timeline == []) is is_async
        rows = [r for r in device_table if r["config"] == result.name]
        assert len(rows) == result.devices_used
        for r in rows:
            timed = [r[c] for c in ("compute", "copy", "all-reduce", "idle")]
            assert (timed == [ABSENT] * 4) is is_async
    assert "n/a (--sync async runs): no all-reduce" in text


def test_one_replica_async_logs_exactly_what_sync_logs(async_comparison):
    """digits-single has one replica: async is sync bit for bit, interval by interval
    (the shards queued before a test are counted in that test's interval)."""
    save = async_comparison[0]
    synced, asynced = (_log(save / f"digits-single-{m}" / "log.csv") for m in ("sync", "async2"))
    for a, b in zip(synced, asynced):
        assert [a[k] for k in ("cost", "error", "test_cost", "test_error")] == \
            [b[k] for k in ("cost", "error", "test_cost", "test_error")]


def test_async_traffic_is_the_increments_of_the_shards_each_replica_trained(async_comparison):
    _, results, _, text = async_comparison
    device_table = parse_tables(text)[1]
    data = results[3]
    weights = 4 * sum(p.param_count for p in data.plan.layers.values())
    assert data.trained_steps == STEPS
    assert sum(data.replica_shards) == 2 * STEPS  # every shard of every step trained
    assert data.allreduce_bytes == 0
    rows = [r for r in device_table if r["config"] == data.name]
    for device, (shards, row) in enumerate(zip(data.replica_shards, rows)):
        assert row["sent"] == fmt_bytes(shards * weights / STEPS)
        assert row["received"] == fmt_bytes((2 * STEPS - shards) * weights / STEPS)
    assert data.increment_bytes == pytest.approx(2 * weights)  # R (R - 1) W for R = 2
    line = next(l for l in verdict_lines([data], fmt_bytes) if l.startswith("fastest: "))
    assert f"increment sends {fmt_bytes(data.increment_bytes)}" in line
    assert "idle" not in line  # no profiled step to take an idle share from
    single = results[1]  # one replica sends nothing
    assert single.increment_bytes == 0 and single.replica_shards == [STEPS]


def test_picture_shows_async_panels_without_overlapping_text(async_comparison):
    import matplotlib.image
    from matplotlib.text import Text

    _, results, picture, _ = async_comparison
    assert picture.read_bytes()[:8] == PNG_SIGNATURE
    assert matplotlib.image.imread(picture).shape[:2] == figure_pixels(results)[::-1]
    fig = comparison_figure(results)
    texts = [t.get_text() for t in fig.findobj(Text)]
    assert sum("no lockstep step to profile" in t for t in texts) == 2
    data = results[3]
    for shards in data.replica_shards:
        assert f"replica trained {shards} of the run's {2 * STEPS} shards" \
            f" ({100 * shards / (2 * STEPS):.0f}%)" in texts
    assert overlaps(text_boxes(fig)) == []
    # An async run last or alone: the time axis stays on the last lockstep chart.
    assert overlaps(text_boxes(comparison_figure(results[::-1]))) == []
    assert overlaps(text_boxes(comparison_figure([data]))) == []


def test_a_hybrid_async_run_keeps_its_lockstep_steps_and_is_profiled(tmp_path):
    """In a hybrid net async moves only the replicated layers' increments apart: the
    steps are profiled as sync's are, and its traffic is the plan's copies plus every
    replica's increments to the other replica instead of the all-reduces."""
    args = build_parser().parse_args([
        "--compare", str(EXAMPLES / "digits-hybrid.cfg"),
        "--layer-params", str(EXAMPLES / "digits-hybrid-params.cfg"), "--gpu", "0,1",
        "--mini", "64", "--train-range", "1", "--test-range", "6", "--no-progress",
        "--sync", "sync", "async:1", "--rounds", "2"])
    printed = []
    results, _ = compare(args, out=printed.append, profile_steps=1, predict=False)
    synced, hybrid = results
    assert hybrid.scheme == "hybrid" and hybrid.lockstep and hybrid.is_async
    assert len(hybrid.step_seconds) == 1 and hybrid.timeline
    assert {t.kind for t in hybrid.timeline} >= {"forward", "backward", "update", "copy"}
    assert "allreduce" not in {t.kind for t in hybrid.timeline}
    scheme_table, device_table = parse_tables("\n".join(printed))[:2]
    assert scheme_table[1]["all-reduced"] == ABSENT
    reduced = [op for op in hybrid.plan.ops if op.kind == "allreduce"]
    increments = sum(op.nbytes for op in reduced)  # R - 1 = 1 other replica per layer
    for device, (plain, asynced) in enumerate(zip(synced.totals, hybrid.device_traffic)):
        copies_sent = sum(op.nbytes for op in hybrid.plan.ops
                          if op.kind in ("copy", "gradcopy") and op.src == device)
        assert asynced[0] == copies_sent + increments
        row = [r for r in device_table if r["config"] == hybrid.name][device]
        assert row["sent"] == fmt_bytes(copies_sent + increments)
        assert row["compute"] != ABSENT
        assert plain.sent_bytes > copies_sent  # sync's sent counts its all-reduces

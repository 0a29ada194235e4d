"""``--compare``: the table's numbers are the planner's and the run logs' figures.

The digits example's four configs (single, data, model, hybrid) are compared
end to end from a command line; every figure of the printed table is then
recomputed independently (a fresh plan and :func:`device_totals`, the CSV
logs read back from disk, the profiled step times) and checked cell by cell,
and the picture is read back as a PNG of the announced size.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from convnet.app.command_line.main import main
from convnet.app.command_line.parser import build_parser
from convnet.app.comparison.compare import compare
from convnet.app.comparison.configs import config_pairs, run_names
from convnet.plan.time_split import CATEGORY
from convnet.app.comparison.plot import figure_pixels
from convnet.app.comparison.table import (DEVICE_HEADER, SCHEME_HEADER, fmt_bytes, fmt_cost,
                                          fmt_error, fmt_ms, fmt_rate, fmt_seconds, fmt_share,
                                          fmt_spread)
from convnet.config import load_net
from convnet.data import DataOptions, make_provider
from convnet.plan.ops import AllReduce, Copy, GradCopy
from convnet.plan.report import PARAM_COPIES, device_totals
from convnet.plan.planner import make_plan
from convnet.app.run.log import CSV_COLUMNS
from convnet.runtime.step.tasks import make_tasks
from tests.support import ROOT
from tests.support.cli import assert_clean_error, run_main

EXAMPLES = ROOT / "examples"
REFERENCE = EXAMPLES / "cuda-convnet2"
DIGITS = ["single", "data", "model", "hybrid"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def digits_argv(save_path: Path, epochs: int = 2, rounds: int = 6) -> list[str]:
    configs = [str(EXAMPLES / f"digits-{c}.cfg") for c in DIGITS]
    params = [str(EXAMPLES / ("digits-hybrid-params.cfg" if c == "hybrid" else
                              "digits-params.cfg")) for c in DIGITS]
    return (["--compare", *configs, "--layer-params", *params, "--gpu", "0,1", "--mini", "64",
             "--epochs", str(epochs), "--rounds", str(rounds), "--no-progress",
             "--save-path", str(save_path)])


def parse_tables(text: str) -> list[list[dict[str, str]]]:
    """Every table of the report as a list of {header: cell}; columns from the dash rule."""
    lines = text.splitlines()
    tables = []
    for k in range(1, len(lines)):
        rule = lines[k]
        if not rule or set(rule.replace(" ", "")) != {"-"}:
            continue
        spans, start = [], None
        for i, ch in enumerate(rule + " "):
            if ch == "-" and start is None:
                start = i
            elif ch != "-" and start is not None:
                spans.append((start, i))
                start = None

        def cells(line):
            return [line[a:b].strip() for a, b in spans]

        header = cells(lines[k - 1])
        rows = []
        for line in lines[k + 1:]:
            if not line.strip():
                break
            rows.append(dict(zip(header, cells(line))))
        tables.append(rows)
    return tables


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == CSV_COLUMNS
        return list(reader)


@pytest.fixture(scope="module")
def digits_comparison(tmp_path_factory):
    save = tmp_path_factory.mktemp("compare")
    printed = []
    args = build_parser().parse_args(digits_argv(save))
    results, picture = compare(args, out=printed.append, profile_steps=3)
    return save, results, picture, "\n".join(printed)


def independent_plan(config: str):
    params = EXAMPLES / ("digits-hybrid-params.cfg" if config == "hybrid" else
                         "digits-params.cfg")
    net = load_net(EXAMPLES / f"digits-{config}.cfg", params,
                   data_dims={0: (1, 8, 8), 1: (1,)}, num_classes=10)
    return net, make_plan(net, (0, 1), 64)


def test_digits_schemes_match_the_planner(digits_comparison):
    save, results, _, text = digits_comparison
    scheme_table, device_table = parse_tables(text)[:2]
    assert list(scheme_table[0]) == SCHEME_HEADER and list(device_table[0]) == DEVICE_HEADER
    assert [r["config"] for r in scheme_table] == [f"digits-{c}" for c in DIGITS]
    assert [r["scheme"] for r in scheme_table] == ["single", "data", "model", "hybrid"]
    for config, result, row in zip(DIGITS, results, scheme_table):
        net, plan = independent_plan(config)
        # synchronous CPU replicas in one process keep one copy of their weights
        replicated = frozenset(n for n, p in plan.layers.items() if p.replicas > 1)
        totals = device_totals(plan, net, replicated)
        assert result.totals == totals
        assert row["passes"] == str(plan.num_passes)
        copied = sum(op.nbytes for op in plan.ops if isinstance(op, (Copy, GradCopy)))
        reduced = sum(len(op.replica_devices) * (2 * (len(op.replica_devices) - 1) * op.nbytes
                                                 // len(op.replica_devices))
                      for op in plan.ops if isinstance(op, AllReduce))
        assert (result.copy_bytes, result.allreduce_bytes) == (copied, reduced)
        assert copied + reduced == sum(t.sent_bytes for t in totals) == \
            sum(t.received_bytes for t in totals) == result.moved_bytes
        assert row["copied"] == fmt_bytes(copied) and row["all-reduced"] == fmt_bytes(reduced)
        used = {d for p in plan.layers.values() for d in p.devices}
        assert row["devices used"] == f"{len(used)} of 2"
        rows = [r for r in device_table if r["config"] == f"digits-{config}"]
        # a row per device the config uses: the one-device config draws no empty row
        assert [r["device"] for r in rows] == (["0 (0)"] if config == "single" else
                                               ["0 (0)", "1 (1)"])
        for t, r in zip(totals, rows):
            assert r["param memory"] == fmt_bytes(t.param_bytes)
            assert r["activations (est.)"] == fmt_bytes(t.activation_bytes)
            assert r["sent"] == fmt_bytes(t.sent_bytes)
            assert r["received"] == fmt_bytes(t.received_bytes)
    single, data, model, hybrid = results
    assert single.copy_bytes == single.allreduce_bytes == 0 and single.devices_used == 1
    assert data.copy_bytes == 0 < data.allreduce_bytes
    assert model.allreduce_bytes == 0 < model.copy_bytes
    assert hybrid.copy_bytes > 0 and hybrid.allreduce_bytes > 0 and hybrid.num_passes == 2
    # Data parallel holds the one shared copy of weights and momentum on device 0 and a
    # gradient on each device; the single run everything on device 0 only.
    assert data.totals[0].param_bytes == single.totals[0].param_bytes == \
        PARAM_COPIES * data.totals[1].param_bytes and single.totals[1].param_bytes == 0


def test_digits_costs_errors_and_speed_are_the_logs(digits_comparison):
    save, results, _, text = digits_comparison
    scheme_table = parse_tables(text)[0]
    for config, result, row in zip(DIGITS, results, scheme_table):
        log = read_csv(save / f"digits-{config}" / "log.csv")
        assert [int(r["epoch"]) for r in log] == [1] * 5 + [2] * 5  # a test per batch
        last = log[-1]
        assert row["train cost"] == fmt_cost(float(last["cost"]))
        assert row["train err"] == fmt_error(float(last["error"]))
        assert row["test cost"] == fmt_cost(float(last["test_cost"]))
        assert row["test err"] == fmt_error(float(last["test_error"]))
        # the ranking's step: the interleaved rounds read paired, on the first minibatch
        assert len(result.round_seconds) == 6
        median = statistics.median(result.round_seconds)
        q1, _, q3 = statistics.quantiles(result.round_seconds, n=4, method="inclusive")
        step = paired_steps_of(results)[result.name]
        assert row["step ms"] == fmt_ms(step)
        assert row["spread"] == fmt_spread((q3 - q1) / 2 / median)
        assert row["img/s"] == fmt_rate(64 / step)
        assert row["wall s"] == fmt_seconds(float(last["cumulative_time"]))
        assert [r["test_error"] for r in result.log_rows] == \
            [float(r["test_error"]) for r in log]
        assert (save / f"digits-{config}" / "checkpoint.npz").exists()
        assert (save / f"digits-{config}" / "log.png").read_bytes()[:8] == PNG_SIGNATURE
    # Same data, seed and devices: the four schemes train the same net (parallel execution computes what one device computes), so
    # their test errors agree to within a case or two of the 299 test cases.
    errors = [r.final["test_error"] for r in results]
    assert max(errors) - min(errors) <= 2 / 299 + 1e-9
    assert errors[0] < 0.5  # and it learned


def test_digits_time_split_and_timeline_follow_the_plan(digits_comparison):
    _, results, _, text = digits_comparison
    device_table = parse_tables(text)[1]
    for config, result in zip(DIGITS, results):
        plan = result.plan
        step = result.mean_step_seconds
        assert len(result.step_seconds) == 3 and result.profile_cases == 64
        assert result.profiled_images_per_sec == pytest.approx(64 / step)
        rows = [r for r in device_table if r["config"] == f"digits-{config}"]
        for d, (time, row) in enumerate(zip(result.times, rows)):
            assert row["device"].startswith(f"{d} ")
            assert time.compute + time.copy + time.allreduce + time.idle == pytest.approx(step)
            assert min(time.compute, time.copy, time.allreduce, time.idle) >= 0
            assert [row["compute"], row["copy"], row["all-reduce"], row["idle"]] == \
                [fmt_share(time.compute / step), fmt_share(time.copy / step),
                 fmt_share(time.allreduce / step), fmt_share(time.idle / step)]
            # The timeline of one step holds exactly the tasks of each device: the plan's
            # operations, each all-reduce split into a reduce and a gather per rank
            # (CPU devices: the chunked collective, whose updates are sharded).
            ran = Counter(t.kind for t in result.timeline if t.device == d)
            tasks = make_tasks(plan.ops, sharded=lambda op: True)
            assert ran == Counter(t.kind for t in tasks if d in t.devices)
            per_op = Counter(op.kind for op in plan.ops_for_device(d))
            assert ran == per_op + Counter(allreduce=per_op["allreduce"])
            kinds = {op.kind for op in plan.ops_for_device(d)}
            assert (time.copy > 0) == bool(kinds & {"copy", "gradcopy"})
            assert (time.allreduce > 0) == ("allreduce" in kinds)
            assert (time.compute > 0) == bool(kinds & {"forward", "backward"})
        for t in result.timeline:
            assert 0 <= t.start <= t.end <= result.timeline_seconds
            assert t.kind in CATEGORY
    single = results[0]
    assert single.times[1].compute == 0 and single.times[1].idle == \
        pytest.approx(single.mean_step_seconds)


def test_digits_picture_is_a_png_of_the_expected_size(digits_comparison):
    import matplotlib.image

    save, results, picture, text = digits_comparison
    assert picture == save / "compare.png"
    assert picture.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(picture)
    width, height = figure_pixels(results)
    assert image.shape[:2] == (height, width)
    assert float(np.asarray(image)[..., :3].std()) > 0.05  # not a blank canvas
    assert (save / "compare.txt").read_text().strip() in text


def text_boxes(fig):
    """(what, window extent) of every visible text and legend of a drawn figure."""
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [a for a in fig.findobj(Legend)]
    inside = {id(t) for legend in legends for t in legend.findobj(Text)}
    inside |= {id(label) for label in _undrawn_tick_labels(fig)}
    boxes = [(f"legend {i}", legend.get_window_extent(renderer))
             for i, legend in enumerate(legends)]
    boxes += [(t.get_text(), t.get_window_extent(renderer)) for t in fig.findobj(Text)
              if t.get_visible() and t.get_text().strip() and id(t) not in inside]
    return boxes


def _undrawn_tick_labels(fig):
    """Labels of ticks beyond an axis's view limits: matplotlib keeps them as visible Text
    objects (with made-up extents) but does not draw them."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            slack = 1e-9 * max(1.0, high - low)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not low - slack <= tick.get_loc() <= high + slack:
                    yield tick.label1
                    yield tick.label2


def overlaps(boxes) -> list[tuple[str, str]]:
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
            if box_a.overlaps(box_b)]


def test_picture_has_no_overlapping_text_even_with_long_names(digits_comparison):
    """Titles, tick labels, bar labels and legends never cover one another: checked on the
    renderer's extents, with the ImageNet configs' long names and five-digit rates."""
    from dataclasses import replace

    from convnet.app.comparison.plot import comparison_figure

    _, results, _, _ = digits_comparison
    long = [replace(r, name=f"layers-imagenet-2gpu-{r.name}") for r in results]
    for r in long:  # slow steps: longer labels under narrow bars
        r.round_seconds = [12.345 + i for i in range(len(r.round_seconds))]
    assert overlaps(text_boxes(comparison_figure(long))) == []
    assert overlaps(text_boxes(comparison_figure(results))) == []


def test_text_box_check_sees_an_overlap():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title("a title")
    ax.legend(handles=[ax.plot([0], [0], label="x")[0]], loc="lower center",
              bbox_to_anchor=(0.5, 0.98))
    assert overlaps(text_boxes(fig))


def test_compare_from_the_command_line_without_save_path(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["--compare", str(EXAMPLES / "digits-single.cfg"),
                 str(EXAMPLES / "digits-data.cfg"), "--layer-params",
                 str(EXAMPLES / "digits-params.cfg"), "--gpu", "0,1", "--mini", "100",
                 "--train-range", "1", "--test-range", "6", "--no-progress", "--rounds", "2"])
    out = capsys.readouterr().out
    assert code == 0
    scheme_table = parse_tables(out)[0]
    assert [(r["config"], r["scheme"]) for r in scheme_table] == \
        [("digits-single", "single"), ("digits-data", "data")]
    assert list(tmp_path.iterdir()) == []  # nothing written without --save-path


def test_default_gpu_list_fits_the_widest_config(tmp_path):
    args = build_parser().parse_args([
        "--compare", str(EXAMPLES / "digits-single.cfg"), str(EXAMPLES / "digits-model.cfg"),
        "--layer-params", str(EXAMPLES / "digits-params.cfg"), "--mini", "100",
        "--train-range", "1", "--test-range", "6", "--no-progress", "--rounds", "2"])
    results, picture = compare(args, out=lambda *a: None, profile_steps=1, predict=False)
    assert picture is None
    assert [r.plan.physical_devices for r in results] == [(0, 1), (0, 1)]


@pytest.mark.parametrize("argv, message", [
    (["--compare", "a.cfg", "b.cfg"], "--compare needs --layer-params"),
    (["--compare", "a.cfg", "b.cfg", "--layer-params", "p", "q", "r"],
     "2 configs and 3 --layer-params"),
    (["--layer-params", "p", "--layer-params", "q"], "only --compare takes one per config"),
    (["--compare", "a.cfg", "--layer-params", "p", "--load-file", "x"],
     "cannot be combined with --load-file"),
    (["--compare", "nowhere.cfg", str(EXAMPLES / "digits-single.cfg"), "--layer-params",
      str(EXAMPLES / "digits-params.cfg")], "no such file nowhere.cfg"),
    # one run has nothing to be compared with: it was trained, timed and called fastest
    (["--compare", str(EXAMPLES / "digits-single.cfg"), "--layer-params",
      str(EXAMPLES / "digits-params.cfg")], "--compare needs two or more configs"),
    (["--compare", str(EXAMPLES / "digits-single.cfg"), "--layer-params",
      str(EXAMPLES / "digits-params.cfg"), "--sync", "sync"], "or several --sync modes"),
    # the second run of a mode given twice was refused after the first had trained, for a
    # log in a temporary folder
    (["--compare", str(EXAMPLES / "digits-single.cfg"), str(EXAMPLES / "digits-data.cfg"),
      "--layer-params", str(EXAMPLES / "digits-params.cfg"), "--sync", "local:4", "sync",
      "local:4"], "--sync names local:4 more than once"),
    (["--compare", str(EXAMPLES / "digits-single.cfg"), "--layer-params",
      str(EXAMPLES / "digits-params.cfg"), "--sync", "async", "async:4"],
     "--sync names async:4 more than once (async is async:4)"),
    # --auto-place was ignored: the configs were compared and nothing placed
    (["--compare", str(EXAMPLES / "digits-single.cfg"), str(EXAMPLES / "digits-data.cfg"),
      "--layer-params", str(EXAMPLES / "digits-params.cfg"), "--auto-place", "2"],
     "cannot be combined with --auto-place"),
    (["--compare", str(EXAMPLES / "digits-data.cfg"), "--layer-params",
      str(EXAMPLES / "digits-params.cfg"), "--sync", "async", "sync", "async:4"],
     "--sync names async:4 more than once (async is async:4): compare each mode once"),
    (["--compare", str(EXAMPLES / "digits-data.cfg"), "--layer-params",
      str(EXAMPLES / "digits-params.cfg"), "--sync", "sync", "async", "--micro-batches", "2"],
     "--micro-batches 2 pipelines lockstep steps, and --sync async:4"),  # as a run alone
])
def test_compare_usage_errors(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_params_shared_or_paired_and_names_unique():
    args = build_parser().parse_args(["--compare", "x/a.cfg", "y/a.cfg", "b.cfg",
                                      "--layer-params", "p.cfg"])
    assert config_pairs(args) == [(Path("x/a.cfg"), Path("p.cfg")),
                                  (Path("y/a.cfg"), Path("p.cfg")),
                                  (Path("b.cfg"), Path("p.cfg"))]
    assert run_names([p for p, _ in config_pairs(args)]) == ["a", "a#2", "b"]
    args = build_parser().parse_args(["--compare", "a.cfg", "b.cfg", "--layer-params", "p.cfg",
                                      "--layer-params", "q.cfg"])
    assert config_pairs(args) == [(Path("a.cfg"), Path("p.cfg")), (Path("b.cfg"), Path("q.cfg"))]


def test_no_run_is_named_as_the_comparisons_own_files():
    """A config named compare.png.cfg was saved in SAVE_PATH/compare.png, a folder, and
    after every config had trained the picture could not be written there."""
    assert run_names([Path("compare.png.cfg"), Path("x/compare.txt.cfg"), Path("a.cfg")]) \
        == ["compare.png#2", "compare.txt#2", "a"]


# ------------------------------------------------------ ImageNet configs on dummy data
def test_imagenet_reference_configs_compare_on_small_dummy_images(tmp_path):
    """2gpu-data against 2gpu-model on 3x52x52 dummy images (the smallest size that plans),
    with dummy batches of 16 cases so that a few steps of minibatch 8 do."""
    names = ["2gpu-data", "2gpu-model"]
    argv = ["--compare", *[str(REFERENCE / f"layers-imagenet-{n}.cfg") for n in names],
            "--layer-params", *[str(REFERENCE / f"layer-params-imagenet-{n}.cfg") for n in names],
            "--data-provider", "dummy", "--data-dims", "3x52x52", "--num-classes", "1000",
            "--gpu", "0,1", "--mini", "8", "--train-range", "1", "--test-range", "9",
            "--epochs", "1", "--no-progress", "--rounds", "1", "--save-path", str(tmp_path)]
    args = build_parser().parse_args(argv)
    provider = make_provider("dummy", options=DataOptions(
        train_range=[1], test_range=[9], data_dims={0: (3, 52, 52), 1: (1,)},
        num_classes=1000, cases_per_batch=16))
    printed = []
    results, picture = compare(args, out=printed.append, provider=provider, profile_steps=1,
                               predict=False)
    data, model = results
    assert (data.scheme, model.scheme) == ("data", "model")
    for n, result in zip(names, results):
        net = load_net(REFERENCE / f"layers-imagenet-{n}.cfg",
                       REFERENCE / f"layer-params-imagenet-{n}.cfg",
                       data_dims={0: (3, 52, 52), 1: (1,)}, num_classes=1000)
        plan = make_plan(net, (0, 1), 8)  # the data-parallel replicas share their weights
        replicated = frozenset(n for n, p in plan.layers.items() if p.replicas > 1)
        assert result.totals == device_totals(plan, net, replicated)
        assert len(result.log_rows) == 1 and math.isfinite(result.final["test_cost"])
    # Data parallel all-reduces every weight; model parallel copies activations instead,
    # and keeps each tower's weights on its own device.
    assert data.allreduce_bytes > 0 and data.copy_bytes == 0
    assert model.copy_bytes > 0 and model.allreduce_bytes == 0
    assert data.totals[0].param_bytes > model.totals[0].param_bytes
    table = parse_tables("\n".join(printed))[0]
    assert [r["scheme"] for r in table] == ["data", "model"]
    assert picture.read_bytes()[:8] == PNG_SIGNATURE

def test_no_run_is_named_as_the_comparisons_own_files():
    """A config named compare.png.cfg was saved in SAVE_PATH/compare.png, a folder, and
    after every config had trained the picture could not be written there."""
    assert run_names([Path("compare.png.cfg"), Path("x/compare.txt.cfg"), Path("a.cfg")]) \
        == ["compare.png#2", "compare.txt#2", "a"]



def test_imagenet_configs_plan_down_to_52_pixels():
    for n in ["1gpu", "2gpu-data", "2gpu-model", "4gpu-data", "4gpu-data-model"]:
        files = (REFERENCE / f"layers-imagenet-{n}.cfg",
                 REFERENCE / f"layer-params-imagenet-{n}.cfg")
        net = load_net(*files, data_dims={0: (3, 52, 52), 1: (1,)}, num_classes=1000)
        make_plan(net, (0, 1, 2, 3), 16)
        assert tuple(net["pool3" if "pool3" in net.layers else "pool3a"].output_shape)[1:] == \
            (1, 1)
        with pytest.raises(Exception, match="larger than"):
            load_net(*files, data_dims={0: (3, 51, 51), 1: (1,)}, num_classes=1000)


def paired_steps_of(results) -> dict[str, float]:
    """Each config's step as docs/COMPARE.md defines it, recomputed from its rounds: the
    reference (faster in at least half the rounds against the most others, then the
    lowest median) median step times the config's median round ratio to it."""
    rounds = {r.name: r.round_seconds for r in results}

    def ahead(x):
        return sum(statistics.median([b / a for a, b in zip(rounds[x], rounds[y])]) >= 1
                   for y in rounds if y != x)

    ref = min(rounds, key=lambda x: (-ahead(x), statistics.median(rounds[x])))
    return {name: statistics.median(rounds[ref]) *
            statistics.median([c / r for c, r in zip(times, rounds[ref])])
            for name, times in rounds.items()}


def test_verdict_names_the_fastest_scheme_and_what_it_pays(digits_comparison):
    from convnet.app.comparison.noise import decide
    from convnet.app.comparison.verdict import baseline, efficiency, idle_share, speedup

    _, results, _, text = digits_comparison
    table = parse_tables(text)[0]
    base = baseline(results)
    assert base.name == "digits-single" and table[0]["speedup"] == "1.00x"
    for result, row in zip(results, table):
        assert row["speedup"] == f"{speedup(result, base):.2f}x"
        assert row["efficiency"] == f"{100 * efficiency(result, base):.0f}%"
        steps = paired_steps_of(results)
        assert speedup(result, base) == pytest.approx(steps[base.name] / steps[result.name])
    lines = text.splitlines()
    decision = decide({r.name: r.round_seconds for r in results})
    best = next(r for r in results if r.name == decision.first.fastest)
    assert decision.text() in lines
    what = "fastest" if decision.clear else "ahead in the rounds, within the noise"
    line = next(l for l in lines if l.startswith(f"{what}: "))
    assert line.startswith(f"{what}: {best.name} ({best.scheme}), "
                           f"{fmt_ms(best.median_step_seconds)} ms per step")
    assert f"idle {100 * idle_share(best):.0f}% of a profiled step" in line
    if best.allreduce_bytes:
        assert f"all-reduces {fmt_bytes(best.allreduce_bytes)}" in line
    # an unused device is not idle time of the one-device config
    assert idle_share(base) < 0.5
    # the simulator's ranking beside the measured one
    assert all(r.predicted_seconds > 0 for r in results)
    predicted = next(l for l in lines if l.startswith("predicted (simulator"))
    order = sorted(results, key=lambda r: r.predicted_seconds)
    assert predicted.endswith(" < ".join(f"{r.name} {fmt_ms(r.predicted_seconds)} ms"
                                         for r in order))
    assert table[0]["predicted ms"] == fmt_ms(results[0].predicted_seconds)


def test_unequal_configs_are_warned_about():
    """The hybrid config without updatePeriod updates its fc layers every pass (32 cases),
    the one-device config every 64: not the same training."""
    args = build_parser().parse_args([
        "--compare", str(EXAMPLES / "digits-single.cfg"), str(EXAMPLES / "digits-hybrid.cfg"),
        "--layer-params", str(EXAMPLES / "digits-params.cfg"), "--gpu", "0,1", "--mini",
        "64", "--train-range", "1", "--test-range", "6", "--no-progress", "--rounds", "2"])
    printed = []
    compare(args, out=printed.append, profile_steps=1, predict=False)
    assert any(l.startswith("warning: digits-hybrid updates '") and "updatePeriod" in l
               for l in "\n".join(printed).splitlines())


@pytest.mark.parametrize("option", [["--rounds", "5"], ["--min-lead", "5"]])
def test_the_verdicts_options_need_compare(capsys, option):
    code, _, err = run_main(capsys, "--layer-def", EXAMPLES / "digits-single.cfg",
                            "--layer-params", EXAMPLES / "digits-params.cfg", *option)
    assert_clean_error((code, err), 2, option[0], "give it with --compare")


def test_a_negative_least_lead_is_refused(capsys):
    code, _, err = run_main(capsys, "--compare", EXAMPLES / "digits-single.cfg",
                            "--min-lead", "-1")
    assert_clean_error((code, err), 2, "--min-lead", "expected a number in 0..1000, got '-1'")


def test_each_config_is_one_line_once_trained_unless_verbose(capsys):
    def printed(*extra):  # what compare says, and what its runs print
        args = build_parser().parse_args([
            "--compare", str(EXAMPLES / "digits-single.cfg"), str(EXAMPLES / "digits-data.cfg"),
            "--layer-params", str(EXAMPLES / "digits-params.cfg"), "--gpu", "0,1", "--mini",
            "64", "--train-range", "1", "--test-range", "6", "--epochs", "2", "--no-progress",
            "--rounds", "2", *extra])
        lines = []
        compare(args, out=lines.append, profile_steps=1, predict=False)
        return "\n".join(lines).splitlines() + capsys.readouterr().out.splitlines()

    quiet = printed()
    assert [l for l in quiet if l.startswith("[")] == [
        l for l in quiet if l.startswith(("[1/2] digits-single: single, 1 pass(es) per "
                                          "minibatch of 64, --gpu 0,1: trained 2 epoch(s) in ",
                                          "[2/2] digits-data: data, 1 pass(es) per minibatch "
                                          "of 64, --gpu 0,1: trained 2 epoch(s) in "))]
    assert len([l for l in quiet if l.startswith("[")]) == 2
    assert not any(l.startswith("epoch ") for l in quiet)
    verbose = printed("--verbose")
    assert verbose[0] == "== [1/2] digits-single: single, 1 pass(es) per minibatch of 64, --gpu 0,1"
    assert sum(l.startswith("epoch ") for l in verbose) == 4  # 2 configs x 2 tests

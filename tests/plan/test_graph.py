"""``--print-plan --plan-graph PNG``: the layer graph picture and its layout rules."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest

from convnet.app.command_line.main import main
from convnet.config import load_net
from convnet.plan.graph import (DPI, copied_edge, figure_size, layer_depths, layout,
                                write_plan_graph)
from convnet.plan.planner import make_plan
from tests.support import ROOT
from tests.support.cli import assert_clean_error

EXAMPLES = ROOT / "examples"
REFERENCE = EXAMPLES / "cuda-convnet2"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def digits(config: str, gpus=(0, 1), mini=64):
    params = "digits-hybrid-params.cfg" if config == "hybrid" else "digits-params.cfg"
    net = load_net(EXAMPLES / f"digits-{config}.cfg", EXAMPLES / params,
                   data_dims={0: (1, 8, 8), 1: (1,)}, num_classes=10)
    return net, make_plan(net, gpus, mini)


def imagenet(name: str, gpus=(0, 1, 2, 3), mini=128):
    net = load_net(REFERENCE / f"layers-imagenet-{name}.cfg",
                   REFERENCE / f"layer-params-imagenet-{name}.cfg",
                   data_dims={0: (3, 224, 224), 1: (1,)}, num_classes=1000)
    return net, make_plan(net, gpus, mini)


def check_png(path: Path, net) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    width, height = figure_size(net)
    assert image.shape[:2] == (round(height * DPI), round(width * DPI))


@pytest.mark.parametrize("make", [lambda: digits("hybrid"), lambda: digits("model"),
                                  lambda: imagenet("4gpu-data-model"),
                                  lambda: imagenet("2gpu-model", gpus=(0, 1))])
def test_layout_puts_every_layer_below_its_inputs_without_overlaps(make):
    net, _ = make()
    pos = layout(net)
    assert set(pos) == set(net.layers)
    for ldef in net:
        for source in ldef.inputs:
            assert pos[source][1] < pos[ldef.name][1]
    assert len(set(pos.values())) == len(pos)
    depth = layer_depths(net)
    assert depth["data"] == 0


def test_copied_edges_are_the_plans_copies():
    net, plan = digits("hybrid")
    assert copied_edge(plan, "pool1", "fca")  # shard 1 comes from the device-1 replica
    assert copied_edge(plan, "pool1", "fcb")
    assert copied_edge(plan, "fcb", "fc10")
    assert not copied_edge(plan, "conv1", "conv2")
    assert not copied_edge(plan, "fca", "fc10")
    assert not copied_edge(plan, "labels", "logprob")
    net, plan = digits("data")
    assert not any(copied_edge(plan, s, l.name) for l in net for s in l.inputs)
    net, plan = digits("single", gpus=(0,))
    assert not any(copied_edge(plan, s, l.name) for l in net for s in l.inputs)


def test_the_labels_sit_next_to_the_cost_layer():
    net, _ = digits("hybrid")
    depth = layer_depths(net)
    assert depth["labels"] == depth["logprob"] - 1


@pytest.mark.parametrize("make", [lambda: digits("hybrid"),
                                  lambda: imagenet("4gpu-data-model")])
def test_plan_graph_is_a_png_of_the_expected_size(make, tmp_path):
    net, plan = make()
    notes = []
    path = write_plan_graph(plan, net, tmp_path / "sub" / "graph.png", note=notes.append)
    check_png(path, net)
    assert notes == [f"wrote the layer graph to {path}"]


def test_print_plan_with_plan_graph_from_the_command_line(tmp_path, capsys):
    target = tmp_path / "plan.png"
    code = main(["--layer-def", str(EXAMPLES / "digits-model.cfg"), "--layer-params",
                 str(EXAMPLES / "digits-params.cfg"), "--gpu", "0,1", "--mini", "64",
                 "--print-plan", "json", "--plan-graph", str(target)])
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out.lstrip().startswith("{")  # stdout is still pure JSON
    assert "wrote the layer graph" in captured.err
    net, _ = digits("model")
    check_png(target, net)


def test_plan_graph_into_a_missing_folder_it_cannot_create(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["--layer-def", str(EXAMPLES / "digits-single.cfg"), "--layer-params",
                 str(EXAMPLES / "digits-params.cfg"), "--print-plan",
                 "--plan-graph", str(blocker / "plan.png")])
    captured = capsys.readouterr()
    assert_clean_error((code, captured.err), 2,
                       f"--plan-graph: the folder {blocker} does not exist")
    assert captured.out == ""  # refused before the plan is printed

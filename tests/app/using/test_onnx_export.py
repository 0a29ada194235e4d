"""The exported ONNX model computes what the engine computes, checked with onnxruntime.

Every reference config is built with its random initial weights (no training),
planned on as many logical CPU devices as it names, and run through the engine's
test-mode forward pass; the model made from the same weights must give the same
probabilities to 1e-5, and the same pre-softmax outputs to a relative 1e-4 (the
probabilities of barely trained nets are close to uniform, so the logits are the
sharper check).  The raw input is larger than the net's input, so the centre crop
and the mean in the graph are checked too.  Configs with layers ONNX cannot express
must be refused with a line naming the layer.
"""

from __future__ import annotations

import numpy as np
import pytest

from convnet.app.run.assembly import devices_needed
from convnet.app.using.onnx_export import net_model
from convnet.config import load_net
from convnet.errors import ConfigError
from convnet.plan import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from tests.support import ROOT
from tests.support.configs import (DATA_LAYERS, REFERENCE_NAMES, reference_dims, reference_pair,
                                   write_pair)

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

V1 = ROOT / "examples" / "cuda-convnet-v1"
V1_NAMES = ["18pct", "19pct", "80sec", "conv-local-11pct", "conv-local-13pct"]


def engine_and_model(net, probs_layer: str, margin: int = 6, seed: int = 0,
                     train_steps: int = 0):
    """(engine outputs, model outputs) of ``probs_layer`` and of the layer feeding it,
    on random raw pixels ``margin`` wider than the net's input, after ``train_steps``
    training steps on them (which move bnorm's running averages)."""
    channels, inner, _ = net.data_dims[0]
    gpus = (0,) * devices_needed(net)
    cases = 2 * len(gpus)
    plan = make_plan(net, gpus, cases)
    executor = Executor(net, plan, make_devices(gpus, "cpu"), seed=seed, parallel=False)
    try:
        rng = np.random.default_rng(seed)
        side = inner + margin
        raw = rng.uniform(0, 255, (cases, channels, side, side)).astype(np.float32)
        offset = rng.uniform(-130, -120, (channels, inner, inner)).astype(np.float32)
        start = margin // 2
        images = raw[:, :, start:start + inner, start:start + inner] + offset
        labels = np.zeros((cases, 1), np.float32)
        for step in range(train_steps):
            executor.step([images * (1 + step / 4), labels])
        logits_layer = net[probs_layer].inputs[0]
        state = executor.state_arrays()
        results = {}
        for layer in (probs_layer, logits_layer):
            want = executor.features([images, labels], layer).reshape(cases, -1)
            model = net_model(onnx, net, state, layer, (channels, side, side), offset)
            session = ort.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
            results[layer] = want, session.run(["probs"], {"images": raw})[0]
        return results[probs_layer], results[logits_layer]
    finally:
        executor.close()


def assert_model_matches(net, probs_layer: str = "probs", train_steps: int = 0):
    (want_p, got_p), (want_z, got_z) = engine_and_model(net, probs_layer,
                                                        train_steps=train_steps)
    np.testing.assert_allclose(got_p, want_p, rtol=0, atol=1e-5)
    scale = np.abs(want_z).max()
    assert scale > 0
    np.testing.assert_allclose(got_z, want_z, rtol=0, atol=1e-4 * scale)


#: The ImageNet nets on 67x67 images: the same layers and geometry keys as at
#: 224x224, in a tenth of the time (and an odd size, whose windows meet the edges
#: unevenly); the full size is checked once, as a slow test.
SMALL_IMAGENET = {0: (3, 67, 67), 1: (1,)}


@pytest.mark.parametrize("name", REFERENCE_NAMES)
def test_cuda_convnet2_reference_nets_export_exactly(name):
    imagenet = "imagenet" in name
    net = load_net(*reference_pair(name), SMALL_IMAGENET if imagenet else reference_dims(name),
                   1000 if imagenet else 10)
    assert_model_matches(net)


@pytest.mark.slow
def test_an_imagenet_net_at_its_full_size_exports_exactly():
    assert_model_matches(load_net(*reference_pair("imagenet-1gpu"),
                                  reference_dims("imagenet-1gpu"), 1000))


def v1_net(name: str):
    return load_net(V1 / f"layers-{name}.cfg", V1 / f"layer-params-{name}.cfg",
                    {0: (3, 24, 24), 1: (1,)}, 10)


@pytest.mark.parametrize("name", V1_NAMES)
def test_cuda_convnet_v1_reference_nets_export_exactly(name):
    assert_model_matches(v1_net(name))


def test_a_trained_resnet_exports_batch_normalization_exactly():
    """ResNet-20 after three training steps, whose bnorm layers' running averages are far
    from their start: the model's BatchNormalization nodes hold them, and onnxruntime
    gives the engine's test-mode outputs (what --predict and --write-features read)."""
    net = load_net(EXAMPLES / "resnet20-cifar10.cfg", EXAMPLES / "resnet20-cifar10-params.cfg",
                   {0: (3, 32, 32), 1: (1,)}, 10)
    assert_model_matches(net, train_steps=3)
    model = net_model(onnx, net, {f"weights/{l.name}/{k}": np.ones(s, np.float32)
                                  for l in net if l.has_weights
                                  for k, s in l.param_shapes().items()},
                      "probs", (3, 32, 32), np.zeros((3, 32, 32), np.float32))
    assert sum(node.op_type == "BatchNormalization" for node in model.graph.node) == 21




EXAMPLES = ROOT / "examples"


def all_layers_net(tmp_path, maxabs_to: str | None = "max"):
    """examples/all-layers.cfg (every layer type and neuron), its maxabs pool made
    ``maxabs_to`` (None: kept)."""
    text = (EXAMPLES / "all-layers.cfg").read_text()
    if maxabs_to is not None:
        text = text.replace("pool=maxabs", f"pool={maxabs_to}")
    layer_def, layer_params = write_pair(tmp_path, text,
                                         (EXAMPLES / "all-layers-params.cfg").read_text())
    return load_net(layer_def, layer_params, {0: (3, 8, 8), 1: (1,)}, 4)


def test_every_layer_type_and_neuron_exports_exactly(tmp_path):
    net = all_layers_net(tmp_path)
    kinds = {l.type for l in layers_below(net, "probs")}
    assert {"conv", "local", "pool", "cmrnorm", "rnorm", "cnorm", "concat", "neuron", "eltsum",
            "eltmax", "sum", "fc", "dropout", "dropout2", "softmax"} <= kinds
    assert_model_matches(net)


def layers_below(net, last):
    from convnet.app.using.onnx_export import layers_up_to
    return [net[name] for name in layers_up_to(net, last)]


def test_maxabs_pooling_is_refused_naming_the_layer(tmp_path):
    with pytest.raises(ConfigError, match=r"layer 'pool3' \(pool\) pools by maxabs"):
        engine_and_model(all_layers_net(tmp_path, maxabs_to=None), "probs")


GEOMETRY = DATA_LAYERS + """[conv1]
type=conv
inputs=data
channels=3
filters=6
filterSize=4
padding=0
stride=3
initW=0.05
neuron=relu

[norm]
type=cmrnorm
inputs=conv1
channels=6
size=4

[pool]
type=pool
pool=max
inputs=norm
channels=6
sizeX=2
stride=2
start=1

[avg]
type=pool
pool=avg
inputs=norm
channels=6
sizeX=3
stride=2
start=-2

[fc]
type=fc
inputs=pool,avg
outputs=5
initW=0.05,0.05

[probs]
type=softmax
inputs=fc

[cost]
type=cost.logreg
inputs=labels,probs
"""
GEOMETRY_PARAMS = """[conv1]
epsW=0.01
epsB=0.01
momW=0.9
momB=0.9
dropout=0.25

[norm]
scale=0.01
pow=0.75

[fc]
epsW=0.01,0.01
epsB=0.01
momW=0.9,0.9
momB=0.9

[cost]
coeff=1
"""


def test_edge_geometry_even_norm_windows_and_the_dropout_key_export_exactly(tmp_path):
    """A 14x14 image under 4x4 filters of stride 3: the last window hangs two pixels
    past the image (the ceiling rule); pooling that starts inside the image and
    before it; a cross-map window of even size (not LRN's); the test-time scale of
    the dropout= key."""
    net = load_net(*write_pair(tmp_path, GEOMETRY, GEOMETRY_PARAMS), {0: (3, 14, 14), 1: (1,)}, 5)
    assert net["conv1"].output_shape == (6, 5, 5)
    assert_model_matches(net)


def test_the_exported_file_gives_what_predict_gives(tmp_path, capsys):
    """End to end: --export-onnx of a trained run, fed raw 0..1 digit pixels, gives
    --predict's probabilities of the same pixels saved as PNGs; an existing model
    file is kept without --overwrite."""
    import csv

    from convnet.app.command_line.main import main
    from tests.support.trained_runs import digit_pngs, train_digits

    run = train_digits(tmp_path / "run")
    pixels = digit_pngs(tmp_path / "digits", count=4)
    assert main(["--load-file", str(run), "--export-onnx", str(tmp_path / "m.onnx")]) == 0
    assert main(["--load-file", str(run), "--predict", str(tmp_path / "digits"),
                 "--predict-out", str(tmp_path / "p.csv")]) == 0
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    raw = pixels[:, None].astype(np.float32) * np.float32(1 / 255)
    got = session.run(["probs"], {"images": raw})[0]
    with open(tmp_path / "p.csv", newline="") as file:
        want = np.array([[float(v) for v in row[1:]] for row in list(csv.reader(file))[1:]])
    np.testing.assert_allclose(got, want, atol=1e-5)
    capsys.readouterr()
    before = (tmp_path / "m.onnx").read_bytes()
    assert main(["--load-file", str(run), "--export-onnx", str(tmp_path / "m.onnx")]) == 2
    assert "m.onnx exists" in capsys.readouterr().err
    assert (tmp_path / "m.onnx").read_bytes() == before

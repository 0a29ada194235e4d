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
from tests.support.configs import REFERENCE_NAMES, reference_dims, reference_pair, write_pair

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

V1 = ROOT / "examples" / "cuda-convnet-v1"
V1_NAMES = ["18pct", "19pct", "80sec", "conv-local-11pct", "conv-local-13pct"]


def engine_and_model(net, probs_layer: str, margin: int = 6, seed: int = 0):
    """(engine outputs, model outputs) of ``probs_layer`` and of the layer feeding it,
    on random raw pixels ``margin`` wider than the net's input."""
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


def assert_model_matches(net, probs_layer: str = "probs"):
    (want_p, got_p), (want_z, got_z) = engine_and_model(net, probs_layer)
    np.testing.assert_allclose(got_p, want_p, rtol=0, atol=1e-5)
    scale = np.abs(want_z).max()
    assert scale > 0
    np.testing.assert_allclose(got_z, want_z, rtol=0, atol=1e-4 * scale)


@pytest.mark.parametrize("name", REFERENCE_NAMES)
def test_cuda_convnet2_reference_nets_export_exactly(name):
    net = load_net(*reference_pair(name), reference_dims(name), 1000 if "imagenet" in name else 10)
    assert_model_matches(net)


def v1_net(name: str):
    return load_net(V1 / f"layers-{name}.cfg", V1 / f"layer-params-{name}.cfg",
                    {0: (3, 24, 24), 1: (1,)}, 10)


@pytest.mark.parametrize("name", V1_NAMES)
def test_cuda_convnet_v1_reference_nets_export_exactly(name):
    assert_model_matches(v1_net(name))



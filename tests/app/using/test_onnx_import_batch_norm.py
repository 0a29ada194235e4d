"""``python -m convnet.import_onnx`` of ``BatchNormalization``: a ``bnorm`` layer each.

A small ResNet with BatchNorm2d (and a BatchNorm1d in its head), random weights and
random running statistics far from their start, exported by PyTorch so that its batch
normalisation stays (in eval mode with ``training=TrainingMode.PRESERVE`` or with
``do_constant_folding=False``; a plain eval-mode export folds each BatchNorm2d into the
convolution before it, tested in test_onnx_import.py): every node must become a bnorm
layer holding PyTorch's arrays unchanged (the running variance too: ONNX's input_var is
what the engine's test mode computes with), the convolutions must keep their own
weights, and the engine's test-mode outputs must be PyTorch's eval outputs to 1e-4.
The imported net trains (``--init-from``, ``--load-file``), and the engine's own
export of a bnorm net comes back with its arrays under their names and its outputs.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from convnet.app.checkpoint import load_checkpoint
from convnet.app.run.assembly import devices_needed
from convnet.config import load_net
from convnet.import_onnx.cli import main
from convnet.plan import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from tests.app.using.test_onnx_import import SmallResNet, engine_outputs
from tests.support.cli import EXAMPLES, run_main
from tests.support.configs import residual_pair, write_pair

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
nn = torch.nn

SIZE = 32


class NormalisedHeadResNet(SmallResNet):
    """The small ResNet with a hidden fc layer, BatchNorm1d and relu in its head."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(16, 12), nn.BatchNorm1d(12), nn.ReLU(),
                                nn.Linear(12, 5))


def resnet_with_statistics() -> nn.Module:
    """Random weights, running statistics and scales; one normalisation with its own
    epsilon and momentum."""
    torch.manual_seed(2)
    model = NormalisedHeadResNet()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.2, 3.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    model.layer1.bn2.eps, model.layer1.bn2.momentum = 1e-3, 0.2
    return model.eval()


#: How PyTorch is asked to keep the batch normalisation: in eval mode with either
#: option (training_mode=0), or in training mode (training_mode=1; its tracing moves
#: the running averages once more, which the model then holds too).
EXPORTS = {"preserve": {"training": torch.onnx.TrainingMode.PRESERVE},
           "no-folding": {"do_constant_folding": False},
           "training": {"training": torch.onnx.TrainingMode.TRAINING}}


def export_keeping_batch_norm(model, path, how: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, torch.zeros(2, 3, SIZE, SIZE), str(path), dynamo=False,
                          input_names=["images"], output_names=["logits"],
                          dynamic_axes={"images": {0: "N"}, "logits": {0: "N"}},
                          **EXPORTS[how])
    model.eval()


#: The modules whose arrays the imported net must hold (under the module's name).
MODULES = ("conv1", "bn1", "layer1.conv1", "layer1.bn1", "layer1.conv2", "layer1.bn2",
           "layer2.conv1", "layer2.bn1", "layer2.conv2", "layer2.bn2", "layer2.down.0",
           "layer2.down.1", "fc.1")


@pytest.mark.parametrize("how", list(EXPORTS))
def test_each_batch_norm_is_a_bnorm_layer_computing_pytorchs_eval_outputs(how, tmp_path,
                                                                          capsys):
    model = resnet_with_statistics()
    export_keeping_batch_norm(model, tmp_path / "model.onnx", how)
    assert main([str(tmp_path / "model.onnx"), "--tgt-dir", str(tmp_path / "net")]) == 0
    note = ("note: 'bn1' normalises with each batch's statistics in the model "
            "(training_mode=1); the engine's bnorm does so in training and uses its running "
            "averages in testing")
    assert (note in capsys.readouterr().out) == (how == "training")
    text = (tmp_path / "net" / "layers.cfg").read_text()
    assert text.count("type=bnorm") == 7
    arrays, _ = load_checkpoint(tmp_path / "net" / "checkpoint.npz")
    modules = dict(model.named_modules())
    for module_name in MODULES:
        module, layer = modules[module_name], module_name.replace(".", "_")
        if isinstance(module, nn.Conv2d):  # not folded: the convolution's own weights
            np.testing.assert_array_equal(arrays[f"weights/{layer}/W0"],
                                          module.weight.detach().numpy())
            continue
        assert f"[{layer}]\ntype=bnorm\n" in text
        for key, tensor in (("W0", module.weight), ("b", module.bias),
                            ("mean", module.running_mean), ("var", module.running_var)):
            np.testing.assert_array_equal(arrays[f"weights/{layer}/{key}"],
                                          tensor.detach().numpy())
            assert not arrays[f"momentum/{layer}/{key}"].any()
    assert "[layer1_bn2]\ntype=bnorm\ninputs=layer1_conv2\nepsilon=0.001\ndecay=0.8\n" in text
    assert "[bn1]\ntype=bnorm\ninputs=conv1\nepsilon=1e-05\ndecay=0.9\nneuron=relu\n" in text
    assert "[fc_1]\nepsW=0.001\nepsB=0.002\nmomW=0.9\nmomB=0.9\nwc=0.0\n" in \
        (tmp_path / "net" / "layer-params.cfg").read_text()  # no weight decay
    images = np.random.default_rng(0).standard_normal((4, 3, SIZE, SIZE)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(images)).numpy()
    got = engine_outputs(tmp_path / "net", images)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())


def _weights(folder) -> dict[str, np.ndarray]:
    arrays, _ = load_checkpoint(folder / "checkpoint.npz")
    return {k: v for k, v in arrays.items() if k.startswith("weights/")}


SHORT_RUN = ["--no-progress", "--dummy-cases", "8", "--train-range", "1", "--test-range",
             "2", "--mini", "4", "--epochs", "1"]


def test_the_imported_net_trains_from_init_from_and_load_file(tmp_path, capsys):
    export_keeping_batch_norm(resnet_with_statistics(), tmp_path / "model.onnx", "preserve")
    net = tmp_path / "net"
    assert main([str(tmp_path / "model.onnx"), "--tgt-dir", str(net)]) == 0
    start = _weights(net)
    code, out, _ = run_main(capsys, "--layer-def", net / "layers.cfg", "--layer-params",
                            net / "layer-params.cfg", "--init-from", net,
                            "--data-provider", "dummy", "--data-dims", f"3x{SIZE}x{SIZE}",
                            "--num-classes", "5", *SHORT_RUN, "--save-path", tmp_path / "a")
    assert code == 0, out
    assert "15 layer(s) loaded, 0 new, 0 with other shapes" in out
    code, out, _ = run_main(capsys, "--load-file", net, *SHORT_RUN,
                            "--save-path", tmp_path / "b")
    assert code == 0, out
    for run in ("a", "b"):  # two steps: the weights learn, the running averages move
        after = _weights(tmp_path / run)
        assert sorted(after) == sorted(start)
        for key in ("weights/bn1/W0", "weights/bn1/mean", "weights/bn1/var",
                    "weights/conv1/W0", "weights/fc_1/var"):
            assert not np.array_equal(after[key], start[key]), (run, key)


def _bnorm_net(which: str, tmp_path):
    """(net, image side, its bnorm layer of decay 0.5 or None)."""
    if which == "resnet20":  # stride-2 convolutions with modulesX, 1x1 projections
        return load_net(EXAMPLES / "resnet20-cifar10.cfg", EXAMPLES /
                        "resnet20-cifar10-params.cfg", {0: (3, 32, 32), 1: (1,)}, 10), 32, None
    layer_def, layer_params = write_pair(tmp_path, *residual_pair(gpu="0"))  # a flat bnorm
    return load_net(layer_def, layer_params, {0: (3, 67, 67), 1: (1,)}, 10), 67, "bnp"


@pytest.mark.parametrize("which", ["resnet20", "residual"])
def test_the_engines_own_bnorm_export_comes_back_with_its_names_arrays_and_outputs(
        which, tmp_path, capsys):
    from convnet.app.using.onnx_export import net_model

    net, side, half_decay = _bnorm_net(which, tmp_path)
    gpus = (0,) * devices_needed(net)
    executor = Executor(net, make_plan(net, gpus, 4), make_devices(gpus, "cpu"), seed=0,
                        parallel=False)
    rng = np.random.default_rng(1)
    images = rng.standard_normal((4, 3, side, side)).astype(np.float32)
    labels = np.zeros((4, 1), np.float32)
    try:
        for step in range(2):  # running averages away from their start
            executor.step([images * (2 + step) + 1, rng.integers(0, 10, (4, 1))
                           .astype(np.float32)])
        state = executor.state_arrays()
        ours = executor.features([images, labels], net["probs"].inputs[0]).reshape(4, -1)
    finally:
        executor.close()
    model = net_model(onnx, net, state, "probs", (3, side, side),
                      np.zeros((3, side, side), np.float32))
    (tmp_path / "net.onnx").write_bytes(model.SerializeToString())
    assert main([str(tmp_path / "net.onnx"), "--tgt-dir", str(tmp_path / "back")]) == 0
    capsys.readouterr()
    text = (tmp_path / "back" / "layers.cfg").read_text()
    assert sorted(re.findall(r"^\[(.+)\]$", text, re.M)) == sorted(l.name for l in net)
    back, _ = load_checkpoint(tmp_path / "back" / "checkpoint.npz")
    assert sorted(back) == sorted(state)
    for key, value in state.items():
        if key.startswith("weights/"):
            np.testing.assert_array_equal(back[key], value)
    assert not np.array_equal(state["weights/bn1/var"], np.ones_like(state["weights/bn1/var"]))
    if half_decay:
        assert f"[{half_decay}]\ntype=bnorm\ninputs=proj\nepsilon=1e-05\ndecay=0.5\n" in text
    got = engine_outputs(tmp_path / "back", images)
    np.testing.assert_allclose(got, ours, rtol=0, atol=1e-5 * np.abs(ours).max())

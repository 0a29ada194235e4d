"""``python -m convnet.import_onnx``: models PyTorch exports, and the engine's own export.

The models are built here with random weights (torchvision is not needed): a small
AlexNet of torchvision's layout, at an input size whose first convolution ONNX rounds
down (so the ``modulesX`` the import gives it is exercised), and a small ResNet whose
batch normalisation PyTorch folds into the convolutions when it exports in eval mode
(test_onnx_import_batch_norm.py imports it unfolded, as bnorm layers).  The
imported net must compute PyTorch's outputs to 1e-4 (relative to their scale); the
digits net exported by the engine must come back with its own outputs and its layer
names.  Bad input is one line, exit 1 or 2, and nothing written.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from convnet.app.checkpoint import load_checkpoint
from convnet.config import load_net
from convnet.import_onnx.cli import main
from convnet.plan import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from tests.support.cli import SINGLE_DEF, SINGLE_PARAMS, run_main

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
nn = torch.nn


def engine_outputs(folder, images: np.ndarray) -> np.ndarray:
    """The imported net's pre-softmax outputs (the layer ``probs`` reads)."""
    arrays, meta = load_checkpoint(folder / "checkpoint.npz")
    options = meta["options"]
    dims = tuple(int(d) for d in options["data_dims"].split("x"))
    net = load_net(folder / "layers.cfg", folder / "layer-params.cfg", {0: dims, 1: (1,)},
                   options["num_classes"])
    plan = make_plan(net, (0,), len(images))
    executor = Executor(net, plan, make_devices((0,), "cpu"), seed=0, parallel=False)
    try:
        executor.load_state_arrays(arrays)
        labels = np.zeros((len(images), 1), np.float32)
        return executor.features([images, labels], net["probs"].inputs[0]).reshape(
            len(images), -1)
    finally:
        executor.close()


def export(model, size: int, path) -> None:
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, torch.zeros(2, 3, size, size), str(path), dynamo=False,
                          input_names=["images"], output_names=["logits"],
                          dynamic_axes={"images": {0: "N"}, "logits": {0: "N"}})


def assert_imports_as_torch_computes(model, size: int, tmp_path, capsys) -> str:
    export(model, size, tmp_path / "model.onnx")
    assert main([str(tmp_path / "model.onnx"), "--tgt-dir", str(tmp_path / "net")]) == 0
    out = capsys.readouterr().out
    images = np.random.default_rng(0).standard_normal((3, 3, size, size)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(images)).numpy()
    got = engine_outputs(tmp_path / "net", images)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
    return out


class SmallAlexNet(nn.Module):
    """torchvision's AlexNet, narrower: the same layer kinds, names and geometry."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 11, stride=4, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),
            nn.Conv2d(16, 24, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(24, 32, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(32, 16, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(
            nn.Dropout(), nn.Linear(16 * 2 * 2, 64), nn.ReLU(inplace=True),
            nn.Dropout(), nn.Linear(64, 64), nn.ReLU(inplace=True), nn.Linear(64, classes))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class Block(nn.Module):
    """A ResNet basic block (with a projection where the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = Block(8, 8, 1)
        self.layer2 = Block(8, 16, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.avgpool(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(x, 1))


def test_an_alexnet_from_pytorch_computes_what_pytorch_computes(tmp_path, capsys):
    torch.manual_seed(0)
    # 4 + 100 - 11 = 93 is not a multiple of the stride 4: ONNX has 24 outputs, the engine 25
    assert_imports_as_torch_computes(SmallAlexNet(), 100, tmp_path, capsys)
    text = (tmp_path / "net" / "layers.cfg").read_text()
    assert "stride=4\nsharedBiases=1\ninitW=0.01\nmodulesX=24\n" in text
    for name in ("features_0", "features_10", "classifier_1", "classifier_6"):
        assert f"[{name}]\n" in text


def test_a_resnet_from_pytorch_computes_what_pytorch_computes(tmp_path, capsys):
    torch.manual_seed(1)
    model = SmallResNet()
    for module in model.modules():  # batch statistics that are not the identity
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)
    assert_imports_as_torch_computes(model, 32, tmp_path, capsys)
    text = (tmp_path / "net" / "layers.cfg").read_text()
    assert "type=eltsum" in text and "pool=avg" in text


def test_the_engines_own_export_comes_back_with_its_outputs_and_names(tmp_path, capsys):
    from tests.support.trained_runs import train_digits

    run = train_digits(tmp_path / "run")
    code = run_main(capsys, "--load-file", run, "--export-onnx", tmp_path / "digits.onnx")[0]
    assert code == 0
    assert main([str(tmp_path / "digits.onnx"), "--tgt-dir", str(tmp_path / "net")]) == 0
    out = capsys.readouterr().out
    assert "adds a constant image to the input (a mean): left out" in out
    saved, _ = load_checkpoint(run / "checkpoint.npz")
    back, _ = load_checkpoint(tmp_path / "net" / "checkpoint.npz")
    for key, value in saved.items():  # every weight under its own name, fc10's two inputs too
        if key.startswith("weights/"):
            np.testing.assert_array_equal(back[key], value)
    images = np.random.default_rng(0).uniform(-0.5, 0.5, (4, 1, 8, 8)).astype(np.float32)
    imported = engine_outputs(tmp_path / "net", images)
    ours = engine_outputs_of(SINGLE_DEF, SINGLE_PARAMS, saved, images)
    np.testing.assert_allclose(imported, ours, rtol=0, atol=1e-5 * np.abs(ours).max())
    # and --init-from takes it as it takes a run
    code, out, _ = run_main(capsys, "--no-progress", "--layer-def", SINGLE_DEF,
                            "--layer-params", SINGLE_PARAMS, "--init-from", tmp_path / "net",
                            "--epochs", "1")
    assert code == 0 and "5 layer(s) loaded, 0 new, 0 with other shapes" in out
    # and --load-file runs it as a saved net (on the dummy data it names, or real data)
    code, out, _ = run_main(capsys, "--load-file", tmp_path / "net", "--test-only",
                            "--data-provider", "digits")
    assert code == 0 and "test cost" in out


def engine_outputs_of(layer_def, layer_params, arrays, images):
    net = load_net(layer_def, layer_params, {0: images.shape[1:], 1: (1,)}, 10)
    plan = make_plan(net, (0,), len(images))
    executor = Executor(net, plan, make_devices((0,), "cpu"), seed=0, parallel=False)
    try:
        executor.load_state_arrays(arrays)
        labels = np.zeros((len(images), 1), np.float32)
        return executor.features([images, labels], "fc10").reshape(len(images), -1)
    finally:
        executor.close()


def _graph_model(nodes, constants: dict, out_shape, path) -> None:
    """A model of ONNX ``nodes`` on an input ``x`` of 3x8x8 images (what PyTorch would not
    export, written with onnx's helpers)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


@pytest.mark.parametrize("case", ["checkpoint", "corrupt", "unsupported", "batchnorm",
                                  "dynamic", "missing", "exists", "constant", "bias",
                                  "target-file"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, case):
    model = tmp_path / "model.onnx"
    target = tmp_path / "net"
    if case == "checkpoint":  # a file of another kind
        from tests.support.trained_runs import train_digits
        model = train_digits(tmp_path / "run") / "checkpoint.npz"
        capsys.readouterr()
    elif case == "corrupt":
        export(SmallResNet(), 16, model)
        data = model.read_bytes()
        model.write_bytes(data[:len(data) // 2])
    elif case == "unsupported":
        export(nn.Sequential(nn.Conv2d(3, 4, 3), nn.GELU()), 8, model)
    elif case == "batchnorm":
        export(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.BatchNorm1d(144)), 8, model)
    elif case == "dynamic":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(nn.Sequential(nn.Conv2d(3, 4, 3)).eval(), torch.zeros(1, 3, 8, 8),
                              str(model), dynamo=False, input_names=["x"],
                              dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    elif case == "missing":
        model = tmp_path / "nothing.onnx"
    elif case == "constant":  # a constant where the engine needs an activation
        _graph_model([onnx.helper.make_node("Concat", ["x", "K"], ["y"], axis=1)],
                     {"K": np.zeros((1, 1, 8, 8), np.float32)}, [1, 4, 8, 8], model)
    elif case == "bias":  # a Gemm bias that is not one value per output
        _graph_model([onnx.helper.make_node("Flatten", ["x"], ["f"]),
                      onnx.helper.make_node("Gemm", ["f", "W", "C"], ["y"])],
                     {"W": np.zeros((192, 10), np.float32), "C": np.zeros((2, 10), np.float32)},
                     [1, 10], model)
    elif case == "target-file":
        export(SmallResNet(), 16, model)
        target.write_text("mine\n")
    else:
        export(SmallResNet(), 16, model)
        target.mkdir()
        (target / "layers.cfg").write_text("mine\n")
    capsys.readouterr()
    code = main([str(model), "--tgt-dir", str(target)])
    out, err = capsys.readouterr()
    assert code in (1, 2) and out == "" and len(err.strip().splitlines()) == 1, err
    expected = {"checkpoint": "not a valid ONNX model", "corrupt": "not a valid ONNX model",
                "unsupported": "(Gelu): the engine has no layer for this operator",
                "batchnorm": "(BatchNormalization): normalises each of the 144 flattened "
                             "features of the image of 'l_0' on its own",
                "dynamic": "dynamic shape", "missing": "does not exist",
                "exists": "exists and this run would replace it",
                "constant": "(Concat): reads the constant 'K' where the engine needs an "
                            "activation",
                "bias": "(Gemm): adds a bias of shape (20,) to 10 outputs",
                "target-file": f"cannot write to --tgt-dir {target}: File exists"}[case]
    assert expected in err
    if case == "target-file":
        assert target.read_text() == "mine\n"
    elif case == "exists":
        assert sorted(p.name for p in target.iterdir()) == ["layers.cfg"]
        assert (target / "layers.cfg").read_text() == "mine\n"
    else:
        assert not target.exists()

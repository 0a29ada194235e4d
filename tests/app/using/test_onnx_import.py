"""``python -m convnet.import_onnx``: models PyTorch exports, and the engine's own export.

The models are built here with random weights (torchvision is not needed): a small
AlexNet of torchvision's layout, at an input size whose first convolution ONNX rounds
down (so the crop the import adds is exercised), and a small ResNet whose batch
normalisation PyTorch folds into the convolutions when it exports in eval mode.  The
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
    out = assert_imports_as_torch_computes(SmallAlexNet(), 100, tmp_path, capsys)
    assert "a 1x1 max-pool 'features_0_crop' keeps ONNX's outputs" in out
    text = (tmp_path / "net" / "layers.cfg").read_text()
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

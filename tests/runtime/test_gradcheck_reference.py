"""--check-grads passes on the CIFAR-10 reference config (on shrunk 16x16 inputs)."""


from convnet.app.command_line.main import main
from tests.support import ROOT

REFERENCE = ROOT / "examples" / "cuda-convnet2"


def test_check_grads_passes_on_the_cifar10_reference_config(capsys):
    code = main(["--check-grads", "--layer-def", str(REFERENCE / "layers-cifar10-11pct.cfg"),
                 "--layer-params", str(REFERENCE / "layer-params-cifar10-11pct.cfg"),
                 "--data-dims", "3x16x16", "--num-classes", "10"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = [l for l in out.splitlines() if l.split()[-1:] and " OK " in f" {l} "]
    for layer in ("conv1", "conv2", "local3", "local4", "fc10", "rnorm1", "pool1", "logprob"):
        assert any(l.startswith(layer + " ") for l in lines), (layer, out)
    assert "FAIL" not in out and "gradient check passed" in out

"""``--gpu`` on the CUDA backend, without a GPU: physical GPU ids, checked before
anything touches a GPU, and the logical devices placed in turn on the GPUs present
when ``--gpu`` is not given (CuPy's device count and free memory come from the
stand-in of :mod:`tests.support.fake_cupy`)."""

from __future__ import annotations

import pytest

from convnet.errors import UsageError
from convnet.runtime.devices import backends
from convnet.runtime.processes import cluster
from tests.support.cli import DIGITS, assert_clean_error, run_main
from tests.support.fake_cupy import pretend_gpus
from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config


@pytest.mark.parametrize("gpus, count, line", [
    ((0, 1), 1, "GPU 1 does not exist: this machine has 1 GPU; --gpu 0,0 runs both devices "
                "on it"),
    ((3,), 1, "GPU 3 does not exist: this machine has 1 GPU; --gpu 0 runs the device on it"),
    ((0, 1, 2, 3), 2, "GPUs 2 and 3 do not exist: this machine has 2 GPUs (0-1); --gpu "
                      "0,1,0,1 runs the 4 devices on them"),
    ((2, 1, 3, 0), 1, "GPUs 1, 2 and 3 do not exist: this machine has 1 GPU; --gpu 0,0,0,0 "
                      "runs the 4 devices on it"),
])
def test_a_missing_gpu_is_named_with_the_list_that_runs(monkeypatch, gpus, count, line):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(UsageError) as error:
        backends.check_gpus_exist(gpus, count)
    assert str(error.value) == line
    backends.check_gpus_exist((0,) * len(gpus), count)  # repeats of a GPU present: fine


def test_cuda_visible_devices_is_named_when_it_hides_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    with pytest.raises(UsageError, match=r"has 1 GPU \(CUDA_VISIBLE_DEVICES=2\);"):
        backends.check_gpus_exist((0, 1), 1)


def test_a_missing_gpu_ends_the_run_before_any_gpu_is_touched(monkeypatch, capsys):
    fake = pretend_gpus(monkeypatch, 1)
    for args in (["--backend", "cuda", "--gpu", "0,1"],
                 ["--backend", "auto", "--gpu", "0,1", "--print-plan"]):
        result = run_main(capsys, *DIGITS, *args)
        assert_clean_error((result[0], result[2]), 2, "error: GPU 1 does not exist: this "
                           "machine has 1 GPU; --gpu 0,0 runs both devices on it")
    assert fake.asked == [] and fake.log == []  # no GPU's memory asked for, no stream made


def test_without_gpu_the_bundled_example_shares_the_one_gpu(monkeypatch, capsys):
    fake = pretend_gpus(monkeypatch, 1)
    code, out, err = run_main(capsys, "--backend", "cuda", "--print-plan")
    assert code == 0, err
    assert "logical devices 0, 1 share physical device 0" in out
    assert "GPU 0 needed (est.)" in out and "GPU 1" not in out
    assert fake.asked == [0]


def test_without_gpu_the_banner_says_where_the_devices_went(monkeypatch, capsys, tmp_path):
    """A training run: the devices themselves are CPU workers (nothing here runs CUDA),
    the options, plan and banner are the CUDA backend's."""
    pretend_gpus(monkeypatch, 2)
    made = []

    def cpu_devices(gpus, backend, first_index=0):
        made.append((tuple(gpus), backend))
        return backends.make_devices(gpus, "cpu", first_index)

    monkeypatch.setattr(cluster, "make_devices", cpu_devices)
    layer_def, params = scaled_config("imagenet-4gpu-data", tmp_path)
    code, out, err = run_main(capsys, "--layer-def", layer_def, "--layer-params", params,
                              "--data-provider", "dummy", "--data-dims",
                              "x".join(map(str, IMAGE_DIMS)), "--num-classes", NUM_CLASSES,
                              "--dummy-cases", "8", "--mini", "8",
                              "--train-range", "1", "--test-range", "2", "--no-progress",
                              "--backend", "cuda")
    assert code == 0, err
    assert made == [((0, 1, 0, 1), "cuda")]
    assert ("cuda backend, logical device -> physical: 0 -> GPU 0, 1 -> GPU 1, 2 -> GPU 0, "
            "3 -> GPU 1 (no --gpu: in turn on this machine's 2 GPUs (0-1), as --gpu 0,1,0,1)"
            ) in out.splitlines()


def test_the_cpu_backend_keeps_its_worker_slots(monkeypatch, capsys):
    pretend_gpus(monkeypatch, 1)
    code, out, err = run_main(capsys, "--backend", "cpu", "--gpu", "0,1,2", "--print-plan",
                              "--layer-def", "examples/digits-single.cfg", "--layer-params",
                              "examples/digits-params.cfg")
    assert code == 0, err
    assert backends.gpus_for_backend((0, 1), False, "cpu") == ((0, 1), None)
    assert backends.gpus_for_backend((5, 7), True, "cpu") == ((5, 7), None)


def test_without_a_gpu_auto_keeps_the_cpu_and_cuda_keeps_its_own_error(monkeypatch):
    pretend_gpus(monkeypatch, 0)
    assert backends.gpus_for_backend((0, 1), True, "auto") == ((0, 1), None)
    assert backends.gpus_for_backend((0, 1), False, "cuda") == ((0, 1), None)

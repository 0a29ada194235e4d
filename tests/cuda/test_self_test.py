"""The self-test of the fused CUDA kernels, without a GPU: its comparison logic runs on
the host emulation of the kernels (:mod:`tests.support.cuda_emulation`), where every
family agrees with the generic kernels, and with a deliberately broken pooling
backward kernel (every max-pool gradient doubled, what NVRTC 13.0's miscompile gave:
-1.1224 for -0.5612), which it names, and a momentum update that ignores its device
flag; ``install()`` then keeps a failing family on the generic kernels and warns once."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from convnet import errors, kernels
import convnet.kernels.cuda
from convnet.kernels.cuda import kernel_set, self_test, versions
from convnet.kernels.cuda.kernel_set import KernelSet
from tests.support.cuda_emulation import EmulatedKernel, compiler_available

pytestmark = pytest.mark.skipif(not compiler_available(),
                                reason="no host C++ compiler to emulate the CUDA kernels with")

BROKEN_MAX = ("if (xv == y[o]) {\n        sum += gy[o];",
              "if (xv == y[o]) {\n        sum += 2 * gy[o];")


def _emulated(broken: dict[str, tuple[str, str]] | None = None) -> KernelSet:
    """The host emulation, with the bodies of the kernels in ``broken`` edited
    (name -> (text, replacement))."""
    def make(spec):
        if broken and spec.name in broken:
            old, new = broken[spec.name]
            assert old in spec.body
            spec = dataclasses.replace(spec, body=spec.body.replace(old, new))
        return EmulatedKernel(spec)

    return KernelSet("emulated", np, make)


def test_every_family_agrees_with_the_generic_kernels_on_the_emulation():
    with kernel_set.using(_emulated()):
        result = self_test.run()
    assert [r.family for r in result.results] == list(self_test.FAMILIES)
    assert result.failed == ()
    assert result.text().startswith("self-test: 9 kernel families agree with the generic "
                                    "kernels (")


def test_a_broken_pooling_backward_kernel_fails_its_family_only():
    with kernel_set.using(_emulated({"cvn_pool_bwd": BROKEN_MAX})):
        result = self_test.run()
    (failed,) = result.failed
    assert (failed.family, failed.kernel) == ("pool", "cvn_pool_bwd")
    assert failed.detail.startswith("max pooling, 8x8 image, size 3 stride 2 start 0, backward: [")
    got, want = _values(failed.detail)
    assert got == pytest.approx(2 * want, rel=1e-4)
    assert "FAILED for pool (the generic kernels run instead): cvn_pool_bwd: " in result.text()


def test_an_update_that_ignores_its_flag_fails_the_update_family_only():
    ignores_flag = ("if (!gated || ok[0]) {", "if (true) {")
    with kernel_set.using(_emulated({"cvn_momentum_update": ignores_flag})):
        result = self_test.run()
    (failed,) = result.failed
    assert (failed.family, failed.kernel) == ("update", "cvn_momentum_update")
    assert failed.detail.startswith("momentum update, flag false, weights: [")


def _values(detail: str) -> tuple[float, float]:
    """(what the fused kernel gave, what the generic one gave) in a mismatch's detail."""
    got = detail.split(" is ")[1].split(" where")[0]
    want = detail.split("kernel gives ")[1].split(" (")[0]
    return float(got), float(want)


def test_a_family_whose_kernels_cannot_run_fails_with_the_reason():
    def make(spec):
        if spec.name.startswith("cvn_cmr"):
            raise RuntimeError("NVRTC_ERROR_COMPILATION (6)")
        return EmulatedKernel(spec)

    with kernel_set.using(KernelSet("emulated", np, make)):
        result = self_test.run()
    (failed,) = result.failed
    assert failed.family == "norm" and "NVRTC_ERROR_COMPILATION" in failed.detail


@pytest.fixture
def fresh_install(monkeypatch):
    """install() as on a GPU whose compiler is described by a stand-in, from scratch."""
    monkeypatch.setattr(kernels.cuda, "available", lambda: True)
    monkeypatch.setattr(kernels.cuda, "_self_test", None)
    monkeypatch.setattr(versions, "compiler_text", lambda gpu=None: (
        "GPU 0 (NVIDIA H200) with NVRTC 13.0, driver 580.65.06 (CUDA 13.0)"))
    monkeypatch.delenv("CONVNET_CUDA_KERNELS", raising=False)
    yield
    kernels.cuda.uninstall()


def test_install_keeps_a_failing_family_on_the_generic_kernels_and_warns_once(fresh_install):
    with kernel_set.using(_emulated({"cvn_pool_bwd": BROKEN_MAX})):
        with pytest.warns(kernels.cuda.CudaKernelWarning) as caught:
            assert kernels.cuda.install()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a second install: no second warning
            assert kernels.cuda.install()
    registered = {name for name, module in kernels.registered_kernels() if module == "cupy"}
    assert registered == {name for name, family in kernels.cuda.OVERRIDES.items()
                          if family != "pool"}
    (warning,) = caught
    text = errors._one_line(warning.message, warning.category, "", 0)
    assert text.count("\n") == 1 and text.startswith(
        "warning: the CUDA kernels disagree with the generic kernels on GPU 0 (NVIDIA H200) "
        "with NVRTC 13.0, driver 580.65.06 (CUDA 13.0): cvn_pool_bwd (pool): max pooling, ")
    assert text.endswith("the generic kernels run instead for pool (slower, not wrong); make "
                         "gpu-check reports it\n")
    # the GPU tests register every fused kernel, checked or not
    kernels.cuda.install(force=True, self_test=False)
    assert ("pool_backward", "cupy") in kernels.registered_kernels()


def test_install_registers_every_family_that_passes(fresh_install):
    with kernel_set.using(_emulated()):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert kernels.cuda.install()
    registered = {name for name, module in kernels.registered_kernels() if module == "cupy"}
    assert registered == set(kernels.cuda.OVERRIDES)

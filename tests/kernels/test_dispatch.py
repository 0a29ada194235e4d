"""The kernel interface: dispatch by array module, array-module genericity, counter RNG."""

from __future__ import annotations

import numpy as np
import pytest

from convnet import kernels
from convnet.kernels import conv as kconv
from convnet.kernels import nn as knn
from convnet.kernels import random as krandom


def test_array_module_is_numpy_for_host_arrays():
    assert kernels.array_module(np.zeros(3)) is np
    assert kernels.array_module_name(np) == "numpy"
    assert isinstance(kernels.cupy_available(), bool)


FIRST_CALLS_FROM_THREADS = """
import threading
import cupy  # loaded, as in a run that asked whether there is a GPU
import numpy as np
from convnet.kernels import array_module
barrier, errors = threading.Barrier(8), []
def call():
    barrier.wait()
    try:
        assert array_module(np.zeros(3)) is np
    except Exception as error:
        errors.append(repr(error))
threads = [threading.Thread(target=call) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(errors)
"""


def test_first_calls_from_several_threads_at_once_with_cupy_installed():
    """Eight device threads asking for the array module at the same moment in a fresh
    process: ``cupy.get_array_module`` failed here (a half-done lazy import of
    ``cupyx.scipy``), so CPU runs broke once CuPy was installed."""
    import subprocess
    import sys

    pytest.importorskip("cupy", reason="needs CuPy installed (the cuda-compile extra)")
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", FIRST_CALLS_FROM_THREADS],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "[]", proc.stdout


def test_a_kernel_registered_for_an_array_module_replaces_the_generic_one():
    calls = []

    def fake_softmax(x):
        calls.append(x.shape)
        return np.full_like(x, 0.25)

    key = ("softmax_forward", "numpy")
    assert key not in kernels.registered_kernels()
    kernels.register_kernel("softmax_forward", "numpy")(fake_softmax)
    try:
        y = knn.softmax_forward(np.zeros((2, 4)))
        assert calls == [(2, 4)] and np.all(y == 0.25)
        # the portable implementation stays reachable
        np.testing.assert_allclose(knn.softmax_forward.generic(np.zeros((2, 4))), 0.25)
    finally:
        kernels._OVERRIDES.pop(key)
    y = knn.softmax_forward(np.array([[0.0, np.log(3.0)]]))
    np.testing.assert_allclose(y, [[0.25, 0.75]])
    assert calls == [(2, 4)]


def test_layers_call_kernels_through_the_dispatcher():
    """A registered kernel replaces conv without touching layers/ (here: count the calls)."""
    from convnet.layers import build_layer
    from convnet.layers.base import Context

    from tests.support.layers import conv_def, params_for, random_inputs

    seen = []
    generic = kconv.conv_forward.generic

    def spy(*args, **kw):
        seen.append(kw["modules"])
        return generic(*args, **kw)

    kernels.register_kernel("conv_forward", "numpy")(spy)
    try:
        ldef = conv_def()
        layer = build_layer(ldef)
        layer.forward(random_inputs(ldef), params_for(layer), Context())
    finally:
        kernels._OVERRIDES.pop(("conv_forward", "numpy"))
    assert seen == [ldef.attrs["modulesX"]]


def test_uniforms_are_a_function_of_the_global_case_index():
    key = krandom.stream_key(3, 4, "layer")
    x = np.zeros((10, 3, 2))
    whole = krandom.uniform_like(x, key, 100)
    part = krandom.uniform_like(x[4:], key, 104)
    np.testing.assert_array_equal(whole[4:], part)
    assert whole.dtype == np.float64 and 0 <= whole.min() and whole.max() < 1
    assert krandom.stream_key(3, 4, "layer") != krandom.stream_key(3, 5, "layer")
    assert krandom.name_key("a") != krandom.name_key("b")


def test_uniforms_look_uniform():
    u = krandom.uniform_like(np.zeros((400, 500)), krandom.stream_key(0, 0, "x"), 0).ravel()
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    expected = u.size / 20
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 60  # 19 degrees of freedom; p < 1e-5 above this
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01


@pytest.mark.parametrize("img,fs,pad,stride,want", [
    (224, 11, 0, 4, 55), (24, 5, 2, 1, 24), (7, 3, 1, 2, 4), (6, 3, 0, 2, 3), (5, 5, 0, 1, 1)])
def test_conv_out_size_ceiling_rule(img, fs, pad, stride, want):
    assert kconv.out_size(img, fs, pad, stride) == want


def test_kernels_keep_float32():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = np.zeros(4, np.float32)
    geom = dict(filter_sizes=[3], paddings=[1], strides=[1], channels=[3], groups=[1],
                img_sizes=[5], modules=5)
    y, cache = kconv.conv_forward([x], [w], b, **geom)
    assert y.dtype == np.float32 and y.flags.c_contiguous
    dxs, dws, db = kconv.conv_backward(np.ones_like(y), [x], [w], cache, [True], **geom)
    assert dxs[0].dtype == dws[0].dtype == db.dtype == np.float32
    # without the cache (test-mode forward) the backward recomputes the columns
    _, none_cache = kconv.conv_forward([x], [w], b, keep_cache=False, **geom)
    dxs2, dws2, _ = kconv.conv_backward(np.ones_like(y), [x], [w], none_cache, [True], **geom)
    np.testing.assert_allclose(dws2[0], dws[0], rtol=1e-6)


def test_conv_scratch_buffers_are_per_thread():
    """Backward temporaries are reused per thread: concurrent calls (one worker per
    device in the executor) must not see each other's buffers."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(1)
    geom = dict(filter_sizes=[3], paddings=[1], strides=[1], channels=[8], groups=[1],
                img_sizes=[6], modules=6)
    cases = []
    for seed in range(6):
        x = rng.standard_normal((3, 8, 6, 6)).astype(np.float32)
        w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
        y, cache = kconv.conv_forward([x], [w], np.zeros(4, np.float32), **geom)
        g = rng.standard_normal(y.shape).astype(np.float32)
        cases.append((g, x, w, cache))

    def back(case):
        g, x, w, cache = case
        return kconv.conv_backward(g, [x], [w], cache, [True], **geom)[0][0]

    serial = [back(c) for c in cases]
    with ThreadPoolExecutor(3) as pool:
        for _ in range(5):
            parallel = list(pool.map(back, cases))
            for a, b in zip(serial, parallel):
                np.testing.assert_array_equal(a, b)


def test_neurons_dispatch_through_kernels():
    """Inline neurons go through neuron_forward/neuron_backward, which the CUDA
    kernels replace with fused ones."""
    from convnet.kernels import neurons as kneurons
    from convnet.layers import build_layer
    from convnet.layers.base import Context

    from tests.support.layers import fc_def, params_for, random_inputs

    seen = []
    kernels.register_kernel("neuron_forward", "numpy")(
        lambda x, name, args, out=None: seen.append(("f", name, args)) or
        kneurons.neuron_forward.generic(x, name, args, out))
    kernels.register_kernel("neuron_backward", "numpy")(
        lambda g, x, y, name, args: seen.append(("b", name, args)) or
        kneurons.neuron_backward.generic(g, x, y, name, args))
    try:
        ldef = fc_def(neuron_="tanh[1.5,0.5]")
        layer = build_layer(ldef)
        xs, p, ctx = random_inputs(ldef), params_for(layer), Context()
        y, st = layer.forward(xs, p, ctx)
        layer.backward(np.ones_like(y), xs, y, p, st, ctx, [True])
    finally:
        kernels._OVERRIDES.pop(("neuron_forward", "numpy"))
        kernels._OVERRIDES.pop(("neuron_backward", "numpy"))
    assert seen == [("f", "tanh", (1.5, 0.5)), ("b", "tanh", (1.5, 0.5))]


HELP_WITHOUT_CUPY = """
import runpy, sys
sys.argv = ["convnet.py", "--help"]
try:
    runpy.run_path("convnet.py", run_name="__main__")
except SystemExit:
    pass
import convnet.kernels, convnet.kernels.cuda, convnet.runtime.devices.backends
assert convnet.runtime.devices.backends.choose_backend("cpu") == "cpu"
print("cupy" in sys.modules, file=sys.stderr)
"""


def test_cupy_is_imported_only_when_a_gpu_is_asked_about():
    """CuPy's import costs a third of a second: --help, the kernel packages and the CPU
    backend's choice never pay it."""
    import subprocess
    import sys

    from tests.support import ROOT

    proc = subprocess.run([sys.executable, "-c", HELP_WITHOUT_CUPY], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "False"


def test_array_module_finds_cupy_arrays_once_cupy_is_imported(monkeypatch):
    import sys
    import types

    class ndarray:  # noqa: N801 - a stand-in for cupy.ndarray
        shape, dtype = (2,), np.float32

    fake = types.SimpleNamespace(ndarray=ndarray, __name__="cupy")
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert kernels.array_module(np.zeros(2), ndarray()) is fake
    assert kernels.array_module(np.zeros(2)) is np
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))  # half-imported
    assert kernels.array_module(ndarray()) is np


def test_16_bit_arrays_take_the_generic_kernels_on_cupy():
    """The CUDA sources are written for float32 and float64; bfloat16 and float16 arrays
    (--precision bf16, fp16) go to the generic kernel, other arrays to the override."""
    from convnet.kernels.cuda import _generic, for_kernel_dtypes

    calls = []
    dispatch = for_kernel_dtypes(lambda *a: calls.append("cuda"),
                                 lambda *a: calls.append("generic"))
    dispatch(np.zeros(2, np.float32))
    dispatch([np.zeros(2, np.float16)], 1)
    dispatch(np.zeros(2, np.float64))
    dispatch(np.zeros(2, np.int64))
    assert calls == ["cuda", "generic", "cuda", "cuda"]
    assert _generic("pool_forward") is kernels.pool.pool_forward.generic
    assert _generic("momentum_update") is kernels.update.momentum_update.generic

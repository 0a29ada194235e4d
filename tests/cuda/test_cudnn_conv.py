"""The cuDNN conv path (``CONVNET_CUDNN=1``) without a GPU, against a stand-in frontend.

The stand-in records the graphs the path builds and executes each one with the
generic numpy convolution, taking the output size from the paddings and stride it
was given (the standard rule, as cuDNN does): so the tests check everything but
cuDNN itself: the mapping of cuda-convnet2's geometry (top/left padding, the
ceiling rule's bottom/right padding, groups) onto cuDNN's, the tensors' shapes and
strides, the bias and the sum over inputs, what the backward pass gets, the engines
filtered out, and the fallback to the im2col kernels.  The GPU check
(``make gpu-check``'s proofs stage) runs the real frontend against the im2col kernels.
"""

from __future__ import annotations

import enum
import importlib
from types import SimpleNamespace

import numpy as np
import pytest

from convnet.kernels import conv as kconv
from convnet.kernels.cuda import cudnn_conv, kernel_set, precision

from tests.support.cuda_emulation import compiler_available, emulated_kernel_set

pytestmark = pytest.mark.skipif(not compiler_available(),
                                reason="no host C++ compiler to emulate the CUDA kernels")

cuda_conv = importlib.import_module("convnet.kernels.cuda.conv")


class FakeTensor:
    def __init__(self, graph, name, dim, stride=None, data_type=None):
        self.graph, self.name, self.dim, self.stride = graph, name, list(dim), stride
        self.data_type, self.is_output = data_type, False

    def set_output(self, value):
        self.is_output = value
        return self

    def set_data_type(self, value):
        self.data_type = value
        return self

    def set_dim(self, dim):
        self.dim = list(dim)
        return self

    def set_stride(self, stride):
        self.stride = list(stride)
        return self


class FakeGraph:
    def __init__(self, fake, **kwargs):
        self.fake, self.kwargs, self.calls, self.node = fake, kwargs, [], None
        fake.graphs.append(self)

    def tensor(self, name, dim, stride, data_type):
        assert stride == [int(np.prod(dim[i + 1:])) for i in range(len(dim))]  # packed
        return FakeTensor(self, name, dim, stride, data_type)

    def _node(self, op, a, b, pre_padding, post_padding, stride, dilation, compute_data_type):
        assert dilation == [1, 1] and pre_padding[0] == pre_padding[1]
        self.node = (op, a, b, pre_padding[0], post_padding[0], stride[0])
        out = FakeTensor(self, "out", a.dim if op == "conv_fprop" else [0])
        if op == "conv_fprop":  # cuDNN's output size: the standard rule on both paddings
            n, _, h, _ = a.dim
            m = (h + pre_padding[0] + post_padding[0] - b.dim[2]) // stride[0] + 1
            out.dim = [n, b.dim[0], m, m]
        self.out = out
        return out

    def conv_fprop(self, image, weight, **kw):
        return self._node("conv_fprop", image, weight, **kw)

    def conv_wgrad(self, image, loss, **kw):
        return self._node("conv_wgrad", image, loss, **kw)

    def conv_dgrad(self, loss, filter, **kw):
        return self._node("conv_dgrad", loss, filter, **kw)

    def __getattr__(self, name):  # validate, build_operation_graph, ... are recorded
        def record(*args, **kwargs):
            self.calls.append((name, args))
        return record

    def get_workspace_size(self):
        return 16

    def execute(self, pack, workspace, handle):
        assert handle is self.kwargs["handle"] and workspace in self.fake.arrays
        arrays = {t.name: self.fake.arrays[p] for t, p in pack.items()}
        op, a, b, pre, post, stride = self.node
        out = self.out
        assert list(arrays["out" if "out" in arrays else out.name].shape) == out.dim
        self.fake.executed.append(op)
        first = arrays[a.name]
        if op == "conv_fprop":
            x, w = first, arrays[b.name]
        elif op == "conv_wgrad":
            x, gy = first, arrays[b.name]
            w = np.zeros(out.dim, x.dtype)
        else:
            gy, w = first, arrays[b.name]
            x = np.zeros(out.dim, gy.dtype)
        n, c, h, _ = x.shape
        m = (h + pre + post - w.shape[2]) // stride + 1
        geom = dict(filter_sizes=[w.shape[2]], paddings=[pre], strides=[stride], channels=[c],
                    groups=[c // w.shape[1]], img_sizes=[h], modules=m)
        bias = np.zeros(w.shape[0], x.dtype)
        if op == "conv_fprop":
            result = kconv.conv_forward.generic([x], [w], bias, **geom)[0]
        else:
            dxs, dws, _ = kconv.conv_backward.generic(gy, [x], [w], None, [True], **geom)
            result = dws[0] if op == "conv_wgrad" else dxs[0]
        arrays["out"][...] = result


class FakeCudnn:
    """Just the cudnn module names the path uses, recording what it is asked."""

    data_type = enum.Enum("data_type", "FLOAT HALF BFLOAT16")
    heur_mode = enum.Enum("heur_mode", "A FALLBACK")
    numerical_note = enum.Enum("numerical_note", "TENSOR_CORE DOWN_CONVERT_INPUTS "
                                                 "NONDETERMINISTIC")

    def __init__(self):
        self.graphs, self.executed, self.arrays, self.streams = [], [], {}, []

    def create_handle(self):
        return SimpleNamespace()

    def set_stream(self, handle, stream):
        self.streams.append(stream)

    def pygraph(self, **kwargs):
        return FakeGraph(self, **kwargs)


class FakeFrontend(cudnn_conv.Frontend):
    def __init__(self):
        super().__init__(FakeCudnn())

    def pointer(self, array):
        address = array.ctypes.data + 1000003 * len(self.cudnn.arrays)  # distinct per call
        self.cudnn.arrays[address] = array
        return address

    def stream(self):
        return 0, 7


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(cudnn_conv.ENV, "1")
    with kernel_set.using(emulated_kernel_set()), \
            cudnn_conv.using_frontend(FakeFrontend()) as frontend:
        yield frontend.cudnn


GEOMETRIES = [  # n, c, img, filters, fs, pad, stride, groups, inputs
    (2, 4, 9, 6, 3, 1, 1, 1, 1),
    (2, 6, 10, 6, 5, 2, 2, 2, 1),
    (2, 4, 11, 4, 4, 3, 3, 2, 1),    # the ceiling rule pads the bottom more than the top
    (2, 3, 23, 8, 11, 0, 4, 1, 2),   # AlexNet's first layer, scaled; two inputs
]


def _case(rng, n, c, img, filters, fs, pad, stride, groups, inputs, shared=True):
    m = kconv.out_size(img, fs, pad, stride)
    xs = [rng.standard_normal((n, c, img, img)).astype(np.float32) for _ in range(inputs)]
    ws = [rng.standard_normal((filters, c // groups, fs, fs)).astype(np.float32)
          for _ in range(inputs)]
    b = rng.standard_normal(filters if shared else (filters, m, m)).astype(np.float32)
    geom = dict(filter_sizes=[fs] * inputs, paddings=[pad] * inputs, strides=[stride] * inputs,
                channels=[c] * inputs, groups=[groups] * inputs, img_sizes=[img] * inputs,
                modules=m)
    return xs, ws, b, geom


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("shared", [True, False])
def test_the_cudnn_path_computes_the_generic_conv(fake, geometry, shared):
    rng = np.random.default_rng(5)
    xs, ws, b, geom = _case(rng, *geometry, shared=shared)
    y, cache = cuda_conv.conv_forward(xs, ws, b, **geom)
    assert isinstance(cache, cudnn_conv.CudnnCache)  # nothing kept for the backward pass
    y_ref, ref_cache = kconv.conv_forward.generic(xs, ws, b, **geom)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
    gy = rng.standard_normal(y.shape).astype(np.float32)
    dxs, dws, db = cuda_conv.conv_backward(gy, xs, ws, cache, [True] * len(xs),
                                           shared_biases=shared, **geom)
    ref = kconv.conv_backward.generic(gy, xs, ws, ref_cache, [True] * len(xs),
                                      shared_biases=shared, **geom)
    for got, want in zip(dxs + dws + [db], ref[0] + ref[1] + [ref[2]]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    inputs = len(xs)
    assert fake.executed == ["conv_fprop"] * inputs + ["conv_wgrad", "conv_dgrad"] * inputs


def test_engines_are_deterministic_and_float32_stays_off_tensor_cores(fake, monkeypatch):
    rng = np.random.default_rng(6)
    xs, ws, b, geom = _case(rng, *GEOMETRIES[0])
    cuda_conv.conv_forward(xs, ws, b, **geom)
    notes = dict(fake.graphs[-1].calls)["deselect_numeric_notes"][0]
    names = {n.name for n in notes}
    assert names == {"NONDETERMINISTIC", "TENSOR_CORE", "DOWN_CONVERT_INPUTS"}
    monkeypatch.setattr(precision, "_enabled", True)  # --precision tf32
    cuda_conv.conv_forward(xs, ws, b, **geom)
    notes = dict(fake.graphs[-1].calls)["deselect_numeric_notes"][0]
    assert {n.name for n in notes} == {"NONDETERMINISTIC"}
    steps = [name for name, _ in fake.graphs[-1].calls]
    assert steps[:3] == ["validate", "build_operation_graph", "create_execution_plans"]
    assert steps[-2:] == ["check_support", "build_plans"]


def test_graphs_are_built_once_per_geometry_and_handles_once_per_stream(fake):
    rng = np.random.default_rng(7)
    xs, ws, b, geom = _case(rng, *GEOMETRIES[1])
    for _ in range(3):
        cuda_conv.conv_forward(xs, ws, b, **geom)
    assert len(fake.graphs) == 1 and fake.streams == [7] and len(fake.executed) == 3


def test_a_geometry_cudnn_cannot_express_keeps_the_im2col_kernels(fake):
    """Windows that stop short of the image's edge would need a negative padding."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    geom = dict(filter_sizes=[3], paddings=[0], strides=[3], channels=[3], groups=[1],
                img_sizes=[10], modules=2)  # covers 6 of 10 pixels
    assert cudnn_conv.post_padding(10, 3, 0, 3, 2) < 0
    y, cache = cuda_conv.conv_forward([x], [w], np.zeros(4, np.float32), **geom)
    assert not isinstance(cache, cudnn_conv.CudnnCache) and not fake.executed
    np.testing.assert_allclose(
        y, kconv.conv_forward.generic([x], [w], np.zeros(4, np.float32), **geom)[0],
        rtol=1e-5, atol=1e-5)


def test_off_unless_asked(monkeypatch):
    monkeypatch.delenv(cudnn_conv.ENV, raising=False)
    assert not cudnn_conv.requested()
    monkeypatch.setenv(cudnn_conv.ENV, "1")
    assert cudnn_conv.requested()


def test_the_frontend_package_imports_where_installed():
    """nvidia-cudnn-frontend (the gpu extra) imports without a GPU, with the names used."""
    cudnn = pytest.importorskip("cudnn")
    for name in ("pygraph", "create_handle", "set_stream", "data_type", "heur_mode",
                 "numerical_note"):
        assert hasattr(cudnn, name), name
    for name in ("NONDETERMINISTIC", "TENSOR_CORE", "DOWN_CONVERT_INPUTS"):
        assert hasattr(cudnn.numerical_note, name)
    for name in ("conv_fprop", "conv_dgrad", "conv_wgrad", "deselect_numeric_notes",
                 "deselect_workspace_greater_than", "build_plans", "get_workspace_size"):
        assert hasattr(cudnn.pygraph, name), name


def test_a_16_bit_conv_without_cudnn_is_the_generic_conv(monkeypatch):
    """The im2col kernels are float32/float64 sources: float16 takes the generic conv."""
    monkeypatch.delenv(cudnn_conv.ENV, raising=False)
    rng = np.random.default_rng(9)
    xs, ws, b, geom = _case(rng, *GEOMETRIES[0])
    xs, ws, b = [x.astype(np.float16) for x in xs], [w.astype(np.float16) for w in ws], \
        b.astype(np.float16)
    with kernel_set.using(emulated_kernel_set()):
        y, _ = cuda_conv.conv_forward(xs, ws, b, **geom)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, kconv.conv_forward.generic(xs, ws, b, **geom)[0])

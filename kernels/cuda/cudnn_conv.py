"""Conv layers through cuDNN (NVIDIA's cuDNN frontend, ``nvidia-cudnn-frontend``).

Switched on by the environment variable ``CONVNET_CUDNN=1`` (docs/CUDA.md, "cuDNN
convolutions and CUDA graphs"), until a GPU run has proved it against the im2col
kernels, which stay the fallback and the reference (:mod:`convnet.kernels.cuda.conv`).
Then the conv override runs each input's forward convolution, data gradient and
filter gradient as one cuDNN graph each, on CuPy arrays and on the calling logical
device's stream, and keeps nothing from the forward pass (cuDNN needs no columns).

The layers' geometry maps onto cuDNN's as follows: cuda-convnet2's ``padding`` is the
top/left padding, and the bottom/right one is whatever makes ``modulesX`` outputs
(the ceiling rule may want more, or fewer, than the top/left); ``groups`` is the
image's channels over the filter's.  A layer whose bottom/right padding would be
negative (its last windows stop short of the image's edge) keeps the im2col kernels.

The engines cuDNN may pick are filtered as PyTorch filters them: never a
nondeterministic one (the parallel and sequential walks must stay bitwise equal), and
under ``--precision fp32`` none that runs float32 on TF32 tensor cores
(:func:`convnet.kernels.cuda.precision.tf32_enabled`).  Built graphs are cached per
device, geometry and dtype, handles per stream.

Everything CuPy- or cuDNN-specific goes through one seam, :class:`Frontend` (the
``cudnn`` module, how an array's device pointer is read, which stream is current), so
that the tests run this module on numpy against a stand-in (tests/cuda/test_cudnn_conv.py).
"""

from __future__ import annotations

import contextlib
import os
import threading

import numpy as np

from .kernel_set import contiguous, current
from .precision import tf32_enabled
from .swappable import Swappable

ENV = "CONVNET_CUDNN"
#: Most workspace bytes one convolution may take (``CONVNET_CUDNN_WORKSPACE_MB``).
WORKSPACE_LIMIT = int(os.environ.get("CONVNET_CUDNN_WORKSPACE_MB", "256")) << 20


def requested() -> bool:
    """Whether ``CONVNET_CUDNN=1`` asks for cuDNN convolutions."""
    return os.environ.get(ENV, "").strip() == "1"


class CudnnCache:
    """What a cuDNN forward pass keeps for the backward pass: nothing (the marker tells
    the backward pass which kernels ran)."""

    __slots__ = ()


class Frontend:
    """The cuDNN frontend module and the CuPy facts the calls need (see the module
    docstring): production's reads them from CuPy."""

    def __init__(self, module=None):
        if module is None:
            import cudnn as module
        self.cudnn = module

    def pointer(self, array) -> int:
        return int(array.data.ptr)

    def stream(self) -> tuple[int, int]:
        """(GPU, stream pointer) of the calling thread."""
        import cupy

        return int(cupy.cuda.Device().id), int(cupy.cuda.get_current_stream().ptr)


_frontend: Swappable[Frontend] = Swappable(Frontend)
_lock = threading.Lock()
_graphs: dict = {}
_handles: dict = {}


def frontend() -> Frontend:
    return _frontend.get()


@contextlib.contextmanager
def using_frontend(stand_in: Frontend):
    """Run on ``stand_in`` inside the block, with fresh caches (the tests' seam)."""
    with _lock:
        saved = dict(_graphs), dict(_handles)
        _graphs.clear()
        _handles.clear()
    try:
        with _frontend.swapped(stand_in):
            yield stand_in
    finally:
        with _lock:
            for cache, kept in zip((_graphs, _handles), saved):
                cache.clear()
                cache.update(kept)


def _data_type(fe: Frontend, dtype):
    names = {"float32": "FLOAT", "float16": "HALF", "bfloat16": "BFLOAT16"}
    name = names.get(np.dtype(dtype).name)
    return None if name is None else getattr(fe.cudnn.data_type, name)


def _strides(dims) -> list[int]:
    out, step = [], 1
    for d in reversed(dims):
        out.append(step)
        step *= d
    return out[::-1]


def post_padding(img: int, fs: int, pad: int, stride: int, modules: int) -> int:
    """The bottom/right padding that gives ``modules`` outputs (negative: the last
    window stops short of the edge, which cuDNN cannot express)."""
    return (modules - 1) * stride + fs - img - pad


def supports(dtype, *, filter_sizes, paddings, strides, img_sizes, modules, **_) -> bool:
    """Whether this module runs a conv layer of this geometry and dtype."""
    return _data_type_name(dtype) and all(
        post_padding(img, fs, pad, s, modules) >= 0
        for img, fs, pad, s in zip(img_sizes, filter_sizes, paddings, strides))


def _data_type_name(dtype) -> bool:
    return np.dtype(dtype).name in ("float32", "float16", "bfloat16")


def _handle(fe: Frontend):
    device, stream = fe.stream()
    key = (device, stream)
    with _lock:
        handle = _handles.get(key)
        if handle is None:
            handle = fe.cudnn.create_handle()
            fe.cudnn.set_stream(handle=handle, stream=stream)
            _handles[key] = handle
    return device, handle


def _graph(fe: Frontend, op: str, dims: dict, geometry: tuple, dtype):
    """The built graph of one convolution (cached): (graph, its tensors, workspace bytes)."""
    device, handle = _handle(fe)
    tf32 = tf32_enabled()
    key = (device, op, tuple(map(tuple, dims.values())), geometry, np.dtype(dtype).name, tf32)
    cached = _graphs.get(key)
    if cached is not None:
        return cached + (handle,)
    cudnn = fe.cudnn
    dt = _data_type(fe, dtype)
    graph = cudnn.pygraph(io_data_type=dt, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    pre, post, stride = geometry
    conv = dict(pre_padding=[pre, pre], post_padding=[post, post], stride=[stride, stride],
                dilation=[1, 1], compute_data_type=cudnn.data_type.FLOAT)
    inputs, (out_name, out_dims) = list(dims.items())[:2], list(dims.items())[2]
    tensors = {name: graph.tensor(name=name, dim=list(d), stride=_strides(d), data_type=dt)
               for name, d in inputs}
    a, b = (tensors[name] for name, _ in inputs)
    out = getattr(graph, op)(a, b, **conv)
    out.set_output(True).set_data_type(dt)
    if op != "conv_fprop":  # the gradients' shapes are not inferable from the inputs
        out.set_dim(list(out_dims)).set_stride(_strides(out_dims))
    tensors[out_name] = out
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    notes = [cudnn.numerical_note.NONDETERMINISTIC]
    if np.dtype(dtype).name == "float32" and not tf32:
        notes += [cudnn.numerical_note.TENSOR_CORE, cudnn.numerical_note.DOWN_CONVERT_INPUTS]
    graph.deselect_numeric_notes(notes)
    graph.deselect_workspace_greater_than(WORKSPACE_LIMIT)
    graph.check_support()
    graph.build_plans()
    built = (graph, tensors, int(graph.get_workspace_size()))
    with _lock:
        _graphs[key] = built
    return built + (handle,)


def _run(op: str, dims: dict, arrays: dict, geometry: tuple, dtype) -> None:
    """One convolution: ``arrays`` (by the names of ``dims``, its output last) on the
    calling thread's stream."""
    fe = frontend()
    graph, tensors, workspace, handle = _graph(fe, op, dims, geometry, dtype)
    space = current().xp.empty(max(workspace, 1), dtype=np.uint8)
    graph.execute({tensors[name]: fe.pointer(a) for name, a in arrays.items()},
                  fe.pointer(space), handle=handle)


def _image(x, channels: int, img: int):
    return contiguous(x).reshape(x.shape[0], channels, img, img)


def conv_forward(xs, ws, b, *, filter_sizes, paddings, strides, channels, groups, img_sizes,
                 modules, keep_cache=True):
    """:func:`convnet.kernels.conv.conv_forward` by cuDNN; its cache is a :class:`CudnnCache`."""
    xp = current().xp
    n, filters = xs[0].shape[0], ws[0].shape[0]
    y = None
    for i, (x, w) in enumerate(zip(xs, ws)):
        x = _image(x, channels[i], img_sizes[i])
        w = contiguous(w)
        part = xp.empty((n, filters, modules, modules), dtype=x.dtype)
        geometry = (paddings[i], post_padding(img_sizes[i], filter_sizes[i], paddings[i],
                                              strides[i], modules), strides[i])
        _run("conv_fprop", {"X": x.shape, "W": w.shape, "Y": part.shape},
             {"X": x, "W": w, "Y": part}, geometry, x.dtype)
        y = part if y is None else y + part
    bias = b.reshape(1, filters, 1, 1) if b.ndim == 1 else b.reshape(1, filters, modules, modules)
    return y + bias, CudnnCache()


def conv_backward(gy, xs, ws, cache, need_dx, *, filter_sizes, paddings, strides, channels,
                  groups, img_sizes, modules, shared_biases=True, need_dw=True):
    """:func:`convnet.kernels.conv.conv_backward` by cuDNN: ``(dxs, dws, db)``; without
    ``need_dw`` (a frozen layer) the weight gradients are not computed (None)."""
    xp = current().xp
    gy = contiguous(gy)
    db = gy.sum(axis=(0, 2, 3)) if shared_biases else gy.sum(axis=0)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        image = _image(x, channels[i], img_sizes[i])
        w = contiguous(w)
        geometry = (paddings[i], post_padding(img_sizes[i], filter_sizes[i], paddings[i],
                                              strides[i], modules), strides[i])
        if need_dw:
            dw = xp.empty(w.shape, dtype=w.dtype)
            _run("conv_wgrad", {"X": image.shape, "DY": gy.shape, "DW": w.shape},
                 {"X": image, "DY": gy, "DW": dw}, geometry, gy.dtype)
            dws.append(dw)
        else:
            dws.append(None)
        if not need_dx[i]:
            dxs.append(None)
            continue
        dx = xp.empty(image.shape, dtype=gy.dtype)
        _run("conv_dgrad", {"DY": gy.shape, "W": w.shape, "DX": dx.shape},
             {"DY": gy, "W": w, "DX": dx}, geometry, gy.dtype)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db


__all__ = ["ENV", "CudnnCache", "Frontend", "conv_backward", "conv_forward", "post_padding",
           "requested", "supports", "using_frontend"]

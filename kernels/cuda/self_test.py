"""Each fused CUDA kernel family against the generic kernels, on the GPU that will run it.

The kernel sources are right (the host emulation agrees with numpy bit for bit), but
the machine code a GPU runs comes from the NVRTC of that machine, and NVRTC 13.0 to
13.2 miscompiled the pooling backward kernel (wrong gradients for every overlapping
max pool, reads before an array: kernels/cuda/sources/pool.py).  No test on a machine
without that compiler and GPU can see such a bug, so :func:`run` checks every family
where it runs: one tiny case per family that exercises its edges (overlapping,
overhanging and empty pooling windows, negative starts, grouped, strided, padded and
two-input convolutions, locally-connected layers, the three normalisations, logreg with
ties, the dropout uniforms, every neuron forward, in place and backward, batch
normalisation's statistics, forward and input gradient, the momentum update ungated and
gated by a true and a false device flag, stored images made float in both layouts),
compared with
the generic kernels (:mod:`convnet.kernels`) on the same arrays of the same device.

:func:`convnet.kernels.cuda.install` runs it once per process, on the GPU of the first
CUDA device, before registering the overrides: a family that disagrees stays on the
generic kernels (slower, never wrong), and one warning names its kernel, the first
mismatch, the GPU and the NVRTC and driver versions.  The cases are a few thousand
elements: after CuPy has compiled the kernels (its disk cache keeps them across runs)
the whole test takes tens of milliseconds.  ``python -m convnet.kernels.cuda.environment``
reports its result.

The comparison is written against :func:`convnet.kernels.cuda.kernel_set.current`'s
array module, so the test suite runs it on the host emulation of the kernels, with a
deliberately broken kernel to see it fail.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import batch_norm as kbn
from .. import conv as kconv
from .. import images as kimages
from .. import nn as knn
from .. import norm as knorm
from .. import pool as kpool
from .. import random as krandom
from .. import update as kupdate
from ..neurons import NEURONS
from . import batch_norm as cbn
from . import conv as cconv
from . import dropout as cdropout
from . import images as cimages
from . import neurons as cneurons
from . import nn as cnn
from . import norm as cnorm
from . import pool as cpool
from . import update as cupdate
from .kernel_set import current

#: How far a float result may be from the generic kernel's: the fused kernels add in the
#: generic order, but cuBLAS and the device math library may round differently.
RTOL, ATOL = 1e-3, 1e-4
#: Arguments of the neurons that take some (the rest take none).
NEURON_ARGS = {"log": (1.5,), "tanh": (1.7, -0.6), "brelu": (1.2,), "linear": (0.5, 0.25),
               "drelu": (0.8,), "abstanh": (1.3, -0.7)}


@dataclass(frozen=True)
class FamilyResult:
    """One family's verdict: ``kernel`` and ``detail`` say where it first disagreed."""

    family: str  # the module of convnet.kernels.cuda: conv, pool, norm, nn, dropout, ...
    ok: bool
    kernel: str = ""  # the CUDA kernel (spec name) that disagreed
    detail: str = ""  # the case and the first element that differs


@dataclass(frozen=True)
class SelfTest:
    results: tuple[FamilyResult, ...]
    seconds: float

    @property
    def failed(self) -> tuple[FamilyResult, ...]:
        return tuple(r for r in self.results if not r.ok)

    def text(self) -> str:
        """One line: 'self-test: 7 kernel families agree with the generic kernels (0.03 s)'."""
        if not self.failed:
            return (f"self-test: {len(self.results)} kernel families agree with the generic "
                    f"kernels ({self.seconds:.2f} s)")
        return (f"self-test: FAILED for {', '.join(r.family for r in self.failed)} "
                f"(the generic kernels run instead): "
                + "; ".join(f"{r.kernel}: {r.detail}" for r in self.failed)
                + f" ({self.seconds:.2f} s)")


class _Mismatch(Exception):
    def __init__(self, kernel: str, detail: str):
        super().__init__(detail)
        self.kernel, self.detail = kernel, detail


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _compare(kernel: str, case: str, got, want, exact: bool = False) -> None:
    got, want = _host(got), _host(want)
    if got.shape != want.shape:
        raise _Mismatch(kernel, f"{case}: shape {got.shape} where the generic kernel gives "
                                f"{want.shape}")
    if exact:
        bad = got != want
    else:
        scale = max(1.0, float(np.abs(want).max(initial=0.0)))
        bad = ~np.isclose(got, want, rtol=RTOL, atol=ATOL * scale)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise _Mismatch(kernel, f"{case}: [{','.join(map(str, at))}] is {got[at]:.6g} where "
                                f"the generic kernel gives {want[at]:.6g} ({int(bad.sum())} of "
                                f"{bad.size} differ)")


# ------------------------------------------------------------------------ cases

def _conv(xp, rng):
    def arrays(n, c, s, f, fs, pad, stride, groups, local):
        m = kconv.out_size(s, fs, pad, stride)
        w = (m * m, f, c // groups, fs, fs) if local else (f, c // groups, fs, fs)
        return (xp.asarray(rng.standard_normal((n, c, s, s)), np.float32),
                xp.asarray(rng.standard_normal(w), np.float32), m)

    for local in (False, True):
        # two inputs: grouped, strided, padded with an overhanging last window; and 1x1
        x0, w0, m = arrays(2, 4, 7, 4, 3, 1, 2, 2, local)
        x1, w1, _ = arrays(2, 2, 4, 4, 1, 0, 1, 1, local)
        b = xp.asarray(rng.standard_normal((4, m, m) if local else (4,)), np.float32)
        geom = dict(filter_sizes=[3, 1], paddings=[1, 0], strides=[2, 1], channels=[4, 2],
                    groups=[2, 1], img_sizes=[7, 4], modules=m)
        kind = "local" if local else "conv"
        fused_fwd, fused_bwd = ((cconv.local_forward, cconv.local_backward) if local else
                                (cconv.conv_forward, cconv.conv_backward))
        generic_fwd = (kconv.local_forward if local else kconv.conv_forward).generic
        generic_bwd = (kconv.local_backward if local else kconv.conv_backward).generic
        y1, c1 = fused_fwd([x0, x1], [w0, w1], b, **geom)
        y0, c0 = generic_fwd([x0, x1], [w0, w1], b, **geom)
        _compare(f"cvn_{kind}_im2col", f"{kind} forward", y1, y0)
        gy = xp.asarray(rng.standard_normal(tuple(y0.shape)), np.float32)
        r1 = fused_bwd(gy, [x0, x1], [w0, w1], c1, [True, True], **geom)
        r0 = generic_bwd(gy, [x0, x1], [w0, w1], c0, [True, True], **geom)
        for i in range(2):
            _compare(f"cvn_{kind}_col2im", f"{kind} backward, input {i}", r1[0][i], r0[0][i])
            _compare(f"cvn_{kind}_im2col", f"{kind} weight gradient {i}", r1[1][i], r0[1][i])
        _compare(f"cvn_{kind}_bias_out", f"{kind} bias gradient", r1[2], r0[2])


#: (image side, window, stride, start, outputs or None for the ceiling rule):
#: overlapping with an overhang, negative starts, and an empty last window
POOLS = ((8, 3, 2, 0, None), (7, 3, 2, -1, None), (6, 4, 3, -2, None), (8, 3, 2, 0, 5))


def _pool(xp, rng):
    for s, size, stride, start, outs in POOLS:
        x = rng.standard_normal((2, 3, s, s)).astype(np.float32)
        x[0, 0, :2, :2] = 0.5  # a tie inside a window
        x = xp.asarray(x)
        o = outs or kpool.out_size(s, size, stride, start)
        for kind in ("max", "avg", "maxabs"):
            kw = dict(pool=kind, size=size, stride=stride, start=start, outputs=o)
            case = f"{kind} pooling, {s}x{s} image, size {size} stride {stride} start {start}"
            y1, c1 = cpool.pool_forward(x, **kw)
            y0, c0 = kpool.pool_forward.generic(x, **kw)
            _compare(f"cvn_pool_{kind}_fwd", f"{case}, forward", y1, y0)
            if kind == "maxabs":
                _compare("cvn_pool_maxabs_fwd", f"{case}, offsets", c1, c0.astype(np.int32),
                         exact=True)
            gy = xp.asarray(rng.standard_normal((2, 3, o, o)), np.float32)
            _compare("cvn_pool_bwd", f"{case}, backward",
                     cpool.pool_backward(gy, x, y1, c1, **kw),
                     kpool.pool_backward.generic(gy, x, y0, c0, **kw))


def _norm(xp, rng):
    x = xp.asarray(rng.standard_normal((2, 6, 5, 5)), np.float32)
    gy = xp.asarray(rng.standard_normal((2, 6, 5, 5)), np.float32)
    for kind, size, pow_, forward, backward in (
            ("cmrnorm", 5, 0.75, "cvn_cmr_fwd", "cvn_cmr_bwd"),
            ("rnorm", 3, 0.75, "cvn_rnorm_fwd", "cvn_rnorm_bwd"),
            ("cnorm", 3, 0.6, "cvn_cnorm_mean_diff/cvn_rnorm_fwd", "cvn_rnorm_bwd/cvn_cnorm_bwd")):
        kw = dict(kind=kind, size=size, scale=0.8, pow=pow_, min_div=1.5)
        y1, c1 = cnorm.response_norm_forward(x, **kw)
        y0, c0 = knorm.response_norm_forward.generic(x, **kw)
        _compare(forward, f"{kind} forward", y1, y0)
        _compare(backward, f"{kind} backward", cnorm.response_norm_backward(gy, x, y1, c1, **kw),
                 knorm.response_norm_backward.generic(gy, x, y0, c0, **kw))


def _nn(xp, rng):
    probs = rng.random((9, 7)).astype(np.float32)
    labels = rng.integers(0, 7, (9, 1)).astype(np.float32)
    probs[1] = 0.25  # ties
    probs, labels = xp.asarray(probs), xp.asarray(labels)
    for topk in (1, 3):
        for i, (a, b) in enumerate(zip(cnn.logreg_cost(labels, probs, topk),
                                       knn.logreg_cost.generic(labels, probs, topk))):
            _compare("cvn_logreg_cost", f"logreg cost, top-{topk}, output {i}", a, b)
    _compare("cvn_logreg_grad", "logreg gradient", cnn.logreg_grad(labels, probs, 0.7),
             knn.logreg_grad.generic(labels, probs, 0.7))


def _dropout(xp, rng):
    key = krandom.stream_key(3, 4, "self-test")
    x = xp.zeros((3, 5, 7), np.float32)
    _compare("cvn_uniform", "dropout uniforms (bitwise)", cdropout.uniform_like(x, key, 2 ** 40),
             krandom.uniform_like.generic(x, key, 2 ** 40), exact=True)


def _neurons(xp, rng):
    for name, fn in sorted(NEURONS.items()):
        args = NEURON_ARGS.get(name, ())
        x = rng.standard_normal((2, 3, 4)).astype(np.float32)
        x[0, 0, 0] = 0
        if name in ("sqrt", "log"):
            x = np.abs(x) + 0.1
        x = xp.asarray(x)
        want = fn.forward(xp, x.copy(), args, None)
        _compare(f"cvn_neuron_fwd_{name}", f"{name} forward",
                 cneurons.neuron_forward(x, name, args), want)
        inplace = x.copy()
        _compare(f"cvn_neuron_fwd_inplace_{name}", f"{name} forward in place",
                 cneurons.neuron_forward(inplace, name, args, out=inplace), want)
        g = xp.asarray(rng.standard_normal((2, 3, 4)), np.float32)
        given = x if fn.uses_input else None
        _compare(f"cvn_neuron_bwd_{name}", f"{name} backward",
                 cneurons.neuron_backward(g, given, want, name, args),
                 fn.backward(xp, g, given, want, args))


def _batch_norm(xp, rng):
    """Moments, forward, gradient sums and input gradient of (cases, channels, pixels)
    arrays away from zero (the statistics in float64 on both sides)."""
    x = xp.asarray(rng.standard_normal((3, 4, 5)) * 0.5 + 2.0, np.float32)
    g = xp.asarray(rng.standard_normal((3, 4, 5)), np.float32)
    scale, shift = (xp.asarray(rng.standard_normal(4), np.float32) for _ in range(2))
    moments = cbn.batch_moments(x)
    _compare("cvn_bn_case_sums", "batch moments", moments, kbn.batch_moments.generic(x))
    mean, invstd = moments[:4], kbn.inverse_std(moments[4:] / 15, 1e-5)
    _compare("cvn_bn_affine", "batch norm forward",
             cbn.batch_norm_forward(x, mean, invstd, scale, shift),
             kbn.batch_norm_forward.generic(x, mean, invstd, scale, shift))
    sums = cbn.batch_norm_grad_sums(g, x, mean, invstd)
    _compare("cvn_bn_case_sums", "batch norm gradient sums", sums,
             kbn.batch_norm_grad_sums.generic(g, x, mean, invstd))
    _compare("cvn_bn_input_grad", "batch norm input gradient",
             cbn.batch_norm_backward(g, x, mean, invstd, scale, sums, 15),
             kbn.batch_norm_backward.generic(g, x, mean, invstd, scale, sums, 15))


def _update(xp, rng):
    """The weight update in place, on a shape no block size divides: ungated with weight
    decay, and gated by a device flag, true without decay and false (the weights and
    increments stay bitwise as they were)."""
    for ok, wc in ((None, 0.004), (True, 0.0), (False, 0.004)):
        w, inc, grad = (xp.asarray(rng.standard_normal((5, 3, 7)), np.float32)
                        for _ in range(3))
        flag = None if ok is None else xp.asarray(ok)
        fused, generic = (w.copy(), inc.copy()), (w.copy(), inc.copy())
        cupdate.momentum_update(*fused, grad, flag, 0.01, 0.9, wc, 37)
        kupdate.momentum_update.generic(*generic, grad, flag, 0.01, 0.9, wc, 37)
        case = "momentum update, " + ("ungated" if ok is None else f"flag {str(ok).lower()}")
        for name, got, want, before in zip(("weights", "increments"), fused, generic,
                                           (w, inc)):
            _compare("cvn_momentum_update", f"{case}, {name}", got, want)
            if ok is False:
                _compare("cvn_momentum_update", f"{case}, {name} left as they were", got,
                         before, exact=True)


def _images(xp, rng):
    mean = xp.asarray(rng.random((3, 7, 8)) * 100, np.float32)
    scalar = xp.asarray(np.array(110.5, np.float32))
    offsets = xp.asarray([[0, 0], [2, 3], [1, 1]], np.int32)
    flips = xp.asarray([False, True, True])
    shifts = xp.asarray(rng.standard_normal((3, 3)), np.float32)
    for dtype, last, kernel in ((np.uint8, True, "cvn_images_u8"),
                                (np.float32, False, "cvn_images_f32")):
        pixels = xp.asarray(rng.integers(0, 256, (3, 5, 5, 3) if last else (3, 3, 5, 5)),
                            dtype)
        layout = "channels-last" if last else "channels-first"
        for noise in (True, False):
            args = (pixels, mean if noise else scalar, offsets, flips,
                    shifts if noise else None, np.float32(0.75) if noise else None, last)
            what = "per-pixel mean and noise" if noise else "scalar mean"
            _compare(kernel, f"{np.dtype(dtype).name} {layout} images, {what} (bitwise)",
                     cimages.images_to_float(*args), kimages.images_to_float.generic(*args),
                     exact=True)


#: family (the module of convnet.kernels.cuda whose overrides it checks) -> its case
FAMILIES = {"conv": _conv, "pool": _pool, "norm": _norm, "nn": _nn, "dropout": _dropout,
            "neurons": _neurons, "batch_norm": _batch_norm, "update": _update,
            "images": _images}


def run() -> SelfTest:
    """Every family on the current kernel set (CuPy on the current GPU), each from its
    own seed; an error inside a family (a compile error, a CUDA error) fails it too."""
    xp = current().xp
    started = time.perf_counter()
    results = []
    for seed, (family, case) in enumerate(FAMILIES.items()):
        try:
            case(xp, np.random.default_rng(seed))
        except _Mismatch as mismatch:
            results.append(FamilyResult(family, False, mismatch.kernel, mismatch.detail))
        except Exception as error:  # noqa: BLE001 - a family that cannot run is not used
            results.append(FamilyResult(family, False, "(running the kernels)",
                                        f"{type(error).__name__}: "
                                        f"{' '.join(str(error).split())[:200]}"))
        else:
            results.append(FamilyResult(family, True))
    return SelfTest(tuple(results), time.perf_counter() - started)


__all__ = ["FAMILIES", "FamilyResult", "SelfTest", "run"]

"""Test support: run the CUDA kernel sources on the host, and compile-check them with nvcc.

:class:`EmulatedKernel` compiles one :class:`~convnet.kernels.cuda.sources.KernelSpec`
with the host C++ compiler into a loop over the flat output index ``i`` (what
``cupy.ElementwiseKernel`` runs with one thread per element) and calls it on
numpy arrays through ctypes.  Because every element of an element-wise
kernel is independent, the sequential loop computes what the GPU computes,
up to the accuracy of the device math library (``exp``, ``tanh``, ...); index
arithmetic, window bounds, operation order and integer wrap-around are the
same.  :func:`emulated_kernel_set` bundles it with numpy as a
:class:`~convnet.kernels.cuda.kernel_set.KernelSet`, so the override functions of
:mod:`convnet.kernels.cuda` run unchanged on machines without a GPU;
:func:`overrides_for_numpy` dispatches the generic kernels to them for numpy arrays,
so the layer library runs the CUDA code path on the host.

:func:`nvcc_source` writes the same body the way CuPy wraps it (a
``CUPY_FOR`` grid-stride loop, non-raw arguments as references to element
``i``, raw arguments as flat-indexed arrays), for a compile check of the
device code with ``nvcc`` when one is installed; :func:`cupy_generated_source`
asks CuPy's own code generator for that text (``tests/cuda/test_nvrtc.py``
compiles it with NVRTC as CuPy does).

Nothing here needs a GPU, and only :func:`cupy_generated_source` needs CuPy;
:func:`compiler_available` says whether a host compiler is present (the tests
skip when it is not).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import os
import shutil
import subprocess
import tempfile
import threading

import numpy as np

from convnet import kernels
from convnet.kernels.cuda import OVERRIDES
from convnet.kernels.cuda.kernel_set import KernelSet, using
from convnet.kernels.cuda.sources import KernelSpec, parse_params

_C_TYPES = {
    "float32": "float", "float64": "double", "int32": "int", "int64": "long long",
    "uint64": "unsigned long long", "uint32": "unsigned int", "uint8": "unsigned char",
    "int8": "signed char", "bool": "bool",
}
_NP_TYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32,
             "int64": np.int64, "uint64": np.uint64, "uint32": np.uint32, "uint8": np.uint8,
             "int8": np.int8, "bool": np.bool_}

_HOST_PRELUDE = r"""
#include <cmath>
#include <cstddef>
#include <algorithm>
using namespace std;
#define __device__
#define __forceinline__ inline
template <typename V> struct CvnRaw {
  V* p;
  V& operator[](ptrdiff_t k) const { return p[k]; }
};
"""


def host_compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or \
        shutil.which("clang++")


def compiler_available() -> bool:
    return host_compiler() is not None


_FLAGS = ("-O1", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math")
_cache_lock = threading.Lock()
_cache_folder: str | None = None


def _cache_dir() -> str:
    """Where compiled kernels are kept between runs (keyed by a hash of their source)."""
    global _cache_folder
    with _cache_lock:
        if _cache_folder is None:
            wanted = os.environ.get("CONVNET_EMULATE_CACHE") or os.path.join(
                os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                "convnet-cuda-emulate")
            try:
                os.makedirs(wanted, exist_ok=True)
                probe = tempfile.NamedTemporaryFile(dir=wanted, delete=True)
                probe.close()
                _cache_folder = wanted
            except OSError:
                _cache_folder = tempfile.mkdtemp(prefix="cvn-emulate-")
        return _cache_folder


def _type_of(t: str, tname: str) -> str:
    if len(t) == 1:  # the type placeholder
        return tname
    try:
        return _C_TYPES[t]
    except KeyError:
        raise ValueError(f"type {t!r} is not supported by the emulator") from None


class EmulatedKernel:
    """A KernelSpec compiled for the host; called like ``cupy.ElementwiseKernel``.

    Arguments are the inputs then the outputs (outputs must be given, C-contiguous);
    non-raw array inputs must have the outputs' shape (no broadcasting).
    """

    def __init__(self, spec: KernelSpec):
        self.spec = spec
        self.params = parse_params(spec.in_params)
        self.outs = parse_params(spec.out_params)
        self._libs: dict[tuple, ctypes.CDLL] = {}

    def _library(self, tname: str) -> ctypes.CDLL:
        lib = self._libs.get(tname)
        if lib is not None:
            return lib
        compiler = host_compiler()
        source = self._source(tname)
        digest = hashlib.sha1("\0".join([compiler, *_FLAGS, source]).encode()).hexdigest()[:20]
        folder = _cache_dir()
        so = os.path.join(folder, f"{self.spec.name}-{digest}.so")
        if not os.path.exists(so):
            with tempfile.TemporaryDirectory(dir=folder) as tmp:
                src = os.path.join(tmp, "kernel.cpp")
                with open(src, "w") as f:
                    f.write(source)
                out = os.path.join(tmp, "kernel.so")
                proc = subprocess.run([compiler, *_FLAGS, "-o", out, src], capture_output=True,
                                      text=True)
                if proc.returncode != 0:
                    raise RuntimeError(f"kernel {self.spec.name} does not compile on the host:\n"
                                       f"{proc.stderr}")
                os.replace(out, so)  # atomic: concurrent compilers agree on the result
        lib = ctypes.CDLL(so)
        lib.cvn_run.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_longlong]
        lib.cvn_run.restype = None
        self._libs[tname] = lib
        return lib

    def _source(self, tname: str) -> str:
        params = self.params
        outs = self.outs
        decls, loop_decls = [], []
        for k, (raw, t, name) in enumerate(params + outs):
            ctype = _type_of(t, "T")
            is_out = k >= len(params)
            const = "" if is_out else "const "
            if raw:
                decls.append(f"  const CvnRaw<{const}{ctype}> {name} = "
                             f"{{({const}{ctype}*)args[{k}]}};")
            elif is_out or name in self.spec.arrays:
                decls.append(f"  {const}{ctype}* _raw_{name} = ({const}{ctype}*)args[{k}];")
                loop_decls.append(f"    {const}{ctype} &{name} = _raw_{name}[i];")
            else:
                decls.append(f"  const {ctype} {name} = *(const {ctype}*)args[{k}];")
        return "\n".join([
            _HOST_PRELUDE, f"typedef {tname} T;", self.spec.preamble,
            'extern "C" void cvn_run(void** args, long long cvn_n) {', *decls,
            "  for (ptrdiff_t i = 0; i < cvn_n; ++i) {", *loop_decls, "    {", self.spec.body,
            "    }", "  }", "}"])

    def __call__(self, *args, size: int | None = None):
        n_in, n_out = len(self.params), len(self.outs)
        if len(args) != n_in + n_out:
            raise TypeError(f"{self.spec.name}: the emulator needs the {n_in} inputs and "
                            f"{n_out} outputs, got {len(args)} arguments")
        params = self.params + self.outs
        # the placeholder type: from the first array bound to a one-letter type
        tdtype = None
        for (raw, t, name), a in zip(params, args):
            if len(t) == 1 and isinstance(a, np.ndarray):
                tdtype = a.dtype
                break
        tname = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}.get(
            np.dtype(tdtype) if tdtype is not None else np.dtype(np.float32))
        if tname is None:
            raise TypeError(f"{self.spec.name}: unsupported element type {tdtype}")
        outs = args[n_in:]
        out_shape = None
        for (raw, t, name), a in zip(self.outs, outs):
            if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
                raise TypeError(f"{self.spec.name}: output {name!r} must be a C-contiguous "
                                f"numpy array")
            if not raw:
                if out_shape is not None and a.shape != out_shape:
                    raise ValueError(f"{self.spec.name}: outputs differ in shape")
                out_shape = a.shape
        if size is None:
            if out_shape is None:
                raise ValueError(f"{self.spec.name}: loop size is undecided (give size=)")
            size = int(np.prod(out_shape, dtype=np.int64))
        keep = []
        pointers = (ctypes.c_void_p * len(args))()
        for k, ((raw, t, name), a) in enumerate(zip(params, args)):
            is_out = k >= n_in
            dtype = tdtype if len(t) == 1 else np.dtype(_NP_TYPES[t])
            if raw or is_out or name in self.spec.arrays:
                if not isinstance(a, np.ndarray):
                    raise TypeError(f"{self.spec.name}: {name!r} must be an array")
                if a.dtype != dtype:
                    raise TypeError(f"{self.spec.name}: {name!r} is {a.dtype}, expected {dtype}")
                if not is_out:
                    a = np.ascontiguousarray(a)
                    if not raw and a.shape != out_shape:
                        raise ValueError(f"{self.spec.name}: input {name!r} has shape {a.shape},"
                                         f" the outputs {out_shape} (no broadcasting here)")
            else:
                if isinstance(a, np.ndarray) and a.ndim > 0:
                    raise TypeError(f"{self.spec.name}: {name!r} is a scalar parameter")
                a = np.array(a, dtype=dtype).reshape(1)  # a scalar, by pointer
            keep.append(a)
            pointers[k] = a.ctypes.data
        lib = self._library(tname)
        lib.cvn_run(pointers, ctypes.c_longlong(size))
        return outs[0] if n_out == 1 else tuple(outs)


def emulated_kernel_set() -> KernelSet:
    """numpy plus host-compiled kernels, for :func:`convnet.kernels.cuda.kernel_set.using`."""
    return KernelSet("emulated", np, EmulatedKernel)


def override(name):
    """The CUDA override function of the generic kernel ``name``."""
    return getattr(importlib.import_module(f"convnet.kernels.cuda.{OVERRIDES[name]}"), name)


@contextlib.contextmanager
def overrides_for_numpy():
    """Dispatch the generic kernels to the CUDA overrides for numpy arrays (emulated)."""
    added = []
    with using(emulated_kernel_set()):
        try:
            for name in OVERRIDES:
                key = (name, "numpy")
                assert key not in kernels.registered_kernels()
                kernels.register_kernel(name, "numpy")(override(name))
                added.append(key)
            yield
        finally:
            for key in added:
                kernels._OVERRIDES.pop(key, None)


# ------------------------------------------------------------------- nvcc check

_NVCC_SHIM = r"""
#include <cstddef>
template <typename V, int ndim, bool c_contiguous = false, bool use_32bit = false>
class CArray {
 public:
  V* data_;
  __device__ V& operator[](ptrdiff_t k) const { return data_[k]; }
};
template <int ndim, bool use_32bit = false>
class CIndexer {
 public:
  ptrdiff_t size_;
  ptrdiff_t i_;
  __device__ ptrdiff_t size() const { return size_; }
  __device__ void set(ptrdiff_t i) { i_ = i; }
  __device__ ptrdiff_t get() const { return i_; }
};
#define CUPY_FOR(i, n) \
    for (ptrdiff_t i = static_cast<ptrdiff_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
         i < (n); i += static_cast<ptrdiff_t>(blockDim.x) * gridDim.x)
"""


def _kernel_text(spec: KernelSpec, tname: str) -> str:
    params = parse_params(spec.in_params)
    outs = parse_params(spec.out_params)
    sig, loop = [], []
    for k, (raw, t, name) in enumerate(params + outs):
        ctype = "T" if len(t) == 1 else _C_TYPES[t]
        is_out = k >= len(params)
        const = "" if is_out else "const "
        if raw or is_out or name in spec.arrays:
            cname = name if raw else f"_raw_{name}"
            sig.append(f"{const}CArray<{ctype}, 1, true, false> {cname}")
            if not raw:
                loop.append(f"    {const}{ctype} &{name} = _raw_{name}[_ind.get()];")
        else:
            sig.append(f"{ctype} {name}")
    sig.append("CIndexer<1, false> _ind")
    return "\n".join([
        f"typedef {tname} T;", spec.preamble,
        f'extern "C" __global__ void {spec.name}({", ".join(sig)}) {{',
        "  #pragma unroll 1",
        "  CUPY_FOR(i, _ind.size()) {", "    _ind.set(i);", *loop, spec.body, "  }", "}"])


def nvcc_source(specs, tname: str = "float", cupy_include: str | None = None) -> str:
    """CUDA source of kernel specs, each wrapped as CuPy wraps an ElementwiseKernel body
    (a grid-stride ``CUPY_FOR`` loop, non-raw arguments bound to element ``i``), each in
    its own namespace so that one translation unit holds them all.

    With ``cupy_include`` (CuPy's ``_core/include`` folder) the real
    ``cupy/carray.cuh`` is used; otherwise a minimal stand-in for ``CArray``,
    ``CIndexer`` and ``CUPY_FOR``.
    """
    if isinstance(specs, KernelSpec):
        specs = [specs]
    head = "#include <cassert>\n#include <cupy/carray.cuh>\n" if cupy_include else _NVCC_SHIM
    parts = [head]
    for spec in specs:
        parts += [f"namespace cvn_ns_{spec.name} {{", _kernel_text(spec, tname), "}"]
    return "\n".join(parts)


def nvcc_check(specs, tname: str = "float", nvcc: str | None = None,
               cupy_include: str | None = None, arch: str = "sm_80") -> str:
    """Compile kernel specs for the device with nvcc; returns '' or the compiler's errors."""
    nvcc = nvcc or shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not installed")
    with tempfile.TemporaryDirectory(prefix="cvn-nvcc-") as tmp:
        src = os.path.join(tmp, "kernels.cu")
        with open(src, "w") as f:
            f.write(nvcc_source(specs, tname, cupy_include))
        cmd = [nvcc, "-c", f"-arch={arch}", "--fmad=false", "-std=c++17", "-o",
               os.path.join(tmp, "k.o"), src]
        if cupy_include:
            cmd[1:1] = ["-I", cupy_include]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        return "" if proc.returncode == 0 else (proc.stderr or proc.stdout)


def cupy_generated_source(spec: KernelSpec, dtype, index_32_bits: bool = True) -> str:
    """The CUDA source CuPy itself generates for ``spec`` with element type ``dtype``
    (contiguous 1-D arrays), without a GPU.

    ``index_32_bits`` is what CuPy picks for arrays of fewer than 2^31 elements
    (``CArray``/``CIndexer`` with ``int`` indices); False gives the 64-bit variant.
    Uses CuPy's private code generator (``cupy._core._kernel``, CuPy 13-14);
    raises AttributeError or TypeError when an installed CuPy differs.
    """
    import cupy
    from cupy._core import _carray, _kernel, _scalar

    kern = cupy.ElementwiseKernel(spec.in_params, spec.out_params, spec.body, name=spec.name,
                                  preamble=spec.preamble, options=tuple(spec.options))
    ins = [n for _, _, n in parse_params(spec.in_params)]
    ndarray_kind, indexer_kind, scalar_kind = 1, 2, 3  # cupy._core._kernel._ArgKind
    infos = []
    for raw, t, name in parse_params(spec.in_params) + parse_params(spec.out_params):
        dt = np.dtype(dtype) if len(t) == 1 else np.dtype(_NP_TYPES[t])
        if raw or name not in ins or name in spec.arrays:
            infos.append(_kernel._ArgInfo(ndarray_kind, cupy.ndarray, dt, 1, True,
                                          index_32_bits))
        else:
            infos.append(_kernel._ArgInfo(scalar_kind, _scalar.CScalar, dt, 0, True, True))
    infos.append(_kernel._ArgInfo(indexer_kind, _carray.Indexer, None, 1, True, index_32_bits))
    type_map = _kernel._TypeMap((("T", np.dtype(dtype)),))
    return _kernel._get_elementwise_kernel_code(tuple(infos), type_map, kern.params, spec.body,
                                                spec.name, spec.preamble)


def nvcc_check_cupy_generated(specs, dtype, cupy_include: str, nvcc: str | None = None,
                              arch: str = "sm_80") -> str:
    """nvcc-compile CuPy's own generated source of ``specs``; '' or the errors."""
    nvcc = nvcc or shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not installed")
    parts = ["#include <cassert>", "#include <cupy/carray.cuh>"]
    for spec in specs:
        parts += [f"namespace cvn_ns_{spec.name} {{", cupy_generated_source(spec, dtype), "}"]
    with tempfile.TemporaryDirectory(prefix="cvn-nvcc-") as tmp:
        src = os.path.join(tmp, "generated.cu")
        with open(src, "w") as f:
            f.write("\n".join(parts))
        proc = subprocess.run([nvcc, "-c", f"-arch={arch}", "--fmad=false", "-std=c++17", "-I",
                               cupy_include, "-o", os.path.join(tmp, "k.o"), src],
                              capture_output=True, text=True)
        return "" if proc.returncode == 0 else (proc.stderr or proc.stdout)

"""Every CUDA kernel of the project compiled the way CuPy compiles it on a GPU, without one.

On a GPU, ``cupy.ElementwiseKernel`` compiles a kernel on first use: CuPy's
code generator wraps the body (``cupy._core._kernel``), ``compile_with_cache``
prepends CuPy's headers and assembles the options (the spec's own, such as
``--fmad=false``, then ``--std=c++17`` and the include paths of CuPy's
bundled CCCL, of ``cupy/_core/include`` and of the CUDA headers), adds
``-ftz=true``, and NVRTC compiles for the device's architecture with
``--device-as-default-execution-space``.  Here that very path runs for sm_90
(H100/H200), with two seams so that no GPU is asked for: the memoised
per-device lookup of the architecture option is replaced by the function it
wraps (called with the explicit architecture), and the compile step is
spied on and stops CuPy once NVRTC has produced the cubin, before it would
load the module onto a device.  Results are not cached on disk
(``CUPY_CACHE_IN_MEMORY=1``), so every kernel really is compiled.

Variants: float32 and float64 with 32-bit indexing (what CuPy picks for
arrays of fewer than 2^31 elements) and float32 with 64-bit indexing.  Raw
arrays are declared 1-D; CuPy instantiates ``CArray`` with the array's ndim,
but a C-contiguous ``CArray`` indexes ``a[k]`` as ``data[k]`` for any ndim.

Needs CuPy and NVRTC with the CUDA headers, not a GPU or nvcc: the
``cuda-compile`` extra brings them (``make test`` installs it).  CuPy's
private functions used here are those of CuPy 14; a CuPy whose internals
differ fails these tests instead of skipping them, so that the check cannot
quietly stop running.
"""

from __future__ import annotations

import pytest

from convnet.kernels.cuda.sources import SPECS

from tests.support.cuda_emulation import cupy_generated_source

ARCH = "90"  # sm_90: H100 and H200
EXTRA_HINT = "pip install -e '.[cuda-compile]' brings CuPy, NVRTC and the CUDA headers"
VARIANTS = {"float32": ("float32", True), "float64": ("float64", True),
            "float32-index64": ("float32", False)}


def _what_is_missing() -> str:
    """'' when CuPy, NVRTC and the CUDA headers are all here, else what is not."""
    try:
        import cupy  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any failure means "no CuPy"
        return f"CuPy does not import ({type(error).__name__}: {error}); {EXTRA_HINT}"
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as error:  # noqa: BLE001 - libnvrtc missing or unloadable
        return f"NVRTC is not available ({type(error).__name__}: {error}); {EXTRA_HINT}"
    from cupy._core import core

    try:
        core.assemble_cupy_compiler_options(())
    except RuntimeError as error:  # CuPy's "Failed to find CUDA headers"
        return f"the CUDA headers are missing ({error}); {EXTRA_HINT}"
    return ""


_MISSING = _what_is_missing()
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=_MISSING)


class _Compiled(Exception):
    """Raised by the spy once NVRTC has returned: (binary, options, arch)."""


@pytest.fixture(scope="module")
def compile_like_cupy():
    """``compile(source, options) -> (binary, options, arch)`` through CuPy's
    ``compile_with_cache``, stopped before the module is loaded."""
    from cupy._core import core
    from cupy.cuda import compiler

    real_compile = compiler._compile_using_nvrtc_no_warning

    def spy(source, options=(), arch=None, *args, **kwargs):
        binary, _ = real_compile(source, options, arch, *args, **kwargs)
        raise _Compiled(binary, options, arch)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUPY_CACHE_IN_MEMORY", "1")
        patch.setattr(compiler, "_get_arch_for_options_for_nvrtc",
                      compiler._get_arch_for_options_for_nvrtc.__wrapped__)
        patch.setattr(compiler, "_compile_using_nvrtc_no_warning", spy)

        def compile_source(source: str, options: tuple):
            try:
                core.compile_with_cache(source, options, arch=ARCH)
            except _Compiled as done:
                return done.args
            raise AssertionError("CuPy returned a module without compiling through NVRTC")

        yield compile_source


def test_cupy_compiles_for_sm90_with_flush_to_zero(compile_like_cupy):
    """The options docs/CUDA.md relies on: no FMA contraction, and denormals flushed."""
    from cupy.cuda import compiler

    spec = SPECS["cvn_pool_max_fwd"]
    binary, options, arch = compile_like_cupy(cupy_generated_source(spec, "float32"),
                                              tuple(spec.options))
    assert arch == ARCH
    assert compiler._get_arch_for_options_for_nvrtc(ARCH) == (f"-arch=sm_{ARCH}", "cubin")
    assert "--fmad=false" in options and "-ftz=true" in options
    assert binary[:4] == b"\x7fELF"  # a cubin for sm_90, not PTX


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(SPECS))
def test_kernel_compiles_with_nvrtc(compile_like_cupy, name, variant):
    from cupy.cuda.compiler import CompileException

    spec = SPECS[name]
    dtype, index_32_bits = VARIANTS[variant]
    source = cupy_generated_source(spec, dtype, index_32_bits)
    try:
        binary, _, _ = compile_like_cupy(source, tuple(spec.options))
    except CompileException as error:
        pytest.fail(f"NVRTC rejects {name} ({variant}):\n{error}", pytrace=False)
    assert binary[:4] == b"\x7fELF"


def _ptx(spec) -> str:
    """The PTX NVRTC makes of ``spec`` (float32) with CuPy's headers and options, for
    sm_90: the stage before the machine code, where loop pragmas are still visible."""
    from cupy._core import core
    from cupy.cuda import compiler

    source = "#include <cupy/carray.cuh>\n" + cupy_generated_source(spec, "float32")
    options = core.assemble_cupy_compiler_options(tuple(spec.options))
    program = compiler._NVRTCProgram(source, "", (), (), name_expressions=None, method="ptx")
    ptx, _ = program.compile(options + (f"-arch=compute_{ARCH}",
                                        "--device-as-default-execution-space"))
    return ptx if isinstance(ptx, str) else ptx.decode()


def test_the_pooling_backward_loops_are_never_unrolled():
    """cvn_pool_bwd's window loops must not be unrolled: NVRTC 13.0-13.2 miscompile the
    unrolled max branch (kernels/cuda/sources/pool.py).  The PTX carries a "nounroll"
    pragma for each loop of the body, besides the one on CuPy's grid loop, which the
    body without its pragmas does not have."""
    import dataclasses

    spec = SPECS["cvn_pool_bwd"]
    assert spec.body.count("#pragma unroll 1") == 2
    bare = dataclasses.replace(spec, body=spec.body.replace("#pragma unroll 1", ""))
    guarded, unguarded = _ptx(spec).count('.pragma "nounroll"'), _ptx(bare).count(
        '.pragma "nounroll"')
    assert guarded >= unguarded + 2, (guarded, unguarded)

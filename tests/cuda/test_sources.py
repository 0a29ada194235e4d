"""The CUDA kernel sources as text: well-formed specs, and (with nvcc) device code that compiles.

nvcc compiles every kernel wrapped the way CuPy wraps an ElementwiseKernel
body, for float and double, against CuPy's own ``cupy/carray.cuh`` when
CuPy's headers can be found (``CONVNET_CUPY_INCLUDE`` or an installed CuPy),
else against a minimal stand-in.  This needs the CUDA compiler, not a GPU.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

from convnet.kernels.cuda import OVERRIDES
from convnet.kernels.cuda.sources import NEURON_EXPRS, SPECS, parse_params
from convnet.kernels.neurons import NEURONS

from tests.support import ROOT
from tests.support.cuda_emulation import nvcc_check, nvcc_check_cupy_generated, nvcc_source

PACKAGE = ROOT / "kernels" / "cuda"
KNOWN_TYPES = {"float32", "float64", "int32", "int64", "uint64", "uint32", "uint8", "int8", "bool"}


def test_parse_params():
    assert parse_params("raw T x, int32 n,T y") == [(True, "T", "x"), (False, "int32", "n"),
                                                   (False, "T", "y")]
    assert parse_params("") == []
    with pytest.raises(ValueError, match="unknown keyword"):
        parse_params("const T x")
    with pytest.raises(ValueError, match="bad kernel parameter"):
        parse_params("x")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_spec_is_well_formed(name):
    spec = SPECS[name]
    assert spec.name == name and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)
    params = parse_params(spec.in_params)
    outs = parse_params(spec.out_params)
    assert outs, "a kernel needs an output"
    names = [n for _, _, n in params + outs]
    assert len(set(names)) == len(names) and "i" not in names
    assert not any(n.startswith("_") for n in names)  # CuPy's own names start with _
    for raw, t, n in params + outs:
        assert len(t) == 1 or t in KNOWN_TYPES, (n, t)
    for raw, t, n in params:
        if not raw and n in spec.arrays:
            assert len(t) == 1
    assert set(spec.arrays) <= {n for raw, _, n in params if not raw}
    assert "NAN" not in spec.body and "INFINITY" not in spec.body
    assert "--fmad=false" in spec.options


def test_every_kernel_the_overrides_launch_exists():
    launched = set()
    for path in PACKAGE.glob("*.py"):
        launched |= set(re.findall(r'kernel\(\s*f?"([a-z0-9_{}]+)"\)', path.read_text()))
    fixed = {k for k in launched if "{" not in k}
    assert fixed and fixed <= set(SPECS), fixed - set(SPECS)
    for name in NEURONS:  # the f-string names of neurons.py
        for kind in ("fwd", "fwd_inplace", "bwd"):
            assert f"cvn_neuron_{kind}_{name}" in SPECS
    assert set(NEURON_EXPRS) == set(NEURONS)
    assert set(OVERRIDES.values()) == {"conv", "pool", "norm", "nn", "dropout", "neurons",
                                       "update", "batch_norm", "images"}


def _cupy_include() -> str | None:
    explicit = os.environ.get("CONVNET_CUPY_INCLUDE")
    if explicit:
        return explicit
    spec = importlib.util.find_spec("cupy")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "_core" / "include"
    return str(folder) if (folder / "cupy" / "carray.cuh").exists() else None


def test_nvcc_source_wraps_bodies_like_cupy():
    text = nvcc_source(SPECS["cvn_pool_bwd"], "float")
    assert 'extern "C" __global__ void cvn_pool_bwd(' in text
    assert "const CArray<T, 1, true, false> gy" in text  # raw: flat-indexed array
    assert "CArray<T, 1, true, false> _raw_dx" in text and "T &dx = _raw_dx[_ind.get()];" in text
    assert "int kind" in text and "CUPY_FOR(i, _ind.size())" in text


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA compiler) is not "
                                                         "installed")
@pytest.mark.parametrize("tname", ["float", "double"])
def test_every_kernel_compiles_for_the_gpu(tname):
    errors = nvcc_check(list(SPECS.values()), tname, cupy_include=_cupy_include())
    assert not errors, errors[:4000]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA compiler) is not "
                                                         "installed")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_code_cupy_generates_compiles(dtype):
    """CuPy's own ElementwiseKernel code generator (no GPU needed), then nvcc."""
    pytest.importorskip("cupy", reason="CuPy is not installed")
    include = _cupy_include()
    if include is None:
        pytest.skip("CuPy's headers were not found")
    try:
        errors = nvcc_check_cupy_generated(list(SPECS.values()), dtype, include)
    except (AttributeError, TypeError, ImportError) as error:
        pytest.skip(f"this CuPy's private code generator differs: {error}")
    assert not errors, errors[:4000]

"""Each layer type's memory facts: what one forward call leaves behind, per case,
and what its calls hold only while they run.

``rule(layer) -> LayerMemory``: whether the output is a new array (or a view of the
input or of the layer's state, which costs nothing more) and how many bytes per
case the layer keeps from its forward call for its backward call beyond its output
(im2col columns, a padded input, dropout masks, norm denominators), the inline
``neuron=`` included; and the *temporaries* of its calls: the arrays a forward or
backward call allocates and drops before it returns (Winograd's transformed tiles
and products, the output gradient in another order, the column gradient and the
padded input gradient it is scattered into, the inline neuron's gradient).  Only
temporaries that grow with the layer's size are counted; the blocks of about
:data:`~convnet.kernels.conv.geometry.CHUNK_BYTES` that kernels work through are a
few MiB per device and are not.  They describe the layer library (``convnet/layers``) and its
kernels as they are; the plan's memory estimate (:mod:`convnet.plan.memory`) adds them
up over a step, and tests/plan/test_memory_estimate.py compares every rule with the state
the layers really keep, so a change to what a kernel keeps shows up there.

All arrays are float32 except the masks (one byte per element).  The rules describe
the CPU kernels; :data:`BACKEND_KERNELS` gives the rules of the kernels a backend runs
(the CUDA conv and local kernels keep no columns by default, :func:`cuda_conv_memory`),
and :func:`in_precision` scales a rule for float arrays of another size under
``--precision bf16`` or ``fp16``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

# The kernel's own choice of column order, so that the rule cannot drift from it.
from convnet.kernels.conv import conv_layout
from convnet.kernels.conv.winograd import output_tile, tiles
from convnet.kernels.cuda import conv as cuda_conv, cudnn_conv
from convnet.kernels.neurons import NEURONS
from convnet.config.layer_types.weight_shapes import kernel_channels

FLOAT = 4
MASK = 1  # a bool array


@dataclass(frozen=True)
class LayerMemory:
    new_output: bool = True
    kept_per_case: int = 0  # bytes kept for backward beyond the output
    #: bytes per case a forward call holds while it runs (not its output nor kept state)
    forward_temp_per_case: int = 0
    #: bytes per case a backward call holds while it runs, beyond the gradients it returns
    backward_temp_per_case: int = 0
    #: per input: bytes per case more when that input's gradient is computed
    input_grad_temp_per_case: tuple[int, ...] = ()
    #: bytes kept for backward whatever the cases (per-channel statistics)
    kept_per_call: int = 0

    def backward_temp(self, input_grads) -> int:
        """Bytes per case of a backward call's temporaries, given which inputs'
        gradients it computes."""
        return self.backward_temp_per_case + sum(
            t for t, wanted in zip(self.input_grad_temp_per_case, input_grads) if wanted)


MemoryRule = Callable[..., LayerMemory]  # (layer) -> LayerMemory


def _with_neuron(layer, memory: LayerMemory, keeps_output: bool = False) -> LayerMemory:
    """An inline neuron keeps the pre-neuron output z when its backward needs z (the
    neuron uses its input) or the layer's does (``keeps_output``); else it runs in
    place on z when z is new, or makes a new output.  Its backward makes the gradient
    through it, a new array, and for the piecewise neurons a mask (``g * (y > 0)``):
    temporaries of the layer's backward call."""
    spec = layer.neuron
    if spec is None or spec.name == "ident":
        return memory
    kept = memory.kept_per_case
    if NEURONS[spec.name].uses_input or keeps_output:
        kept += FLOAT * layer.outputs
    return replace(memory, new_output=True, kept_per_case=kept,
                   backward_temp_per_case=(memory.backward_temp_per_case
                                           + (FLOAT + MASK) * layer.outputs))


def _input_elements(layer, i: int = 0) -> int:
    return int(math.prod(layer.input_shapes[i]))


def conv_kernel_layout(layer) -> str:
    """The layout the CPU conv kernel computes ``layer`` in (``winograd``, ``cases``,
    ``chwn`` or ``nchw``; :mod:`convnet.kernels.conv.choice`)."""
    a = layer.attrs
    return conv_layout(a["filters"], a["modulesX"], a["filterSize"], a["padding"], a["stride"],
                       kernel_channels(a), a["groups"])


def winograd_conv_layers(net) -> list[str]:
    """The conv layers of ``net`` that the CPU kernels compute by Winograd's algorithm."""
    return [ldef.name for ldef in net
            if ldef.type == "conv" and conv_kernel_layout(ldef) == "winograd"]


def conv_memory(layer) -> LayerMemory:
    """Conv (:mod:`convnet.kernels.conv`), by the layout the kernel picks for the layer:
    ``cases`` (large output maps) keeps nothing, the backward pass rebuilds the
    columns; ``winograd`` each input's transformed tiles (a^2 C T^2, with T^2 tiles
    of a x a for the layer's F(m, r)); ``chwn`` each input's zero-padded copy
    (C, T, T) with T = (modulesX - 1) * stride + filterSize; ``nchw`` each input's
    columns (C * fs^2, modulesX^2); and the dropout fork's mask, as for fc.  C is the
    channels the kernel reads: under ``randSparse`` the groups' gathered ones (the
    gather itself is redone in the backward pass, not kept).  Temporaries:
    :func:`_conv_temporaries`."""
    a = layer.attrs
    m = a["modulesX"]
    layout = conv_kernel_layout(layer)
    kept = 0
    for i, c in enumerate(kernel_channels(a)):
        fs = a["filterSize"][i]
        if layout == "winograd":
            tile = output_tile(m, fs)
            kept += c * ((tile + fs - 1) * tiles(m, tile)) ** 2
        elif layout == "chwn":
            kept += c * ((m - 1) * a["stride"][i] + fs) ** 2
        elif layout == "nchw":
            kept += c * fs * fs * m * m
    forward, backward, input_grads = _conv_temporaries(layer, layout)
    return _with_neuron(layer, LayerMemory(True, FLOAT * kept + _fork_dropout_mask(layer),
                                           FLOAT * forward, FLOAT * backward,
                                           tuple(FLOAT * t for t in input_grads)))


def _conv_temporaries(layer, layout: str) -> tuple[int, int, list[int]]:
    """Elements per case of a conv call's temporaries: (forward, backward, per input
    when its gradient is computed), by layout (the kernels in
    :mod:`convnet.kernels.conv`).  With F filters, p = modulesX^2 output pixels, and
    per input C channels, fs x fs filters, S the padded side, img the input side:

    * ``winograd``: forward the products of every tile position (a^2 F T^2), the
      padded input (C (Tm + fs - 1)^2) and the output in cases-innermost order, uncropped
      (F (Tm)^2); backward the transformed output gradient (a^2 F T^2) and its padded
      copy (F (Tm)^2), and per input gradient the transformed-tile gradients
      (a^2 C T^2) and the padded input gradient they are added into
      (C (Tm + a - m)^2);
    * ``nchw``: forward the GEMM's (F, p) product; backward the output gradient in
      (F, N p) order, and per input gradient the column gradient (C fs^2 p) and the
      padded image it is scattered into (C S^2);
    * ``cases``: backward as ``nchw`` (its input gradient is the ``nchw`` one);
    * ``chwn``: forward the (F, p) product; backward the output gradient in
      (F, p N) order, and per input gradient the padded output gradient
      (F (p^0.5 + fs - 1)^2), the input gradient in (C, img^2 N) order and the
      padded image the columns are scattered into (C S^2)."""
    a = layer.attrs
    m, filters, p = a["modulesX"], a["filters"], a["modulesX"] ** 2
    n = len(layer.inputs)
    if layout == "winograd":
        fs = a["filterSize"][0]
        tile = output_tile(m, fs)
        t, side = tiles(m, tile), tiles(m, tile) * tile
        ntiles = (tile + fs - 1) ** 2 * t * t
        forward = ntiles * filters + sum(a["channels"][i] * (side + fs - 1) ** 2
                                         for i in range(n))
        forward += filters * side * side
        backward = ntiles * filters + filters * side * side
        input_grads = [a["channels"][i] * (ntiles + (side + fs - 1) ** 2) for i in range(n)]
        return forward, backward, input_grads
    spans = [(m - 1) * a["stride"][i] + a["filterSize"][i] for i in range(n)]
    if layout == "chwn":
        input_grads = [filters * (m + a["filterSize"][i] - 1) ** 2
                       + a["channels"][i] * (a["imgSize"][i] ** 2 + spans[i] ** 2)
                       for i in range(n)]
    else:
        input_grads = [a["channels"][i] * (a["filterSize"][i] ** 2 * p + spans[i] ** 2)
                       for i in range(n)]
    forward = 0 if layout == "cases" else filters * p
    return forward, filters * p, input_grads


def local_memory(layer) -> LayerMemory:
    """Locally-connected: each input's columns (modulesX^2, C * fs^2).  Temporaries
    (:mod:`convnet.kernels.conv.local`): forward the (p, F, N) product; backward the
    output gradient in that order, and per input gradient the column gradient
    (p, C fs^2) and the padded image it is scattered into (C S^2)."""
    a = layer.attrs
    m = a["modulesX"]
    channels = kernel_channels(a)
    cols = [c * a["filterSize"][i] ** 2 * m * m for i, c in enumerate(channels)]
    spans = [(m - 1) * a["stride"][i] + a["filterSize"][i] for i in range(len(layer.inputs))]
    product = a["filters"] * m * m
    return _with_neuron(layer, LayerMemory(
        True, FLOAT * sum(cols), FLOAT * product, FLOAT * product,
        tuple(FLOAT * (c + channels[i] * spans[i] ** 2) for i, c in enumerate(cols))))


def fc_memory(layer) -> LayerMemory:
    """GEMMs need only the inputs; the dropout fork's ``dropout=`` keeps its mask."""
    return _with_neuron(layer, LayerMemory(True, _fork_dropout_mask(layer)))


def _fork_dropout_mask(layer) -> int:
    """Bytes of the mask that the dropout fork's ``dropout=`` keeps (fc and conv)."""
    return MASK * layer.outputs if layer.params.get("dropout", 0.0) else 0


def pool_memory(layer) -> LayerMemory:
    """The backward pass compares inputs with the output (kept: the output itself);
    maxabs also keeps which pixel won (uint8, or int32 for windows over 255 pixels)."""
    a = layer.attrs
    kept = 0
    if a["pool"] == "maxabs":
        kept = layer.outputs * (1 if a["sizeX"] ** 2 <= 255 else 4)
    return _with_neuron(layer, LayerMemory(True, kept), keeps_output=True)


def norm_memory(layer) -> LayerMemory:
    """The output, the denominators and their power (two input-sized arrays), and for
    cnorm the differences from the local mean (a third)."""
    arrays = 3 if layer.type == "cnorm" else 2
    return _with_neuron(layer, LayerMemory(True, FLOAT * arrays * _input_elements(layer)),
                        keeps_output=True)


def batch_norm_memory(layer) -> LayerMemory:
    """Keeps only per-channel float64 statistics, the moments (2 per channel) and 1 / std
    (the backward pass reads the input, kept anyway).  The deviations from the mean that
    the kernels sum are made block by block of cases in a scratch block of about 512 KiB
    on numpy (:mod:`convnet.kernels.batch_norm`) and not at all by the CUDA kernels, so
    no temporary grows with the layer."""
    return _with_neuron(layer, LayerMemory(True, 0, 0, 0,
                                           kept_per_call=3 * 8 * layer.attrs["channels"]))


def dropout_memory(layer) -> LayerMemory:
    """Its mask when enabled; disabled, ``dropout`` hands its input through and
    ``dropout2`` scales it into a new array."""
    if not layer.params.get("enable", True):
        return _with_neuron(layer, LayerMemory(layer.type == "dropout2", 0))
    return _with_neuron(layer, LayerMemory(True, MASK * layer.outputs))


def combine_memory(layer) -> LayerMemory:
    """concat/pass: a view of a single input, else the concatenation."""
    return _with_neuron(layer, LayerMemory(len(layer.inputs) > 1, 0))


def eltmax_memory(layer) -> LayerMemory:
    """Which input won each element (uint8, int32 from 256 inputs)."""
    width = 1 if len(layer.inputs) < 256 else 4
    return _with_neuron(layer, LayerMemory(True, width * layer.outputs))


def softmax_memory(layer) -> LayerMemory:
    """Keeps its output (counted already) for its backward pass."""
    return _with_neuron(layer, LayerMemory(True, 0), keeps_output=True)


def plain_memory(layer) -> LayerMemory:
    """A new output and nothing else kept (cost layers, eltsum, sum)."""
    return _with_neuron(layer, LayerMemory(True, 0))


def neuron_layer_memory(layer) -> LayerMemory:
    """The neuron layer keeps its input and output (both counted already); its
    ``neuron=`` is the layer itself, not an inline one."""
    return LayerMemory(True, 0)


def data_memory(layer) -> LayerMemory:
    """Loaded by the executor, not computed."""
    return LayerMemory(False, 0)


# ------------------------------------------------------------------ the CUDA kernels
# The CUDA backend's replacement kernels (kernels/cuda/) allocate differently from the
# CPU kernels above for the conv, local, pooling and normalisation layers; every other
# layer runs the same generic code on CuPy.

def cuda_conv_memory(layer) -> LayerMemory:
    """Conv and local layers on CUDA devices (:mod:`convnet.kernels.cuda.conv`): the
    columns, (C fs^2, p) per case and input, are rebuilt in the backward pass, so only
    the dropout fork's mask and the neuron's state are kept (all columns too with
    :data:`~convnet.kernels.cuda.conv.KEEP_COLUMNS`, and then none is a temporary).
    Temporaries: forward one input's columns and the (F, p) product; backward the output
    gradient in (F, p) order and one input's columns, and per input gradient the column gradient, gathered into the
    input gradient without a padded copy.  Conv layers by cuDNN (``CONVNET_CUDNN=1``)
    keep nothing and hold one input's (F, p) output while they run, besides cuDNN's
    workspace (at most ``CONVNET_CUDNN_WORKSPACE_MB``, not per case, not counted)."""
    a = layer.attrs
    p = a["modulesX"] ** 2
    cols = [c * a["filterSize"][i] ** 2 * p for i, c in enumerate(kernel_channels(a))]
    product = a["filters"] * p
    if layer.type == "conv" and cudnn_conv.requested():  # no columns; its workspace aside
        return _with_neuron(layer, LayerMemory(True, _fork_dropout_mask(layer),
                                               FLOAT * product, 0, ()))
    kept, rebuilt = (sum(cols), 0) if cuda_conv.KEEP_COLUMNS else (0, max(cols))
    return _with_neuron(layer, LayerMemory(
        True, FLOAT * kept + _fork_dropout_mask(layer), FLOAT * (rebuilt + product),
        FLOAT * (product + rebuilt), tuple(FLOAT * c for c in cols)))


def cuda_pool_memory(layer) -> LayerMemory:
    """Pooling on CUDA: maxabs records the winning offset as int32."""
    if layer.attrs["pool"] != "maxabs":
        return pool_memory(layer)
    return _with_neuron(layer, LayerMemory(True, 4 * layer.outputs), keeps_output=True)


def cuda_norm_memory(layer) -> LayerMemory:
    """Normalisations on CUDA (:mod:`convnet.kernels.cuda.norm`): the forward keeps the
    denominators (and cnorm the differences from the local mean); the backward pass
    recomputes their power, and cnorm's holds one input-sized array while it runs."""
    kept = 2 if layer.type == "cnorm" else 1
    temp = FLOAT * _input_elements(layer) if layer.type == "cnorm" else 0
    return _with_neuron(layer, LayerMemory(True, FLOAT * kept * _input_elements(layer),
                                           backward_temp_per_case=temp), keeps_output=True)


_CUDA_RULES = {conv_memory: cuda_conv_memory, local_memory: cuda_conv_memory,
               pool_memory: cuda_pool_memory, norm_memory: cuda_norm_memory}


def cuda_memory(layer) -> LayerMemory:
    """``layer``'s memory rule on the CUDA backend: the CUDA kernels' where they differ
    from the CPU kernels, else the layer type's own."""
    rule = layer.layer_type.memory
    return _CUDA_RULES.get(rule, rule)(layer)


def cuda_update_temp(layer) -> int:
    """Bytes an update of ``layer``'s weights holds while it runs on CUDA
    (:class:`convnet.runtime.step.optimizer.Optimizer` on CuPy arrays: the scaled gradient
    and one more array of the same size, the decay term or the step, per weight array in
    turn); the CPU update works through small blocks instead."""
    sizes = [math.prod(shape) for shape in layer.param_shapes().values()]
    return 2 * FLOAT * max(sizes, default=0)


@dataclass(frozen=True)
class KernelMemory:
    """What a backend's kernels allocate: each layer's rule, and the bytes an update of
    a layer's weights holds while it runs (what :func:`convnet.plan.memory.memory_peaks`
    adds up)."""

    layer: MemoryRule
    update_temp: Callable[..., int]


CPU_KERNELS = KernelMemory(lambda layer: layer.layer_type.memory(layer), lambda layer: 0)
CUDA_KERNELS = KernelMemory(cuda_memory, cuda_update_temp)
#: ``--backend`` -> what its kernels allocate
BACKEND_KERNELS = {"cpu": CPU_KERNELS, "cuda": CUDA_KERNELS}


def in_precision(memory: LayerMemory, element_bytes: int) -> LayerMemory:
    """``memory`` for float arrays of ``element_bytes`` (2 for a layer computing in
    bfloat16 or float16): kept state and temporaries are scaled by it, masks with them
    (so under-counted by half, a byte per output at most)."""
    if element_bytes == FLOAT:
        return memory

    def scaled(n: int) -> int:
        return n * element_bytes // FLOAT

    return replace(memory, kept_per_case=scaled(memory.kept_per_case),
                   kept_per_call=scaled(memory.kept_per_call),
                   forward_temp_per_case=scaled(memory.forward_temp_per_case),
                   backward_temp_per_case=scaled(memory.backward_temp_per_case),
                   input_grad_temp_per_case=tuple(
                       scaled(t) for t in memory.input_grad_temp_per_case))

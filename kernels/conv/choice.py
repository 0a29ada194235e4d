"""The conv layer's kernels and the per-layer choice of algorithm they follow.

Stride-1 conv layers with 3x3 to 5x5 filters and enough channels take the
``winograd`` layout (:mod:`convnet.kernels.conv.winograd_conv`: the conv as a^2
GEMMs of transformed tiles, 3-4.6x fewer multiply-adds; :data:`WINOGRAD`
False, ``--no-winograd``, turns it off).  Otherwise conv columns come in one of
three orders, chosen per layer by cost (:func:`conv_layout`):

* ``cases`` (large output maps, at least :data:`CASES_MIN_PIXELS` pixels,
  e.g. the first layer of an ImageNet or CIFAR-10 net):
  :mod:`convnet.kernels.conv.per_case`;
* ``chwn`` (many weights per filter, ``K = C/groups * fs^2`` at least
  ``4 * F``): :mod:`convnet.kernels.conv.channel_major`;
* ``nchw`` (few weights per filter, e.g. a 3-channel first layer):
  :mod:`convnet.kernels.conv.im2col`.

What the forward pass keeps for the backward pass (in training): ``nchw``
the columns, ``chwn`` the padded input copy, ``cases`` nothing, ``winograd`` the
transformed input tiles.  :data:`LAYOUT` forces one of them (for tests); set
:data:`LAYOUT` and :data:`WINOGRAD` on this module, which is where they are read.

The ``cache`` returned by :func:`conv_forward` is ``(layout, saved)`` and opaque
to layers: a replacement registered for ``conv_forward``
(:func:`convnet.kernels.register_kernel`) must come with one for ``conv_backward``.
"""

from __future__ import annotations

from convnet.kernels import array_module, kernel
from convnet.kernels.conv import channel_major, im2col, per_case, winograd, winograd_conv
from convnet.kernels.conv.geometry import ConvGeometry


# None: choose per layer; "nchw", "chwn", "cases" or "winograd": force it (tests)
LAYOUT: str | None = None
WINOGRAD = True  # False: no Winograd unless LAYOUT forces it (--no-winograd: direct conv rounding)
CASES_MIN_PIXELS = 512  # output maps at least this large take the ``cases`` layout


def conv_layout(filters: int, modules: int, filter_sizes, paddings, strides, channels,
                groups) -> str:
    """The column order of a conv layer (see the module docstring); public because what
    a conv layer keeps for its backward pass, and so the memory estimate, depends on it.

    ``LAYOUT = "winograd"`` forces Winograd wherever its geometry allows it (else the
    choice below is made as if it were unset); the other values force their layout."""
    if LAYOUT == "winograd" and _winograd_geometry(modules, filter_sizes, paddings, strides):
        return "winograd"
    if LAYOUT not in (None, "winograd"):
        return LAYOUT
    if LAYOUT is None and WINOGRAD and _winograd_pays(filters, modules, filter_sizes,
                                                      paddings, strides, channels, groups):
        return "winograd"
    if modules * modules >= CASES_MIN_PIXELS:
        return "cases"
    k = sum(c // g * fs * fs for c, g, fs in zip(channels, groups, filter_sizes))
    return "chwn" if k >= 4 * filters else "nchw"


def _winograd_geometry(modules, filter_sizes, paddings, strides) -> bool:
    """Stride 1, one filter size r for all inputs with a Winograd tile for it, and
    paddings of at most r - 1 (the input gradient is then a stride-1 conv too)."""
    r = filter_sizes[0]
    return (all(s == 1 for s in strides) and all(fs == r for fs in filter_sizes)
            and r >= 2 and winograd.output_tile(modules, r) > 0
            and all(p <= r - 1 for p in paddings))


def _winograd_pays(filters, modules, filter_sizes, paddings, strides, channels, groups) -> bool:
    """Winograd where it cuts the multiply-adds by :data:`winograd.MIN_GAIN` and the
    GEMMs per tile position are not thin (filters and channels per group at least
    :data:`winograd.MIN_CHANNELS`)."""
    if not _winograd_geometry(modules, filter_sizes, paddings, strides) or filter_sizes[0] < 3:
        return False
    thin = min(min(c // g for c, g in zip(channels, groups)),
               min(filters // g for g in groups)) < winograd.MIN_CHANNELS
    return not thin and winograd.gain(modules, filter_sizes[0]) >= winograd.MIN_GAIN


def _layout_of(geom: ConvGeometry, filters: int) -> str:
    """:func:`conv_layout` of a layer's geometry."""
    return conv_layout(filters, geom.modules, geom.fs, geom.pad, geom.stride, geom.channels,
                       geom.groups)


@kernel
def conv_forward(xs, ws, b, *, filter_sizes, paddings, strides, channels, groups, img_sizes,
                 modules, keep_cache=True):
    """Sum over inputs i of conv(xs[i], ws[i]) plus bias ``b``.

    Returns ``(y, cache)`` with y (N, F, M, M).  ``b`` is (F,) or (F, M, M).
    """
    xp = array_module(xs[0])
    filters = ws[0].shape[0]
    geom = ConvGeometry(filter_sizes, paddings, strides, channels, groups, img_sizes, modules)
    layout = _layout_of(geom, filters)
    if layout == "winograd":
        return winograd_conv.forward(xp, xs, ws, b, geom, keep_cache)
    if layout == "cases":
        return per_case.forward(xp, xs, ws, b, geom)
    if layout == "chwn":
        return channel_major.forward(xp, xs, ws, b, geom, keep_cache)
    return im2col.forward(xp, xs, ws, b, geom, keep_cache)


@kernel
def conv_backward(gy, xs, ws, cache, need_dx, *, filter_sizes, paddings, strides, channels,
                  groups, img_sizes, modules, shared_biases=True, need_dw=True):
    """Gradients of :func:`conv_forward`: ``(dxs, dws, db)``.

    ``dxs[i]`` is None where ``need_dx[i]`` is false; ``dxs[i]`` has the shape
    of ``xs[i]``.  Weight and bias gradients are sums over the cases; without
    ``need_dw`` (a frozen layer) the weight gradients are not computed (None).
    """
    xp = array_module(gy)
    filters = ws[0].shape[0]
    geom = ConvGeometry(filter_sizes, paddings, strides, channels, groups, img_sizes, modules)
    if cache is not None:
        layout, saved = cache
    else:
        layout = _layout_of(geom, filters)
        saved = None
    if layout == "winograd":
        return winograd_conv.backward(xp, gy, xs, ws, saved, need_dx, geom, shared_biases,
                                      need_dw)
    if layout == "cases":
        return per_case.backward(xp, gy, xs, ws, need_dx, geom, shared_biases, need_dw)
    if layout == "chwn":
        return channel_major.backward(xp, gy, xs, ws, saved, need_dx, geom, shared_biases,
                                      need_dw)
    return im2col.backward(xp, gy, xs, ws, saved, need_dx, geom, shared_biases, need_dw)

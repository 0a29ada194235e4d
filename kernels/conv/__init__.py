"""Convolution (shared weights) and locally-connected (unshared) layers.

The layers call the kernels imported here; each algorithm has its own module:

* :mod:`~convnet.kernels.conv.choice`: :func:`conv_forward` and
  :func:`conv_backward`, and the per-layer choice of algorithm
  (:func:`conv_layout`; ``LAYOUT`` and ``WINOGRAD`` are set there);
* :mod:`~convnet.kernels.conv.im2col`: ``nchw``, columns of the whole minibatch;
* :mod:`~convnet.kernels.conv.channel_major`: ``chwn``, cases innermost, in
  cache-sized blocks of output pixels;
* :mod:`~convnet.kernels.conv.per_case`: ``cases``, blocks of cases outermost,
  for large output maps;
* :mod:`~convnet.kernels.conv.winograd_conv`: ``winograd``, stride-1 convs by
  Winograd's minimal filtering, with the transforms of
  :mod:`~convnet.kernels.conv.winograd`;
* :mod:`~convnet.kernels.conv.local`: :func:`local_forward` and
  :func:`local_backward`, the locally-connected layers;
* :mod:`~convnet.kernels.conv.geometry`: window geometry and cache-sized
  blocking (``CHUNK_BYTES``) the algorithms share; per-thread scratch
  buffers are :mod:`convnet.kernels.scratch`.

Layouts: activations are (N, C, S, S).  Conv weights (F, C/groups, fs, fs);
local weights (P, F, C/groups, fs, fs) with P = modulesX**2 in row-major
(oy, ox) order; biases (F,) (shared) or (F, M, M).  The ``cache`` returned by
the forward kernels is opaque to layers.
"""

from __future__ import annotations

from convnet.kernels.conv.choice import conv_backward, conv_forward, conv_layout
from convnet.kernels.conv.geometry import out_size
from convnet.kernels.conv.local import local_backward, local_forward

__all__ = ["conv_backward", "conv_forward", "conv_layout", "local_backward", "local_forward",
           "out_size"]

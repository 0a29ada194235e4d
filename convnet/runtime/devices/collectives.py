"""All-reduce of replicated weight gradients: chunked copy-and-add, or NCCL.

An all-reduce sums, over the replicas of a layer, each replica's gradient
arrays, and leaves the sum on every replica.  The interface works for both
ways the executor walks a plan:

    collective(grads, ranks, barrier, scratch)

* ``grads``: one dict per rank (replica, in replica order) of arrays with the
  same keys and shapes, ``grads[r]`` living on ``devices[r]`` (each a
  :class:`convnet.runtime.devices.base.Device`);
* ``ranks``: the ranks the caller does; all of them (``None``) in the
  sequential walk, the calling worker's own rank in the parallel walk;
* ``barrier``: in the parallel walk, a callable that returns once every rank
  has called it (``DeviceWorkers.barrier`` bound to the operation);
* ``scratch``: a dict shared by the ranks of one all-reduce operation (one
  per operation and step), for the chunked algorithm's partial sums.

For every rank it does, the collective replaces ``grads[r][k]`` with a new
array holding the sum; it never writes into the old array (a layer may have
handed it out as a view of something else).

Two implementations:

* :class:`ChunkedAllReduce` works on any devices (CPU workers, CUDA devices
  sharing a GPU): rank r sums slice r of every array over all ranks, in rank
  order, from copies made with ``Device.copy_from``, inside ``Device.scope``
  so that the sums are computed on the rank's own device; after the barrier each
  rank gathers the other slices.  The summation order is fixed, so results
  are bitwise reproducible, and the sequential and parallel walks of a plan
  get identical sums.
* :class:`NcclAllReduce` calls ``ncclAllReduce`` (CuPy's ``cupy.cuda.nccl``)
  on each device's stream, one communicator per GPU, in one NCCL group per
  call.  NCCL needs distinct GPUs, so it is chosen only when every rank is on
  its own physical GPU.  Its summation order is NCCL's (ring or tree), so
  results can differ from the chunked sum in the last bits; all ranks get
  identical sums.  In the parallel walk the ranks meet at the barrier
  *before* queuing the NCCL kernels (see the comment in ``__call__``: an
  NCCL kernel waits for its peers on the GPU, which the event ordering of
  :class:`convnet.runtime.devices.cuda.CudaDevice` must not be allowed to cycle through).

The chunked algorithm also works by halves (:attr:`AllReduce.sharded`):
:meth:`ChunkedAllReduce.reduce_slice` is one rank's phase 1 and
:meth:`ChunkedAllReduce.gather_slices` copies the other ranks' slices of any
arrays into a rank's own.  The executor uses them to update each slice of
the weights on one rank only and then gather the updated weights (see
:mod:`convnet.runtime.step.tasks`).

:func:`make_all_reduce` picks one; ``CONVNET_ALLREDUCE=chunked|nccl`` forces it.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterable, Sequence

from convnet.runtime.devices.base import Device


def chunk_bounds(size: int, parts: int, index: int) -> tuple[int, int]:
    """Slice ``index`` of ``parts`` near-equal contiguous slices of ``size`` elements
    (the first ``size % parts`` slices one longer)."""
    base, extra = divmod(size, parts)
    lo = index * base + min(index, extra)
    return lo, lo + base + (1 if index < extra else 0)


def _ranks(ranks, count: int) -> list[int]:
    return list(range(count)) if ranks is None else [int(r) for r in ranks]


class AllReduce:
    """Interface: sum ``grads[r][k]`` over ranks r, for every key k (see the module docstring)."""

    name = "all-reduce"
    sharded = False  # True: offers reduce_slice / gather_slices / bounds (rank r owns slice r)

    def __init__(self, devices: Sequence[Device]):
        self.devices = list(devices)

    def __call__(self, grads: list[dict], ranks: Iterable[int] | None = None,
                 barrier: Callable[[], None] | None = None, scratch: dict | None = None) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release communicators (nothing for most implementations)."""


class SingleRank(AllReduce):
    """One replica: nothing to sum."""

    name = "none"

    def __call__(self, grads, ranks=None, barrier=None, scratch=None) -> None:
        if barrier is not None:
            barrier()


class ChunkedAllReduce(AllReduce):
    """Reduce-scatter then all-gather by slices, with ``Device.copy_from``."""

    name = "chunked"
    sharded = True

    def bounds(self, size: int, rank: int) -> tuple[int, int]:
        """The slice of a flattened array of ``size`` elements that ``rank`` owns."""
        return chunk_bounds(size, len(self.devices), rank)

    def reduce_slice(self, grads: list[dict], rank: int, received: dict | None = None,
                     in_place: bool = False) -> dict:
        """Slice ``rank`` of every ``grads[r][k]``, summed over r in rank order, as new
        arrays on ``rank``'s device (the inputs are not written).

        ``received[r][k]``, where given, is rank r's slice already on this device
        (sent by another process, which holds ``grads[r]``).  ``in_place``: the ranks
        share one address space (CPU devices of one process), so the sum reads the
        other ranks' slices where they are instead of copying them over first (the
        same sums)."""
        device = self.devices[rank]
        received = received or {}
        sums = {}
        with device.scope():
            for k in sorted(grads[rank]):
                lo, hi = self.bounds(grads[rank][k].size, rank)
                parts = [received[r][k] if r in received else
                         g[k].reshape(-1)[lo:hi] if r == rank or in_place else
                         device.copy_from(g[k].reshape(-1)[lo:hi]) for r, g in enumerate(grads)]
                total = parts[0] + parts[1] if len(parts) > 1 else parts[0].copy()
                for part in parts[2:]:
                    total += part
                sums[k] = total
        return sums

    def average_slice(self, arrays: list[dict], rank: int, received: dict | None = None) -> None:
        """Local SGD's averaging: slice ``rank`` of every ``arrays[r][k]``, summed over r
        in rank order (:meth:`reduce_slice`) and divided by the number of ranks, written
        into ``arrays[rank][k]`` (the other ranks read only their own slices of it).
        Followed by :meth:`gather_slices`, every rank holds the mean."""
        for k, total in self.reduce_slice(arrays, rank, received).items():
            flat = arrays[rank][k].reshape(-1)
            lo, hi = self.bounds(flat.size, rank)
            flat[lo:hi] = total / len(arrays)

    def gather_slices(self, arrays: list[dict], rank: int, received: dict | None = None,
                      keys=None) -> None:
        """Copy, into each contiguous ``arrays[rank][k]`` in place (for each of ``keys``,
        by default all), every other rank's slice of it from ``arrays[owner][k]``, or
        from ``received[owner][k]`` where another process sent it."""
        device = self.devices[rank]
        received = received or {}
        with device.scope():
            for k in sorted(arrays[rank]) if keys is None else keys:
                flat = arrays[rank][k].reshape(-1)
                for owner, peer in enumerate(arrays):
                    if owner != rank:
                        lo, hi = self.bounds(flat.size, owner)
                        part = (received[owner][k] if owner in received
                                else peer[k].reshape(-1)[lo:hi])
                        device.copy_into(flat[lo:hi], part)

    def __call__(self, grads, ranks=None, barrier=None, scratch=None) -> None:
        count = len(self.devices)
        if len(grads) != count:
            raise ValueError(f"{len(grads)} gradient sets for {count} ranks")
        ranks = _ranks(ranks, count)
        if len(ranks) != count and barrier is None:
            raise ValueError("ranks done by several callers need a barrier between the phases")
        scratch = {} if scratch is None else scratch
        chunks = scratch.setdefault("chunks", {})
        for rank in ranks:  # phase 1: rank r owns slice r of every array
            chunks[rank] = self.reduce_slice(grads, rank)
        if barrier is not None:
            barrier()
        for rank in ranks:  # phase 2: gather every slice
            device = self.devices[rank]
            with device.scope():
                for k in sorted(grads[rank]):
                    old = grads[rank][k]
                    flat = device.xp.empty(old.size, dtype=old.dtype)
                    for owner in range(count):
                        lo, hi = self.bounds(flat.size, owner)
                        chunk = chunks[owner][k]
                        flat[lo:hi] = chunk if owner == rank else device.copy_from(chunk)
                    grads[rank][k] = flat.reshape(old.shape)


class NcclAllReduce(AllReduce):
    """``ncclAllReduce`` over one communicator per GPU (distinct physical GPUs only)."""

    name = "nccl"

    def __init__(self, devices: Sequence[Device]):
        super().__init__(devices)
        self.comms: list = []
        physical = [int(d.physical) for d in self.devices]
        if len(set(physical)) != len(physical):
            raise ValueError(f"NCCL needs one rank per GPU; GPUs {physical} repeat")
        import cupy
        from cupy.cuda import nccl

        if not nccl.available:
            raise RuntimeError("CuPy was built without NCCL")
        self._cupy = cupy
        self._nccl = nccl
        # one process, one thread creates all communicators (before the workers use them)
        self.comms = nccl.NcclCommunicator.initAll(physical)

    def _dtype(self, dtype) -> int:
        import numpy as np

        nccl = self._nccl
        table = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float64): nccl.NCCL_FLOAT64,
                 np.dtype(np.float16): nccl.NCCL_FLOAT16}
        try:
            return table[np.dtype(dtype)]
        except KeyError:
            raise TypeError(f"NCCL all-reduce of {dtype} arrays is not supported") from None

    def __call__(self, grads, ranks=None, barrier=None, scratch=None) -> None:
        count = len(self.devices)
        if len(grads) != count:
            raise ValueError(f"{len(grads)} gradient sets for {count} ranks")
        ranks = _ranks(ranks, count)
        cupy, nccl = self._cupy, self._nccl
        keys = sorted(grads[0])
        results: dict[int, dict] = {}
        if barrier is not None:
            # Every rank reaches this point before any rank queues its NCCL kernel,
            # so no rank can queue, ahead of its own part, a wait on an event that
            # another device's stream recorded after that device's part: an NCCL
            # kernel blocks until all ranks' parts run, and such a wait (which
            # CudaDevice.copy_from records at copy time) would close a cycle.
            barrier()
        # A group: one thread issuing several ranks (sequential walk) must, and one
        # rank's several arrays may, be grouped; NCCL's group state is per thread.
        nccl.groupStart()
        try:
            for rank in ranks:
                device, comm = self.devices[rank], self.comms[rank]
                out = {}
                with device.scope():
                    stream = cupy.cuda.get_current_stream()
                    for k in keys:
                        src = cupy.ascontiguousarray(grads[rank][k])
                        dst = cupy.empty_like(src)
                        comm.allReduce(src.data.ptr, dst.data.ptr, src.size, self._dtype(src.dtype),
                                       nccl.NCCL_SUM, stream.ptr)
                        out[k] = (dst, src)  # src stays referenced until the group is issued
                results[rank] = out
        finally:
            nccl.groupEnd()
        for rank, out in results.items():
            for k, (dst, _) in out.items():
                grads[rank][k] = dst.reshape(grads[rank][k].shape)

    def close(self) -> None:
        for comm in self.comms:
            with contextlib.suppress(Exception):
                comm.destroy()
        self.comms = []


def choose_all_reduce(kinds: Sequence[str], physical: Sequence[int], nccl_available: bool,
                      forced: str | None = None) -> str:
    """'none', 'nccl' or 'chunked' for ranks on devices of ``kinds`` and ``physical`` GPUs."""
    if len(kinds) <= 1:
        return "none"
    forced = (forced or "").strip().lower() or "auto"
    if forced not in ("auto", "chunked", "nccl"):
        raise ValueError(f"CONVNET_ALLREDUCE must be auto, chunked or nccl, not {forced!r}")
    nccl_ok = (nccl_available and all(k == "cuda" for k in kinds)
               and len(set(physical)) == len(physical))
    if forced == "nccl":
        if not nccl_ok:
            raise ValueError("CONVNET_ALLREDUCE=nccl needs CUDA devices on distinct GPUs and "
                             "CuPy with NCCL")
        return "nccl"
    if forced == "chunked":
        return "chunked"
    return "nccl" if nccl_ok else "chunked"


def nccl_available() -> bool:
    """True when CuPy imports and was built with NCCL (``cupy.cuda.nccl.available``)."""
    try:
        from cupy.cuda import nccl
    except Exception:  # noqa: BLE001 - no CuPy, or no NCCL library
        return False
    return bool(nccl.available)


def make_all_reduce(devices: Sequence[Device]) -> AllReduce:
    """The collective for ranks on ``devices`` (one per replica, in replica order)."""
    kinds = [d.kind for d in devices]
    physical = [int(d.physical) for d in devices]
    wants_nccl = len(devices) > 1 and all(k == "cuda" for k in kinds) and \
        len(set(physical)) == len(physical)
    choice = choose_all_reduce(kinds, physical, nccl_available() if wants_nccl else False,
                               os.environ.get("CONVNET_ALLREDUCE"))
    if choice == "none":
        return SingleRank(devices)
    if choice == "nccl":
        return NcclAllReduce(devices)
    return ChunkedAllReduce(devices)


__all__ = ["AllReduce", "SingleRank", "ChunkedAllReduce", "NcclAllReduce", "chunk_bounds",
           "choose_all_reduce", "make_all_reduce", "nccl_available"]

"""How much of a GPU CuPy's memory pool will hold for a plan: the estimate the fit check
and ``--print-plan`` use on the CUDA backend.

CuPy allocates every array from its memory pool (``cupy.cuda.SingleDeviceMemoryPool``),
which keeps what it once took from the GPU:

* a request is rounded up to 512 bytes;
* each stream has its own free chunks (an arena); a logical device's arrays come from
  its own stream's, so logical devices sharing a GPU never reuse each other's freed
  memory;
* a request takes the smallest free chunk at least as large (best fit by size), split
  when larger, the rest staying free; with none, ``cudaMalloc`` takes exactly the
  request from the GPU, for good;
* a freed chunk merges with its free neighbours of the same ``cudaMalloc`` and waits
  for the next request of its stream.

So the pool holds more than the most the arrays of a step ever need at once: freed
chunks too small or too split for a later request stay held beside the new ones.
:func:`pool_bytes` replays one training step's buffers, in the order the executor
makes and drops them (:func:`convnet.plan.memory.memory_peaks` with the CUDA kernels'
memory rules, :data:`~convnet.config.layer_types.memory_rules.CUDA_KERNELS`), through a
model of that allocator, step after step until what it holds stops growing, and
returns what each logical device's stream holds then.  :data:`OUTSIDE_POOL_BYTES`
adds, per logical device, what CUDA libraries allocate beside the pool.
"""

from __future__ import annotations

import bisect
import itertools

from convnet.config.layer_types.memory_rules import CUDA_KERNELS
from convnet.plan.memory import memory_peaks

#: CuPy rounds every request up to this (cudaMalloc's alignment).
ROUNDING = 512
#: Bytes per logical device outside the pool: the cuBLAS handle and workspace of its
#: worker thread and the compiled kernel modules.  An allowance, not a measurement.
OUTSIDE_POOL_BYTES = 64 << 20
#: The most steps replayed while what the pool holds still grows.
MAX_STEPS = 8
_PARAMETERS = ("weights", "momentum")


class _Chunk:
    __slots__ = ("size", "region", "offset", "free", "prev", "next")

    def __init__(self, size: int, region: int, offset: int):
        self.size, self.region, self.offset = size, region, offset
        self.free = False
        self.prev: _Chunk | None = None
        self.next: _Chunk | None = None

    def order(self) -> tuple[int, int, int]:
        return self.size, self.region, self.offset


class PoolModel:
    """One stream's arena of CuPy's pool: best fit, split, merge; never gives memory back."""

    def __init__(self):
        self.held = 0  # bytes taken from the GPU
        self._free: list[tuple[int, int, int]] = []  # sorted (size, region, offset)
        self._chunks: dict[tuple[int, int], _Chunk] = {}  # (region, offset) of free chunks
        self._regions = itertools.count()

    def alloc(self, nbytes: int) -> _Chunk:
        size = -(-nbytes // ROUNDING) * ROUNDING
        at = bisect.bisect_left(self._free, (size, -1, -1))
        if at == len(self._free):
            self.held += size
            return _Chunk(size, next(self._regions), 0)
        _, region, offset = self._free.pop(at)
        chunk = self._chunks.pop((region, offset))
        chunk.free = False
        if chunk.size > size:  # split: the rest stays free
            rest = _Chunk(chunk.size - size, region, offset + size)
            rest.prev, rest.next = chunk, chunk.next
            if chunk.next is not None:
                chunk.next.prev = rest
            chunk.next, chunk.size = rest, size
            self._add_free(rest)
        return chunk

    def free(self, chunk: _Chunk) -> None:
        following = chunk.next
        if following is not None and following.free:
            self._remove_free(following)
            _absorb(chunk, following)
        previous = chunk.prev
        if previous is not None and previous.free:
            self._remove_free(previous)
            _absorb(previous, chunk)
            chunk = previous
        self._add_free(chunk)

    def _add_free(self, chunk: _Chunk) -> None:
        chunk.free = True
        bisect.insort(self._free, chunk.order())
        self._chunks[(chunk.region, chunk.offset)] = chunk

    def _remove_free(self, chunk: _Chunk) -> None:
        self._free.remove(chunk.order())
        del self._chunks[(chunk.region, chunk.offset)]
        chunk.free = False


def _absorb(chunk: _Chunk, following: _Chunk) -> None:
    """Merge ``following``, the chunk right after ``chunk`` in its cudaMalloc, into it."""
    chunk.size += following.size
    chunk.next = following.next
    if following.next is not None:
        following.next.prev = chunk


def step_buffers(plan, net, shared=frozenset(), precision: str = "fp32") -> tuple[dict, dict]:
    """Per logical device, the buffers made once (weights and momentum) and one training
    step's buffers, each as a list of (key, bytes) events (negative: dropped), in the
    executor's order, with the CUDA kernels' memory rules, under ``--precision``."""
    once: dict[int, list] = {d: [] for d in range(plan.num_devices)}
    step: dict[int, list] = {d: [] for d in range(plan.num_devices)}

    def record(device: int, key, nbytes: int) -> None:
        (once if key[0] in _PARAMETERS else step)[device].append((key, nbytes))

    memory_peaks(plan, net, shared, CUDA_KERNELS, precision, record)
    return once, step


def pool_bytes(plan, net, shared=frozenset(), precision: str = "fp32") -> list[int]:
    """What CuPy's pool will hold for each logical device of ``plan`` once training runs
    under ``--precision`` (see the module docstring)."""
    once, step = step_buffers(plan, net, shared, precision)
    held = []
    for device in range(plan.num_devices):
        pool = PoolModel()
        _replay(pool, once[device])
        before = -1
        for _ in range(MAX_STEPS):
            if pool.held == before:
                break
            before = pool.held
            _replay(pool, step[device])
        held.append(pool.held)
    return held


def _replay(pool: PoolModel, events: list) -> None:
    live: dict = {}
    for key, nbytes in events:
        if nbytes > 0:
            live.setdefault(key, []).append(pool.alloc(nbytes))
        else:
            pool.free(live[key].pop())

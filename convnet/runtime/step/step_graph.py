"""A whole training step captured as one CUDA graph and replayed (``CONVNET_CUDA_GRAPH=1``).

A step launches the same kernels, copies and cuBLAS calls with the same arguments
every time, as long as nothing in it changes from step to step: the plan is static,
and the weights, momentum and gradient buffers keep their addresses.  Launching them
one by one from Python costs several microseconds each, which on a small net like
CIFAR-10's is much of the step.  So the first step that may be captured runs its
tasks once under CUDA stream capture (:class:`CudaCapture`), and every later step
copies its minibatch into the captured input buffers, launches the graph, and reads
the step's cost sums and finite flags from the vector the capture packed them into
(one wait, as an eager step).

What a step may not change, or it is not captured (:func:`capture_blockers` says why):
its random draws (dropout masks depend on the step), its learning rates (a schedule
other than ``const`` changes them with the progress), fp16's loss scale, its weight
arrays (``wball`` puts its rescaled weights in new ones), which replicas update apart
(local SGD, async), the case count of its updates (a short last
minibatch runs eagerly), and anything that works on the host between tasks
(``--profile``'s timings, the memory meter, ``--slow-device``, transfers to other
processes).  It must also run on one CUDA device (one stream; several logical devices
would need their streams forked and joined inside the capture).  A step that cannot
replay runs eagerly, exactly as without the switch.

The capture allocates from a memory pool of its own, kept with the graph, so that no
address a replay writes is handed to anything else (PyTorch's graphs keep private
pools for the same reason).  Replays compute what eager steps compute, kernel for
kernel; a GPU run checks that they give the same weights bitwise
(``make gpu-check``'s proofs stage) before the switch is made the default.

The CUDA calls go through one seam, the capture backend; the tests replay on CPU
devices with a stand-in that runs the captured walk again into the same buffers
(tests/runtime/step/test_step_graph.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from convnet.kernels.images import StoredImages
from convnet.runtime.step.batch_check import check_batch
from convnet.runtime.step.records import StepResult

ENV = "CONVNET_CUDA_GRAPH"


def requested() -> bool:
    """Whether ``CONVNET_CUDA_GRAPH=1`` asks for captured steps."""
    return os.environ.get(ENV, "").strip() == "1"


def capture_blockers(executor) -> list[str]:
    """Why ``executor``'s training steps cannot be captured (empty: they can)."""
    net, plan = executor.net, executor.plan
    reasons = []
    if len(executor.devices) != 1 or executor.cluster.size != 1:
        reasons.append("more than one logical device")
    if executor.devices[0].kind != "cuda":
        reasons.append("not a CUDA device")
    for ldef in net:
        if ldef.name not in plan.layers:
            continue
        if (ldef.type in ("dropout", "dropout2") and ldef.params.get("enable", True)) \
                or ldef.params.get("dropout", 0.0):
            reasons.append(f"layer '{ldef.name}' draws new dropout masks every step")
    for layer, rules in executor.store.rules.items():
        if any(rule.eps.kind != "const" for rule in rules.values()):
            reasons.append(f"layer '{layer}''s learning rate follows a schedule")
    if executor.precision.loss_scale is not None:
        reasons.append("--precision fp16 changes its loss scale")
    if executor.exchange is not None or executor.local_periods:
        reasons.append("replicas that update apart (--sync local or async)")
    if executor.slowdown is not None:
        reasons.append("--slow-device sleeps between tasks")
    for layer, rules in executor.store.rules.items():
        if any(rule.ball for rule in rules.values()):
            reasons.append(f"layer '{layer}' rescales its weights into new arrays (wball)")
    return sorted(set(reasons))


class CudaCapture:
    """Stream capture with CuPy, on the executor's one device's stream."""

    def __init__(self, device):
        self.device = device

    def capture(self, walk):
        """Capture ``walk()`` (which only queues work) as a graph: (graph, walk's result,
        the private memory pool its allocations came from)."""
        import cupy

        pool = cupy.cuda.MemoryPool()
        self.device.activate()
        stream = self.device.stream
        with cupy.cuda.using_allocator(pool.malloc):
            stream.begin_capture()
            try:
                out = walk()
            finally:
                graph = stream.end_capture()
        return graph, out, pool

    def launch(self, graph) -> None:
        graph.launch(stream=self.device.stream)

    def stage(self, static, column) -> None:
        """Copy a minibatch column (a host array, or one made on the device: stored images)
        into its captured input buffer, before the launch."""
        if isinstance(column, np.ndarray):
            static.set(np.ascontiguousarray(column, dtype=static.dtype),
                       stream=self.device.stream)
        else:
            with self.device.scope():
                static[...] = column


@dataclass
class _Captured:
    graph: object
    keep: object  # the capture's memory pool and buffers: alive as long as the graph
    inputs: dict  # data column -> its device buffer
    results: object  # the captured walk's StepResults (what was packed, and how)
    packed: tuple  # the device vector the results are packed into, and their order


class StepGraph:
    """The captured training step of one executor (see the module docstring)."""

    def __init__(self, executor, backend=None):
        self.executor = executor
        self.backend = backend if backend is not None else CudaCapture(executor.devices[0])
        self._captured: _Captured | None = None
        self._key = None
        self.replays = 0  # steps run by launching the graph (tests, benchmarks)

    def applies(self, batch, update_cases) -> bool:
        """Whether this step may run as the graph: a whole minibatch of the captured
        shapes, no update case count of its own, the same task list."""
        ex = self.executor
        num_cases = len(batch[0]) if batch else 0
        return (update_cases is None and num_cases == ex.plan.minibatch
                and ex.timings is None and ex.memory is None)

    def step(self, batch, progress: float) -> StepResult:
        """Run a training step as the graph (capturing it first if needed)."""
        import time

        ex = self.executor
        start = time.perf_counter()
        ex.reads.take()
        check_batch(ex.net, ex.plan, batch)  # also the labels, on the host
        # the captured graph reads and writes these very arrays: a step that replaced any
        # (an eager step, a loaded checkpoint) needs a new capture
        key = (tuple((i, tuple(np.shape(column)[1:])) for i, column in enumerate(batch)),
               tuple(id(a) for group in (ex.store.weights, ex.store.momentum)
                     for replicas in group.values() for arrays in replicas if arrays
                     for a in arrays.values()))
        if self._captured is None or key != self._key:
            self._captured, self._key = self._capture(batch, progress), key
        captured = self._captured
        for index, static in captured.inputs.items():
            column = batch[index]
            if isinstance(column, StoredImages):  # uploaded as stored, made float there
                column = ex.uploads.to_device(0, column, 0, len(column))
            self.backend.stage(static, column)
        self.backend.launch(captured.graph)
        self.replays += 1
        results = captured.results.cleared()
        results.unpack(0, ex.devices[0], ex.reads, captured.packed)
        failed = results.first_failure()
        if failed is not None:
            raise ex._failed_step(failed, batch, True, progress, 0)
        return ex._step_result(results.metrics, ex.plan.minibatch, start, skipped=False)

    def _capture(self, batch, progress: float) -> _Captured:
        """Capture the step's task walk, reading the minibatch from device buffers."""
        ex = self.executor
        device = ex.devices[0]
        with device.scope():
            inputs = {i: device.xp.empty(np.shape(column), dtype=np.float32)
                      for i, column in enumerate(batch)}
        staged = [inputs[i] for i in range(len(batch))]

        def walk():
            buffers = ex._run_tasks(staged, ex.train_tasks(), True, progress,
                                    readers=ex.train_readers(), capturing=True)
            return buffers, buffers.results.pack(0, device, ex.reads)

        graph, (buffers, packed), pool = self.backend.capture(walk)
        return _Captured(graph, (pool, buffers.results, packed), inputs, buffers.results,
                         packed)


__all__ = ["ENV", "CudaCapture", "StepGraph", "capture_blockers", "requested"]

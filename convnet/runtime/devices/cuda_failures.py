"""A CUDA failure during a run, as the one line a user can act on.

CuPy reports a failing CUDA call with its own exception types: the runtime's and
driver's (``cudaErrorIllegalAddress: an illegal memory access was encountered``, a
lost device), cuBLAS's, NCCL's, NVRTC's, and its memory pool's ``OutOfMemoryError``.
:func:`cuda_error` recognises them by where their type is defined (CuPy's packages),
so neither this module nor its tests need CuPy, and finds them also behind an error
raised while handling one (an executor closing after the failure may fail again).

The executor records which operation was running when one was raised
(:func:`note_running`: the forward pass of a layer, a copy between two devices, an
all-reduce), and the command line turns it into :class:`CudaDeviceError`
(:func:`as_device_error`): one line with the error, what was running on which GPU,
and what to do; for an out-of-memory error also what the plan estimated for that GPU
and what was free when the run started (:func:`remember_estimate`, from the memory
fit check).  Nothing is saved after a failure, so the last checkpoint stays as it was.

After a CUDA error a GPU context is usually unusable ("sticky" errors such as an
illegal address), and every CuPy object freed later (kernel modules, streams, memory)
fails in its finaliser: dozens of ``Exception ignored in ...`` tracebacks on stderr,
while the process winds down.  :func:`as_device_error` therefore silences those
finaliser reports for the rest of the process, and :func:`failed` tells the program's
entry point to end the process without running the remaining finalisers once the
error line and the outputs are flushed (:mod:`convnet.app.command_line.launcher`).
"""

from __future__ import annotations

import re
import sys
import threading

from convnet.errors import DeviceError

#: Packages whose exception types are CUDA failures: CuPy's, and the library finder
#: CuPy loads the CUDA libraries with (a missing libcublas surfaces through it).
_CUDA_PACKAGES = ("cupy", "cupy_backends", "cuda.pathfinder")
#: A recorded failure: the finalisers of CuPy's objects are not to be trusted any more.
_failed = threading.Event()
#: The fit check's figures per physical GPU: (bytes the plan needs, bytes free then).
_estimates: dict[int, tuple[int, int]] = {}
_estimates_lock = threading.Lock()


class CudaDeviceError(DeviceError):
    """A CUDA failure during a run, in one line (exit 1)."""


def _is_cuda_type(error: BaseException) -> bool:
    module = type(error).__module__ or ""
    return any(module == p or module.startswith(p + ".") for p in _CUDA_PACKAGES)


def cuda_error(error: BaseException) -> BaseException | None:
    """The first CUDA failure in ``error``'s chain (itself, what it was raised from or
    while handling), or None when there is none."""
    seen = set()
    chain = []
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    found = [e for e in chain if _is_cuda_type(e)]
    return found[-1] if found else None  # the earliest: later ones followed from it


def is_out_of_memory(error: BaseException) -> bool:
    return type(error).__name__ == "OutOfMemoryError" and isinstance(error, MemoryError)


def note_running(error: BaseException, what: str, logical: int | None,
                 physical: int | None) -> None:
    """Record on a CUDA ``error`` what was running (``what``, e.g. :func:`op_text`), on
    logical device ``logical`` (GPU ``physical``); the innermost record is kept."""
    if cuda_error(error) is None or getattr(error, "convnet_running", None) is not None:
        return
    try:
        error.convnet_running = (what, logical, physical)
    except AttributeError:  # an exception type without a __dict__: nothing recorded
        pass


def op_text(op, logical: int | None) -> str:
    """A plan operation in words (duck-typed on :mod:`convnet.plan.ops`' fields)."""
    kind, layer = op.kind, op.layer
    if kind in ("copy", "gradcopy"):
        what = "output" if kind == "copy" else f"gradient from {op.consumer}"
        return (f"the copy of layer {layer}'s {what} from logical device {op.src} to "
                f"{op.dst}")
    if kind == "allreduce":
        devices = ", ".join(map(str, op.replica_devices))
        return f"the all-reduce of layer {layer}'s gradients over logical devices {devices}"
    if kind == "batchstats":
        return (f"the batch statistics of layer {layer} before its {op.phase} pass on "
                f"logical device {logical}")
    words = {"load": f"loading the minibatch's {layer} onto",
             "forward": f"the forward pass of layer {layer} on",
             "backward": f"the backward pass of layer {layer} on",
             "update": f"the update of layer {layer}'s weights on"}
    return f"{words.get(kind, f'{kind} of layer {layer} on')} logical device {logical}"


def remember_estimate(physical: int, needed: int, free: int) -> None:
    """What the memory fit check found for GPU ``physical``: the plan needs ``needed``
    bytes and ``free`` were free (named when that GPU runs out of memory)."""
    with _estimates_lock:
        _estimates[int(physical)] = (int(needed), int(free))


def failed() -> bool:
    """Whether a CUDA failure has been turned into a :class:`CudaDeviceError` here."""
    return _failed.is_set()


def as_device_error(error: BaseException):
    """The one-line :class:`CudaDeviceError` for a CUDA failure in ``error``'s chain, or
    None.  From then on the process reports no finaliser errors (see the module
    docstring)."""
    cause = cuda_error(error)
    if cause is None:
        return None
    running = (getattr(cause, "convnet_running", None)
               or getattr(error, "convnet_running", None))
    what, logical, physical = running or (None, None, None)
    _failed.set()
    sys.unraisablehook = _ignore_finaliser_error
    if is_out_of_memory(cause):
        return CudaDeviceError(_out_of_memory_text(cause, what, logical, physical))
    detail = _first_line(cause)
    where = f"GPU {physical}" if physical is not None else "the GPU"
    during = f" during {what}" if what else ""
    return CudaDeviceError(
        f"CUDA error on {where}{during}: {detail}; CUDA may report an error at a later call "
        f"than the one that caused it, and this process cannot use the GPU any more; "
        f"make gpu-check tests the GPU and the CUDA kernels, --backend cpu trains without "
        f"them; checkpoints saved so far are as they were")


def _out_of_memory_text(cause, what, logical, physical) -> str:
    from convnet.plan.report import human_bytes

    text = str(cause)
    asked = re.search(r"allocating ([\d,]+) bytes", text)
    held = re.search(r"allocated so far: ([\d,]+) bytes", text)
    where = f"GPU {physical}" if physical is not None else "a GPU"
    line = f"out of memory on {where}" + (f" during {what}" if what else "")
    if asked and held:
        line += (f": CuPy could not allocate {human_bytes(int(asked[1].replace(',', '')))} "
                 f"more with {human_bytes(int(held[1].replace(',', '')))} allocated")
    else:
        line += f": {_first_line(cause)}"
    with _estimates_lock:
        estimates = dict(_estimates)
    gpus = [physical] if physical in estimates else sorted(estimates)
    for gpu in gpus:
        needed, free = estimates[gpu]
        line += (f"; the plan estimated {human_bytes(needed)} for GPU {gpu}, which had "
                 f"{human_bytes(free)} free when the run started")
    return line + ("; use a smaller --mini (--print-plan shows the estimate per GPU), "
                   "or --backend cpu")


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _ignore_finaliser_error(unraisable) -> None:
    """``sys.unraisablehook`` after a CUDA failure: CuPy's finalisers (kernel modules,
    streams, memory) fail on a broken context, and their reports would bury the one
    line that says what happened."""


__all__ = ["CudaDeviceError", "as_device_error", "cuda_error", "failed",
           "is_out_of_memory", "note_running", "op_text", "remember_estimate"]

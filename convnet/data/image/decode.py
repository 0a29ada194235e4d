"""Decoding a batch's JPEGs on a pool of threads into one uint8 array.

simplejpeg (libjpeg-turbo) releases the GIL while it decodes, so threads
decode in parallel; each thread takes a contiguous run of cases and writes
them straight into their rows of one ``(N, S, S, 3)`` buffer allocated before
decoding, or, for training crops, decodes each image into a buffer of its own
and copies only the crop window's rows into an ``(N, k, k, 3)`` buffer (the
window's pixels in the decoded order: no float copy of the whole image, no
transposition; the mirror is left to the device).  (simplejpeg was chosen by
measurement; see docs/DATA.md.)  One call per image is the library's interface;
the pixels never pass through Python.

Every image's header is read first (its SOF size, without decoding) and an
image of another size is refused before it is decoded, so a header that
declares 65,000 x 65,000 pixels costs nothing.  make-data's option of keeping
the borders stores images whose short side is S and whose long side is longer:
those (long side up to :data:`MAX_ASPECT` x S) are decoded and their long
side centre-cropped to S.  A failure is returned with its case, not raised,
so the caller can name the file or skip the image.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import simplejpeg

#: The longest side an image of a batch of S x S images may have, in units of S.
MAX_ASPECT = 4


def default_threads() -> int:
    """Decoding threads when none are asked for: the cores this process may use, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _size_problem(height: int, width: int, size: int) -> str | None:
    if (height, width) == (size, size):
        return None
    if min(height, width) == size and max(height, width) <= MAX_ASPECT * size:
        return None
    return (f"the JPEG header declares {width}x{height} pixels, but the batches hold "
            f"{size}x{size} images (num_vis in batches.meta); refused before decoding")


def decode_one(jpeg: bytes, size: int, out: np.ndarray, top: int = 0, left: int = 0,
               scratch: np.ndarray | None = None) -> str | None:
    """Decode ``jpeg`` and copy the window of ``out``'s size at (``top``, ``left``) of its
    ``size`` x ``size`` image into ``out`` (``(h, w, 3)`` uint8; the whole image when it is
    ``(size, size, 3)``, decoded straight into it).  ``scratch``, ``(size, size, 3)``
    uint8, is where an image is decoded before its window is copied (allocated when not
    given).  Returns what is wrong, or None."""
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(jpeg)
    except ValueError as error:
        return f"not a readable JPEG ({error})"
    problem = _size_problem(height, width, size)
    if problem:
        return problem
    whole_window = out.shape[:2] == (size, size)
    try:
        if (height, width) == (size, size):
            if whole_window:
                simplejpeg.decode_jpeg(jpeg, colorspace="RGB", buffer=out)
                return None
            image = scratch if scratch is not None else np.empty((size, size, 3), np.uint8)
            simplejpeg.decode_jpeg(jpeg, colorspace="RGB", buffer=image)
        else:
            whole = simplejpeg.decode_jpeg(jpeg, colorspace="RGB")
            y, x = (height - size) // 2, (width - size) // 2
            image = whole[y:y + size, x:x + size]
    except ValueError as error:  # truncated or corrupt data, or a colour space RGB cannot hold
        return f"cannot decode the JPEG ({error})"
    out[...] = image[top:top + out.shape[0], left:left + out.shape[1]]
    return None


class JpegDecoder:
    """A pool of ``threads`` decoding threads, started on first use, ended by :meth:`close`."""

    def __init__(self, threads: int | None = None):
        self.threads = threads or default_threads()
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def decode(self, jpegs: list[bytes], size: int, inner: int | None = None,
               offsets: np.ndarray | None = None,
               out: np.ndarray | None = None) -> tuple[np.ndarray, list[tuple[int, str]]]:
        """All of ``jpegs`` as ``(N, size, size, 3)`` uint8, or with ``inner`` and
        ``offsets`` (``(N, 2)``: top, left) each image's ``inner`` x ``inner`` window as
        ``(N, inner, inner, 3)``, written into ``out`` when given; and ``(case,
        problem)`` for each image that could not be decoded (its rows are then
        undefined).  Only the windows' rows are copied out of each decoded image, by the
        thread that decoded it."""
        inner = inner or size
        if out is None:
            out = np.empty((len(jpegs), inner, inner, 3), np.uint8)
        corners = offsets.tolist() if offsets is not None else [(0, 0)] * len(jpegs)
        chunks = np.array_split(np.arange(len(jpegs)), min(len(jpegs), 4 * self.threads) or 1)

        def run(cases: np.ndarray) -> list[tuple[int, str]]:
            found = []
            scratch = np.empty((size, size, 3), np.uint8) if inner != size else None
            for case in cases.tolist():
                top, left = corners[case]
                problem = decode_one(jpegs[case], size, out[case], top, left, scratch)
                if problem:
                    found.append((case, problem))
            return found

        if self.threads == 1:
            results = [run(chunk) for chunk in chunks]
        else:
            results = list(self._executor().map(run, chunks))
        return out, [bad for found in results for bad in found]

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="jpeg-decode")
            return self._pool

    def close(self) -> None:
        """End the decoding threads (a later decode starts new ones)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

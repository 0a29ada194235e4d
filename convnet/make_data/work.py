"""The work that runs in the worker processes, in chunks of a few dozen images.

:func:`convert_chunk` reads and converts source images (and adds the training
ones into pixel sums); :func:`sums_of_part` decodes a sub-batch that an earlier
run wrote, so its images count in the statistics without being converted again.
Both run through :func:`do_task`; :func:`run_in_order` hands the chunks to a pool of processes and yields the
results in the chunks' order, so the batches do not depend on the process count.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from typing import Callable, Iterable, Iterator, NamedTuple

from convnet.data.safe_pickle import load_dict
from convnet.make_data.convert import UnreadableImage, decode_rgb, square_jpeg
from convnet.make_data.sources import ImageRef, read_image_bytes
from convnet.make_data.statistics import PixelSums


class Conversion(NamedTuple):
    """How every image is converted (the options that change the bytes)."""

    size: int
    keep_borders: bool
    quality: int


class ChunkResult(NamedTuple):
    """Per image, its JPEG or the reason it was skipped; the pixel sums (None for
    test images)."""

    jpegs: list[bytes | str]
    sums: PixelSums | None


def convert_chunk(task: tuple[list[ImageRef], Conversion, bool]) -> ChunkResult:
    refs, conversion, with_sums = task
    sums = PixelSums(conversion.size) if with_sums else None
    results: list[bytes | str] = []
    for ref in refs:
        try:
            jpeg = square_jpeg(read_image_bytes(ref), conversion.size, conversion.keep_borders,
                               conversion.quality)
        except UnreadableImage as error:
            results.append(str(error))
            continue
        except OSError as error:
            results.append(f"cannot read it ({error.strerror or error})")
            continue
        if sums is not None:
            sums.add_image(decode_rgb(jpeg))
        results.append(jpeg)
    return ChunkResult(results, sums)


def sums_of_part(task: tuple[str, int]) -> ChunkResult:
    path, size = task
    sums = PixelSums(size)
    for jpeg in load_dict(path, ("data",))["data"]:
        sums.add_image(decode_rgb(jpeg.encode("latin1") if isinstance(jpeg, str) else jpeg))
    return ChunkResult([], sums)


def do_task(task: tuple[str, tuple]) -> ChunkResult:
    """Run one task: ``("convert", (refs, conversion, with_sums))`` or
    ``("sums", (part_path, size))``."""
    kind, arguments = task
    return _TASKS[kind](arguments)


_TASKS: dict[str, Callable[[tuple], ChunkResult]] = {"convert": convert_chunk,
                                                     "sums": sums_of_part}


def run_in_order(tasks: Iterable[tuple[str, tuple]], workers: int) -> Iterator[ChunkResult]:
    """The results of :func:`do_task` over ``tasks`` in their order, computed by
    ``workers`` processes (in this one for 1) at most a few tasks ahead of the
    consumer, so that results never pile up in memory."""
    if workers <= 1:
        yield from map(do_task, tasks)
        return
    # spawn, not fork: the parent may run threads (the progress bar's monitor)
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pending: deque = deque()
        for task in tasks:
            pending.append(pool.apply_async(do_task, (task,)))
            if len(pending) >= 3 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()

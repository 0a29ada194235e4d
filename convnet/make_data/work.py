"""The work that runs in the worker processes, in chunks of a few dozen images.

:func:`convert_chunk` reads and converts source images (and adds the training
ones into pixel sums); :func:`sums_of_part` decodes a sub-batch that an earlier
run wrote, so its images count in the statistics without being converted again.
Both run through :func:`do_task`, in this process or in the worker processes of
:mod:`~convnet.make_data.pool`, which hands the results back in the chunks' order,
so the batches do not depend on the process count.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from convnet.data.safe_pickle import load_dict
from convnet.data.photos.convert import UnreadableImage, decode_rgb, square_jpeg
from convnet.data.photos.sources import ImageRef, SkippedSource, read_image_bytes
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
        except (UnreadableImage, SkippedSource) as error:
            results.append(str(error))
            continue
        except OSError as error:
            results.append(f"cannot read it ({error.strerror or error})")
            continue
        except MemoryError:  # the process's memory limit (ulimit -v), not the machine's
            results.append("not enough memory to convert it")
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

"""The decoding pool: parallel decoding agrees with one thread, and its threads end."""

from __future__ import annotations

import threading

import numpy as np

from convnet.data import BatchPrefetcher, DataOptions, make_provider
from convnet.data.image.decode import JpegDecoder
from tests.support.jpeg_batches import class_images, encode_jpeg, write_image_set


def decode_threads(before: set) -> list[str]:
    """Names of the live decoding threads started since ``before`` (other tests' providers
    may still hold theirs)."""
    return sorted(t.name for t in set(threading.enumerate()) - before
                  if t.name.startswith("jpeg-decode"))


def test_threads_decode_exactly_what_one_thread_decodes_and_report_bad_cases():
    jpegs = [encode_jpeg(p) for p in class_images(np.arange(30) % 3, 16, 1)]
    jpegs[7] = b"junk"
    one, one_bad = JpegDecoder(1).decode(jpegs, 16)
    pool = JpegDecoder(3)
    many, many_bad = pool.decode(jpegs, 16)
    pool.close()
    good = np.arange(30) != 7
    np.testing.assert_array_equal(one[good], many[good])
    assert [c for c, _ in one_bad] == [c for c, _ in many_bad] == [7]


def test_prefetching_a_provider_that_decodes_in_parallel_then_closing_ends_every_thread(
        tmp_path):
    write_image_set(tmp_path, [0, 1, 2, 3], cases=16, size=16)
    before = set(threading.enumerate())
    provider = make_provider("image", str(tmp_path),
                             DataOptions(train_range=[0, 1, 2], test_range=[3], inner_size=12,
                                         decode_threads=2))
    with BatchPrefetcher(provider, provider.train_batches, train=True, epoch=1) as loader:
        next(loader)  # then leave early: the loader stops mid-way
    with BatchPrefetcher(provider, provider.train_batches, train=True, epoch=1) as loader:
        served = [batch_id for batch_id, _ in loader]
    assert served == [0, 1, 2]
    assert decode_threads(before) == ["jpeg-decode_0", "jpeg-decode_1"]
    provider.close()
    assert decode_threads(before) == []
    provider.get_batch(3, train=False)  # usable again after close: a new pool
    assert len(decode_threads(before)) == 2
    provider.close()
    assert decode_threads(before) == []

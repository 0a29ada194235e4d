"""What the data pipeline holds in host memory during training: the memory fit check's
figure for the batches in flight and the provider's own arrays.

The trainer trains one batch while a :class:`~convnet.data.prefetch.BatchPrefetcher`
(``--prefetch`` D, the depth of its queue) holds up to D more and its loader thread
makes the one after: loading a batch holds its raw images at full size (and, for
``dummy`` data, the class templates picked for its cases), counted as one
full-size float32 batch besides the batch it makes.  So with D + 2 or more
batches in the range a step runs beside D + 2 batches and one loading copy; with
fewer, all of them and the copy; with one, the one.  A test runs inside the
training loop: the training batches stay where they are and the test's own
prefetcher (depth 1) adds its batches in the same way (each of ``views`` crops under
``--multiview-test``).  The provider keeps its pixel mean (float32, one image) and
``dummy`` data its class templates.  Every column is counted as float32: the image
providers keep their images as stored (uint8, a quarter of that) until a device
makes them float, so for them the figure is an upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FLOAT = 4


@dataclass(frozen=True)
class DataMemory:
    """Bytes of host memory the data pipeline holds (see the module docstring)."""

    train_batch_bytes: int  # one training batch as the trainer gets it
    train_batches: float  # how many exist at once while a step runs (a loading copy counts)
    test_batch_bytes: int
    test_batches: float  # added while a test runs
    resident_bytes: int  # the provider's own arrays: pixel mean, dummy templates

    @property
    def training_bytes(self) -> int:
        """Held while a training step runs."""
        return int(self.train_batch_bytes * self.train_batches) + self.resident_bytes

    @property
    def testing_bytes(self) -> int:
        """Held while a test minibatch runs (the training batches stay)."""
        return self.training_bytes + int(self.test_batch_bytes * self.test_batches)

    def text(self, human_bytes) -> str:
        """One line for ``--print-plan``."""
        return (f"data in host memory (est.): {human_bytes(self.training_bytes)} while "
                f"training (about {self.train_batches:.1f} batches of "
                f"{human_bytes(self.train_batch_bytes)} in use, queued or loading, "
                f"{human_bytes(self.resident_bytes)} kept by the provider), "
                f"{human_bytes(self.testing_bytes)} while testing")


def in_flight(batches: int, batch_bytes: int, loading_bytes: int, depth: int = 1) -> float:
    """Batches (in units of ``batch_bytes``) a prefetching loop over ``batches``
    batches holds at once: the one in use, the ``depth`` queued, the one the loader
    makes and its loading copy (``loading_bytes``)."""
    if batches <= 1:
        return float(min(batches, 1))
    return min(batches, depth + 2) + loading_bytes / max(batch_bytes, 1)


def data_memory(provider, depth: int = 1) -> DataMemory:
    """The pipeline's memory for ``provider``'s train and test ranges, training batches
    prefetched ``depth`` ahead (reads the first batch of each to count its cases, as the
    trainer does)."""
    columns = sum(math.prod(shape) for index, shape in provider.data_dims.items())
    full_image = math.prod(provider.image_shape)
    train_cases = provider.num_cases(provider.train_batches[0]) if provider.train_batches else 0
    test_cases = provider.num_cases(provider.test_batches[0]) if provider.test_batches else 0
    train_bytes = FLOAT * train_cases * columns
    test_bytes = FLOAT * test_cases * (columns + (provider.num_views - 1)
                                       * math.prod(provider.data_dims[0]))
    return DataMemory(
        train_bytes, in_flight(len(provider.train_batches), train_bytes,
                               FLOAT * train_cases * full_image, depth),
        test_bytes, in_flight(len(provider.test_batches), test_bytes,
                              FLOAT * test_cases * full_image),
        provider.resident_bytes())

"""What the data pipeline holds in host memory during training: the memory fit check's
figure for the batches in flight and the provider's own arrays.

The trainer trains one batch while a :class:`~convnet.data.prefetch.BatchPrefetcher`
(depth 1) holds the next in its queue and its loader thread makes the one after:
loading it holds the raw batch and its centred float32 copy (and, for ``dummy``
data, the class templates picked for its cases), at most one full-size float32
batch besides the batch it makes.  So with three or more batches in the range a
step runs beside three batches and one loading copy; with two, two and the copy;
with one, the one.  A test runs inside the training loop: the training batches
stay where they are and the test's own prefetcher adds its batches in the same way
(each of ``views`` crops under ``--multiview-test``).  The provider keeps its
pixel mean (float32, one image) and ``dummy`` data its class templates.
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


def in_flight(batches: int, batch_bytes: int, loading_bytes: int) -> float:
    """Batches (in units of ``batch_bytes``) a prefetching loop over ``batches``
    batches holds at once: the one in use, the queued one, the one the loader makes
    and its loading copy (``loading_bytes``)."""
    if batches <= 1:
        return float(min(batches, 1))
    return min(batches, 3) + loading_bytes / max(batch_bytes, 1)


def data_memory(provider) -> DataMemory:
    """The pipeline's memory for ``provider``'s train and test ranges (reads the first
    batch of each to count its cases, as the trainer does)."""
    columns = sum(math.prod(shape) for index, shape in provider.data_dims.items())
    full_image = math.prod(provider.image_shape)
    train_cases = provider.num_cases(provider.train_batches[0]) if provider.train_batches else 0
    test_cases = provider.num_cases(provider.test_batches[0]) if provider.test_batches else 0
    train_bytes = FLOAT * train_cases * columns
    test_bytes = FLOAT * test_cases * (columns + (provider.num_views - 1)
                                       * math.prod(provider.data_dims[0]))
    return DataMemory(
        train_bytes, in_flight(len(provider.train_batches), train_bytes,
                               FLOAT * train_cases * full_image),
        test_bytes, in_flight(len(provider.test_batches), test_bytes,
                              FLOAT * test_cases * full_image),
        provider.resident_bytes())

"""``data_mean`` and ``color_pca`` of ``batches.meta``, from the training images.

Both are computed over every training image as it is stored (the JPEG decoded
again, so they describe exactly what a reader decodes), over the centre
``size`` x ``size`` square of each (the whole image unless ``--keep-borders``).
The images are streamed: each worker adds its images into integer sums
(:class:`PixelSums`), which are exact, so the result does not depend on how the
images were split between processes or in which order the sums were added.

As the original's ``batches.meta`` holds them (its make-data shipped them
precomputed as ``input_meta``):

* ``data_mean``: float32, shape (3 * size * size, 1), channel-major RGB (all red
  pixels row by row, then green, then blue), 0-255 scale;
* ``color_pca``: ``(stdevs, eigenvectors)``, float64, the square roots of the
  eigenvalues of the 3 x 3 covariance of the pixels' RGB values in ascending order,
  shape (3,), and the eigenvectors as the columns of a (3, 3) matrix (``numpy.linalg.eigh``'s
  order), so ``randn(n, 3) * stdevs @ eigenvectors.T`` is the original's colour noise.
"""

from __future__ import annotations

import numpy as np


class PixelSums:
    """Integer sums over images: the count, each channel's value at each pixel, each
    colour channel, and the products of every pair of colour channels."""

    def __init__(self, size: int):
        self.size = size
        self.images = 0
        self.pixels = 0
        self.per_pixel = np.zeros((3, size, size), dtype=np.int64)
        self.colour = np.zeros(3, dtype=np.int64)
        self.products = np.zeros((3, 3), dtype=np.int64)

    def add_image(self, rgb: np.ndarray) -> None:
        """Add one (height, width, 3) uint8 image, at least ``size`` on each side."""
        height, width = rgb.shape[:2]
        top, left = (height - self.size) // 2, (width - self.size) // 2
        square = rgb[top:top + self.size, left:left + self.size]
        self.per_pixel += square.transpose(2, 0, 1)
        colours = square.reshape(-1, 3).astype(np.float64)
        self.colour += colours.sum(axis=0).astype(np.int64)
        # each product sum is at most 255^2 * size^2 < 2^53: exact in float64
        self.products += np.rint(colours.T @ colours).astype(np.int64)
        self.images += 1
        self.pixels += len(colours)

    def merge(self, other: "PixelSums") -> None:
        self.per_pixel += other.per_pixel
        self.colour += other.colour
        self.products += other.products
        self.images += other.images
        self.pixels += other.pixels

    def data_mean(self) -> np.ndarray:
        return (self.per_pixel / self.images).astype(np.float32).reshape(-1, 1)

    def color_pca(self) -> tuple[np.ndarray, np.ndarray]:
        mean = self.colour / self.pixels
        covariance = self.products / self.pixels - np.outer(mean, mean)
        eigenvalues, eigenvectors = np.linalg.eigh(covariance)
        return np.sqrt(np.clip(eigenvalues, 0, None)), eigenvectors

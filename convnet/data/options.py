"""What a data provider is told: the data-related options of a run, one record for
every provider (each reads the fields that concern it)."""

from __future__ import annotations

from dataclasses import dataclass

#: The largest side photos are brought to (make-data's --size, --image-size): an image
#: of 4096 x 4096 is 48 MiB decoded, already far beyond what a convnet of this engine
#: trains on, and a typo must not make every image huge.
MAX_IMAGE_SIDE = 4096
#: The original's JPEG quality (``JPEG_QUALITY`` in its ``pyext.h``): what make-data
#: stores, and what the photo-folder provider decodes again (the same pixels).  Here,
#: not beside the conversion, so that make-data's options are read without Pillow.
DEFAULT_QUALITY = 95


@dataclass
class DataOptions:
    """Options a provider understands; ``None`` ranges mean the provider's defaults.

    ``data_dims``, ``num_classes`` and ``cases_per_batch`` are read by the
    ``dummy`` provider only, ``skip_bad_images`` and ``decode_threads`` by ``image``, and
    ``image_size`` by ``image`` on a folder of class folders.
    """

    data_path: str | None = None
    train_range: list[int] | None = None
    test_range: list[int] | None = None
    inner_size: int = 0
    color_noise: float = 0.0
    scalar_mean: float | None = None
    multiview_test: bool = False
    seed: int = 0
    data_dims: dict[int, tuple[int, ...]] | None = None
    num_classes: int | None = None
    cases_per_batch: int = 512
    skip_bad_images: bool = False
    decode_threads: int | None = None
    image_size: int = 256  # the side photos in class folders are brought to

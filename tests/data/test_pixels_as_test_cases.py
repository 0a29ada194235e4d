"""DataProvider.test_cases_from_pixels: raw pixels from elsewhere get exactly what a
stored test case gets (mean, centre crop, the views of --multiview-test)."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.data import DataOptions, make_provider
from convnet.errors import DataError
from tests.support.cli import write_batch_folder


@pytest.fixture
def folder(tmp_path):
    write_batch_folder(tmp_path, batches=3, cases=20, side=8)
    return tmp_path


@pytest.mark.parametrize("inner, multiview", [(0, False), (6, False), (6, True), (8, True)])
def test_raw_pixels_become_the_providers_test_cases(folder, inner, multiview):
    provider = make_provider("convnet-batches", options=DataOptions(
        data_path=str(folder), train_range=[1, 2], test_range=[3], inner_size=inner,
        multiview_test=multiview))
    raw, _ = provider._load(3)
    made = provider.test_cases_from_pixels(raw)
    if provider.num_views > 1:
        np.testing.assert_array_equal(made, provider.get_test_views(3)[0])
        np.testing.assert_array_equal(made[0], provider.get_batch(3, train=False)[0])
    else:
        np.testing.assert_array_equal(made, provider.get_batch(3, train=False)[0])
    assert made.dtype == np.float32


def test_pixel_units_are_the_providers():
    digits = make_provider("digits", options=DataOptions())
    dummy = make_provider("dummy", options=DataOptions(data_dims={0: (1, 8, 8), 1: (1,)},
                                                       num_classes=3))
    assert digits.pixel_max == 1.0
    assert dummy.pixel_max is None
    raw, _ = digits._load(1)
    assert 0 <= raw.min() and raw.max() <= digits.pixel_max


def test_pixels_beyond_the_providers_units_are_refused():
    digits = make_provider("digits", options=DataOptions())
    raw, _ = digits._load(6)
    digits.test_cases_from_pixels(raw)  # 0..1: the data's own
    with pytest.raises(DataError, match=r"the images to test: pixels run from 0 to 255, "
                                        r"but this data's are 0\.\.1"):
        digits.test_cases_from_pixels(np.round(raw * 255).astype(np.uint8))
    with pytest.raises(DataError, match="pixels run from -0.5 to"):
        digits.test_cases_from_pixels(raw - 0.5)  # already centred
    dummy = make_provider("dummy", options=DataOptions(data_dims={0: (1, 8, 8), 1: (1,)},
                                                       num_classes=3))
    dummy.test_cases_from_pixels(np.full((2, 1, 8, 8), -7.0, np.float32))  # no pixels

"""--show-filters and --show-preds draw PNGs of a saved net; a layer that has no
filters and an existing picture are one line each."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.app.using.filters_picture import filter_image, scaled_per_filter
from convnet.optional import has_matplotlib
from tests.support.cli import assert_clean_error, run_main
from tests.support.trained_runs import train_digits

pytestmark = pytest.mark.skipif(not has_matplotlib(), reason="draws PNGs")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_digits(tmp_path_factory.mktemp("digits-run"))


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.mark.parametrize("layer", ["conv1", "conv2"])
def test_show_filters_draws_a_conv_layers_filters(run, tmp_path, capsys, layer):
    code, out, _ = run_main(capsys, "--load-file", run, "--show-filters", layer,
                       "--out", tmp_path / "f.png")
    assert code == 0 and "wrote" in out
    width, height = png_size(tmp_path / "f.png")
    assert 300 <= width <= 2000 and 200 <= height <= 2000


def test_show_preds_draws_test_cases_with_their_bars(run, tmp_path, capsys):
    code, _, _ = run_main(capsys, "--load-file", run, "--show-preds", "6", "--out", tmp_path / "p.png")
    assert code == 0
    width, height = png_size(tmp_path / "p.png")
    assert width > height > 200


def test_colour_filters_are_scaled_per_filter_into_rgb_tiles():
    weights = np.random.default_rng(0).normal(size=(5, 3, 4, 4)).astype(np.float32)
    weights[1] *= 100  # a filter of a much larger norm still fills [0, 1]
    scaled = scaled_per_filter(weights)
    assert np.allclose(scaled.reshape(5, -1).min(axis=1), 0)
    assert np.allclose(scaled.reshape(5, -1).max(axis=1), 1)
    image, shown = filter_image(weights)
    assert image.shape == (2 * 5 + 1, 3 * 5 + 1, 3) and "RGB" in shown  # 2 rows of 3 tiles
    np.testing.assert_array_equal(image[1:5, 6:10], scaled[1].transpose(1, 2, 0))


def test_a_layer_without_filters_is_one_line(run, tmp_path, capsys):
    code, _, err = run_main(capsys, "--load-file", run, "--show-filters", "pool1",
                       "--out", tmp_path / "f.png")
    assert_clean_error((code, err), 2, "'pool1' is a pool layer", "conv1, conv2")
    assert not (tmp_path / "f.png").exists()


def test_an_existing_picture_is_kept_and_out_is_required(run, tmp_path, capsys):
    (tmp_path / "f.png").write_text("keep")
    code, _, err = run_main(capsys, "--load-file", run, "--show-filters", "conv1",
                       "--out", tmp_path / "f.png")
    assert_clean_error((code, err), 2, "f.png exists", "--overwrite")
    assert (tmp_path / "f.png").read_text() == "keep"
    code, _, err = run_main(capsys, "--load-file", run, "--show-preds", "4")
    assert_clean_error((code, err), 2, "--show-preds draws a picture", "--out")

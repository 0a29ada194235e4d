"""--predict: image files get a test case's preprocessing and the net's test-mode
probabilities, on the terminal and in the CSV; bad input is one line and touches
nothing."""

from __future__ import annotations

import csv
import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from convnet.app.command_line.main import main
from convnet.app.command_line.parser import build_parser
from convnet.app.options import resolve_options
from convnet.app.using.images import decode
from convnet.app.using.saved_net import open_saved_net
from convnet.data.digits import DigitsProvider, _split
from convnet.optional import has_matplotlib, require_pillow
from tests.support.cli import (HYBRID_DEF, HYBRID_PARAMS, SINGLE_DEF, SINGLE_PARAMS,
                               assert_clean_error, run_main, write_batch_folder)
from tests.support.trained_runs import digit_pngs, train_digits, train_dummy

Image = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_digits(tmp_path_factory.mktemp("digits-run"))


def engine_probabilities(run, pixels: np.ndarray) -> np.ndarray:
    """The net's test-mode probabilities of 8-bit digit pixels, with the preprocessing
    written out here: scaled to 0..1, minus the per-pixel mean of training batches 1-5."""
    images, _ = _split()
    mean = np.concatenate(images[:5]).mean(axis=0, dtype=np.float64).astype(np.float32)
    cases = (pixels[:, None].astype(np.float32) * np.float32(1 / 255) - mean).astype(np.float32)
    opts = resolve_options(build_parser().parse_args(["--load-file", str(run), "--test-only"]))
    saved = open_saved_net(opts)
    try:
        return saved.trainer.features([cases, np.zeros((len(cases), 1), np.float32)], "probs")
    finally:
        saved.close()


def read_csv(path):
    with open(path, newline="") as file:
        rows = list(csv.reader(file))
    return rows[0], rows[1:]


def test_the_csv_holds_the_nets_test_mode_probabilities(run, tmp_path, capsys):
    pixels = digit_pngs(tmp_path / "digits")
    out_csv = tmp_path / "preds.csv"
    code, out, err = run_main(capsys, "--load-file", run, "--predict", tmp_path / "digits",
                              "--predict-out", out_csv, "--top", "3", "--mini", "2")  # 3 minibatches
    assert code == 0
    assert "image/s" not in err and "%|" not in err  # no progress bar: not a terminal
    header, rows = read_csv(out_csv)
    assert header == ["file"] + [str(d) for d in range(10)]
    assert [r[0] for r in rows] == [str(tmp_path / "digits" / f"{i}.png") for i in range(5)]
    got = np.array([[float(v) for v in r[1:]] for r in rows])
    np.testing.assert_allclose(got, engine_probabilities(run, pixels), atol=1e-5)
    lines = out.splitlines()
    assert len(lines) == 5
    best = got[0].argmax()
    assert lines[0].startswith(f"{tmp_path / 'digits' / '0.png'}  {best} {100 * got[0, best]:.1f}%")
    assert lines[0].count("%") == 3


def test_any_size_and_colour_is_resized_and_cropped_like_the_stored_images(tmp_path):
    """A 24x8 colour picture whose middle square is white becomes an all-white 8x8
    grey case (short side to 8, centre square kept), in the provider's 0..1 units."""
    picture = np.zeros((8, 24, 3), np.uint8)
    picture[:, 8:16] = 255
    Image.fromarray(picture).save(tmp_path / "wide.png")
    pixels = decode(tmp_path / "wide.png", 1, 8, 1.0, require_pillow("test"))
    assert pixels.shape == (1, 8, 8)
    np.testing.assert_allclose(pixels, 1.0, atol=1e-6)
    small = decode(tmp_path / "wide.png", 3, 4, 255.0, require_pillow("test"))
    assert small.shape == (3, 4, 4)  # colour, halved: the black sides blur into the edges
    np.testing.assert_allclose(small[:, :, 1:3], 255.0)
    assert (small[:, :, [0, 3]] < 255).all()


def _left_half_white(mode: str = "L") -> Image.Image:
    picture = np.zeros((8, 8), np.uint8)
    picture[:, :4] = 255
    return Image.fromarray(picture).convert(mode)


def test_a_phone_photo_is_read_upright_as_make_data_stores_it(tmp_path):
    """EXIF orientation 6 (turn 90 degrees clockwise to show): the left half of the
    stored pixels is the top half of the photo as its owner sees it."""
    exif = Image.Exif()
    exif[0x0112] = 6
    _left_half_white("RGB").save(tmp_path / "phone.jpg", exif=exif, quality=100)
    pixels = decode(tmp_path / "phone.jpg", 1, 8, 1.0, require_pillow("test"))[0]
    assert pixels[:3].min() > 0.9 and pixels[5:].max() < 0.1


def test_deep_grey_and_transparency_are_read_as_make_data_reads_them(tmp_path):
    """A 16-bit grey PNG is scaled by its range (not clipped to white), and transparent
    pixels are white (as a viewer shows them; make-data composites them so)."""
    deep = np.asarray(_left_half_white()).astype(np.uint16) * 257 // 2  # mid grey and black
    Image.fromarray(deep).save(tmp_path / "deep.png")
    pixels = decode(tmp_path / "deep.png", 1, 8, 255.0, require_pillow("test"))[0]
    np.testing.assert_allclose(pixels[:, 2], 127, atol=1)
    np.testing.assert_allclose(pixels[:, 6], 0, atol=1)
    clear = np.zeros((8, 8, 4), np.uint8)  # black, but wholly transparent
    Image.fromarray(clear, "RGBA").save(tmp_path / "clear.png")
    pixels = decode(tmp_path / "clear.png", 3, 8, 255.0, require_pillow("test"))
    np.testing.assert_allclose(pixels, 255)


def test_an_empty_file_in_a_folder_is_named_as_empty(run, tmp_path, capsys):
    digit_pngs(tmp_path / "digits", count=1)
    (tmp_path / "digits" / "empty.png").write_bytes(b"")
    code, _, err = run_main(capsys, "--load-file", run, "--predict", tmp_path / "digits")
    assert code == 0 and "empty.png: cannot read it as an image (an empty file (0 bytes))" in err


def test_a_folder_is_read_as_make_data_reads_a_class_folder(run, tmp_path, capsys):
    """Hidden files (the ``._0.png`` a Mac leaves beside ``0.png``) are left out as
    make-data leaves them out; an image-named link loop or FIFO is skipped with a
    warning, not dropped without a word (nor opened: a FIFO would block)."""
    digit_pngs(tmp_path / "digits", count=1)
    (tmp_path / "digits" / "._0.png").write_bytes(b"\0\5\26\7 resource fork")
    (tmp_path / "digits" / "loop.png").symlink_to("loop.png")
    os.mkfifo(tmp_path / "digits" / "fifo.pnm")
    code, out, err = run_main(capsys, "--load-file", run, "--predict", tmp_path / "digits")
    assert code == 0 and len(out.splitlines()) == 1 and "._0.png" not in err
    assert "loop.png cannot be read (Too many levels of symbolic links)" in err
    assert "fifo.pnm is a FIFO (named pipe), not a regular file" in err
    assert "skipped 2" in err


def test_one_image_on_a_net_of_two_shards_is_predicted(tmp_path, capsys):
    """The bundled hybrid net cuts a minibatch into two shards; one image is still one
    case (the engine's minibatch gets a copy of it, whose result is dropped)."""
    hybrid = tmp_path / "hybrid"
    assert main(["--no-progress", "--layer-def", str(HYBRID_DEF), "--layer-params",
                 str(HYBRID_PARAMS), "--gpu", "0,1", "--epochs", "1",
                 "--save-path", str(hybrid)]) == 0
    capsys.readouterr()
    digit_pngs(tmp_path / "d", count=1, scale=4)
    code, out, _ = run_main(capsys, "--load-file", hybrid, "--predict", tmp_path / "d" / "0.png")
    assert code == 0 and len(out.splitlines()) == 1


def test_a_broken_file_in_a_folder_is_skipped_with_a_warning(run, tmp_path, capsys):
    digit_pngs(tmp_path / "digits", count=2)
    (tmp_path / "digits" / "broken.png").write_text("not an image")
    code, out, err = run_main(capsys, "--load-file", run, "--predict", tmp_path / "digits",
                         "--predict-out", tmp_path / "p.csv")
    assert code == 0
    assert "broken.png: cannot read it as an image" in err and "skipped 1" in err
    _, rows = read_csv(tmp_path / "p.csv")
    assert len(rows) == 2 and len(out.splitlines()) == 2


def test_a_broken_file_named_on_the_command_line_stops_and_writes_nothing(run, tmp_path,
                                                                           capsys):
    digit_pngs(tmp_path / "digits", count=1)
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    code, _, err = run_main(capsys, "--load-file", run, "--predict", tmp_path / "digits" / "0.png",
                       tmp_path / "broken.jpg", "--predict-out", tmp_path / "p.csv")
    assert_clean_error((code, err), 1, "broken.jpg: cannot read it as an image")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.jpg", "digits"]


def test_a_file_name_that_is_not_utf8_is_escaped_in_the_csv_and_on_the_terminal(
        run, tmp_path, capsys):
    """``bad\\xffname.png`` (a name from an old zip): the CSV is written, UTF-8, with the
    byte shown as ``\\xff``, and so is the terminal's line (pytest's capture, like a
    terminal in a UTF-8 locale, takes no lone surrogate)."""
    digit_pngs(tmp_path / "digits", count=2)
    os.rename(tmp_path / "digits" / "1.png", os.fsdecode(bytes(tmp_path / "digits") +
                                                      b"/bad\xffname.png"))
    code, out, _ = run_main(capsys, "--load-file", run, "--predict", tmp_path / "digits",
                            "--predict-out", tmp_path / "p.csv")
    assert code == 0
    shown = f"{tmp_path / 'digits'}/bad\\xffname.png"
    assert [r[0] for r in read_csv(tmp_path / "p.csv")[1]] == [
        str(tmp_path / "digits" / "0.png"), shown]
    assert out.splitlines()[1].startswith(f"{shown}  ")


def test_class_names_that_are_not_utf8_are_escaped(tmp_path, capsys, monkeypatch):
    """A class folder named ``bad\\xffname`` gives make-data's ``batches.meta`` that label
    name (a lone surrogate for the byte); the CSV's header and the terminal show it
    escaped (here on the digits, whose class 2 is given that name for the training
    run and its use)."""
    real_init = DigitsProvider.__init__

    def renamed(self, options):
        real_init(self, options)
        self.label_names[2] = os.fsdecode(b"bad\xffname")

    monkeypatch.setattr(DigitsProvider, "__init__", renamed)
    run = train_digits(tmp_path / "run")
    capsys.readouterr()
    digit_pngs(tmp_path / "digits", count=2)
    code, out, _ = run_main(capsys, "--load-file", run, "--predict", tmp_path / "digits",
                            "--predict-out", tmp_path / "p.csv", "--top", "10")
    assert code == 0
    assert read_csv(tmp_path / "p.csv")[0][3] == "bad\\xffname"
    assert all("bad\\xffname " in line for line in out.splitlines())


def test_a_missing_image_is_one_line(run, tmp_path, capsys):
    code, _, err = run_main(capsys, "--load-file", run, "--predict", tmp_path / "nope.png")
    assert_clean_error((code, err), 1, "nope.png")


def test_an_existing_csv_is_kept_without_overwrite(run, tmp_path, capsys):
    digit_pngs(tmp_path / "digits", count=1)
    (tmp_path / "p.csv").write_text("keep me")
    code, _, err = run_main(capsys, "--load-file", run, "--predict", tmp_path / "digits",
                       "--predict-out", tmp_path / "p.csv")
    assert_clean_error((code, err), 2, "p.csv exists", "--overwrite")
    assert (tmp_path / "p.csv").read_text() == "keep me"
    assert run_main(capsys, "--load-file", run, "--predict", tmp_path / "digits",
               "--predict-out", tmp_path / "p.csv", "--overwrite")[0] == 0
    assert (tmp_path / "p.csv").read_text().startswith("file,0,1")


def test_a_csv_that_cannot_be_written_is_one_line(run, tmp_path, capsys):
    digit_pngs(tmp_path / "digits", count=1)
    (tmp_path / "a-file").write_text("")
    code, _, err = run_main(capsys, "--load-file", run, "--predict", tmp_path / "digits",
                       "--predict-out", tmp_path / "a-file" / "p.csv")
    assert_clean_error((code, err), 2, "--predict-out", "does not exist")


def test_predict_needs_a_saved_net(tmp_path, capsys):
    code, _, err = run_main(capsys, "--predict", tmp_path)
    assert_clean_error((code, err), 2, "--predict uses a trained net", "--load-file")


def test_a_net_trained_on_dummy_data_is_refused(tmp_path, capsys):
    dummy = train_dummy(tmp_path / "dummy")
    digit_pngs(tmp_path / "digits", count=1)
    code, _, err = run_main(capsys, "--load-file", dummy, "--predict", tmp_path / "digits")
    assert_clean_error((code, err), 1, "needs a net whose input is an image",
                       "'dummy' data are not pictures")


def test_the_checkpoint_of_another_net_is_refused(run, tmp_path, capsys):
    """The saved weights against a config whose conv layers have 16 filters, not 32."""
    digit_pngs(tmp_path / "digits", count=1)
    other = tmp_path / "other.cfg"
    other.write_text(SINGLE_DEF.read_text().replace("filters=32", "filters=16")
                     .replace("channels=32", "channels=16"))
    code, _, err = run_main(capsys, "--load-file", run, "--layer-def", other,
                       "--layer-params", SINGLE_PARAMS, "--predict", tmp_path / "digits")
    assert_clean_error((code, err), 1, "does not fit this net")


def test_multiview_predictions_average_the_views_of_each_image(tmp_path, capsys):
    """A net trained on 8x8 crops of 10x10 batches: --multiview-test predicts the mean
    of the ten views' probabilities, and --show-preds draws through the same views."""
    batches = write_batch_folder(tmp_path / "batches", batches=2, cases=64, side=10)
    data = ["--data-provider", "convnet-batches", "--data-path", str(batches),
            "--train-range", "1", "--test-range", "2", "--inner-size", "8"]
    assert main(["--no-progress", "--layer-def", str(SINGLE_DEF), "--layer-params",
                 str(SINGLE_PARAMS), *data, "--epochs", "1", "--mini", "32",
                 "--save-path", str(tmp_path / "run")]) == 0
    pixels = np.random.default_rng(0).integers(0, 256, (3, 10, 10)).astype(np.uint8)
    (tmp_path / "png").mkdir()
    for i, p in enumerate(pixels):
        Image.fromarray(p).save(tmp_path / "png" / f"{i}.png")
    capsys.readouterr()
    assert main(["--load-file", str(tmp_path / "run"), "--multiview-test", "--predict",
                 str(tmp_path / "png"), "--predict-out", str(tmp_path / "p.csv")]) == 0
    _, rows = read_csv(tmp_path / "p.csv")
    got = np.array([[float(v) for v in r[1:]] for r in rows])

    opts = resolve_options(build_parser().parse_args(
        ["--load-file", str(tmp_path / "run"), "--multiview-test", "--test-only"]))
    saved = open_saved_net(opts)
    try:
        views = saved.provider.get_test_views(2)[0]  # to know the view count
        assert views.shape[0] == 10
        cases = saved.provider.test_cases_from_pixels(pixels[:, None].astype(np.float32))
        labels = np.zeros((3, 1), np.float32)
        want = np.mean([saved.trainer.features([view, labels], "probs") for view in cases],
                       axis=0)
    finally:
        saved.close()
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(got.sum(axis=1), 1, atol=1e-5)
    if has_matplotlib():
        assert main(["--load-file", str(tmp_path / "run"), "--multiview-test",
                     "--show-preds", "4", "--out", str(tmp_path / "s.png")]) == 0


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs a folder nobody can write")
@pytest.mark.parametrize("output", [["--predict", "DIGITS", "--predict-out", "/proc/p.csv"],
                                    ["--export-onnx", "/proc/m.onnx"],
                                    ["--show-filters", "conv1", "--out", "/proc/f.png"]])
def test_an_output_that_cannot_be_written_is_one_line(run, tmp_path, capsys, output):
    """/proc takes no new files: the write fails after the work, with one line."""
    if "--export-onnx" in output:
        pytest.importorskip("onnx")
    if "--show-filters" in output and not has_matplotlib():
        pytest.skip("draws a PNG")
    digit_pngs(tmp_path / "digits", count=1)
    args = [str(tmp_path / "digits") if a == "DIGITS" else a for a in output]
    code, _, err = run_main(capsys, "--load-file", run, *args)
    assert_clean_error((code, err), 1, "cannot write", output[-1])


class _ReaderGoneAfterOneLine(io.StringIO):
    """stdout piped into ``head -1``: a write after the first line is a broken pipe."""

    def write(self, text):
        if "\n" in self.getvalue():
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_a_reader_of_the_lines_that_goes_away_leaves_the_csv_whole(run, tmp_path,
                                                                   monkeypatch, capsys):
    digit_pngs(tmp_path / "digits")
    monkeypatch.setattr(sys, "stdout", _ReaderGoneAfterOneLine())
    code = main(["--load-file", str(run), "--predict", str(tmp_path / "digits"),
                 "--predict-out", str(tmp_path / "p.csv"), "--mini", "2"])
    assert code == 0 and "error" not in capsys.readouterr().err
    _, rows = read_csv(tmp_path / "p.csv")
    assert [r[0] for r in rows] == [str(tmp_path / "digits" / f"{i}.png") for i in range(5)]

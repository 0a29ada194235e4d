"""What a notebook user gets wrong with the Python API (docs/API.md), each answered by one
:class:`~convnet.errors.ConvnetError` that says what to give instead."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import convnet
from convnet.app.command_line.main import main
from convnet.errors import DataError, UsageError
from tests.support.cli import SINGLE_DEF, SINGLE_PARAMS, write_batch_folder
from tests.support.trained_runs import train_digits


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    with convnet.load(train_digits(tmp_path_factory.mktemp("api-inputs") / "run")) as opened:
        yield opened


def test_load_without_a_path_says_what_it_takes():
    with pytest.raises(UsageError, match="convnet.load: give the path of a checkpoint"):
        convnet.load(None)


@pytest.mark.parametrize("images", [None, "abc", [[1, 2], [3]], {"a": 1}])
def test_predict_takes_an_array_of_images(net, images):
    with pytest.raises(DataError, match=r"predict: images should be a numpy array "
                                        r"\(N, 1, 8, 8\)"):
        net.predict(images)


def test_predict_refuses_pixels_of_another_scale(net):
    images, _ = net.test_batch()  # 0..1, as the digits are stored
    with pytest.raises(DataError, match=r"pixels run from 0 to 255, but this data's are "
                                        r"0\.\.1"):
        net.predict(np.round(images * 255).astype(np.uint8))


def test_export_onnx_onto_a_file_says_how_to_replace_it_from_python(net, tmp_path):
    pytest.importorskip("onnx")
    (tmp_path / "net.onnx").write_bytes(b"kept")
    with pytest.raises(UsageError, match=r"net.onnx exists and this run would replace it: "
                                         r"to keep it, give another path; to replace it, "
                                         r"give overwrite=True"):
        net.export_onnx(tmp_path / "net.onnx")
    assert (tmp_path / "net.onnx").read_bytes() == b"kept"


def test_test_batch_takes_a_batch_number(net):
    assert net.test_batch(np.int64(6))[0].shape == net.test_batch()[0].shape
    with pytest.raises(UsageError, match=r"test_batch: batch_id is a batch number such as "
                                         r"6, not '6'"):
        net.test_batch("6")


def test_a_result_saved_to_a_relative_path_loads_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = convnet.train(layer_def=SINGLE_DEF, layer_params=SINGLE_PARAMS, epochs=1,
                           save_path="run", no_progress=True)
    assert "saved to run)" in repr(result)
    monkeypatch.chdir(tmp_path.parent)  # as os.chdir in a notebook
    assert result.checkpoint == tmp_path / "run" / "checkpoint.npz"
    with result.load() as net:
        assert net.predict(net.test_batch()[0][:2]).shape == (2, 10)


def test_plan_text_is_what_print_plan_prints(net, capsys):
    assert main(["--load-file", str(net.options.resume.checkpoint), "--print-plan"]) == 0
    printed = capsys.readouterr().out
    assert "Precision: fp32" in printed and "host RAM needed" in printed
    assert net.plan_text() + "\n" == printed


def test_a_net_dropped_without_close_stops_its_device_threads(net):
    def device_threads() -> int:
        return sum(t.name.startswith("device-") and t.is_alive() for t in threading.enumerate())

    before = device_threads()
    dropped = convnet.load(net.options.resume.checkpoint, gpu=[0, 0])  # two workers
    assert device_threads() == before + 2
    del dropped  # as a notebook cell run again rebinds its name
    gc.collect()
    assert device_threads() == before


@pytest.mark.parametrize("shape", [(64,), (8, 8), (2, 8, 8, 1)])
def test_predict_names_the_shape_it_got(net, shape):
    found = "x".join(map(str, shape))
    with pytest.raises(DataError, match=rf"images to test should be N x 1x8x8, found {found}$"):
        net.predict(np.zeros(shape, np.float32))


def test_predict_of_one_image_without_its_batch_axis_says_to_add_it(net):
    with pytest.raises(DataError, match=r"found 1x8x8 \(one image: give it as a batch of "
                                        r"one, images\[None\]\)"):
        net.predict(np.zeros((1, 8, 8), np.float32))


def test_export_onnx_takes_overwrite_as_true_or_false(net, tmp_path):
    (tmp_path / "net.onnx").write_bytes(b"kept")
    with pytest.raises(UsageError, match="export_onnx: overwrite is True or False, not 'no'"):
        net.export_onnx(tmp_path / "net.onnx", overwrite="no")  # a truthy string
    with pytest.raises(UsageError, match="export_onnx: give the path of the file to write"):
        net.export_onnx(None)
    assert (tmp_path / "net.onnx").read_bytes() == b"kept"


def test_a_run_whose_data_moved_says_the_checkpoint_named_them(tmp_path):
    batches = write_batch_folder(tmp_path / "batches", batches=2, cases=32)
    convnet.train(layer_def=SINGLE_DEF, layer_params=SINGLE_PARAMS, epochs=1, mini=32,
                  data_provider="convnet-batches", data_path=batches,
                  save_path=tmp_path / "run", no_progress=True)
    batches.rename(tmp_path / "moved")
    with pytest.raises(DataError, match=r"run/checkpoint.npz: the run's --data-path .*batches "
                                        r"does not exist; give --data-path where the data "
                                        r"are now"):
        convnet.load(tmp_path / "run")
    with convnet.load(tmp_path / "run", data_path=tmp_path / "moved") as moved:
        assert moved.image_shape == (1, 8, 8)

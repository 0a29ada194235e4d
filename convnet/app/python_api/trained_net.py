"""``convnet.load(path)``: a trained net to predict with, export, and look at.

The saved run is opened as ``--predict`` and ``--export-onnx`` open it
(:func:`convnet.app.using.saved_net.open_saved_net`: the run's options, devices, data
provider and weights), so a prediction here is what ``--predict`` computes for the same
pixels, and the exported model is ``--export-onnx``'s.
"""

from __future__ import annotations

import operator
import weakref
from pathlib import Path

import numpy as np

from convnet.app.command_line.commands import plan_report, plan_report_text
from convnet.app.options import RunOptions, check_output_file
from convnet.app.python_api.calls import as_on_the_command_line, options_of
from convnet.app.using.onnx_export import saved_net_model, write_model
from convnet.app.using.saved_net import SavedNet, open_saved_net
from convnet.config.model import NetConfig
from convnet.errors import DataError, UsageError
from convnet.optional import require_onnx
from convnet.plan.ops import Plan


class TrainedNet:
    """A trained net on the devices of its run (close it, or use it in a ``with`` block,
    to stop their worker threads; a net dropped unclosed, as when a notebook cell runs
    again, is closed when it is collected, so its threads and memory do not pile up)."""

    def __init__(self, saved: SavedNet):
        self._saved = saved
        self._close = weakref.finalize(self, saved.close)  # runs once: close() or collected

    @property
    def options(self) -> RunOptions:
        """The run's options, as resolved for this net."""
        return self._saved.opts

    @property
    def net(self) -> NetConfig:
        return self._saved.net

    @property
    def plan(self) -> Plan:
        """Where each layer runs and what crosses devices (:meth:`plan_text` prints it)."""
        return self._saved.trainer.plan

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(channels, height, width) of the images :meth:`predict` takes."""
        return tuple(int(d) for d in self._saved.provider.image_shape)

    @property
    def pixel_max(self) -> float | None:
        """The pixels' scale: 0..pixel_max (1 for digits, 255 for CIFAR; None for data
        that are not pictures)."""
        return self._saved.provider.pixel_max

    @property
    def label_names(self) -> list[str]:
        return self._saved.label_names

    def plan_text(self) -> str:
        """The plan as ``--print-plan`` prints it (with its memory estimate, precision,
        sync and Winograd notes)."""
        return plan_report_text(plan_report(self.options, self.net, self.plan))

    def predict(self, images) -> np.ndarray:
        """Class probabilities, (N, classes), of ``images``: (N, C, H, W) in the data's
        own pixel units (:attr:`image_shape`, 0..:attr:`pixel_max`), preprocessed as a
        test case is (the mean subtracted, the centre window cut, ``--multiview-test``'s
        views averaged)."""
        images = self._image_array(images)
        step = self.options.mini
        with as_on_the_command_line():
            parts = [self._saved.probabilities(
                         self._saved.provider.test_cases_from_pixels(images[i:i + step]))
                     for i in range(0, len(images), step)]
        return (np.concatenate(parts) if parts
                else np.empty((0, self._saved.num_classes), np.float32))

    def _image_array(self, images) -> np.ndarray:
        """``images`` as float32 pixels; anything numpy cannot make an array of numbers
        of is refused here, saying what :meth:`predict` takes (a wrong shape is refused
        by the provider, which names the one it needs)."""
        try:
            array = np.asarray(images, dtype=np.float32)
        except (TypeError, ValueError):
            array = None
        if array is None or array.ndim == 0:
            shape = ", ".join(map(str, ("N", *self.image_shape)))
            pixels = "" if self.pixel_max is None else f" of pixels 0..{self.pixel_max:g}"
            raise DataError(f"predict: images should be a numpy array ({shape}){pixels}, "
                            f"not {type(images).__name__}")
        return array

    def test_batch(self, batch_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(images, labels) of a batch of the run's data (the first test batch by
        default), the images as :meth:`predict` takes them."""
        provider = self._saved.provider
        first = provider.test_batches[0]
        if batch_id is None:
            return provider.raw_batch(first)
        try:
            number = operator.index(batch_id)
        except TypeError:  # "6" would be looked up, and not found, as a name
            raise UsageError(f"test_batch: batch_id is a batch number such as {first}, not "
                             f"{batch_id!r}") from None
        return provider.raw_batch(number)

    def export_onnx(self, path, overwrite: bool = False) -> Path:
        """Write the net's test-mode forward pass as an ONNX model, as ``--export-onnx``
        does (raw pixels in, probabilities out); an existing file only with
        ``overwrite``.  Its path."""
        if path is None:
            raise UsageError("export_onnx: give the path of the file to write")
        if not isinstance(overwrite, (bool, np.bool_)):  # "no" is true: it would replace
            raise UsageError(f"export_onnx: overwrite is True or False, not {overwrite!r}")
        path = Path(path)
        onnx = require_onnx("export_onnx")
        check_output_file("export_onnx", path, overwrite, keep="give another path",
                          replace="give overwrite=True")
        model, _, _ = saved_net_model(onnx, self._saved, path)
        write_model(model, path)
        return path

    def close(self) -> None:
        self._close()

    def __enter__(self) -> TrainedNet:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"TrainedNet({self.options.layer_def.name}, {self.plan.scheme} on "
                f"{self.plan.num_devices} device(s), {len(self.label_names)} classes)")


def load(path, **options) -> TrainedNet:
    """The net saved in ``path`` (a checkpoint, or the save folder holding one), opened
    as ``--load-file`` opens it; further options as for :func:`convnet.train` (e.g.
    ``gpu=[0, 0]`` to run a net of two devices on device 0, ``data_path=...`` where the
    data moved)."""
    if path is None:  # None leaves an option out: the net to open would be none
        raise UsageError("convnet.load: give the path of a checkpoint or of the save "
                         "folder holding one")
    with as_on_the_command_line():
        opts = options_of({"load_file": path, **options}, "convnet.load")
        return TrainedNet(open_saved_net(opts))

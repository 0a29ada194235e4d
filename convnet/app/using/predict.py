"""``--predict``: the class probabilities of image files under a saved net.

Images are read in minibatches of ``--mini`` (the run's), so a folder of any
size takes the memory of one minibatch; each minibatch goes through the
provider's test preprocessing (:meth:`~convnet.data.base.DataProvider.test_cases_from_pixels`)
and the net's test-mode forward pass on the run's devices.  The terminal gets one
line per image with its top ``--top`` classes; ``--predict-out`` gets every
probability, written as the minibatches come and renamed onto its name only when
every image is done (a failure leaves no half-written file).  File and class names
that are not UTF-8 are shown escaped in both (:mod:`~convnet.app.using.shown_names`).
"""

from __future__ import annotations

import csv
import io
import sys

import numpy as np

from convnet.app.options import RunOptions
from convnet.app.run.log import progress_bar
from convnet.app.using.images import decode_batch, image_files
from convnet.app.using.saved_net import SavedNet, open_saved_net, require_image_input
from convnet.app.using.shown_names import shown_name
from convnet.errors import DataError
from convnet.optional import require_pillow
from convnet.outputs import write_output


def top_classes_text(probs: np.ndarray, names: list[str], k: int) -> str:
    """``cat 91.2%  dog 5.1%  ...``: the ``k`` most probable classes, most probable first."""
    order = np.argsort(-probs, kind="stable")[:k]
    return "  ".join(f"{names[c]} {100 * probs[c]:.1f}%" for c in order)


def csv_rows(files, probs: np.ndarray) -> bytes:
    """CSV lines of one minibatch: the file, then every class probability."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    for path, row in zip(files, probs):
        writer.writerow([shown_name(str(path))] + [f"{p:.6g}" for p in row])
    return text.getvalue().encode()


def csv_header(names: list[str]) -> bytes:
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerow(["file"] + names)
    return text.getvalue().encode()


def run_predict(opts: RunOptions) -> int:
    image_module = require_pillow("--predict")
    files = image_files(opts.predict)  # a missing file fails before the net is loaded
    saved = open_saved_net(opts)
    try:
        require_image_input(saved, "--predict")
        if opts.predict_out is None:
            predict_files(saved, files, image_module, rows=None)
            return 0
        try:
            write_output(opts.predict_out, lambda out: predict_files(
                saved, files, image_module, rows=out.write))
        except OSError as error:
            raise DataError(f"cannot write {opts.predict_out}: {error.strerror}") from None
        print(f"wrote the probabilities of every class to {opts.predict_out}", file=sys.stderr)
        return 0
    finally:
        saved.close()


def predict_files(saved: SavedNet, files, image_module, rows) -> None:
    """Print each image's top classes (and hand CSV lines to ``rows`` when given).  A
    reader of the lines that goes away (``| head -3``) does not cost the CSV: the
    command line's streams then drop the lines and every image is still predicted and
    written (:mod:`convnet.app.command_line.reader_gone`)."""
    opts = saved.opts
    names = saved.label_names
    skipped = []
    if rows is not None:
        rows(csv_header(names))
    step = opts.mini
    bar = progress_bar(len(files), 0, disable=opts.no_progress or len(files) <= step,
                       unit="image")

    def skip(error) -> None:
        skipped.append(error)
        bar.write(f"warning: {error} (skipped)", file=sys.stderr)

    try:
        for start in range(0, len(files), step):
            raw, good = decode_batch(files[start:start + step], saved.provider, image_module,
                                     skipped=skip)
            if good:
                probs = saved.probabilities(saved.provider.test_cases_from_pixels(raw))
                for path, p in zip(good, probs):
                    line = f"{shown_name(str(path))}  {top_classes_text(p, names, opts.top)}"
                    bar.write(line, file=sys.stdout)
                if rows is not None:
                    rows(csv_rows(good, probs))
            bar.update(min(step, len(files) - start))
    finally:
        bar.close()
    done = len(files) - len(skipped)
    if skipped:
        print(f"predicted {done} image(s); skipped {len(skipped)} that could not be read",
              file=sys.stderr)
    if not done:
        raise DataError("no image could be read")

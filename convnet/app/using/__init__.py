"""Using a trained net (docs/USING.md): ``--predict`` on image files, the pictures of
``--show-filters`` and ``--show-preds``, and ``--export-onnx``.

Each opens the saved run as ``--test-only`` does (:mod:`convnet.app.using.saved_net`),
then reads its test-mode outputs or its weights.  May import :mod:`convnet.app.run`,
the app's base modules and everything below :mod:`convnet.app`.
"""

from convnet.app.launch import require_one_process
from convnet.app.using.filters_picture import run_show_filters
from convnet.app.using.onnx_export import run_export_onnx
from convnet.app.using.predict import run_predict
from convnet.app.using.predictions_picture import run_show_preds


def run(opts) -> int:
    """Do the one use the options ask for; returns the exit code.  Each runs in one
    process: a saved net's forward passes need no ranks, and several would each print
    and write the same files."""
    uses = (("--predict", opts.predict, run_predict),
            ("--show-filters", opts.show_filters, run_show_filters),
            ("--show-preds", opts.show_preds, run_show_preds),
            ("--export-onnx", opts.export_onnx, run_export_onnx))
    option, _, command = next(use for use in uses if use[1])
    require_one_process(option)
    return command(opts)

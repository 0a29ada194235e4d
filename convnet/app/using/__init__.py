"""Using a trained net (docs/USING.md): ``--predict`` on image files, the pictures of
``--show-filters`` and ``--show-preds``, and ``--export-onnx``.

Each opens the saved run as ``--test-only`` does (:mod:`convnet.app.using.saved_net`),
then reads its test-mode outputs or its weights.  May import :mod:`convnet.app.run`,
the app's base modules and everything below :mod:`convnet.app`.
"""


def run(opts) -> int:
    """Do the one use the options ask for; returns the exit code."""
    if opts.predict:
        from convnet.app.using.predict import run_predict
        return run_predict(opts)
    if opts.show_filters is not None:
        from convnet.app.using.filters_picture import run_show_filters
        return run_show_filters(opts)
    if opts.show_preds is not None:
        from convnet.app.using.predictions_picture import run_show_preds
        return run_show_preds(opts)
    from convnet.app.using.onnx_export import run_export_onnx
    return run_export_onnx(opts)

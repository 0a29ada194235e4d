"""``python -m convnet.import_onnx MODEL.onnx --tgt-dir DIR``: a net from elsewhere, as a
run of this engine (docs/FINETUNE.md).

An application on top, beside ``make_data``: the command line is here (:mod:`.cli`),
the translation and the files it writes in :mod:`convnet.app.using` (beside the
export).  Importing this package imports nothing.
"""

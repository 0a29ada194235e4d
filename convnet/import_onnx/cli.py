"""The command line of ``python -m convnet.import_onnx``: read, translate, check, write.

Nothing is written until the whole model has been translated and the net read back
and checked (:mod:`convnet.app.using.imported_net`); any problem is one line and exit
status 1 (the model) or 2 (the command line).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from convnet.app.invocation import shown_path
from convnet.app.using.imported_net import with_cost, write_imported
from convnet.app.using.onnx_import import import_model
from convnet.errors import ConvnetError, UsageError
from convnet.optional import require_onnx


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{message} (python -m convnet.import_onnx --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m convnet.import_onnx",
                description="Write an ONNX model (conv, pooling, LRN, Gemm/MatMul, the "
                            "activations, Softmax, Concat, Add) as this engine's layers.cfg, "
                            "layer-params.cfg and checkpoint.npz, for --init-from DIR (a new "
                            "head, fine-tuning) or --load-file DIR.")
    p.add_argument("model", type=Path, metavar="MODEL.onnx")
    p.add_argument("--tgt-dir", type=Path, required=True, metavar="DIR",
                   help="the folder to write the three files into (made if missing)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the files of an earlier import in DIR")
    return p


def run(argv: list[str] | None = None) -> list[str]:
    """Import as ``argv`` says; the lines to print."""
    args = build_parser().parse_args(argv)
    onnx = require_onnx("python -m convnet.import_onnx")
    layers, output, notes = import_model(onnx, args.model)
    layers, classes = with_cost(layers, output)
    data = layers[0].shape
    paths = write_imported(args.tgt_dir, layers, data, classes, shown_path(args.model),
                           args.overwrite)
    weighted = [layer.name for layer in layers if layer.weights]
    folder = shown_path(args.tgt_dir)
    return [f"note: {n}" for n in notes] + [
        f"wrote {', '.join(shown_path(p) for p in paths)}: {len(layers)} layers, "
        f"{len(weighted)} with weights ({', '.join(weighted)}); input "
        f"{'x'.join(map(str, data))}, {classes} classes",
        f"fine-tune with: python convnet.py --layer-def NEW_HEAD.cfg --layer-params "
        f"PARAMS.cfg --init-from {folder} --data-provider image --data-path PHOTOS"]


def main(argv: list[str] | None = None) -> int:
    try:
        for line in run(argv):
            print(line)
        return 0
    except ConvnetError as error:
        sys.stdout.flush()
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return error.exit_code

"""What a trained net is used for (docs/USING.md), on the command line: each needs
--load-file."""

from __future__ import annotations

import argparse
from pathlib import Path

from convnet.app.option_values import layer_name, positive_int


def add_using_options(p: argparse.ArgumentParser) -> None:
    use = p.add_argument_group("using a trained net (with --load-file; docs/USING.md)")
    use.add_argument("--predict", type=Path, nargs="+", default=None, metavar="IMAGE",
                     help="classify image files (JPEG, PNG, ...) or every image in a folder, "
                          "preprocessed as the run's test cases; prints the top classes")
    use.add_argument("--top", type=positive_int, default=5, metavar="K",
                     help="with --predict: how many classes to print per image (default 5)")
    use.add_argument("--predict-out", type=Path, default=None, metavar="CSV",
                     help="with --predict: also write every class probability of every "
                          "image to this CSV file")
    use.add_argument("--show-filters", type=layer_name, default=None, metavar="LAYER",
                     help="draw a conv layer's filters as a grid into --out PNG")
    use.add_argument("--show-preds", type=positive_int, default=None, metavar="N",
                     help="draw N test images with their top-5 predictions into --out PNG")
    use.add_argument("--out", type=Path, default=None, metavar="PNG",
                     help="the picture --show-filters or --show-preds draws")
    use.add_argument("--export-onnx", type=Path, default=None, metavar="FILE",
                     help="write the test-mode net as an ONNX model: input 'images' (raw "
                          "pixels N x C x S x S), output 'probs'")

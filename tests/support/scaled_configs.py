"""Scaled-down copies of the reference ImageNet configs, same graph and gpu= lines.

Filter counts shrink 8-fold (cmrnorm needs size <= channels) and fc widths 64-fold (1000 classes become 10),
and images are 3x67x67, the smallest size for which AlexNet's strides and
pools still leave a 1x1 map before the fc layers.  The copies are written
next to the test's other temporary files.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import ROOT

REFERENCE = ROOT / "examples" / "cuda-convnet2"
IMAGE_DIMS = (3, 67, 67)
NUM_CLASSES = 10


def _shrink_channels(match: re.Match) -> str:
    values = [int(v) for v in match.group(2).split(",")]
    return match.group(1) + ",".join(str(v if v <= 3 else max(5, v // 8)) for v in values)


def _shrink_outputs(match: re.Match) -> str:
    value = int(match.group(2))
    return match.group(1) + str(NUM_CLASSES if value == 1000 else max(4, value // 64))


def scaled_config(name: str, folder: Path, params_edit=None,
                  layers_edit=None) -> tuple[Path, Path]:
    """Write scaled copies of ``layers-<name>.cfg`` and ``layer-params-<name>.cfg``;
    ``params_edit``/``layers_edit`` may rewrite the texts further."""
    layers = (REFERENCE / f"layers-{name}.cfg").read_text()
    if layers_edit is not None:
        layers = layers_edit(layers)
    layers = re.sub(r"^((?:filters|channels)=)([0-9,]+)$", _shrink_channels, layers, flags=re.M)
    layers = re.sub(r"^(outputs=)([0-9]+)$", _shrink_outputs, layers, flags=re.M)
    params = (REFERENCE / f"layer-params-{name}.cfg").read_text()
    if params_edit is not None:
        params = params_edit(params)
    layer_path, params_path = folder / f"layers-{name}.cfg", folder / f"layer-params-{name}.cfg"
    layer_path.write_text(layers)
    params_path.write_text(params)
    return layer_path, params_path

"""A photo folder made into batches trains with ``--data-provider image``."""

from __future__ import annotations

import re

from tests.support.cli import ok, run_cli
from tests.support.configs import DATA_LAYERS, WEIGHT_PARAMS, logreg_head, write_pair
from tests.support.image_trees import image_bytes, make_data

def test_batches_from_a_photo_folder_train_with_the_image_provider(tmp_path):
    for label, name in enumerate(("ant", "bee", "cow")):
        (tmp_path / "src" / name).mkdir(parents=True)
        for k in range(8):
            (tmp_path / "src" / name / f"{k}.jpg").write_bytes(
                image_bytes(40 + k, 36, 1000 * label + k % 2))
    code, _ = make_data(tmp_path / "src", tmp_path / "out", "--size", "32", "--batch-size", "8",
                        "--sub-batch-size", "4", "--val-fraction", "0.25")
    assert code == 0
    layer_def, layer_params = write_pair(tmp_path, DATA_LAYERS + logreg_head("data", outputs=3),
                                         "[fc]\n" + WEIGHT_PARAMS)
    proc = ok(run_cli("--no-progress", "--data-provider", "image", "--data-path", tmp_path / "out",
                      "--train-range", "0-2", "--test-range", "1000", "--inner-size", "24",
                      "--mini", "8", "--epochs", "3", "--layer-def", layer_def,
                      "--layer-params", layer_params))
    errors = re.findall(r"test cost \S+ error\s+([\d.]+)%", proc.stdout)
    assert errors, proc.stdout
    assert float(errors[-1]) < 100 * 2 / 3  # better than chance on three classes

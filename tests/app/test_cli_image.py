"""End to end: ``--data-provider image`` trains from generated JPEG batches.

The original's ImageNet command line runs as written (paths, batch ranges and
the minibatch made small) on the shipped 2-GPU data-parallel reference config.
"""

from __future__ import annotations

import math
import pickle
import re

import pytest

from tests.support.cli import EXAMPLES, assert_clean_error, ok, run_cli
from tests.support.configs import DATA_LAYERS, write_pair
from tests.support.jpeg_batches import write_image_set, write_pickle
from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config

TINY_NET = DATA_LAYERS + """[conv1]
type=conv
inputs=data
channels=3
filters=8
padding=1
stride=2
filterSize=3
initW=0.05
sharedBiases=1
neuron=relu
gpu=0,1

[pool1]
type=pool
pool=max
inputs=conv1
channels=8
sizeX=2
stride=2
gpu=0,1

[fc3]
type=fc
inputs=pool1
outputs=3
initW=0.05
gpu=0,1

[probs]
type=softmax
inputs=fc3
gpu=0,1

[logprob]
type=cost.logreg
inputs=labels,probs
gpu=0,1
"""
TINY_PARAMS = "".join(f"[{name}]\nepsW=0.01\nepsB=0.02\nmomW=0.9\nmomB=0.9\nwc=0.0005\n\n"
                      for name in ("conv1", "fc3")) + "[logprob]\ncoeff=1\n"
ORIGINAL = EXAMPLES / "cuda-convnet2"


#: TINY_NET with a second head on data column 2, the label matrix of multi-label batches.
MULTI_LABEL_NET = TINY_NET + """
[labmat]
type=data
dataIdx=2

[fcm]
type=fc
inputs=pool1
outputs=3
initW=0.05
neuron=logistic
gpu=0,1

[bce]
type=cost.bce
inputs=labmat,fcm
gpu=0,1
"""


MULTI_LABEL_PARAMS = TINY_PARAMS + "\n[fcm]\nepsW=0.01\nepsB=0.02\nmomW=0.9\nmomB=0.9\n\n" \
                                   "[bce]\ncoeff=1\n"


def tiny_run(tmp_path, *extra, net=(TINY_NET, TINY_PARAMS)):
    layers, params = write_pair(tmp_path, *net)
    return run_cli("--no-progress", "--data-path", tmp_path / "batches", "--train-range", "0-1",
                   "--test-range", "1000", "--data-provider", "image", "--inner-size", "24",
                   "--gpu", "0,1", "--mini", "16", "--layer-def", layers, "--layer-params",
                   params, "--epochs", "2", *extra)


def test_a_tiny_net_trains_on_two_devices_and_reports_its_data_wait(tmp_path):
    write_image_set(tmp_path / "batches", [0, 1, 1000], cases=32, size=32, sub_batch=8)
    proc = ok(tiny_run(tmp_path, "--color-noise", "0.1", "--multiview-test"))
    epochs = [line for line in proc.stdout.splitlines() if line.startswith("epoch")]
    assert len(epochs) == 2
    costs = [float(re.search(r"train cost (\S+)", line).group(1)) for line in epochs]
    assert all(math.isfinite(c) for c in costs), epochs
    assert "data: image, train batches 0-1 (32 cases in the first), test 1000" in proc.stdout
    wait = re.search(r"waited (\S+) s for training data: (\S+)% of (\S+) s of training",
                     proc.stdout)
    assert wait and 0 <= float(wait.group(2)) <= 100, proc.stdout


def test_multi_label_batches_feed_the_label_matrix_to_a_second_head(tmp_path):
    write_image_set(tmp_path / "batches", [0, 1, 1000], cases=32, size=32, multi_label=True)
    proc = ok(tiny_run(tmp_path, "--multiview-test", net=(MULTI_LABEL_NET, MULTI_LABEL_PARAMS)))
    epochs = [line for line in proc.stdout.splitlines() if line.startswith("epoch")]
    assert len(epochs) == 2
    assert all(math.isfinite(float(re.search(r"test cost (\S+)", line).group(1)))
               for line in epochs), epochs


def test_a_corrupt_jpeg_ends_the_run_naming_file_and_case_or_is_skipped(tmp_path):
    write_image_set(tmp_path / "batches", [0, 1, 1000], cases=32, size=32, sub_batch=8)
    part = tmp_path / "batches" / "data_batch_1" / "data_batch_1.2"
    stored = pickle.loads(part.read_bytes())
    stored["data"][5] = stored["data"][5][:100]
    write_pickle(part, stored)
    assert_clean_error(tiny_run(tmp_path), 1, f"{part}, case 5: ",
                       "--skip-bad-images")
    proc = ok(tiny_run(tmp_path, "--skip-bad-images"))
    assert f"warning: left out 1 image(s) that cannot be decoded (--skip-bad-images); the " \
           f"first: {part}, case 5: " in proc.stderr


def test_skip_bad_images_is_for_the_image_provider(tmp_path):
    assert_clean_error(run_cli("--data-provider", "dummy", "--data-dims", "1x8x8",
                               "--skip-bad-images"), 2, "--skip-bad-images", "'dummy'")


def original_command_line(tmp_path, layers, params, size: int, inner: int, classes: int):
    """The wiki's ImageNet command, with its paths, ranges and minibatch made small."""
    data = tmp_path / "ilsvrc-2012-batches"
    write_image_set(data, [0, 1000], cases=8, size=size, classes=classes, sub_batch=4)
    proc = ok(run_cli("--data-path", data, "--train-range", "0", "--test-range", "1000",
                      "--save-path", tmp_path / "run", "--epochs", "1",
                      "--layer-def", layers, "--layer-params", params,
                      "--data-provider", "image", "--inner-size", str(inner), "--gpu", "0,1",
                      "--mini", "8", "--test-freq", "201", "--color-noise", "0",
                      "--no-progress", timeout=300))
    line = next(l for l in proc.stdout.splitlines() if l.startswith("epoch"))
    assert math.isfinite(float(re.search(r"train cost (\S+)", line).group(1))), line
    assert "minibatch 8 cases = 2 shards of 4" in proc.stdout
    assert (tmp_path / "run" / "checkpoint.npz").exists()


@pytest.mark.slow  # about 20 s; the scaled copy below runs the same graph and command
def test_the_original_imagenet_command_line_runs_on_generated_batches(tmp_path):
    """256 x 256 JPEGs cropped to 224 for the 2-GPU data-parallel AlexNet, one minibatch."""
    original_command_line(tmp_path, ORIGINAL / "layers-imagenet-2gpu-data.cfg",
                          ORIGINAL / "layer-params-imagenet-2gpu-data.cfg", 256, 224, 1000)


def test_the_original_command_line_runs_the_scaled_imagenet_config(tmp_path):
    """The same reference graph and gpu= lines, narrower, on 76 -> 67 pixel crops."""
    layers, params = scaled_config("imagenet-2gpu-data", tmp_path)
    original_command_line(tmp_path, layers, params, 76, IMAGE_DIMS[1], NUM_CLASSES)


def test_ranges_beyond_the_batches_are_refused_naming_the_first_missing(tmp_path):
    write_image_set(tmp_path / "batches", [0, 1000], cases=2, size=16)
    proc = run_cli("--data-path", tmp_path / "batches", "--train-range", "0-417",
                   "--test-range", "1000-1016", "--data-provider", "image")
    assert_clean_error(proc, 1, "the train range names batch 1 ", "available batches: 0,1000")

"""The data options of the command line: which provider, where, which batches and how
the images are cropped and augmented."""

from __future__ import annotations

import argparse
from pathlib import Path

from convnet.app.option_values import (batch_range, color_noise, data_dims, flag, image_side,
                                       non_negative_int, positive_int, provider_name,
                                       scalar_mean)


def add_data_options(p: argparse.ArgumentParser) -> None:
    """The data group of --help."""
    data = p.add_argument_group("data")
    data.add_argument("--data-provider", type=provider_name, default=None, metavar="NAME",
                      help="digits (the bundled 8x8 digits), cifar (CIFAR-10 python "
                           "folder), convnet-batches (cuda-convnet batch folder), image "
                           "(cuda-convnet2's JPEG batches, as its make-data writes them) or "
                           "dummy "
                           "(synthetic) [resumable] (default: digits, or dummy when "
                           "--data-dims is given)")
    data.add_argument("--data-path", type=Path, default=None, metavar="DIR",
                      help="folder of the data set, for cifar, convnet-batches and image "
                           "[resumable]")
    data.add_argument("--data-dims", type=data_dims, default=None, metavar="CxHxW[,DIMS...]",
                      help="image shape, e.g. 3x224x224: the dummy provider's images, and "
                           "the input of --print-plan/--check-grads without data; further "
                           "data columns (dataIdx 2 and up) follow after commas, column 1 "
                           "being the labels, e.g. 3x224x224,1,1 [resumable]")
    data.add_argument("--num-classes", type=positive_int, default=None, metavar="N",
                      help="number of classes, with --data-dims [resumable] (default: 10 "
                           "for dummy data)")
    data.add_argument("--dummy-cases", type=positive_int, default=None, metavar="N",
                      help="cases per batch of the dummy provider, e.g. 128 for a short "
                           "run of a large net [resumable] (default: 512)")
    data.add_argument("--train-range", type=batch_range, default=None, metavar="RANGE",
                      help="training batch numbers, e.g. 1-5 or 1-3,5 [resumable] "
                           "(default: the provider's, e.g. 1-5 for digits and cifar)")
    data.add_argument("--test-range", type=batch_range, default=None, metavar="RANGE",
                      help="test batch numbers, e.g. 6 [resumable] (default: the provider's)")
    data.add_argument("--inner-size", type=non_negative_int, default=None, metavar="N",
                      help="train on random N x N crops, mirrored at random, and test on "
                           "centre crops; 0 means whole images [resumable] (default: 0)")
    data.add_argument("--image-size", type=image_side, default=None, metavar="S",
                      help="with --data-provider image on a folder of class folders "
                           "(photos/cat/*.jpg, ...): bring every photo to S x S (short side "
                           "to S, centre square), as python -m convnet.make_data --size S "
                           "does [resumable] (default: 256)")
    data.add_argument("--color-noise", type=color_noise, default=None, metavar="S",
                      help="add PCA colour noise of S standard deviations to training "
                           "images [resumable] (default: 0, none)")
    data.add_argument("--scalar-mean", type=scalar_mean, default=None, metavar="X",
                      help="subtract this one number from every pixel instead of the "
                           "per-pixel mean of the training data [resumable]")
    data.add_argument("--multiview-test", type=flag, nargs="?", const=True, default=False,
                      metavar="0|1",
                      help="test on 10 views (centre and 4 corner crops, and their mirror "
                           "images) and average the predictions; needs --inner-size "
                           "(default: 0)")
    data.add_argument("--skip-bad-images", type=flag, nargs="?", const=True, default=False,
                      metavar="0|1",
                      help="leave out JPEGs that cannot be decoded (image provider) and count "
                           "them in the closing summary, instead of ending the run at the "
                           "first (default: 0)")
    data.add_argument("--prefetch", type=positive_int, default=2, metavar="N",
                      help="training batches loaded ahead of the one training, at most; "
                           "each is held in host memory (pinned for a GPU) until it has "
                           "trained (default: 2)")

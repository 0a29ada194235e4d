"""The network options of the command line: the config files, the devices and their
arithmetic, the minibatch, the seed and how replicas stay together."""

from __future__ import annotations

import argparse
from pathlib import Path

from convnet.app import bundled_example
from convnet.app.option_values import (BACKEND_NAMES, DEFAULT_STALENESS, gpu_list,
                                       non_negative_int, positive_int, sync_mode)
from convnet.plan.schedules import SCHEDULES
from convnet.plan.precisions import PRECISIONS


class _LayerParamsAction(argparse.Action):
    """``--layer-params`` keeps its last value in ``layer_params`` and every value, in
    order, in ``layer_params_list`` (one shared file, or one per config with --compare)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values[-1])
        namespace.layer_params_list = list(getattr(namespace, "layer_params_list", None)
                                           or []) + list(values)


def add_network_options(p: argparse.ArgumentParser) -> None:
    """The network group of --help."""
    net = p.add_argument_group("network")
    bundled_def = bundled_example.LAYER_DEF.relative_to(bundled_example.EXAMPLES_DIR.parent)
    net.add_argument("--layer-def", type=Path, default=None, metavar="FILE",
                     help="layer definition file (INI, one section per layer) [resumable] "
                          f"(default: {bundled_def})")
    net.add_argument("--layer-params", type=Path, default=None, nargs="+",
                     action=_LayerParamsAction, metavar="FILE",
                     help="layer parameter file: learning rates, momentum, weight decay, ... "
                          "[resumable] (default: the bundled example's, needed with "
                          "--layer-def)")
    net.add_argument("--gpu", type=gpu_list, default=None, metavar="LIST",
                     help="devices to use, e.g. 3,2,1,0; gpu=0,1 in the layer file names "
                          "positions in this list; a device may appear twice [resumable] "
                          "(default: 0,1 for the bundled example, else 0)")
    net.add_argument("--backend", choices=BACKEND_NAMES, default=None,
                     help="cuda: each device is a CUDA GPU (needs CuPy); cpu: each device is "
                          "a CPU worker thread; auto: cuda when CuPy finds a GPU [resumable] "
                          "(default: auto)")
    net.add_argument("--precision", choices=PRECISIONS, default=None,
                     help="the arithmetic of the layers: fp32 computes in float32 (every "
                          "bitwise promise holds); tf32 rounds the inputs of CUDA GEMMs and "
                          "convolutions to TF32 (GPU only); bf16 and fp16 compute in "
                          "bfloat16 or float16 with float32 master weights and updates, fp16 "
                          "with dynamic loss scaling that skips the steps whose gradients "
                          "overflow; see docs/PRECISION.md [resumable] (default: fp32)")
    net.add_argument("--mini", type=positive_int, default=None, metavar="N",
                     help="minibatch size in cases; a multiple of the largest replica count "
                          "[resumable] (default: 128)")
    net.add_argument("--micro-batches", type=positive_int, default=None, metavar="M",
                     help="cut every shard of a minibatch into M micro-batches that flow "
                          "through the devices as a pipeline; the weights update "
                          "where they would without; see docs/PIPELINE.md [resumable, another "
                          "M may be given on resume] (default: 1)")
    net.add_argument("--pipeline-schedule", choices=SCHEDULES, default=None,
                     help="how the micro-batches flow: fill-drain runs every forward, then "
                          "every backward; 1f1b alternates them after a warm-up, so a stage "
                          "holds the activations of at most (stages after it + 1) "
                          "micro-batches instead of M; the same weights and as many ticks "
                          "either way; see docs/PIPELINE.md [resumable, may change on resume] "
                          "(default: 1f1b)")
    net.add_argument("--seed", type=non_negative_int, default=None, metavar="N",
                     help="seed of the initial weights, dropout masks and data augmentation "
                          "[resumable] (default: 0)")
    net.add_argument("--sync", type=sync_mode, default=None, nargs="+",
                     metavar="sync|local:K|async[:S]",
                     help="how the replicas of data-parallel layers stay together: sync "
                          "sums their gradients every step; local:K lets each replica "
                          "update from its own shards and averages their weights every K "
                          "steps (local SGD; in one process a data-parallel net's replicas "
                          "run apart between averages); async[:S] runs the replicas of a "
                          "data-parallel net apart, each applying its own updates at once "
                          "and the others' as they arrive, never more than S steps ahead "
                          f"of the slowest (default S: {DEFAULT_STALENESS}; in a hybrid net "
                          "the steps stay lockstep and only the replicated layers' updates "
                          "travel apart, at most S steps late). local and async "
                          "move less and wait less and are not the same training as sync; "
                          "async is not bitwise reproducible; "
                          "with --compare, several modes (e.g. --sync sync local:4) train "
                          "every config once per mode [resumable] (default: sync)")

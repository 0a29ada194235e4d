"""The tools of the command line, which print or check and then exit: the plan, the
simulator, --auto-place, --compare and --check-grads."""

from __future__ import annotations

import argparse
from pathlib import Path

from convnet.app.option_values import flag, min_lead, positive_int
from convnet.simulate.hardware import DEVICE_KINDS


def add_tool_options(p: argparse.ArgumentParser) -> None:
    """The tools group of --help."""
    tools = p.add_argument_group("tools (print or check, then exit)")
    tools.add_argument("--print-plan", nargs="?", const="text", choices=("text", "json"),
                       default=None,
                       help="print the execution plan (placement, passes, copies, per-device "
                            "memory and traffic) as text or JSON and exit")
    tools.add_argument("--plan-graph", type=Path, default=None, metavar="PNG",
                       help="with --print-plan: also draw the layer graph, boxes coloured by "
                            "device, into this PNG file")
    tools.add_argument("--simulate", action="store_true",
                       help="with --print-plan: profile a few steps of the net on one device, "
                            "then predict the step time, images/s, each device's compute/copy/"
                            "all-reduce/idle time and peak memory (see docs/SIMULATE.md)")
    tools.add_argument("--simulate-devices", default=None, metavar="KIND",
                       help="with --simulate or --auto-place: predict for devices and links of this kind "
                            f"instead of the profiled ones ({', '.join(DEVICE_KINDS)}); any "
                            "kind but 'measured' rests on assumed figures (default: measured)")
    tools.add_argument("--profile-mini", type=positive_int, default=None, metavar="N",
                       help="with --simulate or --auto-place: profile the net at N and N/2 "
                            "cases and extrapolate each operation's time to --mini (default: "
                            "the largest power of two up to --mini whose forward pass holds "
                            "at most 12 G multiply-adds, counted from the config; see "
                            "docs/SIMULATE.md)")
    tools.add_argument("--auto-place", type=positive_int, default=None, metavar="N",
                       help="rank a family of placements of the net on the N devices of --gpu "
                            "(one device, data-parallel, convolutional part data-parallel; "
                            "each with every allowed updatePeriod) by --simulate's prediction "
                            "from one short profile, print them and write the best as a "
                            "layer-def file with gpu= lines, and a layer-params file where "
                            "it changes update periods (see docs/SIMULATE.md)")
    tools.add_argument("--auto-place-out", type=Path, default=None, metavar="FILE",
                       help="with --auto-place: where to write the chosen layer-def file "
                            "(default: LAYER_DEF's name + -auto-N.cfg in the current folder); "
                            "an existing file is replaced only with --overwrite")
    tools.add_argument("--compare", type=Path, nargs="+", default=None, metavar="LAYER_DEF",
                       help="train each of these layer-def files on the same data, seed and "
                            "devices, then print a table comparing them; --layer-params gives "
                            "one shared file or one per config (with --save-path, each run's "
                            "log and checkpoint go into a sub-folder, and compare.png shows "
                            "error against time, img/s and one step per device)")
    tools.add_argument("--rounds", type=positive_int, default=None, metavar="N",
                       help="with --compare: time the trained configs in N interleaved rounds "
                            "(A B C, A B C, ...) and rank them by their steps, round by "
                            "round; more rounds tell closer configs apart (default 20; at "
                            "least 6 for a winner to be called clear, see docs/COMPARE.md)")
    tools.add_argument("--min-lead", type=min_lead, default=None, metavar="PERCENT",
                       help="with --compare: call the fastest config a clear winner only "
                            "when its lead over each other config is above PERCENT beyond "
                            "the rounds' noise (default 10: smaller leads did not repeat "
                            "from run to run on a 2-core machine; 0 counts any lead)")
    tools.add_argument("--verbose", action="store_true", default=None,
                       help="with --compare: print every config's per-test lines as it "
                            "trains (default: one line per config once it has trained)")
    tools.add_argument("--check-grads", type=flag, nargs="?", const=True, default=False,
                       metavar="0|1",
                       help="compare every layer's gradients with finite differences on "
                            "random data and exit (0 when all agree, 1 otherwise)")

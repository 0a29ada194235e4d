"""The command line's parser: its options, one module per group, its help text, and its
way of reporting a bad option (one line, exit 2)."""

from __future__ import annotations

import argparse
import difflib

from convnet.app.command_line.data_options import add_data_options
from convnet.app.command_line.network_options import add_network_options
from convnet.app.command_line.original_flags import retired_flag_hint
from convnet.app.command_line.tool_options import add_tool_options
from convnet.app.command_line.training_options import add_training_options
from convnet.app.command_line.using_options import add_using_options
from convnet.app.invocation import program_name
from convnet.errors import UsageError

#: (arguments, what they do) of the examples at the end of --help.
EXAMPLES = (
    ("", "train the bundled digits example"),
    ("--save-path runs/a --epochs 5", "... and keep checkpoints and a CSV log"),
    ("--load-file runs/a --epochs 10", "resume that run and train it to 10 epochs"),
    ("--load-file runs/a --test-only", "evaluate the saved net on the test batches"),
    ("--load-file runs/a --predict photos/", "classify image files with the saved net"),
)

EPILOG_END = """\

A checkpoint (SAVE_PATH/checkpoint.npz) remembers the options marked
[resumable]; with --load-file they default to the saved values and any given
on the command line wins.

exit status: 0 success, 1 data/checkpoint/training error, 2 bad command line
or config, 130 interrupted (Ctrl-C), 143 terminated.
"""


def epilog(prog: str) -> str:
    """The examples, under the name the program was invoked as, then the notes."""
    width = max(len(f"{prog} {args}") for args, _ in EXAMPLES) + 3
    lines = ["examples:"] + [f"  {f'{prog} {args}'.strip():<{width}}{what}"
                             for args, what in EXAMPLES]
    lines += [f"  {prog} --layer-def L.cfg --layer-params P.cfg --gpu 0,1,2,3 --mini 512 \\",
              f"  {' ' * len(prog)} --data-dims 3x224x224 --num-classes 1000 --print-plan"]
    return "\n".join(lines) + "\n" + EPILOG_END


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option as a :class:`UsageError` (one line, exit 2)."""

    def error(self, message):
        if message.startswith("unrecognized arguments:"):
            unknown = message.split(":", 1)[1].split()
            hint = retired_flag_hint(unknown) or self._near_name(unknown)
            if hint:
                message += f" ({hint})"
        elif message.endswith(": expected one argument"):  # e.g. --gpu -1,0: read as an option
            option = message[len("argument "):].split(":")[0].split("/")[-1]
            message += f" (give a value; one that begins with '-' is written {option}=VALUE)"
        raise UsageError(f"{message} (see --help)")

    def _near_name(self, unknown: list[str]) -> str | None:
        known = [s for a in self._actions for s in a.option_strings]
        for word in unknown:
            close = difflib.get_close_matches(word.split("=")[0], known, n=1)
            if close:
                return f"did you mean '{close[0]}'?"
        return None


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog):
        super().__init__(prog, max_help_position=30, width=100)


def build_parser() -> argparse.ArgumentParser:
    prog = program_name()
    p = _Parser(prog=prog, allow_abbrev=False, formatter_class=_HelpFormatter,
                description=(
                    "Train a cuda-convnet2 style network (layer-def and layer-params INI files) "
                    "on one or several logical devices.\nWith no arguments, trains the bundled "
                    "digits example (hybrid data/model parallel) on two logical devices."),
                epilog=epilog(prog))
    add_network_options(p)
    add_data_options(p)
    add_training_options(p)
    add_tool_options(p)
    add_using_options(p)
    p.set_defaults(layer_params_list=None)
    return p

"""Keyword arguments to a command line: the Python API speaks the command line's options.

``convnet.train(mini=64, data_provider="digits", gpu=[0, 1])`` is parsed as ``--mini 64
--data-provider digits --gpu 0,1`` by the command line's own parser
(:func:`convnet.app.command_line.parser.build_parser`), so every option the parser has,
today's and any added later, is a keyword with its checks, defaults and errors; none is
listed here.  A keyword is an option's name without its dashes, ``-`` written ``_`` (the
parser's ``dest``).  Its value:

* ``None``: not given (the option's default, as on the command line);
* ``True`` / ``False`` for a switch (``overwrite=True``), or for an option that takes 0
  or 1 (``force_save=True`` is ``--force-save 1``); ``print_plan=True`` gives the option
  alone, ``print_plan="json"`` its value;
* a list or tuple: one value each for an option that takes several (``sync=["sync",
  "local:4"]``), else joined by commas (``gpu=[0, 1]`` is ``--gpu 0,1``);
* anything else as ``str()`` gives it (numbers, paths).
"""

from __future__ import annotations

import argparse
import difflib

from convnet.errors import UsageError


def option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's options by keyword (their ``dest``)."""
    return {action.dest: action for action in parser._actions
            if action.option_strings and action.dest != "help"}


def command_line(parser: argparse.ArgumentParser, options: dict, caller: str) -> list[str]:
    """The arguments that say what ``options`` (keyword -> value) say; a keyword the
    parser does not know is a :class:`UsageError` naming the closest one."""
    actions = option_actions(parser)
    argv: list[str] = []
    for name, value in options.items():
        action = actions.get(name)
        if action is None:
            close = difflib.get_close_matches(name, list(actions), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(f"{caller}: unknown option '{name}'{hint}; the options are the "
                             f"command line's (python convnet.py --help), '-' written '_'")
        argv += _arguments(action, value, name)
    return argv


def _arguments(action: argparse.Action, value, name: str) -> list[str]:
    """The arguments of one option ``action`` given ``value``."""
    flag = next(o for o in action.option_strings if o.startswith("--"))
    if value is None:
        return []
    if action.nargs == 0:  # a switch: True gives it, False leaves it out
        if isinstance(value, bool):
            return [flag] if value else []
        raise UsageError(f"{name}={value!r}: {flag} is a switch; give {name}=True or leave "
                         "it out")
    if isinstance(value, bool):
        if action.const is True:  # an option of 0 or 1
            return [f"{flag}={int(value)}"]
        if action.nargs == "?":  # its value may be left out: the option alone
            return [flag] if value else []
        raise UsageError(f"{name}={value!r}: {flag} takes a value, not True or False")
    if action.nargs in ("+", "*"):
        values = value if isinstance(value, (list, tuple)) else [value]
        return [flag, *map(str, values)]
    if isinstance(value, (list, tuple)):
        return [f"{flag}={','.join(map(str, value))}"]
    return [f"{flag}={value}"]

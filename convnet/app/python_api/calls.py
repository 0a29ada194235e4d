"""What every call of the Python API shares with the command line: the options parsed by
its parser and resolved by its rules, under its handling of signals and memory."""

from __future__ import annotations

from contextlib import contextmanager

from convnet.app.command_line.commands import is_comparison, resolved_options
from convnet.app.command_line.parser import build_parser
from convnet.app.invocation import called_from_python
from convnet.app.options import RunOptions, tools_asked
from convnet.app.python_api.arguments import command_line
from convnet.app.run.signals import stop_handlers
from convnet.errors import OutOfMemoryError, UsageError


def options_of(keywords: dict, caller: str) -> RunOptions:
    """The resolved options of a call's keywords, as the command line resolves them; a
    call does one thing, so the options may not ask for another command (``--compare``,
    ``--print-plan``, ``--predict``, ...), which stay the command line's."""
    parser = build_parser()
    args = parser.parse_args(command_line(parser, keywords, caller))
    if is_comparison(args):
        raise UsageError(f"{caller}: --compare (or several layer_params) compares configs: "
                         "use the command line for it")
    opts = resolved_options(args)
    other = tools_asked(opts)
    if other:
        raise UsageError(f"{caller}: {' and '.join(other)} is not what {caller} does: use "
                         "the command line for it")
    return opts


@contextmanager
def as_on_the_command_line():
    """Inside the block Ctrl-C and SIGTERM unwind the run as on the command line (the
    first Ctrl-C of a saving run stops it at a batch end, saved), and running out of
    memory is the one :class:`OutOfMemoryError`; the commands a run prints to go on are
    Python calls."""
    with stop_handlers(), called_from_python():
        try:
            yield
        except MemoryError as failed:
            raise OutOfMemoryError.from_memory_error(failed) from None

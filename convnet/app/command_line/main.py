"""The command line: ``python convnet.py [options]`` (also the ``convnet`` script).

Option names follow cuda-convnet2's (``--layer-def``, ``--gpu``, ``--mini``,
...).  With no arguments the bundled digits example trains on two logical
devices.  Every user error ends as one line on stderr and a non-zero exit,
never a traceback:

* 2: a bad command line (unknown option, bad value, options that do not go
  together) or a config/plan error;
* 1: anything else the user can fix (data, checkpoint, NaN cost, device, a failing
  CUDA call: :mod:`convnet.runtime.devices.cuda_failures`);
* 130: interrupted (Ctrl-C); 143: terminated (SIGTERM).

Options that a checkpoint remembers default to ``None`` here, so that on
``--load-file`` a value given on the command line can be told apart from a
built-in default (see :mod:`convnet.app.options`).
"""

from __future__ import annotations

import argparse
import sys

from convnet.app.command_line.parser import build_parser
from convnet.app.command_line.reader_gone import lines_stop_work_goes_on
from convnet.app.option_values import rank_timeout
from convnet.app.run.signals import stop_handlers
from convnet.errors import ConvnetError, OutOfMemoryError
from convnet.runtime.processes.communicator import DEFAULT_WAIT_LIMIT
from convnet.stop_signals import Terminated


def main(argv: list[str] | None = None) -> int:
    """The command line; under an MPI launcher, as one process of the run."""
    from convnet.app.launch import run_as_rank

    return run_as_rank(_main, argv, _early_rank_timeout(argv))


def _early_rank_timeout(argv: list[str] | None) -> float | None:
    """--rank-timeout, read ahead of the other options: it also bounds MPI's start-up,
    which comes first (a bad value is reported by the full parse, later)."""
    early = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    early.add_argument("--rank-timeout", type=rank_timeout, default=DEFAULT_WAIT_LIMIT)
    try:
        return early.parse_known_args(argv)[0].rank_timeout
    except argparse.ArgumentError:
        return DEFAULT_WAIT_LIMIT


def _main(argv: list[str] | None) -> int:
    with stop_handlers(), lines_stop_work_goes_on():
        try:
            args = build_parser().parse_args(argv)
            # Imported here, not above: training loads numpy and the devices, which
            # --help and a bad command line do not need.
            from convnet.app.command_line.commands import run_command

            return run_command(args)
        except ConvnetError as error:
            _flush_stdout()
            print(f"error: {_one_line(error)}", file=sys.stderr)
            return error.exit_code
        except MemoryError as failed:  # past the memory fit check: one line all the same
            _flush_stdout()
            error = _cuda_failure(failed) or OutOfMemoryError.from_memory_error(failed)
            print(f"error: {_one_line(error)}", file=sys.stderr)
            return error.exit_code
        except KeyboardInterrupt:
            _flush_stdout()
            print("interrupted", file=sys.stderr)
            return 130
        except Terminated:
            _flush_stdout()
            print("terminated", file=sys.stderr)
            return 143
        except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
            sys.stdout = None
            return 0
        except Exception as raised:  # a CUDA failure is one line too; anything else a bug
            error = _cuda_failure(raised)
            if error is None:
                raise
            _flush_stdout()
            print(f"error: {_one_line(error)}", file=sys.stderr)
            return error.exit_code


def _cuda_failure(error: BaseException) -> ConvnetError | None:
    """The one line for a failing CUDA call (CuPy's error types), or None for any
    other error."""
    from convnet.runtime.devices.cuda_failures import as_device_error

    return as_device_error(error)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass

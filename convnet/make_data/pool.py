"""make-data's worker processes: tasks in, results out in the tasks' order.

Each worker is a Python process of its own (``python -c``, running :func:`serve`)
with one socket to this process, over which it takes one pickled task at a time
and sends back its result.  The workers run in a session of their own and ignore
Ctrl-C and SIGTERM: the terminal's Ctrl-C and a SIGTERM to the run's process group
(what ``timeout`` sends) reach only this process, which ends the run with one line
and then the workers itself; and a worker whose socket closes (this process is
gone, even by ``kill -9``) ends too.  A worker that dies (killed, or out of memory)
ends the run with one line naming it and how it ended; the batches written before
stay, and a rerun writes the rest.  (``multiprocessing``'s pools wait forever for the
result of a worker killed mid-task, and print every worker's traceback on Ctrl-C.)
"""

from __future__ import annotations

import collections
import os
import pickle
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection, wait
from typing import Iterable, Iterator

from convnet.errors import DataError
from convnet.make_data.work import ChunkResult, do_task

#: Tasks handed to one worker before it has sent back the first: enough to keep it
#: busy while its result travels.
QUEUED_PER_WORKER = 2
#: How long a worker told to stop may take to end before it is killed (seconds).
STOP_SECONDS = 10

#: What a worker runs: ignore the stop signals first (see the module docstring), then
#: serve tasks from the socket whose descriptor is its argument, importing the same
#: ``convnet`` as this process.
_WORKER_CODE = (
    "import signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "sys.path.insert(0, sys.argv[2])\n"
    "from convnet.make_data.pool import serve\n"
    "serve(int(sys.argv[1]))\n")


def run_in_order(tasks: Iterable[tuple[str, tuple]], workers: int) -> Iterator[ChunkResult]:
    """The results of :func:`~convnet.make_data.work.do_task` over ``tasks`` in their
    order, computed by ``workers`` processes (in this one for 1) at most a few tasks
    ahead of the consumer, so that results never pile up in memory."""
    if workers <= 1:
        yield from map(do_task, tasks)
        return
    pool: list[_Worker] = []
    ended = False
    try:
        pool.extend(_Worker() for _ in range(workers))
        yield from _in_order(pool, iter(tasks), 3 * workers)
        ended = True
    finally:  # also when the consumer stops early (an error, Ctrl-C, SIGTERM)
        for worker in pool:
            worker.stop(at_once=not ended)


class _Worker:
    """One worker process and this process's end of its socket; ``sent`` holds the
    numbers of the tasks it has been given and not yet answered, in order."""

    def __init__(self):
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, str(theirs.fileno()), _package_root()],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, start_new_session=True)
        self.channel = Connection(ours.detach())
        self.sent: collections.deque[int] = collections.deque()

    def stop(self, at_once: bool) -> None:
        """End the worker: at once (killed), or when it has read that no task follows."""
        if at_once:
            self.process.kill()
        self.channel.close()
        try:
            self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def died(self) -> DataError:
        """The error that ends the run when this worker's socket closed under it."""
        try:
            code = self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
            if code == -signal.SIGKILL:
                how += " (as the system ends a process when memory runs out)"
        else:
            how = "ended unexpectedly" if code is None else f"ended with exit status {code}"
        return DataError(f"make-data's worker process {self.process.pid} {how} while "
                         f"converting images; the complete batches are kept: rerun to go on")


def _in_order(pool: list[_Worker], tasks: Iterator, ahead: int) -> Iterator[ChunkResult]:
    results: dict[int, ChunkResult] = {}
    sent = done = 0
    more = True
    owners = {worker.channel: worker for worker in pool}
    while True:
        while more and sent - done < ahead:
            worker = min(pool, key=lambda w: len(w.sent))
            if len(worker.sent) >= QUEUED_PER_WORKER:
                break
            task = next(tasks, None)
            if task is None:
                more = False
                break
            try:
                worker.channel.send(task)
            except OSError:
                raise worker.died() from None
            worker.sent.append(sent)
            sent += 1
        if done in results:
            yield results.pop(done)
            done += 1
            continue
        if done == sent and not more:
            return
        for channel in wait([w.channel for w in pool if w.sent]):
            worker = owners[channel]
            try:
                succeeded, value = pickle.loads(channel.recv_bytes())
            except (EOFError, OSError):
                raise worker.died() from None
            if not succeeded:
                raise value
            results[worker.sent.popleft()] = value


def _package_root() -> str:
    """The folder holding the ``convnet`` package this process runs (this file is
    ``convnet/make_data/pool.py`` in it)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def serve(descriptor: int) -> None:
    """A worker's loop: run every task that arrives on the socket ``descriptor`` and
    send back ``(True, result)``, or ``(False, error)`` if the task raised; return when
    the socket closes."""
    channel = Connection(descriptor)
    while True:
        try:
            task = channel.recv()
        except (EOFError, OSError):
            return
        try:
            channel.send_bytes(_answer(task))
        except OSError:
            return


def _answer(task: tuple[str, tuple]) -> bytes:
    try:
        answer = (True, do_task(task))
    except Exception as error:  # noqa: BLE001 - raised again in the main process
        answer = (False, error)
    try:
        return pickle.dumps(answer)
    except Exception:  # noqa: BLE001 - an error that pickle cannot take
        error = answer[1]
        return pickle.dumps((False, RuntimeError(f"{type(error).__name__}: {error}")))

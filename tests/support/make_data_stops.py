"""make-data stopped at a known moment, for the tests of its stops:
``python -m tests.support.make_data_stops ACTION MAKE-DATA-OPTIONS...``.

make-data runs as ``python -m convnet.make_data`` runs it; right after its first
batch folder is written, ACTION happens: ``SIGTERM`` or ``SIGINT`` is sent to the
process group make-data leads (start it in a session of its own), as ``timeout`` or
the terminal's Ctrl-C sends it, and ``kill-worker`` kills one of its worker
processes with SIGKILL, as the system does when memory runs out.  Each worker's pid
is printed (``worker PID``) as it starts.  Tying the stop to
a batch, not to a time, keeps the tests exact on a loaded machine: the run is
always mid-way, with batches written and batches to come.
"""

from __future__ import annotations

import os
import signal
import sys

from convnet.make_data import launcher, pool, run


def _kill_a_worker() -> None:
    for worker in _workers:
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.wait()  # dead for sure before the run goes on
        return


def main(action: str, argv: list[str]) -> int:
    real_write, real_worker = run.write_batch, pool._Worker.__init__
    written = []

    def write_then_act(*args, **kwargs):
        real_write(*args, **kwargs)
        written.append(args)
        if len(written) == 1:
            if action == "kill-worker":
                _kill_a_worker()
            else:
                os.killpg(os.getpgrp(), getattr(signal, action))

    def remembered(self):
        real_worker(self)
        _workers.append(self)
        print(f"worker {self.process.pid}", flush=True)

    run.write_batch = write_then_act
    pool._Worker.__init__ = remembered
    sys.argv = ["convnet.make_data", *argv]
    return launcher.main()


_workers: list = []

if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))

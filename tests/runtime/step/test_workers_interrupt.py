"""A Ctrl-C while the device workers run a step (a notebook's interrupt of
``TrainedNet.predict``): the step is abandoned whole, so the next one on the same
workers runs every task of its own and returns only after them."""

from __future__ import annotations

import signal
import threading
import time
from types import SimpleNamespace

import pytest

from convnet.runtime.step.workers import DeviceWorkers


class _Device:
    def activate(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


def _task(index: int, deps: tuple, device: int):
    return SimpleNamespace(index=index, deps=deps, devices=(device,), layer=f"l{index}",
                           deferrable=False, barrier=False)


def test_the_step_after_an_interrupted_one_runs_all_of_its_tasks():
    workers = DeviceWorkers([_Device(), _Device()])
    tasks = [_task(0, (), 0), _task(1, (0,), 1)]
    try:
        def interrupted(task, device):
            if task.index == 0:  # Ctrl-C reaches the main thread, waiting for the step
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                time.sleep(0.3)

        with pytest.raises(KeyboardInterrupt):
            workers.run(tasks, interrupted)
        ran = []
        workers.run(tasks, lambda task, device: ran.append(task.index))
        assert ran == [0, 1]
    finally:
        workers.close()

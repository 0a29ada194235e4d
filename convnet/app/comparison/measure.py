"""Training one ``--compare`` config and profiling it: its log read back, its steps profiled.

The run is the ordinary training machinery (:class:`convnet.app.run.training.Trainer`,
without its banner and summary); its executor stays open for the interleaved
rounds (:mod:`convnet.app.comparison.rounds`).  :data:`PROFILE_STEPS` steps on
the first minibatch of the first training batch are timed with the executor's op
timings switched on (after one warm-up step), giving the time split per device
(compute / copy / all-reduce / idle) and the timeline of the median step.  A
data-parallel ``--sync async:S`` run has no lockstep step to time: its replicas'
trained shards are kept instead, from which its traffic is measured.
"""

from __future__ import annotations

from convnet.app.comparison.result import ConfigResult
from convnet.app.options import RunOptions
from convnet.app.run.assembly import make_executor
from convnet.app.run.folder import claim_run_folder
from convnet.app.run.log import read_log
from convnet.app.run.training import Trainer
from convnet.errors import ConvnetError
from convnet.plan.time_split import CATEGORIES, CATEGORY, DeviceTime

#: Profiled training steps after training (after one warm-up step).
PROFILE_STEPS = 10


def train_config(result: ConfigResult, opts: RunOptions, provider, net, plan,
                 keep_checkpoints: bool, test_lines: bool = True):
    """Train one config into ``result.log_path``'s folder, read its log rows into
    ``result`` (and, under async, the shards its replicas trained), and return its
    executor, still open, for the rounds and the profile; ``test_lines``: print its
    per-test lines."""
    with claim_run_folder(result.log_path.parent, overwrite=opts.overwrite) as folder:
        executor = make_executor(opts, net, plan)
        try:
            trainer = Trainer(opts, provider, net, plan, executor, folder, announce=False,
                              test_lines=test_lines)
            if not keep_checkpoints:  # the log goes to the scratch folder: no checkpoints,
                trainer.checkpoint = None  # and no picture (a kept run's has its own)
                trainer.picture.enabled = False
            trainer.train()
            result.log_rows = read_log(result.log_path)
            if not result.log_rows:
                raise ConvnetError(f"{result.name}: the run logged no test line to "
                                   f"{result.log_path}")
            if not result.lockstep:  # no lockstep step to time: what the replicas trained
                result.replica_shards = list(executor.record.shards)
                result.trained_steps = executor.step_count
        except BaseException:
            executor.close()
            raise
    return executor


def first_minibatch(provider, mini: int) -> list:
    """The first minibatch of the first training batch: what the rounds and the profile
    time."""
    batch = provider.get_batch(provider.train_batches[0], train=True, epoch=1)
    return [column[:mini] for column in batch]


def profile(result: ConfigResult, executor, part: list, steps: int = PROFILE_STEPS) -> None:
    """Time ``steps`` training steps (after one warm-up) of the minibatch ``part`` with
    per-operation timing on."""
    result.profile_cases = len(part[0])
    runs = executor.timed_steps(part, steps)
    result.step_seconds = [seconds for seconds, _ in runs]
    num_devices = result.plan.num_devices
    sums = [DeviceTime(d) for d in range(num_devices)]
    for seconds, timings in runs:
        busy = [dict.fromkeys(CATEGORIES, 0.0) for _ in range(num_devices)]
        for t in timings:
            busy[t.device][CATEGORY[t.kind]] += t.end - t.start
        for d, parts in enumerate(busy):
            sums[d].compute += parts["compute"]
            sums[d].copy += parts["copy"]
            sums[d].allreduce += parts["allreduce"]
            sums[d].idle += max(seconds - parts["compute"] - parts["copy"] - parts["allreduce"],
                                0.0)
    n = len(runs)
    result.times = [DeviceTime(s.device, s.compute / n, s.copy / n, s.allreduce / n, s.idle / n)
                    for s in sums]
    median = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    result.timeline_seconds, result.timeline = median


def trained_line(result: ConfigResult, epochs: int) -> str:
    """What one config's training ended with, for the line --compare prints for it."""
    last = result.log_rows[-1]
    return (f"trained {epochs} epoch(s) in {last['cumulative_time']:.1f} s, last test: "
            f"cost {last['test_cost']:.4f}, error {100 * last['test_error']:.2f}%")

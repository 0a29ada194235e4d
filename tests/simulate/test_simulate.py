"""--simulate: the schedule (workers' rule, deferral, shared resources, contention), the
cost model's arithmetic (fits, link formulas, sharded all-reduce), the command line,
and loose checks of predicted against measured steps and scheme rankings."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest

from tests.support.cli import EXAMPLES, run_cli
from convnet.app.run import assembly
from convnet.app.command_line.parser import build_parser
from convnet.app.options import resolve_options
from convnet.app.prediction.simulation import data_parallel, first_minibatch, measure_costs, profiled_plan
from convnet.config.model import on_one_device
from convnet.plan.ops import AllReduce, Copy
from convnet.plan.memory import memory_peaks
from convnet.plan.planner import make_plan
from convnet.runtime.step.tasks import Task, TaskAction, make_tasks
from convnet.runtime.step.records import OpTiming
from convnet.simulate.costs import ComputeProfile, CostModel, OpCost, fixed_share
from convnet.simulate.profiler import (Profiler, executor_shares, measured_contention,
                                       wake_seconds)
from convnet.simulate.hardware import DEVICE_KINDS, LINKS, HostFigures, measure_host
from convnet.simulate.schedule import simulate

PARAMS = EXAMPLES / "digits-params.cfg"
CIFAR = EXAMPLES / "cuda-convnet2"
HOST = HostFigures(cores=2, gemm_flops=1e11, copy_bandwidth=1e10)


#: The profile's rounds budget in these tests: two or three rounds of the small nets
#: (the command's own 20 s would take most of the suite's time for two predictions).
TEST_PROFILE_SECONDS = 5.0


def _options(config, gpu: str, params=PARAMS, mini: int = 128, extra=()):
    """The options of a prediction whose profile runs at the minibatch it predicts: these
    tests check the model, not the extrapolation from a smaller profile (which
    bench/bench_simulate_time.py --extrapolation measures)."""
    return resolve_options(build_parser().parse_args(
        ["--layer-def", str(config), "--layer-params", str(params), "--gpu", gpu,
         "--mini", str(mini), "--print-plan", "--simulate", "--profile-mini", str(mini),
         *extra]))


def _plan(config: str, gpu: str):
    opts = _options(EXAMPLES / config, gpu)
    net, plan = assembly.build_net_and_plan(opts)
    return opts, net, plan


def _each(seconds: float):
    return lambda task, plan: seconds


def test_one_device_step_is_the_sum_of_its_tasks():
    _, _, plan = _plan("digits-single.cfg", "0")
    sim = simulate(plan, _each(0.001))
    assert sim.step_seconds == pytest.approx(0.001 * len(plan.ops))
    assert sim.devices[0].idle == pytest.approx(0.0)
    assert sim.images_per_second == pytest.approx(128 / sim.step_seconds)


def test_two_devices_overlap_unless_they_share_a_resource():
    _, _, plan = _plan("digits-data.cfg", "0,1")
    apart = simulate(plan, _each(0.001), sharded=lambda op: True)
    shared = simulate(plan, _each(0.001), resources=[0, 0], sharded=lambda op: True)
    assert apart.step_seconds < shared.step_seconds
    for sim in (apart, shared):
        for split in sim.devices:
            assert split.busy + split.idle == pytest.approx(sim.step_seconds)


def test_contention_slows_tasks_only_while_other_resources_are_busy():
    _, _, plan = _plan("digits-data.cfg", "0,1")
    free = simulate(plan, _each(0.001), sharded=lambda op: True)
    slowed = simulate(plan, _each(0.001), sharded=lambda op: True,
                      contended=lambda task: 1.5)
    assert free.step_seconds < slowed.step_seconds <= 1.5 * free.step_seconds + 1e-12
    _, _, one = _plan("digits-single.cfg", "0")  # nothing to contend with
    assert simulate(one, _each(0.001), contended=lambda task: 1.5).step_seconds == \
        pytest.approx(0.001 * len(one.ops))


def test_a_sleeping_worker_takes_the_wake_up_time_to_start_a_task():
    _, _, one = _plan("digits-single.cfg", "0")
    n = len(one.ops)
    # One worker never waits for another: only the step's start wakes it.
    assert simulate(one, _each(0.001), start_wake=0.0005, wake=0.01).step_seconds == \
        pytest.approx(0.0005 + 0.001 * n)
    _, _, data = _plan("digits-data.cfg", "0,1")

    def seconds(task, plan):  # device 1 slower: device 0 waits for it in the all-reduces
        return 0.002 if task.devices == (1,) else 0.001

    awake = simulate(data, seconds, sharded=lambda op: True)
    zero = sorted((start, end) for d, _, _, start, end in awake.timeline if d == 0)
    waits = sum(1 for a, b in zip(zero, zero[1:]) if b[0] > a[1] + 1e-9)
    assert waits >= 2  # device 0 sleeps during the step
    sleepy = simulate(data, seconds, sharded=lambda op: True, wake=0.0005)
    late = sorted(start for d, _, _, start, _ in sleepy.timeline if d == 0)
    shifts = [b - a for (a, _), b in zip(zero, late)]
    assert min(shifts) > -1e-9 and max(shifts) >= 0.0005 - 1e-9  # woken later, never earlier
    assert sleepy.step_seconds >= awake.step_seconds  # device 1, the slower, never waits
    started = simulate(data, seconds, sharded=lambda op: True, start_wake=0.0005)
    assert started.step_seconds == pytest.approx(awake.step_seconds + 0.0005)


def test_contention_is_the_median_time_side_by_side_over_the_time_alone():
    _, _, data = _plan("digits-data.cfg", "0,1")
    forward = next(op for op in data.ops if op.kind == "forward" and op.device == 0)

    def model(per_case: float) -> CostModel:
        profile = ComputeProfile(128, {("forward", forward.layer): OpCost(0.0, per_case)},
                                 host=HOST)
        return CostModel(profile, DEVICE_KINDS["measured"])

    alone = model(1e-5)
    tasks = [Task(0, forward, TaskAction.FORWARD, ())]

    def steps(*factors, per_case=1e-5):  # shards of 64 cases
        return [(0.0, [OpTiming(0, "forward", forward.layer, 1.0, 1.0 + f * 64 * per_case),
                       OpTiming(0, "backward", forward.layer, 0.0, 5.0)]) for f in factors]

    key = ("forward", forward.layer)
    assert measured_contention(data, tasks, [(alone, steps(1.2, 1.5, 9.0))]) == \
        {key: pytest.approx(1.5)}  # not in the model: no factor for the backward
    # the median over the rounds counts: one round disturbed by other work does not
    assert measured_contention(data, tasks, [(alone, steps(2.0, 2.1, 2.2)),
                                             (alone, steps(1.2, 1.3, 1.4)),
                                             (alone, steps(1.4, 1.5, 1.6))])[key] == \
        pytest.approx(1.5)
    # rounds in a slow phase of the machine, slow alone and side by side alike
    slow = (model(1.5e-5), steps(1.3, per_case=1.5e-5))
    assert measured_contention(data, tasks, [(alone, steps(1.3)), slow, slow])[key] == \
        pytest.approx(1.3)
    assert measured_contention(data, tasks, [(alone, steps(0.5, 0.9, 0.8))])[key] == 1.0
    assert measured_contention(data, tasks, [(alone, steps(5.0, 6.0, 7.0))])[key] == HOST.cores
    # an all-reduce's copies share the memory bandwidth too: against the link figures
    op = next(op for op in data.ops if isinstance(op, AllReduce))
    reduce = Task(1, op, TaskAction.REDUCE_SLICE, (), device=0)
    took = [(0.0, [OpTiming(0, "allreduce", op.layer, 0.0, 1.5 * alone.work(reduce, data))])]
    assert measured_contention(data, [reduce], [(alone, took)]) == \
        {("allreduce", op.layer): pytest.approx(1.5)}


def test_wake_ups_are_measured_at_a_steps_start_and_after_a_wait():
    _, _, data = _plan("digits-data.cfg", "0,1")
    tasks = make_tasks(data.ops, lambda op: True)
    order = {d: [t for t in tasks if d in t.devices] for d in (0, 1)}

    def step(first: float, wait: float):
        """Device 0 starts at ``first``, device 1 a ms later; every task takes 1 ms, and
        a task waiting for the other device's starts ``wait`` after that one's end."""
        end: dict[int, float] = {}
        clock = {0: first, 1: first + 0.001}
        timings = []
        for task in tasks:  # list order is a valid order of the whole step
            for d in task.devices:
                ready = max((end[i] for i in task.deps if i in end
                             and d not in tasks[i].devices), default=0.0)
                start = max(clock[d], ready + wait if ready > clock[d] else 0.0)
                timings.append(OpTiming(d, task.kind, task.layer, start, start + 0.001))
                clock[d] = end[task.index] = start + 0.001
        return 0.0, timings

    assert all(order.values())
    rounds = [[step(0.0003, 0.0001), step(0.0005, 0.0002)], [step(0.0002, 0.0004)]]
    start_wake, wake = wake_seconds(tasks, rounds)
    assert start_wake == pytest.approx(0.0008)  # of medians 0.9 (0.3, 1.3, 0.5, 1.5), 0.7 ms
    assert wake == pytest.approx(0.000275)  # of round one's median, 0.15 ms, and two's, 0.4
    assert wake_seconds(tasks, []) == (0.0, 0.0)


def test_deferred_all_reduce_parts_let_backward_passes_of_lower_layers_go_first():
    """Device 1 is slow: device 0's reduce of a top layer must wait for it, and the
    workers' rule runs device 0's backward of the layers below meanwhile."""
    _, _, plan = _plan("digits-data.cfg", "0,1")

    def seconds(task, plan):
        return 0.002 if task.devices == (1,) and task.kind == "backward" else 0.001

    sim = simulate(plan, seconds, sharded=lambda op: True)
    starts = {(d, kind, layer): start for d, kind, layer, start, _ in sim.timeline
              if d == 0}
    assert starts[(0, "backward", "conv1")] < starts[(0, "allreduce", "fca")]


def test_an_nccl_all_reduce_holds_all_its_devices_at_once():
    _, _, plan = _plan("digits-data.cfg", "0,1")
    sim = simulate(plan, _each(0.001))  # not sharded: one task on both devices
    reduces = [(d, start, end) for d, kind, layer, start, end in sim.timeline
               if kind == "allreduce" and layer == "conv1"]
    assert len(reduces) == 2 and reduces[0][1:] == reduces[1][1:]


def test_transfers_follow_the_link_figures():
    link = LINKS["pcie3-x16"]
    costs = CostModel(ComputeProfile(64, host=HOST), DEVICE_KINDS["gpu-pcie3"])
    _, _, plan = _plan("digits-data.cfg", "0,1")
    copy = Copy(0, 0, "x", (), shard=0, src=0, dst=1, nbytes=10 ** 6)
    reduce = AllReduce(1, 0, "x", (), replica_devices=(0, 1, 2, 3), nbytes=10 ** 6)
    assert costs.seconds(Task(0, copy, TaskAction.COPY, ()), plan) == pytest.approx(
        link.latency + 1e6 / link.bandwidth)
    assert costs.seconds(Task(1, reduce, TaskAction.ALL_REDUCE, ()), plan) == pytest.approx(
        6 * link.latency + 1.5 * 1e6 / link.bandwidth)


def test_sharded_all_reduce_parts_move_their_share_of_the_bytes():
    costs = CostModel(ComputeProfile(64, host=HOST), DEVICE_KINDS["measured"])
    _, _, plan = _plan("digits-data.cfg", "0,1")
    op = next(op for op in plan.ops if isinstance(op, AllReduce))
    link = costs.link
    assert link.bandwidth == HOST.copy_bandwidth
    reduce = Task(0, op, TaskAction.REDUCE_SLICE, (), device=0)
    assert costs.seconds(reduce, plan) == pytest.approx(
        link.latency + 2 * 0.5 * op.nbytes / link.bandwidth)
    assert costs.sharded(plan)(op) and not costs.on(DEVICE_KINDS["gpu-pcie3"]).sharded(plan)(op)


def test_a_line_through_two_sizes_separates_overhead_from_work_per_case():
    cost = OpCost.through((64, 0.002 + 64e-5), (128, 0.002 + 128e-5))
    assert cost.fixed == pytest.approx(0.002) and cost.per_case == pytest.approx(1e-5)
    assert cost.at(32) == pytest.approx(0.002 + 32e-5)
    # No faster at half the cases: a fixed cost, the mean of the two.
    assert OpCost.through((64, 0.003), (128, 0.002)) == OpCost(pytest.approx(0.0025))
    # Faster than in proportion: all per-case work, the least-squares line through 0.
    cost = OpCost.through((64, 0.0009), (128, 0.002))
    assert cost.fixed == 0.0
    assert cost.per_case == pytest.approx((64 * 0.0009 + 128 * 0.002) / (64 ** 2 + 128 ** 2))


def test_a_profile_is_fitted_over_every_round():
    """Rounds in phases of a shared machine (1x, then 3x as slow): each operation's
    time is the median over all of them, not one round's."""
    _, _, plan = _plan("digits-single.cfg", "0")

    class Phases:  # an executor whose one forward takes 1e-5 s per case, times a phase
        workers = None  # run on the calling thread

        def __init__(self):
            self.phases = iter([1, 1, 3, 3])  # each round: half, then whole

        def train_tasks(self):
            return []

        def timed_steps(self, batch, steps):
            seconds = next(self.phases) * len(batch[0]) * 1e-5
            return [(seconds, [OpTiming(0, "forward", "fc10", 0.0, seconds)])] * steps

    profiler = Profiler(Phases(), [list(range(128))], HOST, plan)
    for _ in range(2):
        profiler.round()
    assert profiler.profile().costs[("forward", "fc10")] == \
        OpCost(pytest.approx(0.0, abs=1e-12), pytest.approx(2e-5))


def test_time_other_processes_took_is_taken_out_of_every_block(monkeypatch):
    """A block on one thread counts each task less the time it waited for a core (a
    busy machine), not scaled by the block's share (0.5 here, over its gaps and warm-up
    too): the profile reads the machine's own speed, and says how much was taken."""
    from convnet.simulate.run_queue import waited_seconds

    _, _, plan = _plan("digits-single.cfg", "0")

    class Steady:  # one forward of 1e-5 s per case on the wall clock, a quarter waited
        workers = None
        core_waits = None

        def train_tasks(self):
            return []

        def timed_steps(self, batch, steps):
            assert self.core_waits is waited_seconds  # the executor counts each task's
            seconds = len(batch[0]) * 1e-5
            return [(seconds, [OpTiming(0, "forward", "fc10", 0.0, seconds,
                                        waited=seconds / 4)])] * steps

    class HalfShare:  # every block: the thread ran half its runnable time
        cores_busy = None

        def __init__(self, ids):
            self.shares = [0.5] * len(ids)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr("convnet.simulate.profiler.Shares", HalfShare)
    executor = Steady()
    profiler = Profiler(executor, [list(range(128))], HOST, plan)
    profiler.round()
    profile = profiler.profile()
    assert profile.costs[("forward", "fc10")].at(128) == pytest.approx(0.75 * 128e-5)
    assert profile.run_share == 0.5
    assert profile.step_seconds == [pytest.approx(0.75 * 128e-5)] * 2
    assert executor.core_waits is None  # counted in the profile's blocks only


def test_the_executor_says_how_long_each_task_waited_for_a_core():
    opts, net, plan = _plan("digits-single.cfg", "0")
    executor = assembly.make_executor(opts, net, plan)
    clock = iter(range(10 ** 6))
    try:
        executor.core_waits = lambda: next(clock) * 1e-3  # each task: read twice, 1 ms
        (seconds, timings), = executor.timed_steps(first_minibatch(opts), 1)
    finally:
        executor.close()
    assert timings and all(t.waited == pytest.approx(1e-3) for t in timings)
    from convnet.simulate.profiler import without_waits
    less, taken = without_waits((seconds, timings))
    assert less == pytest.approx(seconds - 1e-3 * len(timings))
    assert [t.end - t.start for t in taken] == \
        [pytest.approx(t.end - t.start - 1e-3) for t in timings]


def test_a_threads_share_is_what_it_ran_of_its_runnable_time():
    from convnet.simulate.run_queue import LEAST_SHARE, RunCounts, read_counts, share

    assert share(RunCounts(1.0, 0.5), RunCounts(3.0, 1.5)) == pytest.approx(2 / 3)
    assert share(RunCounts(1.0, 0.5), RunCounts(3.0, 0.5)) == 1.0  # never waited
    assert share(None, RunCounts(3.0, 1.5)) == 1.0  # counts not readable: as measured
    assert share(RunCounts(0, 0), RunCounts(1.0, 99.0)) == LEAST_SHARE
    counts = read_counts()
    assert counts is None or counts.ran > 0  # this thread has run


def test_a_steps_timings_are_scaled_alike():
    from convnet.simulate.profiler import at_share

    run = (0.01, [OpTiming(0, "forward", "a", 0.0, 0.004), OpTiming(1, "forward", "a",
                                                                      0.002, 0.006)])
    seconds, timings = at_share(run, 0.5)
    assert seconds == pytest.approx(0.005)
    assert [(t.start, t.end) for t in timings] == [(0.0, 0.002), (0.001, 0.003)]


def test_the_fit_keeps_each_figure_in_its_place():
    def steps(cases):  # one forward of 1 ms per 64 cases, 0.2 ms outside the tasks
        seconds = 0.001 * cases / 64
        return [(seconds + 0.0002, [OpTiming(0, "forward", "fc", 0.0, seconds)])] * 3

    profile = ComputeProfile.fit((32, steps(32)), (64, steps(64)), HOST, dispatch=1e-5)
    assert profile.costs[("forward", "fc")].at(64) == pytest.approx(0.001)
    assert profile.step_overhead == pytest.approx(0.0002)
    assert (profile.dispatch, profile.start_wake, profile.wake, profile.contention) == \
        (1e-5, 0.0, 0.0, {})


def test_update_overhead_is_the_intercept_over_weight_counts():
    assert fixed_share([0.001 + 2e-9 * n for n in (10, 1000, 10 ** 5)],
                       [10, 1000, 10 ** 5]) == pytest.approx(0.001)
    assert fixed_share([0.001], [10]) == 0.0


def test_compute_scales_with_shard_size_and_device_speed():
    _, _, plan = _plan("digits-data.cfg", "0,1")  # shards of 64
    forward = next(op for op in plan.ops if op.kind == "forward")
    update = next(op for op in plan.ops if op.kind == "update")
    profile = ComputeProfile(128, {("forward", forward.layer): OpCost(0.001, 1e-4),
                                   ("update", update.layer): OpCost(0.004)},
                             host=HOST, update_overhead=0.001, dispatch=1e-5)
    costs = CostModel(profile, DEVICE_KINDS["measured"])
    fwd = Task(0, forward, TaskAction.FORWARD, ())
    assert costs.seconds(fwd, plan) == pytest.approx(1e-5 + 0.001 + 64 * 1e-4)
    assert costs.seconds(Task(1, update, TaskAction.UPDATE, ()), plan) == \
        pytest.approx(1e-5 + 0.004)
    assert costs.seconds(Task(1, update, TaskAction.UPDATE_SLICE, (), device=0), plan) == \
        pytest.approx(1e-5 + 0.001 + 0.003 / 2)
    k20 = DEVICE_KINDS["k20-pcie2"]
    assert costs.on(k20).seconds(fwd, plan) == pytest.approx(
        1e-5 + (0.001 + 64 * 1e-4) * HOST.gemm_flops / k20.gemm_flops)


def test_host_devices_get_a_core_each_up_to_the_core_count():
    costs = CostModel(ComputeProfile(64, host=HOST), DEVICE_KINDS["measured"])
    _, _, plan = _plan("digits-data.cfg", "0,1")
    assert costs.resources(plan) == [0, 1]
    _, _, same = _plan("digits-data.cfg", "0,0")
    assert costs.on(DEVICE_KINDS["gpu-pcie3"]).resources(same) == [0, 0]
    assert costs.resources(same) == [0, 1]  # two CPU workers: two threads
    three = CostModel(ComputeProfile(64, host=replace(HOST, cores=1)), DEVICE_KINDS["measured"])
    assert three.resources(plan) == [0, 0]


def test_host_workers_on_cores_of_their_own_halve_a_data_parallel_step():
    """The model of CPU devices: two workers on two cores run the replicas at once (the
    old model put every CPU worker on one resource and predicted no gain)."""
    _, _, one = _plan("digits-single.cfg", "0")
    _, _, data = _plan("digits-data.cfg", "0,1")
    costs = {(kind, layer): OpCost(0.0, 1e-5) for op in one.ops
             for kind, layer in [(op.kind, op.layer)] if kind in ("load", "forward", "backward")}
    profile = ComputeProfile(128, costs, host=HOST)
    model = CostModel(profile, DEVICE_KINDS["measured"])
    assert model.predict(data).step_seconds == pytest.approx(
        model.predict(one).step_seconds / 2, rel=0.05)
    contended = CostModel(replace(profile, contention=dict.fromkeys(costs, 2.0)),
                          DEVICE_KINDS["measured"])
    assert contended.predict(data).step_seconds == pytest.approx(
        model.predict(one).step_seconds, rel=0.05)  # each slowed 2x: no gain


def test_host_figures_are_measured_and_plausible():
    host = measure_host(repeats=3)
    assert host.cores >= 1 and 1e8 < host.gemm_flops < 1e13 and 1e8 < host.copy_bandwidth


def test_the_profile_puts_every_layer_on_one_device_without_update_periods():
    opts = _options(EXAMPLES / "digits-hybrid.cfg", "0,1",
                    params=EXAMPLES / "digits-hybrid-params.cfg")
    net = assembly.load_net_for(opts)
    single = on_one_device(net)
    assert all(l.gpu == (0,) and "updatePeriod" not in l.params for l in single if not l.is_data)
    assert make_plan(single, (0,), 128).num_devices == 1


def test_the_profile_runs_on_the_first_listed_device_whatever_its_number():
    """gpu= names positions in --gpu: the one-device profile of --gpu 1,0 is position 0
    of the list (1,), not the net as placed on both devices."""
    opts = _options(EXAMPLES / "digits-data.cfg", "1,0")
    net = assembly.load_net_for(opts)
    _, plan, gpus = profiled_plan(opts, net, 128)
    assert gpus == (1,) and plan.num_devices == 1


def test_contention_is_measured_with_every_layer_replicated_on_every_core():
    opts = _options(EXAMPLES / "digits-model.cfg", "0,1")
    single = on_one_device(assembly.load_net_for(opts))
    executor, plan = data_parallel(opts, single, 128, 2)
    try:
        assert all(p.devices == (0, 1) for p in plan.layers.values() if p.devices)
        assert executor.workers is not None  # the parallel workers, as in training
    finally:
        executor.close()
    assert data_parallel(opts, single, 3, 2) is None  # 3 cases do not split in two


def _measured(opts, nets, rounds=5) -> list[float]:
    """The fastest step of each of ``nets`` on ``opts.gpu`` over interleaved rounds after a
    warm-up, each read as the profile reads its steps, at the machine's own speed
    (scaled by the share of their runnable time its threads ran): a prediction is of
    the machine without the other work on it, and a wall-clock step under a load of 6
    on two cores measured 2-5x that (the suite's other worker, other jobs)."""
    batch = first_minibatch(opts)
    executors = [assembly.make_executor(opts, net, make_plan(net, opts.gpu, opts.mini))
                 for net in nets]
    try:
        for ex in executors:  # warm-up
            ex.step(batch, progress=1.0)
        times = [[] for _ in executors]
        for _ in range(rounds):
            for ex, t in zip(executors, times):
                with executor_shares(ex) as block:
                    seconds = ex.step(batch, progress=1.0).seconds
                t.append(seconds * statistics.mean(block.shares))
    finally:
        for ex in executors:
            ex.close()
    return [min(t) for t in times]


def _checked_twice(check):
    """Run the timing check ``check()`` once more, afresh, if it fails, and return what
    the passing run returned: its profile and its measured steps are taken moments
    apart, and other work on a shared machine (the suite's other worker) can slow the
    one and not the other (a load that took both cores for 4 s in every 8 failed the
    CIFAR-10 check below 2 times in 6).  A prediction that is really off fails both
    times."""
    try:
        return check()
    except AssertionError:
        return check()


def test_a_timing_check_is_run_again_once_and_a_prediction_off_both_times_fails():
    tries = []

    def disturbed_once():
        tries.append(1)
        assert len(tries) > 1, "slowed by other work"
        return "the passing run's"

    assert _checked_twice(disturbed_once) == "the passing run's" and len(tries) == 2
    tries.clear()

    def off():
        tries.append(1)
        raise AssertionError("really off")

    with pytest.raises(AssertionError, match="really off"):
        _checked_twice(off)
    assert len(tries) == 2
    tries.clear()

    def broken():  # not a timing check's failure: not run again
        tries.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        _checked_twice(broken)
    assert len(tries) == 1


def test_one_device_prediction_is_within_a_loose_factor_of_the_measured_step():
    """digits on one device.  Its two-device steps are not checked here: with other work
    holding a core they measure 2-3x their quiet time (docs/SIMULATE.md, part 1)."""
    opts, net, plan = _plan("digits-single.cfg", "0")

    def check():
        costs = measure_costs(opts, net, budget=TEST_PROFILE_SECONDS)
        predicted = costs.predict(plan).step_seconds
        measured, = _measured(opts, [net])
        assert measured / 2 < predicted < measured * 2, (predicted, measured)

    _checked_twice(check)


def test_cifar10_data_parallel_speedup_is_predicted_within_a_loose_factor():
    """The CIFAR-10 reference net at a small minibatch, one device against data-parallel
    on two: the predicted speedup (about 1.8 on two quiet cores) is within 2x of the
    measured one, and each step within 3x.  Loose bounds: both sides are read at the
    machine's own speed, but what other work shares without taking a core (memory
    bandwidth, caches) stays in them; under a load of 6 on two cores the measured
    speedup read 1.4-2.4 against a predicted 1.2-1.6, and the steps 0.74-1.34x their
    prediction, where on the wall clock the gain fell to 0.9-1.3 and the steps took
    1.6-2.8x (docs/SIMULATE.md has the tight figures)."""
    opts = _options(CIFAR / "layers-cifar10-11pct.cfg", "0,1",
                    params=CIFAR / "layer-params-cifar10-11pct.cfg", mini=32,
                    extra=["--data-provider", "dummy", "--data-dims", "3x32x32",
                           "--num-classes", "10", "--dummy-cases", "64"])
    net = assembly.load_net_for(opts)
    one = on_one_device(net)
    data = replace(net, layers={n: l if l.is_data else replace(l, gpu=(0, 1))
                                for n, l in net.layers.items()})

    def check():
        costs = measure_costs(opts, net, budget=TEST_PROFILE_SECONDS)
        predicted = [costs.predict(make_plan(n, opts.gpu, opts.mini)).step_seconds
                     for n in (one, data)]
        measured = _measured(opts, [one, data])
        speedups = predicted[0] / predicted[1], measured[0] / measured[1]
        assert speedups[1] / 2 < speedups[0] < speedups[1] * 2, (predicted, measured)
        for p, m in zip(predicted, measured):
            assert m / 3 < p < m * 3, (predicted, measured)

    _checked_twice(check)


def test_the_imagenet_data_parallel_config_scaled_down_is_predicted_within_a_loose_factor():
    """layers-imagenet-2gpu-data on --gpu 0,1, 64x64 images, minibatch 8: the predicted
    step within 2x of the measured one, and each device's peak memory within 15%
    (docs/SIMULATE.md, part 4, has the tight figures at 96x96 for all three configs),
    measured on the reference walk: with the devices' threads, whether device 1 still
    holds fc4096b's summed gradient slice at its peak follows their timing (104-132
    MB here, docs/BENCHMARKS.md says the same of the full-size net).
    About 10 s: the fully-connected layers' 21 million weights make every step
    at least 0.1 s at any image size, and the profile takes some 40 steps; the
    other configs' steps are covered by part 4 and their memory by
    tests/plan/test_memory_estimate.py."""
    from convnet.runtime.step.memory import MemoryMeter
    from convnet.simulate.report import peak_memory

    opts = _options(CIFAR / "layers-imagenet-2gpu-data.cfg", "0,1",
                    params=CIFAR / "layer-params-imagenet-2gpu-data.cfg", mini=8,
                    extra=["--data-provider", "dummy", "--data-dims", "3x64x64",
                           "--num-classes", "1000", "--dummy-cases", "8"])
    net = assembly.load_net_for(opts)
    plan = make_plan(net, opts.gpu, opts.mini)

    def check():
        costs = measure_costs(opts, net, budget=TEST_PROFILE_SECONDS)
        predicted = costs.predict(plan).step_seconds
        measured, = _measured(opts, [net], rounds=3)
        assert measured / 2 < predicted < measured * 2, (predicted, measured)
        return costs

    costs = _checked_twice(check)
    executor = assembly.make_executor(replace(opts, sequential=True), net, plan)
    try:
        executor.memory = MemoryMeter(executor)
        executor.step(first_minibatch(opts), progress=1.0)
        shared = executor.store.shared
        for peak, estimate, walk in zip(executor.memory.peaks, peak_memory(plan, net, costs),
                                        memory_peaks(plan, net, shared)):
            # the meter looks between operations; the prediction adds a call's temporaries
            assert walk.between_ops_bytes == pytest.approx(peak.peak_bytes, rel=0.15)
            assert estimate >= walk.between_ops_bytes
    finally:
        executor.close()


def test_print_plan_json_has_the_simulation():
    done = run_cli("--layer-def", EXAMPLES / "digits-data.cfg", "--layer-params", PARAMS,
                   "--gpu", "0,1", "--print-plan=json", "--simulate")
    assert done.returncode == 0, done.stderr
    sim = json.loads(done.stdout)["simulation"]
    assert sim["device_kind"] == "measured" and not sim["assumed"]
    assert sim["step_seconds"] > 0 and sim["images_per_second"] > 0
    assert [d["device"] for d in sim["devices"]] == [0, 1]
    assert all(d["peak_memory_bytes"] > 0 for d in sim["devices"])
    assert sim["link"]["name"] == "host-memory" and sim["host"]["cores"] >= 1


def test_text_report_says_when_figures_are_assumed():
    done = run_cli("--layer-def", EXAMPLES / "digits-single.cfg", "--layer-params", PARAMS,
                   "--print-plan", "--simulate", "--simulate-devices", "k20-pcie2")
    assert done.returncode == 0, done.stderr
    assert "device kind 'k20-pcie2': assumed: NVIDIA Tesla K20" in done.stdout
    assert "the profiled host's [assumed]" in done.stdout
    assert "predicted step" in done.stdout


def test_every_figure_is_labelled_and_the_profile_shows_progress_through_a_pipe():
    """run_cli reads stderr through a pipe: the profile's lines come through it, and
    every line of the simulation that gives a figure says what it is."""
    done = run_cli("--layer-def", EXAMPLES / "digits-data.cfg", "--layer-params", PARAMS,
                   "--gpu", "0,1", "--mini", "64", "--print-plan", "--simulate",
                   "--profile-mini", "16")
    assert done.returncode == 0, done.stderr
    progress = [l for l in done.stderr.splitlines() if l.startswith("profiling ")]
    assert progress[0].startswith("profiling digits-data.cfg for --simulate: starting")
    assert any(" round 1 done (" in l for l in progress)
    assert progress[-1].endswith("s)") and "at 16 and 8 cases, extrapolated to --mini 64" \
        in progress[-1]
    block = done.stdout.split("Simulation (one training step)\n", 1)[1].splitlines()
    labelled = [l for l in block if not l.lstrip()[:1].isdigit() and "(ms)" not in l]
    assert len(labelled) >= 4
    for line in labelled:
        assert any(label in line for label in ("[measured", "[fitted", "[assumed",
                                               "not measured")), line
    assert "timed at 8 and 16 cases per shard" in done.stdout  # one device: one shard
    assert "gives it at 32 cases [fitted]" in done.stdout  # a shard of 64 on two devices


@pytest.mark.parametrize("args,words", [
    (["--simulate"], "give --print-plan"),
    (["--print-plan", "--simulate-devices", "gpu-pcie4"], "give --simulate"),
    (["--print-plan", "--simulate", "--simulate-devices", "tpu"], "unknown device kind 'tpu'"),
    (["--profile-mini", "8"], "give --simulate"),
    (["--print-plan", "--simulate", "--mini", "32", "--profile-mini", "64"],
     "larger than --mini 32"),
])
def test_bad_option_combinations_are_one_line_usage_errors(args, words):
    done = run_cli(*args)
    assert done.returncode == 2
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr

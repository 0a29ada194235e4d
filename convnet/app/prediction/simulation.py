"""``--simulate``: profile the net briefly on the device at hand, then simulate its plan.

The profile runs the net with every layer on the first device of ``--gpu``
and no ``updatePeriod`` (which may need replicas), or where the planner
refuses that (pass layers), the net as placed; on one thread in plan
order, with an executor of its own (its weights change), on the first
training minibatch and on its first half; see :mod:`convnet.simulate.profiler`
for what is measured and what is assumed.  Any placement of the net on any
devices is predicted from that one profile.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from convnet.app import launch
from convnet.app.run import assembly
from convnet.app.options import RunOptions
from convnet.config.model import NetConfig, all_synchronous, on_one_device
from convnet.errors import PlanError, UsageError
from convnet.plan.placements import Candidate, placed_layers
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import choose_backend
from convnet.app.prediction.profile_size import (LARGE_NET_CONTENTION_STEPS,
                                                 LEAST_CASES_PER_DEVICE,
                                                 PROFILE_BUDGET_SECONDS, Progress,
                                                 another_round, automatic_size, is_large)
from convnet.plan.layer_cuts import net_work
from convnet.app.prediction.side_by_side import SideBySideStore, combined, net_key
from convnet.simulate.costs import CostModel
from convnet.simulate.profiler import (CONTENTION_STEPS, CONTENTION_WARMUP, Profiler,
                                       dispatch_seconds)
from convnet.simulate.hardware import DEVICE_KINDS, device_kind, measure_host


def first_minibatch(opts: RunOptions) -> list:
    provider = assembly.make_data_provider(opts)
    batch = provider.get_batch(provider.train_batches[0], train=True, epoch=1)
    return [column[:opts.mini] for column in batch]


class TooFewCasesToProfile(UsageError):
    """A net profiled as placed whose smaller profile size has fewer cases than shards."""


def profiled_plan(opts: RunOptions, net: NetConfig, cases: int):
    """(net, plan, devices) to profile: every layer on the first device of ``opts.gpu``,
    or, where the planner refuses that (pass layers need distinct devices), the net as
    it is placed, on all of them."""
    single = on_one_device(net)
    try:
        return single, make_plan(single, (opts.gpu[0],), cases), (opts.gpu[0],)
    except PlanError:
        return net, make_plan(net, opts.gpu, cases), tuple(opts.gpu)


def data_parallel(opts: RunOptions, net: NetConfig, cases: int, cores: int):
    """(executor, plan) of ``net`` (on one device) with every layer replicated on
    ``cores`` CPU workers, run in parallel as in training; None where the planner
    refuses that (then no contention is measured)."""
    everywhere = Candidate("data-parallel", dict.fromkeys(placed_layers(net),
                                                          tuple(range(cores)))).apply(net)
    gpus = tuple(range(cores))
    try:
        plan = make_plan(everywhere, gpus, cases)
    except PlanError:
        return None
    return assembly.make_executor(replace(opts, sequential=False, gpu=gpus, sync="sync"),
                                  everywhere, plan), plan


class NetProfiler:
    """The profile of ``net`` on the first device of ``opts.gpu`` (see
    :func:`profiled_plan`), a round at a time: the executors it runs (closed on
    leaving), :meth:`round`, and :meth:`cost_model` from the rounds so far.  ``option``
    names the option asking, in the error of a multi-process run; ``batch``, where
    given, is the minibatch to profile (by default the first of the options' data),
    cut to ``--profile-mini`` cases or the automatic size (:mod:`.profile_size`);
    ``progress`` says what the profile does (on stderr)."""

    def __init__(self, opts: RunOptions, net: NetConfig, option: str = "--simulate",
                 batch: list | None = None, progress: Progress | None = None):
        launch.require_one_process(option)
        self._opts = opts
        self.progress = progress or Progress(str(opts.layer_def), quiet=True)
        batch = batch if batch is not None else first_minibatch(opts)
        net = all_synchronous(net)
        self._executor, self._together, self._store = None, None, None
        self._kept = False
        self.rounds = 0
        try:
            size, large = self._profile_size(opts, net, len(batch[0]))
            batch = [column[:size] for column in batch]
            self.cases = len(batch[0])
            single, plan, gpus = profiled_plan(opts, net, self.cases)
            half = max(self.cases // 2, 1)
            if half < plan.num_shards:  # the smaller profiled size needs a case per shard
                enough = 2 * plan.num_shards
                least = (f"--profile-mini {enough}" if opts.profile_mini and opts.mini >= enough
                         else f"--mini {enough}")
                raise TooFewCasesToProfile(
                    f"{option} profiles this net as it is placed (it cannot run on one "
                    f"device), in {plan.num_shards} shards, at {self.cases} cases and half "
                    f"of it, {half}, which has fewer cases than shards: give {least} or more")
            host = measure_host()
            self._cpu = choose_backend(opts.backend) == "cpu"
            self._executor = assembly.make_executor(
                replace(opts, sequential=True, gpu=gpus, sync="sync"), single, plan)
            # On the host, the net replicated on every core measures how the workers
            # contend.
            if self._cpu and host.cores > 1 and len(gpus) == 1:
                self._together = data_parallel(opts, single, self.cases, host.cores)
            if self._together is not None:
                self._store = SideBySideStore(net_key(self._together[1], host.cores))
            dispatch = dispatch_seconds(self._executor.train_tasks(), self._executor.devices)
            self._profiler = Profiler(self._executor, batch, host, plan, dispatch,
                                      self._together,
                                      LARGE_NET_CONTENTION_STEPS if large else
                                      (CONTENTION_WARMUP, CONTENTION_STEPS))
        except BaseException:
            self.close()
            raise

    def _profile_size(self, opts: RunOptions, net: NetConfig, mini: int) -> tuple[int, bool]:
        """(cases to profile, whether the net is large: its whole minibatch over the
        profile's multiply-add budget).  --profile-mini gives the size; else the
        multiply-adds of the config choose it (:mod:`.profile_size`)."""
        work = net_work(net)
        large = is_large(mini, work)
        if opts.profile_mini is not None:
            return min(opts.profile_mini, mini), large
        least = min(LEAST_CASES_PER_DEVICE * len(opts.gpu), mini)  # as placed: shards
        size = automatic_size(mini, work, least)
        self.progress.say(f"profiling at {size} and {max(size // 2, 1)} cases "
                          f"({work / 1e6:.3g} M multiply-adds a case forward; "
                          f"--profile-mini sets the size)")
        return size, large

    def __enter__(self) -> NetProfiler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def round(self) -> None:
        self._profiler.round()
        self.rounds += 1
        self.progress.say(f"round {self.rounds} done")

    def run_rounds(self, budget: float = PROFILE_BUDGET_SECONDS) -> None:
        """Rounds while the next, as long as the last, fits ``budget`` seconds (at least
        one)."""
        start, last = time.perf_counter(), 0.0
        while another_round(self.rounds, time.perf_counter() - start, last, budget):
            began = time.perf_counter()
            self.round()
            last = time.perf_counter() - began

    def cost_model(self) -> CostModel:
        """The model from every round so far, its side-by-side figures with the earlier
        profiles' of this net on this machine (:mod:`.side_by_side`); the first call
        keeps this profile's there."""
        profile = self._profiler.profile()
        if self._store is None:
            return CostModel(profile, self._kind())
        if not self._kept:
            self._store.keep(profile)
            self._kept = True
        return CostModel(combined(profile, self._store.earlier), self._kind())

    def round_models(self) -> list[CostModel]:
        """One model per round alone: how far their predictions move is the noise of
        the model's (``--auto-place`` calls candidates within it a tie)."""
        earlier = self._store.earlier if self._store is not None else []
        return [CostModel(combined(profile, earlier), self._kind())
                for profile in self._profiler.round_profiles()]

    def _kind(self):
        if self._opts.simulate_devices:
            kind = device_kind(self._opts.simulate_devices)
        elif self._cpu:
            kind = DEVICE_KINDS["measured"]
        else:  # GPUs of their own, compute as profiled; transfers assumed over PCIe 3
            kind = replace(DEVICE_KINDS["gpu-pcie3"], name="measured", speed=1.0,
                           source="the GPU the net was profiled on; its compute times as "
                                  "measured")
        return kind

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
        if self._together is not None:
            self._together[0].close()


def measure_costs(opts: RunOptions, net: NetConfig, option: str = "--simulate",
                  quiet: bool = False, budget: float = PROFILE_BUDGET_SECONDS) -> CostModel:
    """The cost model of ``net`` from its profile in rounds while they fit ``budget``
    seconds (see :class:`NetProfiler`), each said on stderr unless ``quiet``."""
    return measure_cost_models(opts, net, option, quiet, budget)[0]


def measure_cost_models(opts: RunOptions, net: NetConfig, option: str = "--simulate",
                        quiet: bool = False, budget: float = PROFILE_BUDGET_SECONDS
                        ) -> tuple[CostModel, list[CostModel]]:
    """As :func:`measure_costs`, with the model of each round alone beside it."""
    progress = Progress(f"{Path(opts.layer_def).name} for {option}", quiet=quiet)
    progress.say("starting (the net on one device; docs/SIMULATE.md)")
    with NetProfiler(opts, net, option, progress=progress) as profiler:
        profiler.run_rounds(budget)
        progress.say(f"{profiler.rounds} round(s) at {profiler.cases} and "
                     f"{max(profiler.cases // 2, 1)} cases, extrapolated to --mini "
                     f"{opts.mini}; done")
        return profiler.cost_model(), profiler.round_models()

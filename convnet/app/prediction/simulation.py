"""``--simulate``: profile the net briefly on the device at hand, then simulate its plan.

The profile runs the net with every layer on the first device of ``--gpu``
and no ``updatePeriod`` (which may need replicas), or where the planner
refuses that (pass layers), the net as placed; on one thread in plan
order, with an executor of its own (its weights change), on the first
training minibatch and on its first half; see :mod:`convnet.simulate.costs`
for what is measured and what is assumed.  Any placement of the net on any
devices is predicted from that one profile.
"""

from __future__ import annotations

from dataclasses import replace

from convnet.app import launch
from convnet.app.run import assembly
from convnet.app.options import RunOptions
from convnet.config.model import NetConfig, all_synchronous, on_one_device
from convnet.errors import PlanError
from convnet.plan.placements import Candidate, placed_layers
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import choose_backend
from convnet.simulate.costs import PROFILE_ROUNDS, CostModel, Profiler, dispatch_seconds
from convnet.simulate.hardware import DEVICE_KINDS, device_kind, measure_host


def first_minibatch(opts: RunOptions) -> list:
    provider = assembly.make_data_provider(opts)
    batch = provider.get_batch(provider.train_batches[0], train=True, epoch=1)
    return [column[:opts.mini] for column in batch]


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
    given, is the minibatch to profile (by default the first of the options' data)."""

    def __init__(self, opts: RunOptions, net: NetConfig, option: str = "--simulate",
                 batch: list | None = None):
        launch.require_one_process(option)
        self._opts = opts
        batch = batch if batch is not None else first_minibatch(opts)
        single, plan, gpus = profiled_plan(opts, all_synchronous(net), len(batch[0]))
        one = replace(opts, sequential=True, gpu=gpus, sync="sync")
        host = measure_host()
        self._cpu = choose_backend(opts.backend) == "cpu"
        self._executor = assembly.make_executor(one, single, plan)
        self._together = None
        try:
            # On the host, the net replicated on every core measures how the workers
            # contend.
            if self._cpu and host.cores > 1 and len(gpus) == 1:
                self._together = data_parallel(opts, single, len(batch[0]), host.cores)
            dispatch = dispatch_seconds(self._executor.train_tasks(), self._executor.devices)
            self._profiler = Profiler(self._executor, batch, host, plan, dispatch,
                                      self._together)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> NetProfiler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def round(self) -> None:
        self._profiler.round()

    def cost_model(self) -> CostModel:
        if self._opts.simulate_devices:
            kind = device_kind(self._opts.simulate_devices)
        elif self._cpu:
            kind = DEVICE_KINDS["measured"]
        else:  # GPUs of their own, compute as profiled; transfers assumed over PCIe 3
            kind = replace(DEVICE_KINDS["gpu-pcie3"], name="measured", speed=1.0,
                           source="the GPU the net was profiled on; its compute times as "
                                  "measured")
        return CostModel(self._profiler.profile(), kind)

    def close(self) -> None:
        self._executor.close()
        if self._together is not None:
            self._together[0].close()


def measure_costs(opts: RunOptions, net: NetConfig, option: str = "--simulate") -> CostModel:
    """The cost model of ``net`` from :data:`PROFILE_ROUNDS` rounds of its profile in a
    row (see :class:`NetProfiler`)."""
    with NetProfiler(opts, net, option) as profiler:
        for _ in range(PROFILE_ROUNDS):
            profiler.round()
        return profiler.cost_model()

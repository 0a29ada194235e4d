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

from convnet.app import launch, training
from convnet.app.options import RunOptions
from convnet.config.model import NetConfig, all_synchronous, on_one_device
from convnet.errors import PlanError
from convnet.plan.placements import Candidate, placed_layers
from convnet.plan.planner import make_plan
from convnet.runtime.backends import choose_backend
from convnet.simulate.costs import CostModel, dispatch_seconds, profile_compute
from convnet.simulate.hardware import DEVICE_KINDS, device_kind, measure_host


def first_minibatch(opts: RunOptions) -> list:
    provider = training.make_data_provider(opts)
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
    return training.make_executor(replace(opts, sequential=False, gpu=gpus, sync="sync"),
                                  everywhere, plan), plan


def measure_costs(opts: RunOptions, net: NetConfig, option: str = "--simulate") -> CostModel:
    """The cost model of ``net`` from a profile on the first device of ``opts.gpu`` (see
    :func:`profiled_plan`); ``option`` names the option asking, in the error of a
    multi-process run."""
    launch.require_one_process(option)
    batch = first_minibatch(opts)
    single, plan, gpus = profiled_plan(opts, all_synchronous(net), len(batch[0]))
    one = replace(opts, sequential=True, gpu=gpus, sync="sync")
    host = measure_host()
    cpu = choose_backend(opts.backend) == "cpu"
    executor = training.make_executor(one, single, plan)
    # On the host, the net replicated on every core measures how the workers contend.
    together = data_parallel(opts, single, len(batch[0]), host.cores) \
        if cpu and host.cores > 1 and len(gpus) == 1 else None
    try:
        dispatch = dispatch_seconds(executor.train_tasks(), executor.devices)
        profile = profile_compute(executor, batch, host, plan, dispatch, together)
    finally:
        executor.close()
        if together is not None:
            together[0].close()
    if opts.simulate_devices:
        kind = device_kind(opts.simulate_devices)
    elif cpu:
        kind = DEVICE_KINDS["measured"]
    else:  # GPUs of their own, compute as profiled; transfers assumed over PCIe 3
        kind = replace(DEVICE_KINDS["gpu-pcie3"], name="measured", speed=1.0,
                       source="the GPU the net was profiled on; its compute times as measured")
    return CostModel(profile, kind)

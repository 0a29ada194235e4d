"""``--simulate``: profile the net briefly on the device at hand, then simulate its plan.

The profile runs the plan being printed, on one thread in plan order, with an
executor of its own (its weights change) on the first training minibatch; see
:mod:`convnet.simulate.costs` for what is measured and what is assumed.
"""

from __future__ import annotations

from dataclasses import replace

from convnet.app import launch, training
from convnet.app.options import RunOptions
from convnet.config.model import NetConfig
from convnet.plan.ops import Plan
from convnet.runtime.backends import choose_backend
from convnet.simulate.costs import CostModel, profile_compute
from convnet.simulate.hardware import DEVICE_KINDS, device_kind


def first_minibatch(opts: RunOptions) -> list:
    provider = training.make_data_provider(opts)
    batch = provider.get_batch(provider.train_batches[0], train=True, epoch=1)
    return [column[:opts.mini] for column in batch]


def measure_costs(opts: RunOptions, net: NetConfig, plan: Plan,
                  option: str = "--simulate") -> CostModel:
    """The cost model of ``plan``'s net from a profile of ``plan`` on ``opts``' devices;
    ``option`` names the option asking, in the error of a multi-process run."""
    launch.require_one_process(option)
    batch = first_minibatch(opts)
    # The profile times each operation of one lockstep step, whatever --sync trains with.
    executor = training.make_executor(replace(opts, sequential=True, sync="sync"), net, plan)
    try:
        profile = profile_compute(executor, batch, len(batch[0]) // plan.num_shards)
    finally:
        executor.close()
    kind = device_kind(opts.simulate_devices) if opts.simulate_devices else \
        DEVICE_KINDS["measured"]
    return CostModel(profile, kind, shared_host=choose_backend(opts.backend) == "cpu")

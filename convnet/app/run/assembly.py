"""The parts of a training job, built from its options: data provider, net, plan, executor.

Kept apart from the epoch loop (:mod:`convnet.app.run.training`) because more than
the loop needs them: ``--print-plan``, ``--check-grads``, ``--compare``,
``--simulate`` and ``--auto-place`` build the same parts, with the same errors.
Each error names what to give instead: the data is checked against
``--data-dims``, the config's device count against ``--gpu``, its ``sync=`` keys
against ``--sync``, its cost layers against ``--logreg-name`` and
``--multiview-test``, and the plan's memory against the machine's before the
executor allocates it.  The host buffers that batches are loaded into are made here
too (pinned for GPUs).
"""

from __future__ import annotations

import warnings

from convnet.app import launch
from convnet.app.option_values import MAX_DEVICES, async_staleness
from convnet.app.options import RunOptions
from convnet.app.run.memory_fit import check_memory, weight_sharing
from convnet.config import infer_shapes, parse_net
from convnet.config.model import NetConfig
from convnet.config.values.typed import local_sgd_period, parse_data_columns
from convnet.data import DataOptions, make_provider, parse_range
from convnet.data.host_buffers import HostBuffers
from convnet.data.memory import data_memory
from convnet.errors import ConfigError, DataError, OneLineWarning, UsageError
from convnet.plan.ops import Plan
from convnet.runtime.devices.backends import choose_backend
from convnet.runtime.devices.slowdown import Slowdown
from convnet.runtime.processes.cluster import cluster_devices
from convnet.runtime.step.executor import Executor
from convnet.plan.precisions import GPU_ONLY
from convnet.runtime.step.precision import compute_dtype
from convnet.runtime.sync.async_replicas import AsyncReplicas
from convnet.runtime.sync.replica_plans import async_replica_devices, replica_statistics_layers
from convnet.runtime.sync.local_replicas import LocalReplicas, apart_periods

#: What trains a net: the lockstep executor, or replicas that run apart.
TrainingExecutor = Executor | AsyncReplicas | LocalReplicas


def make_data_provider(opts: RunOptions):
    options = DataOptions(
        data_path=str(opts.data_path) if opts.data_path else None,
        train_range=parse_range(opts.train_range) if opts.train_range else None,
        test_range=parse_range(opts.test_range) if opts.test_range else None,
        inner_size=opts.inner_size, color_noise=opts.color_noise, scalar_mean=opts.scalar_mean,
        multiview_test=opts.multiview_test, seed=opts.seed,
        skip_bad_images=opts.skip_bad_images, image_size=opts.image_size,
        data_dims=parse_data_columns(opts.data_dims) if opts.data_dims else None,
        num_classes=opts.num_classes)
    if opts.dummy_cases is not None:
        options.cases_per_batch = opts.dummy_cases
    provider = make_provider(opts.data_provider, options=options)
    if opts.data_provider != "dummy" and opts.data_dims:
        want = parse_data_columns(opts.data_dims)[0]
        have = provider.image_shape
        if want != have and want != provider.data_dims[0]:
            raise DataError(f"--data-dims {opts.data_dims} does not match the "
                            f"'{opts.data_provider}' data, whose images are "
                            f"{'x'.join(map(str, have))}")
    return provider


def load_net_for(opts: RunOptions, provider=None) -> NetConfig:
    """The net with shapes from the provider, or from --data-dims/--num-classes.

    The config files are read before any data, so a config error is reported
    without waiting for the data to load.
    """
    parsed = parse_net(opts.layer_def, opts.layer_params)
    if provider is None and opts.data_dims and (opts.print_plan or opts.check_grads):
        dims, classes = parse_data_columns(opts.data_dims), opts.num_classes
        source = f"--data-dims {opts.data_dims}"
    else:
        if provider is None:
            provider = make_data_provider(opts)
        dims, classes = provider.data_dims, provider.num_classes
        source = (f"the '{provider.name}' data: {'x'.join(map(str, dims[0]))} per case, "
                  f"{classes} classes")
        if opts.print_plan or opts.check_grads:
            source += "; give --data-dims CxHxW to plan or check without data"
    try:
        net = infer_shapes(parsed, dims, classes)
    except ConfigError as error:
        error.message = f"{error.message} (input shapes from {source})"
        wanted = getattr(error, "config_classes", None)
        if wanted is not None and (opts.data_provider == "dummy" or source.startswith("--")):
            error.message += f"; give --num-classes {wanted} to match the config"
        raise
    warn_about_wider_heads(net, classes, "--num-classes" if source.startswith("--") else
                           f"the '{provider.name}' data")
    return net


def warn_about_wider_heads(net: NetConfig, classes: int | None, source: str) -> None:
    """One line per classifier wider than the data's class count (an ImageNet net on a
    folder of 4 classes would train a 1000-way softmax without a word); a narrower one
    is already a config error."""
    if classes is None:
        return
    for ldef in net:
        if ldef.type != "cost.logreg":
            continue
        labels, probs = (net[name] for name in ldef.inputs[:2])
        width = net[probs.name].outputs
        if labels.is_data and labels.attrs.get("dataIdx") == 1 and width > classes:
            head = probs.inputs[0] if len(probs.inputs) == 1 else probs.name
            warnings.warn(OneLineWarning(
                f"the classifier '{head}' has {width} outputs but {source} says {classes} "
                f"classes; give '{head}' outputs={classes} (a new head, see "
                "docs/FINETUNE.md) unless the extra outputs are meant"), stacklevel=2)


def devices_needed(net: NetConfig) -> int:
    """How many logical devices the config's gpu= lists name (1 + the highest index)."""
    return 1 + max((g for ldef in net for g in (ldef.gpu or ())), default=0)


def check_layer_syncs(net: NetConfig, sync: str) -> None:
    """Refuse ``sync=`` keys of layers under ``--sync async``: async runs the replicas
    of the whole net apart, so no layer can keep its own mode."""
    keyed = [ldef.name for ldef in net if ldef.params.get("sync") is not None]
    if keyed and async_staleness(sync) is not None:
        raise UsageError(f"--sync {sync} runs the replicas of the whole net apart, so no "
                         f"layer can set its own mode, but the config gives sync= for "
                         f"{', '.join(keyed)}; remove those keys, or give --sync sync or "
                         f"local:K")


def check_replica_statistics(net: NetConfig, plan: Plan, sync: str) -> None:
    """Refuse ``--sync async`` of a data-parallel net with a bnorm layer whose statistics
    cover every replica's cases (``stats=global``): its replicas train apart, each on its
    own shards, so no step has every replica's statistics to combine.  (A hybrid net's
    async steps stay lockstep, and local SGD keeps the replicas in step for them.)"""
    layers = replica_statistics_layers(plan, net)
    if layers and async_staleness(sync) is not None and async_replica_devices(plan) is not None:
        raise UsageError(f"--sync {sync} trains the replicas apart, each on its own shards, "
                         f"but layer '{layers[0]}' normalises over every replica's cases "
                         f"(stats=global); give it stats=replica, or --sync sync or local:K")


def reported_cost_layer(net: NetConfig, wanted: str | None) -> str:
    """The cost layer a run reports: ``--logreg-name``, else the first cost.logreg, else the
    first cost layer."""
    costs = [l.name for l in net if l.is_cost]
    if not costs:
        raise ConfigError("the net has no cost layer to train", file=net.layer_def_file)
    if wanted is None:
        logregs = [c for c in costs if net[c].type == "cost.logreg"]
        return (logregs or costs)[0]
    if wanted not in costs:
        raise ConfigError(f"--logreg-name '{wanted}' is not a cost layer of the net "
                          f"(cost layers: {', '.join(costs)})")
    return wanted


def views_per_test_case(opts: RunOptions, provider, net: NetConfig, cost_layer: str) -> int:
    """The views each test case is scored over (``--multiview-test``), once the reported
    cost layer is known to read the probabilities they average."""
    views = getattr(provider, "num_views", 1) if opts.multiview_test else 1
    if views > 1 and net[cost_layer].type != "cost.logreg":
        raise ConfigError(f"--multiview-test averages the probabilities that a cost.logreg "
                          f"layer reads, but the reported cost layer '{cost_layer}' "
                          f"is {net[cost_layer].type}; choose one with --logreg-name")
    return views


def check_precision(precision: str, backend: str) -> None:
    """Refuse a ``--precision`` that means nothing on ``backend``, or that this
    installation cannot compute (bfloat16 needs ml_dtypes)."""
    if precision in GPU_ONLY and backend != "cuda":
        raise UsageError(f"--precision {precision} rounds GEMM inputs on GPU tensor cores; "
                         f"the {backend} backend computes float32: give --precision fp32, or "
                         "--backend cuda on a GPU")
    try:
        compute_dtype(precision)
    except ImportError:
        raise UsageError(f"--precision {precision} needs the ml_dtypes package for its "
                         "bfloat16 arrays (pip install ml_dtypes)") from None


def build_net_and_plan(opts: RunOptions, provider=None) -> tuple[NetConfig, Plan]:
    net = load_net_for(opts, provider)
    check_layer_syncs(net, opts.sync)
    try:
        plan = launch.plan_across_ranks(net, opts.gpu, opts.mini, opts.micro_batches,
                                        opts.pipeline_schedule)
        check_replica_statistics(net, plan, opts.sync)
        return net, plan
    except ConfigError as error:
        saved = opts.resume.saved_options.get("gpu") if opts.resume is not None else None
        needed = devices_needed(net)
        if needed > MAX_DEVICES:  # no --gpu list can be that long
            error.message = (f"{error.message}; the config uses {needed} logical devices, "
                             f"more than the {MAX_DEVICES} a run can have: give gpu= "
                             f"indices below {MAX_DEVICES}")
        elif needed > len(opts.gpu) * launch.process_count():
            error.message = f"{error.message}; {_device_list_hint(needed, opts.gpu[0])}"
        elif saved is not None and tuple(saved) != tuple(opts.gpu):
            error.message = (f"{error.message} (the checkpoint ran on --gpu "
                             f"{','.join(map(str, saved))}; its weights load on any device "
                             "list the config fits, and a device may be listed twice, "
                             "e.g. --gpu 0,0)")
        raise


def _device_list_hint(needed: int, first_gpu: int) -> str:
    """The ``--gpu`` lists that give a config its ``needed`` logical devices; under
    mpiexec each process lists its share (``--gpu`` is per process, rank-major)."""
    processes = launch.process_count()
    per_process = -(-needed // processes)
    spread = ",".join(map(str, range(per_process)))
    shared = ",".join([str(first_gpu)] * per_process)
    each = f" in each of the {processes} processes" if processes > 1 else ""
    return (f"the config uses {needed} logical devices: give --gpu {spread}{each}, or "
            f"--gpu {shared} for {per_process} logical devices on device {first_gpu}{each}")


def host_buffers(opts: RunOptions) -> HostBuffers:
    """The pool the training and test batches are loaded into: pinned memory when the
    devices are GPUs (their uploads then run while they compute), plain memory else."""
    if choose_backend(opts.backend) == "cuda":
        from convnet.runtime.devices.cuda import pinned_host_array  # CuPy only when wanted

        return HostBuffers(pinned_host_array)
    return HostBuffers()


def make_executor(opts: RunOptions, net: NetConfig, plan: Plan,
                  provider=None) -> TrainingExecutor:
    """The executor on the devices and backend the options name (this process's share
    of them in a multi-process run), once the plan (with ``provider``'s data pipeline,
    when given: :func:`~convnet.data.memory.data_memory`) is known to fit in memory; under
    ``--sync async:S`` the replicas that train apart (:class:`AsyncReplicas`) for a
    data-parallel net, and for any other the lockstep executor whose replicated layers
    exchange their increments apart; under local SGD of every replicated layer of a
    data-parallel net in one process, the replicas that run apart between averages
    (:class:`LocalReplicas`: bitwise the lockstep walk's weights), unless
    ``--sequential`` or ``--profile`` asks for the lockstep walk."""
    backend = choose_backend(opts.backend)
    check_precision(opts.precision, backend)
    cluster = launch.cluster_for(opts.gpu)
    check_memory(plan, net, backend, cluster.is_local,
                 weight_sharing(plan, net, backend, opts.sync, cluster.size),
                 data_memory(provider, opts.prefetch) if provider is not None else None,
                 opts.precision)
    local_sgd, staleness = local_sgd_period(opts.sync), async_staleness(opts.sync)
    devices = cluster_devices(cluster, opts.gpu, backend)
    slowdown = (Slowdown(opts.slow_device[1], opts.slow_device[0], plan.num_devices)
                if opts.slow_device is not None else None)
    if staleness is not None and async_replica_devices(plan) is not None:
        return AsyncReplicas(net, plan, devices, staleness, seed=opts.seed, slowdown=slowdown,
                             cluster=cluster, precision=opts.precision)
    periods = apart_periods(plan, net, local_sgd) if staleness is None else None
    # The replicas that run apart are one-device executors: nothing to pipeline, so
    # micro-batches keep the lockstep walk.
    if periods and cluster.size == 1 and plan.micro_batches == 1 \
            and not (opts.sequential or opts.profile):
        return LocalReplicas(net, plan, devices, periods, seed=opts.seed, slowdown=slowdown,
                             precision=opts.precision)
    # Any other plan keeps its lockstep steps; under async:S only the replicated layers'
    # increments move apart (convnet.runtime.processes.increment_exchange).
    return Executor(net, plan, devices, seed=opts.seed, parallel=not opts.sequential,
                    cluster=cluster, local_sgd=local_sgd, slowdown=slowdown,
                    async_staleness=staleness, precision=opts.precision)


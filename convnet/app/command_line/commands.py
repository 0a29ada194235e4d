"""What the command line does once it is parsed.

``--compare`` goes to :mod:`convnet.app.comparison.compare`; anything else resolves its
options (:func:`convnet.app.options.resolve_options`) and hands over to
printing the plan, checking gradients, testing or training.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from dataclasses import asdict, dataclass
from typing import Callable

from convnet.app import launch, using
from convnet.app.prediction import auto_place
from convnet.app.run import assembly, job
from convnet.app.run.connectivity import run_tables, tables_summary, tables_text
from convnet.app.comparison.compare import run_compare
from convnet.data.memory import data_memory
from convnet.app.run.memory_fit import memory_pools, weight_sharing
from convnet.app.option_values import async_staleness
from convnet.app.options import RunOptions, resolve_options
from convnet.app.rank_agreement import check_started_alike
from convnet.app.prediction.simulation import measure_costs
from convnet.config.layer_types.memory_rules import (CPU_KERNELS, CUDA_KERNELS,
                                                     winograd_conv_layers)
from convnet.config.model import NetConfig
from convnet.config.values.typed import local_sgd_period
from convnet.errors import ConvnetError, DataError, DeviceError, UsageError
from convnet.kernels.conv import choice as conv_choice
from convnet.optional import require_matplotlib
from convnet.plan.graph import write_plan_graph
from convnet.plan.ops import AllReduce, Plan
from convnet.plan.ranks import ranks_summary, ranks_text
from convnet.plan.report import human_bytes
from convnet.plan.report import plan_summary, plan_text
from convnet.runtime.step.precision import precision_text
from convnet.runtime.sync.replica_plans import async_replica_devices
from convnet.runtime.devices.backends import choose_backend
from convnet.runtime.sync.local_replicas import apart_periods
from convnet.runtime.step.tasks import exchanges_per_step, local_periods
from convnet.simulate.report import peak_memory, simulation_summary, simulation_text


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command line ``args``; returns the exit code."""
    if is_comparison(args):
        prepare_process(args)
        launch.require_one_process("--compare")
        return run_compare(args)  # several configs side by side
    opts = resolved_options(args)
    return command_for(opts)(opts)


def is_comparison(args: argparse.Namespace) -> bool:
    """Whether the command line compares several configs (--compare)."""
    return args.compare is not None or len(args.layer_params_list or ()) > 1


def prepare_process(args: argparse.Namespace) -> None:
    """What every command sets for the whole process before it starts."""
    # Overflow and NaN are caught by the executor's own checks, which name the layer;
    # numpy's warnings about them would only add lines of noise before that error.
    warnings.filterwarnings("ignore", category=RuntimeWarning,
                            message=r"(overflow|invalid value|divide by zero) encountered")
    conv_choice.WINOGRAD = not args.no_winograd  # a process-wide choice of kernels


def resolved_options(args: argparse.Namespace) -> RunOptions:
    """The options of a command that is not --compare, resolved and checked, with the
    processes of the run agreed on them (under mpiexec)."""
    prepare_process(args)
    if args.rounds is not None:
        raise UsageError("--rounds sets how many rounds --compare times its configs in: "
                         "give it with --compare")
    if args.min_lead is not None:
        raise UsageError("--min-lead sets the lead --compare's verdict calls clear: "
                         "give it with --compare")
    if args.verbose:
        raise UsageError("--verbose prints every test line of --compare's configs (a "
                         "training run prints them anyway): give it with --compare")
    opts = resolve_options(args)
    comm, _ = launch.processes()
    comm.wait_limit = opts.rank_timeout
    check_started_alike(comm, opts, args.no_winograd)  # before any other collective
    return opts


def command_for(opts: RunOptions) -> Callable[[RunOptions], int]:
    """What the options ask to be done: a function of them returning the exit code."""
    if opts.print_plan or opts.plan_graph is not None:
        return print_plan
    if opts.check_grads:
        return check_gradients
    if opts.auto_place is not None:
        return auto_place.run
    if opts.predict or opts.show_filters or opts.show_preds or opts.export_onnx:
        return using.run
    return job.run


@dataclass(frozen=True)
class PlanReport:
    """What ``--print-plan`` says of a planned net, gathered once for its text and its
    JSON (and for :meth:`convnet.app.python_api.TrainedNet.plan_text`)."""

    opts: RunOptions
    net: NetConfig
    plan: Plan
    cluster: object  # launch.cluster_for's: the processes' devices
    shared: frozenset[str]
    data: object | None  # the data pipeline's memory, when the data can be opened
    pools: list
    winograd: list[str]
    costs: object | None  # --simulate's measured costs
    sim: object | None  # and its prediction
    sim_peaks: list[int] | None  # and each device's peak memory on the devices predicted
    tables: dict
    tables_source: str | None
    kernels: object


def plan_report(opts: RunOptions, net: NetConfig, plan: Plan) -> PlanReport:
    """Everything ``--print-plan`` prints of ``plan``: memory, data, sync, Winograd
    layers, ``randSparse`` tables and ``--simulate``'s prediction."""
    cluster = launch.cluster_for(opts.gpu)
    try:
        backend = choose_backend(opts.backend)
    except DeviceError:  # that backend is not here: the plan is still worth printing
        backend = None
    shared = (weight_sharing(plan, net, backend, opts.sync, cluster.size)
              if backend is not None else frozenset())
    data = _data_memory(opts)
    pools = (memory_pools(plan, net, backend, cluster.is_local, shared, data, opts.precision)
             if backend is not None else [])
    # the conv layers the CPU kernels compute by Winograd's algorithm (CUDA has its own)
    winograd = winograd_conv_layers(net) if backend == "cpu" else []
    costs = measure_costs(opts, net) if opts.simulate else None
    sim = costs.predict(plan) if costs is not None else None
    tables, tables_source = run_tables(opts, net, plan)
    kernels = CUDA_KERNELS if backend == "cuda" else CPU_KERNELS  # what they allocate
    # on the devices profiled, the run's own peaks (its --sync's sharing, its kernels)
    sim_peaks = (None if costs is None else
                 peak_memory(plan, net, costs, opts.precision) if costs.kind.assumed else
                 peak_memory(plan, net, costs, opts.precision, shared, kernels))
    return PlanReport(opts, net, plan, cluster, shared, data, pools, winograd, costs, sim,
                      sim_peaks, tables, tables_source, kernels)


def plan_report_text(report: PlanReport) -> str:
    """``--print-plan``'s text: the plan, then each further section after a blank line."""
    opts, net, plan, cluster = report.opts, report.net, report.plan, report.cluster
    sections = [plan_text(plan, net, report.shared, report.kernels, opts.precision)]
    if cluster.size > 1:
        sections.append(ranks_text(plan, cluster.devices_per_rank, cluster.hosts))
    sections.append(precision_text(opts.precision))
    if report.data is not None:
        sections.append(report.data.text(human_bytes))
    if report.pools:
        sections.append("\n".join(pool.text() for pool in report.pools))
    note = sync_text(opts.sync, plan, net, cluster.size)
    if note is not None:
        sections.append(note)
    if report.winograd:
        sections.append(f"Convolutions by Winograd's algorithm (CPU devices; --no-winograd "
                        f"computes them directly): {', '.join(report.winograd)}.")
    if report.tables:
        sections.append(tables_text(report.tables, net, report.tables_source))
    if report.sim is not None:
        sections.append(simulation_text(report.sim, report.costs, plan, net,
                                        report.sim_peaks, layer_syncs(opts.sync, plan, net)))
    return "\n\n".join(sections)


def plan_report_json(report: PlanReport) -> dict:
    """``--print-plan=json``'s object."""
    opts, net, plan, cluster = report.opts, report.net, report.plan, report.cluster
    summary = plan_summary(plan, net, report.shared, report.kernels, opts.precision)
    summary["sync"] = opts.sync
    summary["precision"] = opts.precision
    summary["layer_sync"] = layer_syncs(opts.sync, plan, net)
    note = sync_text(opts.sync, plan, net, cluster.size)
    if note is not None:
        summary["sync_note"] = note
    summary["memory"] = [pool.as_json() for pool in report.pools]
    if report.data is not None:
        summary["data_memory"] = {"training_bytes": report.data.training_bytes,
                                  "testing_bytes": report.data.testing_bytes,
                                  **asdict(report.data)}
    summary["winograd_layers"] = report.winograd
    if report.sim is not None:
        summary["simulation"] = simulation_summary(report.sim, report.costs, plan, net,
                                                   report.sim_peaks, summary["layer_sync"])
    if report.tables:
        summary["rand_sparse"] = {"source": report.tables_source,
                                  "tables": tables_summary(report.tables, net)}
    if cluster.size > 1:
        summary["ranks"] = ranks_summary(plan, cluster.devices_per_rank, cluster.hosts)
    return summary


def print_plan(opts: RunOptions) -> int:
    """--print-plan (text or JSON) with --simulate's prediction, and the --plan-graph picture.  A plan that does not
    fit in the machine's memory is printed anyway, with a warning (training refuses it)."""
    if opts.plan_graph is not None:
        require_matplotlib("--plan-graph")
    net, plan = assembly.build_net_and_plan(opts)
    report = plan_report(opts, net, plan)
    if opts.print_plan == "json":
        print(json.dumps(plan_report_json(report), indent=1))
    else:
        print(plan_report_text(report))
    for pool in report.pools:
        if not pool.fits:
            print(f"warning: {pool.shortfall_text()}: training would be refused",
                  file=sys.stderr)
    if opts.plan_graph is not None:
        # Without --print-plan the command may look like a training run (--epochs,
        # --save-path...): its one line says that it only planned.
        after = "" if opts.print_plan else ("; --plan-graph only plans, like --print-plan: "
                                            "nothing was trained")
        write_plan_graph(plan, net, opts.plan_graph,
                         note=lambda text: print(text + after, file=sys.stderr))
    return 0


def _data_memory(opts: RunOptions):
    """The data pipeline's memory (:func:`convnet.data.memory.data_memory`) when the
    data can be opened; ``--print-plan`` plans without data too, and then has none."""
    try:
        return data_memory(assembly.make_data_provider(opts), opts.prefetch)
    except DataError:
        return None


def layer_syncs(sync: str, plan, net) -> dict[str, str]:
    """Each replicated layer's mode in a run of ``--sync`` ``sync`` (the layer's
    ``sync=`` key, else the run's mode), in plan order: ``sync``, ``local:K`` or
    ``async:S``."""
    periods = local_periods(plan, net, local_sgd_period(sync))
    return {name: (f"local:{periods[name]}" if name in periods else
                   sync if sync.startswith("async:") else "sync")
            for name, p in plan.layers.items() if p.replicas > 1 and p.param_count}


def sync_text(sync: str, plan, net, processes: int = 1) -> str | None:
    """The line --print-plan adds under --sync local:K or async:S, or where layers set
    their own ``sync=``: which layers it changes, and how (in a run of ``processes``
    processes), with the replica exchanges per minibatch under sync and local SGD;
    None under --sync sync without ``sync=`` keys."""
    keyed = [ldef.name for ldef in net if ldef.params.get("sync") is not None]
    if sync == "sync" and not keyed:
        return None
    modes = layer_syncs(sync, plan, net)
    replicated = list(modes)
    if not replicated:
        given = "the sync= keys" if sync == "sync" else f"--sync {sync}"
        return f"Sync: {given} change nothing here: no layer with weights is replicated."
    staleness = async_staleness(sync)
    if staleness is None:
        periods = local_periods(plan, net, local_sgd_period(sync))
        if not keyed:
            text = (f"Sync: local SGD: the replicated layers ({', '.join(replicated)}) update "
                    f"from their own shards and average their weights every "
                    f"{local_sgd_period(sync)} step(s)")
        else:
            kinds = [what for present, what in (
                (periods, "a local:K layer updates from its own shards and averages its "
                          "weights every K steps"),
                (len(periods) < len(modes), "a sync layer all-reduces its gradients every "
                                            "step")) if present]
            text = (f"Sync: per layer (its sync= key, else --sync {sync}): "
                    + ", ".join(f"{name} {mode}" for name, mode in modes.items())
                    + "; " + ", ".join(kinds))
            idle = [name for name in keyed if name not in modes]
            if idle:
                text += (f"; sync= changes nothing on {', '.join(idle)} (one replica: "
                         f"nothing to keep together)")
        if periods:
            text += "; not bitwise reproducible against --sync sync"
        if processes == 1 and apart_periods(plan, net, local_sgd_period(sync)):
            text += ("; the replicas run apart between averages, each waiting for the others "
                     "only to average (the same weights as the lockstep walk of --sequential)")
        return (f"{text}. All-reduces per minibatch (of gradients, or of weights when "
                f"averaging): {exchanges_per_step(plan, periods):.3g} "
                f"({exchanges_per_step(plan, {}):.3g} under --sync sync).")
    if async_replica_devices(plan) is None:
        text = (f"Sync: async:{staleness} in a {plan.scheme} plan: the steps stay lockstep "
                f"(the other layers keep their schedule); the replicated layers "
                f"({', '.join(replicated)}) update from their own shards at once and add "
                f"the other replicas' increments as they arrive, at most {staleness} step(s) "
                + ("late; NOT bitwise reproducible (which updates a forward reads depends "
                   "on timing)." if staleness else
                   "late: each forward adds exactly the updates sync's weights hold there, "
                   "by position and sender, so runs are bitwise reproducible and equal "
                   "sync's up to float rounding."))
        if processes > 1:
            text += (f" Between the {processes} processes each update's increments go to "
                     f"every other process with a replica of its layer, instead of the "
                     f"all-reduce slices counted in the processes table.")
        return text
    text = (f"Sync: asynchronous: the {plan.num_shards} replicas train apart on shards of a "
            f"shared queue, each applying its own update at once and the others' as they "
            f"arrive, at most {staleness} step(s) ahead of the slowest; NOT bitwise "
            f"reproducible (which updates a shard starts from depends on timing"
            + (", also under async:0, which is not sync" if not staleness else "") + ").")
    if processes > 1:
        update = sum(op.nbytes for op in plan.ops if isinstance(op, AllReduce))
        text += (f" Between the {processes} processes each shard's update "
                 f"({human_bytes(update)}) goes to every other process, instead of the "
                 f"lockstep traffic in the processes table.")
    return text


def check_gradients(opts: RunOptions) -> int:
    """--check-grads: 0 when every layer's gradients agree with finite differences.  The
    net is planned on ``--gpu`` first, as training would plan it, so a placement that
    training refuses fails here too, with the same error, rather than passing a check
    of math that can never train."""
    try:
        from convnet.runtime.gradcheck import check_net_gradients
    except ImportError as error:
        raise ConvnetError(f"--check-grads is not available in this installation "
                           f"(convnet.runtime.gradcheck cannot be imported: {error})") from None
    net, _ = assembly.build_net_and_plan(opts)
    if opts.resume is not None:  # the saved config's net; its weights play no part
        print(f"warning: --check-grads checks the net of {opts.resume.checkpoint} at random "
              f"weights and data (--seed {opts.seed}), not at the weights it saved",
              file=sys.stderr)
    return 0 if check_net_gradients(net, seed=opts.seed, report=print) else 1

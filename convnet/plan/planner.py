"""Place every layer replica on a logical device; the scheduler orders one minibatch.

``make_plan(net, gpus, minibatch)`` applies the multi-GPU rules of the config
language (``gpu=`` and ``updatePeriod``; the choices cuda-convnet2 leaves open
are in docs/DESIGN.md): it resolves each layer's device list (explicit
``gpu=``, inherited from the first input, or device 0 next to a data layer),
checks every placement rule, derives shards, passes and activation periods
and each layer's update period, and has :mod:`convnet.plan.scheduler` emit the
operation list of :mod:`convnet.plan.ops` (with micro-batches, the pipelined
order of docs/PIPELINE.md).  Every broken rule raises :class:`PlanError` naming
the layers.
"""

from __future__ import annotations

from collections import defaultdict

from convnet.config.model import LayerDef, NetConfig
from convnet.errors import PlanError
from convnet.plan.ops import LayerPlacement, Plan
from convnet.plan.scheduler import Scheduler
from convnet.plan.schedules import DEFAULT_SCHEDULE, SCHEDULES


def make_plan(net: NetConfig, gpus: tuple[int, ...] | list[int], minibatch: int,
              micro_batches: int = 1, schedule: str = DEFAULT_SCHEDULE) -> Plan:
    """Plan ``net`` on the logical devices ``0..len(gpus)-1`` for minibatches of ``minibatch``,
    each shard cut into ``micro_batches`` pieces that flow by ``schedule``
    (:mod:`convnet.plan.schedules`, docs/PIPELINE.md)."""
    gpus = tuple(int(g) for g in gpus)
    if not gpus:
        raise PlanError("--gpu lists no device")
    devices, sources = _resolve_devices(net, len(gpus))
    _check_rules(net, devices)
    counts = {name: len(d) for name, d in devices.items()}
    if not counts:
        raise PlanError("the net has no layer to place")
    rmax, rmin = max(counts.values()), min(counts.values())
    if minibatch <= 0 or minibatch % rmax:
        raise PlanError(f"--mini {minibatch} must be a positive multiple of the largest replica "
                        f"count {rmax} (layer "
                        f"'{_first_with(_named_counts(net, devices), rmax)}')")
    if micro_batches < 1 or micro_batches > minibatch // rmax:
        raise PlanError(f"--micro-batches {micro_batches} must be between 1 and the "
                        f"{minibatch // rmax} case(s) of a shard (--mini {minibatch} cut into "
                        f"{rmax} shard(s)), so that every micro-batch has a case")
    if schedule not in SCHEDULES:
        raise PlanError(f"--pipeline-schedule {schedule} is not one of {', '.join(SCHEDULES)}")
    num_passes = rmax // rmin
    periods = {name: r // rmin for name, r in counts.items()}
    _check_global_statistics(net, counts, rmax, micro_batches)
    trainable = _trainable_upstream(net)
    to_cost = _reaches_cost(net)
    update_periods = _update_periods(net, periods, num_passes)
    schemes = _layer_schemes(net, devices)
    placements = {}
    for ldef in net:
        needs_backward = to_cost[ldef.name] and trainable[ldef.name] and not ldef.is_data
        placements[ldef.name] = LayerPlacement(
            name=ldef.name, type=ldef.type, devices=devices.get(ldef.name, ()),
            period=periods.get(ldef.name, 0), scheme=schemes[ldef.name],
            gpu_source=sources.get(ldef.name, "unused (no layer reads it)"),
            output_shape=tuple(ldef.output_shape), param_count=ldef.param_count,
            update_period=update_periods.get(ldef.name, 0), needs_backward=needs_backward,
            input_grads=tuple(needs_backward and trainable[i] and not net[i].is_data
                              for i in ldef.inputs), learns=ldef.learns)
    plan = Plan(layers=placements, ops=[], num_devices=len(gpus), physical_devices=gpus,
                num_shards=rmax, num_passes=num_passes, rmin=rmin,
                scheme=_net_scheme(schemes, devices, num_passes), minibatch=minibatch,
                notes=_notes(net, sources, gpus), micro_batches=micro_batches,
                schedule=schedule)
    plan.ops = Scheduler(net, plan).build()
    return plan


def _check_global_statistics(net: NetConfig, counts: dict[str, int], rmax: int,
                             micro_batches: int) -> None:
    """A layer whose statistics cover the whole minibatch (bnorm's ``stats=global``) must
    see all of it at once: its replicas' shards in one activation, each shard whole.
    A layer with fewer replicas than the widest runs several passes, each on part of the
    minibatch, and micro-batches cut every shard into pieces that pass it one after the
    other; neither could give the one-device statistics, so both are refused."""
    for ldef in net:
        if not ldef.statistics_size or ldef.name not in counts:
            continue
        if micro_batches > 1:
            raise PlanError(
                f"--micro-batches {micro_batches} cuts the minibatch into pieces that layer "
                f"'{ldef.name}' would normalise one at a time, but its stats=global covers "
                f"the whole minibatch; use --micro-batches 1, or stats=replica (each piece "
                f"on its own)", file=ldef.file, section=ldef.name, key="stats")
        if counts[ldef.name] != rmax:
            raise _error(ldef, f"stats=global normalises over the whole minibatch, but with "
                               f"{counts[ldef.name]} replica(s) against the widest layer's "
                               f"{rmax} the layer runs {rmax // counts[ldef.name]} passes, "
                               f"each on part of it; give it {rmax} replicas, or "
                               f"stats=replica (each pass's shards on their own)")


def _first_with(counts: dict[str, int], value: int) -> str:
    return next(name for name, c in counts.items() if c == value)


def _named_counts(net: NetConfig, devices) -> dict[str, int]:
    """Replica counts of the placed non-data layers (all placed layers if there are none)."""
    counts = {n: len(d) for n, d in devices.items() if not net[n].is_data}
    return counts or {n: len(d) for n, d in devices.items()}


def _error(ldef: LayerDef, message: str, key: str | None = "gpu") -> PlanError:
    return PlanError(message, file=ldef.file, section=ldef.name, key=key)


def written_devices(net: NetConfig, num_gpus: int) -> dict[str, tuple[int, ...]]:
    """Every layer's device list as the config gives it, inherited lists resolved (a
    PlanError where an index is past ``num_gpus``)."""
    return _resolve_devices(net, num_gpus)[0]


def _resolve_devices(net: NetConfig, num_gpus: int):
    """Device list and its provenance for every layer (data layers from their readers)."""
    devices: dict[str, tuple[int, ...]] = {}
    sources: dict[str, str] = {}
    for ldef in net:
        if ldef.is_data:
            continue
        if ldef.gpu is not None:
            if not ldef.gpu:
                raise _error(ldef, "the gpu= list is empty; give at least one device index")
            for g in ldef.gpu:
                if not 0 <= g < num_gpus:
                    raise _error(ldef, f"device index {g} is past the --gpu list, which has "
                                       f"{num_gpus} device(s) (logical indices 0..{num_gpus - 1})")
            devices[ldef.name], sources[ldef.name] = tuple(ldef.gpu), "config"
        elif not ldef.inputs:
            raise _error(ldef, "a layer without inputs needs a gpu= list", key="inputs")
        elif net[ldef.inputs[0]].is_data:
            devices[ldef.name] = (0,)
            sources[ldef.name] = f"default 0 (first input '{ldef.inputs[0]}' is a data layer)"
        else:
            devices[ldef.name] = devices[ldef.inputs[0]]
            sources[ldef.name] = f"inherited from '{ldef.inputs[0]}'"
    for ldef in net:
        if not ldef.is_data:
            continue
        readers = net.consumers(ldef.name)
        if not readers:
            continue
        counts = {r: len(devices[r]) for r in readers}
        first = readers[0]
        for r in readers[1:]:
            if counts[r] != counts[first]:
                raise _error(net[r], f"all consumers of a layer have equal replica counts: "
                                     f"'{first}' and '{r}' both read '{ldef.name}' with "
                                     f"{counts[first]} and {counts[r]} replicas")
        devices[ldef.name] = devices[first]
        sources[ldef.name] = f"from its readers ({', '.join(readers)})"
    return devices, sources


def _check_rules(net: NetConfig, devices: dict[str, tuple[int, ...]]) -> None:
    """The placement rules, each broken one raised with a message naming the layers:
    replicas of a layer on distinct devices; a layer's replica count divides each
    input's; all inputs, and all consumers, of a layer have equal replica counts;
    every replica count divides the largest and is a multiple of the smallest; a
    ``pass`` layer has as many replicas as its inputs, and two ``pass`` layers do not
    read one input on overlapping devices."""
    for ldef in net:
        if ldef.name not in devices:
            continue
        if ldef.is_data:
            continue  # placed from its readers, which are checked themselves
        devs = devices[ldef.name]
        if len(set(devs)) != len(devs):
            raise _error(ldef, f"replicas of one layer must be on distinct devices, "
                               f"but '{ldef.name}' lists {','.join(map(str, devs))}")
        r = len(devs)
        inputs = [i for i in ldef.inputs if i in devices]
        for inp in inputs:
            ri = len(devices[inp])
            if ri % r:
                raise _error(ldef, f"a layer's replica count must divide each input's: "
                                   f"'{ldef.name}' has {r} replicas, its input '{inp}' has {ri}")
        for inp in inputs[1:]:
            if len(devices[inp]) != len(devices[inputs[0]]):
                raise _error(ldef, f"all inputs of a layer must have equal replica counts: "
                                   f"'{ldef.name}' reads '{inputs[0]}' ({len(devices[inputs[0]])} "
                                   f"replicas) and '{inp}' ({len(devices[inp])} replicas)")
        consumers = [c for c in net.consumers(ldef.name) if c in devices]
        for c in consumers[1:]:
            if len(devices[c]) != len(devices[consumers[0]]):
                raise _error(net[c], f"all consumers of a layer have equal replica counts: "
                                     f"'{consumers[0]}' ({len(devices[consumers[0]])} replicas) "
                                     f"and '{c}' ({len(devices[c])} replicas) both read "
                                     f"'{ldef.name}'")
        if ldef.type == "pass":
            for inp in inputs:
                if len(devices[inp]) != r:
                    raise _error(ldef, f"a pass layer has as many replicas as its inputs: "
                                       f"'{ldef.name}' has {r}, its input '{inp}' has "
                                       f"{len(devices[inp])}")
    _check_pass_overlap(net, devices)
    # Data layers take their readers' counts, so checking the readers names real layers.
    counts = _named_counts(net, devices)
    rmax, rmin = max(counts.values()), min(counts.values())
    for name, c in counts.items():
        if rmax % c:
            raise _error(net[name], f"every replica count must divide the largest one: "
                                    f"'{name}' has {c} replicas, '{_first_with(counts, rmax)}' "
                                    f"has {rmax}")
        if c % rmin:
            raise _error(net[name], f"every replica count must be a multiple of the smallest "
                                    f"one (so each layer runs a whole number of passes): "
                                    f"'{name}' has {c} replicas, '{_first_with(counts, rmin)}' "
                                    f"has {rmin}")


def _check_pass_overlap(net: NetConfig, devices) -> None:
    seen: dict[tuple[str, int], str] = {}
    for ldef in net:
        if ldef.type != "pass":
            continue
        for inp in ldef.inputs:
            for d in devices[ldef.name]:
                other = seen.get((inp, d))
                if other is not None and other != ldef.name:
                    raise _error(ldef, f"two pass layers may not read the same input on "
                                       f"overlapping devices: '{other}' and '{ldef.name}' both "
                                       f"read '{inp}' on device {d}")
                seen[(inp, d)] = ldef.name


def _trainable_upstream(net: NetConfig) -> dict[str, bool]:
    """Whether a layer has weights that learn or reads (transitively) a layer that does:
    below frozen layers only, a gradient would have nowhere to go."""
    out: dict[str, bool] = {}
    for ldef in net:
        out[ldef.name] = ldef.learns or any(out[i] for i in ldef.inputs)
    return out


def _reaches_cost(net: NetConfig) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for ldef in reversed(list(net)):
        out[ldef.name] = ldef.is_cost or any(out[c] for c in net.consumers(ldef.name))
    return out


def _update_periods(net: NetConfig, periods: dict[str, int], num_passes: int) -> dict[str, int]:
    """Effective updatePeriod of each weight layer: 0 means its activation period T,
    any other value must be a multiple of T that divides the pass count P."""
    out = {}
    for ldef in net:
        if not ldef.has_weights:
            continue
        t = periods[ldef.name]
        u = int(ldef.params.get("updatePeriod", 0) or 0)
        if u < 0:
            raise PlanError(f"updatePeriod={u} must be 0 (as often as possible) or a positive "
                            f"multiple of the layer's activation period {t}",
                            file=ldef.params_file or ldef.file, section=ldef.name,
                            key="updatePeriod")
        u = u or t
        if u % t or num_passes % u:
            raise PlanError(f"updatePeriod={u} must be a multiple of the layer's activation "
                            f"period {t} and divide the pass count {num_passes}",
                            file=ldef.params_file or ldef.file, section=ldef.name,
                            key="updatePeriod")
        out[ldef.name] = u
    return out


def _layer_schemes(net: NetConfig, devices) -> dict[str, str]:
    """'data' for replicated layers; 'model' for one-replica towers split across devices."""
    schemes: dict[str, str] = {}
    for ldef in net:
        devs = devices.get(ldef.name, ())
        if len(devs) > 1:
            schemes[ldef.name] = "data"
            continue
        siblings = {c for i in ldef.inputs for c in net.consumers(i) if c != ldef.name}
        split_sibling = any(len(devices[s]) == 1 and devices[s] != devs for s in siblings
                            if s in devices)
        inputs = [i for i in ldef.inputs if not net[i].is_data]
        continues_tower = bool(inputs) and all(schemes[i] == "model" and devices[i] == devs
                                               for i in inputs)
        schemes[ldef.name] = "model" if devs and (split_sibling or continues_tower) else "single"
    return schemes


def _net_scheme(schemes: dict[str, str], devices, num_passes: int) -> str:
    """'single' only when every layer is on one device; layers split over several
    devices without replicas (siblings, or a pipeline of layers) are 'model'."""
    has_data = "data" in schemes.values()
    has_model = "model" in schemes.values()
    if num_passes > 1 or (has_data and has_model):
        return "hybrid"
    if has_data:
        return "data"
    used = {d for devs in devices.values() for d in devs}
    return "model" if has_model or len(used) > 1 else "single"


def _notes(net: NetConfig, sources: dict[str, str], gpus: tuple[int, ...]) -> list[str]:
    notes = [f"'{name}' has no gpu= and is placed on device 0: its {src[len('default 0 ('):-1]}"
             for name, src in sources.items() if src.startswith("default 0")]
    shared = defaultdict(list)
    for logical, physical in enumerate(gpus):
        shared[physical].append(logical)
    for physical, logicals in shared.items():
        if len(logicals) > 1:
            notes.append(f"logical devices {', '.join(map(str, logicals))} share physical "
                         f"device {physical}")
    return notes

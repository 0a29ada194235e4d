"""``--auto-place N``: rank a family of placements of the net with the simulator and
write the best as a layer-def file (and, where it changes update periods, a
layer-params file): both are written whole or neither is
(:func:`convnet.outputs.write_outputs`).

The per-layer costs are profiled once (every layer on one device, see
:mod:`convnet.app.prediction.simulation`), and every candidate is simulated from that
profile (shard times scaled by cases, see :mod:`convnet.simulate.costs`), so
the search costs one short profile however many candidates there are.  The
candidates are those of :mod:`convnet.plan.placements` and the layer-wise
splits with micro-batches of :mod:`convnet.plan.layer_cuts`; any the planner
refuses, or whose memory (the estimate training checks before it allocates) does
not fit in what the machine has free, is listed with its reason and left out of
the ranking, before anything is profiled.

Candidates whose predicted steps lie within the profile's noise of the fastest's
(how far the fastest's step moves when predicted from each profile round alone)
are a tie: they are listed first, simplest first (:func:`simplicity`), and the
simplest is the one written.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from convnet.app.run import assembly
from convnet.app.options import RunOptions, auto_place_output, refuse_an_input
from convnet.app.prediction.simulation import measure_cost_models
from convnet.app.run.memory_fit import memory_pools, weight_sharing
from convnet.config.gpu_lines import set_gpu_lines, set_key_lines
from convnet.config.ini import read_text
from convnet.config.model import NetConfig
from convnet.errors import ConvnetError, DeviceError, PlanError
from convnet.outputs import refuse_existing, write_outputs
from convnet.plan.layer_cuts import pipeline_candidates
from convnet.plan.ops import Copy, Plan
from convnet.plan.placements import Candidate, candidates
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import choose_backend
from convnet.simulate.costs import CostModel
from convnet.simulate.report import figure_lines
from convnet.simulate.schedule import Simulation


@dataclass
class Ranked:
    candidate: Candidate
    plan: Plan
    sim: Simulation


@dataclass
class Ranking:
    ranked: list[Ranked]  # the valid candidates, fastest predicted step first
    refused: list[tuple[str, str]]  # (name, why it was left out)
    costs: CostModel | None = None  # what the predictions rest on
    noise: float | None = None  # the profile's noise on the best's step, a share (None:
    # one round, not measured)
    tied: int = 1  # the first ``tied`` candidates lie within it: a tie, simplest first
    rounds: int = 0  # the profile's rounds the noise comes from


#: The schemes from the simplest: fewer kinds of traffic between devices first.
SCHEME_ORDER = ("single", "data", "model", "hybrid")


def simplicity(r: Ranked) -> tuple:
    """How simple a placement is to run and to reason about, simplest first: fewer
    devices used, fewer passes per minibatch, fewer micro-batches, then its scheme
    (single, data, model, hybrid) and fewer copies between devices."""
    plan = r.plan
    used = len({d for p in plan.layers.values() for d in p.devices})
    copies = sum(1 for op in plan.ops if isinstance(op, Copy))
    return (used, plan.num_passes, r.candidate.micro_batches, SCHEME_ORDER.index(plan.scheme)
            if plan.scheme in SCHEME_ORDER else len(SCHEME_ORDER), copies)


def prediction_noise(best: Plan, rounds: list[CostModel]) -> float | None:
    """The noise of a prediction: half the range of the step that each round's profile
    alone predicts for ``best``, as a share of their median; None with one round."""
    if len(rounds) < 2:
        return None
    steps = sorted(model.predict(best).step_seconds for model in rounds)
    return (steps[-1] - steps[0]) / 2 / statistics.median(steps)


def ties_first(ranked: list[Ranked], noise: float | None) -> tuple[list[Ranked], int]:
    """``ranked`` (fastest first) with the candidates whose step lies within ``noise`` of
    the fastest's (a tie) put first in order of :func:`simplicity`, and how many tie."""
    if not ranked or not noise:
        return ranked, 1
    bound = ranked[0].sim.step_seconds * (1 + noise)
    tied = [r for r in ranked if r.sim.step_seconds <= bound]
    return sorted(tied, key=simplicity) + ranked[len(tied):], len(tied)


def screen(opts: RunOptions, net: NetConfig) -> tuple[list[tuple[Candidate, Plan]],
                                                      list[tuple[str, str]]]:
    """The candidates that plan and fit in memory (the check training makes before it
    allocates anything, :func:`~convnet.app.run.memory_fit.memory_pools`), and for every
    other its name and why: checked before any profile, so that none is profiled or
    recommended that training would refuse."""
    backend = choose_backend(opts.backend)
    kept, refused = [], []
    for candidate in candidates(net, opts.auto_place) + pipeline_candidates(net, opts.auto_place):
        placed = candidate.apply(net)
        try:
            plan = make_plan(placed, opts.gpu, opts.mini, candidate.micro_batches,
                             opts.pipeline_schedule)
        except PlanError as error:
            refused.append((candidate.name, f"not a valid plan: {error}"))
            continue
        short = [pool for pool in memory_pools(plan, placed, backend, shared=weight_sharing(
                     plan, placed, backend, opts.sync, processes=1)) if not pool.fits]
        if short:
            refused.append((candidate.name, "does not fit in memory: " +
                            "; ".join(pool.shortfall_text() for pool in short)))
            continue
        kept.append((candidate, plan))
    return kept, refused


def rank(opts: RunOptions, net: NetConfig) -> Ranking:
    """Plan, check and simulate every candidate placement of ``net`` on ``opts.gpu``."""
    plans, refused = screen(opts, net)
    if not plans:
        reasons = "; ".join(f"{name}: {why}" for name, why in refused)
        named = 1 + max((g for ldef in net for g in (ldef.gpu or ())), default=0)
        hint = (f" (the config itself places the net on {named} devices: try --auto-place "
                f"{named})" if named > opts.auto_place else "")
        error = (DeviceError if all(why.startswith("does not fit") for _, why in refused)
                 else PlanError)
        raise error(f"--auto-place: no placement of the net on {opts.auto_place} devices is "
                    f"left{hint}: {reasons}")
    costs, rounds = measure_cost_models(opts, net, "--auto-place")
    ranked = [Ranked(candidate, plan, costs.predict(plan)) for candidate, plan in plans]
    ranked.sort(key=lambda r: r.sim.step_seconds)
    noise = prediction_noise(ranked[0].plan, rounds)
    ranked, tied = ties_first(ranked, noise)
    return Ranking(ranked, refused, costs, noise, tied, len(rounds))


def changed_periods(net: NetConfig, best: Ranked) -> dict[str, int]:
    """The update periods of ``best`` that the layer-params file does not already give
    (0, the default, counts as the layer's activation period)."""
    out = {}
    for name, u in best.candidate.update_periods.items():
        given = int(net.layers[name].params.get("updatePeriod", 0) or 0)
        if (given or best.plan.layers[name].period) != u:
            out[name] = u
    return out


def params_output(opts: RunOptions, layer_def_out: Path) -> Path:
    """Where the layer-params file goes: beside the layer-def file, ``-params`` added."""
    return layer_def_out.with_name(f"{layer_def_out.stem}-params{layer_def_out.suffix}")


def ranking_text(ranking: Ranking) -> str:
    header = ["rank", "placement", "predicted ms", "img/s", "idle per device (predicted)"]
    tie = ranking.tied > 1
    rows = [[f"{i}=" if tie and i <= ranking.tied else str(i), r.candidate.name,
             f"{r.sim.step_seconds * 1e3:.2f}",
             f"{r.sim.images_per_second:,.0f}",
             " ".join(f"{s.device}:{s.idle / r.sim.step_seconds:.0%}" if r.sim.step_seconds
                      else f"{s.device}:-" for s in r.sim.devices)]
            for i, r in enumerate(ranking.ranked, start=1)]
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i in (1, 4) else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths))).rstrip()
             for row in [header] + rows]
    if ranking.noise is None:
        lines.append(f"noise: not measured (the profile took {ranking.rounds} round; two or "
                     "more give each round's prediction to compare)")
    elif tie:
        lines.append(f"ranks 1-{ranking.tied} tie: their predicted steps lie within the "
                     f"profile's noise of the fastest's, ±{100 * ranking.noise:.1f}% (half "
                     f"the range of its step predicted from each of the {ranking.rounds} "
                     "profile rounds alone); the simplest placement comes first (fewer "
                     "devices, passes, micro-batches, then single, data, model, hybrid)")
    else:
        lines.append(f"no tie: the next placement is beyond the profile's noise, "
                     f"±{100 * ranking.noise:.1f}% (half the range of the best's step "
                     f"predicted from each of the {ranking.rounds} profile rounds alone)")
    lines += [f"left out: {name}: {reason}" for name, reason in ranking.refused]
    if ranking.costs is not None and ranking.ranked:
        lines += ["predicted: simulated from these figures [fitted]:"]
        lines += [f"  {line}" for line in figure_lines(ranking.costs, ranking.ranked[0].plan)]
    return "\n".join(lines)


def run(opts: RunOptions) -> int:
    """Rank the placements, print the table and write the best one."""
    out = auto_place_output(opts)
    params_out = params_output(opts, out)
    # checked before the profile, though written only where the chosen periods differ
    refuse_an_input("--auto-place-out", params_out, opts)
    refuse_existing(params_out, opts.overwrite,
                    keep="give another --auto-place-out FILE (its layer-params file, written "
                         "where the chosen update periods differ from yours, goes beside it)")
    net = assembly.load_net_for(opts)
    ranking = rank(opts, net)
    print(f"Placements of {opts.layer_def} on {opts.auto_place} devices (--gpu "
          f"{','.join(map(str, opts.gpu))}), predicted from one profile of the net "
          f"(docs/SIMULATE.md):")
    print(ranking_text(ranking))
    best = ranking.ranked[0]
    periods = changed_periods(net, best)
    layer_def = set_gpu_lines(read_text(str(opts.layer_def)), str(opts.layer_def),
                              best.candidate.gpus)
    files = [(out, layer_def.encode())]
    if periods:
        files.append((params_out, set_key_lines(read_text(str(opts.layer_params)),
                                                str(opts.layer_params), "updatePeriod",
                                                {name: str(u) for name, u in periods.items()}
                                                ).encode()))
    try:  # both or neither: a layer-def without its params file would train wrongly
        write_outputs(files)
    except OSError as error:
        names = " and ".join(str(path) for path, _ in files)
        raise ConvnetError(f"--auto-place: cannot write {names}: {error.strerror or error} "
                           "(nothing written)") from None
    micro = (f" --micro-batches {best.candidate.micro_batches}"
             if best.candidate.micro_batches > 1 else "")
    what = "best (the simplest of the tie)" if ranking.tied > 1 else "best"
    if periods:
        print(f"{what}: {best.candidate.name}, written to {out} and {params_out} "
              f"(train with --layer-params {params_out}{micro})")
    else:
        print(f"{what}: {best.candidate.name}, written to {out}" +
              (f" (train with{micro})" if micro else ""))
    return 0

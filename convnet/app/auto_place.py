"""``--auto-place N``: rank a family of placements of the net with the simulator and
write the best as a layer-def file.

The per-layer costs are profiled once, on the one-device placement (or, when
the planner refuses that, the first candidate it accepts), and every candidate is simulated from that profile (shard times scaled by cases, see
:mod:`convnet.simulate.costs`), so the search costs one short profile however
many candidates there are.  The candidates are those of
:mod:`convnet.plan.placements`; any the planner refuses is listed with its
reason and left out of the ranking.
"""

from __future__ import annotations

from dataclasses import dataclass

from convnet.app import training
from convnet.app.options import RunOptions, auto_place_output
from convnet.app.simulation import measure_costs
from convnet.config.gpu_lines import set_gpu_lines
from convnet.config.ini import read_text
from convnet.errors import ConvnetError, PlanError
from convnet.plan.placements import Candidate, candidates
from convnet.plan.planner import make_plan
from convnet.simulate.schedule import Simulation, simulate


@dataclass
class Ranked:
    candidate: Candidate
    sim: Simulation


@dataclass
class Ranking:
    ranked: list[Ranked]  # the valid candidates, fastest predicted step first
    refused: list[tuple[str, str]]  # (name, the planner's reason)
    profiled: str  # the candidate whose profile every prediction comes from


def rank(opts: RunOptions) -> Ranking:
    """Plan and simulate every candidate placement of the net of ``opts``."""
    net = training.load_net_for(opts)
    plans, refused = [], []
    for candidate in candidates(net, opts.auto_place):
        placed = candidate.apply(net)
        try:
            plans.append((candidate, placed, make_plan(placed, opts.gpu, opts.mini)))
        except PlanError as error:
            refused.append((candidate.name, str(error)))
    if not plans:
        name, reason = refused[0]
        raise PlanError(f"--auto-place: no placement of the net is valid ({name}: {reason})")
    # The first valid candidate is the one-device placement unless the planner refused
    # it (an updatePeriod may need replicas); its profile is the least disturbed.
    profiled, profiled_net, profiled_plan = plans[0]
    costs = measure_costs(opts, profiled_net, profiled_plan, "--auto-place")
    ranked = [Ranked(candidate, simulate(plan, costs.seconds, costs.resources(plan)))
              for candidate, _, plan in plans]
    ranked.sort(key=lambda r: r.sim.step_seconds)
    return Ranking(ranked, refused, profiled.name)


def ranking_text(ranking: Ranking) -> str:
    header = ["rank", "placement", "predicted ms", "img/s", "idle per device"]
    rows = [[str(i), r.candidate.name, f"{r.sim.step_seconds * 1e3:.2f}",
             f"{r.sim.images_per_second:,.0f}",
             " ".join(f"{s.device}:{s.idle / r.sim.step_seconds:.0%}" if r.sim.step_seconds
                      else f"{s.device}:-" for s in r.sim.devices)]
            for i, r in enumerate(ranking.ranked, start=1)]
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i in (1, 4) else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths))).rstrip()
             for row in [header] + rows]
    lines += [f"not a valid plan: {name}: {reason}" for name, reason in ranking.refused]
    return "\n".join(lines)


def run(opts: RunOptions) -> int:
    """Rank the placements, print the table and write the best one."""
    out = auto_place_output(opts)
    ranking = rank(opts)
    print(f"Placements of {opts.layer_def} on {opts.auto_place} devices (--gpu "
          f"{','.join(map(str, opts.gpu))}), predicted from one profile of the "
          f"'{ranking.profiled}' placement (docs/SIMULATE.md):")
    print(ranking_text(ranking))
    best = ranking.ranked[0].candidate
    text = set_gpu_lines(read_text(str(opts.layer_def)), str(opts.layer_def), best.gpus)
    try:
        out.write_text(text)
    except OSError as error:
        raise ConvnetError(f"--auto-place: cannot write {out}: {error.strerror}") from None
    print(f"best: {best.name}, written to {out}")
    return 0

"""The randSparse connectivity tables a run uses, for ``--print-plan``.

A fresh run draws each table from its seed and the layer's name
(:mod:`convnet.layers.connectivity`); a resumed run uses its checkpoint's,
whatever its seed, so that is what the plan shows when ``--load-file`` is
given.
"""

from __future__ import annotations

import numpy as np

from convnet.app.options import RunOptions
from convnet.app.run.resume_state import saved_tables
from convnet.config.model import NetConfig
from convnet.layers.connectivity import connection_tables
from convnet.plan.ops import Plan

Tables = dict[str, dict[int, np.ndarray]]  # layer -> input index -> channel indices


def run_tables(opts: RunOptions, net: NetConfig, plan: Plan) -> tuple[Tables, str]:
    """The tables of every randSparse layer the plan runs, and where they come from."""
    drawn = {name: tables for name in plan.layers
             if (tables := connection_tables(net[name], opts.seed))}
    if not drawn or opts.resume is None:
        return drawn, f"drawn from --seed {opts.seed} and each layer's name"
    return (drawn | saved_tables(opts.resume.checkpoint, net, plan),
            f"from the checkpoint {opts.resume.checkpoint}")


def tables_text(tables: Tables, net: NetConfig, source: str) -> str:
    """One line per filter group: the channels it reads."""
    lines = [f"Random sparse connectivity (randSparse; {source}): the input channels each "
             "filter group reads"]
    for name, inputs in tables.items():
        attrs = net[name].attrs
        for i, table in inputs.items():
            fc, groups = attrs["filterChannels"][i], attrs["groups"][i]
            source_layer = net[name].inputs[i]
            lines.append(f"  {name} input {i} ('{source_layer}', {attrs['channels'][i]} "
                         f"channels), {groups} groups of {fc}:")
            lines += [f"    group {g}: " + " ".join(map(str, table[g * fc:(g + 1) * fc]))
                      for g in range(groups)]
    return "\n".join(lines)


def tables_summary(tables: Tables, net: NetConfig) -> dict:
    """The tables for ``--print-plan json``: layer -> input -> each group's channels."""
    return {name: {str(i): table.reshape(net[name].attrs["groups"][i], -1).tolist()
                   for i, table in inputs.items()}
            for name, inputs in tables.items()}


__all__ = ["run_tables", "tables_summary", "tables_text"]

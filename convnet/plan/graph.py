"""``--print-plan --plan-graph PNG``: the layer graph of a plan, coloured by device.

Layers are boxes laid out top to bottom by depth (a layer sits one row below
its deepest input), in file order within a row, nudged under their inputs.
Arrows run from each input to the layers that read it.  A box is filled with
the colour of the device its replica runs on; a layer with several replicas
is striped, one stripe per device, and says so in its label.  An arrow is
dashed where the plan copies that activation between devices for the reader
(e.g. from data-parallel conv replicas into a one-replica fc layer).  Only
matplotlib is used (Agg, no display).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from convnet.config.model import NetConfig
from convnet.errors import ConvnetError
from convnet.outputs import write_output
from convnet.plan.ops import Plan

DPI = 100
BOX_W, BOX_H = 2.0, 0.72  # in layout units
X_STEP, Y_STEP = 2.35, 1.15
INCH_PER_UNIT = 0.78
COPY_COLOUR = "#b35806"
UNPLACED = "#d9d9d9"
TOP_IN = 0.75  # title and legend above the graph


def layer_depths(net: NetConfig) -> dict[str, int]:
    """Row of every layer: one below its deepest input; a layer without inputs (a data
    layer) sits just above its first reader, so the labels do not cross the whole net."""
    depth = {}
    for ldef in net:  # file order is a topological order
        depth[ldef.name] = 1 + max((depth[i] for i in ldef.inputs), default=-1)
    for ldef in net:
        readers = net.consumers(ldef.name)
        if not ldef.inputs and readers and depth[ldef.name] == 0:
            depth[ldef.name] = max(min(depth[r] for r in readers) - 1, 0)
    return depth


def layout(net: NetConfig) -> dict[str, tuple[float, float]]:
    """Centre (x, y) of every layer's box, in layout units (y grows downwards)."""
    depth = layer_depths(net)
    order = {ldef.name: k for k, ldef in enumerate(net)}
    rows: dict[int, list[str]] = {}
    for name in order:
        rows.setdefault(depth[name], []).append(name)
    pos: dict[str, tuple[float, float]] = {}
    for row in sorted(rows):
        names = rows[row]

        def under_inputs(name):  # mean x of the inputs, so towers stay in columns
            xs = [pos[i][0] for i in net[name].inputs if i in pos]
            return (sum(xs) / len(xs) if xs else 0.0, order[name])

        if row:
            names.sort(key=under_inputs)
        for k, name in enumerate(names):
            pos[name] = ((k - (len(names) - 1) / 2) * X_STEP, row * Y_STEP)
    return pos


def copied_edge(plan: Plan, source: str, reader: str) -> bool:
    """Whether the plan copies ``source``'s activation between devices for ``reader``."""
    placement = plan.layers.get(reader)
    if placement is None or not placement.devices or not plan.layers[source].devices:
        return False
    for p in placement.active_passes(plan.num_passes):
        for replica, device in enumerate(placement.devices):
            shard = placement.shard(p, replica, plan.rmin)
            if plan.producer_of(source, shard)[1] != device:
                return True
    return False


def device_colours(num_devices: int) -> list[tuple[float, float, float]]:
    """A light colour per logical device (tab10, mixed with white so text stays legible)."""
    from matplotlib import colormaps

    base = colormaps["tab10"]
    return [tuple(0.45 * c + 0.55 for c in base(d % 10)[:3]) for d in range(num_devices)]


def figure_size(net: NetConfig) -> tuple[float, float]:
    pos = layout(net)
    xs = [x for x, _ in pos.values()]
    ys = [y for _, y in pos.values()]
    width = (max(xs) - min(xs) + BOX_W + 1.0) * INCH_PER_UNIT
    height = (max(ys) - min(ys) + BOX_H + 0.6) * INCH_PER_UNIT + TOP_IN
    return _quarter_inches(max(width, 7.0)), _quarter_inches(max(height, 3.0))


def _quarter_inches(inches: float) -> float:
    """Round up to a quarter inch: exact in binary, so the PNG is exactly inches * DPI."""
    return math.ceil(inches * 4) / 4


def plan_figure(plan: Plan, net: NetConfig, title: str | None = None):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

    pos = layout(net)
    colours = device_colours(plan.num_devices)
    fig = Figure(figsize=figure_size(net), dpi=DPI)
    FigureCanvasAgg(fig)
    height = figure_size(net)[1]
    ax = fig.add_axes((0.01, 0.01, 0.98, 0.98 - TOP_IN / height))
    ax.set_axis_off()
    copies = False
    for ldef in net:
        x1, y1 = pos[ldef.name]
        for source in ldef.inputs:
            x0, y0 = pos[source]
            copied = copied_edge(plan, source, ldef.name)
            copies = copies or copied
            ax.add_patch(FancyArrowPatch(
                (x0, y0 + BOX_H / 2), (x1, y1 - BOX_H / 2), arrowstyle="-|>",
                mutation_scale=9, linewidth=1.3 if copied else 0.8,
                linestyle=(0, (4, 2)) if copied else "-",
                color=COPY_COLOUR if copied else "#555555", shrinkA=1, shrinkB=1, zorder=1))
    for ldef in net:
        placement = plan.layers[ldef.name]
        x, y = pos[ldef.name]
        devices = placement.devices
        left, top = x - BOX_W / 2, y - BOX_H / 2
        stripes = devices or (None,)
        width = BOX_W / len(stripes)
        for k, d in enumerate(stripes):
            ax.add_patch(Rectangle((left + k * width, top), width, BOX_H, linewidth=0,
                                   facecolor=UNPLACED if d is None else colours[d], zorder=2))
        ax.add_patch(Rectangle((left, top), BOX_W, BOX_H, fill=False, linewidth=0.8,
                               edgecolor="#333333", zorder=3))
        shape = "x".join(map(str, placement.output_shape)) or "-"
        if not devices:
            where = "not placed"
        elif len(devices) == 1:
            where = f"device {devices[0]}"
        else:
            where = f"devices {','.join(map(str, devices))}"
        if placement.scheme in ("data", "model"):
            where += f" ({placement.scheme})"
        ax.text(x, y - 0.17, ldef.name, ha="center", va="center", fontsize=7.5,
                fontweight="bold", zorder=4)
        ax.text(x, y + 0.02, f"{ldef.type} {shape}", ha="center", va="center", fontsize=6.5,
                zorder=4)
        ax.text(x, y + 0.2, where, ha="center", va="center", fontsize=6.5, zorder=4)
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    ax.set_xlim(min(xs) - BOX_W / 2 - 0.3, max(xs) + BOX_W / 2 + 0.3)
    ax.set_ylim(max(ys) + BOX_H / 2 + 0.2, min(ys) - BOX_H / 2 - 0.2)
    handles = [Patch(facecolor=colours[d], edgecolor="#333333",
                     label=f"device {d} (physical {plan.physical_devices[d]})")
               for d in range(plan.num_devices)]
    if copies:
        handles.append(Line2D([], [], color=COPY_COLOUR, linestyle=(0, (4, 2)),
                              label="copied between devices"))
    fig.legend(handles=handles, loc="upper center", ncols=min(len(handles), 4), fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, 1 - 0.35 / height))
    head = f"{title}: " if title else ""
    fig.suptitle(f"{head}{plan.scheme}, {plan.num_passes} pass(es) per minibatch of "
                 f"{plan.minibatch} ({plan.num_shards} shard(s))", fontsize=10,
                 y=1 - 0.06 / height, va="top")
    return fig


def write_plan_graph(plan: Plan, net: NetConfig, path: Path, note=None) -> Path:
    """Draw the plan's layer graph into ``path`` (PNG, replaced atomically, never
    through a link) and say so on stderr."""
    title = Path(net.layer_def_file).name if net.layer_def_file else None
    fig = plan_figure(plan, net, title)
    path = Path(path)
    try:
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        write_output(path, lambda file: fig.savefig(file, format="png", dpi=DPI))
    except OSError as error:
        raise ConvnetError(f"cannot write the plan graph {path}: {error.strerror}") from None
    (note or (lambda text: print(text, file=sys.stderr)))(f"wrote the layer graph to {path}")
    return path

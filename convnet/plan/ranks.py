"""Where a plan's traffic goes when its devices are spread over several processes.

Logical devices are spread rank-major (device ``i`` on rank ``i // k`` for
``k`` devices per rank).  Per rank this counts the bytes of one minibatch
that cross to or from other processes (copies, gradient copies, and the
slices of a sharded all-reduce: replica q sends slice r of its gradient to
replica r and receives r's updated weight slice back, 1/R of the layer
each; the statistics of a bnorm layer with ``stats=global``, from every replica
to every other) apart from the bytes moved between devices of the same process.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from convnet.plan.ops import AllReduce, BatchStats, Copy, GradCopy, Plan
from convnet.plan.report import _table, human_bytes


@dataclass
class RankTotals:
    rank: int
    host: str
    devices: tuple[int, ...]
    sent_bytes: int = 0  # to other processes
    received_bytes: int = 0  # from other processes
    inside_bytes: int = 0  # between devices of this process


def transfers(plan: Plan):
    """(src device, dst device, bytes) of every transfer of one minibatch."""
    for op in plan.ops:
        if isinstance(op, (Copy, GradCopy)):
            yield op.src, op.dst, op.nbytes
        elif isinstance(op, AllReduce):
            devices = op.replica_devices
            share = op.nbytes // len(devices)
            for q in devices:
                for r in devices:
                    if q != r:
                        yield q, r, share  # gradient slice r to its owner
                        yield r, q, share  # the owner's updated weight slice back
        elif isinstance(op, BatchStats):
            for q in op.replica_devices:
                for r in op.replica_devices:
                    if q != r:
                        yield q, r, op.nbytes  # q's statistics, for r's combination


def rank_totals(plan: Plan, devices_per_rank: int, hosts) -> list[RankTotals]:
    """Per-rank traffic of one minibatch (``hosts``: every rank's host name, or empty)."""
    size = -(-plan.num_devices // devices_per_rank)
    totals = [RankTotals(r, hosts[r] if r < len(hosts) else "",
                         tuple(range(r * devices_per_rank,
                                     min((r + 1) * devices_per_rank, plan.num_devices))))
              for r in range(size)]
    for src, dst, nbytes in transfers(plan):
        a, b = src // devices_per_rank, dst // devices_per_rank
        if a == b:
            totals[a].inside_bytes += nbytes
        else:
            totals[a].sent_bytes += nbytes
            totals[b].received_bytes += nbytes
    return totals


def ranks_summary(plan: Plan, devices_per_rank: int, hosts) -> list[dict]:
    return [asdict(t) for t in rank_totals(plan, devices_per_rank, hosts)]


def ranks_text(plan: Plan, devices_per_rank: int, hosts) -> str:
    """The processes section of ``--print-plan``."""
    k = devices_per_rank
    lines = [f"Processes (logical device i on rank i // {k}, physical device "
             f"gpu[i % {k}] of that rank's --gpu)"]
    rows = [[t.rank, t.host or "-", ",".join(map(str, t.devices)), human_bytes(t.sent_bytes),
             human_bytes(t.received_bytes), human_bytes(t.inside_bytes)]
            for t in rank_totals(plan, devices_per_rank, hosts)]
    lines += _table(rows, ["rank", "host", "devices", "sent to other processes",
                           "received from other processes", "moved inside the process"])
    return "\n".join(lines)


__all__ = ["RankTotals", "rank_totals", "ranks_summary", "ranks_text", "transfers"]

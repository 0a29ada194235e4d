"""The parts of multi-process runs that need no MPI: launcher detection, the per-rank
task lists, the traffic report, the rank-tagged error stream, a missing mpi4py, the
bytes of an async update message, the async dealer."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convnet.app.launch import _RankStderr
from convnet.plan.planner import make_plan
from convnet.plan.ranks import rank_totals
from convnet.runtime.processes.cluster import launched_size
from convnet.runtime.processes.rank_courier import META_BYTES, TRAINING, Dealer, update_layout
from convnet.runtime.step.rank_tasks import tasks_for_rank
from convnet.runtime.step.tasks import TaskAction, make_tasks
from tests.support.mpi import env
from tests.support.plans import fc_net

# Hybrid: a data-parallel fc (all-reduce), then model-parallel fc pair and a gather.
NET = [("fc1", "fc", ["data"], [0, 1, 2, 3], 0),
       ("a", "fc", ["fc1"], [0], 0), ("b", "fc", ["fc1"], [3], 0),
       ("join", "pass", ["a", "b"], [0], 0),
       ("out", "fc", ["join"], [0], 0), ("probs", "softmax", ["out"], None, 0),
       ("cost", "cost.logreg", ["labels", "probs"], None, 0)]


@pytest.mark.parametrize("environ, size", [({}, 1), ({"PMI_SIZE": "4", "PMI_RANK": "1"}, 4),
                                           ({"OMPI_COMM_WORLD_SIZE": "2"}, 2),
                                           ({"PMI_SIZE": "1"}, 1)])
def test_launcher_detection(environ, size):
    assert launched_size(environ) == size


def _rank_lists(per_rank: int):
    plan = make_plan(fc_net(NET), (0, 0, 0, 0), 8)
    tasks = make_tasks(plan.ops, lambda op: True)
    devices = lambda layer: plan.layers[layer].devices  # noqa: E731
    return tasks, [tasks_for_rank(tasks, lambda d: d // per_rank, r, devices, 1 << 20)
                   for r in range(4 // per_rank)]


@pytest.mark.parametrize("per_rank", [1, 2])
def test_every_send_has_its_receive(per_rank):
    _, lists = _rank_lists(per_rank)
    sends = {(r, t.transfer.peer, t.transfer.tag) for r, tasks in enumerate(lists)
             for t in tasks if t.action in (TaskAction.SEND, TaskAction.SEND_SLICE)}
    recvs = {(t.transfer.peer, r, t.transfer.tag) for r, tasks in enumerate(lists)
             for t in tasks if t.action in (TaskAction.RECV, TaskAction.RECV_SLICE)}
    assert sends == recvs and sends
    for rank, tasks in enumerate(lists):
        for task in tasks:
            assert all(per_rank * rank <= d < per_rank * (rank + 1) for d in task.devices)
            assert all(d < task.index for d in task.deps)  # a valid order of its own


def test_ranks_keep_every_task_of_their_devices():
    tasks, lists = _rank_lists(1)
    crossing = {TaskAction.SEND, TaskAction.RECV, TaskAction.SEND_SLICE, TaskAction.RECV_SLICE}
    kept = sum(1 for tasks_ in lists for t in tasks_ if t.action not in crossing)
    pulls = sum(1 for t in tasks if t.action in (TaskAction.COPY, TaskAction.GRAD_COPY)
                and t.op.src != t.op.dst)
    assert kept + pulls == len(tasks)  # one device per rank: every pull crosses processes


def test_traffic_split_between_and_inside_processes():
    plan = make_plan(fc_net(NET), (0, 0, 0, 0), 8)
    apart = rank_totals(plan, 1, ("h0", "h1", "h2", "h3"))
    together = rank_totals(plan, 4, ("h0",))
    assert sum(t.inside_bytes for t in apart) == 0
    assert together[0].sent_bytes == together[0].received_bytes == 0
    assert together[0].inside_bytes == sum(t.sent_bytes for t in apart)
    assert sum(t.sent_bytes for t in apart) == sum(t.received_bytes for t in apart)


def test_rank_stream_names_the_rank_and_keeps_other_ranks_quiet():
    out = io.StringIO()
    stream = _RankStderr(out, 3, errors_only=True)
    print("warning: something", file=stream)
    print("error: it broke", file=stream)
    print("more noise", file=stream)
    assert out.getvalue() == "error: rank 3: it broke\n"
    out0 = io.StringIO()
    print("warning: kept", file=_RankStderr(out0, 0, errors_only=False))
    assert out0.getvalue() == "warning: kept\n"


class _Writes(io.StringIO):
    """A stream that records every write it gets."""

    def __init__(self):
        super().__init__()
        self.writes = []

    def write(self, text):
        self.writes.append(text)
        return super().write(text)


def test_rank_stream_passes_each_line_in_one_write():
    """print() writes a line and its newline apart; ranks that print at once must not
    interleave mid-line, so the line goes on whole."""
    out = _Writes()
    print("error: it broke", file=_RankStderr(out, 1, errors_only=True))
    assert out.writes == ["error: rank 1: it broke\n"]


def test_a_rank_stopped_by_a_signal_says_so():
    """A rank other than 0 stopped on its own (SIGTERM) names itself; its other lines
    stay quiet."""
    out = io.StringIO()
    stream = _RankStderr(out, 1, errors_only=True)
    print("resuming", file=stream)
    print("terminated", file=stream)
    assert out.getvalue() == "rank 1: terminated\n"


def test_rank_0_progress_bar_is_drawn_at_each_flush():
    out = _Writes()
    stream = _RankStderr(out, 0, errors_only=False)
    stream.write("\r 40%")
    stream.flush()
    stream.write("\r 80%")
    stream.flush()
    assert out.writes == ["\r 40%", "\r 80%"]


def test_several_processes_without_mpi4py_is_a_clear_error(tmp_path):
    code = ("import sys; sys.modules['mpi4py'] = None; "
            "from convnet.app.command_line.main import main; sys.exit(main(['--print-plan']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, env=env(PMI_SIZE="2", PMI_RANK="0"), timeout=60)
    assert done.returncode == 1
    assert "mpi4py cannot be imported" in done.stderr and "'.[mpi]'" in done.stderr
    assert "Traceback" not in done.stderr


@settings(max_examples=20, deadline=None)
@given(shapes=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=3), min_size=1,
                       max_size=4),
       ordinal=st.integers(0, 2 ** 40), seed=st.integers(0, 1000))
def test_an_update_message_carries_its_shard_number_costs_and_increments(shapes, ordinal,
                                                                         seed):
    rng = np.random.default_rng(seed)
    layers = {f"layer{i}": {"W0": tuple(shape), "b": (shape[0],)}
              for i, shape in enumerate(shapes)}
    layout = update_layout(layers)
    increments = {name: {k: rng.standard_normal(shape).astype(np.float32)
                         for k, shape in arrays.items()} for name, arrays in layers.items()}
    costs = {"cost": {"cost": float(rng.random()), "error": 0.25}}
    head = {"ordinal": ordinal, "cases": 7, "seconds": 0.125, "costs": costs}
    message = layout.pack(head, increments)
    assert message.dtype == np.uint8 and message.nbytes == layout.nbytes
    got_head, got = layout.unpack(message.copy())
    assert got_head == head
    for name, arrays in increments.items():
        for k, array in arrays.items():
            assert np.array_equal(got[name][k], array), (name, k)


def test_costs_too_large_for_an_update_message_are_an_error():
    layout = update_layout({"fc": {"W0": (2, 2)}})
    costs = {f"cost{i}": {"cost": 1.0 / 3} for i in range(META_BYTES // 20)}
    with pytest.raises(ValueError, match=f"message has room for {META_BYTES}"):
        layout.pack({"ordinal": 0, "cases": 1, "seconds": 0.0, "costs": costs},
                    {"fc": {"W0": np.zeros((2, 2), np.float32)}})


def test_the_dealer_numbers_shards_without_end_and_each_tests_pieces_up_to_its_limit():
    dealer = Dealer()
    assert [dealer.claim(TRAINING) for _ in range(3)] == [0, 1, 2]
    assert [dealer.claim(1, 2) for _ in range(3)] == [0, 1, -1]
    assert dealer.claim(TRAINING) == 3  # a test leaves the shard numbers alone
    assert [dealer.claim(2, 1) for _ in range(2)] == [0, -1]  # the next test starts at 0

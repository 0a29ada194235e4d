"""The rounds interleave the configs: A B C, A B C, ..., each step counted where it ran."""

from __future__ import annotations

from convnet.app.comparison.rounds import time_in_rounds


class FakeExecutor:
    """Records the order of its steps and drains in a shared log."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def step(self, batch, progress=0.0):
        self.log.append(self.name)

    def drain(self):
        self.log.append(f"{self.name}-drain")


def test_configs_take_turns_in_every_round():
    log: list = []
    done = []
    samples = time_in_rounds([FakeExecutor("A", log), FakeExecutor("B", log)], [[0]],
                             rounds=3, steps=2, on_round=done.append)
    block = lambda n: [n, f"{n}-drain", n, n, f"{n}-drain"]  # noqa: E731
    assert log == (block("A") + block("B")) * 3
    assert done == [1, 2, 3]
    assert [len(s) for s in samples] == [3, 3] and all(t >= 0 for s in samples for t in s)

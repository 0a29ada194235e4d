"""``convnet.train(...)``: a training run, as ``python convnet.py --save-path ...`` runs it,
returning what it measured."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from convnet.app.invocation import shown_path
from convnet.app.python_api.calls import as_on_the_command_line, options_of
from convnet.app.python_api.trained_net import TrainedNet, load
from convnet.app.run import job
from convnet.errors import UsageError


@dataclass(frozen=True)
class TrainingResult:
    """What a training run measured and left.

    ``history`` has one row per test (a resumed run's earlier rows included), with the
    columns of the run's ``log.csv`` (docs/USAGE.md): ``epoch``, ``batch``, ``cost``,
    ``error``, ``test_cost``, ``test_error`` (errors as fractions), ``learning_rate``,
    ``time_spent``, ``cumulative_time``, ``inputs_per_sec``; rows this run tested also
    have ``epoch_position``, where it stood in epochs.
    """

    history: tuple[dict, ...]
    seconds: float  # wall time of the training, earlier runs of a resumed one included
    # Absolute, so that they still name the run's files after a change of folder:
    save_path: Path | None
    checkpoint: Path | None  # the checkpoint this run saved, if any

    @property
    def test_error(self) -> float | None:
        """The last test's error, a fraction (None when nothing was tested)."""
        return self.history[-1]["test_error"] if self.history else None

    @property
    def test_cost(self) -> float | None:
        return self.history[-1]["test_cost"] if self.history else None

    @property
    def best_test_error(self) -> float | None:
        return min(row["test_error"] for row in self.history) if self.history else None

    def load(self, **options) -> TrainedNet:
        """The trained net, as :func:`convnet.load` opens the checkpoint saved."""
        if self.checkpoint is None:
            raise UsageError("this run saved no checkpoint (give save_path=... to train())")
        return load(self.checkpoint, **options)

    def __repr__(self) -> str:
        where = (f", saved to {shown_path(self.save_path)}" if self.checkpoint is not None
                 else "")
        error = "-" if self.test_error is None else f"{self.test_error:.4f}"
        return (f"TrainingResult(test_error={error}, {len(self.history)} test(s), "
                f"{self.seconds:.1f} s{where})")


def train(**options) -> TrainingResult:
    """Train a net as the command line would with these options, e.g.
    ``train(layer_def="examples/digits-data.cfg", layer_params="examples/digits-params.cfg",
    gpu=[0, 1], epochs=2, save_path="runs/a", mini=64)``; any option of ``python
    convnet.py --help`` is a keyword (``-`` written ``_``), and none gives the bundled
    example.  It prints what the command prints; errors raise the
    :class:`~convnet.errors.ConvnetError` the command would print as its one line."""
    with as_on_the_command_line():
        opts = options_of(options, "convnet.train")
        trainer = job.execute(opts)
    log = trainer.log
    return TrainingResult(tuple(log.history), log.cumulative_time, _absolute(opts.save_path),
                          _absolute(trainer.saved_checkpoint))


def _absolute(path: Path | None) -> Path | None:
    return None if path is None else Path(path).absolute()

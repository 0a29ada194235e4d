"""The training job: data, net, plan and executor put together, epoch after epoch.

Batches come from a data provider in a fixed order (and, for training,
augmented deterministically from (seed, epoch, batch)), each batch is cut
into minibatches of ``--mini`` cases, and every ``--test-freq`` batches the
test batches are evaluated, a line is printed and logged, and a checkpoint is
written.  Everything a resumed run needs (weights, momentum, step and batch
counters, options) goes into the checkpoint, so resuming continues exactly
where the saved run stood.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from convnet.backends import choose_backend
from convnet.config import load_net, parse_data_dims
from convnet.config.model import NetConfig
from convnet.data import BatchPrefetcher, DataOptions, make_provider, parse_range
from convnet.devices import make_devices
from convnet.errors import ConfigError, DataError
from convnet.executor import Executor
from convnet.plan import Plan
from convnet.planner import make_plan
from convnet.run_log import RunLog, TestResult, progress_bar

CHECKPOINT_NAME = "checkpoint.npz"


def make_data_provider(opts: argparse.Namespace):
    options = DataOptions(
        data_path=str(opts.data_path) if opts.data_path else None,
        train_range=parse_range(opts.train_range) if opts.train_range else None,
        test_range=parse_range(opts.test_range) if opts.test_range else None,
        inner_size=opts.inner_size, color_noise=opts.color_noise, scalar_mean=opts.scalar_mean,
        multiview_test=opts.multiview_test, seed=opts.seed,
        data_dims={0: parse_data_dims(opts.data_dims), 1: (1,)} if opts.data_dims else None,
        num_classes=opts.num_classes)
    return make_provider(opts.data_provider, options=options)


def load_net_for(opts: argparse.Namespace, provider=None) -> NetConfig:
    """The net with shapes from the provider, or from --data-dims/--num-classes."""
    if provider is not None:
        dims, classes = provider.data_dims, provider.num_classes
    elif opts.data_dims:
        if not opts.num_classes:
            raise ConfigError("--data-dims needs --num-classes too")
        dims, classes = {0: parse_data_dims(opts.data_dims), 1: (1,)}, opts.num_classes
    else:
        provider = make_data_provider(opts)
        dims, classes = provider.data_dims, provider.num_classes
    return load_net(opts.layer_def, opts.layer_params, data_dims=dims, num_classes=classes)


def build_net_and_plan(opts: argparse.Namespace, provider=None) -> tuple[NetConfig, Plan]:
    net = load_net_for(opts, provider)
    return net, make_plan(net, opts.gpu, opts.mini)


def run(opts: argparse.Namespace) -> int:
    """Train (or with --test-only, evaluate) as the options say; returns the exit code."""
    provider = make_data_provider(opts)
    net, plan = build_net_and_plan(opts, provider)
    devices = make_devices(opts.gpu, choose_backend(opts.backend))
    executor = Executor(net, plan, devices, seed=opts.seed, parallel=not opts.sequential)
    try:
        trainer = Trainer(opts, provider, net, plan, executor)
        if opts.saved_state is not None:
            trainer.restore(*opts.saved_state)
        if opts.test_only:
            result = trainer.test()
            trainer.log.print_test_only(result)
            if opts.write_features:
                trainer.write_features()
            return 0
        return trainer.train()
    finally:
        executor.close()


class Trainer:
    """One training run: the loop, testing, logging and checkpoints."""

    def __init__(self, opts, provider, net: NetConfig, plan: Plan, executor: Executor):
        self.opts = opts
        self.provider = provider
        self.net = net
        self.plan = plan
        self.executor = executor
        self.epoch = 1
        self.batch_index = 0  # batches of the current epoch already trained
        self.cost_layer = self._cost_layer(opts.logreg_name)
        self.save_dir = Path(opts.save_path) if opts.save_path else None
        self.log = RunLog(self.save_dir, self.cost_layer, plan, quiet=opts.no_progress)
        if opts.profile:
            executor.timings = []  # the executor records op timings from now on

    def _cost_layer(self, wanted: str | None) -> str:
        costs = [l.name for l in self.net if l.is_cost]
        if not costs:
            raise ConfigError("the net has no cost layer to train", file=self.net.layer_def_file)
        if wanted is None:
            logregs = [c for c in costs if self.net[c].type == "cost.logreg"]
            return (logregs or costs)[0]
        if wanted not in costs:
            raise ConfigError(f"--logreg-name '{wanted}' is not a cost layer of the net "
                              f"(cost layers: {', '.join(costs)})")
        return wanted

    # ----------------------------------------------------------- checkpoints
    def restore(self, arrays: dict, meta: dict) -> None:
        self.executor.load_state_arrays(arrays)
        counters = meta.get("counters", {})
        self.executor.step_count = int(counters.get("step", 0))
        self.epoch = int(counters.get("epoch", 1))
        self.batch_index = int(counters.get("batch_index", 0))
        self.log.cumulative_time = float(counters.get("cumulative_time", 0.0))

    def save(self) -> Path | None:
        if self.save_dir is None:
            return None
        from convnet.checkpoint import save_checkpoint
        from convnet.commands import options_for_checkpoint

        meta = {"options": options_for_checkpoint(self.opts),
                "counters": {"step": self.executor.step_count, "epoch": self.epoch,
                             "batch_index": self.batch_index,
                             "cumulative_time": self.log.cumulative_time}}
        path = self.save_dir / CHECKPOINT_NAME
        save_checkpoint(path, self.executor.state_arrays(), meta)
        return path

    # -------------------------------------------------------------- the loop
    def train(self) -> int:
        opts = self.opts
        batches = self.provider.train_batches
        if not batches:
            raise DataError("the train range selects no batch")
        total_batches = opts.epochs * len(batches)
        test_freq = opts.test_freq or len(batches)
        test_error = None
        with progress_bar(total_batches, (self.epoch - 1) * len(batches) + self.batch_index,
                          disable=opts.no_progress) as bar:
            while self.epoch <= opts.epochs:
                todo = batches[self.batch_index:]
                with BatchPrefetcher(self.provider, todo, train=True, epoch=self.epoch) as loader:
                    for batch_id, batch in loader:
                        done = (self.epoch - 1) * len(batches) + self.batch_index
                        progress = done / total_batches
                        self._train_batch(batch, progress)
                        self.batch_index += 1
                        bar.update(1)
                        if (done + 1) % test_freq == 0 or self.batch_index == len(batches):
                            test_result = self.test()
                            test_error = test_result.error
                            self.log.record(self.epoch, batch_id, test_result,
                                            self._learning_rate(progress), write=bar.write)
                            self._maybe_save(test_error, final=False)
                if self.batch_index >= len(batches):
                    self.epoch += 1
                    self.batch_index = 0
        self._maybe_save(test_error, final=True)
        self.log.close()
        return 0

    def _train_batch(self, batch: list[np.ndarray], progress: float):
        totals = {"cost": 0.0, "error": 0.0, "cases": 0, "seconds": 0.0}
        for part in self._minibatches(batch):
            result = self.executor.step(part, progress)
            costs = result.costs.get(self.cost_layer, {})
            totals["cost"] += costs.get("cost", 0.0) * result.num_cases
            totals["error"] += costs.get("error", 0.0) * result.num_cases
            totals["cases"] += result.num_cases
            totals["seconds"] += result.seconds
            if self.opts.profile:
                self.log.add_profile(self.executor.timings)
        self.log.accumulate_train(totals)

    def _learning_rate(self, progress: float) -> float:
        for ldef in self.net:
            if ldef.has_weights:
                return ldef.params["epsW"][0].value(progress)
        return 0.0

    def _maybe_save(self, test_error: float | None, final: bool) -> None:
        limit = self.opts.max_test_err
        if limit is not None and (test_error is None or test_error > limit):
            if not (final and self.opts.force_save):
                return
        path = self.save()
        if path is not None and final:
            self.log.note(f"saved {path}")

    # --------------------------------------------------------------- testing
    def test(self) -> TestResult:
        cost = error = 0.0
        cases = 0
        views = self.opts.multiview_test and getattr(self.provider, "num_views", 1) > 1
        with BatchPrefetcher(self.provider, self.provider.test_batches, train=False,
                             views=views) as loader:
            for _, batch in loader:
                batch_cost, batch_error, n = (self._test_views(batch) if views
                                              else self._test_batch(batch))
                cost += batch_cost
                error += batch_error
                cases += n
        return TestResult(cost / max(cases, 1), error / max(cases, 1), cases)

    def _test_batch(self, batch):
        cost = error = 0.0
        for part in self._minibatches(batch):
            result = self.executor.evaluate(part)
            costs = result.costs.get(self.cost_layer, {})
            cost += costs.get("cost", 0.0) * result.num_cases
            error += costs.get("error", 0.0) * result.num_cases
        return cost, error, len(batch[0])

    def _test_views(self, batch):
        """Average the softmax over the views, then score (multiview testing)."""
        views, labels = batch
        probs_layer = self.net[self.cost_layer].inputs[1]
        total = 0
        for v in range(views.shape[0]):
            total = total + self._features([views[v], labels], probs_layer)
        probs = total / views.shape[0]
        truth = labels.reshape(-1).astype(np.int64)
        picked = np.maximum(probs[np.arange(len(truth)), truth], 1e-30)
        cost = float(-np.log(picked).sum())
        error = float((probs.argmax(axis=1) != truth).sum())
        return cost, error, len(truth)

    def _features(self, batch, layer: str) -> np.ndarray:
        parts = [self.executor.features(part, layer) for part in self._minibatches(batch)]
        return np.concatenate(parts).reshape(len(batch[0]), -1)

    def _minibatches(self, batch):
        """Cut a batch into --mini sized minibatches; a tail too short to be cut into
        one case per shard joins the minibatch before it (cut as evenly as possible)."""
        n = len(batch[0])
        if n < self.plan.num_shards:
            raise DataError(f"a batch of {n} case(s) is too small for "
                            f"{self.plan.num_shards} shards")
        starts = list(range(0, n, self.opts.mini))
        if len(starts) > 1 and n - starts[-1] < self.plan.num_shards:
            starts.pop()
        stops = starts[1:] + [n]
        for start, stop in zip(starts, stops):
            yield [column[start:stop] for column in batch]

    def write_features(self) -> None:
        layer = self.opts.write_features
        if layer not in self.net.layers:
            raise ConfigError(f"--write-features names '{layer}', which is not a layer of the net")
        folder = Path(self.opts.feature_path or (self.save_dir or Path(".")) / f"features-{layer}")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise DataError(f"cannot create feature folder {folder}: {error.strerror}") from None
        for batch_id in self.provider.test_batches:
            batch = self.provider.get_batch(batch_id, train=False, epoch=0)
            feats = self._features(batch, layer)
            target = folder / f"data_batch_{batch_id}.npz"
            try:
                np.savez(target, data=feats, labels=batch[1].reshape(-1))
            except OSError as error:
                raise DataError(f"cannot write features to {target}: {error.strerror}") from None
            self.log.note(f"wrote {feats.shape[0]} x {feats.shape[1]} features of '{layer}' "
                          f"to {target}")


"""The simulator's step of every ``--compare`` config, to set beside the measured one.

Configs of one network (the same layers, placed differently) share one profile:
the net is profiled once on one device (:class:`~convnet.app.prediction.simulation.NetProfiler`,
on the minibatch the rounds time) and every config's own plan is simulated from
it, so the prediction costs one short profile per distinct net, not one per
config.  The simulator predicts synchronous lockstep steps, so configs under
another ``--sync`` mode get none.
"""

from __future__ import annotations

from convnet.app.prediction.simulation import NetProfiler
from convnet.config.model import all_synchronous, on_one_device


#: Profile rounds of each distinct net: the prediction is a second opinion beside the
#: measured rounds, so it is kept short (seconds for the digits and CIFAR-10 nets).
PREDICTION_ROUNDS = 2


def predict_steps(results, options, planned, batch: list) -> None:
    """Fill ``predicted_seconds`` of every synchronous config of ``results`` that trained."""
    models: list[tuple[dict, object]] = []  # (the net on one device, its cost model)
    for result, opts, (net, plan) in zip(results, options, planned):
        if result.sync != "sync" or result.failure:
            continue
        single = on_one_device(all_synchronous(net)).layers
        model = next((m for layers, m in models if layers == single), None)
        if model is None:
            with NetProfiler(opts, net, "--compare", batch=batch) as profiler:
                for _ in range(PREDICTION_ROUNDS):
                    profiler.round()
                model = profiler.cost_model()
            models.append((single, model))
        result.predicted_seconds = model.predict(plan).step_seconds

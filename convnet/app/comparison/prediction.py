"""The simulator's step of every ``--compare`` config, to set beside the measured one.

Configs of one network (the same layers, placed differently) share one profile:
the net is profiled once on one device (:class:`~convnet.app.prediction.simulation.NetProfiler`,
on the minibatch the rounds time) and every config's own plan is simulated from
it, so the prediction costs one short profile per distinct net, not one per
config.  The simulator predicts synchronous lockstep steps, so configs under
another ``--sync`` mode get none.
"""

from __future__ import annotations

from convnet.app.prediction.simulation import NetProfiler, TooFewCasesToProfile
from convnet.config.model import all_synchronous, on_one_device


#: Profile rounds of each distinct net: the prediction is a second opinion beside the
#: measured rounds, so it is kept short (seconds for the digits and CIFAR-10 nets).
PREDICTION_ROUNDS = 2


def predict_steps(results, options, planned, batch: list) -> list[str]:
    """Fill ``predicted_seconds`` of every synchronous config of ``results`` that trained;
    returns why any such config has none (its net cannot be profiled at this minibatch),
    for the warnings under the table."""
    models: list[tuple[dict, object]] = []  # (the net on one device, its cost model or None)
    notes = []
    for result, opts, (net, plan) in zip(results, options, planned):
        if result.sync != "sync" or result.failure:
            continue
        single = on_one_device(all_synchronous(net)).layers
        known = [m for layers, m in models if layers == single]
        model = known[0] if known else None
        if not known:
            try:
                with NetProfiler(opts, net, "--compare", batch=batch) as profiler:
                    for _ in range(PREDICTION_ROUNDS):
                        profiler.round()
                    model = profiler.cost_model()
            except TooFewCasesToProfile as error:
                notes.append(f"{result.name} has no predicted ms: {error}")
            models.append((single, model))
        if model is not None:
            result.predicted_seconds = model.predict(plan).step_seconds
    return notes

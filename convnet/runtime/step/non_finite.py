"""Say where NaN or inf values came from, and whose fault they are.

When a cost or a weight gradient is not finite, training cannot go on.  If
the minibatch itself holds NaN or inf, the data is bad
(:class:`~convnet.errors.NonFiniteDataError`); otherwise a layer produced
them and training diverged (:class:`~convnet.errors.DivergedError`).  The
trainer tells the two apart by type.
"""

from __future__ import annotations

from convnet.config.model import NetConfig
from convnet.errors import DivergedError, NonFiniteDataError, TrainingError
from convnet.plan.ops import Forward


def non_finite_cost_error(net: NetConfig, devices: list, acts: dict, cost: Forward,
                          step: int, reads) -> TrainingError:
    """The error for cost layer ``cost``, whose cost or inputs are not finite.

    ``acts`` holds the step's activations by (layer, shard, device) (the executor runs
    the step's forward again to have them); the error names the first layer, in net
    order, whose output for ``cost.shard`` is not finite, or the cost layer itself
    when all of them are.  ``reads`` (a :class:`~convnet.runtime.step.host_reads.HostReads`)
    brings each check to the host.
    """
    for ldef in net:
        for (name, shard, device), value in list(acts.items()):
            if name == ldef.name and shard == cost.shard:
                with devices[device].scope():
                    finite = devices[device].xp.isfinite(value).all()
                if bool(reads.read(devices[device], finite)):
                    continue
                if ldef.is_data:
                    return NonFiniteDataError(
                        f"the minibatch holds NaN or inf values: data layer '{name}' "
                        f"(column {ldef.attrs['dataIdx']}, loaded on device {device}) "
                        f"at step {step}")
                return DivergedError(f"non-finite values (NaN or inf) in the output of layer "
                                     f"'{name}' on device {device} at step {step}; "
                                     f"cost layer '{cost.layer}' cannot be computed")
    return DivergedError(f"cost layer '{cost.layer}' on device {cost.device} is not finite "
                         f"at step {step}")


def non_finite_gradient_error(layer: str, key: str, device: int, step: int) -> DivergedError:
    """The error for a weight gradient with NaN or inf values."""
    return DivergedError(f"non-finite gradient for weights '{key}' of layer '{layer}' on "
                         f"device {device} at step {step}")

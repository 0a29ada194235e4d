"""``--check-grads``: finite-difference check of every layer of a net.

:func:`check_net_gradients` builds the net's layers, draws small random data
(float64 images, integer labels, probability-like targets for cross-entropy
costs) and weights (the layers' own initialisation, cast to float64), runs
the whole net forward once in training mode with a fixed :class:`Context`
(so dropout masks are fixed), and then checks, for every layer:

* **local**: the layer on its actual inputs, with the objective
  ``J = sum(G * output)`` for a fixed random ``G`` (cost layers:
  ``coeff * sum(output)``).  The analytic gradients of J with respect to
  every weight array and every differentiable input (from the layer's
  ``backward``) are compared with central differences on a random subset of
  entries.
* **net** (weight layers): the gradient of the whole net's cost (sum over
  cost layers of ``coeff * sum of per-case costs``), back-propagated through
  every layer, against central differences of that cost for a few weight
  entries.

Entries where the function has a kink inside the difference interval are
skipped (after retrying with smaller steps) and counted in the report: a
perturbation is at a kink when it changes any discrete choice of the forward
pass (:meth:`convnet.layers.base.Layer.switches`: a relu or abs side, a max-pool or
eltmax winner), or when its one-sided differences disagree.  A kink can
only hide an entry, never pass a wrong gradient: the forward pass alone
decides it.  For the local checks, exact zeros in a layer's
inputs (relu outputs) are first nudged to small distinct positive values:
ties among them would make max pooling pick a winner that finite
differences cannot see.  The relative error of an entry is
``|analytic - numeric| / max(|analytic|, |numeric|, floor)`` with a floor
at a small fraction of the largest gradient of that array, so that
near-zero entries do not dominate.

One line per layer: name, type, the largest relative error, OK/FAIL, and
the error per array (``W0``, ``b``, ``in0``...; ``net:`` for the whole-net
check; ``-`` where every sampled entry sat at a kink).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from convnet.config.layer_types.weight_shapes import is_learned_key
from convnet.config.model import NetConfig
from convnet.layers import build_layer
from convnet.layers.base import Context

_LABEL_COSTS = ("cost.logreg", "cost.crossent", "cost.bce")


def _f64(tree):
    return {k: np.asarray(v, dtype=np.float64) for k, v in tree.items()}


def _random_data(net: NetConfig, batch_size: int, rng: np.random.Generator) -> dict:
    """A float64 array per data layer, shaped (batch,) + per-case shape."""
    out = {}
    for ldef in net:
        if not ldef.is_data:
            continue
        idx = ldef.attrs.get("dataIdx", 0)
        shape = tuple(ldef.output_shape or net.data_dims.get(idx, (1,)))
        role, widths = None, [max(int(net.num_classes or 2), 1)]
        for cons in net.consumers(ldef.name):
            cdef = net[cons]
            if cdef.type in _LABEL_COSTS and cdef.inputs and cdef.inputs[0] == ldef.name:
                role = cdef.type
                if role == "cost.logreg":  # labels must fit each head's own probabilities
                    widths.append(net[cdef.inputs[1]].outputs)
        classes = min(widths[1:] or widths)
        if role == "cost.logreg" or (role is None and shape == (1,) and idx == 1):
            arr = rng.integers(0, classes, size=(batch_size,) + shape).astype(np.float64)
        elif role == "cost.crossent":
            arr = rng.random((batch_size,) + shape) + 0.05
            arr /= arr.reshape(batch_size, -1).sum(axis=1).reshape((batch_size,) + (1,) * len(shape))
        elif role == "cost.bce":
            arr = rng.random((batch_size,) + shape)
        else:
            arr = rng.standard_normal((batch_size,) + shape)
        out[ldef.name] = arr
    return out


_EPS_MACHINE = float(np.finfo(np.float64).eps)


class _Checker:
    def __init__(self, eps: float, tol: float, kink_tol: float):
        self.eps = eps
        self.tol = tol
        self.kink_tol = kink_tol

    def compare(self, f: Callable[[], tuple], arr: np.ndarray, analytic: np.ndarray,
                indices: np.ndarray, f0: float, switches0: dict,
                scale: float) -> tuple[float, int, int]:
        """Max relative error over ``indices`` of ``arr`` (perturbed in place and
        restored), the number of entries checked and the number skipped.
        ``f`` returns the objective and the forward's switches by layer;
        ``switches0`` are those of the unperturbed forward.

        ``scale`` is the sum of the magnitudes of the terms of ``f``; rounding
        makes a difference quotient uncertain by about ``eps_machine * scale / h``,
        and gradients below what that noise lets us resolve are compared
        against a floor instead of their own size.  Entries whose one-sided
        differences disagree by more than ``kink_tol`` (a kink or too much
        curvature inside the step) are skipped.
        """
        if not arr.flags.c_contiguous:
            raise ValueError("arrays under check must be contiguous")
        flat = arr.reshape(-1)
        an = np.asarray(analytic, dtype=np.float64).reshape(-1)
        amax = float(np.abs(an).max(initial=0.0))
        worst, checked, kinks = 0.0, 0, 0
        for j in indices:
            if not np.isfinite(an[j]):
                return float("inf"), checked + 1, kinks
            # a kink inside the step: retry with smaller steps before giving up
            for shrink in (1.0, 1e-2, 1e-4):
                h = self.eps * shrink * max(1.0, abs(flat[j]))
                result = self._difference(f, flat, j, h, f0, switches0, scale)
                if result is None:
                    continue
                num, noise = result
                if not np.isfinite(num):
                    return float("inf"), checked + 1, kinks
                floor = max(1e-3 * amax, 10 * noise / self.tol, 1e-12)
                worst = max(worst, abs(an[j] - num) / max(abs(an[j]), abs(num), floor))
                checked += 1
                break
            else:
                kinks += 1
        return worst, checked, kinks


    def _difference(self, f, flat, j, h, f0, switches0, scale):
        """(central difference, its rounding noise), or None at a kink."""
        old = flat[j]
        flat[j] = old + h
        fp, switches_p = f()
        flat[j] = old - h
        fm, switches_m = f()
        flat[j] = old
        if not (_same_switches(switches_p, switches0) and _same_switches(switches_m, switches0)):
            return None
        fwd, bwd = (fp - f0) / h, (f0 - fm) / h
        noise = 4 * _EPS_MACHINE * (scale + abs(f0)) / h
        if not (np.isfinite(fp) and np.isfinite(fm)):
            return float("nan"), noise
        if abs(fwd - bwd) > self.kink_tol * max(abs(fwd), abs(bwd)) + 100 * noise:
            return None
        return (fp - fm) / (2 * h), noise


def _same_switches(changed: dict, base: dict) -> bool:
    """Whether every layer recomputed in ``changed`` made the choices it made in ``base``."""
    return all(len(ours) == len(base[name])
               and all(np.array_equal(a, b) for a, b in zip(ours, base[name]))
               for name, ours in changed.items())


def _nudge_zeros(x: np.ndarray, rng: np.random.Generator) -> None:
    """Replace exact zeros (relu outputs) by small distinct positive values, in place.

    Ties between exact zeros make max/maxabs pooling and eltmax pick a winner
    that finite differences cannot see; distinct values have no ties.
    """
    zeros = x == 0
    if zeros.any():
        size = float(np.abs(x).mean()) or 1.0
        x[zeros] = size * 1e-3 * rng.uniform(0.5, 1.0, size=int(zeros.sum()))


def _sample(rng, analytic, count: int) -> np.ndarray:
    """Up to ``count`` flat indices: half among the entries with a non-zero analytic
    gradient (so that sparse gradients are really tested), the rest anywhere."""
    an = np.asarray(analytic).reshape(-1)
    size = an.size
    if size <= count:
        return np.arange(size)
    nonzero = np.flatnonzero(an)
    first = rng.choice(nonzero, size=min(len(nonzero), (count + 1) // 2), replace=False)
    second = rng.choice(size, size=count - len(first), replace=False)
    return np.unique(np.concatenate([first, second]))


def _objective(forward: tuple) -> tuple[float, dict]:
    """The whole-net cost and the switches of the layers recomputed, from run_forward."""
    _, _, switches, total, _ = forward
    return total, switches


def check_net_gradients(net: NetConfig, batch_size: int = 4, seed: int = 0,
                        report: Callable[[str], None] = print, *, samples: int = 8,
                        net_samples: int = 3, eps: float = 1e-6, tol: float = 1e-4,
                        kink_tol: float = 5e-5) -> bool:
    """Check every layer's weight and input gradients; True when all pass.

    ``samples`` entries per array are checked locally and ``net_samples`` per
    weight array against the whole net's cost.
    """
    rng = np.random.default_rng(seed)
    ctx = Context(train=True, seed=seed, step=0, case_offset=0)
    ldefs = [l for l in net if not l.is_data]
    layers = {l.name: build_layer(l) for l in ldefs}
    params = {}
    for l in ldefs:
        prng = np.random.default_rng([seed, len(params)])
        params[l.name] = _f64(layers[l.name].init_params(prng))
    data = _random_data(net, batch_size, rng)

    def run_forward(changed: str | None = None, base: dict | None = None):
        """Forward the net; with ``changed``, only that layer and the layers
        downstream of it are recomputed, the rest is taken from ``base``."""
        acts = dict(data)
        states, switches = {}, {}
        dirty = set()
        total = magnitude = 0.0
        for l in ldefs:
            if changed is None or l.name == changed or dirty.intersection(l.inputs):
                out, st = layers[l.name].forward([acts[i] for i in l.inputs], params[l.name],
                                                 ctx)
                acts[l.name], states[l.name] = out, st
                switches[l.name] = layers[l.name].switches([acts[i] for i in l.inputs], out, st)
                dirty.add(l.name)
            else:
                acts[l.name] = base[l.name]
            if l.is_cost:
                coeff = float(l.params.get("coeff", 1.0))
                total += coeff * float(np.sum(acts[l.name]))
                magnitude += abs(coeff) * float(np.sum(np.abs(acts[l.name])))
        return acts, states, switches, total, magnitude

    acts, states, net_switches, loss, loss_scale = run_forward()

    # whole-net backward
    grads: dict[str, np.ndarray] = {}
    wgrads: dict[str, dict] = {}
    for l in reversed(ldefs):
        layer = layers[l.name]
        if l.is_cost:
            g = None
        elif l.name in grads:
            g = grads.pop(l.name)
        else:
            continue  # nothing downstream depends on it
        need = [(not net[i].is_data) and layer.input_differentiable(k)
                for k, i in enumerate(l.inputs)]
        ins, pg = layer.backward(g, [acts[i] for i in l.inputs], acts[l.name], params[l.name],
                                 states[l.name], ctx, need)
        wgrads[l.name] = pg
        for i, want, gi in zip(l.inputs, need, ins):
            if want and gi is not None:
                grads[i] = grads[i] + gi if i in grads else gi

    checker = _Checker(eps, tol, kink_tol)
    all_ok = True
    report(f"gradient check: {len(ldefs)} layers, batch {batch_size}, float64, "
           f"eps {eps:g}, tolerance {tol:g}")
    for l in ldefs:
        layer = layers[l.name]
        parts: list[str] = []
        worst = 0.0
        skipped = 0
        ok = True
        try:
            inputs = [np.array(acts[i], dtype=np.float64, copy=True) for i in l.inputs]
            for k, x in enumerate(inputs):
                if layer.input_differentiable(k):
                    _nudge_zeros(x, rng)
            p = {k: v.copy() for k, v in params[l.name].items()}
            if l.is_cost:
                coeff = float(l.params.get("coeff", 1.0))

                def objective(layer=layer, inputs=inputs, p=p, coeff=coeff):
                    y, st = layer.forward(inputs, p, ctx)
                    return coeff * float(np.sum(y)), {l.name: layer.switches(inputs, y, st)}
                y0, st0 = layer.forward(inputs, p, ctx)
                gout = None
                scale = abs(coeff) * float(np.sum(np.abs(y0)))
            else:
                y0, st0 = layer.forward(inputs, p, ctx)
                gout = rng.standard_normal(np.shape(y0))
                scale = float(np.sum(np.abs(gout * y0)))

                def objective(layer=layer, inputs=inputs, p=p, gout=gout):
                    y, st = layer.forward(inputs, p, ctx)
                    return float(np.sum(gout * y)), {l.name: layer.switches(inputs, y, st)}
            need = [layer.input_differentiable(k) for k in range(len(inputs))]
            in_g, p_g = layer.backward(None if gout is None else gout.copy(), inputs, y0, p, st0,
                                       ctx, need)
            f0, switches0 = objective()
            targets = [(f"W{k[1:]}" if k.startswith("W") else k, p[k], p_g.get(k))
                       for k in sorted(p) if is_learned_key(k)]  # tables, running averages: not learned
            targets += [(f"in{k}", inputs[k], in_g[k]) for k in range(len(inputs)) if need[k]]
            for label, arr, an in targets:
                if an is None:
                    parts.append(f"{label} missing")
                    ok = False
                    continue
                if np.shape(an) != np.shape(arr):
                    parts.append(f"{label} shape {np.shape(an)} != {np.shape(arr)}")
                    ok = False
                    continue
                idx = _sample(rng, an, samples)
                err, n_ok, n_kink = checker.compare(objective, arr, an, idx, f0, switches0, scale)
                skipped += n_kink
                worst = max(worst, err)
                parts.append(f"{label} {err:.1e}" if n_ok else f"{label} -")
            if l.has_weights and l.name in wgrads:
                for k in sorted(wgrads[l.name]):
                    arr = params[l.name][k]
                    idx = _sample(rng, wgrads[l.name][k], net_samples)
                    err, n_ok, n_kink = checker.compare(
                        lambda: _objective(run_forward(l.name, acts)), arr, wgrads[l.name][k],
                        idx, loss, net_switches, loss_scale)
                    skipped += n_kink
                    worst = max(worst, err)
                    parts.append(f"net:{k} {err:.1e}" if n_ok else f"net:{k} -")
        except Exception as e:  # noqa: BLE001 - report the layer and go on
            parts.append(f"error: {type(e).__name__}: {e}")
            ok = False
        ok = ok and np.isfinite(worst) and worst <= tol
        all_ok &= ok
        detail = ", ".join(parts) if parts else "nothing to check"
        if skipped:
            detail += f"; {skipped} entr{'y' if skipped == 1 else 'ies'} at kinks skipped"
        report(f"{l.name:<20} {l.type:<14} {worst:9.2e}  {'OK' if ok else 'FAIL'}  ({detail})")
    report("gradient check " + ("passed" if all_ok else "FAILED"))
    return all_ok

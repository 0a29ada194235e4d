"""What a net's workers cost each other side by side, kept from profile to profile.

A profile reads the contention and the wake-ups of a net's CPU workers from a few
data-parallel steps (:mod:`convnet.simulate.profiler`), and can read them only when
the workers really run side by side.  On a machine whose cores other processes hold,
the operating system runs the workers one after the other on one core, and a profile
taken then sees none of what they cost each other: the digits net's data-parallel
step was predicted at 7.9-8.1 ms beside two busy processes and 9.6-12.6 ms on the
idle machine minutes apart.  And the figure is small and noisy where it can be read
(the digits net's median contention: 1.25-1.46 in five idle profiles).

So every profile that saw its workers side by side leaves its figures in a small file
of this machine's (``$CONVNET_CACHE_DIR``, else ``$XDG_CACHE_HOME/convnet``, else
``~/.cache/convnet``: ``side-by-side.json``), under a key made of the net, its shard
size and the cores, and the prediction takes, for each figure, the median over this
profile and the :data:`KEPT` - 1 latest earlier ones of the same key: a profile that
could not see the workers side by side takes the earlier ones' alone.  The text of
``--simulate`` says which.  Delete the file to forget them; a file that cannot be read
is taken as empty, and one that cannot be written leaves the prediction as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from dataclasses import replace
from pathlib import Path

from convnet.outputs import write_output
from convnet.version import __version__
from convnet.plan.ops import Plan
from convnet.simulate.costs import ComputeProfile

#: Profiles kept per key, this one included.
KEPT = 5

STORE_NAME = "side-by-side.json"


def store_path() -> Path:
    """The file of this machine's side-by-side figures."""
    folder = os.environ.get("CONVNET_CACHE_DIR")
    if not folder:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
        folder = os.path.join(cache, "convnet")
    return Path(folder) / STORE_NAME


def net_key(plan: Plan, cores: int) -> str:
    """What the figures are of: the data-parallel ``plan`` profiled (every layer's type,
    output shape and weights, the shard size) on ``cores`` workers, by this version of
    the engine (another version's kernels may cost each other otherwise)."""
    layers = [(p.name, p.type, list(p.output_shape), p.param_count, p.learns)
              for p in plan.layers.values()]
    text = json.dumps([layers, plan.shard_size, cores, __version__], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _figures(profile: ComputeProfile) -> dict:
    return {"contention": [[kind, layer, value]
                           for (kind, layer), value in sorted(profile.contention.items())],
            "start_wake": profile.start_wake, "wake": profile.wake}


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _valid(entry) -> bool:
    try:
        return (all(isinstance(k, str) and isinstance(l, str) and float(v) >= 1.0
                    for k, l, v in entry["contention"])
                and float(entry["start_wake"]) >= 0 and float(entry["wake"]) >= 0)
    except (KeyError, TypeError, ValueError):
        return False


def combined(profile: ComputeProfile, earlier: list[dict]) -> ComputeProfile:
    """``profile`` with each side-by-side figure the median over its own (where its
    workers ran side by side) and ``earlier``'s."""
    entries = earlier + ([_figures(profile)] if profile.side_by_side_rounds else [])
    if not entries:
        return profile
    values: dict[tuple[str, str], list[float]] = {}
    for entry in entries:
        for kind, layer, value in entry["contention"]:
            values.setdefault((kind, layer), []).append(float(value))
    return replace(profile, contention={key: statistics.median(v) for key, v in values.items()},
                   start_wake=statistics.median(float(e["start_wake"]) for e in entries),
                   wake=statistics.median(float(e["wake"]) for e in entries),
                   earlier_profiles=len(earlier))


class SideBySideStore:
    """The earlier figures of one net (``key``) in the file at ``path``: :attr:`earlier`
    (oldest first, at most :data:`KEPT` - 1), and :meth:`keep` to add a profile's."""

    def __init__(self, key: str, path: Path | None = None):
        self._key, self._path = key, path or store_path()
        entries = _read(self._path).get(key, [])
        valid = [e for e in entries if _valid(e)] if isinstance(entries, list) else []
        self.earlier: list[dict] = valid[-(KEPT - 1):]

    def keep(self, profile: ComputeProfile) -> None:
        """Add ``profile``'s figures, where its workers ran side by side; a store that
        cannot be written is left as it is (the prediction does not need it)."""
        if not profile.side_by_side_rounds:
            return
        data = _read(self._path)
        data[self._key] = self.earlier + [_figures(profile)]
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            write_output(self._path, json.dumps(data, indent=1).encode())
        except OSError:
            pass

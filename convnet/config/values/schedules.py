"""Learning-rate schedules: ``0.01``, ``const``, ``linear``, ``exp``, ``dexp``.

Arguments may be named (``dexp[base=0.01;tgtFactor=250;numSteps=4]``, any
order, as cuda-convnet2 writes them) or positional in the order of the table
below (``dexp[0.01;250;4]``); ``;`` and ``,`` both separate them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from convnet.config.values.brackets import split_call
from convnet.config.values.location import Where, quote
from convnet.config.values.suggest import nearest
from convnet.config.values.typed import Float, Int
from convnet.errors import ConfigError


@dataclass(frozen=True)
class Schedule:
    """A learning-rate schedule over training progress x in [0, 1].

    kind is one of ``const``, ``linear``, ``exp``, ``dexp``.
    """

    kind: str
    base: float
    tgt_factor: float = 1.0
    num_steps: int = 1

    def value(self, progress: float) -> float:
        x = min(max(float(progress), 0.0), 1.0)
        if self.kind == "const":
            return self.base
        if self.kind == "linear":
            return self.base * (1.0 - x) + (self.base / self.tgt_factor) * x
        if self.kind == "exp":
            return self.base * (1.0 / self.tgt_factor) ** x
        if self.kind == "dexp":
            step = min(int(math.floor(x * self.num_steps)), self.num_steps - 1)
            if step == self.num_steps - 1:
                return self.base / self.tgt_factor
            # numSteps-1 evenly spaced samples of the exp schedule on [0, 1).
            return self.base * (1.0 / self.tgt_factor) ** (step / (self.num_steps - 1))
        raise ValueError(f"unknown schedule kind {self.kind!r}")

    def __str__(self) -> str:
        if self.kind == "const":
            return f"{self.base:g}"
        if self.kind == "dexp":
            return f"dexp[base={self.base:g};tgtFactor={self.tgt_factor:g};numSteps={self.num_steps}]"
        return f"{self.kind}[base={self.base:g};tgtFactor={self.tgt_factor:g}]"


# Schedule argument name -> (Schedule field, converter).
_ARGS = {
    "base": ("base", Float(lo=0)),
    "tgtFactor": ("tgt_factor", Float(gt=0)),
    "numSteps": ("num_steps", Int(lo=1)),
}
# Kind -> its arguments, in positional order.  All are required, as in cuda-convnet2.
KINDS = {
    "const": ("base",),
    "linear": ("base", "tgtFactor"),
    "exp": ("base", "tgtFactor"),
    "dexp": ("base", "tgtFactor", "numSteps"),
}


class ScheduleValue:
    """Converter for one schedule (see the module docstring)."""

    expected = "a learning rate or schedule such as dexp[base=0.01;tgtFactor=250;numSteps=4]"

    def __call__(self, text: str, where: Where) -> Schedule:
        kind, args = split_call(text, where, ";,")
        if args is None:
            return Schedule("const", self._plain(kind, where))
        if kind not in KINDS:
            raise where.error(
                f"unknown learning-rate schedule {quote(kind)}; known: {', '.join(KINDS)}",
                suggestion=nearest(kind, KINDS))
        return Schedule(kind, **_bind(kind, args, where))

    def _plain(self, text: str, where: Where) -> float:
        if text in KINDS:
            raise where.error(
                f"schedule {text} needs its arguments: {text}[{';'.join(KINDS[text])}]")
        return _ARGS["base"][1](text, where)


def _bind(kind: str, args: list[str], where: Where) -> dict:
    names = KINDS[kind]
    given: dict[str, str] = {}
    named = False
    for position, arg in enumerate(args):
        name, has_name, value = arg.partition("=")
        if has_name:
            named, name = True, name.strip()
            if name not in names:
                raise where.error(f"{kind} takes {', '.join(names)}; not {quote(name)}",
                                  suggestion=nearest(name, names))
        elif named:
            raise where.error(f"positional argument {quote(arg)} after named ones in {kind}[...]")
        elif position >= len(names):
            raise where.error(
                f"{kind} takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
        else:
            name, value = names[position], arg
        if name in given:
            raise where.error(f"{kind} argument {name} given twice")
        given[name] = value.strip()
    missing = [name for name in names if name not in given]
    if missing:
        form = ";".join(f"{name}=.." for name in names)
        raise where.error(f"{kind} needs {', '.join(missing)}: {kind}[{form}]")
    return {_ARGS[name][0]: _convert(name, value, where) for name, value in given.items()}


def _convert(name: str, text: str, where: Where):
    """Convert one argument, naming it in the message (``numSteps: expected ...``)."""
    convert = _ARGS[name][1]
    try:
        return convert(text, replace(where, line=None))
    except ConfigError as exc:
        raise where.error(f"{name}: {exc.message}") from None

"""The ``name[arg, arg]`` notation shared by neurons and learning-rate schedules."""

from __future__ import annotations

from convnet.config.values.location import Where, quote


def split_call(text: str, where: Where, separators: str) -> tuple[str, list[str] | None]:
    """``'tanh[1.7,0.66]'`` -> ``('tanh', ['1.7', '0.66'])``; ``'relu'`` -> ``('relu', None)``.

    Arguments are split on any of ``separators`` and stripped; an empty
    argument list or argument is an error, as is anything after the ``]``.
    """
    text = text.strip()
    open_at = text.find("[")
    if open_at < 0:
        return text, None
    if not text.endswith("]") or text.count("[") != 1 or text.count("]") != 1:
        raise where.error(f"expected name[arg{separators[0]}...], got {quote(text)}")
    name, body = text[:open_at].strip(), text[open_at + 1:-1]
    for separator in separators[1:]:
        body = body.replace(separator, separators[0])
    args = [arg.strip() for arg in body.split(separators[0])]
    if not all(args):
        raise where.error(f"empty argument in {quote(text)}")
    return name, args

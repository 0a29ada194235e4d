"""Batch ranges as written on the command line (``--train-range=1-5``, ``1-3,6``).

cuda-convnet2 names batches by number and selects them with ranges; the same
text round-trips through :func:`parse_range` and :func:`format_range`, so
messages (such as a provider's available batches) print batch lists in the
form the command line takes.
"""

from __future__ import annotations

import re

from convnet.errors import DataError

_PART = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$", re.ASCII)

#: The most batches a range may name.  cuda-convnet's ImageNet set has about
#: 1,300 batches; the bound keeps a typo such as ``1-100000000`` from being
#: expanded into a list of a hundred million numbers before anything checks it.
MAX_BATCHES = 100_000


def parse_range(text: str) -> list[int]:
    """Parse ``"1-5"``, ``"6"`` or ``"1-3,6"`` into batch numbers, in the order written.

    Batch numbers start at 0 (cuda-convnet ImageNet batches do).  A reversed
    span (``5-1``), a repeated batch, an empty part, anything that is not a
    number (ASCII digits only) or more than :data:`MAX_BATCHES` batches in all
    raises :class:`DataError` quoting the text; the count is checked on the
    spans, before any list is made.
    """
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"batch range {text!r} is empty; write it like '1-5' or '1-3,6'")
    if len(text) > 1000:
        raise DataError(f"batch range {text[:40]!r}... is {len(text)} characters long; "
                        "write it like '1-5' or '1-3,6'")
    spans: list[tuple[int, int]] = []
    for part in text.split(","):
        match = _PART.match(part)
        if not match:
            raise DataError(f"batch range {text!r}: cannot read {part.strip()!r}; "
                            "write it like '1-5' or '1-3,6'")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise DataError(f"batch range {text!r}: {first}-{last} runs backwards")
        spans.append((first, last))
    count = sum(last - first + 1 for first, last in spans)
    if count > MAX_BATCHES:
        raise DataError(f"batch range {text!r} names {count} batches; a range may name at "
                        f"most {MAX_BATCHES}")
    batches = [batch for first, last in spans for batch in range(first, last + 1)]
    seen: set[int] = set()
    for batch in batches:
        if batch in seen:
            raise DataError(f"batch range {text!r} names batch {batch} twice")
        seen.add(batch)
    return batches


def format_range(batches: list[int]) -> str:
    """Write batch numbers back in the shortest ``1-3,6`` form (order kept)."""
    parts: list[str] = []
    start = prev = None
    for batch in batches:
        if prev is not None and batch == prev + 1:
            prev = batch
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = batch
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)

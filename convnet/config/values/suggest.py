"""Nearest-match hints ("did you mean ...") for misspelt keys, types, neurons and layers."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# Longer words are junk, not typos; comparing them would only cost time.
_MAX_WORD = 64


def nearest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word``, or None when nothing is close.

    A match that differs only in case wins outright: keys are case-sensitive,
    and ``filtersize`` for ``filterSize`` is the commonest slip.
    """
    if not word or len(word) > _MAX_WORD:
        return None
    by_lower: dict[str, str] = {}
    for candidate in candidates:
        by_lower.setdefault(candidate.lower(), candidate)
    lowered = word.lower()
    if lowered in by_lower and by_lower[lowered] != word:
        return by_lower[lowered]
    close = difflib.get_close_matches(lowered, list(by_lower), n=1, cutoff=0.6)
    if close and by_lower[close[0]] != word:
        return by_lower[close[0]]
    return None

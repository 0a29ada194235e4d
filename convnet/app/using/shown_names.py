"""File and class names as every output can hold them: the ``--predict-out`` CSV (UTF-8),
the terminal, a picture's labels.

A file name on Linux is bytes; one that is not UTF-8 (common in old zips:
``bad\\xffname.png``) reaches Python with each such byte as a lone surrogate
(``surrogateescape``), which no UTF-8 writer, strict terminal or font takes, and a
class folder so named becomes such a label name in ``batches.meta``.  Each of those
bytes is shown as ``\\xNN``, as Python's ``backslashreplace`` shows a byte; a name that
is UTF-8 is shown as it is.
"""

from __future__ import annotations


def shown_name(name: str) -> str:
    """``name`` with every byte that is not UTF-8 as ``\\xNN`` (any other lone surrogate
    as ``\\udNNN``); the same string when it has none."""
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        return name.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")

"""Where in a config file a value came from, so every error can point at it.

A :class:`Where` is handed to each value parser; the parser calls
:meth:`Where.error` and the resulting :class:`ConfigError` already names the
file, section, key and line.  Keeping this in one place is what lets the rest
of the package say only *what* is wrong.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

from convnet.errors import ConfigError, ConfigWarning

_QUOTE_LIMIT = 60


def quote(text: str) -> str:
    """User text for an error message: escaped (files may hold binary junk) and short."""
    if len(text) > _QUOTE_LIMIT:
        return repr(text[:_QUOTE_LIMIT]) + "..."
    return repr(text)


@dataclass(frozen=True)
class Where:
    """A file, optionally a section and key in it, optionally a line number."""

    file: str | None
    section: str | None = None
    key: str | None = None
    line: int | None = None

    def at(self, key: str | None, line: int | None = None) -> "Where":
        return replace(self, key=key, line=line)

    def error(self, message: str, suggestion: str | None = None) -> ConfigError:
        if self.line is not None:
            message = f"line {self.line}: {message}"
        return ConfigError(message, file=self.file, section=self.section, key=self.key,
                           suggestion=suggestion)


def warn(where: Where, message: str, suggestion: str | None = None) -> None:
    """Report something accepted but worth a look (e.g. a key given twice) as a
    :class:`ConfigWarning` whose text names the file, section, key and line like
    an error does."""
    warnings.warn(ConfigWarning(str(where.error(message, suggestion))), stacklevel=2)

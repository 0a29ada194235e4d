"""A small, strict reader for the INI files cuda-convnet2 configs are written in.

Why not :mod:`configparser`: it would cut a schedule such as
``dexp[base=0.01;numSteps=4]`` at an inline ``;`` comment and reports no line
numbers.  This reader keeps sections and keys in file order with the line each
came from, and rejects anything that is not plainly a config file (missing, a
directory, a device, binary, not UTF-8, too large) with a :class:`ConfigError`
naming the file.

Where configs written for the original relied on its ConfigParser, this
reader behaves the same way, so that those files mean what they meant there:
key names are matched without regard to case (ConfigParser lower-cased them,
so ``filterSize`` and ``filtersize`` are one key; :attr:`Section.entries` is
keyed by the lower-cased name and each :class:`Entry` keeps the spelling
written), section names are case-sensitive, and a key given twice in a
section takes its last value, with a :class:`ConfigWarning` naming both lines.

Syntax: ``[section]`` headers; ``key = value`` or ``key: value`` lines;
comments start with ``#`` or ``;`` anywhere outside square brackets, so they
may follow a value on the same line.  Leading whitespace is insignificant
(there are no continuation lines).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from convnet.config.values.location import Where, quote, warn

# Real configs are a few KiB; anything this large is not one.
MAX_FILE_BYTES = 4 * 1024 * 1024
_COMMENT = "#;"
_DELIMITERS = "=:"


@dataclass(frozen=True)
class Entry:
    """One ``key = value`` line."""

    key: str
    value: str
    line: int


@dataclass
class Section:
    """A ``[name]`` header and the entries under it, in file order, by lower-cased key."""

    name: str
    line: int
    entries: dict[str, Entry] = field(default_factory=dict)


@dataclass
class IniFile:
    """A parsed file: its sections by name, in file order."""

    path: str
    sections: dict[str, Section]


def read_ini(path) -> IniFile:
    """Read and parse the file at ``path``; every failure is a ConfigError."""
    try:
        path = os.fsdecode(path)
    except TypeError:
        raise Where(None).error(f"expected a config file path, got {quote(str(path))}") from None
    return parse_ini(read_text(path), path)


def parse_ini(text: str, path: str) -> IniFile:
    """Parse INI ``text``; ``path`` is only used to name the file in errors."""
    here = Where(path)
    sections: dict[str, Section] = {}
    current: Section | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        line = strip_comment(raw).strip()
        if not line:
            continue
        if line.startswith("["):
            current = _header(line, number, here, sections)
            sections[current.name] = current
        else:
            _entry(line, number, here, current)
    return IniFile(path, sections)


def strip_comment(line: str) -> str:
    """``line`` up to the first ``#`` or ``;`` outside square brackets."""
    if "#" not in line and ";" not in line:
        return line
    depth = 0
    for i, char in enumerate(line):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(depth - 1, 0)
        elif char in _COMMENT and depth == 0:
            return line[:i]
    return line


def read_text(path: str) -> str:
    """The text of the config file at ``path``, held to the checks above; every failure is
    a ConfigError naming the file."""
    here = Where(path)
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise here.error("is a directory, not a config file")
        if not stat.S_ISREG(info.st_mode):
            raise here.error("is not a regular file")
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise here.error(f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # e.g. a path with an embedded NUL
        raise here.error(f"cannot read: {exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise here.error(f"is larger than {MAX_FILE_BYTES} bytes; not a config file")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise here.at(None, line).error("is not UTF-8 text (binary file?)") from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise here.at(None, line).error("contains NUL bytes (binary file?)")
    return text


def _header(line: str, number: int, here: Where, sections: dict[str, Section]) -> Section:
    if not line.endswith("]"):
        raise here.at(None, number).error(
            f"a section header must look like [name], got {quote(line)}")
    name = line[1:-1].strip()
    if not name:
        raise here.at(None, number).error("empty section name []")
    if name in sections:
        where = Where(here.file, name, None, number)
        raise where.error(f"section defined twice (first on line {sections[name].line})")
    return Section(name, number)


def _entry(line: str, number: int, here: Where, section: Section | None) -> None:
    cut = min((i for i in (line.find(d) for d in _DELIMITERS) if i >= 0), default=-1)
    if cut < 0:
        where = Where(here.file, section.name if section else None, None, number)
        raise where.error(f"expected 'key = value' or a [section] header, got {quote(line)}")
    key, value = line[:cut].strip(), line[cut + 1:].strip()
    where = Where(here.file, section.name if section else None, key or None, number)
    if section is None:
        raise where.error("key outside any [section]")
    if not _is_key(key):
        raise where.error(f"{quote(key)} is not a valid key name")
    folded = key.lower()
    earlier = section.entries.pop(folded, None)
    if earlier is not None:
        warn(where, f"given twice in this section (lines {earlier.line} and {number}); "
                    "the last value is used, as cuda-convnet did")
    section.entries[folded] = Entry(key, value, number)


def _is_key(key: str) -> bool:
    return bool(key) and key.isascii() and key.replace("_", "a").replace(".", "a").isalnum()

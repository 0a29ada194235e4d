"""Rewrite one key's lines (``gpu=``, ``updatePeriod=``) of a config file, leaving every
other line as written.

``--auto-place`` writes its chosen placement this way, so that the files it
writes are the user's own configs (comments, key order, spelling) with only
the device lists (and, where it chose them, the update periods) changed, and
the engine runs them like any hand-written ones.
"""

from __future__ import annotations

import re

from convnet.config.ini import parse_ini


def gpu_value(devices: tuple[int, ...]) -> str:
    return ",".join(map(str, devices))


def _key_line(key: str) -> re.Pattern:
    # key, separator and spaces | the value | spaces and an inline comment, if any
    return re.compile(rf"^(\s*{re.escape(key)}\s*[=:]\s*)([^#;]*?)(\s*(?:[#;].*)?)$",
                      re.IGNORECASE)


def set_key_lines(text: str, path: str, key: str, values: dict[str, str | None]) -> str:
    """``text`` (the config file at ``path``) with ``key`` of each section named in
    ``values`` set to that value: an existing line's value replaced, a missing line
    added after the section's last key (a missing section added at the end), a line
    removed where the value is None."""
    ini = parse_ini(text, path)
    pattern = _key_line(key)
    lines = text.split("\n")
    edits: list[tuple[int, str | None, bool]] = []  # (line number, new text, insert after)
    appended: list[str] = []
    for name, value in values.items():
        section = ini.sections.get(name)
        if section is None:
            if value is not None:
                appended += ["", f"[{name}]", f"{key}={value}"]
            continue
        entry = section.entries.get(key.lower())
        if entry is not None:
            match = pattern.match(lines[entry.line - 1])
            new = None if value is None else match.group(1) + value + match.group(3)
            edits.append((entry.line, new, False))
        elif value is not None:
            last = max((e.line for e in section.entries.values()), default=section.line)
            edits.append((last, f"{key}={value}", True))
    for number, new, insert in sorted(edits, key=lambda e: e[0], reverse=True):
        if insert:
            lines.insert(number, new)
        elif new is None:
            del lines[number - 1]
        else:
            lines[number - 1] = new
    if appended:
        while lines and lines[-1] == "":
            lines.pop()
        lines += appended + [""]
    return "\n".join(lines)


def set_gpu_lines(text: str, path: str, gpus: dict[str, tuple[int, ...] | None]) -> str:
    """``text`` (the layer-def file at ``path``) with the gpu= of each section named in
    ``gpus`` set to that list (None: the line removed)."""
    return set_key_lines(text, path, "gpu",
                         {name: None if d is None else gpu_value(d) for name, d in gpus.items()})

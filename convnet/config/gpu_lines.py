"""Rewrite the ``gpu=`` lines of a layer-def file, leaving every other line as written.

``--auto-place`` writes its chosen placement this way, so that the file it
writes is the user's own config (comments, key order, spelling) with only the
device lists changed, and the engine runs it like any hand-written one.
"""

from __future__ import annotations

import re

from convnet.config.ini import parse_ini

# key, separator and spaces | the value | spaces and an inline comment, if any
_GPU_LINE = re.compile(r"^(\s*gpu\s*[=:]\s*)([^#;]*?)(\s*(?:[#;].*)?)$", re.IGNORECASE)


def gpu_value(devices: tuple[int, ...]) -> str:
    return ",".join(map(str, devices))


def set_gpu_lines(text: str, path: str, gpus: dict[str, tuple[int, ...] | None]) -> str:
    """``text`` (the layer-def file at ``path``) with the gpu= of each section named in
    ``gpus`` set to that list: an existing line's value replaced, a missing line added
    after the section's last key, a line removed where the list is None."""
    ini = parse_ini(text, path)
    lines = text.split("\n")
    edits: list[tuple[int, str | None, bool]] = []  # (line number, new text, insert after)
    for name, devices in gpus.items():
        section = ini.sections[name]
        entry = section.entries.get("gpu")
        if entry is not None:
            match = _GPU_LINE.match(lines[entry.line - 1])
            new = None if devices is None else \
                match.group(1) + gpu_value(devices) + match.group(3)
            edits.append((entry.line, new, False))
        elif devices is not None:
            last = max((e.line for e in section.entries.values()), default=section.line)
            edits.append((last, f"gpu={gpu_value(devices)}", True))
    for number, new, insert in sorted(edits, key=lambda e: e[0], reverse=True):
        if insert:
            lines.insert(number, new)
        elif new is None:
            del lines[number - 1]
        else:
            lines[number - 1] = new
    return "\n".join(lines)

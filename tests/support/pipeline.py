"""Layer-wise splits of a config for the pipeline tests: every layer on one device,
the net cut into consecutive stages."""

from __future__ import annotations

import re
from pathlib import Path

_HEADER = re.compile(r"\s*\[(.+)\]\s*$")
_GPU = re.compile(r"\s*gpu\s*=", re.I)
_DATA = re.compile(r"\s*type\s*=\s*data\s*$", re.I)


def split_layer_def(source: Path, stage_starts: list[str], out: Path) -> Path:
    """Write ``source`` to ``out`` with every layer on one device: the layers before
    ``stage_starts[0]`` on device 0, then each named layer and the ones after it on the
    next device (the ``gpu=`` lines of ``source`` are dropped; data layers take their
    readers' devices)."""
    sections: list[list[str]] = [[]]
    for line in Path(source).read_text().splitlines():
        if _HEADER.match(line):
            sections.append([])
        if not _GPU.match(line):
            sections[-1].append(line)
    device, lines = 0, list(sections[0])
    for section in sections[1:]:
        name = _HEADER.match(section[0]).group(1)
        device += name in stage_starts
        lines.append(section[0])
        if not any(_DATA.match(l) for l in section):
            lines.append(f"gpu={device}")
        lines.extend(section[1:])
    out.write_text("\n".join(lines) + "\n")
    return out

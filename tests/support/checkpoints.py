"""Building hostile checkpoints from a real one, for the reliability and fuzz tests."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from convnet.app.checkpoint import HEADER_KEY


def npy_bytes(shape, dtype=np.float32, extra: int = 0) -> bytes:
    """An .npy member declaring ``shape``: its header, zero data and ``extra`` more bytes."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                 "fortran_order": False, "shape": tuple(shape)})
    return buffer.getvalue() + bytes(int(np.prod(shape)) * np.dtype(dtype).itemsize + extra)


def rebuild(source: Path, target: Path, members: dict[str, bytes] | None = None,
            **header_changes) -> Path:
    """``source`` with ``members`` (name -> .npy bytes) swapped in or added, deflated, and
    the header's fields changed as given; its array list follows the members unless given."""
    with zipfile.ZipFile(source) as archive:
        contents = {i.filename.removesuffix(".npy"): archive.read(i) for i in archive.infolist()}
    header = json.loads(np.lib.format.read_array(io.BytesIO(contents.pop(HEADER_KEY))).tobytes())
    contents.update(members or {})
    header["arrays"] = sorted(contents)
    header.update(header_changes)
    raw = io.BytesIO()
    np.lib.format.write_array(raw, np.frombuffer(json.dumps(header).encode(), np.uint8))
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr(HEADER_KEY + ".npy", raw.getvalue())
        for name, data in contents.items():
            archive.writestr(name + ".npy", data, compress_type=zipfile.ZIP_DEFLATED)
    return target


def net_and_plan(load_file: Path):
    """The net and plan a ``--load-file`` of the saved DUMMY run resolves to."""
    from convnet.app.command_line.parser import build_parser
    from convnet.app.options import resolve_options
    from convnet.app.run.assembly import build_net_and_plan

    opts = resolve_options(build_parser().parse_args(["--load-file", str(load_file),
                                                      "--test-only"]))
    return build_net_and_plan(opts)

"""How much more host memory this process may allocate: the smallest of what the
machine has free and the limits set on the process.

``MemAvailable`` alone is not what a process can use: ``ulimit -v`` (``RLIMIT_AS``)
caps its address space, ``ulimit -d`` (``RLIMIT_DATA``) its data segment and anonymous
mappings (numpy's arrays), and a container's cgroup its resident memory (v2
``memory.max``, v1 ``memory.limit_in_bytes``); an allocation past any of them fails
(``MemoryError``) or, for the cgroup, gets the process killed.  Each limit counts
less what the process (or cgroup) already uses; the fit check compares the plan with
the smallest and names it.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

_CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class HostLimit:
    """Bytes this process may still allocate under one limit, and the limit's name."""

    available: int
    name: str  # e.g. "the address-space limit (ulimit -v 4194304)"


def _status_bytes(key: str) -> int | None:
    """A ``/proc/self/status`` figure (``VmSize``, ``VmData``) in bytes."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(key.encode() + b":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def mem_available() -> HostLimit | None:
    """``MemAvailable``: what the machine can give without swapping."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    return HostLimit(int(line.split()[1]) * 1024, "the machine's available memory")
    except (OSError, ValueError, IndexError):
        pass
    try:
        return HostLimit(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"),
                         "the machine's free memory")
    except (OSError, ValueError, AttributeError):
        return None


def _rlimit(which: int, used_key: str, name: str, flag: str) -> HostLimit | None:
    soft, _ = resource.getrlimit(which)
    used = _status_bytes(used_key)
    if soft == resource.RLIM_INFINITY or used is None:
        return None
    return HostLimit(max(0, soft - used), f"{name} (ulimit {flag} {soft // 1024})")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _own_cgroup() -> tuple[str, str] | None:
    """(hierarchy, path) of this process's memory cgroup: ("v1", path) where a v1
    memory controller is mounted (a hybrid system's unified line has no memory
    controller), else ("v2", path) from the unified line."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    unified = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            return "v1", parts[2]
        if parts[0] == "0" and parts[1] == "":
            unified = ("v2", parts[2])
    return unified


def cgroup_limit(root: Path = _CGROUP_ROOT,
                 own: tuple[str, str] | None = None) -> HostLimit | None:
    """The memory cgroup's limit less its current usage, from the process's own cgroup
    (``own``, read from ``/proc/self/cgroup`` when not given) up to the root of the
    mounted hierarchy (a parent's limit binds too; in a container the hierarchy's
    root is often the container's own cgroup): the tightest of them."""
    found = own or _own_cgroup()
    if found is None:
        return None
    version, path = found
    names = (("memory.max", "memory.current") if version == "v2" else
             ("memory.limit_in_bytes", "memory.usage_in_bytes"))
    base = root if version == "v2" else root / "memory"
    best = None
    folder = Path(path.strip("/"))
    while True:
        limit, used = _read_int(base / folder / names[0]), _read_int(base / folder / names[1])
        if limit is not None and used is not None and limit < 1 << 60:
            here = HostLimit(max(0, limit - used), f"the cgroup's memory limit ({names[0]} "
                                                   f"{limit // 2**20} MiB)")
            if best is None or here.available < best.available:
                best = here
        if folder == folder.parent:
            return best
        folder = folder.parent


def host_limits() -> list[HostLimit]:
    """Every limit that applies to this process now (see the module docstring)."""
    limits = [mem_available(),
              _rlimit(resource.RLIMIT_AS, "VmSize", "the address-space limit", "-v"),
              _rlimit(resource.RLIMIT_DATA, "VmData", "the data-segment limit", "-d"),
              cgroup_limit()]
    return [limit for limit in limits if limit is not None]


def host_limit() -> HostLimit | None:
    """The smallest of :func:`host_limits`, or None when nothing says."""
    return min(host_limits(), key=lambda limit: limit.available, default=None)

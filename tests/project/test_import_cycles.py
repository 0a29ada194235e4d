"""Imports flow one way: no module of the project imports, even indirectly, itself.

The graph is built from the source, not by importing it: every ``.py`` file of
the package ``convnet`` (with ``convnet.layers`` and ``convnet.kernels``, whose
folders are ``layers/`` and ``kernels/``) is parsed with :mod:`ast`,
and every import statement counts, also one inside a function (a deferred
import still ties the two modules together).  ``from pkg import name`` points
at the module ``pkg.name`` when there is one, else at ``pkg`` itself;
relative imports are resolved against the importing module's package.  A
package importing its own submodules is the usual layout and not a cycle; a
submodule importing a name back from its package's ``__init__`` is.

The same graph checks the layering of docs/DESIGN.md's package map: packages import
only the packages below them, and one level down, the sub-packages of ``app``,
``runtime``, ``config`` and ``kernels`` import only the parts below them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT

#: Package name -> its folder (``layers/`` and ``kernels/`` install as sub-packages).
PACKAGES = {"convnet": "convnet", "convnet.layers": "layers", "convnet.kernels": "kernels"}


def module_files(root: Path, packages) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file under the given package folders
    (``packages``: names, each its own folder, or a name -> folder mapping)."""
    folders = packages if isinstance(packages, dict) else {p: p for p in packages}
    modules = {}
    for package, folder in folders.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [package, *path.relative_to(root / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _base_package(module: str, path: Path, level: int) -> str:
    """The package a relative import of ``level`` dots in ``module`` starts from."""
    parts = module.split(".")
    if path.name != "__init__.py":
        parts.pop()  # a plain module's imports are relative to its package
    return ".".join(parts[:len(parts) - (level - 1)])


def _known(name: str, modules) -> str | None:
    """``name`` or its longest prefix that is a module of the project."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imported_modules(module: str, path: Path, modules) -> set[str]:
    """The project modules that ``module`` imports anywhere in its file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = _base_package(module, path, node.level)
                source = f"{base}.{source}" if source else base
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules
                       else source for alias in node.names]
        else:
            continue
        found.update(t for t in (_known(target, modules) for target in targets) if t)
    found.discard(module)
    return found


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    modules = module_files(root, packages)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) for every group of modules that import each other."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(group, graph) for group in groups]


def _cycle_in(group: set[str], graph) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for other in sorted(graph[node] & group):
                if other == start:
                    return paths[node] + [start]
                if other not in paths:
                    paths[other] = paths[node] + [other]
                    following.append(other)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")


def test_the_project_has_no_import_cycle():
    cycles = find_cycles(import_graph(ROOT))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


#: The packages from the top of docs/DESIGN.md's map down; each may import only those
#: after it (the modules directly in ``convnet/``, errors and the like, are the base).
#: ``convnet`` itself (its ``__init__``, whose ``train`` and ``load`` call the Python API
#: in ``app``) stands on top of them all.
LAYERING = ("convnet", "import_onnx", "make_data", "app", "simulate", "data", "runtime", "plan", "layers",
            "config", "kernels")


def _package(module: str) -> str:
    parts = module.split(".")
    if module == "convnet":
        return "convnet"
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERING) else "base"


def test_packages_import_only_the_packages_below_them():
    upward = sorted({(a, b) for a, targets in import_graph(ROOT).items() for b in targets
                     if _rank(_package(b)) < _rank(_package(a))})
    assert not upward, "imports against the layering of docs/DESIGN.md: " + ", ".join(
        f"{a} -> {b}" for a, b in upward)


def _rank(package: str) -> int:
    return len(LAYERING) if package == "base" else LAYERING.index(package)


#: Applications on top that stand beside ``app``, not on it: what each may not import.
BESIDE = {"make_data": ("app", "simulate", "runtime", "plan", "layers", "config", "kernels")}


def test_make_data_stands_beside_the_training_application():
    """make-data writes batches; it needs the data package's safe unpickler and the
    output helpers, never the trainer or the network (so it stays light to import)."""
    found = sorted((a, b) for a, targets in import_graph(ROOT).items() for b in targets
                   if _package(a) in BESIDE and _package(b) in BESIDE[_package(a)])
    assert not found, "imports against docs/DESIGN.md's map: " + ", ".join(
        f"{a} -> {b}" for a, b in found)


#: One level down: inside each package, its parts from the top of docs/DESIGN.md's map
#: down, each importing only the parts after it.  A part is a sub-package, ``"."`` for the
#: modules directly in the package, or ``"__init__"`` for the package's own ``__init__``
#: (the public face of ``config``, the kernel registry at the bottom of ``kernels``).
SUBLAYERING = {
    "app": ("__init__", "python_api", "command_line", "comparison", "prediction", "using",
            "run", "."),
    "runtime": ("__init__", ".", "sync", "step", "processes", "devices"),
    "config": ("__init__", ".", "layer_types", "values"),
    "data": ("__init__", "photos", "image", "."),
    "kernels": ("cuda", "conv", ".", "__init__"),
}


def _part(module: str, modules) -> tuple[str, str] | None:
    """(package, part) of a module inside one of :data:`SUBLAYERING`'s packages."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in SUBLAYERING:
        return None
    if len(parts) == 2:
        return parts[1], "__init__"
    if f"convnet.{parts[1]}.{parts[2]}" in modules and \
            modules[f"convnet.{parts[1]}.{parts[2]}"].name == "__init__.py":
        return parts[1], parts[2]
    return parts[1], "."


def upward_part_imports(graph, modules) -> list[tuple[str, str]]:
    """The imports from a part of a package to a part above it in :data:`SUBLAYERING`."""
    found = []
    for source, targets in graph.items():
        here = _part(source, modules)
        for target in targets:
            there = _part(target, modules)
            if here and there and here[0] == there[0] and here[1] != there[1]:
                order = SUBLAYERING[here[0]]
                if order.index(there[1]) < order.index(here[1]):
                    found.append((source, target))
    return sorted(found)


def test_every_part_of_a_package_is_in_the_map():
    modules = module_files(ROOT, PACKAGES)
    parts = {_part(m, modules) for m in modules} - {None}
    missing = sorted(f"{package}.{part}" for package, part in parts
                     if part not in SUBLAYERING[package])
    assert not missing, f"sub-packages missing from SUBLAYERING (and docs/DESIGN.md): {missing}"


def test_parts_of_a_package_import_only_the_parts_below_them():
    upward = upward_part_imports(import_graph(ROOT), module_files(ROOT, PACKAGES))
    assert not upward, "imports against the sub-package order of docs/DESIGN.md: " + ", ".join(
        f"{a} -> {b}" for a, b in upward)


def _write_tree(root: Path, files: dict[str, str]) -> None:
    """A small source tree for the tests of the graph itself: path -> text."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_an_upward_import_between_parts_is_found(tmp_path):
    files = {
        "convnet/__init__.py": "",
        "convnet/runtime/__init__.py": "",
        "convnet/runtime/gradcheck.py": "",
        "convnet/runtime/step/__init__.py": "",
        "convnet/runtime/step/executor.py": "from convnet.runtime.devices import base\n",
        "convnet/runtime/devices/__init__.py": "",
        "convnet/runtime/devices/base.py": "def late():\n    from convnet.runtime.step import executor\n",
    }
    _write_tree(tmp_path, files)
    packages = {"convnet": "convnet"}
    assert upward_part_imports(import_graph(tmp_path, packages), module_files(tmp_path, packages)) \
        == [("convnet.runtime.devices.base", "convnet.runtime.step.executor")]


def test_the_graph_sees_every_kind_of_import(tmp_path):
    files = {
        "pkg/__init__.py": "from pkg.a import A\n",
        "pkg/a.py": "import os\nfrom . import b\nA = 1\n",
        "pkg/b.py": "def late():\n    from pkg.sub.c import C\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from .. import a\nfrom ..b import late\nimport pkg.sub\nC = 1\n",
    }
    _write_tree(tmp_path, files)
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.sub.c"},
                     "pkg.sub": set(), "pkg.sub.c": {"pkg.a", "pkg.b", "pkg.sub"}}


def test_a_planted_cycle_is_found_and_named(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/low.py": "X = 1\n",
        "pkg/front.py": "from pkg import low\nfrom pkg.middle import M\n",
        "pkg/middle.py": "M = 1\ndef deferred():\n    from pkg.back import B\n",
        "pkg/back.py": "from .front import *\nB = 1\n",
    }
    _write_tree(tmp_path, files)
    assert find_cycles(import_graph(tmp_path, ("pkg",))) == \
        [["pkg.back", "pkg.front", "pkg.middle", "pkg.back"]]
    (tmp_path / "pkg/middle.py").write_text("M = 1\n")
    assert find_cycles(import_graph(tmp_path, ("pkg",))) == []

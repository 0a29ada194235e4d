"""What the package installs: every source folder, under the project's own name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_installed_under_convnet():
    """A new sub-package folder must be added to pyproject's list, or it would be
    missing from an installed (non-editable) copy."""
    config = _setuptools()
    folders = {"convnet": "convnet", **{name: folder
                                       for name, folder in config["package-dir"].items()}}
    found = set()
    for name, folder in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *relative)))
    assert found == set(config["packages"])
    assert all(name.split(".")[0] == "convnet" for name in config["packages"])


def test_layers_and_kernels_import_under_the_project_name():
    import convnet.kernels
    import convnet.layers

    assert Path(convnet.layers.__file__).parent == ROOT / "layers"
    assert Path(convnet.kernels.__file__).parent == ROOT / "kernels"


def test_the_console_script_starts_where_convnet_py_does():
    """Both ways in install the early signal handlers first (convnet.app.command_line.launcher),
    which the start-up signal tests check through convnet.py."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["convnet"] == "convnet.app.command_line.launcher:main"
    assert "from convnet.app.command_line.launcher import main" in (ROOT / "convnet.py").read_text()


def test_the_make_data_command_starts_where_python_m_convnet_make_data_does():
    """Both install the early signal handlers first (convnet.make_data.launcher)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["convnet-make-data"] == "convnet.make_data.launcher:main"
    assert "from convnet.make_data.launcher import main" in \
        (ROOT / "convnet" / "make_data" / "__main__.py").read_text()

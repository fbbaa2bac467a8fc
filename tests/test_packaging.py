"""Packaging a user can rely on: the import trap of a clone's parent folder, one version, the marker
files. The slow end-to-end check (build the wheel, install it in a fresh venv) is test_wheel.py."""

import importlib.metadata
import pathlib
import subprocess
import sys
import tomllib

import credax

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_clone_folder_does_not_shadow_the_package(tmp_path):
    # The folder above a clone holds a directory named `credax` (the clone itself; here an empty
    # one). With the package at the repository root, `import credax` from there found that folder
    # first and imported an empty namespace package. With src/ layout the installed one wins.
    (tmp_path / "credax").mkdir()
    code = "import credax; print(credax.__file__); print(callable(credax.grpo_advantages))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    assert out[0] != "None", "imported a namespace package (the empty folder), not credax"
    path = pathlib.Path(out[0]).resolve()
    assert path.name == "__init__.py" and path.parent.name == "credax"
    assert tmp_path.resolve() not in path.parents
    assert out[1] == "True"


def test_version_is_defined_once():
    # pyproject.toml reads the version from credax.__version__; the installed metadata agrees.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert credax.__version__ == importlib.metadata.version("credax")


def test_license_and_typed_marker_ship():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License")
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a stub
    assert (ROOT / "src" / "credax" / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["credax"]
    assert config["project"]["license"] == "Apache-2.0"


def test_changelog_names_this_version():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## Unreleased" in changelog
    assert f"## {credax.__version__} " in changelog or f"## [{credax.__version__}]" in changelog

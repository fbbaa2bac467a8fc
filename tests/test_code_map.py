"""``docs/layout.md`` is the map of the house: every source file is on it, and nothing on it is gone.

A file counts as named when its path from the repository root appears in the map's code block, or
when a line of that block starts with its folder's path and names the file's basename (the way a
package's files are listed on one line: ``src/credax/testing/  batch.py, calls.py, ...``); a
package's ``__init__.py`` is named with its folder. A module of the package that
``src/credax/__init__.py`` re-exports names from (an estimator family) is named by the map's
``src/credax/_<family>.py`` line: its generated API page, titled by its docstring, is its entry, so
a new estimator's module needs no line here (docs/layout.md, "Adding an estimator").
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "layout.md"

# The trees whose files are source code a reader must be able to find.
SOURCE_GLOBS = ("src/credax/**/*.py", "benchmarks/**/*.py", "benchmarks/*.sh", "docs/hooks/*.py",
                "notebooks/*.py", "notebooks/src/*.py", "examples/*.py", "tests/reference/*.py")
# tests/test_*.py follow one pattern the map states once; the other files of tests/ are named.
TEST_HELPERS = "tests/*.py"


FAMILY = "src/credax/_<family>.py"  # the map's line for the re-exported modules


def re_exported_modules() -> set[str]:
    """``src/credax/_x.py`` of every module ``credax/__init__.py`` re-exports names from."""
    tree = ast.parse((ROOT / "src" / "credax" / "__init__.py").read_text())
    return {f"src/credax/{node.module}.py" for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
            and node.module.startswith("_")}


def _map_block() -> list[str]:
    text = MAP.read_text()
    blocks = re.findall(r"```text\n(.*?)```", text, flags=re.S)
    assert blocks, "docs/layout.md must hold the map as a ```text block"
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def source_files() -> list[str]:
    files = {p for pattern in SOURCE_GLOBS for p in ROOT.glob(pattern)}
    files |= {p for p in ROOT.glob(TEST_HELPERS) if not p.name.startswith("test_")}
    return sorted(str(p.relative_to(ROOT)) for p in files
                  if "__pycache__" not in p.parts and "results" not in p.parts)


def is_named(path: str, lines: list[str]) -> bool:
    if path in re_exported_modules() and any(line.split()[0] == FAMILY for line in lines):
        return True
    folder, name = path.rsplit("/", 1)
    for line in lines:
        first = line.split()[0]
        if path in line.split() or first == path:
            return True
        if first.rstrip("/") == folder and (
                name == "__init__.py" or re.search(rf"(?<![\w./]){re.escape(name)}\b", line)):
            return True  # a package's line names its files; its __init__.py goes with the folder
    return False


def test_is_named_reads_paths_and_folder_lines():
    lines = ["src/credax/_api.py   the plumbing", "src/credax/testing/   batch.py, calls.py: tables"]
    assert is_named("src/credax/_api.py", lines)
    assert is_named("src/credax/testing/calls.py", lines)
    assert not is_named("src/credax/testing/strategies.py", lines)
    assert not is_named("src/credax/_apix.py", lines)
    assert not is_named("src/credax/bench/calls.py", lines)  # the basename on another folder's line
    assert is_named("src/credax/testing/__init__.py", lines)
    assert not is_named("src/credax/bench/__init__.py", lines)


def test_a_re_exported_module_is_named_by_the_family_line():
    assert "src/credax/_outcome.py" in re_exported_modules()
    assert "src/credax/_checks.py" not in re_exported_modules()
    assert is_named("src/credax/_outcome.py", [f"{FAMILY}  an estimator family"])
    assert not is_named("src/credax/_checks.py", [f"{FAMILY}  an estimator family"])


def test_every_source_file_is_on_the_map():
    lines = _map_block()
    missing = [p for p in source_files() if not is_named(p, lines)]
    assert not missing, f"docs/layout.md does not name {missing}"


def test_every_path_on_the_map_exists():
    stale = []
    for line in _map_block():
        first = line.split()[0]
        if first == FAMILY:
            continue
        if "/" in first or first.endswith((".py", ".sh", ".md", ".yml", ".toml")):
            for token in first.split(","):
                if token and not (ROOT / token.rstrip("/")).exists():
                    stale.append(token)
    assert not stale, f"docs/layout.md names paths that do not exist: {stale}"

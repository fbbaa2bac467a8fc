"""The declared dependencies are what the code imports: nothing missing, nothing that nothing uses.

Read from the sources (``ast``: module-level imports only, the ones that run at ``import``), not
from an installed environment, so the test holds for a fresh clone.
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import re
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "credax"
# Distribution name -> import name, where they differ.
IMPORT_NAME = {"google_tunix": "tunix"}


def _requirement_names(requirements) -> set[str]:
    """Import names of a requirement list; ``credax[a,b]`` expands to those extras."""
    names = set()
    for req in requirements:
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower().replace("-", "_")
        if name == "credax":
            for extra in re.search(r"\[(.*)\]", req).group(1).split(","):
                names |= _requirement_names(_project()["optional-dependencies"][extra.strip()])
            continue
        names.add(IMPORT_NAME.get(name, name))
    return names


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _module_level_imports(paths) -> set[str]:
    """Top-level package names imported at module level (also inside a module-level ``try``)."""
    names = set()
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        stack = list(tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.Try | ast.If):
                stack += node.body + node.orelse + getattr(node, "finalbody", [])
                for handler in getattr(node, "handlers", []):
                    stack += handler.body
    return {n for n in names if n not in sys.stdlib_module_names and n != "credax"}


# Optional modules and the extra that provides what they import (never imported by `import credax`).
OPTIONAL = {"testing": "testing", "torch": "torch", "verl": "verl", "tunix": "tunix", "trl": "trl"}


def _optional(path: pathlib.Path) -> str | None:
    first = path.relative_to(SRC).parts[0].removesuffix(".py")
    return first if first in OPTIONAL else None


def _core_sources():
    return [p for p in SRC.rglob("*.py") if _optional(p) is None]


def test_runtime_dependencies_are_exactly_the_imports():
    declared = _requirement_names(_project()["dependencies"])
    assert declared == _module_level_imports(_core_sources())
    assert declared == {"jax", "numpy", "jaxtyping"}  # stated by hand: the contract of the issue


def test_each_optional_module_has_its_extra():
    extras = _project()["optional-dependencies"]
    runtime = _requirement_names(_project()["dependencies"])
    for path in SRC.rglob("*.py"):
        module = _optional(path)
        if module is not None:
            needed = _module_level_imports([path]) - runtime
            if module == "verl":  # verl itself is installed with --no-deps (see pyproject.toml)
                needed -= {"verl"}
            assert needed <= _requirement_names(extras[OPTIONAL[module]]), path
    assert _requirement_names(extras["testing"]) == {"hypothesis"}


def test_optional_modules_are_left_out_of_collection_without_their_extra():
    # `make test` collects the package's doctests (--doctest-modules); without an extra, its
    # modules cannot be imported and must not be collected (the repository-root conftest.py's
    # collect_ignore), else the suite errors instead of skipping them. `credax.testing` needs
    # only hypothesis, which the dev extra (the suite's own) holds.
    spec = importlib.util.spec_from_file_location("_root_conftest", ROOT / "conftest.py")
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)
    listed = {pathlib.Path(path).stem: module for path, module in root.OPTIONAL_MODULES}
    assert set(listed) == {m for m, extra in OPTIONAL.items() if extra != "testing"}
    for module, provided in listed.items():
        extra = _requirement_names(_project()["optional-dependencies"][OPTIONAL[module]])
        # verl itself is installed with --no-deps, beside its extra (see pyproject.toml)
        assert provided in extra | ({"verl"} if module == "verl" else set()), module


def test_nnx_extra_and_demo_extra():
    extras = _project()["optional-dependencies"]
    assert _requirement_names(extras["nnx"]) == {"flax", "optax"}
    demo = _module_level_imports((ROOT / "benchmarks" / "lab").rglob("*.py"))
    # matplotlib is imported inside the report's plotting function, not at module level
    assert demo - {"jax", "numpy"} == {"flax", "optax"}
    assert _requirement_names(extras["demo"]) == {"flax", "optax", "matplotlib"}


def test_dev_is_a_superset_of_every_light_extra():
    # dev is what `make test` installs; the torch-based extras are pinned heavy wheels that the
    # Makefile installs on their own.
    extras = _project()["optional-dependencies"]
    dev = _requirement_names(extras["dev"])
    for name, reqs in extras.items():
        if name not in {"dev", "bench", "torch", "verl", "tunix", "trl", "gpu"}:  # heavy or hardware-specific
            assert _requirement_names(reqs) <= dev, name
    assert "chex" in dev  # the compile-once tests count traces with chex.assert_max_traces


def test_credax_and_credax_nnx_import_without_flax():
    # Block flax and optax at import: `import credax` (which imports credax.nnx) must not need them.
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'flax', 'optax', 'chex', 'hypothesis'}:\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import credax, credax.nnx\n"
        "print(sorted(m for m in ('flax', 'optax', 'chex') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

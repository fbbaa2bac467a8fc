"""docs/layout.md's "Adding an estimator", followed literally on a copy of the package (#43 item 3).

The test copies the repository (without .git and build outputs) to a temporary directory, adds a
toy estimator ``toy_credit`` by doing exactly the four numbered steps of the recipe, and runs
there the gate tests that read estimators from the package: the public names and their API pages
(test_api), the registry and the bridges' tables (test_registry), the code map (test_code_map),
the invariant and compile-once sweeps and the schedule (test_dogfood), per-group streaming
(test_streaming), the shape contract (test_shape_contract), the call table (test_testing) and the
toy's own tests. They pass with the four files the recipe names and no other: a file a gate needs
that the recipe omits fails here, as the hand list ``SUBJECTS`` of tests/test_api.py once did (it
was in no step).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The repository as git holds it (what the code map and the gates read), without build outputs.
SKIPPED = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", ".pytest_cache",
                                 ".hypothesis", ".ruff_cache", "site", "build", "dist", "*.egg-info")

# Step 1: its module (one float hyperparameter whose annotation is its rule, checked on the host
# like every public option).
MODULE = '''"""Toy credit: a scaled copy of each turn's score (the estimator tests/test_recipe.py adds)."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from . import _checks
from ._api import jit_public
from ._checks import Finite
from ._turns import prepare_turns


@jit_public()
def toy_credit(
    scores: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    beta: Finite = 0.5,
) -> Float[Array, "B K"]:
    """Each turn's credit is its score scaled: ``beta * s_k``.

    Args:
      scores: ``float[B, K]``.
      turn_mask: ``bool[B, K]``.
      beta: the scale. May be traced.

    Returns:
      ``float[B, K]``, ``0`` on padded turns.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.toy_credit(jnp.array([[0.0, 0.5, jnp.nan]]), jnp.array([[True, True, False]]))
      Array([[0.  , 0.25, 0.  ]], dtype=float32)
    """
    s, mask, out_dtype = prepare_turns(scores, turn_mask)
    beta = _checks.scalar(beta, s.dtype, "beta")
    return jnp.where(mask, beta * s, jnp.zeros_like(s)).astype(out_dtype)
'''
# Step 2: the re-export line.
EXPORT = "from ._toy import toy_credit as toy_credit\n"
# Step 3: the registry entry, in _ESTIMATORS.
ENTRY = '    _call("toy_credit", "turn", group_local=True),\n'
# Step 4: its tests (a hand-worked golden: 0.35 * 0.5 = 0.175, padding 0 whatever it holds).
TEST = '''import numpy as np

import credax


def test_golden():
    out = credax.toy_credit(np.array([[0.35, 1.0, np.nan]], np.float32),
                            np.array([[True, True, False]]), beta=0.5)
    np.testing.assert_allclose(out, [[0.175, 0.5, 0.0]], rtol=1e-6)
'''
# The gate tests, run on the copy in one pytest process: the files and the keywords that select
# the toy's entries and the coverage tests in them (their union is the -k expression; the other
# tests of these files read nothing a new estimator changes, and the suite runs them anyway).
GATES = {
    "tests/test_toy.py": ("golden",),
    "tests/test_api.py": ("public", "documented", "docstring", "resolves", "spec", "light"),
    "tests/test_code_map.py": ("map", "named", "exported"),
    "tests/test_registry.py": ("toy", "table", "explain", "torch", "verl", "tunix", "lab", "scan"),
    "tests/test_dogfood.py": ("toy", "every", "numeric"),
    "tests/test_streaming.py": ("toy", "registry", "guide"),
    "tests/test_shape_contract.py": ("toy", "catalogue"),
    "tests/test_testing.py": ("call_table_has_every_public_estimator",),
}


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def recipe_files() -> list[str]:
    """The files the recipe's numbered steps name first (``src/credax/_<module>.py`` ...)."""
    text = (ROOT / "docs" / "layout.md").read_text()
    section = text[text.index("## Adding an estimator"):]
    return re.findall(r"^\d+\. \*\*[^`*]*`([^`]+)`\*\*", section, flags=re.M)


def test_the_recipe_names_four_files():
    assert recipe_files() == ["src/credax/_<module>.py", "src/credax/__init__.py",
                              "src/credax/_registry.py", "tests/test_<module>.py"]


@pytest.mark.slow
def test_a_toy_estimator_passes_the_gates_with_the_four_files(tmp_path):
    copy = tmp_path / "credax"
    shutil.copytree(ROOT, copy, ignore=SKIPPED, symlinks=True)
    before = _digest(copy)

    # The four steps of docs/layout.md, literally.
    (copy / "src/credax/_toy.py").write_text(MODULE)
    init = copy / "src/credax/__init__.py"
    lines = init.read_text().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if line.startswith("from ._"))
    init.write_text("".join(lines[:last + 1] + [EXPORT] + lines[last + 1:]))
    registry = copy / "src/credax/_registry.py"
    text = registry.read_text()
    start = text.index("_ESTIMATORS = [")
    end = text.index("\n]\n", start)
    registry.write_text(text[:end + 1] + ENTRY + text[end + 1:])
    (copy / "tests/test_toy.py").write_text(TEST)

    after = _digest(copy)
    touched = sorted(p for p in after if before.get(p) != after[p])
    expected = [p.replace("<module>", "toy") for p in recipe_files()]
    assert touched == sorted(expected) and len(touched) <= 4, touched

    env = {**os.environ, "PYTHONPATH": f"{copy / 'src'}{os.pathsep}{copy}"}
    select = " or ".join(sorted({word for words in GATES.values() for word in words}))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                           "-rA", *GATES, "-k", select], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    ran = {line.split()[1].split("::")[0] for line in done.stdout.splitlines()
           if line.startswith("PASSED ")}
    assert ran == set(GATES), f"gate files without a passing test: {set(GATES) - ran}"
    assert "test_toy.py::test_golden" in done.stdout
    assert "[toy_credit" in done.stdout  # the sweeps ran on the toy's entry
    # The copy's credax is the one the gates ran on (not the installed one).
    probe = subprocess.run([sys.executable, "-c", "import credax; print(credax.toy_credit)"],
                           cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr

"""The method registry (credax._registry): production reads it, the tests' call table builds on it.

* No module of the package outside ``credax.testing`` (and nothing under ``benchmarks/``) imports
  ``credax.testing``: an AST scan of every source file, with relative imports resolved.
* The tests' table (``credax.testing.calls``) is the registry plus test metadata, entry for entry.
* Each registry entry reads only the optional fields it declares (``Call.needs``): it runs on a
  batch where every other optional field is ``None``, and names a declared one that is missing.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

import credax
from credax import _registry
from credax.testing import calls

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "credax"


def _module_name(path: Path) -> str:
    """``credax.x.y`` of a file under src/, ``benchmarks.x`` of one under benchmarks/."""
    base = ROOT / "src" if PACKAGE in path.parents else ROOT
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Every module an import statement of ``source`` names (relative ones resolved against
    ``module``), and ``package.name`` for ``from package import name``."""
    out: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[:len(parts) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out


def imports_testing(source: str, module: str, is_package: bool = False) -> bool:
    return any(m == "credax.testing" or m.startswith("credax.testing.")
               for m in imported_modules(source, module, is_package))


@pytest.mark.parametrize("source, module, expected", [
    ("from credax.testing import calls", "credax.verl", True),
    ("import credax.testing.calls as c", "credax.bench.cases", True),
    ("from credax import testing", "credax.explain", True),
    ("from .testing.batch import TurnBatch", "credax.explain", True),
    ("from ..testing import calls", "credax.bench.cases", True),
    ("from . import testing", "credax.explain", True),
    ("def f():\n    from credax.testing import TurnBatch\n", "benchmarks.lab.methods", True),
    ("from credax._registry import CALLS", "benchmarks.lab.methods", False),
    ("from ._batch import TurnBatch", "credax.explain", False),
    ("import numpy.testing", "credax.explain", False),
    ("from . import _testing_helpers", "credax.explain", False),
])
def test_the_scan_sees_every_spelling_of_the_import(source, module, expected):
    assert imports_testing(source, module) is expected


def test_no_production_module_imports_credax_testing():
    files = [p for p in PACKAGE.rglob("*.py") if PACKAGE / "testing" not in p.parents]
    files += list((ROOT / "benchmarks").rglob("*.py"))
    assert len(files) > 40  # the scan found the package and the benchmarks
    offenders = [str(p.relative_to(ROOT)) for p in files
                 if imports_testing(p.read_text(), _module_name(p), p.name == "__init__.py")]
    assert offenders == [], (
        f"{offenders} import credax.testing: production code reads the method registry "
        "(credax._registry) and the turn batch (credax._batch) instead.")


def test_the_tests_table_is_the_registry_plus_metadata():
    assert list(calls.ESTIMATORS) == list(_registry.ESTIMATORS)
    assert list(calls.TOOLS) == list(_registry.TOOLS)
    assert list(calls.VARIANTS) == list(_registry.FORMS)
    core = [f.name for f in dataclasses.fields(_registry.Call)]
    for label, entry in _registry.ALL.items():
        test_entry = calls.ALL[label]
        assert isinstance(test_entry, _registry.Call)
        assert all(getattr(test_entry, f) is getattr(entry, f) for f in core), label
    assert set(calls.META) <= set(_registry.ALL)
    assert calls.EXPLAINED.keys() == _registry.EXPLAINED.keys()


BATCH = calls.example_batch(6, 4, 8, seed=3)


@pytest.mark.parametrize("label", list(_registry.ALL))
def test_an_entry_reads_only_the_optional_fields_it_declares(label):
    entry = _registry.ALL[label]
    # Every optional field the entry does not declare is None (tcpo reads the alternatives only
    # where they are set); the call must still run.
    keep = set(entry.needs) | ({"alt_scores", "alt_mask"} if label == "tcpo_advantages" else set())
    batch = BATCH._replace(**{f: None for f in _registry.OPTIONAL if f not in keep})
    entry(batch)
    for field in entry.needs:
        if field == "token_turn":
            continue
        with pytest.raises(ValueError, match=rf"{entry.name} needs TurnBatch\.{field}, which is None"):
            entry(batch._replace(**{field: None}))


def test_the_registry_has_no_stand_ins():
    # A bridge's numbers never depend on a default the tests chose: GiGPO's step rewards are the
    # batch's turn_rewards, and the registry refuses a batch without them (the tests' table
    # stands the scores in).
    b = BATCH._replace(turn_rewards=None)
    with pytest.raises(ValueError, match=r"gigpo_advantages needs TurnBatch\.turn_rewards"):
        _registry.CALLS["gigpo_advantages"](b)
    np.testing.assert_array_equal(
        calls.CALLS["gigpo_advantages"](b),
        credax.gigpo_advantages(b.rewards, b.scores, b.anchors, b.turn_mask, b.group_ids))

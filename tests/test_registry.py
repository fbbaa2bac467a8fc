"""The method registry (credax._registry): production reads it, the tests' call table builds on it.

* No module of the package outside ``credax.testing`` (and nothing under ``benchmarks/``) imports
  ``credax.testing``: an AST scan of every source file, with relative imports resolved.
* The tests' table (``credax.testing.calls``) is the registry plus test metadata, entry for entry.
* Each registry entry reads only the optional fields it declares (``Call.needs``): it runs on a
  batch where every other optional field is ``None``, and names a declared one that is missing.
* Every public estimator reaches the integrations every estimator reaches, and each bridge's own
  table (explain, verl, tunix, the lab) calls public estimators: the steps are in
  docs/layout.md, "Adding an estimator".
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import inspect
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
    assert list(calls.VARIANTS) == list(calls.FORMS)
    core = [f.name for f in dataclasses.fields(_registry.Call)]
    for label, entry in calls.REGISTRY.items():
        test_entry = calls.ALL[label]
        assert isinstance(test_entry, _registry.Call)
        assert all(getattr(test_entry, f) is getattr(entry, f) for f in core), label
    assert set(calls.META) <= set(_registry.CALLS) | set(calls.FORMS)


def test_every_entry_declares_a_known_level_and_optional_fields():
    # The registry's tables are the package's own constants: checked here once, not at import
    # (Call.__post_init__ did it on every import).
    for label, entry in calls.REGISTRY.items():
        assert entry.level in _registry.LEVELS, label
        assert set(entry.needs) <= {*_registry.OPTIONAL, "token_turn"}, label


BATCH = calls.example_batch(6, 4, 8, seed=3)


@pytest.mark.parametrize("label", list(_registry.CALLS) + list(calls.FORMS))
def test_an_entry_reads_only_the_optional_fields_it_declares(label):
    entry = calls.REGISTRY[label]
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


def test_an_entry_is_read_from_the_signature():
    # grpo_advantages(rewards, group_ids, mask=None, *, normalization=None): the required
    # parameters read the fields they name; the defaulted `mask` only where `reads` names it, the
    # row mask for a per-row output, by position after them.
    b = BATCH._replace(rows=np.array([True, True, True, True, True, False]))
    args, kwargs = _registry._call("grpo_advantages", "row").args(b)
    assert len(args) == 2 and args[0] is b.rewards and args[1] is b.group_ids and kwargs == {}
    args, kwargs = _registry._call("grpo_advantages", "row", reads=("mask",)).args(b)
    assert len(args) == 3 and args[2] is b.rows and kwargs == {}
    # A constant goes by keyword (discount_weights(num_turns, gamma): gamma is positional), so
    # does everything after it; `num_turns` is the batch's K.
    args, kwargs = _registry._call("discount_weights", "other", gamma=0.9).args(b)
    assert args == (4,) and kwargs == {"gamma": 0.9}
    # Another reading of a parameter, and the optional fields an entry needs, from what it reads.
    entry = _registry._call("gae_advantages", "other", rewards=_registry._field("scores"))
    args, kwargs = entry.args(b)
    assert args[0] is b.scores and args[1] is b.values and kwargs == {}
    np.testing.assert_array_equal(args[2], b.token_turn >= 0)  # `mask` of tokens
    assert entry.needs == ("values", "token_turn")
    assert _registry._call("gigpo_advantages", "turn").needs == ("turn_rewards", "anchors")


def test_an_entry_the_signature_cannot_say_stops_the_import():
    with pytest.raises(TypeError, match=r"grpo_advantages has no parameter 'maks'"):
        _registry._call("grpo_advantages", "row", reads=("maks",))
    with pytest.raises(KeyError, match="prompt_lengths"):  # no batch field is a prompt length
        _registry._call("token_turn_from_layout", "token")


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


# --------------------------------------------------------------------------------------------
# Adding an estimator (docs/layout.md): every public estimator reaches the integrations every
# estimator reaches (the registry, the bench sweep, credax.torch, its API page). The optional
# ones (credax.explain, credax.verl, credax.tunix, the lab) are read from the bridges' own
# tables: each entry of a bridge's table must call a public estimator through the registry or by
# name, so there is no declaration to keep beside them.
# --------------------------------------------------------------------------------------------


def public_estimators() -> set[str]:
    return {n for n in credax.__all__ if inspect.isroutine(getattr(credax, n))
            and calls.is_estimator(n)}


@functools.cache
def _api_pages() -> dict[str, str]:
    pytest.importorskip("mkdocs")  # the hook builds mkdocs File objects
    spec = importlib.util.spec_from_file_location("api_pages", ROOT / "docs/hooks/api_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.api_pages()


def _uses(fn) -> set[str]:
    """The public estimators ``fn``'s source calls: ``name(...)`` or the registry's
    ``CALLS["name"]`` (a docstring's mention is not a call)."""
    source = inspect.getsource(fn)
    return {name for name in public_estimators()
            if f"{name}(" in source or f'CALLS["{name}"]' in source}


@pytest.mark.parametrize("name", sorted(public_estimators()))
def test_every_public_estimator_reaches_the_common_integrations(name):
    from credax.bench import cases

    # The registry, and through it the bench sweep (which times every registry entry).
    assert name in _registry.ESTIMATORS, f"{name}: no entry in credax._registry.ESTIMATORS"
    assert name not in cases.NOT_TIMED, f"{name}: left out of the bench sweep"
    # Its API page (generated from the re-export line of credax/__init__.py).
    assert any(f"::: credax.{name}\n" in page for page in _api_pages().values()), name


def test_the_explain_methods_are_registry_estimators():
    import credax.explain as cx

    assert set(cx.EXPLAINED) == set(cx.METHODS) == set(cx.METHOD_NOTES)
    for short, c in cx.EXPLAINED.items():
        assert c is _registry.ESTIMATORS[c.name], short
        assert c.level in ("row", "turn"), short  # the page shows per-turn credit


def test_the_torch_bridge_has_every_estimator():
    ctorch = pytest.importorskip("credax.torch")
    missing = [n for n in sorted(public_estimators()) if not callable(getattr(ctorch, n, None))]
    assert missing == []


def test_the_verl_bridge_calls_registry_estimators():
    pytest.importorskip("verl")
    import credax.verl as cv

    assert set(cv._ENTRY) == set(cv.METHODS)
    for method in cv.METHODS:
        assert cv._ENTRY[method] in _registry.ESTIMATORS, method
        assert f"credax_{method}" in cv.ESTIMATORS


def test_the_tunix_bridge_calls_public_estimators():
    pytest.importorskip("tunix")
    import credax.tunix as ctx

    assert ctx.ESTIMATORS
    for key, adapter in ctx.ESTIMATORS.items():
        assert _uses(adapter), f"{key} calls no public estimator"


def test_the_lab_methods_call_public_estimators():
    from benchmarks.lab import methods

    reached = set().union(*(_uses(m.credit) for m in methods.METHODS_BY_NAME.values()))
    # The lab compares the outcome, turn, step and value families (its oracles call none).
    assert {"grpo_advantages", "tcpo_advantages", "triage_advantages",
            "gae_advantages"} <= reached <= public_estimators()

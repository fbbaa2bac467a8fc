"""The public API: every name of ``credax.__all__`` is importable and documented on an API page.

There is no hand list of the public names here (it repeated the package): the coverage checks
read what the code already knows, ``credax.__all__`` and the API pages generated from the
re-export lines of ``src/credax/__init__.py`` (``docs/hooks/api_pages.py``), the way rlax checks
its documentation against ``__all__``.
"""

import functools
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import credax

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _hook():
    pytest.importorskip("mkdocs")  # the hook builds mkdocs File objects
    spec = importlib.util.spec_from_file_location("api_pages", ROOT / "docs/hooks/api_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_public_name_is_on_an_api_page():
    # A name re-exported by credax/__init__.py gets a `::: credax.<name>` block on its module's page;
    # a public submodule (presets, nnx) has a page of its own.
    pages = "".join(_hook().api_pages().values())
    undocumented = [n for n in credax.__all__ if f"::: credax.{n}\n" not in pages]
    assert undocumented == [], f"public names without an API page: {undocumented}"


def test_every_documented_name_is_public():
    # The pages document the re-export lines; each is in __all__ (nothing private leaks onto a
    # page, nothing documented is missing from the package).
    documented = {n for names in _hook().public_names_by_module().values() for n in names}
    assert documented <= set(credax.__all__), sorted(documented - set(credax.__all__))
    submodules = set(credax.__all__) - documented
    assert all(inspect.ismodule(getattr(credax, n)) for n in submodules), sorted(submodules)
    assert submodules <= set(_hook().PUBLIC_MODULES)


def test_every_public_name_has_a_docstring():
    bare = [n for n in credax.__all__ if not inspect.getdoc(getattr(credax, n))]
    assert bare == [], f"public names without a docstring: {bare}"


def test_every_name_resolves():
    for name in credax.__all__:
        assert getattr(credax, name) is not None


def test_spec_constants():
    assert tuple(credax.TRIAGE_ROLE_CONSTANTS) == (1.0, 0.5, -0.1, -0.5)
    assert [int(r) for r in credax.Role] == [0, 1, 2, 3]
    assert [r.name for r in credax.Role] == ["DECISIVE", "EXPLORATION", "NO_PROGRESS", "REGRESSION"]


def test_import_is_light():
    # `import credax` loads neither flax nor hypothesis (optional extras / submodules).
    code = "import sys, credax; print('flax' in sys.modules, 'hypothesis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]

"""The documentation cannot rot: every ```python block of README.md and docs/**/*.md runs as printed,
and the site builds with mkdocs --strict (broken links, missing includes and docstrings that
disagree with their signatures are errors).

The blocks of one file run top to bottom in one namespace, as a reader pastes them; a block that
is not meant to run uses a plain ``` fence or ```text.

What a block prints is shown right under it, in a ```text block after the marker line
``<!-- prints -->`` (invisible on the site), and checked here as a doctest checks its output
(``...`` matches anything, whitespace is normalised). On the pages of ``PRINTS_SHOWN`` every block
that prints must show it.
"""

import contextlib
import doctest
import importlib.util
import inspect
import io
import os
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

import credax

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted(
    p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.relative_to(ROOT / "docs").parts
)
BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)
# A python block and, if the marker follows it, the text block showing what it prints.
BLOCK_AND_OUTPUT = re.compile(r"^```python\n(.*?)^```\n(?:<!-- prints -->\n```text\n(.*?)^```)?",
                              flags=re.S | re.M)
PRINTS_SHOWN = {"README.md", "docs/guides/first-loop.md", "docs/guides/rollouts.md"}
_CHECKER = doctest.OutputChecker()
_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _blocks(path):
    return BLOCK.findall(path.read_text())


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Pages whose blocks run in one fresh interpreter, as a reader's script does, and the module each
# needs (skipped without it): Tunix trains in threads of its own, where the suite's strict dtype
# promotion would apply (`jax.numpy_dtype_promotion("standard")` is thread-local).
FRESH = {"docs/guides/tunix.md": "tunix"}
# Every page whose blocks need an optional extra, and the module it provides: skipped without it
# (`make test` installs every extra, so CI runs them all).
NEEDS = {**FRESH, "docs/guides/torch.md": "torch", "docs/guides/trl.md": "trl"}


def _exec_blocks(path):
    """Run a page's python blocks top to bottom in one namespace: (name, shown, printed) each."""
    ns = {"__name__": "docs"}
    page = path.relative_to(ROOT).as_posix()
    results = []
    for index, (block, shown) in enumerate(BLOCK_AND_OUTPUT.findall(path.read_text())):
        name = f"{page}[block {index}]"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, name, "exec"), ns)
        results.append((name, shown, out.getvalue()))
    return results


@pytest.mark.parametrize("path", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_python_blocks_run(path, tmp_path):
    page = path.relative_to(ROOT).as_posix()
    if page in NEEDS and importlib.util.find_spec(NEEDS[page]) is None:
        pytest.skip(f"{page} needs {NEEDS[page]} (its extra is not installed)")
    if page in FRESH:
        result = tmp_path / "blocks.json"
        done = subprocess.run([sys.executable, __file__, str(path), str(result)], capture_output=True,
                              text=True, timeout=1200, cwd=ROOT)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        import json

        results = json.loads(result.read_text())
    else:
        # A reader runs these with JAX's standard promotion (optax's adamw, for one, mixes a
        # Python float with an int32 step count, which the suite's strict mode rejects).
        # np.printoptions(): a page that sets print options (the quickstart) leaves them there.
        with jax.numpy_dtype_promotion("standard"), np.printoptions():
            results = _exec_blocks(path)
    for name, shown, printed in results:
        if shown:
            assert _CHECKER.check_output(shown, printed, _FLAGS), (
                f"{name} prints\n{printed}\nbut the page shows\n{shown}")
        elif page in PRINTS_SHOWN or page in FRESH:
            assert not printed, f"{name} prints\n{printed}\nbut the page shows no output"


def test_shown_output_is_checked():
    # The checker behind test_python_blocks_run: a wrong figure fails, `...` and spacing do not.
    text = ("```python\nprint(1 + 1)\n```\n<!-- prints -->\n```text\n3\n```\n"
            "```python\nprint('a  b', 'x' * 50)\n```\n<!-- prints -->\n```text\na b ...\n```\n")
    (b1, s1), (b2, s2) = BLOCK_AND_OUTPUT.findall(text)
    assert not _CHECKER.check_output(s1, "2\n", _FLAGS)
    assert _CHECKER.check_output(s2, "a  b " + "x" * 50 + "\n", _FLAGS)


def test_readme_has_the_quickstart_and_it_computes_grpo():
    ns = {"__name__": "docs"}
    with np.printoptions(), contextlib.redirect_stdout(io.StringIO()):
        exec(compile(_blocks(ROOT / "README.md")[0], "README.md[quickstart]", "exec"), ns)
    # What it prints is shown under it (and checked by test_python_blocks_run).
    ((block, shown),) = BLOCK_AND_OUTPUT.findall((ROOT / "README.md").read_text())[:1]
    assert shown.count("\n") >= 5
    # Prompt 17 = (1, 0, 1): μ = 2/3, unbiased σ = sqrt((1/9 + 4/9 + 1/9) / 2) = sqrt(1/3).
    sigma = (1 / 3) ** 0.5
    expected = [(1 / 3) / sigma, (-2 / 3) / sigma, (1 / 3) / sigma, 0.0, 0.0, 0.0]
    assert [round(float(a), 5) for a in ns["adv"]] == [round(e, 5) for e in expected]


def test_readme_keeps_the_two_commands_and_the_lab_markers():
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    start, end = text.find("<!-- lab-results:start -->"), text.find("<!-- lab-results:end -->")
    assert 0 <= start < end


def test_no_install_command_that_cannot_work():
    # No index has credax: every install instruction names a clone, a path or a wheel.
    files = [*PAGES, *sorted((ROOT / "src" / "credax").rglob("*.py")),
             *sorted((ROOT / "notebooks" / "src").glob("*.py"))]
    bad = re.compile(r"pip install (-U |--upgrade )?['\"]?credax\b")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in files
            for i, line in enumerate(p.read_text().splitlines(), 1) if bad.search(line)]
    assert not hits, hits


def test_readme_links_resolve():
    # mkdocs --strict checks the links of docs/; the README is read on its own (GitHub, an editor).
    text = (ROOT / "README.md").read_text()
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text)
               if not t.startswith(("http://", "https://", "#"))]
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing


UNSHIPPED = re.compile(r"SPEC ?§|SPEC\.md|user-issues|papers\.md|DESIGN\.md|field-2026")


def test_no_reference_to_documents_that_do_not_ship():
    # The research notes and the spec stay with the project's engineers; what users read points
    # at public sources or at docs/decisions.md.
    files = [*PAGES, *sorted((ROOT / "src" / "credax").rglob("*.py"))]
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
            for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
            if UNSHIPPED.search(line)]
    assert not hits, "\n".join(hits)


def test_site_builds_strict_with_every_public_name(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]
    # Every public name has its own entry (an anchor) in the generated API reference.
    html = "".join(p.read_text() for p in (site / "api").rglob("*.html"))
    modules = {n for n in credax.__all__ if inspect.ismodule(getattr(credax, n))}
    missing = [n for n in credax.__all__ if n not in modules and f'id="credax.{n}"' not in html]
    assert not missing, missing
    for page in ("guides/tcpo", "guides/policy-loss", "guides/testing", "decisions", "api/nnx"):
        assert (site / page / "index.html").is_file(), page


def test_rst_docstrings_become_markdown():
    rst = _load("rst_docstrings")
    # Roles: a documented name becomes a cross-reference, bare names resolve through `credax`,
    # an unknown name stays code.
    assert rst.rewrite(":func:`credax.groups` and :class:`Groups`") == (
        "[`credax.groups`][credax.groups] and [`Groups`][credax.Groups]")
    assert rst.rewrite(":func:`no_such_thing`") == "`no_such_thing`"
    assert rst.rewrite("like this::") == "like this:"
    # A simple table, whose first column overflows its border and whose last row continues.
    table = ("===  =====\nkey  value\n===  =====\n``VERL``  a b\n     c\nx    y\n===  =====")
    assert rst.rewrite(table).splitlines() == [
        "| key | value |", "|---|---|", "| ``VERL`` | a b c |", "| x | y |"]
    # Grouped Args entries are repeated, continuation lines included.
    doc = "Args:\n  a, b: shared\n    text.\n  c: own.\n\nReturns:\n  x."
    assert rst.rewrite(doc).splitlines()[:6] == [
        "Args:", "  a: shared", "    text.", "  b: shared", "    text.", "  c: own."]
    assert rst.rewrite("Title\n-----\nbody") == "**Title**\nbody"


def test_api_pages_cover_every_module():
    pages = _load("api_pages").api_pages()
    listed = "".join(pages.values())
    modules = {n for n in credax.__all__ if inspect.ismodule(getattr(credax, n))}
    assert all(f"::: credax.{n}" in listed for n in credax.__all__ if n not in modules)
    assert {"api/index.md", "api/presets.md", "api/nnx.md", "api/testing.md"} <= set(pages)


if __name__ == "__main__":  # a FRESH page: python tests/test_docs.py PAGE OUT.json
    import json

    with open(sys.argv[2], "w") as fh:
        json.dump(_exec_blocks(pathlib.Path(sys.argv[1]).resolve()), fh)

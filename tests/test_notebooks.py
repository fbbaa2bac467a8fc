"""The notebooks under notebooks/ match their sources, execute top to bottom, and are stored stripped.

Each notebook is built from ``notebooks/src/<name>.py`` (percent format) by ``notebooks/build.py``
(``make notebooks``); the committed ``.ipynb`` must be exactly what that build writes.

Executed with nbclient on the interpreter running the tests (the .venv kernel), so a notebook that
rots fails `make test`. Each must finish well under two minutes on 2 CPU cores.
"""

import importlib.util
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SOURCES = sorted((ROOT / "notebooks" / "src").glob("*.py"))

_spec = importlib.util.spec_from_file_location("notebook_build", ROOT / "notebooks" / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)


def test_every_notebook_has_a_source():
    assert SOURCES, "notebooks/src holds no sources"
    assert [p.stem for p in NOTEBOOKS] == [p.stem for p in SOURCES]


@pytest.mark.parametrize("source", SOURCES, ids=[p.name for p in SOURCES])
def test_notebook_matches_its_source(source):
    committed = build.target(source).read_text()
    assert committed == build.rendered(source), (
        f"notebooks/{build.target(source).name} differs from notebooks/src/{source.name}: "
        "edit the source and run `make notebooks`")


def test_percent_format_parsing():
    # Hand-written source: markdown comment lines lose their "# " ("#" alone is a blank line),
    # a commented magic is restored, blank lines between cells are dropped, inner ones kept.
    text = ("# %% [markdown]\n# # Title\n#\n# body\n\n"
            "# %%\n# %matplotlib inline\nx = 1\n\ny = 2  # a comment\n\n\n"
            "# %%\nprint(x)\n")
    cells = build.parse(text)
    assert [c.cell_type for c in cells] == ["markdown", "code", "code"]
    assert cells[0].source == "# Title\n\nbody"
    assert cells[1].source == "%matplotlib inline\nx = 1\n\ny = 2  # a comment"
    assert cells[2].source == "print(x)"
    with pytest.raises(ValueError, match="markdown cell line"):
        build.parse("# %% [markdown]\nnot a comment\n")
    with pytest.raises(ValueError, match="before the first"):
        build.parse("import os\n# %%\n")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stripped(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: commit notebooks with outputs stripped"
            assert cell.execution_count is None, f"{path.name}: stale execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    # The kernel is this interpreter, whatever kernelspecs the machine has.
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    )
    # Not a timed test: a loaded CI machine may take several times longer than a quiet one.
    # The kernel's own timeout (above) only stops a hung notebook.
    client.execute(cwd=str(ROOT / "notebooks"))

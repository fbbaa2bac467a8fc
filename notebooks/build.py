"""Build the notebooks under notebooks/ from their plain-Python sources in notebooks/src/.

    python notebooks/build.py            # rewrite every notebook (make notebooks)
    python notebooks/build.py 02         # only those whose name contains "02"
    python notebooks/build.py --check    # exit 1 if a committed notebook differs from its source

Edit ``notebooks/src/NN_name.py``, not the ``.ipynb``: the notebooks are build products, committed
without outputs (tests/test_notebooks.py executes them and checks they match their sources).

The sources are in the "percent" format that Jupytext, VS Code and PyCharm read as cells:

    # %% [markdown]
    # # A title
    #
    # Markdown, one comment line per line.

    # %%
    import credax                    # a code cell, plain Python that ruff lints
    # %matplotlib inline             # an IPython magic, commented out so the file stays Python

Blank lines between cells are dropped; a cell's own blank lines are kept.
"""

from __future__ import annotations

import pathlib
import re
import sys

import nbformat

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = HERE / "src"
MARKER = re.compile(r"^# %%(?: \[(markdown|md)\])?\s*$")
MAGIC = re.compile(r"^# (%[a-z]\w*\b.*)$")  # `# %matplotlib inline`, not the `# %%` cell marker


def parse(text: str) -> list:
    """The cells of a percent-format source: markdown comment blocks and code."""
    cells, kind, body = [], None, []

    def close():
        if kind is None:
            return
        lines = body[:]
        while lines and not lines[-1].strip():
            lines.pop()
        if kind == "markdown":
            bad = [ln for ln in lines if ln and ln != "#" and not ln.startswith("# ")]
            if bad:
                raise ValueError(f"markdown cell line is not a '# ' comment: {bad[0]!r}")
            source = "\n".join(ln[2:] for ln in lines)
            cells.append(nbformat.v4.new_markdown_cell(source))
        else:
            source = "\n".join(MAGIC.sub(r"\1", ln) for ln in lines)
            cells.append(nbformat.v4.new_code_cell(source))

    for line in text.splitlines():
        match = MARKER.match(line)
        if match:
            close()
            kind, body = ("markdown" if match.group(1) else "code"), []
        elif kind is None:
            if line.strip():
                raise ValueError(f"text before the first '# %%' cell marker: {line!r}")
        else:
            body.append(line)
    close()
    return cells


def notebook(source: pathlib.Path):
    nb = nbformat.v4.new_notebook()
    nb.cells = parse(source.read_text())
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):  # stable ids: rebuilding an unchanged notebook is a no-op
        cell["id"] = f"{source.stem[:2]}-{i:02d}"
    nbformat.validate(nb)
    return nb


def target(source: pathlib.Path) -> pathlib.Path:
    return HERE / f"{source.stem}.ipynb"


def rendered(source: pathlib.Path) -> str:
    return nbformat.writes(notebook(source)) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    wanted = [a for a in argv if a != "--check"]
    stale = []
    for source in sorted(SOURCES.glob("*.py")):
        if wanted and not any(w in source.name for w in wanted):
            continue
        text, path = rendered(source), target(source)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
            print("wrote", path)
    if stale:
        print("out of date with notebooks/src (run `make notebooks`):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

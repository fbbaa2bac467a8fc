"""Griffe extension: render credax's reST-flavoured docstrings as the Markdown mkdocstrings expects.

credax's docstrings are Google style (``Args:``, ``Returns:``, ...) with a few reST habits that read
well in ``help()`` and in an editor: ``:func:`x``` roles, ``::`` before a literal block, simple
``====`` tables and ``----`` underlined titles. This extension rewrites them when the API
reference is built, so the source stays as it is:

* ``:func:`credax.x``` / ``:class:`` / ``:attr:`` / ``:meth:`` / ``:mod:`` become cross-references
  to the documented object (bare names are looked up in the object's public module, then in
  ``credax``); a name the reference does not render (unknown, or only imported there) stays
  plain code.
* ``text::`` becomes ``text:`` (the indented block after it is already a Markdown code block).
* simple tables become Markdown tables (a row whose first column is empty continues the row above).
* an underlined title becomes a bold line (a heading would break the page's table of contents).
* an ``Args:`` entry that documents several parameters at once (``clip_low, clip_high: ...``) is
  repeated for each of them, so griffe checks every name against the signature.
"""

from __future__ import annotations

import importlib
import re

import griffe

ROLE = re.compile(r":(?:func|class|attr|meth|mod|data|obj):`~?([A-Za-z_][\w.]*)`")
BORDER = re.compile(r"^( *)(=+)( +=+)+ *$")
UNDERLINE = re.compile(r"^ *(-{3,}|~{3,}) *$")
SECTION = re.compile(r"^( *)([A-Z][A-Za-z ]*):$")
GROUPED = re.compile(r"^( +)(\*{0,2}\w+(?:, *\*{0,2}\w+)+): (.*)$")


def _documented(path: str) -> bool:
    """Whether ``path`` (``credax.x``, ``credax.nnx.y``, ``credax.testing.Z.w``) names an object."""
    parts = path.split(".")
    if parts[0] != "credax":
        return False
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _public_module(obj: griffe.Object) -> str:
    """``credax`` for the private modules (everything public is re-exported there), else its own."""
    module = obj.module.path if not obj.is_module else obj.path
    public = [p for p in module.split(".") if not p.startswith("_")]
    return ".".join(public)


def _role(match: re.Match, scope: str, exists) -> str:
    name = match.group(1)
    candidates = [name] if name.startswith("credax") else [f"{scope}.{name}", f"credax.{name}"]
    for target in candidates:
        if exists(target):
            return f"[`{name}`][{target}]"
    return f"`{name}`"


def _rendered(collection):
    """Whether griffe's tree holds ``path`` as an object the API pages render: defined in its module
    (not an import of another module's object), or re-exported by ``credax`` itself."""

    def exists(path: str) -> bool:
        try:
            obj = collection[path]
        except (KeyError, ValueError, griffe.AliasResolutionError):
            return False
        if obj.is_alias:
            return obj.parent.path == "credax"
        return not obj.is_attribute or obj.docstring is not None  # undocumented data: not rendered

    return exists


def _table(lines: list[str]) -> list[str]:
    """A reST simple table (border, header, border, rows, border) as a Markdown table."""
    indent, border = len(lines[0]) - len(lines[0].lstrip()), lines[0]
    spans, start = [], None
    for i, ch in enumerate(border + " "):
        if ch == "=" and start is None:
            start = i
        elif ch != "=" and start is not None:
            spans.append((start, i))
            start = None
    # The last column runs to the end of the line (its text may be longer than the border).
    spans[-1] = (spans[-1][0], 10_000)

    def cells(line):
        # A cell may overflow its border by a few characters: a column starts at the first space
        # at or after its border position, never inside a word.
        starts = [0]
        for a, _ in spans[1:]:
            while 0 < a < len(line) and line[a - 1] != " ":
                a += 1
            starts.append(a)
        ends = starts[1:] + [len(line)]
        return [line[a:b].strip() for a, b in zip(starts, ends, strict=True)]

    rows = []
    for line in lines[1:]:
        if BORDER.match(line) or not line.strip():
            continue
        row = cells(line)
        if rows and not row[0]:
            rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], row, strict=True)]
        else:
            rows.append(row)
    pad = " " * indent
    out = [pad + "| " + " | ".join(rows[0]) + " |", pad + "|" + "---|" * len(spans)]
    out += [pad + "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows[1:]]
    return out


def _split_grouped(lines: list[str]) -> list[str]:
    """Repeat ``a, b: text`` (and its continuation lines) as ``a: text`` and ``b: text``."""
    out, i, section = [], 0, None
    while i < len(lines):
        line = lines[i]
        head = SECTION.match(line)
        if head:
            section = head.group(2)
        grouped = GROUPED.match(line) if section in ("Args", "Arguments", "Parameters") else None
        if not grouped:
            out.append(line)
            i += 1
            continue
        indent, names, first = grouped.groups()
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or
                                  len(lines[j]) - len(lines[j].lstrip()) > len(indent)):
            if not lines[j].strip() and (j + 1 >= len(lines) or not lines[j + 1].startswith(
                    indent + " ")):
                break
            j += 1
        for name in (n.strip() for n in names.split(",")):
            out += [f"{indent}{name}: {first}", *lines[i + 1:j]]
        i = j
    return out


def rewrite(text: str, scope: str = "credax", exists=_documented) -> str:
    """The Markdown for one docstring (pure function; tests/test_docs.py calls it directly)."""
    lines, out, i = _split_grouped(text.splitlines()), [], 0
    while i < len(lines):
        line = lines[i]
        if BORDER.match(line):
            # A table ends at its third border line.
            j, borders = i + 1, 1
            while j < len(lines) and borders < 3:
                borders += bool(BORDER.match(lines[j]))
                j += 1
            out += _table(lines[i:j])
            i = j
            continue
        if i + 1 < len(lines) and line.strip() and UNDERLINE.match(lines[i + 1]) \
                and len(lines[i + 1].strip()) >= len(line.strip()):
            out.append(f"**{line.strip()}**")
            i += 2
            continue
        if line.rstrip().endswith("::") and not line.strip() == "::":
            line = line.rstrip()[:-1]
        out.append(line)
        i += 1
    text = "\n".join(out)
    return ROLE.sub(lambda m: _role(m, scope, exists), text)


class RstDocstrings(griffe.Extension):
    """Rewrite every docstring once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs) -> None:
        if obj.docstring is not None and not obj.is_alias:
            exists = _rendered(loader.modules_collection)
            obj.docstring.value = rewrite(obj.docstring.value, _public_module(obj), exists)

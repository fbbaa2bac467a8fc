"""The package's modules import each other without a cycle: every arrow points down the layers.

Read from the sources (``ast``), function-level imports included: a cycle broken only by importing
inside a function still ties the modules together (neither can be read, tested or moved alone),
and it is how the one cycle the package had hid (``_rollouts → _triage → _validate → _rollouts``,
#36). Imports under ``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "credax"


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def import_edges(src: pathlib.Path = SRC) -> dict[str, set[str]]:
    """``{"_rollouts": {"_group_ids", "_roles"}, ...}``: the modules of ``src/credax/*.py`` each
    module imports, as ``from .x import``, ``from . import x``, ``from credax.x import``,
    ``from credax import x`` or ``import credax.x``. The package itself (``import credax``) is not
    an edge: ``__init__`` is the top of the house, above every module."""
    modules = {p.stem for p in src.glob("*.py")} - {"__init__"}
    edges: dict[str, set[str]] = {}
    for name in sorted(modules):
        out = set()
        for node in _runtime_nodes(ast.parse((src / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level == 1:
                    base = module
                elif node.level == 0 and (module == "credax" or module.startswith("credax.")):
                    base = module.removeprefix("credax").lstrip(".")
                else:
                    continue
                if base:
                    out.add(base.split(".")[0])
                else:  # from . import x / from credax import x
                    out.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("credax."):
                        out.add(alias.name.split(".")[1])
        edges[name] = out & modules - {name}
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path ``[a, b, ..., a]``, or ``None`` when it is acyclic."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_find_cycle_reads_function_level_imports(tmp_path):
    (tmp_path / "_a.py").write_text("from ._b import x\n")
    (tmp_path / "_b.py").write_text("def f():\n    from ._c import y\n")
    (tmp_path / "_c.py").write_text("import credax\nfrom . import _a\n")
    (tmp_path / "_d.py").write_text("from typing import TYPE_CHECKING\n"
                                    "if TYPE_CHECKING:\n    from ._a import x\n")
    edges = import_edges(tmp_path)
    assert edges == {"_a": {"_b"}, "_b": {"_c"}, "_c": {"_a"}, "_d": set()}
    assert find_cycle(edges) == ["_a", "_b", "_c", "_a"]
    edges["_c"] = set()
    assert find_cycle(edges) is None


def test_the_package_modules_import_without_a_cycle():
    edges = import_edges()
    assert {"_rollouts", "_triage", "_validate", "_checks"} <= set(edges)  # the walk saw the package
    cycle = find_cycle(edges)
    assert cycle is None, f"import cycle: {' → '.join(cycle)}"

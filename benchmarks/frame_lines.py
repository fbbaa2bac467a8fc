"""Executable lines of checking, dispatch and registration in ``src/credax`` (issue #43, item 2).

The review's heuristic, by AST (docstrings, comments and blank lines never count):

* the frame modules whole: the entry and its checks (``_api``, ``_checks``, ``_validate``), the
  registry (``_registry``, ``_batch``) and the options values (``_normalization``,
  ``_loss_options``);
* in the math modules (the estimators, grouping engine, losses and log-probs: every top-level
  module that is not frame, bridge, rollout I/O or tool), the check lines: ``raise`` statements,
  ``if ... raise`` blocks, functions named ``check_*`` / ``as_*`` / ``validate_*`` /
  ``reject_*`` (leading underscores ignored) and bare calls to such functions.

Usage::

    python benchmarks/frame_lines.py [SRC_DIR]          # default: src/credax of this checkout
    git worktree add /tmp/old a3e9449 && python benchmarks/frame_lines.py /tmp/old/src/credax
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ENTRY = ("_api", "_checks", "_validate")
REGISTRY = ("_registry", "_batch")
OPTIONS = ("_normalization", "_loss_options")
NOT_MATH = ("__init__", "torch", "verl", "tunix", "trl", "_tunix_tiny", "nnx", "explain", "presets",
            "_readers", "_rollouts", "_roles")
PREFIXES = ("check_", "as_", "validate_", "reject_")


def _is_doc(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def _header(node: ast.stmt) -> range:
    """The lines of a statement itself: a compound statement's header (decorators and signature
    included), a simple statement whole."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    body = getattr(node, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.AST):
        return range(first, body[0].lineno)
    return range(first, node.end_lineno + 1)


def executable_lines(tree: ast.AST, code: set[int]) -> set[int]:
    """Every line of every statement (not docstrings), restricted to code lines."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not _is_doc(node):
            out.update(_header(node))
    return out & code


def _named_check(name: str) -> bool:
    return name.lstrip("_").startswith(PREFIXES)


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def check_lines(tree: ast.AST, code: set[int]) -> set[int]:
    """The review's check lines of one module."""
    out: set[int] = set()

    def whole(node: ast.AST) -> None:
        out.update(executable_lines(node, code) | ({node.lineno} & code))

    for node in ast.walk(tree):
        if isinstance(node, ast.Raise):
            out.update(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, ast.If) and any(isinstance(n, ast.Raise) for n in node.body):
            out.update(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, ast.FunctionDef) and _named_check(node.name):
            whole(node)
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and _named_check(_call_name(node.value))):
            out.update(range(node.lineno, node.end_lineno + 1))
    return out & code


def code_lines(source: str) -> set[int]:
    """Lines that hold code (not blank, not only a comment)."""
    return {i for i, line in enumerate(source.splitlines(), 1)
            if line.strip() and not line.strip().startswith("#")}


def measure(src: Path) -> dict[str, int]:
    parts = {"entry": 0, "registry": 0, "options": 0, "math checks": 0}
    for path in sorted(src.glob("*.py")):
        source = path.read_text()
        tree, code = ast.parse(source), code_lines(source)
        name = path.stem
        if name in ENTRY:
            parts["entry"] += len(executable_lines(tree, code))
        elif name in REGISTRY:
            parts["registry"] += len(executable_lines(tree, code))
        elif name in OPTIONS:
            parts["options"] += len(executable_lines(tree, code))
        elif name not in NOT_MATH:
            parts["math checks"] += len(check_lines(tree, code))
    parts["total"] = sum(parts.values())
    return parts


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "src" / "credax"
    for key, value in measure(root).items():
        print(f"{key:12} {value:6d}")

"""mkdocs hook: one API reference page per credax module, generated from the package itself.

Every public name of ``credax`` is re-exported by ``src/credax/__init__.py`` with one line
``from ._module import name as name``; this hook reads those lines (statically, with ``ast``) and
writes ``api/<module>.md`` with the module's docstring and one ``::: credax.<name>`` block per name,
so a name added to the package appears in the reference without editing the docs. The public
submodules (``credax.presets``, ``credax.nnx``, ``credax.testing``, ``credax.torch``) get a page
each.

It also serves a few committed files from outside ``docs/`` at their repository paths (the
benchmark plots, the notebooks), so a page links them as ``../benchmarks/results/speed-cpu.png``
and the site always shows the committed file, never a copy that can go stale.
"""

from __future__ import annotations

import ast
import collections
import pathlib

from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[2]
INIT = ROOT / "src" / "credax" / "__init__.py"

# Page titles of the modules known today; a new module is titled by its docstring's first line, up
# to the first colon ("Value-based credit: GAE over ..." -> "Value-based credit").
TITLES = {
    "_group_ids": "Group ids",
    "_grouping": "Grouping",
    "_normalization": "Normalization options",
    "_loss_options": "Policy-loss options",
    "_outcome": "Outcome advantages: GRPO, Dr. GRPO, RLOO, GDPO",
    "_turns": "Turn tools",
    "_tcpo": "TCPO",
    "_triage": "TRIAGE",
    "_roles": "TRIAGE roles and judge labels",
    "_stepwise": "MT-GRPO and GiGPO",
    "_logprobs": "Token log-probs",
    "_losses": "KL, aggregation and the policy loss",
    "_validate": "Eager validation",
    "presets": "Parity presets (credax.presets)",
    "nnx": "Flax NNX wrapper (credax.nnx)",
    "testing": "Property testing (credax.testing)",
    "torch": "Torch bridge (credax.torch)",
}
# Public submodules (no leading underscore: presets, nnx, testing, torch, ...) get a page each.
PUBLIC_MODULES = tuple(sorted(
    p.stem if p.is_file() else p.name
    for p in INIT.parent.iterdir()
    if not p.name.startswith(("_", ".")) and (p.suffix == ".py" or (p / "__init__.py").is_file())
))
ASSETS = ("benchmarks/**/*.png", "benchmarks/**/*.json", "notebooks/*.ipynb")


def public_names_by_module(init: pathlib.Path = INIT) -> dict[str, list[str]]:
    """``{"_group_ids": ["Groups", "groups"], ...}`` from the re-export lines of ``__init__``."""
    by_module: dict[str, list[str]] = collections.defaultdict(list)
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                name = alias.asname or alias.name
                if not name.startswith("_"):
                    by_module[node.module].append(name)
    return dict(by_module)


def title(module: str) -> str:
    if module in TITLES:
        return TITLES[module]
    path = INIT.parent / f"{module}.py"
    if not path.exists():
        path = INIT.parent / module / "__init__.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) if path.exists() else None
    return doc.splitlines()[0].split(":")[0].rstrip(".") if doc else module.strip("_")


def page(module: str, names: list[str]) -> str:
    title_ = title(module)
    lines = [f"# {title_}", ""]
    if not names:  # a public submodule whose names are not re-exported: the module page itself
        lines += [f"::: credax.{module}", "    options:", "      show_root_heading: false",
                  "      show_root_toc_entry: false", ""]
        return "\n".join(lines)
    lines += [f"Defined in `credax/{module}.py`; every name below is importable as `credax.<name>`"
              + (f" (and as `credax.{module}.<name>`)." if not module.startswith("_") else "."),
              "", f"::: credax.{module}", "    options:", "      members: false",
              "      show_root_heading: false", "      show_root_toc_entry: false", ""]
    for name in names:
        lines += [f"::: credax.{name}", ""]
    return "\n".join(lines)


def api_pages() -> dict[str, str]:
    """``{"api/groups.md": markdown, ...}``: every page this hook adds."""
    by_module = public_names_by_module()
    pages = {}
    for module, names in by_module.items():
        pages[f"api/{module.strip('_')}.md"] = page(module, names)
    for module in PUBLIC_MODULES:
        # `from . import presets as presets` re-exports no names: the module's own page.
        pages.setdefault(f"api/{module}.md", page(module, []))
    index = ["# API reference", "",
             "Generated from the docstrings. Every public function is re-exported by `credax`; "
             "the pages follow the modules the code lives in.", ""]
    for uri, text in sorted(pages.items()):
        index.append(f"- [{text.splitlines()[0][2:]}]({uri.removeprefix('api/')})")
    pages["api/index.md"] = "\n".join(index) + "\n"
    return pages


def on_files(files, config):
    for uri, text in api_pages().items():
        files.append(File.generated(config, uri, content=text))
    for pattern in ASSETS:
        for path in sorted(ROOT.glob(pattern)):
            uri = path.relative_to(ROOT).as_posix()
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_nav(nav, config, files):
    # The automatic nav names a folder by its name: "Api" reads as "API reference", listed after
    # the guides. Pages and other sections keep mkdocs' order, so every new page still appears.
    for item in nav.items:
        if item.is_section and item.title == "Api":
            item.title = "API reference"
    sections = [i for i in nav.items if i.is_section]
    api = [i for i in sections if i.title == "API reference"]
    nav.items = [i for i in nav.items if i not in api] + api
    return nav

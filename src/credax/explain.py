"""``python -m credax.explain``: what each credit method gives each turn of your own rollouts.

::

    python -m credax.explain (ROLLOUTS | --example) [--format credax|verl]
                             [--methods grpo,tcpo,triage] [--out DIR] [--max-groups 50]
                             [--max-rollouts 24] [--max-rows 30] [--no-heatmaps] [--quiet]

reads a rollouts file or directory (:func:`credax.read_rollouts`; ``--example``: the small file
shipped with credax, :data:`EXAMPLE`), computes the per-turn credit of every rollout under each
method, and writes to ``DIR`` (created; it must not be a file):

* ``credit.json`` — for every rollout: its prompt id, source line, outcome, per-turn scores and
  roles, and for each method the list of per-turn advantages (all rollouts, all groups);
* ``group_NNN.png`` — one heatmap per prompt group (the first ``--max-groups``): rows are the
  group's rollouts (the first ``--max-rollouts``), columns their turns, one panel per method;
  colour = advantage (blue positive, red negative, symmetric around 0; hatched grey: the rollout
  has no such turn), each cell shows the turn's score and judge role;
* ``index.html`` — a static page tying them together: what each method computes, a summary
  table, then per group (titled by its prompt id as written in the file) its heatmap and a table
  of the numbers.

It also prints a table (one line per rollout, the first ``--max-rows``) and progress lines on
stderr while reading and drawing large files. Methods (all with credax's defaults, grouped by
prompt id):

=================  =================================================================
``grpo``           outcome advantage, the same on every turn of a rollout
``rloo``           leave-one-out outcome advantage, the same on every turn
``gpg``            :func:`credax.gpg_advantages`: centred outcome, batch-scaled, every turn
``tcpo``           :func:`credax.tcpo_advantages` of the per-turn scores
``triage``         :func:`credax.triage_advantages`: GRPO + λ·role constant (judge labels)
``mt_grpo``        :func:`credax.mt_grpo_advantages`: outcome + per-(prompt, turn) reward
``gigpo``          :func:`credax.gigpo_advantages`: episode + anchor-state step advantage
``hgpo``           :func:`credax.hgpo_advantages`: history-group step advantages
``g2po``           :func:`credax.g2po_advantages`: episode + state-graph edge advantage
``unbiased_turn``  :func:`credax.unbiased_turn_advantages`: return to go minus the other
                   rollouts' at the same turn
=================  =================================================================

Each method is the method registry's canonical call (``credax._registry``) on the rollouts as
a :class:`credax.testing.TurnBatch` (:func:`turn_batch`: the outcome as the row's reward, the
environment step rewards as the per-turn rewards, the anchors as the anchor states).

matplotlib is needed for the PNGs only (the ``explain`` extra of a clone:
``pip install '/path/to/credax[explain]'``); it is imported when the pictures are drawn, never by
``import credax``. Without it the command stops before writing anything (``--no-heatmaps``
writes ``credit.json`` and ``index.html`` without pictures).
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from importlib import resources

import jax.numpy as jnp
import numpy as np

from ._batch import TurnBatch
from ._readers import FORMATS, read_rollouts
from ._registry import EXPLAINED, Call
from ._rollouts import Rollout, RolloutBatch, Turn, pad_rollouts
from ._triage import Role


def turn_batch(b: RolloutBatch) -> TurnBatch:
    """The :class:`credax.testing.TurnBatch` of a rollout batch, the method registry's input: the
    outcome is the reward of a row, the environment step rewards the per-turn rewards."""
    return TurnBatch(scores=b.scores, turn_mask=b.turn_mask, group_ids=b.groups,
                     rewards=b.outcome, roles=b.roles, token_turn=b.token_turn, rows=b.row_mask,
                     anchors=b.anchor_ids, turn_rewards=b.rewards)


def _method(call: Call) -> Callable[[RolloutBatch], object]:
    def per_turn(b: RolloutBatch):
        out = call(turn_batch(b))  # the registry's call, with credax's defaults
        if call.level == "row":  # the same value on every turn of the rollout
            return jnp.where(b.turn_mask, out[:, None], jnp.zeros_like(b.scores))
        return out

    return per_turn


# The registry's methods that give per-turn (or per-rollout) credit: credax._registry.
METHODS: dict[str, Callable[[RolloutBatch], object]] = {
    m: _method(c) for m, c in EXPLAINED.items()}
_ROLE_LETTER = {int(r): r.name[0] for r in Role}

# One sentence per method for the page: what it compares a turn with, and what its sign means.
METHOD_NOTES: dict[str, str] = {m: c.note for m, c in EXPLAINED.items()}
COLOUR_NOTE = ("Colour = advantage: blue = the method pushes the turn's tokens up (positive), red = "
               "down (negative), white = 0; hatched grey = the rollout has no such turn (padding, "
               "no value). Each cell shows the turn's verifier score and judge role "
               "(D/E/N/R).")
# The example rollouts shipped with credax (what the rollouts guide runs).
EXAMPLE = str(resources.files("credax") / "data" / "agent_tasks.jsonl")


def prompt_label(key) -> str:
    """A prompt id as written in the rollouts file (JSON: ``"task"``, ``7``, ``[7, "x"]``)."""
    return json.dumps(_jsonable(key), ensure_ascii=False)


class Explained:
    """Per-turn credit of every rollout under each method (what :func:`explain` returns).

    Attributes:
      rollouts: the rollouts, in input order.
      methods: the method names, in the order asked.
      credit: ``{method: list over rollouts of float arrays [num_turns]}``.
      scores, roles: per rollout, ``float[num_turns]`` and ``int[num_turns]`` (``-1`` unlabeled).
      group_index: ``int[len(rollouts)]`` dense prompt group of each rollout.
      prompt_keys: the prompt id of each group.
    """

    def __init__(self, rollouts, methods, credit, scores, roles, group_index, prompt_keys):
        self.rollouts, self.methods, self.credit = rollouts, methods, credit
        self.scores, self.roles = scores, roles
        self.group_index, self.prompt_keys = group_index, prompt_keys

    def groups(self) -> list[np.ndarray]:
        """Row indices of each group, in group order."""
        order = np.argsort(self.group_index, kind="stable")
        bounds = np.searchsorted(self.group_index[order], np.arange(len(self.prompt_keys) + 1))
        return [order[bounds[g]:bounds[g + 1]] for g in range(len(self.prompt_keys))]


def _check_methods(methods: Sequence[str]) -> list[str]:
    methods = [m.strip() for m in methods if m.strip()]
    if not methods:
        raise ValueError(f"`methods` is empty; choose from {sorted(METHODS)}.")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"`methods`: unknown method {unknown[0]!r}; choose from {sorted(METHODS)}.")
    return list(dict.fromkeys(methods))


def explain(rollouts: Sequence[Rollout], methods: Sequence[str] = ("grpo", "tcpo", "triage"),
            ) -> Explained:
    """Per-turn credit of every rollout under each method (see the module docstring).

    Args:
      rollouts: the rollouts (e.g. from :func:`credax.read_rollouts`).
      methods: names from ``METHODS`` (the table in the module docstring).

    Returns:
      an :class:`Explained`.

    Raises:
      ValueError: an unknown method, or bad rollouts (see :func:`credax.pad_rollouts`).

    Examples:
      >>> import credax
      >>> from credax.explain import explain
      >>> rs = [credax.Rollout("p", [credax.Turn([1], 0.0), credax.Turn([2], 1.0, role="D")]),
      ...       credax.Rollout("p", [credax.Turn([3], 0.0, role="N")])]
      >>> ex = explain(rs, ["grpo", "triage"])
      >>> [[round(float(x), 3) for x in row] for row in ex.credit["triage"]]
      [[0.707, 0.907], [-0.727]]
    """
    methods = _check_methods(methods)
    # Credit needs no token ids: pad turn values only, so a large file stays small on the device.
    light = [Rollout(r.prompt_id, [Turn((), t.score, role=t.role, reward=t.reward, anchor=t.anchor)
                                   for t in r.turns], outcome=r.outcome) for r in rollouts]
    batch, layout = pad_rollouts(light)
    credit = {m: layout.per_turn(METHODS[m](batch)) for m in methods}
    return Explained(list(rollouts), methods, credit, layout.per_turn(batch.scores),
                     layout.per_turn(batch.roles), layout.group_index, layout.prompt_keys)


# ------------------------------------------------------------------------------------------
# Output: terminal table, heatmaps, HTML.
# ------------------------------------------------------------------------------------------


def _fmt_turns(values, width: int = 6, limit: int = 8) -> str:
    cells = [f"{v:+.2f}".rjust(width) for v in values[:limit]]
    return " ".join(cells) + (" …" if len(values) > limit else "")


def table(ex: Explained, max_rows: int = 30) -> str:
    """The terminal table: one line per rollout, per method its per-turn credit (8 turns at most)."""
    width = 7 * min(max(len(s) for s in ex.scores), 8) + 1
    head = f"{'group':>5} {'row':>5} {'turns':>5} {'outcome':>7}  " + "  ".join(
        f"{m:<{width}}" for m in ex.methods)
    lines = [head, "-" * len(head)]
    for g, rows in enumerate(ex.groups()):
        for i in rows:
            if len(lines) - 2 >= max_rows:
                lines.append(f"... {len(ex.rollouts) - max_rows} more rollouts in credit.json")
                return "\n".join(lines)
            r = ex.rollouts[i]
            outcome = r.outcome if r.outcome is not None else float(ex.scores[i][-1])
            cells = "  ".join(f"{_fmt_turns(ex.credit[m][i]):<{width}}" for m in ex.methods)
            lines.append(f"{g:>5} {i:>5} {len(r.turns):>5} {outcome:>7.3f}  {cells}".rstrip())
    return "\n".join(lines)


_PAD_FACE, _PAD_EDGE = "#bdbdbd", "#7a7a7a"


def heatmap(ex: Explained, rows: np.ndarray, path: str, title: str) -> None:
    """One PNG: the group's rollouts × turns, a panel per method, score and role in each cell."""
    heatmap_figure(ex, rows, title).savefig(path, dpi=110)


def heatmap_figure(ex: Explained, rows: np.ndarray, title: str):
    """The ``matplotlib.figure.Figure`` that :func:`heatmap` saves."""
    from matplotlib import colormaps
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
    from matplotlib.patches import Patch, Rectangle

    k = max(len(ex.scores[i]) for i in rows)
    n = len(rows)
    panels = len(ex.methods)
    ncols = min(panels, 2)  # two panels a row: readable side by side, never a strip
    nrows = -(-panels // ncols)
    fig = Figure(figsize=(max(3.0, 0.9 * k + 1.6) * ncols + 1.0, (0.55 * n + 1.3) * nrows + 0.4),
                 layout="constrained")
    grid_axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in grid_axes[panels:]:
        ax.set_visible(False)
    axes = grid_axes[:panels]
    stacks = {}
    for m in ex.methods:
        grid = np.full((n, k), np.nan)
        for j, i in enumerate(rows):
            grid[j, :len(ex.credit[m][i])] = ex.credit[m][i]
        stacks[m] = grid
    vmax = max(float(np.nanmax(np.abs(g))) if np.isfinite(g).any() else 0.0 for g in stacks.values())
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-max(vmax, 1e-6), vmax=max(vmax, 1e-6))
    cmap = colormaps["RdBu"].with_extremes(bad=_PAD_FACE)
    for ax, m in zip(axes, ex.methods, strict=True):
        grid = np.ma.masked_invalid(stacks[m])
        image = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
        for j, t in np.argwhere(np.isnan(stacks[m])):  # no such turn: hatched, never a white 0
            ax.add_patch(Rectangle((t - 0.5, j - 0.5), 1, 1, facecolor=_PAD_FACE,
                                   edgecolor=_PAD_EDGE, hatch="///", linewidth=0))
        for j, i in enumerate(rows):
            for t, (s, role) in enumerate(zip(ex.scores[i], ex.roles[i], strict=True)):
                label = f"{s:.2f}" + (f"\n{_ROLE_LETTER[int(role)]}" if role >= 0 else "")
                strong = abs(stacks[m][j, t]) > 0.6 * max(vmax, 1e-6)
                ax.text(t, j, label, ha="center", va="center", fontsize=7,
                        color="white" if strong else "black")
        ax.set_title(m)
        ax.set_xticks(range(k), [str(t) for t in range(k)])
        ax.set_yticks(range(n), [f"#{i}" for i in rows])
        ax.set_xlabel("turn")
    for ax in axes[::ncols]:
        ax.set_ylabel("rollout")
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="advantage (blue +, red −)")
    if any(np.isnan(g).any() for g in stacks.values()):
        fig.legend(handles=[Patch(facecolor=_PAD_FACE, edgecolor=_PAD_EDGE, hatch="///",
                                  label="no such turn")], loc="outside lower center", fontsize=7,
                   frameon=False)
    # parse_math=False: a prompt id such as "$x$" is text, not matplotlib mathtext.
    fig.suptitle(title, fontsize=9, parse_math=False)
    return fig


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>credax explain: {name}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
th {{ background: #f3f3f3; }} img {{ max-width: 100%; border: 1px solid #ddd; }}
.pos {{ color: #1f5fa8; }} .neg {{ color: #b2182b; }}
td.pad {{ background: repeating-linear-gradient(45deg, #bdbdbd 0 3px, #e0e0e0 3px 6px);
          color: #555; text-align: center; }}
</style></head><body>
<h1>Per-turn credit: {name}</h1>
<p>{n_rollouts} rollouts, {n_groups} prompt groups, {n_turns} turns. Numbers of every rollout
are in <a href="credit.json">credit.json</a>.</p>
<ul id="methods">
{notes}
</ul>
<p id="legend">{colour} In the tables, <span class="pos">blue</span> = positive,
<span class="neg">red</span> = negative, a hatched cell (–) = no such turn.</p>
<table id="summary"><tr><th>method</th><th>mean advantage</th><th>mean |advantage|</th>
<th>positive turns</th><th>negative turns</th></tr>
{summary}
</table>
{groups}
<script>
// For automated checks only (nothing is shown): how many images decoded.
window.addEventListener("load", function () {{
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) {{ return i.complete && i.naturalWidth > 0; }}).length;
  document.body.setAttribute("data-images-loaded", ok + "/" + imgs.length);
}});
</script>
</body></html>
"""


def _cell(v: float) -> str:
    return f'<td class="{"pos" if v > 0 else "neg" if v < 0 else ""}">{v:+.3f}</td>'


def html_page(ex: Explained, images: dict[int, str], name: str, max_rollouts: int = 24) -> str:
    """The static page: the methods, summary table, then per group its heatmap and numbers."""
    summary = []
    for m in ex.methods:
        flat = np.concatenate(ex.credit[m]) if ex.credit[m] else np.zeros(0)
        summary.append(f"<tr><th>{html.escape(m)}</th><td>{flat.mean():+.4f}</td>"
                       f"<td>{np.abs(flat).mean():.4f}</td><td>{int((flat > 0).sum())}</td>"
                       f"<td>{int((flat < 0).sum())}</td></tr>")
    sections = []
    for g, rows in enumerate(ex.groups()):
        if g not in images:
            continue
        rows = rows[:max_rollouts]
        key = html.escape(_clip(prompt_label(ex.prompt_keys[g]), 200))
        k = max(len(ex.scores[i]) for i in rows)
        body = [f'<h2 id="group-{g}">Group {g}: <code>{key}</code></h2>',
                f'<img src="{images[g]}" alt="credit heatmap of group {g}">',
                '<table class="credit"><tr><th>rollout</th><th>method</th>'
                + "".join(f"<th>turn {t}</th>" for t in range(k)) + "</tr>"]
        for i in rows:
            pad = '<td class="pad" title="no such turn">–</td>' * (k - len(ex.scores[i]))
            for m in ex.methods:
                body.append(f"<tr><th>#{i}</th><th>{html.escape(m)}</th>"
                            + "".join(_cell(float(v)) for v in ex.credit[m][i]) + pad + "</tr>")
        body.append("</table>")
        sections.append("\n".join(body))
    skipped = len(ex.prompt_keys) - len(images)
    if skipped:
        sections.append(f"<p>{skipped} more groups are in credit.json (raise --max-groups to draw "
                        "them).</p>")
    n_turns = sum(len(s) for s in ex.scores)
    notes = "\n".join(f"<li><b>{html.escape(m)}</b> — {html.escape(METHOD_NOTES[m])}</li>"
                      for m in ex.methods)
    return _PAGE.format(name=html.escape(name), n_rollouts=len(ex.rollouts),
                        n_groups=len(ex.prompt_keys), n_turns=n_turns, notes=notes,
                        colour=html.escape(COLOUR_NOTE), summary="\n".join(summary),
                        groups="\n".join(sections))


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _jsonable(key):
    if isinstance(key, tuple):
        return [_jsonable(k) for k in key]
    return key if isinstance(key, str | int | float) else repr(key)


def _check_outputs(out: str, max_groups: int, max_rollouts: int, heatmaps: bool) -> None:
    """Everything ``write_outputs`` needs, checked before anything is written."""
    for name, value, low in (("max_groups", max_groups, 0), ("max_rollouts", max_rollouts, 1)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise ValueError(f"`{name}` must be an int >= {low}; got {value!r}.")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"`out` must be a directory (it is created if missing); {out!r} is a file.")
    if heatmaps and max_groups > 0 and importlib.util.find_spec("matplotlib") is None:
        raise ImportError("the heatmaps need matplotlib, which is not installed: install the "
                          "`explain` extra (pip install '/path/to/credax[explain]'), or pass "
                          "--no-heatmaps (heatmaps=False) for credit.json and index.html alone.")


def write_outputs(ex: Explained, out: str, *, name: str, max_groups: int = 50,
                  max_rollouts: int = 24, heatmaps: bool = True,
                  log: Callable[[str], None] = lambda s: None) -> dict[int, str]:
    """Write credit.json, the heatmaps and index.html into ``out``; returns ``{group: png}``.

    Heatmaps (and the page's tables) show the first ``max_groups`` groups and, of each, the first
    ``max_rollouts`` rollouts; credit.json has everything. ``heatmaps=False`` draws none (no
    matplotlib needed).

    Raises (before anything is written):
      ValueError: ``out`` is a file, ``max_groups < 0`` or ``max_rollouts < 1``.
      ImportError: heatmaps are asked for and matplotlib is not installed.
    """
    _check_outputs(out, max_groups, max_rollouts, heatmaps)
    os.makedirs(out, exist_ok=True)
    records = []
    for i, r in enumerate(ex.rollouts):
        records.append({
            "row": i, "group": int(ex.group_index[i]), "prompt_id": _jsonable(r.prompt_id),
            "source": r.meta.get("source"),
            "outcome": r.outcome if r.outcome is not None else float(ex.scores[i][-1]),
            "scores": [float(s) for s in ex.scores[i]],
            "roles": [int(x) for x in ex.roles[i]],
            "credit": {m: [float(v) for v in ex.credit[m][i]] for m in ex.methods},
        })
    with open(os.path.join(out, "credit.json"), "w", encoding="utf-8") as fh:
        json.dump({"methods": ex.methods, "rollouts": records}, fh, ensure_ascii=False)
    images = {}
    groups = ex.groups()
    drawn = min(len(groups), max_groups) if heatmaps else 0
    started = time.monotonic()
    for g in range(drawn):
        png = f"group_{g:03d}.png"
        rows = groups[g][:max_rollouts]
        title = _clip(f"group {g}: {prompt_label(ex.prompt_keys[g])}", 100)
        if len(rows) < len(groups[g]):
            title += f" (first {len(rows)} of {len(groups[g])} rollouts)"
        heatmap(ex, rows, os.path.join(out, png), title)
        images[g] = png
        if drawn >= 10 and ((g + 1) % max(1, drawn // 10) == 0 or g + 1 == drawn):
            log(f"drawing heatmaps: {g + 1}/{drawn} groups ({time.monotonic() - started:.1f} s)")
    with open(os.path.join(out, "index.html"), "w", encoding="utf-8") as fh:
        fh.write(html_page(ex, images, name, max_rollouts))
    return images


def _at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m credax.explain",
                                     description="Per-turn credit of your rollouts under each "
                                                 "credax method: a table, heatmaps, an HTML page.")
    parser.add_argument("rollouts", nargs="?", help="a rollouts .jsonl file or a directory of them")
    parser.add_argument("--example", action="store_true",
                        help="use the example rollouts shipped with credax (credax.explain.EXAMPLE)")
    parser.add_argument("--format", default="credax", choices=FORMATS)
    parser.add_argument("--methods", default="grpo,tcpo,triage",
                        help=f"comma-separated, from {','.join(METHODS)} (default grpo,tcpo,triage)")
    parser.add_argument("--out", default="credax-explain", help="output directory")
    parser.add_argument("--max-groups", type=_at_least(0), default=50,
                        help="heatmaps drawn (first groups)")
    parser.add_argument("--max-rollouts", type=_at_least(1), default=24,
                        help="rollouts per group drawn in a heatmap (first ones)")
    parser.add_argument("--max-rows", type=_at_least(0), default=30,
                        help="rollouts in the terminal table")
    parser.add_argument("--no-heatmaps", action="store_true",
                        help="write credit.json and index.html only (no matplotlib needed)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if (args.rollouts is None) == (not args.example):
        parser.error("give a ROLLOUTS file or directory, or --example (not both)")
    source = EXAMPLE if args.example else args.rollouts

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    def progress(done: int, total: int) -> None:
        if total >= 4 << 20:  # say nothing about small files
            log(f"reading {source}: {100 * done / total:5.1f}% ({done >> 20}/{total >> 20} MiB)")

    try:
        methods = _check_methods(args.methods.split(","))
        # Before reading or writing anything: a missing matplotlib or a bad --out fails here.
        _check_outputs(args.out, args.max_groups, args.max_rollouts, not args.no_heatmaps)
        rollouts = read_rollouts(source, format=args.format, progress=progress)
        log(f"read {len(rollouts)} rollouts; computing {', '.join(methods)}")
        ex = explain(rollouts, methods)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        print(f"credax.explain: error: {err}", file=sys.stderr)
        return 2
    print(table(ex, args.max_rows))
    images = write_outputs(ex, args.out, name=os.path.basename(os.path.normpath(source)),
                           max_groups=args.max_groups, max_rollouts=args.max_rollouts,
                           heatmaps=not args.no_heatmaps, log=log)
    print(f"\nwrote {os.path.join(args.out, 'index.html')}, credit.json and {len(images)} heatmaps "
          f"({len(ex.prompt_keys)} groups)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m credax.explain``: what each credit method gives each turn of your own rollouts.

::

    python -m credax.explain (ROLLOUTS | --example) [--format credax|verl]
                             [--methods grpo,tcpo,triage] [--out DIR] [--max-groups 50]
                             [--max-rollouts 24] [--max-rows 30] [--no-heatmaps] [--quiet]

reads a rollouts file or directory (:func:`credax.read_rollouts`; ``--example``: the small file
shipped with credax, :data:`EXAMPLE`), computes the per-turn credit of every rollout under each
method, and writes to ``DIR`` (created; it must not be a file):

* ``credit.json`` — for every rollout: its prompt id, source line, outcome, per-turn scores and
  roles, and for each method the list of per-turn advantages (all rollouts, all groups; ``null``
  where the method was not computed, the reason under ``not_computed``);
* ``group_NNN.png`` — one heatmap per prompt group (the first ``--max-groups``): rows are the
  group's rollouts (the first ``--max-rollouts``), columns their turns, one panel per method
  (one above the other); colour = advantage on one scale for every group (blue positive, red
  negative, symmetric around 0; hatched grey: the rollout has no such turn), each cell shows the
  turn's score and judge role; a method not computed for the group is a grey panel with the
  reason;
* ``index.html`` — a static page tying them together: what each method computes, a summary
  table, then per group (titled by its prompt id as written in the file) its heatmap, a table
  of the numbers and TCPO's parts (best score before, retrospective and hindsight credit, their
  sum, the group's mean sum, the advantage after the z-score). Heatmaps are shown at their own
  size (a wide one scrolls in its box), so cell labels are 11 px at any window width.

**What a file does not hold is not computed.** A method is computed from the batch fields its
call-table entry reads; where no turn of a prompt group has what it reads (judge ``role``:
TRIAGE; ``anchor``: GiGPO, HGPO, G2PO; a nonzero step ``reward``: MT-GRPO, FACA, GiGPO, HGPO,
the turn baseline), it is not computed for that group: greyed on the page with the reason,
``n/a`` in the table, ``null`` in ``credit.json``, and one warning line per method on stderr —
never zeros or a copy of GRPO drawn as if they were credit.

It also prints a table (one line per rollout, the first ``--max-rows``) and progress lines on
stderr while reading and drawing large files. ``--out`` that is a file or lies below one is an
error (exit 2) before anything is read or printed. Methods (all with credax's defaults, grouped
by prompt id):

=================  =================================================================
``grpo``           outcome advantage, the same on every turn of a rollout
``rloo``           leave-one-out outcome advantage, the same on every turn
``gpg``            centred outcome, batch-scaled, every turn
``tcpo``           TCPO of the per-turn scores
``triage``         GRPO + λ·role constant (judge labels)
``mt_grpo``        outcome + per-(prompt, turn) reward
``faca``           outcome + the reaction to the turn (its step reward), per (prompt,
                   turn); none on the last turn
``gigpo``          episode + anchor-state step advantage
``hgpo``           history-group step advantages
``pgpo``           the change of an anchor-state potential
``g2po``           episode + state-graph edge advantage
``redistribute``   GRPO spread over the turns by |step reward|, mean-preserving
``unbiased_turn``  return to go minus the other rollouts' at the same turn
=================  =================================================================

Method ``m`` is ``credax.<m>_advantages`` (``grpo``: :func:`credax.grpo_advantages`), called
as the method registry's canonical call (``credax._registry``) on the rollouts as a
:class:`credax.testing.TurnBatch` (:func:`turn_batch`: the outcome as the row's reward, the
environment step rewards as the per-turn rewards, the anchors as the anchor states).
:data:`SHOWN` holds the methods with the sentence the page says about each; a test checks this
table against it.

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

import credax

from ._batch import TurnBatch
from ._readers import FORMATS, read_rollouts
from ._registry import CALLS, Call
from ._roles import Role
from ._rollouts import Rollout, RolloutBatch, Turn, pad_rollouts


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


# The methods the page shows, in its order: {short name m: one sentence for the page, what it
# compares a turn with and what its sign means}. Method m is the registry's entry of
# credax.<m>_advantages with credax's defaults; the module docstring's table lists the same names
# (tests/test_explain_page.py checks it).
SHOWN: dict[str, str] = {
    "grpo": (
        "GRPO: the rollout's outcome minus the mean outcome of its prompt group, divided by the "
        "group's standard deviation; the same value on every turn of the rollout."),
    "rloo": (
        "RLOO: the rollout's outcome minus the mean outcome of the other rollouts of its prompt "
        "(no division); the same value on every turn."),
    "gpg": (
        "GPG: the rollout's outcome minus its prompt group's mean, scaled by the batch's inverse "
        "share of nonzero outcomes; the same value on every turn."),
    "tcpo": (
        "TCPO: each turn's credit from its verifier score (progress over the best score before "
        "it, plus hindsight on turns that made none), z-scored over the same turn index of the "
        "prompt group's rollouts."),
    "triage": (
        "TRIAGE: the GRPO value of the rollout plus 0.2 × a constant of the turn's judge role "
        "(decisive +1, exploration +0.5, neutral -0.1, regression -0.5; unlabeled 0)."),
    "mt_grpo": (
        "MT-GRPO: the rollout's GRPO value plus the turn's reward z-scored over the same turn "
        "index of the prompt group's rollouts."),
    "faca": (
        "FACA: the rollout's GRPO value plus the user's reaction to the turn (here its step "
        "reward) z-scored over the same turn index of the prompt group's rollouts; the last turn "
        "has no next user turn, no reaction: the GRPO value alone."),
    "gigpo": (
        "GiGPO: the rollout's GRPO value plus a step value: the turn's discounted return z-scored"
        " over the turns of the prompt group that acted in the same anchor state."),
    "hgpo": (
        "HGPO: the turn's discounted return z-scored within the prompt group's turns that share "
        "its last k anchor states (k = 1, 2, 3), the levels averaged with weights (k + 1); a "
        "level where the turn's group is a singleton or has no spread abstains."),
    "pgpo": (
        "PGPO: the change of potential a turn caused, Φ(next state) - Φ(state), where Φ is the "
        "mean discounted return of the prompt group's turns in that anchor state (the last turn: "
        "its own return minus Φ)."),
    "g2po": (
        "G2PO: the rollout's normalised outcome plus the turn's edge in the prompt's graph of "
        "anchor states: the value of the state it reached, normalised among the turns that left "
        "the same state, plus its gain over the state it left (normalised)."),
    "redistribute": (
        "Redistribution (DRACO, VICT, IAPO, TASPO, FACTOR): the rollout's GRPO value spread over "
        "its turns by per-turn weights (here |step reward|), mean-preserving: the turns' mean is "
        "the GRPO value, each turn keeps its sign."),
    "unbiased_turn": (
        "Turn baseline (verl #7244): the turn's return to go (its reward and the later ones) "
        "minus the mean return to go of the prompt group's other rollouts that reached the same "
        "turn; unbiased under variable turn counts."),
}
EXPLAINED: dict[str, Call] = {m: CALLS[f"{m}_advantages"] for m in SHOWN}
# The methods: the registry's call of each, per turn (or per rollout, on every turn).
METHODS: dict[str, Callable[[RolloutBatch], object]] = {
    m: _method(c) for m, c in EXPLAINED.items()}
METHOD_NOTES: dict[str, str] = dict(SHOWN)
_ROLE_LETTER = {int(r): r.name[0] for r in Role}
COLOUR_NOTE = ("Colour = advantage, on one scale for every heatmap of this page: blue = the method "
               "pushes the turn's tokens up (positive), red = down (negative), white = 0; hatched "
               "grey = the rollout has no such turn (padding, no value); a plain grey panel = the "
               "method was not computed for that group (the reason is written in it). Each cell "
               "shows the turn's verifier score and judge role (D/E/N/R).")
# The example rollouts shipped with credax (what the rollouts guide runs).
EXAMPLE = str(resources.files("credax") / "data" / "agent_tasks.jsonl")

# The TurnBatch fields explain fills from optional keys of a file's turns: whether a turn has a
# value there, and the reason a method that reads the field is not computed where none has.
# Absent, they hold defaults (unlabeled roles, a state of its own per turn, reward 0) on which a
# method that reads them gives zeros or a copy of GRPO: such a result is never shown.
_FROM_FILE: dict[str, tuple[Callable[[Turn], bool], str]] = {
    "roles": (lambda t: t.role is not None, "no turn {where} has a judge `role`"),
    "anchors": (lambda t: t.anchor is not None,
                "no turn {where} has an `anchor`, the state it acted in"),
    "turn_rewards": (lambda t: t.reward != 0, "every step `reward` {where} is 0 or absent"),
}
# Fields explain fills with no values of the file (credit is per turn: it pads no tokens).
_NOT_FILLED = {"token_turn": "it reads token positions, and credax.explain pads no tokens"}
# TCPO's parts on the page, in the order of its formula: (label, path in the TCPO result).
_PARTS = (("best score before", ("retrospective", "best_prior")),
          ("retrospective (progress)", ("retrospective", "credit")),
          ("hindsight", ("hindsight", "credit")),
          ("sum before the z-score", ("credit",)))


def prompt_label(key) -> str:
    """A prompt id as written in the rollouts file (JSON: ``"task"``, ``7``, ``[7, "x"]``)."""
    return json.dumps(_jsonable(key), ensure_ascii=False)


class Explained:
    """Per-turn credit of every rollout under each method (what :func:`explain` returns).

    Attributes:
      rollouts: the rollouts, in input order.
      methods: the method names, in the order asked.
      credit: ``{method: list over rollouts of float arrays [num_turns]}``; all NaN for a
        rollout whose group the method could not be computed for (see :attr:`missing`).
      scores, roles: per rollout, ``float[num_turns]`` and ``int[num_turns]`` (``-1`` unlabeled).
      group_index: ``int[len(rollouts)]`` dense prompt group of each rollout.
      prompt_keys: the prompt id of each group.
      missing: ``{method: {group: reason}}``: the groups a method was not computed for, because
        what it reads is not in the file there (empty dicts: everything computed).
      not_computed: ``{method: reason}`` for every method with a missing group: why, and where.
      parts: ``{method: {part: list over rollouts of float arrays}}``: the intermediate values
        of a method that has them (TCPO: best score before, retrospective, hindsight, their sum).
    """

    def __init__(self, rollouts, methods, credit, scores, roles, group_index, prompt_keys, *,
                 missing=None, not_computed=None, parts=None):
        self.rollouts, self.methods, self.credit = rollouts, methods, credit
        self.scores, self.roles = scores, roles
        self.group_index, self.prompt_keys = group_index, prompt_keys
        self.missing = {m: {} for m in methods} if missing is None else missing
        self.not_computed = {} if not_computed is None else not_computed
        self.parts = {} if parts is None else parts

    def groups(self) -> list[np.ndarray]:
        """Row indices of each group, in group order."""
        order = np.argsort(self.group_index, kind="stable")
        bounds = np.searchsorted(self.group_index[order], np.arange(len(self.prompt_keys) + 1))
        return [order[bounds[g]:bounds[g + 1]] for g in range(len(self.prompt_keys))]

    def scale(self, rows: Sequence[int] | None = None) -> float:
        """The largest ``|advantage|`` computed (over ``rows``, default all): the colour scale."""
        rows = range(len(self.rollouts)) if rows is None else rows
        values = [np.abs(self.credit[m][i]) for m in self.methods for i in rows]
        finite = [v[np.isfinite(v)] for v in values]
        return max([float(v.max()) for v in finite if v.size] + [1e-6])


def _check_methods(methods: str | Sequence[str]) -> list[str]:
    if isinstance(methods, str):  # the CLI's form, "grpo,tcpo"
        methods = methods.split(",")
    methods = [m.strip() for m in methods if m.strip()]
    if not methods:
        raise ValueError(f"`methods` is empty; choose from {sorted(METHODS)}.")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"`methods`: unknown method {unknown[0]!r}; choose from {sorted(METHODS)}.")
    return list(dict.fromkeys(methods))


class _Reads:
    """A batch that records which of its fields a call reads (a field read as ``None`` is one
    the call handles without, such as TCPO's alternatives)."""

    def __init__(self, batch: TurnBatch):
        self._batch, self.fields = batch, set()

    def __getattr__(self, name):
        value = getattr(self._batch, name)
        if value is not None:
            self.fields.add(name)
        return value


def _present(rollouts: Sequence[Rollout], group_index: np.ndarray, n_groups: int
             ) -> dict[str, np.ndarray]:
    """``{field: bool[n_groups]}``: the groups where some turn has a value of that file key."""
    present = {f: np.zeros(n_groups, bool) for f in _FROM_FILE}
    for r, g in zip(rollouts, group_index, strict=True):
        for f, (has, _) in _FROM_FILE.items():
            if not present[f][g] and any(has(t) for t in r.turns):
                present[f][g] = True
    return present


def _where(n: int, total: int) -> str:
    return "in the file" if n == total else f"in {n} of the {total} prompt groups"


def _compute(call: Call, tb: TurnBatch, layout, present: dict[str, np.ndarray]):
    """One method on the batch: ``(per-turn credit, parts, {group: reason}, reason)``."""
    n_groups = len(layout.prompt_keys)
    every = dict.fromkeys(range(n_groups))
    lacking = [f for f in call.needs if getattr(tb, f) is None]
    if lacking or call.level not in ("row", "turn"):
        why = (f"it reads TurnBatch.{lacking[0]}, which credax.explain does not fill" if lacking
               else f"it gives {call.level}-level values, and the page shows per-turn credit")
        return None, {}, {g: why for g in every}, why
    reads = _Reads(tb)
    args, kwargs = call.args(reads)  # what the table's call reads is what its entry says
    full = getattr(credax, call.name)(*args, **kwargs)
    out = np.asarray(call.output(full))
    if call.level == "row":  # the same value on every turn of the rollout
        out = np.where(np.asarray(tb.turn_mask), out[:, None], 0.0)
    parts = {}
    if all(hasattr(full, p[0]) for _, p in _PARTS):
        for label, path in _PARTS:
            value = full
            for attr in path:
                value = getattr(value, attr)
            parts[label] = layout.per_turn(value)
    not_filled = sorted(set(_NOT_FILLED) & reads.fields)
    if not_filled:
        why = _NOT_FILLED[not_filled[0]]
        return None, {}, {g: why for g in every}, why
    fields = [f for f in _FROM_FILE if f in reads.fields]
    missing, lack = {}, {}
    for g in range(n_groups):
        gone = [f for f in fields if not present[f][g]]
        if gone:
            missing[g] = "; ".join(_FROM_FILE[f][1].format(where="in this group") for f in gone)
    for f in fields:
        n = int((~present[f]).sum())
        if n:
            lack[f] = _FROM_FILE[f][1].format(where=_where(n, n_groups))
    return layout.per_turn(out), parts, missing, "; ".join(lack.values()) or None


def explain(rollouts: Sequence[Rollout], methods: str | Sequence[str] = ("grpo", "tcpo", "triage"),
            ) -> Explained:
    """Per-turn credit of every rollout under each method (see the module docstring).

    A method whose input is not in the file (judge roles for TRIAGE, anchor states for GiGPO,
    HGPO and G2PO, step rewards for MT-GRPO, FACA, GiGPO, HGPO and the turn baseline: the batch
    fields its call-table entry reads) is not computed where no turn of a prompt group has that
    input: its credit there is NaN and :attr:`Explained.missing` says why, never a row of
    zeros or a copy of GRPO.

    Args:
      rollouts: the rollouts (e.g. from :func:`credax.read_rollouts`).
      methods: names from ``METHODS`` (the table in the module docstring), as a sequence or as
        the command line's comma-separated string (``"grpo,tcpo"``).

    Returns:
      an :class:`Explained`.

    Raises:
      ValueError: an unknown method, or bad rollouts (see :func:`credax.pad_rollouts`).

    Examples:
      >>> import credax
      >>> from credax.explain import explain
      >>> rs = [credax.Rollout("p", [credax.Turn([1], 0.0), credax.Turn([2], 1.0, role="D")]),
      ...       credax.Rollout("p", [credax.Turn([3], 0.0, role="N")])]
      >>> ex = explain(rs, ["grpo", "triage", "mt_grpo"])
      >>> [[round(float(x), 3) for x in row] for row in ex.credit["triage"]]
      [[0.707, 0.907], [-0.727]]
      >>> print(ex.not_computed["mt_grpo"])
      every step `reward` in the file is 0 or absent
      >>> ex.credit["mt_grpo"][1]
      array([nan], dtype=float32)
    """
    methods = _check_methods(methods)
    # Credit needs no token ids: pad turn values only, so a large file stays small on the device.
    light = [Rollout(r.prompt_id, [Turn((), t.score, role=t.role, reward=t.reward, anchor=t.anchor)
                                   for t in r.turns], outcome=r.outcome) for r in rollouts]
    batch, layout = pad_rollouts(light)
    tb = turn_batch(batch)
    present = _present(rollouts, layout.group_index, len(layout.prompt_keys))
    nan = [np.full(len(s), np.nan, np.float32) for s in layout.per_turn(batch.scores)]
    credit, missing, not_computed, parts = {}, {}, {}, {}
    for m in methods:
        values, parts_m, missing[m], why = _compute(EXPLAINED[m], tb, layout, present)
        values = nan if values is None else values
        credit[m] = [nan[i] if g in missing[m] else v
                     for i, (v, g) in enumerate(zip(values, layout.group_index, strict=True))]
        if why is not None:
            not_computed[m] = why
        if parts_m:
            parts[m] = parts_m
    return Explained(list(rollouts), methods, credit, layout.per_turn(batch.scores),
                     layout.per_turn(batch.roles), layout.group_index, layout.prompt_keys,
                     missing=missing, not_computed=not_computed, parts=parts)


# ------------------------------------------------------------------------------------------
# Output: terminal table, heatmaps, HTML.
# ------------------------------------------------------------------------------------------


def _fmt_turns(values, width: int = 6, limit: int = 8) -> str:
    if len(values) and np.isnan(values).all():  # not computed for this rollout's group
        return "n/a".rjust(width)
    cells = [f"{v:+.2f}".rjust(width) for v in values[:limit]]
    return " ".join(cells) + (" …" if len(values) > limit else "")


def table(ex: Explained, max_rows: int = 30) -> str:
    """The terminal table: one line per rollout, per method its per-turn credit (8 turns at most;
    ``n/a`` where the method was not computed for the rollout's group)."""
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


_PAD_FACE, _PAD_EDGE, _NA_FACE = "#bdbdbd", "#7a7a7a", "#e6e6e6"
# Cell labels: 8 pt at 100 dpi = 11.1 px, and the page shows a heatmap at its own size (a wide one
# scrolls in its box), so a label is 11 px on screen at any window width.
LABEL_PT, DPI = 8, 100
LABEL_PX = LABEL_PT * DPI / 72


def heatmap(ex: Explained, rows: np.ndarray, path: str, title: str, *,
            vmax: float | None = None) -> None:
    """One PNG: the group's rollouts × turns, a panel per method, score and role in each cell."""
    heatmap_figure(ex, rows, title, vmax=vmax).savefig(path, dpi=DPI)


def heatmap_figure(ex: Explained, rows: np.ndarray, title: str, *, vmax: float | None = None):
    """The ``matplotlib.figure.Figure`` that :func:`heatmap` saves: the panels one above the
    other, colour scale ``±vmax`` (default :meth:`Explained.scale` of all rollouts: the same for
    every group), a grey panel with the reason for a method not computed for this group."""
    import textwrap

    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
    from matplotlib.patches import Patch, Rectangle

    k = max(len(ex.scores[i]) for i in rows)
    n = len(rows)
    group = int(ex.group_index[rows[0]])
    width = max(4.2, 0.62 * k + 2.2)  # inches: a cell is ~62 px wide at DPI, room for "0.50"
    # A panel's height: its rows; a method not computed here gets a low grey strip.
    heights = [0.42 * n + 0.85 if group not in ex.missing[m] else 1.0 for m in ex.methods]
    fig = Figure(figsize=(width, sum(heights) + 0.5), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(ex.methods), 1, squeeze=False,
                        gridspec_kw={"height_ratios": heights}).ravel()
    vmax = max(ex.scale() if vmax is None else float(vmax), 1e-6)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-vmax, vmax=vmax)
    cmap = colormaps["RdBu"].with_extremes(bad=_PAD_FACE)
    padded = False
    for ax, m in zip(axes, ex.methods, strict=True):
        ax.set_xlim(-0.5, k - 0.5)
        ax.set_ylim(n - 0.5, -0.5)
        why = ex.missing[m].get(group)
        if why is not None:  # not computed here: grey, the reason, no numbers
            ax.set_facecolor(_NA_FACE)
            ax.set_xticks([])
            ax.set_yticks([])
            # ~6.5 px a character at LABEL_PT: wrapped to the panel (the figure less its margins)
            text = "\n".join(textwrap.wrap(why.replace("`", ""), int((width - 1.9) * DPI / 6.5)))
            ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center",
                    fontsize=LABEL_PT, color="#444444")
            ax.set_title(f"{m}: not computed", fontsize=9, color="#666666")
            continue
        grid = np.full((n, k), np.nan)
        for j, i in enumerate(rows):
            grid[j, :len(ex.credit[m][i])] = ex.credit[m][i]
        ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto")
        for j, t in np.argwhere(np.isnan(grid)):  # no such turn: hatched, never a white 0
            padded = True
            ax.add_patch(Rectangle((t - 0.5, j - 0.5), 1, 1, facecolor=_PAD_FACE,
                                   edgecolor=_PAD_EDGE, hatch="///", linewidth=0))
        for j, i in enumerate(rows):
            for t, (s, role) in enumerate(zip(ex.scores[i], ex.roles[i], strict=True)):
                label = f"{s:.2f}" + (f"\n{_ROLE_LETTER[int(role)]}" if role >= 0 else "")
                strong = abs(grid[j, t]) > 0.6 * vmax
                ax.text(t, j, label, ha="center", va="center", fontsize=LABEL_PT,
                        color="white" if strong else "black")
        ax.set_title(m, fontsize=9)
        ax.set_xticks(range(k), [str(t) for t in range(k)], fontsize=LABEL_PT)
        ax.set_yticks(range(n), [f"#{i}" for i in rows], fontsize=LABEL_PT)
        ax.set_ylabel("rollout", fontsize=LABEL_PT)
    axes[-1].set_xlabel("turn", fontsize=LABEL_PT)
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes), shrink=0.9,
                       aspect=40)
    bar.set_label(f"advantage (one scale for every group: ±{vmax:.2f})", fontsize=LABEL_PT)
    bar.ax.tick_params(labelsize=LABEL_PT)
    if padded:
        fig.legend(handles=[Patch(facecolor=_PAD_FACE, edgecolor=_PAD_EDGE, hatch="///",
                                  label="no such turn")], loc="outside lower center",
                   fontsize=LABEL_PT, frameon=False)
    # parse_math=False: a prompt id such as "$x$" is text, not matplotlib mathtext.
    fig.suptitle(title, fontsize=9, parse_math=False)
    return fig


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>credax explain: {name}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: sans-serif; margin: 1em; color: #222; max-width: 70em; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
th {{ background: #f3f3f3; }}
.wide, .heat {{ overflow-x: auto; max-width: 100%; }}
.heat img {{ max-width: none; border: 1px solid #ddd; }}  /* own size: labels stay readable */
.pos {{ color: #1f5fa8; }} .neg {{ color: #b2182b; }}
td.pad {{ background: repeating-linear-gradient(45deg, #bdbdbd 0 3px, #e0e0e0 3px 6px);
          color: #555; text-align: center; }}
.not-computed {{ color: #6b6b6b; background: #eeeeee; }}
li.not-computed, ul.not-computed {{ padding: 2px 6px 2px 1.6em; }}
tr.not-computed td {{ text-align: left; }}
tr.part th, tr.part td {{ color: #555; font-size: 0.95em; }}
</style></head><body>
<h1>Per-turn credit: {name}</h1>
<p>{n_rollouts} rollouts, {n_groups} prompt groups, {n_turns} turns. Numbers of every rollout
are in <a href="credit.json">credit.json</a>.</p>
<ul id="methods">
{notes}
</ul>
<p id="legend">{colour} {scale} In the tables, <span class="pos">blue</span> = positive,
<span class="neg">red</span> = negative, a hatched cell (–) = no such turn.</p>
<table id="summary"><tr><th>method</th><th>mean advantage</th><th>mean |advantage|</th>
<th>positive turns</th><th>negative turns</th></tr>
{summary}
</table>
{groups}
<script>
// For automated checks only (nothing is shown): how many images decoded, the smallest cell label
// as drawn on screen (the label's size in the PNG times the image's on-screen scale), the page's
// width against the window's.
window.addEventListener("load", function () {{
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) {{ return i.complete && i.naturalWidth > 0; }});
  var small = Infinity;
  ok.forEach(function (i) {{
    var px = parseFloat(i.getAttribute("data-label-px"));
    small = Math.min(small, px * i.getBoundingClientRect().width / i.naturalWidth);
  }});
  document.body.setAttribute("data-images-loaded", ok.length + "/" + imgs.length);
  document.body.setAttribute("data-min-label-px", isFinite(small) ? small.toFixed(2) : "none");
  document.body.setAttribute("data-page-width",
                             document.documentElement.scrollWidth + "/" + window.innerWidth);
}});
</script>
</body></html>
"""


def _why_html(why: str) -> str:
    """A reason as HTML: its `key` spans as code."""
    parts = html.escape(why).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _cell(v: float) -> str:
    return f'<td class="{"pos" if v > 0 else "neg" if v < 0 else ""}">{v:+.3f}</td>'


def _stats(flat: np.ndarray) -> str:
    mean = round(float(flat.mean()), 4) + 0.0  # a centred method's -1e-9 is +0.0000, not -0.0000
    return (f"<td>{mean:+.4f}</td><td>{np.abs(flat).mean():.4f}</td>"
            f"<td>{int((flat > 0).sum())}</td><td>{int((flat < 0).sum())}</td>")


def _summary_row(ex: Explained, m: str) -> str:
    name = html.escape(m)
    computed = [v for v in ex.credit[m] if not (len(v) and np.isnan(v).all())]
    if not computed:
        return (f'<tr class="not-computed" data-method="{name}"><th>{name}</th><td colspan="4">'
                f"not computed: {_why_html(ex.not_computed[m])}</td></tr>")
    # Computed in some groups only: the figures are theirs, and the row says so.
    if m in ex.not_computed:
        total = len(ex.prompt_keys)
        name += (f' <span class="partly">(computed in {total - len(ex.missing[m])} groups of '
                 f"{total})</span>")
    return f"<tr><th>{name}</th>{_stats(np.concatenate(computed))}</tr>"


def _parts_table(ex: Explained, m: str, g: int, rows: np.ndarray, k: int) -> str:
    """A method's intermediate values per rollout (TCPO: best score before, its two credits,
    their sum, the group's mean sum at each turn, the advantage after the z-score)."""
    parts = ex.parts[m]
    total = parts["sum before the z-score"]
    members = ex.groups()[g]
    # + 0.0: a mean of -1e-9 is shown as 0.000, not -0.000
    mean = [round(float(np.mean([total[j][t] for j in members if len(total[j]) > t])), 3) + 0.0
            for t in range(k)]
    body = [f'<h3>{html.escape(m)}: its parts</h3>',
            f'<p class="parts-note">{html.escape(m)} sums each turn\'s retrospective credit '
            "(progress over the best score before it; preservation and regression once solved) and "
            "its hindsight credit (on a turn that made no progress), then z-scores the sum over the "
            "same turn of the group's rollouts: a turn whose sum equals the group's mean there gets "
            "0 (a turn that went 0.00 → 0.50 gets 0 when every rollout of the group made the same "
            "progress at that turn).</p>",
            f'<div class="wide"><table class="parts" data-method="{html.escape(m)}"><tr>'
            "<th>rollout</th><th>value</th>" + "".join(f"<th>turn {t}</th>" for t in range(k))
            + "</tr>"]
    for i in rows:
        pad = '<td class="pad" title="no such turn">–</td>' * (k - len(ex.scores[i]))
        lines = [("score", ex.scores[i]), *((label, v[i]) for label, v in parts.items()),
                 ("group mean of the sum", mean[:len(ex.scores[i])]),
                 ("advantage (after the z-score)", ex.credit[m][i])]
        for label, values in lines:
            cells = "".join(f"<td>{float(v):.3f}</td>" if label != lines[-1][0] else _cell(float(v))
                            for v in values)
            body.append(f'<tr class="part"><th>#{i}</th><th>{html.escape(label)}</th>{cells}{pad}</tr>')
    body.append("</table></div>")
    return "\n".join(body)


def html_page(ex: Explained, images: dict[int, str], name: str, max_rollouts: int = 24, *,
              vmax: float | None = None) -> str:
    """The static page: the methods (a method not computed: greyed, with the reason), summary
    table, then per group its heatmap, numbers and TCPO's parts."""
    summary = [_summary_row(ex, m) for m in ex.methods]
    sections = []
    for g, rows in enumerate(ex.groups()):
        if g not in images:
            continue
        rows = rows[:max_rollouts]
        key = html.escape(_clip(prompt_label(ex.prompt_keys[g]), 200))
        k = max(len(ex.scores[i]) for i in rows)
        shown = [m for m in ex.methods if g not in ex.missing[m]]
        body = [f'<h2 id="group-{g}">Group {g}: <code>{key}</code></h2>']
        gone = [m for m in ex.methods if g in ex.missing[m]]
        if gone:
            body.append('<ul class="not-computed">' + "".join(
                f'<li data-method="{html.escape(m)}"><b>{html.escape(m)}</b> not computed for '
                f"this group: {_why_html(ex.missing[m][g])}.</li>" for m in gone) + "</ul>")
        body += [f'<div class="heat"><img src="{images[g]}" alt="credit heatmap of group {g}" '
                 f'data-label-px="{LABEL_PX:.2f}"></div>',
                 '<div class="wide"><table class="credit"><tr><th>rollout</th><th>method</th>'
                 + "".join(f"<th>turn {t}</th>" for t in range(k)) + "</tr>"]
        for i in rows:
            pad = '<td class="pad" title="no such turn">–</td>' * (k - len(ex.scores[i]))
            for m in shown:
                body.append(f"<tr><th>#{i}</th><th>{html.escape(m)}</th>"
                            + "".join(_cell(float(v)) for v in ex.credit[m][i]) + pad + "</tr>")
        body.append("</table></div>")
        body += [_parts_table(ex, m, g, rows, k) for m in shown if m in ex.parts]
        sections.append("\n".join(body))
    skipped = len(ex.prompt_keys) - len(images)
    if skipped:
        sections.append(f"<p>{skipped} more groups are in credit.json (raise --max-groups to draw "
                        "them).</p>")
    n_turns = sum(len(s) for s in ex.scores)
    notes = []
    for m in ex.methods:
        note = f"<b>{html.escape(m)}</b> — {html.escape(METHOD_NOTES[m])}"
        if m in ex.not_computed:
            notes.append(f'<li class="not-computed" data-method="{html.escape(m)}">{note} '
                         f'<span class="why">Not computed: {_why_html(ex.not_computed[m])}.</span></li>')
        else:
            notes.append(f"<li>{note}</li>")
    vmax = ex.scale() if vmax is None else vmax
    scale = (f"The colour bar runs from −{vmax:.2f} to +{vmax:.2f} on every heatmap (the largest "
             "|advantage| drawn)." if images else "")
    return _PAGE.format(name=html.escape(name), n_rollouts=len(ex.rollouts),
                        n_groups=len(ex.prompt_keys), n_turns=n_turns, notes="\n".join(notes),
                        colour=html.escape(COLOUR_NOTE), scale=scale, summary="\n".join(summary),
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
    # The nearest existing folder above `out`: a file there (`report.html/out`) cannot hold it.
    above = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise ValueError(f"`out`: {out!r} cannot be created, {above!r} above it is a file, not a "
                         "directory.")
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
      ValueError: ``out`` is a file or below one, ``max_groups < 0`` or ``max_rollouts < 1``.
      ImportError: heatmaps are asked for and matplotlib is not installed.
    """
    _check_outputs(out, max_groups, max_rollouts, heatmaps)
    os.makedirs(out, exist_ok=True)
    records = []
    for i, r in enumerate(ex.rollouts):
        g = int(ex.group_index[i])
        records.append({
            "row": i, "group": g, "prompt_id": _jsonable(r.prompt_id),
            "source": r.meta.get("source"),
            "outcome": r.outcome if r.outcome is not None else float(ex.scores[i][-1]),
            "scores": [float(s) for s in ex.scores[i]],
            "roles": [int(x) for x in ex.roles[i]],
            # null: not computed for this rollout's group (the reason in "not_computed")
            "credit": {m: None if g in ex.missing[m] else [float(v) for v in ex.credit[m][i]]
                       for m in ex.methods},
            "not_computed": {m: ex.missing[m][g] for m in ex.methods if g in ex.missing[m]},
        })
    with open(os.path.join(out, "credit.json"), "w", encoding="utf-8") as fh:
        json.dump({"methods": ex.methods, "not_computed": ex.not_computed, "rollouts": records},
                  fh, ensure_ascii=False)
    images = {}
    groups = ex.groups()
    drawn = min(len(groups), max_groups) if heatmaps else 0
    # One colour scale for every heatmap: the largest |advantage| of the rollouts drawn.
    vmax = ex.scale([i for g in range(drawn) for i in groups[g][:max_rollouts]])
    started = time.monotonic()
    for g in range(drawn):
        png = f"group_{g:03d}.png"
        rows = groups[g][:max_rollouts]
        title = _clip(f"group {g}: {prompt_label(ex.prompt_keys[g])}", 100)
        if len(rows) < len(groups[g]):
            title += f" (first {len(rows)} of {len(groups[g])} rollouts)"
        heatmap(ex, rows, os.path.join(out, png), title, vmax=vmax)
        images[g] = png
        if drawn >= 10 and ((g + 1) % max(1, drawn // 10) == 0 or g + 1 == drawn):
            log(f"drawing heatmaps: {g + 1}/{drawn} groups ({time.monotonic() - started:.1f} s)")
    with open(os.path.join(out, "index.html"), "w", encoding="utf-8") as fh:
        fh.write(html_page(ex, images, name, max_rollouts, vmax=vmax))
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
    parser.add_argument("--format", default="credax", choices=FORMATS,
                        help="the file's schema (default: %(default)s)")
    parser.add_argument("--methods", default="grpo,tcpo,triage",
                        help=f"comma-separated, from {','.join(METHODS)} (default: %(default)s)")
    parser.add_argument("--out", default="credax-explain",
                        help="output directory, created if missing (default: %(default)s)")
    parser.add_argument("--max-groups", type=_at_least(0), default=50,
                        help="heatmaps drawn (first groups; default: %(default)s)")
    parser.add_argument("--max-rollouts", type=_at_least(1), default=24,
                        help="rollouts per group drawn in a heatmap (first ones; default: %(default)s)")
    parser.add_argument("--max-rows", type=_at_least(0), default=30,
                        help="rollouts in the terminal table (default: %(default)s)")
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
        methods = _check_methods(args.methods)
        # Before reading or writing anything: a missing matplotlib or a bad --out fails here.
        _check_outputs(args.out, args.max_groups, args.max_rollouts, not args.no_heatmaps)
        rollouts = read_rollouts(source, format=args.format, progress=progress)
        log(f"read {len(rollouts)} rollouts; computing {', '.join(methods)}")
        ex = explain(rollouts, methods)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        print(f"credax.explain: error: {err}", file=sys.stderr)
        return 2
    for m, why in ex.not_computed.items():  # said always, --quiet or not: it is not progress
        print(f"credax.explain: warning: {m} not computed ({why}): greyed out on the page, "
              "null in credit.json.", file=sys.stderr)
    print(table(ex, args.max_rows))
    images = write_outputs(ex, args.out, name=os.path.basename(os.path.normpath(source)),
                           max_groups=args.max_groups, max_rollouts=args.max_rollouts,
                           heatmaps=not args.no_heatmaps, log=log)
    print(f"\nwrote {os.path.join(args.out, 'index.html')}, credit.json and {len(images)} heatmaps "
          f"({len(ex.prompt_keys)} groups)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The turn batch: one padded multi-turn batch, the input of every entry of the method registry.

:class:`TurnBatch` lives in the package core because production code builds it: ``credax.explain``,
``credax.verl`` and ``credax.bench`` turn their inputs into one and call the method registry
(``credax._registry``) on it. ``credax.testing`` re-exports it (``credax.testing.TurnBatch``, the
batch its checkers draw and report) together with :func:`describe_batch`.

The batch with every field set (``example_batch``) and the one hyperparameter schedule
(``SCHEDULE``) that the bench sweep and the tests read live with the sweep, ``credax.bench.sweep``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

# --------------------------------------------------------------------------------------------
# The batch.
# --------------------------------------------------------------------------------------------


class TurnBatch(NamedTuple):
    """A padded batch of multi-turn trajectories: what the checkers of ``credax.testing`` draw and
    what the bridges (explain, verl, the bench, the lab) build for the method registry.

    Fields are arrays (NumPy, JAX, or torch in ``credax.verl``; the checkers hand ``jax.Array``
    versions to the function under test).
    The first three are the canonical arguments ``fn(scores, turn_mask, group_ids)``.

    Attributes:
      scores: ``float[B, K]`` per-turn scores; masked entries hold padding garbage (NaN, inf, ...).
      turn_mask: ``bool[B, K]`` real turns, a prefix of each row.
      group_ids: ``int32[B]`` prompt ids: arbitrary (negative, sparse, unsorted) integers.
      rewards: ``float[B]`` one outcome reward per row; constant within a constant group.
      roles: ``int32[B, K]`` role codes in ``[-1, 4)`` (``-1`` = unlabeled), also usable as small
        categorical per-turn labels (e.g. GiGPO anchor ids); arbitrary codes at masked turns.
      token_turn: ``int32[B, T]`` turn of each token, ``-1`` for prompt, observation and padding
        tokens (``credax.testing.token_layouts`` draws them).

    The optional fields below default to ``None``; ``credax.testing.turn_batches`` leaves them so.
    An entry of the method registry (``credax._registry``) that reads one says so and raises a
    ``ValueError`` naming it when it is ``None``; the call table of ``credax.testing.calls``
    stands the two with a default in for themselves (``anchors``: ``roles``, ``turn_rewards``:
    ``scores``), the registry never does.

    Attributes:
      rows: ``bool[B]`` real rows; ``None``: the rows with a real turn (see :attr:`row_mask`).
      anchors: ``int32[B, K]`` anchor-state ids (GiGPO, HGPO, G2PO).
      turn_rewards: ``float[B, K]`` per-turn environment rewards (MT-GRPO, GiGPO, HGPO, the turn
        baseline; FACA reads them as the reaction to each turn).
      alt_scores, alt_mask: ``float[B, K, M]``, ``bool[B, K, M]`` scores of alternative actions
        at each turn (TCPO's counterfactual credit).
      logp: ``float[B, T]`` token log-probs of the policy (the old policy's are ``0.9 * logp``
        where a call needs both); also token rewards where a token-level estimator needs them.
      values: ``float[B, T]`` value estimates per token.
      logits: ``float[B, T, V]``; tokens: ``int32[B, T]`` ids below ``V``; hidden:
        ``float[B, T, D]``; unembedding: ``float[D, V]`` (the log-prob functions).
    """

    scores: Any
    turn_mask: Any
    group_ids: Any
    rewards: Any
    roles: Any
    token_turn: Any
    rows: Any = None
    anchors: Any = None
    turn_rewards: Any = None
    alt_scores: Any = None
    alt_mask: Any = None
    logp: Any = None
    values: Any = None
    logits: Any = None
    tokens: Any = None
    hidden: Any = None
    unembedding: Any = None

    @property
    def row_mask(self):
        """``bool[B]``: ``rows``, or (``None``) the rows with at least one real turn (the mask of
        per-trajectory values)."""
        return self.turn_mask.any(axis=-1) if self.rows is None else self.rows

    def map(self, f) -> TurnBatch:
        """``f`` applied to every field that is set (``None`` fields stay ``None``)."""
        return TurnBatch(*(None if x is None else f(x) for x in self))

    def __repr__(self) -> str:
        return describe_batch(self)


def fmt(x) -> str:
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    return f"{x:.6g}"


def _vec(values) -> str:
    return "[" + " ".join(fmt(v) if isinstance(v, float) else str(v)
                          for v in np.asarray(values).tolist()) + "]"


def describe_batch(batch: TurnBatch, *, fields: Sequence[str] | None = None) -> str:
    """A compact, row-per-line rendering of a batch (what counterexamples print).

    Args:
      batch: a :class:`TurnBatch` (NumPy or JAX arrays).
      fields: which fields to show besides ``group_ids`` and ``turn_mask`` (default: all).

    Returns:
      A multi-line string; ``turn_mask`` is written as a string of 1 (real) and 0 (padding).

    Examples:
      >>> import numpy as np
      >>> b = TurnBatch(np.array([[0.35, np.nan]], np.float32), np.array([[True, False]]),
      ...               np.array([-7], np.int32), np.array([1.0], np.float32),
      ...               np.array([[-1, 2]], np.int32), np.array([[-1, 0, 0, -1]], np.int32))
      >>> print(describe_batch(b, fields=("scores", "rewards")))
      TurnBatch B=1 K=2 T=4
        row  group_id  turn_mask  scores     rewards
          0        -7  10         [0.35 nan] 1
    """
    b = batch.map(np.asarray)
    fields = ("scores", "rewards", "roles", "token_turn") if fields is None else tuple(fields)
    B, K = b.turn_mask.shape
    cols: dict[str, list[str]] = {}
    for name in fields:
        arr = getattr(b, name)
        if arr.ndim == 1:
            cols[name] = [fmt(v) if np.issubdtype(arr.dtype, np.floating) else str(v) for v in arr]
        else:
            cols[name] = [_vec(row.astype(np.float64) if np.issubdtype(arr.dtype, np.floating)
                               else row) for row in arr]
    # Lists, not star-arguments: a batch of B = 0 rows has no cells.
    widths = {name: max([len(name), *(len(c) for c in col)]) for name, col in cols.items()}
    gw = max([8, *(len(str(int(g))) for g in b.group_ids)])
    head = f"  row  {'group_id'.rjust(gw)}  {'turn_mask'.ljust(max(9, K))}  " + " ".join(
        name.ljust(widths[name]) for name in cols)
    lines = [f"TurnBatch B={B} K={K} T={b.token_turn.shape[-1]}", head.rstrip()]
    for i in range(B):
        m = "".join("1" if v else "0" for v in b.turn_mask[i])
        line = f"  {i:>3}  {int(b.group_ids[i]):>{gw}}  {m.ljust(max(9, K))}  " + " ".join(
            cols[name][i].ljust(widths[name]) for name in cols)
        lines.append(line.rstrip())
    return "\n".join(lines)

"""The turn batch: one padded multi-turn batch, the input of every entry of the method registry.

:class:`TurnBatch` lives in the package core because production code builds it: ``credax.explain``,
``credax.verl`` and ``credax.bench`` turn their inputs into one and call the method registry
(``credax._registry``) on it. ``credax.testing`` re-exports it (``credax.testing.TurnBatch``, the
batch its checkers draw and report) together with :func:`describe_batch`.

It also holds the one hyperparameter schedule (:data:`SCHEDULE`, :func:`scheduled`): three valid
values of every numeric hyperparameter, which the bench sweep (``credax.bench.cases``) and the
compile-once test (tests/test_dogfood.py) both read, so an entry of the registry needs no values
of its own.
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


def example_batch(batch: int = 6, turns: int = 4, tokens: int = 8, *, seed: int = 0,
                  num_groups: int | None = None, alternatives: int = 3, vocab: int = 7,
                  hidden: int = 5) -> TurnBatch:
    """A random :class:`TurnBatch` with every field set (NumPy), for calls of every entry.

    Rows have 1 to ``turns`` real turns; tokens run over a row's turns in order, every third
    token off the turns (``-1``, an observation token); ``num_groups`` prompt ids (default
    ``batch // 3``); alternatives, log-probs, values, logits, tokens and hidden states random.

    Examples:
      >>> b = example_batch(6, 4, 8)
      >>> b.scores.shape, b.alt_scores.shape, b.logits.shape, b.unembedding.shape
      ((6, 4), (6, 4, 3), (6, 8, 7), (5, 7))
    """
    rng = np.random.default_rng(seed)
    B, K, T = batch, turns, tokens
    n_turns = rng.integers(1, K + 1, B)
    turn_mask = np.arange(K)[None] < n_turns[:, None]
    position = np.arange(T)[None] * n_turns[:, None] // T  # tokens spread over the row's turns
    token_turn = np.where(np.arange(T)[None] % 3 == 2, -1, position).astype(np.int32)
    groups = max(1, B // 3) if num_groups is None else num_groups
    f32 = np.float32
    return TurnBatch(
        scores=rng.random((B, K)).astype(f32),
        turn_mask=turn_mask,
        group_ids=rng.integers(0, groups, B).astype(np.int32),
        rewards=rng.random(B).astype(f32),
        roles=rng.integers(-1, 4, (B, K)).astype(np.int32),
        token_turn=token_turn,
        anchors=rng.integers(0, 3, (B, K)).astype(np.int32),
        turn_rewards=rng.random((B, K)).astype(f32),
        alt_scores=rng.random((B, K, alternatives)).astype(f32),
        alt_mask=rng.random((B, K, alternatives)) < 0.8,
        logp=-rng.random((B, T)).astype(f32),
        values=rng.normal(size=(B, T)).astype(f32),
        logits=rng.normal(size=(B, T, vocab)).astype(f32),
        tokens=rng.integers(0, vocab, (B, T)).astype(np.int32),
        hidden=rng.normal(size=(B, T, hidden)).astype(f32),
        unembedding=(rng.normal(size=(hidden, vocab)) / np.sqrt(hidden)).astype(f32),
    )


# --------------------------------------------------------------------------------------------
# The hyperparameter schedule: three valid values of every numeric hyperparameter.
# --------------------------------------------------------------------------------------------

# Read by the bench sweep (``credax.bench.cases``: values 0 and 1, a traced option that must not
# recompile) and by the compile-once test (tests/test_dogfood.py: all three, one trace). Keyed by
# the hyperparameter's name in any public signature; a float hyperparameter not named here gets
# :func:`default_schedule` of its default, so a new estimator needs no line here unless halving
# its default would leave its valid range.
SCHEDULE: dict[str, tuple] = {
    "gamma": (0.9, 0.5, 1.0), "lam": (0.95, 0.5, 1.0), "token_gamma": (1.0, 0.9, 0.5),
    "token_lam": (1.0, 0.8, 0.5), "omega": (1.0, 0.5, 2.0), "alpha": (0.05, 0.5, 1.0),
    "turn_coef": (1.0, 0.5, 2.0), "success_threshold": (1.0, 0.9, 0.5),
    "progress_weight": (1.0, 0.5, 2.0), "preservation_weight": (0.1, 0.0, 0.5),
    "regression_weight": (1.0, 0.5, 2.0), "hindsight_weight": (1.0, 0.5, 0.25),
    "counterfactual_weight": (1.0, 2.0, 0.5), "initial": (0.0, 0.1, 0.5),
    "invalid_penalty": (0.1, 0.2, 0.5), "success_reward": (10.0, 5.0, 1.0),
    "step_discount": (1.0, 0.9, 0.5), "f_norm": (1.0, 0.5, 2.0), "clip": (0.5, 0.2, 1.0),
    "clamp": (20.0, 10.0, 5.0), "temperature": (1.0, 0.7, 1.3), "reaction_coef": (1.0, 0.5, 2.0),
    "constants": ((1.0, 0.5, -0.1, -0.5), (2.0, 1.0, 0.0, -1.0), (0.5, 0.25, -0.05, -0.25)),
}
SCALED = {"weights": (1.0, 0.5, 2.0)}  # array hyperparameters (GDPO's [C], redistribution's [B, K])
EPS = (1e-6, 1e-4, 0.0)  # a Normalization's eps (a leaf: same static fields, same program)
# LossOptions' (clip_low, clip_high, dual_clip): leaves of the options value, same program.
CLIPS = ((0.2, 0.2, 3.0), (0.1, 0.3, 2.0), (0.3, 0.28, 2.5))


def default_schedule(default: Any) -> tuple | None:
    """Three values of a hyperparameter that is not in :data:`SCHEDULE`, from its default: the
    default, half and a quarter of it (0.0: 0.0, 0.1, 0.2); ``None`` for a non-float default
    (ints are static options: history, before, num_roles)."""
    if type(default) is float:
        return (default, default / 2, default / 4) if default else (0.0, 0.1, 0.2)
    if type(default) is tuple and default and all(type(v) is float for v in default):
        return tuple(tuple(v * f for v in default) for f in (1.0, 0.5, 0.25))
    return None


def scheduled_options(signature, args: tuple, kwargs: dict, i: int) -> dict:
    """The keywords of :func:`scheduled`'s call that the schedule set (those the call does not
    give positionally): ``fn(*args, **{**kwargs, **scheduled_options(...)})`` is the ``i``-th
    call of the schedule with the call's own positional arguments (what the bench times)."""
    bound = signature.bind(*args, **kwargs)
    positional = list(signature.parameters)[:len(args)]
    new_args, new_kwargs = scheduled(signature, args, kwargs, i)
    new = signature.bind(*new_args, **new_kwargs).arguments
    return {name: value for name, value in new.items()
            if name not in positional and value is not bound.arguments.get(name)}


def scheduled(signature, args: tuple, kwargs: dict, i: int) -> tuple[tuple, dict]:
    """The call ``(args, kwargs)`` of a function of ``signature`` with the ``i``-th value
    (``0 <= i < 3``) of every numeric hyperparameter it has: :data:`SCHEDULE` (or
    :func:`default_schedule`; an array the call gives, e.g. a per-row ``lam``, stays),
    :data:`SCALED` arrays, a ``normalization``'s ``eps``
    (:data:`EPS`) and a loss ``options``' clips (:data:`CLIPS`)."""
    from ._loss_options import LossOptions
    from ._normalization import Normalization

    bound = signature.bind(*args, **kwargs)
    for name, p in signature.parameters.items():
        values = SCHEDULE.get(name) or default_schedule(p.default)
        given = bound.arguments.get(name)
        if values is not None and getattr(given, "ndim", 0) == 0:  # an array given stays (traced)
            bound.arguments[name] = values[i]
        elif name in SCALED:
            bound.arguments[name] = np.asarray(bound.arguments[name], np.float32) * SCALED[name][i]
        elif name == "normalization":
            base = bound.arguments.get(name) or Normalization()
            bound.arguments[name] = base.replace(eps=EPS[i])
        elif name == "options":
            low, high, dual = CLIPS[i]
            base = bound.arguments.get(name) or LossOptions()
            bound.arguments[name] = base.replace(clip_low=low, clip_high=high, dual_clip=dual)
    return bound.args, bound.kwargs

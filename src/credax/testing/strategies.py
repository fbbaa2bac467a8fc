"""Hypothesis strategies for credit code: ragged turn batches, token layouts, padded variants."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st

from .batch import (
    DEFAULT_SHAPES,
    INT32,
    PAD_FINITE,
    PAD_NONFINITE,
    PAD_ROWS,
    PAD_TURNS,
    TurnBatch,
)

# --------------------------------------------------------------------------------------------
# Strategies.
# --------------------------------------------------------------------------------------------


def _normalize_shapes(shapes) -> tuple[tuple[int, int, int], ...]:
    out = []
    for shape in shapes:
        shape = tuple(int(s) for s in shape)
        if len(shape) == 2:
            shape = (*shape, 3 * shape[1] + 2)
        if len(shape) != 3 or shape[0] < 1 or shape[1] < 1 or shape[2] < shape[1]:
            raise ValueError(
                "`shapes` entries must be (B, K) or (B, K, T) with B >= 1, K >= 1 and T >= K; "
                f"got {shape}."
            )
        out.append(shape)
    if not out:
        raise ValueError("`shapes` must name at least one (B, K) shape.")
    return tuple(out)


def value_strategy(score_range) -> st.SearchStrategy[float]:
    lo, hi = (float(v) for v in score_range)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"`score_range` must be finite (lo, hi) with lo < hi; got {score_range}.")
    # Non-dyadic values (0.35, 1/3, 0.95 are not exact in binary) and ties expose rounding and
    # exact-comparison bugs that dyadic test data like 0.5 hides.
    specials = []
    for f in (0.0, 1.0, 0.35, 1 / 3, 0.95, 0.5):
        v = float(np.float32(lo + (hi - lo) * f))
        if lo <= v <= hi and v not in specials:
            specials.append(v)
    return st.one_of(
        st.sampled_from(specials),
        st.floats(lo, hi, width=32, allow_nan=False, allow_infinity=False),
    )


ID_VALUES = st.one_of(
    st.sampled_from([-1, 0, INT32.min, INT32.max]),
    st.integers(int(INT32.min), int(INT32.max)),
)


# Secondary fields (roles, token layout, padding garbage) come from one drawn seed each rather than
# one draw per entry: generation and shrinking cost scale with the number of draws, and these
# fields rarely decide a failure. Seed 0 is the canonical value a shrunk counterexample shows.
_SEED = st.integers(0, 2**32 - 1)


def _rng(seed: int):
    return np.random.default_rng(seed) if seed else None


def _layout(turns, num_tokens: int, min_tokens_per_turn: int, seed: int) -> np.ndarray:
    """``turns[i]``: the valid turn indices of row ``i``, in order (the labels its tokens get)."""
    rng = _rng(seed)
    out = np.full((len(turns), num_tokens), -1, np.int32)
    for i, valid in enumerate(turns):
        n = len(valid)
        slack = num_tokens - int(n) * min_tokens_per_turn

        def take(slack):
            return 0 if rng is None or slack <= 0 else int(rng.integers(0, min(2, slack) + 1))

        t = take(slack)  # prompt tokens
        slack -= t
        for k in valid:
            extra = take(slack)
            slack -= extra
            out[i, t:t + min_tokens_per_turn + extra] = k
            t += min_tokens_per_turn + extra
            obs = take(slack)  # tool / environment observation tokens
            slack -= obs
            t += obs
    return out


def _fill(shape, pool, seed: int, dtype) -> np.ndarray:
    """Padding garbage: ``pool[0]`` everywhere for seed 0, else values from ``pool`` at random."""
    rng = _rng(seed)
    values = (np.full(shape, pool[0]) if rng is None
              else np.asarray(pool, np.float64)[rng.integers(0, len(pool), size=shape)])
    with np.errstate(over="ignore"):  # 1e30 overflows float16 to inf: still padding
        return values.astype(dtype)


def _roles(shape, seed: int) -> np.ndarray:
    rng = _rng(seed)
    if rng is None:
        return np.full(shape, -1, np.int32)
    return rng.integers(-1, 4, size=shape).astype(np.int32)


def token_layouts(
    turn_mask, *, num_tokens: int | None = None, min_tokens_per_turn: int = 1
) -> st.SearchStrategy[np.ndarray]:
    """Strategy for ``token_turn: int32[B, T]`` maps consistent with a concrete ``turn_mask``.

    Each row is: up to 2 prompt tokens (``-1``), then for each valid turn ``k`` in order
    ``min_tokens_per_turn`` to ``min_tokens_per_turn + 2`` tokens labelled ``k``, each followed by
    up to 2 observation tokens (``-1``: tool or environment output that earns no credit), then
    padding (``-1``). Padded turns own no token. The layout comes from one drawn seed and shrinks
    to the tightest one (no prompt, no observation, ``min_tokens_per_turn`` tokens per turn).

    Args:
      turn_mask: ``bool[B, K]`` concrete prefix mask.
      num_tokens: ``T``; default ``3 K + 2``.
      min_tokens_per_turn: tokens each valid turn owns at least (0 allows turns without tokens).

    Returns:
      A strategy of ``int32[B, T]`` NumPy arrays.

    Raises:
      ValueError: a row has more valid turns than ``T`` can hold.

    Examples:
      >>> import numpy as np
      >>> from hypothesis import find
      >>> mask = np.array([[True, True, False]])
      >>> find(token_layouts(mask, num_tokens=6), lambda tt: True)   # the simplest layout
      array([[ 0,  1, -1, -1, -1, -1]], dtype=int32)
      >>> tt = find(token_layouts(mask, num_tokens=6), lambda tt: tt[0, 0] == -1)  # a prompt token
      >>> sorted(set(tt[0].tolist()))
      [-1, 0, 1]
    """
    mask = np.asarray(turn_mask, dtype=bool)
    if mask.ndim != 2:
        raise ValueError(f"`turn_mask` must be [B, K]; got shape {mask.shape}.")
    num_tokens = 3 * mask.shape[1] + 2 if num_tokens is None else int(num_tokens)
    min_tokens_per_turn = int(min_tokens_per_turn)
    counts = mask.sum(axis=1)
    if counts.size and counts.max() * min_tokens_per_turn > num_tokens:
        raise ValueError(
            f"`num_tokens`={num_tokens} cannot hold {int(counts.max())} turns of at least "
            f"{min_tokens_per_turn} tokens."
        )
    # Tokens are labelled with the row's *valid* turn indices (with a prefix mask 0 .. n-1; with a
    # gap, never a padded turn).
    turns = [np.flatnonzero(row).tolist() for row in mask]
    return _SEED.map(lambda seed: _layout(turns, num_tokens, min_tokens_per_turn, seed))


def _unequal_groups(earlier: list[int], lab: int) -> int:
    """The last row's group, moved where needed so the batch has two or more groups of unequal
    sizes: a position-based grouping (``x.reshape(-1, G, K)``) then splits or merges a group."""
    sizes: dict[int, int] = {}
    for label in [*earlier, lab]:
        sizes[label] = sizes.get(label, 0) + 1
    if len(sizes) == 1:
        return len(earlier)  # a new group of one beside the rest
    if len(set(sizes.values())) == 1:
        return next(label for label in earlier if label != lab)  # one group one row larger
    return lab


@st.composite
def _turn_batches(draw, shapes, value, pad, min_turns, dense_ids, dtype, mixed_groups=True
                  ) -> TurnBatch:
    B, K, T = draw(st.sampled_from(shapes))
    # Row-major draws (each row's length, group and values together): the shrinker deletes or
    # simplifies whole rows, moving a failure into the first rows so a smaller shape can hold it.
    lengths = np.zeros((B,), np.int64)
    labels = np.zeros((B,), np.int64)
    scores = np.zeros((B, K), np.float64)
    rewards = np.zeros((B,), np.float64)
    # A constant group: all its rows share one score per turn and one reward (zero spread).
    constant: dict[int, tuple[list[float], float] | None] = {}
    for i in range(B):
        n = draw(st.integers(min(min_turns, K), K))
        # Join one of the groups so far or open a new one: every group size from 1 to B occurs.
        lab = draw(st.integers(0, i))
        if mixed_groups and i == B - 1 and B >= 3:
            lab = _unequal_groups(labels[:i].tolist(), lab)
        if lab not in constant:
            constant[lab] = ([], draw(value)) if draw(st.booleans()) else None
        template = constant[lab]
        if template is None:
            scores[i, :n] = [draw(value) for _ in range(n)]
            rewards[i] = draw(value)
        else:
            row, reward = template
            row.extend(draw(value) for _ in range(n - len(row)))
            scores[i, :n] = row[:n]
            rewards[i] = reward
        lengths[i], labels[i] = n, lab
    mask = np.arange(K)[None, :] < lengths[:, None]
    if dense_ids:
        ids = labels
    else:  # distinct arbitrary ids per label: sparse, negative, unsorted, int32 extremes
        used = sorted(set(labels.tolist()))
        distinct = draw(st.lists(ID_VALUES, min_size=len(used), max_size=len(used), unique=True))
        lookup = dict(zip(used, distinct, strict=True))
        ids = np.array([lookup[lab] for lab in labels.tolist()])
    garbage_scores = _fill((B, K), pad, draw(_SEED), np.float64)
    garbage_rewards = _fill((B,), pad, draw(_SEED), np.float64)
    scores = np.where(mask, scores, garbage_scores)
    rewards = np.where(lengths > 0, rewards, garbage_rewards)
    roles = _roles((B, K), draw(_SEED))
    token_turn = _layout([range(int(n)) for n in lengths], T, 1, draw(_SEED))
    with np.errstate(over="ignore"):  # 1e30 padding overflows float16 to inf: still padding
        return TurnBatch(
            scores=scores.astype(dtype),
            turn_mask=mask,
            group_ids=ids.astype(np.int32),
            rewards=rewards.astype(dtype),
            roles=roles,
            token_turn=token_turn,
        )


def turn_batches(
    *,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    score_range: tuple[float, float] = (0.0, 1.0),
    min_turns: int = 1,
    nonfinite_padding: bool = True,
    dense_ids: bool = False,
    dtype=np.float32,
    mixed_groups: bool = True,
) -> st.SearchStrategy[TurnBatch]:
    """Strategy for padded multi-turn batches with the edge cases credit code gets wrong.

    Every batch has a shape from ``shapes``; ragged prefix masks (each row keeps between
    ``min_turns`` and ``K`` turns); groups of every size including singletons (with
    ``mixed_groups``, every batch of three rows or more has two or more groups, not all of one
    size, so code that groups by position rather than by id meets a batch it gets wrong), with
    arbitrary int32
    ids (negative, sparse, unsorted, int32 extremes); constant groups (all rows of a group share
    their scores and reward); valid values from ``score_range``, including the non-dyadic 0.35,
    1/3 and 0.95 and ties; NaN, inf and huge values at masked entries; role codes including ``-1``
    (unlabeled); and a ``token_turn`` map with prompt, observation and padding tokens.

    Args:
      shapes: ``(B, K)`` or ``(B, K, T)`` sizes to draw from (``T`` defaults to ``3 K + 2``). A
        jitted function compiles once per shape, so keep the list short.
      score_range: ``(lo, hi)`` of valid scores and rewards.
      min_turns: fewest valid turns per row; ``0`` also generates rows that are all padding.
      nonfinite_padding: put NaN and inf at masked entries (default); ``False`` uses finite
        garbage only.
      dense_ids: ids in ``[0, B)`` instead of arbitrary int32 (for code that promises dense ids).
      dtype: floating dtype of ``scores`` and ``rewards``.
      mixed_groups: default ``True`` (see above); ``False`` also draws one-group batches and
        batches of equal-size groups.

    Returns:
      A strategy of :class:`TurnBatch` (NumPy arrays).

    Examples:
      A property test of your own, in the usual hypothesis style:

      >>> import credax
      >>> from hypothesis import given, settings
      >>> @settings(max_examples=10, deadline=None)
      ... @given(turn_batches(shapes=[(4, 3), (6, 5)]))
      ... def test_batches_are_valid(b):
      ...     assert b.scores.shape == b.turn_mask.shape and b.group_ids.dtype == "int32"
      ...     credax.validate_turns(b.scores, b.turn_mask, b.group_ids, token_turn=b.token_turn)
      >>> test_batches_are_valid()
    """
    shapes = _normalize_shapes(shapes)
    min_turns = int(min_turns)
    if not 0 <= min_turns <= min(s[1] for s in shapes):
        raise ValueError(f"`min_turns` must lie in [0, min K]; got {min_turns}.")
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.floating):
        raise TypeError(f"`dtype` must be a floating dtype; got {dtype}.")
    pad = PAD_NONFINITE if nonfinite_padding else PAD_FINITE
    return _turn_batches(shapes, value_strategy(score_range), pad, min_turns, bool(dense_ids),
                         dtype, bool(mixed_groups))


# --------------------------------------------------------------------------------------------
# Perturbations: each maps a batch to another one, every field treated consistently.
# --------------------------------------------------------------------------------------------


def _pad_pool(nonfinite_padding: bool, *, refill: bool = False) -> tuple[float, ...]:
    pool = PAD_NONFINITE if nonfinite_padding else PAD_FINITE
    if refill:  # a refill shrinks to 0, against generated padding that shrinks to NaN
        pool = (0.0,) + tuple(v for v in pool if v != 0.0)
    return pool


def _fresh_id(existing) -> int:
    taken = set(np.asarray(existing).tolist())
    candidate = max(taken) + 1 if taken and max(taken) < INT32.max else 0
    while candidate in taken:
        candidate = candidate - 1 if candidate > INT32.min else INT32.max
    return int(candidate)


@st.composite
def _append_rows(draw, b: TurnBatch, pool) -> tuple[TurnBatch, str]:
    """Append padded rows (no real turn), each joining an existing group or a new one."""
    K = b.turn_mask.shape[1]
    existing = sorted(set(b.group_ids.tolist()))
    new_ids = [draw(st.sampled_from(existing + [_fresh_id(existing)])) for _ in range(PAD_ROWS)]
    out = TurnBatch(
        scores=np.concatenate([b.scores, _fill((PAD_ROWS, K), pool, draw(_SEED), b.scores.dtype)]),
        turn_mask=np.concatenate([b.turn_mask, np.zeros((PAD_ROWS, K), bool)]),
        group_ids=np.concatenate([b.group_ids, np.array(new_ids, np.int32)]),
        rewards=np.concatenate([b.rewards, _fill((PAD_ROWS,), pool, draw(_SEED), b.rewards.dtype)]),
        roles=np.concatenate([b.roles, _roles((PAD_ROWS, K), draw(_SEED))]),
        token_turn=np.concatenate(
            [b.token_turn, np.full((PAD_ROWS, b.token_turn.shape[1]), -1, np.int32)]),
    )
    return out, f"appended {PAD_ROWS} padded rows with group ids {new_ids}"


@st.composite
def _append_turns(draw, b: TurnBatch, pool) -> tuple[TurnBatch, str]:
    """Append padded turns to every row (the token map is unchanged: they own no token)."""
    B = b.turn_mask.shape[0]
    out = b._replace(
        scores=np.concatenate(
            [b.scores, _fill((B, PAD_TURNS), pool, draw(_SEED), b.scores.dtype)], axis=1),
        turn_mask=np.concatenate([b.turn_mask, np.zeros((B, PAD_TURNS), bool)], axis=1),
        roles=np.concatenate([b.roles, _roles((B, PAD_TURNS), draw(_SEED))], axis=1),
    )
    return out, f"appended {PAD_TURNS} padded turns to every row"


@st.composite
def _refill(draw, b: TurnBatch, pool) -> tuple[TurnBatch, str]:
    """New values at every masked entry of every field."""
    masked, masked_rows = ~b.turn_mask, ~b.row_mask
    out = b._replace(
        scores=np.where(masked, _fill(b.scores.shape, pool, draw(_SEED), b.scores.dtype), b.scores),
        rewards=np.where(masked_rows, _fill(b.rewards.shape, pool, draw(_SEED), b.rewards.dtype),
                         b.rewards),
        roles=np.where(masked, _roles(b.roles.shape, draw(_SEED)), b.roles),
    )
    return out, "replaced the values at every masked entry"


@st.composite
def padded_variant(draw, batches, nonfinite_padding, modes):
    """(original, variant, mode, description); mode "none" returns the batch itself."""
    b = draw(batches)
    mode = draw(st.sampled_from(modes))
    if mode == "none":
        return b, b, mode, "no change"
    if mode == "refill":
        v, what = draw(_refill(b, _pad_pool(nonfinite_padding, refill=True)))
    elif mode == "rows":
        v, what = draw(_append_rows(b, _pad_pool(nonfinite_padding)))
    else:
        v, what = draw(_append_turns(b, _pad_pool(nonfinite_padding)))
    return b, v, mode, what


def take_rows(b: TurnBatch, rows) -> TurnBatch:
    return b.map(lambda f: np.asarray(f)[rows])

"""Property tests for credit-assignment code: hypothesis strategies and invariant checkers.

credax tests itself with these; they are public so that a researcher can test their own credit
function the same way, in a few lines::

    import credax.testing as ct

    ct.check_padding_invariance(my_advantages)      # my_advantages(scores, turn_mask, group_ids)
    ct.check_permutation_equivariance(my_advantages)
    ct.check_group_isolation(my_advantages)

Each ``check_<invariant>`` draws batches with :func:`turn_batches`, runs the function under test
(hypothesis drives it, derandomized by default so a failure reproduces), and on a violation raises
an ``AssertionError`` whose message names the invariant and shows the minimal counterexample
hypothesis shrank to: the batch, the perturbation, and the entries that moved. The module needs
``hypothesis`` (``pip install hypothesis``, or a clone's extra: ``pip install '/path/to/credax[testing]'``);
``import credax`` does not import it.

The function under test
-----------------------

By default a checker calls ``fn(scores, turn_mask, group_ids)`` with ``scores: float32[B, K]``,
``turn_mask: bool[B, K]`` and ``group_ids: int32[B]``, and expects an array of shape ``[B, K]``
(masked by ``turn_mask``) or ``[B]`` (one value per trajectory, masked by
:attr:`TurnBatch.row_mask`). Any other signature goes through ``adapter``: a function that takes
``fn`` and returns a function of a whole :class:`TurnBatch`, which also carries outcome
``rewards``, per-turn ``roles`` and a ``token_turn`` map::

    ct.check_group_isolation(credax.grpo_advantages,
                             adapter=lambda fn: lambda b: fn(b.rewards, b.group_ids, b.row_mask))
    ct.check_masked_zero(credax.best_prior, adapter=lambda fn: lambda b: fn(b.scores, b.turn_mask))

Every perturbation a checker makes is applied to all fields of the batch consistently (rows are
permuted, padded or regrouped together), so whatever fields the adapter reads stay coherent. Pass
the same ``fn`` and ``adapter`` objects to several checkers (a module-level adapter, not a fresh
lambda each time) and they share one ``jax.jit`` and its compilations.

The invariants
--------------

=================================  ==============================================================
checker                            what must hold (on valid entries unless stated)
=================================  ==============================================================
``check_padding_invariance``       new values at masked entries (NaN, inf, anything), 2 appended
                                   padded rows (joining existing or new groups) or 2 appended
                                   padded turns change no real output
``check_permutation_equivariance`` permuting the rows permutes the outputs, nothing else
``check_group_isolation``          new values in one group leave every other group's outputs
                                   unchanged; renaming the ids (a bijection onto other arbitrary
                                   ints) changes nothing: ids are labels, not indices
``check_masked_zero``              the output is exactly ``0`` at every masked entry (also on
                                   appended padded rows)
``check_finite_gradients``         ``grad(sum of valid outputs)`` with respect to every float field
                                   is finite everywhere and exactly ``0`` at masked entries
``check_jit_matches_eager``        ``jax.jit(fn)`` traces and agrees with ``fn`` under
                                   ``jax.disable_jit()``
``check_group_zero_mean``          (opt-in) outputs average to ``0`` over each (group, turn) set,
                                   or each group, with at least ``min_size`` valid entries
=================================  ==============================================================

The checks are deliberately independent: a masked entry that holds garbage fails
``check_masked_zero`` but not ``check_padding_invariance``, which compares real entries only. Not
every function should satisfy every invariant: a batch-level whitening (TRL's ``scale="batch"``)
breaks group isolation by design, and only normalised advantages have zero mean.

Sizes and compilation
---------------------

Batches take their shape from ``shapes``, a short list of ``(B, K)`` or ``(B, K, T)``, so a jitted
function compiles a bounded number of times: at most three shapes per entry (the shape itself, and
the padding variants ``(B + 2, K)`` and ``(B, K + 2)``). The checkers run ``fn`` under ``jax.jit``
(``jit=False`` for functions that cannot be traced). Hypothesis settings come from the arguments:
``max_examples``, ``derandomize`` (default ``True``: a failure repeats exactly), ``shrink``
(default ``True``; shrinking reruns ``fn`` hundreds of times, ``False`` reports the first failure
found, for fast CI); deadlines and the example database are off. Do not call a checker inside a
``@given`` test: each checker is a complete property test already.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

try:
    import hypothesis
    from hypothesis import HealthCheck, given
    from hypothesis import strategies as st
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "credax.testing needs hypothesis: pip install hypothesis "
        "(or, from a clone, pip install '/path/to/credax[testing]')"
    ) from err

__all__ = [
    "DEFAULT_SHAPES",
    "TurnBatch",
    "check_finite_gradients",
    "check_group_isolation",
    "check_group_zero_mean",
    "check_jit_matches_eager",
    "check_masked_zero",
    "check_padding_invariance",
    "check_permutation_equivariance",
    "describe_batch",
    "token_layouts",
    "turn_batches",
]

#: Default ``(B, K)`` shapes: a small batch and one with room for several ragged groups.
DEFAULT_SHAPES: tuple[tuple[int, int], ...] = ((4, 3), (7, 4))
DEFAULT_MAX_EXAMPLES = 50
_PAD_ROWS = 2  # rows / turns appended by the padding variants (fixed: bounded compilation)
_PAD_TURNS = 2
_INT32 = np.iinfo(np.int32)

# Values that padding holds. The first is what a shrunk counterexample shows, so generated batches
# shrink to NaN padding (the value that exposes a mask that multiplies) and refills to 0.
_PAD_NONFINITE = (math.nan, math.inf, -math.inf, 1e30, -3.5, 0.0)
_PAD_FINITE = (1e30, -3.5, 0.0, 7.0)


# --------------------------------------------------------------------------------------------
# The batch.
# --------------------------------------------------------------------------------------------


class TurnBatch(NamedTuple):
    """A padded batch of multi-turn trajectories, as :func:`turn_batches` draws it.

    Fields are NumPy arrays (the checkers hand ``jax.Array`` versions to the function under test).
    The first three are the canonical arguments ``fn(scores, turn_mask, group_ids)``.

    Attributes:
      scores: ``float[B, K]`` per-turn scores; masked entries hold padding garbage (NaN, inf, ...).
      turn_mask: ``bool[B, K]`` real turns, a prefix of each row.
      group_ids: ``int32[B]`` prompt ids: arbitrary (negative, sparse, unsorted) integers.
      rewards: ``float[B]`` one outcome reward per row; constant within a constant group.
      roles: ``int32[B, K]`` role codes in ``[-1, 4)`` (``-1`` = unlabeled), also usable as small
        categorical per-turn labels (e.g. GiGPO anchor ids); arbitrary codes at masked turns.
      token_turn: ``int32[B, T]`` turn of each token, ``-1`` for prompt, observation and padding
        tokens (see :func:`token_layouts`).
    """

    scores: Any
    turn_mask: Any
    group_ids: Any
    rewards: Any
    roles: Any
    token_turn: Any

    @property
    def row_mask(self):
        """``bool[B]``: rows with at least one real turn (the mask of per-trajectory values)."""
        return self.turn_mask.any(axis=-1)

    def __repr__(self) -> str:
        return describe_batch(self)


def _fmt(x) -> str:
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    return f"{x:.6g}"


def _vec(values) -> str:
    return "[" + " ".join(_fmt(v) if isinstance(v, float) else str(v)
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
    b = TurnBatch(*(np.asarray(f) for f in batch))
    fields = ("scores", "rewards", "roles", "token_turn") if fields is None else tuple(fields)
    B, K = b.turn_mask.shape
    cols: dict[str, list[str]] = {}
    for name in fields:
        arr = getattr(b, name)
        if arr.ndim == 1:
            cols[name] = [_fmt(v) if np.issubdtype(arr.dtype, np.floating) else str(v) for v in arr]
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


def _value_strategy(score_range) -> st.SearchStrategy[float]:
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


_ID = st.one_of(
    st.sampled_from([-1, 0, _INT32.min, _INT32.max]),
    st.integers(int(_INT32.min), int(_INT32.max)),
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


@st.composite
def _turn_batches(draw, shapes, value, pad, min_turns, dense_ids, dtype) -> TurnBatch:
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
        distinct = draw(st.lists(_ID, min_size=len(used), max_size=len(used), unique=True))
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
) -> st.SearchStrategy[TurnBatch]:
    """Strategy for padded multi-turn batches with the edge cases credit code gets wrong.

    Every batch has a shape from ``shapes``; ragged prefix masks (each row keeps between
    ``min_turns`` and ``K`` turns); groups of every size including singletons, with arbitrary int32
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
    pad = _PAD_NONFINITE if nonfinite_padding else _PAD_FINITE
    return _turn_batches(shapes, _value_strategy(score_range), pad, min_turns, bool(dense_ids),
                         dtype)


# --------------------------------------------------------------------------------------------
# Perturbations: each maps a batch to another one, every field treated consistently.
# --------------------------------------------------------------------------------------------


def _pad_pool(nonfinite_padding: bool, *, refill: bool = False) -> tuple[float, ...]:
    pool = _PAD_NONFINITE if nonfinite_padding else _PAD_FINITE
    if refill:  # a refill shrinks to 0, against generated padding that shrinks to NaN
        pool = (0.0,) + tuple(v for v in pool if v != 0.0)
    return pool


def _fresh_id(existing) -> int:
    taken = set(np.asarray(existing).tolist())
    candidate = max(taken) + 1 if taken and max(taken) < _INT32.max else 0
    while candidate in taken:
        candidate = candidate - 1 if candidate > _INT32.min else _INT32.max
    return int(candidate)


@st.composite
def _append_rows(draw, b: TurnBatch, pool) -> tuple[TurnBatch, str]:
    """Append padded rows (no real turn), each joining an existing group or a new one."""
    K = b.turn_mask.shape[1]
    existing = sorted(set(b.group_ids.tolist()))
    new_ids = [draw(st.sampled_from(existing + [_fresh_id(existing)])) for _ in range(_PAD_ROWS)]
    out = TurnBatch(
        scores=np.concatenate([b.scores, _fill((_PAD_ROWS, K), pool, draw(_SEED), b.scores.dtype)]),
        turn_mask=np.concatenate([b.turn_mask, np.zeros((_PAD_ROWS, K), bool)]),
        group_ids=np.concatenate([b.group_ids, np.array(new_ids, np.int32)]),
        rewards=np.concatenate([b.rewards, _fill((_PAD_ROWS,), pool, draw(_SEED), b.rewards.dtype)]),
        roles=np.concatenate([b.roles, _roles((_PAD_ROWS, K), draw(_SEED))]),
        token_turn=np.concatenate(
            [b.token_turn, np.full((_PAD_ROWS, b.token_turn.shape[1]), -1, np.int32)]),
    )
    return out, f"appended {_PAD_ROWS} padded rows with group ids {new_ids}"


@st.composite
def _append_turns(draw, b: TurnBatch, pool) -> tuple[TurnBatch, str]:
    """Append padded turns to every row (the token map is unchanged: they own no token)."""
    B = b.turn_mask.shape[0]
    out = b._replace(
        scores=np.concatenate(
            [b.scores, _fill((B, _PAD_TURNS), pool, draw(_SEED), b.scores.dtype)], axis=1),
        turn_mask=np.concatenate([b.turn_mask, np.zeros((B, _PAD_TURNS), bool)], axis=1),
        roles=np.concatenate([b.roles, _roles((B, _PAD_TURNS), draw(_SEED))], axis=1),
    )
    return out, f"appended {_PAD_TURNS} padded turns to every row"


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
def _padded_variant(draw, batches, nonfinite_padding, modes):
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


def _take_rows(b: TurnBatch, rows) -> TurnBatch:
    return TurnBatch(*(np.asarray(f)[rows] for f in b))


# --------------------------------------------------------------------------------------------
# Running fn and comparing.
# --------------------------------------------------------------------------------------------


def _caller(fn: Callable, adapter: Callable | None) -> Callable[[TurnBatch], Any]:
    """The function of a batch that the checkers run: ``fn`` itself or ``adapter(fn)``."""
    if not callable(fn):
        raise TypeError(f"`fn` must be callable; got {type(fn).__name__}.")
    if adapter is None:
        return lambda b: fn(b.scores, b.turn_mask, b.group_ids)
    call = adapter(fn)
    if not callable(call):
        raise TypeError("`adapter(fn)` must return a function of a TurnBatch.")
    return call


@functools.lru_cache(maxsize=64)
def _jitted(fn: Callable, adapter: Callable | None) -> Callable[[TurnBatch], Any]:
    # Cached on (fn, adapter) so that all checkers run on one function share its compilations.
    return jax.jit(_caller(fn, adapter))


def _compiled(fn: Callable, adapter: Callable | None, jit: bool) -> Callable[[TurnBatch], Any]:
    # jit by default: a checker calls fn hundreds of times (generation and shrinking), and op-by-op
    # dispatch costs far more than compiling once per shape. check_jit_matches_eager covers the
    # eager path; jit=False is for functions that cannot be traced.
    if not jit:
        return _caller(fn, adapter)
    try:
        return _jitted(fn, adapter)
    except TypeError:  # an unhashable callable: no cache
        return jax.jit(_caller(fn, adapter))


def _to_jax(b: TurnBatch) -> TurnBatch:
    return TurnBatch(*(jnp.asarray(f) for f in b))


def _out_mask(out_shape, b: TurnBatch, what: str = "fn"):
    """The validity mask of an output: ``turn_mask`` for ``[B, K]``, ``row_mask`` for ``[B]``."""
    B, K = b.turn_mask.shape
    if tuple(out_shape) == (B, K):
        return b.turn_mask
    if tuple(out_shape) == (B,):
        return b.row_mask
    raise ValueError(
        f"{what} returned shape {tuple(out_shape)} for a batch with B={B}, K={K}; the checkers "
        "need [B, K] (masked by turn_mask) or [B] (masked by row_mask). Use `adapter` to map "
        "other outputs to one of these."
    )


def _evaluate(call, b: TurnBatch, what: str = "fn") -> tuple[np.ndarray, np.ndarray]:
    out = call(_to_jax(b))
    out = np.asarray(out)
    return out, np.asarray(_out_mask(out.shape, b, what))


def _as_f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _mismatch(expected, got, where, atol, rtol) -> np.ndarray:
    e, g = _as_f64(expected), _as_f64(got)
    with np.errstate(invalid="ignore"):
        close = np.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    return where & ~close


def _entries(bad, expected, got, labels=("expected", "got"), *, ids=None, name: str = "out",
             limit: int = 6) -> str:
    """One line per offending entry (the first ``limit``); ``expected=None`` prints ``got`` only."""
    idx = np.argwhere(bad)
    lines = []
    for index in idx[:limit]:
        index = tuple(int(i) for i in index)
        group = f" (group {int(ids[index[0]])})" if ids is not None else ""
        value = f"{labels[1]} {_fmt(np.asarray(got)[index])}"
        if expected is not None:
            value = f"{labels[0]} {_fmt(np.asarray(expected)[index])}, {value}"
        lines.append(f"  {name}[{', '.join(map(str, index))}]{group}: {value}")
    if len(idx) > limit:
        lines.append(f"  ... and {len(idx) - limit} more")
    return "\n".join(lines)


_SHRUNK = "minimal counterexample (hypothesis-shrunk):"
_UNSHRUNK = "counterexample (first found; shrink=False):"


def _fail(invariant: str, what: str, details: str, batch: TurnBatch, fields, extra: str = ""):
    msg = (f"{invariant} violated: {what}\n{details}\n"
           f"{_SHRUNK}\n{describe_batch(batch, fields=fields)}")
    if extra:
        msg += "\n" + extra
    raise AssertionError(msg)


def _fields(adapter) -> tuple[str, ...]:
    # The canonical call reads scores only; an adapter may read anything.
    return ("scores",) if adapter is None else ("scores", "rewards", "roles", "token_turn")


class _Case:
    """A drawn case; its repr stays short because the AssertionError already prints it."""

    __slots__ = ("args",)

    def __init__(self, args):
        self.args = args

    def __repr__(self) -> str:
        return "<the counterexample printed in the AssertionError message>"


def _run(name: str, prop, strategy, *, max_examples: int, derandomize: bool, shrink: bool) -> None:
    """Run ``prop`` over ``strategy`` as a hypothesis test with the checker's settings."""
    max_examples = int(max_examples)
    if max_examples < 1:
        raise ValueError(f"`max_examples` must be >= 1; got {max_examples}.")

    def test(case):
        prop(*case.args)

    test.__name__ = test.__qualname__ = name
    # Wrapped inside a composite, not with .map: hypothesis prints mapped values as the call
    # that built them, which would repeat the whole batch in its note.
    test = given(case=st.composite(lambda draw: _Case(draw(strategy)))())(test)
    test = hypothesis.settings(
        max_examples=max_examples,
        derandomize=derandomize,
        database=None,
        deadline=None,
        report_multiple_bugs=False,
        print_blob=False,
        # No "explain" phase: it reruns failing examples under coverage, slow and noisy.
        phases=(hypothesis.Phase.explicit, hypothesis.Phase.reuse, hypothesis.Phase.generate,
                hypothesis.Phase.target) + ((hypothesis.Phase.shrink,) if shrink else ()),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.large_base_example],
    )(test)
    try:
        test()
    except AssertionError as err:
        if not shrink and err.args and isinstance(err.args[0], str):
            err.args = (err.args[0].replace(_SHRUNK, _UNSHRUNK, 1),) + err.args[1:]
        raise


def _batches(shapes, strategy_options):
    return turn_batches(shapes=shapes, **strategy_options)


# --------------------------------------------------------------------------------------------
# Checkers.
# --------------------------------------------------------------------------------------------


def check_padding_invariance(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that padding never changes a real output.

    Three perturbations, each compared with the original on the original's valid entries: new
    values at every masked entry (NaN, inf, huge, zero); ``2`` appended padded rows whose ids join
    existing groups or a new one (padding a batch to a divisible size must not pollute group
    statistics); ``2`` appended padded turns (a padded width must not enter any mean).

    Args:
      fn: ``fn(scores, turn_mask, group_ids) -> [B, K] or [B]``, or any signature with ``adapter``.
      adapter: ``adapter(fn)`` returns a function of a :class:`TurnBatch` (see the module doc).
      shapes: ``(B, K)`` or ``(B, K, T)`` sizes (see :func:`turn_batches`).
      max_examples: hypothesis examples to draw.
      atol, rtol: comparison tolerance (``0, 0`` demands bit-identical outputs).
      jit: run ``fn`` under ``jax.jit`` (fast: one compilation per shape); ``False`` for functions
        that cannot be traced.
      derandomize: a fixed example sequence (reproducible); ``False`` explores anew each run.
      shrink: shrink a failing example to a minimal one (default). Shrinking reruns ``fn``
        hundreds of times; ``False`` reports the first failing example, for fast CI runs.
      **strategy_options: passed to :func:`turn_batches` (``score_range``, ``min_turns``,
        ``nonfinite_padding``, ``dense_ids``, ``dtype``).

    Raises:
      AssertionError: ``padding invariance violated: ...`` with the shrunk counterexample.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_padding_invariance(credax.future_best, max_examples=5,
      ...                             adapter=lambda fn: lambda b: fn(b.scores, b.turn_mask))
    """
    call = _compiled(fn, adapter, jit)
    nonfinite = strategy_options.get("nonfinite_padding", True)
    strategy = _padded_variant(_batches(shapes, strategy_options), nonfinite,
                               ("refill", "rows", "turns"))

    def prop(b, v, mode, what):
        out, valid = _evaluate(call, b)
        out_v, _ = _evaluate(call, v)
        B, K = b.turn_mask.shape
        got = out_v[:B, :K] if out.ndim == 2 else out_v[:B]
        bad = _mismatch(out, got, valid, atol, rtol)
        if bad.any():
            _fail("padding invariance", f"{what} changed real outputs.",
                  _entries(bad, out, got, ("before", "after"), ids=b.group_ids), b,
                  _fields(adapter), extra=f"padded batch:\n{describe_batch(v, fields=_fields(adapter))}")

    _run("check_padding_invariance", prop, strategy, max_examples=max_examples,
         derandomize=derandomize, shrink=shrink)


def check_permutation_equivariance(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that permuting the rows permutes the outputs: ``fn(b[perm]) == fn(b)[perm]``.

    Catches groups inferred from position or a reshape instead of the ids, and baselines taken
    from "the first rollout of the group". Arguments as :func:`check_padding_invariance`.

    Raises:
      AssertionError: ``permutation equivariance violated: ...`` with the permutation and the
        shrunk counterexample.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_permutation_equivariance(
      ...     credax.group_normalize, max_examples=5,
      ...     adapter=lambda fn: lambda b: fn(b.scores, b.group_ids, b.turn_mask))
    """
    call = _compiled(fn, adapter, jit)

    @st.composite
    def cases(draw):
        b = draw(_batches(shapes, strategy_options))
        perm = np.array(draw(st.permutations(range(b.turn_mask.shape[0]))), dtype=np.int64)
        return b, perm

    def prop(b, perm):
        out, valid = _evaluate(call, b)
        out_p, _ = _evaluate(call, _take_rows(b, perm))
        bad = _mismatch(out[perm], out_p, valid[perm], atol, rtol)
        if bad.any():
            _fail("permutation equivariance",
                  f"permuting the rows by perm={perm.tolist()} did not permute the outputs "
                  "(row i of the permuted batch is row perm[i] of the original).",
                  _entries(bad, out[perm], out_p, ("expected", "got"), ids=b.group_ids[perm],
                           name="out_permuted"),
                  b, _fields(adapter))

    _run("check_permutation_equivariance", prop, cases(), max_examples=max_examples,
         derandomize=derandomize, shrink=shrink)


def check_group_isolation(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that a row's output depends only on its own group, and on ids only through equality.

    Two perturbations: new values (scores, reward, roles) at every valid entry of one group, after
    which every *other* group's outputs must be unchanged (catches normalising over the batch
    instead of the group); and a renaming of the ids onto other arbitrary int32 values, after which
    nothing may change (catches ids used as array indices, which breaks on negative or sparse ids).
    Arguments as :func:`check_padding_invariance`; ``score_range`` bounds the new values too.

    Raises:
      AssertionError: ``group isolation violated: ...`` with the changed group and the shrunk
        counterexample.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_group_isolation(
      ...     credax.grpo_advantages, max_examples=5,
      ...     adapter=lambda fn: lambda b: fn(b.rewards, b.group_ids, b.row_mask))
    """
    call = _compiled(fn, adapter, jit)
    value = _value_strategy(strategy_options.get("score_range", (0.0, 1.0)))

    @st.composite
    def cases(draw):
        b = draw(_batches(shapes, strategy_options))
        existing = sorted(set(b.group_ids.tolist()))
        if draw(st.booleans()):
            renamed = draw(st.lists(_ID, min_size=len(existing), max_size=len(existing),
                                    unique=True))
            lookup = dict(zip(existing, renamed, strict=True))
            ids = np.array([lookup[i] for i in b.group_ids.tolist()], np.int32)
            return (b, b._replace(group_ids=ids), None,
                    f"renaming the group ids by {lookup} changed outputs: ids must act as "
                    "labels only.")
        target = draw(st.sampled_from(existing))
        rows = b.group_ids == target
        scores, rewards, roles = b.scores.copy(), b.rewards.copy(), b.roles.copy()
        for i, k in zip(*np.nonzero(b.turn_mask & rows[:, None]), strict=True):
            scores[i, k] = draw(value)
            roles[i, k] = draw(st.integers(-1, 3))
        for i in np.nonzero(rows & b.row_mask)[0]:
            rewards[i] = draw(value)
        v = b._replace(scores=scores, rewards=rewards, roles=roles)
        return b, v, target, (f"new values for group {target} (rows "
                              f"{np.nonzero(rows)[0].tolist()}) changed other groups' outputs.")

    def prop(b, v, target, what):
        out, valid = _evaluate(call, b)
        out_v, _ = _evaluate(call, v)
        if target is None:
            where = valid
        else:
            other = b.group_ids != target
            where = valid & (other if out.ndim == 1 else other[:, None])
        bad = _mismatch(out, out_v, where, atol, rtol)
        if bad.any():
            _fail("group isolation", what,
                  _entries(bad, out, out_v, ("before", "after"), ids=b.group_ids), b,
                  _fields(adapter),
                  extra=f"perturbed batch:\n{describe_batch(v, fields=_fields(adapter))}")

    _run("check_group_isolation", prop, cases(), max_examples=max_examples,
         derandomize=derandomize, shrink=shrink)


def check_masked_zero(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that the output is exactly ``0`` at every masked entry (never NaN, never garbage).

    Checked on the drawn batch (ragged rows: padded turns) and with ``2`` appended padded rows, so
    a ``[B]`` output is checked on rows that are all padding. Arguments as
    :func:`check_padding_invariance` (no tolerance: the value must be exactly zero).

    Raises:
      AssertionError: ``masked zero violated: ...`` with the entries and the shrunk counterexample.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_masked_zero(credax.best_prior, max_examples=5,
      ...                      adapter=lambda fn: lambda b: fn(b.scores, b.turn_mask))
    """
    call = _compiled(fn, adapter, jit)
    nonfinite = strategy_options.get("nonfinite_padding", True)
    strategy = _padded_variant(_batches(shapes, strategy_options), nonfinite,
                               ("none", "rows"))

    def prop(b, v, mode, what):
        out, valid = _evaluate(call, v)
        bad = ~valid & ~(_as_f64(out) == 0)
        if bad.any():
            shown = "." if mode == "none" else f" (the batch below: {what})."
            _fail("masked zero", f"the output is not exactly 0 at masked entries{shown}",
                  _entries(bad, np.zeros(out.shape), out, ("expected", "got"), ids=v.group_ids),
                  v, _fields(adapter))

    _run("check_masked_zero", prop, strategy, max_examples=max_examples,
         derandomize=derandomize, shrink=shrink)


def _grads(call, jb: TurnBatch):
    """Gradients of the sum of the valid outputs with respect to scores and rewards."""

    def total(scores, rewards):
        out = call(jb._replace(scores=scores, rewards=rewards))
        if not jnp.issubdtype(out.dtype, jnp.floating):
            raise TypeError(f"check_finite_gradients needs a floating output; got {out.dtype}.")
        out = out.astype(jnp.float32)
        valid = _out_mask(out.shape, jb)
        return jnp.sum(jnp.where(valid, out, jnp.zeros_like(out)))

    return jax.grad(total, argnums=(0, 1))(jb.scores, jb.rewards)


@functools.lru_cache(maxsize=64)
def _jitted_grads(fn: Callable, adapter: Callable | None):
    return jax.jit(functools.partial(_grads, _caller(fn, adapter)))


def check_finite_gradients(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that gradients are finite everywhere and exactly ``0`` at masked entries.

    Differentiates the sum of the valid outputs with respect to every float field of the batch
    (``scores`` and ``rewards``) on batches with singletons, constant groups, NaN/inf padding and
    appended padded rows. A NaN gradient from a zero-spread group (``where(std > 0,
    x / std, 0)`` without the inner ``where``) or from NaN padding (``exp`` of a padded value)
    poisons the whole parameter update; a non-zero gradient at a masked entry means padding
    influences the result. Arguments as :func:`check_padding_invariance`.

    Raises:
      AssertionError: ``finite gradients violated: ...`` with the entries and the shrunk
        counterexample.
      TypeError: the output is not floating (nothing to differentiate).

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_finite_gradients(credax.discounted_returns, max_examples=3,
      ...                           adapter=lambda fn: lambda b: fn(b.scores, b.turn_mask, gamma=0.9))
    """
    call = _caller(fn, adapter)
    if jit:
        try:
            grads = _jitted_grads(fn, adapter)
        except TypeError:  # an unhashable callable: no cache
            grads = jax.jit(functools.partial(_grads, call))
    else:
        grads = functools.partial(_grads, call)
    nonfinite = strategy_options.get("nonfinite_padding", True)
    strategy = _padded_variant(_batches(shapes, strategy_options), nonfinite,
                               ("none", "rows"))

    def prop(b, v, mode, what):
        g_scores, g_rewards = grads(_to_jax(v))
        shown = "" if mode == "none" else f" (the batch below: {what})"
        for name, grad, masked in (("scores", g_scores, ~v.turn_mask),
                                   ("rewards", g_rewards, ~v.row_mask)):
            grad = _as_f64(grad)
            nonfinite_at = ~np.isfinite(grad)
            if nonfinite_at.any():
                _fail("finite gradients", f"d sum(valid outputs) / d {name} is not finite{shown}.",
                      _entries(nonfinite_at, None, grad, ("", "got"), name=f"grad_{name}",
                               ids=v.group_ids),
                      v, _fields(adapter))
            leak = masked & (grad != 0)
            if leak.any():
                _fail("finite gradients",
                      f"masked entries of {name} receive gradient: padding influences the "
                      f"output{shown}.",
                      _entries(leak, np.zeros(grad.shape), grad, ("expected", "got"),
                               name=f"grad_{name}", ids=v.group_ids),
                      v, _fields(adapter))

    _run("check_finite_gradients", prop, strategy, max_examples=max_examples,
         derandomize=derandomize, shrink=shrink)


def check_jit_matches_eager(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that ``jax.jit`` traces the function and agrees with eager execution.

    Eager means ``jax.disable_jit()``, which also runs any ``jit`` inside ``fn`` op by op. Catches
    Python control flow on values, host NumPy calls on traced arrays, and trace-time side
    effects. Every entry is compared (NaN matches NaN). Arguments as
    :func:`check_padding_invariance`.

    Raises:
      AssertionError: ``jit matches eager violated: ...``; a tracing error is chained as the cause.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_jit_matches_eager(credax.best_prior, max_examples=2,
      ...                            adapter=lambda fn: lambda b: fn(b.scores, b.turn_mask))
    """
    call = _caller(fn, adapter)
    jitted = _compiled(fn, adapter, jit=True)

    def prop(b):
        with jax.disable_jit():
            eager, _ = _evaluate(call, b)
        try:
            compiled = np.asarray(jitted(_to_jax(b)))
        except Exception as err:  # any tracing failure is the violation; chained below
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise AssertionError(
                f"jit matches eager violated: jax.jit(fn) fails where eager fn runs: "
                f"{type(err).__name__}: {first}\n"
                f"{_SHRUNK}\n{describe_batch(b, fields=_fields(adapter))}"
            ) from err
        if compiled.shape != eager.shape:
            _fail("jit matches eager", f"jit output shape {compiled.shape} != eager "
                  f"{eager.shape}.", "", b, _fields(adapter))
        bad = _mismatch(eager, compiled, np.ones(eager.shape, bool), atol, rtol)
        if bad.any():
            _fail("jit matches eager", "jax.jit(fn) and eager fn disagree.",
                  _entries(bad, eager, compiled, ("eager", "jit"), ids=b.group_ids), b,
                  _fields(adapter))

    _run("check_jit_matches_eager", prop, _batches(shapes, strategy_options).map(lambda b: (b,)),
         max_examples=max_examples, derandomize=derandomize, shrink=shrink)


def check_group_zero_mean(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    level: str = "group_turn",
    min_size: int = 2,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check (opt-in) that outputs average to zero within each group: centred advantages.

    ``level="group_turn"`` averages a ``[B, K]`` output over each (group, turn index) set of valid
    entries — the peer set of a per-(prompt, turn) z-score; ``level="group"`` over all valid
    entries of a group. ``[B]`` outputs are averaged per group. Sets with fewer than ``min_size``
    valid entries are skipped (a singleton has no peer mean to remove: credax gives it ``0``, verl
    keeps its raw score). A set passes when ``|mean| <= atol + rtol * max |value|``.

    Only centred estimators satisfy this (GRPO, RLOO, per-(prompt, turn) normalisation); a sum of
    an outcome advantage and a role bonus (TRIAGE), or MT-GRPO's outcome term over ragged turns,
    need not. Other arguments as :func:`check_padding_invariance`.

    Raises:
      AssertionError: ``group zero mean violated: ...`` with the set, its values and the shrunk
        counterexample.
      ValueError: unknown ``level``.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_group_zero_mean(
      ...     credax.group_normalize, max_examples=5,
      ...     adapter=lambda fn: lambda b: fn(b.scores, b.group_ids, b.turn_mask))
    """
    if level not in ("group_turn", "group"):
        raise ValueError(f"`level` must be 'group_turn' or 'group'; got {level!r}.")
    call = _compiled(fn, adapter, jit)

    def prop(b):
        out, valid = _evaluate(call, b)
        out = _as_f64(out)
        per_turn = out.ndim == 2 and level == "group_turn"
        for gid in sorted(set(b.group_ids.tolist())):
            rows = b.group_ids == gid
            if out.ndim == 1:
                sets = [(rows & valid, f"group {gid}")]
            elif per_turn:
                sets = [(rows[:, None] & valid & (np.arange(out.shape[1]) == k)[None, :],
                         f"group {gid}, turn {k}") for k in range(out.shape[1])]
            else:
                sets = [(rows[:, None] & valid, f"group {gid} (all valid turns)")]
            for sel, name in sets:
                values = out[sel]
                if values.size < max(int(min_size), 1):
                    continue
                mean = float(np.mean(values))
                if not abs(mean) <= atol + rtol * float(np.max(np.abs(values))):
                    entries = ", ".join(f"out[{', '.join(map(str, i))}]={_fmt(out[tuple(i)])}"
                                        for i in np.argwhere(sel).tolist())
                    _fail("group zero mean", f"the outputs of {name} average to {_fmt(mean)}, "
                          "not 0.", f"  {entries}", b, _fields(adapter))

    _run("check_group_zero_mean", prop, _batches(shapes, strategy_options).map(lambda b: (b,)),
         max_examples=max_examples, derandomize=derandomize, shrink=shrink)

"""Eager input checks with clear messages (not for use under ``jit``).

The compiled functions check shapes and dtypes at trace time but cannot look at values. These
functions do, on concrete arrays, once per batch in the data pipeline: they raise ``TypeError`` for
a wrong kind of array and ``ValueError`` for wrong values, naming the argument, what was expected
and what was found (with the first offending position). They return ``None`` when all is well.
"""

from __future__ import annotations

import numpy as np

_INT32 = np.iinfo(np.int32)


def host_array(x, name: str) -> np.ndarray:
    """``x`` as a NumPy array; a traced value is refused (these checks need concrete values)."""
    import jax

    if isinstance(x, jax.core.Tracer):
        raise TypeError(
            f"`{name}` is a traced value: validate_* functions check concrete values and must "
            "be called outside jit (in the data pipeline)."
        )
    return np.asarray(x)


def _first(where: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(where)[0])


def check_bool_mask(mask: np.ndarray, name: str, shape: tuple[int, ...], like: str = "scores") -> None:
    if mask.dtype != np.bool_:
        raise TypeError(f"`{name}` must be a boolean array (true = real turn); got dtype {mask.dtype}.")
    if mask.shape != shape:
        raise ValueError(f"`{name}` must have shape {shape} (same as `{like}`); got {mask.shape}.")


def check_prefix_mask(turn_mask: np.ndarray, name: str = "turn_mask") -> None:
    """Valid turns must form a prefix of each row, and every row needs at least one."""
    gap = turn_mask[:, 1:] & ~turn_mask[:, :-1]
    if gap.any():
        b, k = _first(gap)
        raise ValueError(
            f"`{name}` must be prefix-contiguous (valid turns first, then padding); row {b} has a "
            f"valid turn at index {k + 1} after a padded turn at index {k}."
        )
    empty = ~turn_mask.any(axis=1)
    if empty.any():
        raise ValueError(f"`{name}`: every row needs at least one valid turn; row "
                         f"{int(np.argmax(empty))} has none.")


def check_group_ids(group_ids, batch: int) -> None:
    ids = host_array(group_ids, "group_ids")
    if ids.dtype == object or not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"`group_ids` must be an integer array; got dtype {ids.dtype}.")
    if ids.shape != (batch,):
        raise ValueError(f"`group_ids` must have shape [B] = ({batch},); got {ids.shape}.")
    if ids.size and (ids.min() < _INT32.min or ids.max() > _INT32.max):
        bad = int(np.argmax((ids < _INT32.min) | (ids > _INT32.max)))
        raise ValueError(
            f"`group_ids` must fit in int32 (JAX casts ids to int32 without x64, which would "
            f"silently merge groups); row {bad} has {ids[bad]}. Densify 64-bit hashes first, e.g. "
            "`np.unique(ids, return_inverse=True)[1]`, or pass them through `credax.groups`."
        )


def validate_turns(
    scores,
    turn_mask,
    group_ids,
    *,
    score_range: tuple[float, float] | None = (0.0, 1.0),
    token_turn=None,
) -> None:
    """Check a turn batch eagerly: shapes, dtypes, id width, score values, mask shape, token map.

    Checks, each raising with the argument's name:

    * ``scores`` is a real ``[B, K]`` array; ``turn_mask`` a ``bool[B, K]``; ``group_ids`` an
      integer ``[B]`` whose values fit in int32 (no silent truncation of 64-bit hashes);
    * valid scores are finite and inside ``score_range`` (``None`` skips the range check);
    * ``turn_mask`` is prefix-contiguous and every row has at least one valid turn;
    * ``token_turn`` (optional) is an integer ``[B, T]`` with values in ``[-1, K)`` that point
      only at valid turns.

    Raises:
      TypeError: wrong kind of array (float mask, float ids, traced input).
      ValueError: wrong shape or values.

    Examples:
      >>> import numpy as np, credax
      >>> credax.validate_turns(np.array([[0.0, 1.0]]), np.array([[True, False]]), np.array([3]))
      >>> credax.validate_turns(np.array([[0.0, 1.0]]), np.array([[False, True]]), np.array([3]))
      Traceback (most recent call last):
      ...
      ValueError: `turn_mask` must be prefix-contiguous (valid turns first, then padding); row 0 has a valid turn at index 1 after a padded turn at index 0.
    """
    s = host_array(scores, "scores")
    if s.dtype == object or not (np.issubdtype(s.dtype, np.floating) or np.issubdtype(s.dtype, np.integer)):
        raise TypeError(f"`scores` must be a real numeric array; got dtype {s.dtype}.")
    if s.ndim != 2:
        raise ValueError(f"`scores` must be 2-D, shape [B, K]; got shape {s.shape}.")
    m = host_array(turn_mask, "turn_mask")
    check_bool_mask(m, "turn_mask", s.shape)
    check_group_ids(group_ids, s.shape[0])
    valid = s[m].astype(np.float64)
    if not np.all(np.isfinite(valid)):
        b, k = _first(m & ~np.isfinite(s.astype(np.float64)))
        raise ValueError(f"`scores` must be finite at valid turns; scores[{b}, {k}] = {s[b, k]}.")
    if score_range is not None:
        lo, hi = score_range
        out = m & ((s < lo) | (s > hi))
        if out.any():
            b, k = _first(out)
            raise ValueError(f"`scores` must lie in [{lo}, {hi}] at valid turns (`score_range`); "
                             f"scores[{b}, {k}] = {s[b, k]}.")
    check_prefix_mask(m)
    if token_turn is not None:
        tt = host_array(token_turn, "token_turn")
        if not np.issubdtype(tt.dtype, np.integer):
            raise TypeError(f"`token_turn` must be an integer array; got dtype {tt.dtype}.")
        if tt.ndim != 2 or tt.shape[0] != s.shape[0]:
            raise ValueError(f"`token_turn` must have shape [B, T] with B={s.shape[0]}; got {tt.shape}.")
        num_turns = s.shape[1]
        bad = (tt < -1) | (tt >= num_turns)
        if bad.any():
            b, t = _first(bad)
            raise ValueError(f"`token_turn` values must lie in [-1, K={num_turns}); "
                             f"token_turn[{b}, {t}] = {tt[b, t]}.")
        rows = np.broadcast_to(np.arange(s.shape[0])[:, None], tt.shape)
        points_at_pad = (tt >= 0) & ~m[rows, np.clip(tt, 0, num_turns - 1)]
        if points_at_pad.any():
            b, t = _first(points_at_pad)
            raise ValueError(f"`token_turn` must point at valid turns; token_turn[{b}, {t}] = "
                             f"{tt[b, t]} is a padded turn of row {b}.")

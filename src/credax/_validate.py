"""Eager input checks with clear messages (not for use under ``jit``).

The compiled functions check shapes and dtypes at trace time but cannot look at values. These
functions do, on concrete arrays, once per batch in the data pipeline: they raise ``TypeError`` for
a wrong kind of array and ``ValueError`` for wrong values, naming the argument, what was expected
and what was found (with the first offending position). They return ``None`` when all is well.
Their dtype, shape and mask rules are the compiled functions' own (``_checks``: one function per
rule for traced and host arrays), so both paths refuse the same arrays with the same words.
"""

from __future__ import annotations

import numpy as np

from . import _checks
from ._group_ids import Groups, check_not_tuple
from ._roles import NUM_ROLES, UNLABELED, check_roles
from ._rollouts import PaddedRollouts, RolloutBatch
from ._tcpo import check_alternatives_shape
from ._turns import check_token_turn_shape


def padded_batch(x):
    """The :class:`credax.RolloutBatch` inside ``x`` (a ``PaddedRollouts`` or a batch), else None."""
    if isinstance(x, PaddedRollouts):
        return x.batch
    return x if isinstance(x, RolloutBatch) else None


def _given_batch(fn: str, first: str, value, **given):
    """The batch ``value`` (the argument ``first`` of ``fn``) is, else None; with a batch, the
    arrays in ``given`` must be left out (it holds them)."""
    extra = [k for k, v in given.items() if v is not None]
    batch = padded_batch(value)
    if batch is not None and extra:
        raise TypeError(f"`{fn}`: `{first}` is a PaddedRollouts / RolloutBatch, which already holds "
                        f"`{extra[0]}`; pass either the batch alone or the arrays.")
    return batch


def check_group_ids(group_ids, batch: int) -> None:
    if isinstance(group_ids, Groups):
        # Already dense segment indices: every `group_ids` argument accepts a Groups.
        index = _checks.host_array(group_ids.index, "group_ids.index")
        if index.shape != (batch,):
            raise ValueError(f"`group_ids` (a Groups) must have index shape [B] = ({batch},); "
                             f"got {index.shape}.")
        return
    check_not_tuple(group_ids)  # as the estimators do (credax.groups)
    ids = _checks.host_array(group_ids, "group_ids")
    _checks.check_int(ids, "group_ids")
    _checks.check_shape(ids, "group_ids", (batch,), "[B]")
    if ids.size and (ids.min() < _checks.I32.min or ids.max() > _checks.I32.max):
        bad = int(np.argmax((ids < _checks.I32.min) | (ids > _checks.I32.max)))
        raise ValueError(
            f"`group_ids` must fit in int32 (JAX casts ids to int32 without x64, which would "
            f"silently merge groups); row {bad} has {ids[bad]}. Densify 64-bit hashes first, e.g. "
            "`np.unique(ids, return_inverse=True)[1]`, or pass them through `credax.groups`."
        )


def validate_turns(
    scores,
    turn_mask=None,
    group_ids=None,
    *,
    row_mask=None,
    score_range: tuple[float, float] | None = (0.0, 1.0),
    token_turn=None,
) -> None:
    """Check a turn batch eagerly: shapes, dtypes, id width, score values, mask shape, token map.

    Checks, each raising with the argument's name:

    * ``scores`` is a real ``[B, K]`` array; ``turn_mask`` a ``bool[B, K]``; ``group_ids`` an
      integer ``[B]`` (or a :class:`credax.Groups`) whose values fit in int32 (no silent
      truncation of 64-bit hashes);
    * valid scores are finite and inside ``score_range`` (``None`` skips the range check);
    * ``turn_mask`` is prefix-contiguous and every row has at least one valid turn — every *real*
      row when ``row_mask`` is given: padding rows (``row_mask`` false) must then have no valid
      turn at all;
    * ``token_turn`` (optional) is an integer ``[B, T]`` with values in ``[-1, K)`` that point
      only at valid turns.

    ``validate_turns(padded)`` with the :class:`credax.PaddedRollouts` of
    :func:`credax.pad_rollouts` (or its ``RolloutBatch``) checks its ``scores``, ``turn_mask``,
    ``groups``, ``row_mask`` and ``token_turn``; the array arguments must then be left out.

    Raises:
      TypeError: wrong kind of array (float mask, float ids, traced input), or a batch together
        with array arguments.
      ValueError: wrong shape or values.

    Examples:
      >>> import numpy as np, credax
      >>> credax.validate_turns(np.array([[0.0, 1.0]]), np.array([[True, False]]), np.array([3]))
      >>> credax.validate_turns(np.array([[0.0, 1.0]]), np.array([[False, True]]), np.array([3]))
      Traceback (most recent call last):
      ...
      ValueError: `turn_mask` must be prefix-contiguous (valid turns first, then padding); row 0 has ...
      >>> padded = credax.pad_rollouts([credax.Rollout("p", [credax.Turn([1], 0.5)])] * 3,
      ...                              buckets=credax.Buckets())
      >>> padded.batch.row_mask.tolist()        # three real rows, one padding row
      [True, True, True, False]
      >>> credax.validate_turns(padded)
      >>> b = padded.batch
      >>> credax.validate_turns(b.scores, b.turn_mask, b.groups, row_mask=b.row_mask)
    """
    batch = _given_batch("validate_turns", "scores", scores, turn_mask=turn_mask,
                         group_ids=group_ids, row_mask=row_mask, token_turn=token_turn)
    if batch is not None:
        scores, turn_mask, group_ids = batch.scores, batch.turn_mask, batch.groups
        row_mask, token_turn = batch.row_mask, batch.token_turn
    elif turn_mask is None or group_ids is None:
        missing = "turn_mask" if turn_mask is None else "group_ids"
        raise TypeError(f"`validate_turns` needs `{missing}` (or pass the PaddedRollouts of "
                        "`credax.pad_rollouts` as the only argument).")
    s = _checks.host_array(scores, "scores")
    _checks.check_real(s, "scores", bool_ok=False)
    _checks.check_ndim(s, "scores", 2, "[B, K]")
    m = _checks.host_mask(turn_mask, "turn_mask", s.shape, like="scores")
    check_group_ids(group_ids, s.shape[0])
    real = _checks.row_mask_array(row_mask, s.shape[0], like="scores' rows")
    bounds = _checks.checked_range(score_range, "score_range")
    _checks.check_finite_within(s, m, "scores", bounds, "score_range", "valid turns")
    _checks.check_prefix_mask(m, row_mask=real)
    if token_turn is not None:
        tt = _checks.host_array(token_turn, "token_turn")
        check_token_turn_shape(tt, s.shape[0])
        num_turns = s.shape[1]
        bad = (tt < -1) | (tt >= num_turns)
        if bad.any():
            b, t = _checks.first_index(bad)
            raise ValueError(f"`token_turn` values must lie in [-1, K={num_turns}); "
                             f"token_turn[{b}, {t}] = {tt[b, t]}.")
        rows = np.broadcast_to(np.arange(s.shape[0])[:, None], tt.shape)
        points_at_pad = (tt >= 0) & ~m[rows, np.clip(tt, 0, num_turns - 1)]
        if points_at_pad.any():
            b, t = _checks.first_index(points_at_pad)
            raise ValueError(f"`token_turn` must point at valid turns; token_turn[{b}, {t}] = "
                             f"{tt[b, t]} is a padded turn of row {b}.")


def validate_rewards(
    rewards,
    group_ids=None,
    mask=None,
    *,
    reward_range: tuple[float, float] | None = None,
) -> None:
    """Check a batch of outcome rewards eagerly: ``[B]`` (or ``[B, C]``) rewards, ids, mask.

    The compiled estimators (``grpo_advantages``, ``rloo_advantages``, ``gdpo_advantages``, ...)
    cannot look at values; a NaN or inf reward at a valid row makes NaN of its whole group (see
    the non-finite rule in ``docs/guides/degenerate-input.md``). This is the place to stop it.

    Checks, each raising with the argument's name:

    * ``rewards`` is a real ``[B]`` or ``[B, C]`` array (``C`` reward components, GDPO);
    * ``group_ids`` is an integer ``[B]`` whose values fit in int32 (as ``validate_turns``);
    * ``mask`` (optional) is a ``bool[B]``;
    * rewards of valid rows are finite and inside ``reward_range`` (``None``: no range check).

    ``mask`` is the row mask (GRPO's and RLOO's ``mask``: true = real row). ``validate_rewards(
    padded)`` with a :class:`credax.PaddedRollouts` (or its ``RolloutBatch``) checks its
    ``outcome``, ``groups`` and ``row_mask``; ``group_ids`` and ``mask`` must then be left out.

    Raises:
      TypeError: wrong kind of array (float mask, float ids, traced input), a malformed
        ``reward_range``, or a batch together with array arguments.
      ValueError: wrong shapes, a non-finite or out-of-range reward at a valid row, or a
        ``reward_range`` with ``lo > hi`` or a NaN bound.

    Examples:
      >>> import numpy as np, credax
      >>> credax.validate_rewards(np.array([1.0, 0.0, 0.5]), np.array([4, 4, 9]))
      >>> credax.validate_rewards(np.array([1.0, np.nan, 0.5]), np.array([4, 4, 9]))
      Traceback (most recent call last):
      ...
      ValueError: `rewards` must be finite at valid rows; rewards[1] = nan.
      >>> credax.validate_rewards(np.array([1.0, np.nan]), np.array([4, 4]),
      ...                         np.array([True, False]))   # a masked NaN is fine
      >>> padded = credax.pad_rollouts([credax.Rollout("p", [credax.Turn([1], 0.5)])] * 3,
      ...                              buckets=credax.Buckets())
      >>> credax.validate_rewards(padded)    # 3 real rows, 1 padding row
    """
    batch = _given_batch("validate_rewards", "rewards", rewards, group_ids=group_ids, mask=mask)
    if batch is not None:
        rewards, group_ids, mask = batch.outcome, batch.groups, batch.row_mask
    elif group_ids is None:
        raise TypeError("`validate_rewards` needs `group_ids` (or pass the PaddedRollouts of "
                        "`credax.pad_rollouts` as the only argument).")
    r = _checks.host_real(rewards, "rewards")
    if r.ndim not in (1, 2):
        raise ValueError(f"`rewards` must be [B] (one reward per trajectory) or [B, C] "
                         f"(components); got shape {r.shape}.")
    bounds = _checks.checked_range(reward_range, "reward_range")
    check_group_ids(group_ids, r.shape[0])
    m = _checks.host_mask(mask, "mask", r.shape[:1], like="rewards' rows")
    where = m if r.ndim == 1 else np.broadcast_to(m[:, None], r.shape)
    _checks.check_finite_within(r, where, "rewards", bounds, "reward_range", "valid rows")


def validate_alternatives(
    alt_scores,
    alt_mask=None,
    scores=None,
    *,
    row_mask=None,
    score_range: tuple[float, float] | None = (0.0, 1.0),
) -> None:
    """Check TCPO's counterfactual alternatives eagerly: ``alt_scores[B, K, M]`` and ``alt_mask``.

    Checks, each raising with the argument's name:

    * ``alt_scores`` is a real ``[B, K, M]`` array; with ``scores`` given, its ``[B, K]`` is the
      shape of ``scores``;
    * ``alt_mask`` (optional, default all true) is a ``bool[B, K, M]``;
    * valid alternatives are finite and inside ``score_range`` (``None`` skips the range check).

    Alternatives of padding rows (``row_mask``, ``bool[B]``, false) are not checked. ``scores`` may
    be the :class:`credax.PaddedRollouts` (or ``RolloutBatch``) the alternatives belong to: its
    ``scores`` fix the shape, and alternatives at its padded turns and rows are not checked
    (``row_mask`` must then be left out).

    Raises:
      TypeError: wrong kind of array (float mask, traced input), a malformed ``score_range``, or
        a batch together with ``row_mask``.
      ValueError: wrong shapes, or a non-finite / out-of-range valid alternative.

    Examples:
      >>> import numpy as np, credax
      >>> alt = np.array([[[0.0, 1.0], [0.5, np.inf]]])
      >>> credax.validate_alternatives(alt, np.array([[[True, True], [True, False]]]))
      >>> credax.validate_alternatives(alt)
      Traceback (most recent call last):
      ...
      ValueError: `alt_scores` must be finite at valid alternatives; alt_scores[0, 1, 1] = inf.
    """
    batch = _given_batch("validate_alternatives", "scores", scores, row_mask=row_mask)
    turn_mask = None
    if batch is not None:
        scores, row_mask = batch.scores, batch.row_mask
        turn_mask = _checks.host_array(batch.turn_mask, "scores.turn_mask")
    alt = _checks.host_real(alt_scores, "alt_scores")
    check_alternatives_shape(alt)
    bounds = _checks.checked_range(score_range, "score_range")
    if scores is not None:
        check_alternatives_shape(alt, _checks.host_real(scores, "scores").shape)
    m = _checks.host_mask(alt_mask, "alt_mask", alt.shape, like="alt_scores")
    real = _checks.row_mask_array(row_mask, alt.shape[0], like="alt_scores' rows")
    if real is not None:
        m = m & real[:, None, None]
    if turn_mask is not None:
        m = m & turn_mask[:, :, None]
    _checks.check_finite_within(alt, m, "alt_scores", bounds, "score_range", "valid alternatives")


def validate_roles(roles, turn_mask=None, *, row_mask=None) -> None:
    """Check role codes eagerly (not under ``jit``), raising with the argument's name.

    ``row_mask`` (``bool[B]``, true = real row, as ``RolloutBatch.row_mask``): padding rows from
    :func:`credax.pad_rollouts` must have no valid turn and are exempt from the at-least-one-turn
    rule, as in :func:`credax.validate_turns`. The :class:`credax.PaddedRollouts` of
    :func:`credax.pad_rollouts` (or its ``RolloutBatch``) may stand for its arrays:
    ``validate_roles(padded)`` checks its ``roles``, ``validate_roles(roles, padded)`` the given
    codes against its ``turn_mask``; both with its ``row_mask``.

    Checks:

    * ``roles`` is an integer ``[B, K]`` array and ``turn_mask`` a ``bool[B, K]`` of the same shape;
    * every code at a valid turn lies in ``[-1, 4)`` (``-1`` = unlabeled). The compiled functions
      treat an out-of-range code as unlabeled, which hides a broken judge pipeline: this is where
      it is caught;
    * ``turn_mask`` is prefix-contiguous and every row has a valid turn (as ``validate_turns``).

    Codes at padded turns are **ignored**, whatever they are (``-100``, stale labels, ...): every
    function treats padded turns as absent, so they cannot matter.

    Raises:
      TypeError: non-integer ``roles``, non-boolean ``turn_mask``, or a traced input.
      ValueError: wrong shapes, an out-of-range code at a valid turn, or a bad ``turn_mask``.

    Examples:
      >>> import numpy as np, credax
      >>> mask = np.array([[True, True, False]])
      >>> credax.validate_roles(np.array([[0, -1, 99]]), mask)   # 99 sits on a padded turn
      >>> credax.validate_roles(np.array([[0, 4, -1]]), mask)
      Traceback (most recent call last):
      ...
      ValueError: `roles` must hold codes in [-1, 4) (Role values, ...) at valid turns; roles[0, 1] = 4.
    """
    batch = _given_batch("validate_roles", "roles", roles, turn_mask=turn_mask)
    if batch is not None:
        roles, turn_mask = batch.roles, batch
    batch = _given_batch("validate_roles", "turn_mask", turn_mask, row_mask=row_mask)
    if batch is not None:
        turn_mask, row_mask = batch.turn_mask, batch.row_mask
    if turn_mask is None:
        raise TypeError("`validate_roles` needs `turn_mask` (or pass the PaddedRollouts of "
                        "`credax.pad_rollouts`, alone or after `roles`).")
    r = _checks.host_array(roles, "roles")
    check_roles(r)
    m = _checks.host_mask(turn_mask, "turn_mask", r.shape, like="roles")
    bad = m & ((r < UNLABELED) | (r >= NUM_ROLES))
    if bad.any():
        b, k = _checks.first_index(bad)
        raise ValueError(
            f"`roles` must hold codes in [-1, {NUM_ROLES}) (Role values, -1 = unlabeled) at valid "
            f"turns; roles[{b}, {k}] = {r[b, k]}."
        )
    _checks.check_prefix_mask(m, row_mask=_checks.row_mask_array(row_mask, r.shape[0], like="roles"))

"""Credit diagnostics to log: dead groups against their expectation, anchor-group hits, summaries.

Every statistic goes through the shared grouping primitive (``_group_stats.segment_stats`` and
``groups_from_keys``); nothing here computes a group statistic of its own. All outputs are small
(scalars or ``[K]``/``[R]`` vectors) and carry no gradient.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._api import jit_public
from ._group_ids import Groups, groups_from_keys
from ._group_stats import check_x_and_groups, prepare, segment_stats
from ._grouping import jit_grouped


class DeadGroups(NamedTuple):
    """Fraction of prompts without reward spread, and what i.i.d. Bernoulli rewards would give.

    Attributes:
      fraction: prompts whose valid rewards are all equal (singletons included) / prompts.
      expected: mean over prompts of ``p^n + (1 - p)^n``, ``p`` the batch's mean reward and ``n``
        the prompt's valid rows: the dead fraction if every prompt had success probability ``p``.
        A fraction well above it means the batch mixes prompts that are always or never solved.
      num_groups: prompts with at least one valid row.
    """

    fraction: Array
    expected: Array
    num_groups: Array


class CreditSummary(NamedTuple):
    """Mean, mean absolute value and count of credit per category (turn index or role)."""

    mean: Array
    mean_abs: Array
    count: Array


def _per_group(x, index, num_groups, mask):
    """Count, mean and mean |x| of each of ``num_groups`` segments, as ``[num_groups]`` vectors.

    One masked dummy entry per segment is appended, so the per-entry statistics of the shared
    primitive can be read at the dummies (an empty segment reads 0). A segment holding a
    non-finite valid value reads NaN in ``mean`` and ``mean_abs`` (the non-finite rule); its
    ``count`` is unchanged.
    """
    dummies = jnp.arange(num_groups, dtype=index.dtype)
    x = jnp.concatenate([x, jnp.zeros((num_groups,), x.dtype)])
    idx = jnp.concatenate([index, dummies])
    valid = jnp.concatenate([mask, jnp.zeros((num_groups,), bool)])
    st = segment_stats(x, idx, num_groups, valid)
    abs_st = segment_stats(jnp.abs(x), idx, num_groups, valid)
    n = st.count[-num_groups:]
    nan = jnp.full((num_groups,), jnp.nan, x.dtype)
    bad = st.nonfinite[-num_groups:]  # the segment statistics leave the bad value out: say so
    mean = jnp.where(n > 0, st.mean_value()[-num_groups:], 0)  # set units -> units of x
    mean_abs = jnp.where(n > 0, abs_st.mean_value()[-num_groups:], 0)
    return n, jnp.where(bad, nan, mean), jnp.where(bad, nan, mean_abs)


@jit_grouped()
def dead_groups(
    rewards: Float[Array, " B"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, " B"] | None = None,
) -> DeadGroups:
    """Fraction of dead (zero-spread) prompt groups next to its Bernoulli expectation ``p^G + (1-p)^G``.

    A dead group gives every one of its rows advantage ``0`` under GRPO/RLOO: its rollouts cost
    compute and teach nothing. For binary rewards with success probability ``p`` and ``G`` samples a
    group is dead with probability ``p^G + (1 − p)^G``; ``expected`` averages that over the prompts
    of the batch with ``p`` = the batch mean reward and ``G`` = each prompt's valid row count.

    Args:
      rewards: ``float[B]`` (``expected`` assumes rewards in ``[0, 1]``).
      group_ids: ``int[B]`` prompt ids or a ``Groups``.
      mask: optional ``bool[B]``.

    Returns:
      :class:`DeadGroups` ``(fraction, expected, num_groups)``, float32 scalars. A group holding
      a NaN/±inf valid reward counts as dead (as :func:`credax.degenerate_groups` calls it:
      no usable signal), and ``expected`` is then NaN (``p`` includes that reward). Masked
      rewards are never read.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> r = jnp.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])        # groups of two: dead, live, dead
      >>> d = credax.dead_groups(r, jnp.array([0, 0, 1, 1, 2, 2]))
      >>> # p = 1/2: expected 1/4 + 1/4 = 1/2
      >>> round(float(d.fraction), 4), round(float(d.expected), 4), int(d.num_groups)
      (0.6667, 0.5, 3)

    References:
      DAPO (arXiv 2503.14476) filters such groups ("dynamic sampling"); the expectation is the
      binomial probability of ``G`` equal outcomes.
    """
    r, mask, _ = prepare(rewards, group_ids, mask, "rewards")
    _checks.check_ndim(r, "rewards", 1, "[B]")
    st = segment_stats(r, group_ids.index, group_ids.num_groups, mask)
    inv_n = _numeric.safe_div(jnp.ones_like(st.count), st.count, mask & (st.count > 0))
    num = jnp.sum(inv_n)  # each prompt's rows add up to 1
    # A group holding a non-finite valid reward is dead, as `degenerate_groups` calls it: it
    # carries no usable signal (its advantages are NaN), whatever its finite members are.
    dead = jnp.sum(jnp.where(st.constant | st.nonfinite, inv_n, 0))
    total = jnp.sum(mask, dtype=r.dtype)
    p = _numeric.safe_div(jnp.sum(jnp.where(mask, r, 0)), total, total > 0)
    p = jnp.where(jnp.isfinite(p), p, jnp.full_like(p, jnp.nan))  # p includes every valid reward
    expected_g = p ** st.count + (1 - p) ** st.count
    expected = jnp.sum(inv_n * expected_g)
    sg = jax.lax.stop_gradient
    return DeadGroups(sg(_numeric.safe_div(dead, num, num > 0)),
                      sg(_numeric.safe_div(expected, num, num > 0)), num)


@jit_grouped(anchors=True)  # 64-bit anchors are densified exactly on the host, as GiGPO's
def anchor_hit_ratio(
    anchor_ids: Int[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups,
) -> Float[Array, ""]:
    """GiGPO's anchor-group hit ratio: the fraction of valid steps whose (prompt, anchor) group has
    another member — the steps that receive a nonzero-capable step advantage.

    Args:
      anchor_ids: ``int[B, K]`` hashed observation of each step.
      turn_mask: ``bool[B, K]``.
      group_ids: ``int[B]`` prompt ids or a ``Groups``.

    Returns:
      float32 scalar in ``[0, 1]`` (``0`` without valid steps).

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> anchors = jnp.array([[5, 8], [5, 9]])          # both start in state 5
      >>> float(credax.anchor_hit_ratio(anchors, jnp.ones((2, 2), bool), jnp.array([0, 0])))
      0.5

    References:
      GiGPO (arXiv 2505.10978), the step-group statistics it reports.
    """
    anchors = _checks.as_index_array(anchor_ids, "anchor_ids")
    _checks.check_ndim(anchors, "anchor_ids", 2, "[B, K]")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", anchors.shape)
    n = anchors.size
    check_x_and_groups(anchors, group_ids, "anchor_ids")
    prompt = jnp.broadcast_to(group_ids.index[:, None], anchors.shape).reshape(n)
    flat_mask = turn_mask.reshape(n)
    g = groups_from_keys(prompt, anchors.reshape(n), valid=flat_mask)
    st = segment_stats(jnp.zeros((n,), jnp.float32), g.index, g.num_groups, flat_mask)
    hits = jnp.sum(flat_mask & (st.count > 1), dtype=jnp.float32)
    total = jnp.sum(flat_mask, dtype=jnp.float32)
    return _numeric.safe_div(hits, total, total > 0)


@jit_public()
def credit_by_turn(
    credit: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
) -> CreditSummary:
    """Credit summary per turn index: mean, mean ``|credit|`` and count over valid turns, ``[K]``.

    A turn index with a NaN/±inf credit at a valid turn has NaN ``mean`` and ``mean_abs`` (its
    ``count`` is unchanged); the other indices are as without it. Masked turns are never read.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> s = credax.credit_by_turn(jnp.array([[1.0, -2.0], [3.0, 0.0]]),
      ...                           jnp.array([[True, True], [True, False]]))
      >>> s.mean, s.mean_abs, s.count
      (Array([ 2., -2.], dtype=float32), Array([2., 2.], dtype=float32), Array([2., 1.], dtype=float32))
    """
    c = _checks.as_float_array(credit, "credit")
    _checks.check_ndim(c, "credit", 2, "[B, K]")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", c.shape)
    c = jax.lax.stop_gradient(c.astype(_numeric.compute_dtype(c.dtype)))
    batch, num_turns = c.shape
    turn = jnp.broadcast_to(jnp.arange(num_turns, dtype=jnp.int32), c.shape).reshape(-1)
    n, mean, mean_abs = _per_group(c.reshape(-1), turn, num_turns, turn_mask.reshape(-1))
    return CreditSummary(mean, mean_abs, n)


@jit_public(static_argnames=("num_roles",))
def credit_by_role(
    credit: Float[Array, "B K"],
    roles: Int[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    num_roles: int = 4,
) -> CreditSummary:
    """Credit summary per role code ``0..num_roles-1`` (TRIAGE roles by default), ``[R]``.

    Unlabeled turns (``-1``) and codes outside ``[0, num_roles)`` are not counted. A role with a
    NaN/±inf credit at a counted turn has NaN ``mean`` and ``mean_abs`` (its ``count`` is
    unchanged); the other roles are as without it. Masked and uncounted turns are never read.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> s = credax.credit_by_role(jnp.array([[1.0, -0.5, 0.2]]), jnp.array([[0, 3, -1]]),
      ...                           jnp.ones((1, 3), bool))
      >>> s.mean, s.count
      (Array([ 1. ,  0. ,  0. , -0.5], dtype=float32), Array([1., 0., 0., 1.], dtype=float32))
    """
    num_roles = _checks.check_static_int(num_roles, "num_roles", minimum=1)
    c = _checks.as_float_array(credit, "credit")
    _checks.check_ndim(c, "credit", 2, "[B, K]")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", c.shape)
    roles = _checks.as_index_array(roles, "roles")  # int8 codes compared with num_roles: widen
    _checks.check_shape(roles, "roles", c.shape, "[B, K]")
    c = jax.lax.stop_gradient(c.astype(_numeric.compute_dtype(c.dtype)))
    known = turn_mask & (roles >= 0) & (roles < num_roles)
    index = jnp.where(known, roles, 0).astype(jnp.int32).reshape(-1)
    n, mean, mean_abs = _per_group(c.reshape(-1), index, num_roles, known.reshape(-1))
    return CreditSummary(mean, mean_abs, n)

"""Shrinkage baselines: each prompt's mean reward shrunk toward the across-prompt mean (James–Stein).

With few generations per prompt (4-16), the per-prompt mean GRPO and RLOO subtract is a noisy
estimate of the prompt's expected reward. Stein's paradox says that, for three or more prompts,
pulling every per-prompt mean toward the across-prompt mean by a data-driven amount lowers the
total squared error of the estimates; as a baseline this lowers the variance of the policy
gradient (Zeng et al. 2025, arXiv 2511.03710). The statistics come from the shared grouping
primitive (``_group_stats.segment_stats``); the across-prompt quantities are batch sums in which every
row of a prompt weighs ``1 / n_p``, so each prompt counts once.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._group_ids import Groups
from ._group_stats import _pow2, _unit_exponent, prepare, segment_stats
from ._grouping import jit_grouped


class Shrinkage(NamedTuple):
    """A shrinkage baseline and its parts.

    Attributes:
      baseline: ``float[B]`` the shrunk baseline of each row; ``0`` at masked rows.
      shrinkage: ``float[B]`` the coefficient ``c`` of each row's prompt (0: the per-prompt mean,
        1: the across-prompt mean).
      grand_mean: scalar, the across-prompt mean (the mean of the per-prompt means).
    """

    baseline: Array
    shrinkage: Array
    grand_mean: Array


def _shrinkage(r, g: Groups, mask, leave_one_out: bool):
    """Shrinkage baseline on prepared ``r[B]`` (compute dtype, bool mask).

    Everything is computed in *batch units*: values divided by ``u``, an exact power of two near
    the batch's largest finite magnitude, so the squared spreads can neither overflow (rewards of
    ``1e20`` squared are ``1e40``, beyond float32) nor underflow (``1e-20`` squared is ``0``, which
    read as "identical prompt means" gave ``c = 1``) for any finite input. ``c`` is a ratio of two
    quantities in units squared and does not change; dividing by a power of two is exact, so for
    ordinary rewards the statistics are bit-identical to the unscaled computation. A NaN/±inf reward
    at a valid row enters the grand mean and the pooled variance: every valid output is NaN.
    """
    dt = r.dtype
    st = segment_stats(r, g.index, g.num_groups, mask)
    finite_valid = mask & jnp.isfinite(r)
    absmax = jnp.max(jnp.where(finite_valid, jnp.abs(r), jnp.zeros_like(r)), initial=0.0)
    e = _unit_exponent(jax.lax.stop_gradient(absmax))
    u, inv_u = _pow2(e, dt), _pow2(-e, dt)
    to_batch = st.unit * inv_u  # set units -> batch units (a power of two)
    n = st.count
    mu = st.shift * inv_u + st.mean * to_batch  # per-prompt mean at each row, batch units
    inv_n = _numeric.safe_div(jnp.ones_like(n), n, mask & (n > 0))
    prompts = jnp.sum(inv_n)  # P: each prompt's rows add up to 1
    grand = _numeric.safe_div(jnp.sum(inv_n * mu), prompts, prompts > 0)
    spread = jnp.sum(inv_n * jnp.square(jnp.where(mask, mu - grand, jnp.zeros_like(mu))))  # Σ_p
    # Pooled within-prompt variance: Σ (r - μ_p)² / Σ_p (n_p - 1); sum_sq is per prompt, so the
    # 1/n_p weights sum it once per prompt.
    within_dof = jnp.sum(mask, dtype=dt) - prompts
    sum_sq = st.sum_sq * to_batch * to_batch  # batch units squared
    sigma2 = _numeric.safe_div(jnp.sum(inv_n * sum_sq), within_dof, within_dof > 0.5)
    # The noise variance of the estimate being shrunk: σ²/n (the prompt mean) or σ²/(n-1) (the
    # mean of the others, RLOO).
    m = n - 1 if leave_one_out else n
    noise = _numeric.safe_div(sigma2 * jnp.ones_like(m), m, m > 0)
    factor = jnp.maximum(prompts - 3, 0)
    c = jnp.where(spread > 0, _numeric.safe_div(factor * noise, spread, spread > 0),
                  jnp.where(factor > 0, jnp.ones_like(noise), jnp.zeros_like(noise)))
    c = jnp.where(m > 0, jnp.clip(c, 0, 1), jnp.ones_like(c))  # no peer at all: the grand mean
    c = jnp.where(within_dof > 0.5, c, jnp.where(m > 0, jnp.zeros_like(c), c))
    if leave_one_out:
        own = (st.shifted - st.mean) * to_batch  # r_i - μ_p (exact 0 for a constant prompt)
        estimate = mu - _numeric.safe_div(own, n - 1, n > 1)  # mean of the others
    else:
        estimate = mu
    # (1 - c)·μ̂ + c·μ̄: exactly μ̂ at c = 0 and μ̄ at c = 1, however far apart they are.
    baseline = ((1 - c) * estimate + c * grand) * u
    grand = grand * u
    # A valid non-finite reward is in every prompt's formula (through μ̄ and σ²).
    poisoned = jnp.any(mask & ~finite_valid)
    nan = jnp.full_like(baseline, jnp.nan)
    baseline, c = jnp.where(poisoned, nan, baseline), jnp.where(poisoned, nan, c)
    grand = jnp.where(poisoned, jnp.nan, grand)
    zero = jnp.zeros_like(baseline)
    return jnp.where(mask, baseline, zero), jnp.where(mask, c, zero), grand


@jit_grouped(static_argnames=("leave_one_out",))
def shrinkage_baseline(
    rewards: Float[Array, " B"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, " B"] | None = None,
    *,
    leave_one_out: bool = False,
) -> Shrinkage:
    """James–Stein shrinkage baseline: ``b_i = μ̄ + (1 − c_p)(μ̂_i − μ̄)``.

    For the ``P`` prompts of the batch with ``n_p`` valid rows each::

        μ_p  = mean of prompt p's rewards           μ̄ = (1/P) Σ_p μ_p        (each prompt once)
        σ²   = Σ_p Σ_i (r_i − μ_p)² / Σ_p (n_p − 1)  pooled within-prompt variance
        μ̂_i  = μ_p (GRPO), or the mean of the *other* rows of the prompt (``leave_one_out``, RLOO)
        m_p  = n_p, or n_p − 1 with ``leave_one_out``
        c_p  = clip((P − 3) · (σ² / m_p) / Σ_p (μ_p − μ̄)², 0, 1)            positive-part JS

    Degenerate cases, defined: fewer than four prompts give ``c = 0`` (no shrinkage: Stein's
    gain needs ``P ≥ 3`` with an estimated grand mean); identical prompt means give ``c = 1`` (for
    ``P ≥ 4``); no within-prompt degrees of freedom (every prompt a singleton) give ``c = 0``; a row
    with no other row of its prompt under ``leave_one_out`` gets the across-prompt mean (``c = 1``).

    Args:
      rewards: ``float[B]`` one reward per trajectory.
      group_ids: ``int[B]`` prompt of each row, or a ``Groups``.
      mask: optional ``bool[B]`` real rows.
      leave_one_out: static; shrink the mean of the other rows (RLOO) instead of the prompt mean.

    Returns:
      :class:`Shrinkage` ``(baseline, shrinkage, grand_mean)``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> r = jnp.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0])   # four prompts of two
      >>> out = credax.shrinkage_baseline(r, jnp.array([0, 0, 1, 1, 2, 2, 3, 3]))
      >>> # μ_p = (1, .5, 0, .5), μ̄ = .5, Σ(μ_p − μ̄)² = .5, σ² = (0 + .5 + 0 + .5)/4 = .25,
      >>> # c = (4 − 3)·(.25/2)/.5 = .25 -> b = .5 + .75·(μ_p − .5)
      >>> [round(float(b), 4) for b in out.baseline[::2]], round(float(out.shrinkage[0]), 4)
      ([0.875, 0.5, 0.125, 0.5], 0.25)

    References:
      Zeng, Zhou, Arora, Zanette 2025, "Shrinking the Variance: Shrinkage Baselines for RLVR"
      (arXiv 2511.03710); James & Stein 1961. *(reading)* credax uses the classical positive-part
      James–Stein coefficient with a pooled within-prompt variance and the mean of prompt means as
      the target; the paper's exact estimator may differ in these choices.
    """
    if not isinstance(leave_one_out, bool):
        raise TypeError(f"`leave_one_out` must be a Python bool; got {leave_one_out!r}.")
    r, mask, out_dtype = prepare(rewards, group_ids, mask, "rewards")
    _checks.check_ndim(r, "rewards", 1, "[B]")
    b, c, grand = _shrinkage(r, group_ids, mask, leave_one_out)
    return Shrinkage(b.astype(out_dtype), c.astype(out_dtype), grand.astype(out_dtype))


@jit_grouped(static_argnames=("leave_one_out",))
def shrinkage_advantages(
    rewards: Float[Array, " B"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, " B"] | None = None,
    *,
    leave_one_out: bool = False,
) -> Float[Array, " B"]:
    """Outcome advantages against the shrinkage baseline: ``A_i = r_i − b_i``.

    A drop-in for Dr. GRPO (``leave_one_out=False``: ``r − mean``) and RLOO
    (``leave_one_out=True``: ``r − mean of the others``) with :func:`shrinkage_baseline` in place
    of the per-prompt mean. Unlike a per-prompt mean, the shrunk baseline of a prompt whose rows
    all scored alike is not their score, so such a prompt gets a (small) nonzero advantage: it
    was easier or harder than the batch suggests. No std scaling is applied (divide by your own
    scale if you need GRPO's).

    Returns:
      ``float[B]``; ``0`` at masked rows.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> r = jnp.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
      >>> a = credax.shrinkage_advantages(r, jnp.array([0, 0, 1, 1, 2, 2, 3, 3]))
      >>> [round(float(x), 4) for x in a]
      [0.125, 0.125, -0.5, 0.5, -0.125, -0.125, 0.5, -0.5]

    References:
      arXiv 2511.03710 (see :func:`shrinkage_baseline`).
    """
    if not isinstance(leave_one_out, bool):
        raise TypeError(f"`leave_one_out` must be a Python bool; got {leave_one_out!r}.")
    r, mask, out_dtype = prepare(rewards, group_ids, mask, "rewards")
    _checks.check_ndim(r, "rewards", 1, "[B]")
    b, _, _ = _shrinkage(r, group_ids, mask, leave_one_out)
    return jnp.where(mask, r - b, jnp.zeros_like(r)).astype(out_dtype)

"""REINFORCE++, REINFORCE++-baseline and GPG: verl's critic-free estimators with batch statistics.

Unlike GRPO's per-prompt z-score, the two REINFORCE++ estimators whiten over every valid *token* of
the batch (a long response weighs in proportion to its length), and GPG rescales by the fraction of
the batch with a nonzero reward. Each is written from verl 0.9.1's ``core_algos.py``
(``compute_reinforce_plus_plus_outcome_advantage``,
``compute_reinforce_plus_plus_baseline_outcome_advantage``, ``compute_gpg_outcome_advantage``) and
checked against it in ``tests/test_reinforce.py``. Every statistic goes through the grouping
primitive (the whole batch of tokens is one group).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _collectives, _numeric
from ._api import jit_public
from ._checks import Finite, Positive, Unit
from ._collectives import AxisName
from ._group_ids import Groups
from ._group_stats import prepare
from ._grouping import jit_grouped, normalization_or, normalize_with_groups
from ._normalization import MOVED_TO_NORMALIZATION, Normalization, as_normalization

# verl_F.masked_whiten: (x - mean) * rsqrt(var + 1e-8), the variance unbiased over the tokens.
WHITEN = Normalization(ddof=1, eps=1e-8, eps_mode="sqrt")
# verl's per-prompt mean of REINFORCE++-baseline and GPG: self-inclusive, a prompt of one keeps its
# score (mean 0), no std division.
_MEAN_OR_ZERO = Normalization(scale="none", eps=0.0, singleton="raw")


def _whiten_tokens(x: jax.Array, mask: jax.Array, opts: Normalization,
                   axis_name: AxisName = None) -> jax.Array:
    """``x[B, T]`` normalised over all its valid tokens as one set (verl's ``masked_whiten``);
    with ``axis_name``, over the valid tokens of every shard of that mesh axis."""
    if axis_name is not None:
        return _whiten_across(x, mask, opts, axis_name)
    n = x.size
    if n == 0:
        return x
    batch = Groups(jnp.zeros((n,), jnp.int32), 1, n)  # one contiguous group: a reduction
    return normalize_with_groups(x.reshape(n), batch, mask.reshape(n), opts).reshape(x.shape)


def _whiten_across(x: jax.Array, mask: jax.Array, opts: Normalization,
                   axis_name: AxisName) -> jax.Array:
    """:func:`_whiten_tokens` with the set spread over mesh axis ``axis_name`` (inside
    ``jax.shard_map``): the rule of ``normalize_with_groups`` for one set, its count, sum and sum
    of squared deviations ``psum``-ed (two passes: the mean first, then the squares about it), its
    constancy a ``pmax``/``pmin``. Equal to the unsharded whitening to float32 rounding; a shard
    whose tokens are all masked contributes nothing and gets ``0``. Six scalar collectives."""
    dt = x.dtype
    finite = jnp.isfinite(x)
    n = _collectives.axis_sum(mask, axis_name, dtype=dt)
    bad = _collectives.axis_sum(mask & ~finite, axis_name, dtype=dt) > 0
    eps = _checks.scalar(opts.eps, dt, "eps")
    bad = bad | ~((eps >= 0) & jnp.isfinite(eps))
    ok = mask & finite
    clean = jnp.where(ok, x, jnp.zeros_like(x))
    mean = _numeric.safe_div(_collectives.axis_sum(clean, axis_name), n, n > 0)
    centred = jnp.where(ok, x - mean, jnp.zeros_like(x))
    high = _collectives.axis_max(jnp.where(ok, x, jnp.full_like(x, -jnp.inf)), axis_name)
    low = _collectives.axis_min(jnp.where(ok, x, jnp.full_like(x, jnp.inf)), axis_name)
    constant = high == low
    if opts.leave_one_out:
        centred = centred * _numeric.safe_div(n, n - 1, n > 1)
    num = centred if opts.center else clean
    if opts.scale == "none":
        out = num
    else:
        dof = n - opts.ddof
        var = _numeric.safe_div(_collectives.axis_sum(centred * centred, axis_name), dof, dof > 0)
        if opts.eps_mode == "add":
            den = _numeric.safe_sqrt(var) + eps
        else:
            den = _numeric.safe_sqrt(var + eps)
        out = _numeric.safe_div(num, den, (den > 0) & ~constant)
        out = jnp.where(constant, num, out)
    single = (jnp.zeros_like(x) if opts.singleton == "zero" else
              x if opts.singleton == "raw" else centred)
    out = jnp.where((n <= 1) | (n - opts.ddof <= 0), single, out)
    out = jnp.where(bad, jnp.full_like(out, jnp.nan), out)
    return jnp.where(mask, out, jnp.zeros_like(out))


def _token_returns(r: jax.Array, mask: jax.Array, gamma: jax.Array) -> jax.Array:
    """``G_t = r_t + γ G_{t'}`` with ``t'`` the next *valid* token: masked tokens (tool
    observations) carry the running return through undiscounted and get ``0`` (verl#6376)."""
    r = jnp.where(mask, r, jnp.zeros_like(r))

    def step(carry, col):
        r_t, m_t = col
        new = r_t + gamma * carry
        return jnp.where(m_t, new, carry), jnp.where(m_t, new, jnp.zeros_like(new))

    _, g = jax.lax.scan(step, jnp.zeros_like(r[:, 0]), (r.T, mask.T), reverse=True)
    return g.T


def _token_inputs(x, response_mask, name):
    x = _checks.as_float_array(x, name)
    _checks.check_ndim(x, name, 2, "[B, T]")
    mask = _checks.as_mask(response_mask, "response_mask", x.shape)
    return x.astype(_numeric.compute_dtype(x.dtype)), mask, _numeric.output_dtype(x.dtype)


@jit_public(static_argnames=("axis_name",),
            convert={"normalization": as_normalization}, replicate=True,
            hints=MOVED_TO_NORMALIZATION)
def reinforce_pp_advantages(
    token_rewards: Float[Array, "B T"],
    response_mask: Bool[Array, "B T"],
    *,
    gamma: Unit = 1.0,
    normalization: Normalization | None = None,
    axis_name: str | tuple[str, ...] | None = None,
) -> Float[Array, "B T"]:
    """REINFORCE++ (verl ``reinforce_plus_plus``): token returns, whitened over the batch's tokens.

    ::

        G_{i,t} = r_{i,t} + γ G_{i,t'}      t' the next valid token of row i (0 after the last)
        A_{i,t} = (G_{i,t} - μ) / sqrt(σ² + 1e-8)    μ, σ² (unbiased) over every valid token

    Masked tokens inside a response (tool observations) are skipped: the running return passes
    through them undiscounted, as in verl 0.9.1 (verl-project/verl#6376). The whitening is
    :func:`credax.group_normalize` over one set, every valid token of the batch, with
    ``normalization`` (default ``Normalization(ddof=1, eps=1e-8, eps_mode="sqrt")``, verl's
    ``masked_whiten``); ``scale="none"`` only centres. Where verl differs: a batch of one valid
    token (verl raises) gives ``0``, and a batch whose returns are all equal gives exactly ``0``
    (verl: ``(x - μ)·10⁴``, a float residue of ``x - μ`` times ``10⁴``).

    Args:
      token_rewards: ``float[B, T]`` per-token rewards (the outcome on the last response token,
        REINFORCE++'s per-token KL penalty folded in if you use it). Masked values never matter.
      response_mask: ``bool[B, T]`` tokens the policy generated.
      gamma: discount in ``[0, 1]``; may be traced. verl's ``algorithm.gamma`` (default 1).
      normalization: the whitening, a :class:`credax.Normalization` over the batch's tokens.
      axis_name: static; inside ``jax.shard_map`` with the batch's rows split over mesh axis
        ``axis_name``, whiten over the tokens of every shard (count, mean and spread ``psum``-ed;
        equal to the unsharded call to float32 rounding; a shard with no valid token gets 0).
        ``None`` (default): over this call's tokens.

    Returns:
      ``float[B, T]``; ``0`` at masked tokens.

    Raises:
      TypeError: non-numeric rewards, non-boolean mask. ValueError: shapes, ``gamma``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> r = jnp.array([[0.0, 1.0], [0.0, 0.0]])
      >>> # G = [1, 1], [0, 0]: μ = .5, σ² = 1/3 -> ±.5 / .57735 = ±.866
      >>> a = credax.reinforce_pp_advantages(r, jnp.ones((2, 2), bool))
      >>> [[round(float(v), 4) for v in row] for row in a]
      [[0.866, 0.866], [-0.866, -0.866]]

    References:
      Hu 2025, REINFORCE++ (arXiv 2501.03262); verl 0.9.1
      ``compute_reinforce_plus_plus_outcome_advantage``.
    """
    r, mask, out_dtype = _token_inputs(token_rewards, response_mask, "token_rewards")
    if r.shape[1] == 0:  # no tokens: an empty [B, 0]
        return jnp.zeros(r.shape, out_dtype)
    _collectives.check_axis_name(axis_name)
    g = _token_returns(r, mask, _checks.scalar(gamma, r.dtype, "gamma"))
    return _whiten_tokens(g, mask, normalization_or(normalization, WHITEN),
                          axis_name).astype(out_dtype)


@jit_grouped(static_argnames=("axis_name",))
def reinforce_pp_baseline_advantages(
    rewards: Float[Array, " B"],
    group_ids: Int[Array, " B"] | Groups,
    response_mask: Bool[Array, "B T"],
    *,
    normalization: Normalization | None = None,
    axis_name: str | tuple[str, ...] | None = None,
) -> Float[Array, "B T"]:
    """REINFORCE++-baseline (verl ``reinforce_plus_plus_baseline``): prompt mean, token whitening.

    ::

        c_i     = r_i - mean_{j in prompt(i)} r_j        (c_i = r_i for a prompt of one)
        A_{i,t} = (c_i - μ) / sqrt(σ² + 1e-8)            μ, σ² (unbiased) over every valid token

    i.e. ``c_i`` broadcast to row ``i``'s response tokens and whitened over all valid tokens of the
    batch, so a row weighs in ``μ`` and ``σ`` in proportion to its length. ``normalization`` is
    the whitening (default verl's ``masked_whiten``, as :func:`reinforce_pp_advantages`); the
    per-prompt mean is fixed (self-inclusive, no std). A row with no valid token takes part in
    the prompt mean (verl counts every row) and gets ``0``. Degenerate batches as
    :func:`reinforce_pp_advantages` (exact ``0`` where verl raises or keeps a residue).

    Args:
      rewards: ``float[B]`` one outcome reward per response (verl sums the token rewards).
      group_ids: ``int[B]`` prompt of each row (any integers), or a ``Groups``.
      response_mask: ``bool[B, T]`` response tokens.
      normalization: the token whitening, a :class:`credax.Normalization`.
      axis_name: static; inside ``jax.shard_map`` with the batch's rows split over mesh axis
        ``axis_name`` (whole prompt groups on each shard: the prompt mean stays local), whiten
        over the tokens of every shard (count, mean and spread ``psum``-ed; equal to the
        unsharded call to float32 rounding; a shard with no valid token gets 0). ``None``
        (default): over this call's tokens.

    Returns:
      ``float[B, T]``; ``0`` at masked tokens.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> mask = jnp.array([[True, True], [True, False], [True, True]])
      >>> a = credax.reinforce_pp_baseline_advantages(jnp.array([1.0, 0.0, 2.0]),
      ...                                             jnp.array([0, 0, 5]), mask)
      >>> # c = .5, -.5, 2 (prompt 5 alone); tokens (.5, .5, -.5, 2, 2): μ = .9, σ² = 1.175
      >>> [[round(float(v), 4) for v in row] for row in a]
      [[-0.369, -0.369], [-1.2915, 0.0], [1.0148, 1.0148]]

    References:
      Hu 2025, REINFORCE++ (arXiv 2501.03262); verl 0.9.1
      ``compute_reinforce_plus_plus_baseline_outcome_advantage``.
    """
    _checks.check_ndim(_checks.as_float_array(rewards, "rewards"), "rewards", 1, "[B]")
    xc, _, out_dtype = prepare(rewards, group_ids, None, "rewards")
    raw_mask = jnp.asarray(response_mask)
    _checks.check_ndim(raw_mask, "response_mask", 2, "[B, T]")
    mask = _checks.as_mask(response_mask, "response_mask", (xc.shape[0], raw_mask.shape[1]))
    c = normalize_with_groups(xc, group_ids, jnp.ones(xc.shape, bool), _MEAN_OR_ZERO)
    tokens = jnp.broadcast_to(c[:, None], mask.shape)
    _collectives.check_axis_name(axis_name)
    return _whiten_tokens(tokens, mask, normalization_or(normalization, WHITEN),
                          axis_name).astype(out_dtype)


@jit_grouped(static_argnames=("axis_name",))
def gpg_advantages(
    rewards: Float[Array, " B"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, " B"] | None = None,
    *,
    f_norm: Positive = 1.0,
    alpha: Finite | None = None,
    axis_name: str | tuple[str, ...] | None = None,
) -> Float[Array, " B"]:
    """GPG (verl ``gpg``): prompt-centred reward, rescaled by the batch's share of nonzero rewards.

    ::

        α   = B / max(#{i : r_i ≠ 0}, 1)                (over the valid rows; all rows in verl)
        A_i = α · (r_i - mean_{j in prompt(i)} r_j) / f_norm     (mean 0 for a prompt of one)

    No std division (verl computes the std and does not use it). ``α`` compensates for the
    batch's zero-reward rows, as verl does; pass ``alpha`` to fix it instead (verl's own
    ``alpha`` argument is overwritten by the count). A constant prompt gives exactly ``0``.

    Args:
      rewards: ``float[B]`` one reward per response.
      group_ids: ``int[B]`` prompt of each row, or a ``Groups``.
      mask: ``bool[B]`` valid rows; the others get ``0`` and enter neither the means nor ``α``.
      f_norm: positive divisor; may be traced. verl's default 1.
      alpha: a fixed ``α`` (may be traced); ``None`` (default) counts it as above.
      axis_name: static; inside ``jax.shard_map`` with the rows split over mesh axis
        ``axis_name`` (whole prompt groups on each shard), ``α`` counts the rows of every shard
        (two ``psum``-ed counts; equal to the unsharded call). ``None``: this call's rows.

    Returns:
      ``float[B]`` (constant over each response's tokens: broadcast it as any ``[B]`` advantage).

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> # B = 4, two nonzero rewards: α = 2; prompt means .5 and .25
      >>> credax.gpg_advantages(jnp.array([1.0, 0.0, 0.5, 0.0]), jnp.array([0, 0, 1, 1]))
      Array([ 1. , -1. ,  0.5, -0.5], dtype=float32)

    References:
      Chu et al. 2025, GPG (arXiv 2504.02546); verl 0.9.1 ``compute_gpg_outcome_advantage``.
    """
    _checks.check_ndim(_checks.as_float_array(rewards, "rewards"), "rewards", 1, "[B]")
    xc, mask, out_dtype = prepare(rewards, group_ids, mask, "rewards")
    dt = xc.dtype
    centred = normalize_with_groups(xc, group_ids, mask, _MEAN_OR_ZERO)
    _collectives.check_axis_name(axis_name)
    if alpha is None:
        valid = _collectives.axis_sum(mask, axis_name, dtype=dt)
        nonzero = _collectives.axis_sum(mask & (xc != 0), axis_name, dtype=dt)
        alpha_ = valid / jnp.maximum(nonzero, 1.0)
    else:
        alpha_ = _checks.scalar(alpha, dt, "alpha")
    out = centred * (alpha_ / _checks.scalar(f_norm, dt, "f_norm"))
    return jnp.where(mask, out, jnp.zeros_like(out)).astype(out_dtype)

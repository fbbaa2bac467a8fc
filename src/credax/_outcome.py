"""Outcome advantages: one reward per trajectory, compared within its prompt group.

Every estimator here is :func:`credax.group_normalize` with fixed options; none normalises
implicitly beyond what its docstring states (no hidden batch whitening, amazon-science/reskill#12). Rows are
trajectories; a trajectory is never split over rows, so each counts once in every baseline.
credax never drops rows: degenerate groups get a defined value and :func:`degenerate_groups`
returns the mask a caller filters on.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks
from ._group_ids import Groups
from ._group_stats import prepare, segment_stats
from ._grouping import jit_grouped, normalization_or, normalize_with_groups
from ._normalization import Normalization


def _check_outcome(rewards, name: str = "rewards") -> None:
    rewards = jnp.asarray(rewards)
    if rewards.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, shape [B] (one reward per trajectory); "
                         f"got shape {rewards.shape}.")


@jit_grouped()
def grpo_advantages(
    rewards: Float[Array, " B"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, " B"] | None = None,
    *,
    normalization: Normalization | None = None,
) -> Float[Array, " B"]:
    """Group-normalised outcome advantage (GRPO): ``A_i = (r_i - μ_g) / (σ_g + eps)``.

    The options are those of :func:`credax.group_normalize`, as one :class:`credax.Normalization`
    (``normalization=``); ``Normalization(scale="none")`` is Dr. GRPO (``r_i - μ_g``),
    ``scale="batch"`` is TRL's ``scale_rewards="batch"``. Presets reproducing the peers exactly:
    ``grpo_advantages(r, ids, normalization=credax.presets.VERL)`` (or ``presets.TRL``).

    Args:
      rewards: ``float[B]`` one outcome reward per trajectory.
      group_ids: ``int[B]`` prompt id per trajectory (any integers), or a ``Groups``.
      mask: ``bool[B]`` valid trajectories (e.g. reward not missing); others get ``0`` and do not
        enter any statistic.
      normalization: a :class:`credax.Normalization` (``None``: ``Normalization()``), as
        :func:`credax.group_normalize` (its ``eps`` may be traced, the rest is static).

    Returns:
      ``float[B]``; constant groups give exactly ``0``, singletons ``0`` (default), masked ``0``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> r = jnp.array([1.0, 0.0, 1.0, 1.0, 0.7])
      >>> ids = jnp.array([0, 0, 1, 1, 2])
      >>> credax.grpo_advantages(r, ids, normalization=credax.Normalization(eps=0.0))
      Array([ 0.70710677, -0.70710677,  0.        ,  0.        ,  0.        ], dtype=float32)

    References:
      Shao et al. 2024, DeepSeekMath (arXiv 2402.03300); Liu et al. 2025, Dr. GRPO (arXiv
      2503.20783). verl ``compute_grpo_outcome_advantage``; TRL ``GRPOTrainer``.
    """
    _check_outcome(rewards)
    xc, mask, out_dtype = prepare(rewards, group_ids, mask, "rewards")
    opts = normalization_or(normalization)
    return normalize_with_groups(xc, group_ids, mask, opts).astype(out_dtype)


@jit_grouped(static_argnames=("singleton",))
def rloo_advantages(
    rewards: Float[Array, " B"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, " B"] | None = None,
    *,
    singleton: str = "zero",
) -> Float[Array, " B"]:
    """REINFORCE leave-one-out advantage: ``A_i = r_i - mean_{j≠i} r_j = n/(n-1) (r_i - μ)``.

    A trajectory alone in its group has no baseline: ``singleton="zero"`` gives ``0`` (default;
    verl's vectorised RLOO), ``"raw"`` keeps ``r_i`` (verl's loop RLOO). No std division.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.rloo_advantages(jnp.array([1.0, 0.0, 0.5, 3.0]), jnp.array([4, 4, 4, 8]))
      Array([ 0.75, -0.75,  0.  ,  0.  ], dtype=float32)

    References:
      Ahmadian et al. 2024 (arXiv 2402.14740); Kool et al. 2019.
    """
    _check_outcome(rewards)
    xc, mask, out_dtype = prepare(rewards, group_ids, mask, "rewards")
    opts = Normalization(scale="none", eps=0.0, singleton=singleton, leave_one_out=True)
    out = normalize_with_groups(xc, group_ids, mask, opts)
    return out.astype(out_dtype)


@jit_grouped()
def gdpo_advantages(
    rewards: Float[Array, "B C"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, " B"] | None = None,
    *,
    weights: Float[Array, " C"],
    normalization: Normalization | None = None,
) -> Float[Array, " B"]:
    """Multi-reward advantage: normalise each component in its group, then take the weighted sum.

    ``A_i = Σ_c w_c · group_normalize(r[:, c])_i``. Summing first and normalising after collapses
    distinct combinations — rewards (0, 2) and (0, 1) would get the same advantage, and two
    components that each vary can cancel to a zero-spread sum (huggingface/trl#3857). No batch whitening
    is applied afterwards (TRL's ``normalize_then_sum`` adds one: apply ``group_normalize`` with a
    single group yourself if you want it).

    Args:
      rewards: ``float[B, C]`` one column per reward component.
      group_ids: ``int[B]`` or ``Groups``.
      mask: ``bool[B]`` valid trajectories (a row is valid or not as a whole).
      weights: ``float[C]`` component weights; may be traced.
      normalization: a :class:`credax.Normalization` (``None``: ``Normalization()``), as
        :func:`credax.group_normalize`, applied to every component (``eps`` may be traced).

    Returns:
      ``float[B]``; ``0`` at masked rows.

    Raises:
      ValueError: ``weights`` is not ``[C]``.
      TypeError: ``normalization`` is not a :class:`credax.Normalization`.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> r = jnp.array([[0.0, 2.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
      >>> # column 0: μ=.5, σ=.57735 -> ∓.866; column 1: μ=1, σ=.8165 -> 1.2247, 0, -1.2247, 0
      >>> a = credax.gdpo_advantages(r, jnp.zeros(4, jnp.int32), weights=jnp.ones(2),
      ...                            normalization=credax.Normalization(eps=0.0))
      >>> [round(float(v), 4) for v in a]
      [0.3587, -0.866, -0.3587, 0.866]

    References:
      GDPO (group reward-decoupled normalisation); verl ``compute_gdpo_outcome_advantage``.
    """
    rewards = _checks.as_float_array(rewards, "rewards")
    _checks.check_ndim(rewards, "rewards", 2, "[B, C]")
    weights = _checks.as_float_array(weights, "weights")
    _checks.check_shape(weights, "weights", rewards.shape[1:], "[C]")
    if mask is not None:
        mask = _checks.as_mask(mask, "mask", rewards.shape[:1])
        mask = jnp.broadcast_to(mask[:, None], rewards.shape)
    xc, mask2, out_dtype = prepare(rewards, group_ids, mask, "rewards")
    per_component = normalize_with_groups(xc, group_ids, mask2, normalization_or(normalization))
    out = jnp.sum(per_component * weights.astype(xc.dtype)[None, :], axis=1)
    return out.astype(out_dtype)


@jit_grouped()
def degenerate_groups(
    rewards: Float[Array, " B"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, " B"] | None = None,
) -> Bool[Array, " B"]:
    """True where a row's group carries no learning signal: a single member, or no spread.

    No spread is exact (every valid reward identical, e.g. all 0.35). Masked rows are ``False``.
    A diagnostic to log or filter on (DAPO's dynamic sampling); credax never drops rows itself.
    Note that a KL term still acts on degenerate groups.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.degenerate_groups(jnp.array([1.0, 0.0, 0.35, 0.35, 2.0]), jnp.array([0, 0, 1, 1, 2]))
      Array([False, False,  True,  True,  True], dtype=bool)
    """
    _check_outcome(rewards)
    xc, mask, _ = prepare(rewards, group_ids, mask, "rewards")
    st = segment_stats(xc, group_ids.index, group_ids.num_groups, mask)
    return mask & ((st.count <= 1) | st.constant | st.nonfinite)


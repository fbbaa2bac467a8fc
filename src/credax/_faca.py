"""FACA: the next user turn as evidence about the segment before it.

In a conversation with a user, each agent segment is followed by the user's next turn, and that
turn's reaction (a correction, a confirmation, frustration) says something about the segment. FACA
adds a locally normalised *reaction advantage* per segment to the verified outcome advantage: an
additive per-segment term, like MT-GRPO's turn advantage, compared over the same segment of the
prompt's other rollouts.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._api import concrete_array
from ._checks import Finite
from ._group_ids import Groups
from ._group_stats import check_x_and_groups
from ._grouping import jit_grouped, normalization_or, normalize_with_groups
from ._normalization import Normalization


def _check_args(arguments) -> None:
    """A concrete ``reaction_mask`` true only on valid turns."""
    r = concrete_array(arguments.get("reaction_mask"))
    m = concrete_array(arguments.get("turn_mask"))
    if r is None or m is None or r.shape != m.shape or r.dtype != bool or m.dtype != bool:
        return  # absent, traced, or a shape / dtype the body names
    stray = r & ~m
    if stray.any():
        b, k = _checks.first_index(stray)
        raise ValueError(f"`reaction_mask` must be false on padded turns (`turn_mask` false); "
                         f"row {b} has a reaction at padded turn {k} ({int(stray.sum())} such "
                         "turns).")



def default_reaction_mask(turn_mask: Array) -> Array:
    """``bool[B, K]``: every valid turn but each row's last valid one (it has no next user turn)."""
    index = jnp.arange(turn_mask.shape[1], dtype=jnp.int32)[None, :]
    last = jnp.max(jnp.where(turn_mask, index, -1), axis=1, keepdims=True, initial=-1)
    return turn_mask & (index < last)


@jit_grouped(check=_check_args)
def faca_advantages(
    reactions: Float[Array, "B K"],
    outcome_rewards: Float[Array, " B"],
    turn_mask: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups,
    *,
    reaction_mask: Bool[Array, "B K"] | None = None,
    reaction_coef: Finite = 1.0,
    normalization: Normalization | None = None,
) -> Float[Array, "B K"]:
    """FACA segment advantages: outcome advantage per prompt plus reaction advantage per segment.

    ::

        Â^O_i     = group_normalize(outcome_rewards)_i     over the rows of prompt q_i
        Â^R_{i,k} = group_normalize(reactions)_{i,k}       over the rows of q_i whose segment k
                                                           has a reaction (same prompt, same k)
        A_{i,k}   = Â^O_i + reaction_coef · Â^R_{i,k}      on valid segments with a reaction
        A_{i,k}   = Â^O_i                                  on valid segments without one
        A_{i,k}   = 0                                      on padded segments

    ``reactions[i, k]`` is a score of the user's reaction to segment ``k`` (read from user turn
    ``k + 1``: a reward model's or judge's grade of the next message, a thumbs up or down); it is
    read only where ``reaction_mask`` is true. Both normalisations take the same options (those of
    :func:`credax.group_normalize`, as one :class:`credax.Normalization`). A row with no valid
    segment is not a trajectory: it enters no statistic and gets ``0``.

    credax's reading of FACA (arXiv 2608.17499), whose code is not public: "locally normalised"
    is read as the reaction normalised over the peer set MT-GRPO uses for its turn rewards (the
    prompt's rollouts that reached the same segment index and got a reaction there), and the
    reaction advantage is added with a coefficient to GRPO's outcome advantage on that segment
    only. The last segment of a rollout has no next user turn, hence no reaction: by default
    (``reaction_mask=None``) every valid segment but the row's last valid one has one.

    Degenerate input: a reaction set of one rollout, or whose reactions are all equal, gives
    reaction advantage ``0`` (the segment gets ``Â^O``); a NaN or ±inf reaction at a segment with
    a reaction makes NaN of that (prompt, segment) set's reaction turns and nothing else; one at a
    segment without a reaction is never read. A concrete ``reaction_mask`` true on a padded turn
    is a ``ValueError``; a traced one makes that row's valid turns NaN (its reactions and turns
    disagree), and the stray reaction enters no statistic.

    Args:
      reactions: ``float[B, K]`` the reaction score of each segment; values where
        ``reaction_mask`` is false never matter (NaN included).
      outcome_rewards: ``float[B]`` the verified outcome reward of each trajectory.
      turn_mask: ``bool[B, K]`` real segments.
      group_ids: ``int[B]`` prompt of each row (any integers), or a ``Groups``.
      reaction_mask: ``bool[B, K]`` segments followed by a user reaction, a subset of
        ``turn_mask``. ``None``: every valid segment but each row's last valid one.
      reaction_coef: weight of the reaction advantage (default 1); may be traced.
      normalization: one :class:`credax.Normalization` for both levels, as
        :func:`credax.group_normalize` (``None``: ``Normalization()``; its ``eps`` may be traced).

    Returns:
      ``float[B, K]`` in the promoted floating dtype of the two reward inputs (float32 for integer
      input); ``0`` on padded segments.

    Raises:
      TypeError: non-numeric rewards, non-boolean ``turn_mask`` or ``reaction_mask``, non-integer
        ``group_ids``, a ``normalization`` that is not a :class:`credax.Normalization`.
      ValueError: shapes disagree; a concrete non-finite ``reaction_coef``; a concrete
        ``reaction_mask`` true on a padded turn.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> # One prompt, four rollouts of two segments; segment 1 is the last (no reaction).
      >>> reactions = jnp.array([[1.0, 9.0], [1.0, 9.0], [0.0, 9.0], [0.0, 9.0]])
      >>> outcome = jnp.array([1.0, 0.0, 0.0, 1.0])
      >>> a = credax.faca_advantages(reactions, outcome, jnp.ones((4, 2), bool), jnp.zeros(4, int),
      ...                            normalization=credax.Normalization(eps=0.0))
      >>> # Â^O = ±0.5/0.57735 = ±0.866; segment 0: Â^R = ±0.866 likewise; segment 1: Â^O alone
      >>> [[round(float(v), 3) for v in row] for row in a]
      [[1.732, 0.866], [0.0, -0.866], [-1.732, -0.866], [0.0, 0.866]]

    References:
      FACA (arXiv 2608.17499): the next user turn as evidence, a reaction advantage added to the
      verified outcome advantage (τ-bench family, 9 domains). No code is public (field notes
      2026-12-03 §1), so there is no parity test. Zeng et al. 2025, MT-GRPO (arXiv 2505.11821),
      for the per-(prompt, turn) normalisation it shares.
    """
    r_x = _checks.as_float_array(reactions, "reactions")
    _checks.check_ndim(r_x, "reactions", 2, "[B, K]")
    check_x_and_groups(r_x, group_ids, "reactions")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", r_x.shape)
    r_o = _checks.as_float_array(outcome_rewards, "outcome_rewards")
    _checks.check_shape(r_o, "outcome_rewards", r_x.shape[:1], "[B]")
    if reaction_mask is None:
        reacted = default_reaction_mask(turn_mask)
        stray = jnp.zeros(r_x.shape[:1], bool)
    else:
        given = _checks.as_mask(reaction_mask, "reaction_mask", r_x.shape)
        reacted = given & turn_mask
        stray = jnp.any(given & ~turn_mask, axis=1)  # traced only: the check refused it eagerly
    out_dtype = _numeric.output_dtype(jnp.promote_types(r_x.dtype, r_o.dtype))
    dt = _numeric.compute_dtype(out_dtype)

    opts = normalization_or(normalization)
    has_turn = jnp.any(turn_mask, axis=1)
    a_o = normalize_with_groups(r_o.astype(dt), group_ids, has_turn, opts)
    a_r = normalize_with_groups(r_x.astype(dt), group_ids, reacted, opts)
    coef = _checks.scalar(reaction_coef, dt, "reaction_coef")
    # A select, not Â^O + coef · 0: a traced non-finite coefficient reaches only reaction turns.
    out = jnp.where(reacted, a_o[:, None] + coef * a_r, a_o[:, None])
    out = jnp.where(stray[:, None], jnp.full((), jnp.nan, dt), out)
    return jnp.where(turn_mask, out, jnp.zeros((), dt)).astype(out_dtype)

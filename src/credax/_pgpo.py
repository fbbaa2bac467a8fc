"""PGPO: a potential from the return statistics of anchor-state groups, credited as a difference.

GiGPO groups the steps of a prompt that acted in the same anchor state. PGPO reads the group's
mean discounted return as the state's potential ``Φ(s)`` and credits each step with the change of
potential it caused, ``Φ(s_{t+1}) - Φ(s_t)``: a step that moved a failed trajectory into a better
state still gets positive credit, one that moved a successful trajectory into a worse one negative.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks
from ._checks import Unit
from ._group_ids import Groups, groups_from_keys
from ._group_stats import check_x_and_groups, group_stats
from ._grouping import jit_grouped
from ._turns import masked_discounted_returns, next_valid, prepare_anchored_steps


class PGPO(NamedTuple):
    """PGPO advantages and the potentials they difference.

    Attributes:
      advantages: ``float[B, K]`` ``Φ(s_{t+1}) - Φ(s_t)`` (the last step: ``G_t - Φ(s_t)``); ``0`` on
        padded turns.
      potentials: ``float[B, K]`` ``Φ(s_t)``, the mean return of the step's anchor group; ``0`` on
        padded turns.
    """

    advantages: Array
    potentials: Array


@jit_grouped(anchors=True)
def pgpo_advantages(
    step_rewards: Float[Array, "B K"],
    anchor_ids: Int[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups,
    *,
    gamma: Unit = 1.0,
) -> PGPO:
    """PGPO step advantages: the change of an anchor-state potential estimated from group returns.

    With ``G_{i,t} = Σ_{s>=t} γ^{s-t} r_{i,s}`` (the discounted step return) and ``P(i,t)`` the
    valid steps of the same prompt in the same anchor state as step ``(i, t)`` (GiGPO's anchor
    group, any turn index)::

        Φ(s_{i,t}) = mean_{P(i,t)} G
        A_{i,t}    = Φ(s_{i,t+1}) - Φ(s_{i,t})        t before the trajectory's last valid step
        A_{i,T}    = G_{i,T} - Φ(s_{i,T})             the last valid step: Φ(terminal) = G_{i,T}

    The terminal potential is credax's choice (the paper's abstract does not define it): the
    state after the last step is worth what the trajectory realised there, ``G_{i,T}`` (its last
    reward), so with ``γ = 1`` the advantages of a trajectory telescope to
    ``G_{i,T} - Φ(s_{i,0})`` (with an outcome reward on the last step and one shared start state:
    the outcome minus the prompt's mean outcome, GRPO's centred value), and the last step is
    compared with the peers that acted in its state (GiGPO's step term, uncentred by a std).
    ``s_{t+1}`` is the next *valid* step of the trajectory (padding skipped). A singleton group's
    potential is its own return. A non-finite return makes NaN of the potentials of its group and
    the advantages that read them.

    Args:
      step_rewards: ``float[B, K]`` per-step rewards (put the outcome on the last step if that is
        your reward design); padded values never matter.
      anchor_ids: ``int[B, K]`` the caller's hash of each step's state (equality is all that
        matters); padded values never matter.
      turn_mask: ``bool[B, K]`` real steps.
      group_ids: ``int[B]`` prompt of each trajectory, or a ``Groups``.
      gamma: discount of the step returns, in ``[0, 1]``; may be traced.

    Returns:
      :class:`PGPO` ``(advantages, potentials)``, ``float[B, K]`` each.

    Raises:
      TypeError: non-integer ``anchor_ids``/``group_ids``, non-boolean ``turn_mask``.
      ValueError: shapes disagree; a concrete ``gamma`` outside ``[0, 1]``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> # One prompt, two trajectories from state 1: one reaches state 2 and succeeds (1), one
      >>> # reaches state 3 and fails (0). Φ(1) = .5, Φ(2) = 1, Φ(3) = 0 (γ = 1).
      >>> steps = jnp.array([[0.0, 1.0], [0.0, 0.0]])
      >>> out = credax.pgpo_advantages(steps, jnp.array([[1, 2], [1, 3]]), jnp.ones((2, 2), bool),
      ...                              jnp.zeros(2, int))
      >>> out.advantages.tolist()
      [[0.5, 0.0], [-0.5, 0.0]]

    References:
      PGPO (arXiv 2609.02236): a potential from the return statistics of GiGPO anchor-state groups,
      ``A(s_t, a_t) = Φ(s_{t+1}) - Φ(s_t)``; no public code (field notes 2026-12-03 §1). GiGPO
      (arXiv 2505.10978) for the anchor groups.
    """
    _, s, anchors, turn_mask, out_dtype, dt = prepare_anchored_steps(None, step_rewards, anchor_ids,
                                                                     turn_mask)
    check_x_and_groups(s, group_ids, "step_rewards")
    zero = jnp.zeros((), dt)
    batch, num_turns = s.shape
    n = batch * num_turns
    g = masked_discounted_returns(jnp.where(turn_mask, s.astype(dt), zero), turn_mask,
                                  _checks.scalar(gamma, dt, "gamma"))
    prompt = jnp.broadcast_to(group_ids.index[:, None], s.shape).reshape(n)
    flat_mask = turn_mask.reshape(n)
    anchor_groups = groups_from_keys(prompt, anchors.reshape(n), valid=flat_mask)
    st = group_stats(g.reshape(n), anchor_groups, flat_mask, sum_sq=False)
    phi = jnp.where(st.nonfinite, jnp.full((), jnp.nan, dt), st.mean_value()).reshape(s.shape)
    phi = jnp.where(turn_mask, phi, zero)
    has_next = next_valid(turn_mask.astype(dt), turn_mask, jnp.zeros((batch,), dt)) > 0
    following = next_valid(phi, turn_mask, jnp.zeros((batch,), dt))
    adv = jnp.where(has_next, following, g) - phi
    adv = jnp.where(turn_mask, adv, zero)
    return PGPO(adv.astype(out_dtype), phi.astype(out_dtype))

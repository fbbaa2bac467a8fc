"""Turn baseline unbiased under variable turn counts: the policy may decide when to stop.

verl RFC #7244: normalising per-turn rewards per turn index and then aggregating them over the
remaining turns subtracts ``Σ_{k=t}^{L_i} b_k`` — a baseline whose number of terms is the row's
own stopping turn ``L_i``, chosen by the very actions being credited. Here the return to go is
compared once, per (prompt, turn index), with the returns of the *other* rows that reached the
same turn: one baseline term per decision, independent of the row's own actions from that turn on.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks
from ._checks import Unit
from ._group_ids import Groups
from ._group_stats import check_x_and_groups
from ._grouping import jit_grouped, normalization_or, normalize_with_groups
from ._normalization import Normalization
from ._turns import masked_discounted_returns, prepare_turns

# The default: leave-one-out centring, no std division, a row alone at its turn keeps its return
# (baseline 0). Each part is what makes the expected gradient exactly the policy gradient.
UNBIASED = Normalization(scale="none", eps=0.0, singleton="raw", leave_one_out=True)


@jit_grouped()
def unbiased_turn_advantages(
    turn_rewards: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups,
    *,
    gamma: Unit = 1.0,
    normalization: Normalization | None = None,
) -> Float[Array, "B K"]:
    """Turn advantages whose baseline does not depend on the row's own stopping turn (verl #7244).

    ::

        G_{i,t} = Σ_{k>=t, valid} γ^{k-t} r_{i,k}                 return to go of turn t
        P_{i,t} = {j ≠ i in the prompt of i : turn t of j is valid} its peers at turn t
        A_{i,t} = G_{i,t} - mean_{j ∈ P_{i,t}} G_{j,t}            (G_{i,t} when P_{i,t} is empty)

    i.e. ``group_normalize(G, group_ids, turn_mask, normalization=...)`` per (prompt, turn index)
    with the default ``Normalization(scale="none", leave_one_out=True, singleton="raw", eps=0)``.
    The baseline of turn ``t`` is built from other trajectories only, and which of them reached
    turn ``t`` does not depend on row ``i``; that row ``i`` itself reached ``t`` is its history.
    So ``E[∇log π(a_{i,t} | h_{i,t}) · baseline] = 0`` and ``E[Σ_t ∇log π(a_{i,t}) A_{i,t}]`` is
    exactly the policy gradient of ``E[Σ_k γ^k r_k]`` (with ``γ = 1``; for ``γ < 1`` the usual
    discounted-from-each-turn surrogate), whoever decides to stop. ``tests/test_turn_baseline.py``
    checks this by exact enumeration on a two-turn MDP whose policy controls stopping.

    The construction it replaces (the RFC's "natural" one): centre each turn's reward per turn
    index, ``z_{i,k} = r_{i,k} - b_k`` with ``b_k`` the peer mean at index ``k``, and credit turn
    ``t`` with ``Σ_{k=t}^{L_i} z_{i,k} = G_{i,t} - Σ_{k=t}^{L_i} b_k``. The subtracted sum has one
    term per turn the row went on to take, so the decision to take turn ``k`` is charged ``b_k``:
    the expected gradient is biased by ``-E[∇log π · Σ_{k>t}^{L_i} b_k]``, a hidden bonus of
    ``-E[r_k | turn k reached]`` on every "take another turn" decision (the RFC's closed form). On
    the test's MDP (continue with ``p = σ(θ)``, then a turn reward of mean ``q``) that is
    ``-p(1-p)·q·(1-(1-p)^{G-1})`` with a leave-one-out ``b_2`` over ``G`` rollouts, ``-p(1-p)q``
    as ``G → ∞``. When every row has the same number of turns the two constructions are equal.

    How it differs from :func:`credax.mt_grpo_advantages` and TCPO's per-(prompt, turn) z-score
    (:func:`credax.tcpo_advantages` with ``normalize=True``): those normalise a *per-turn*
    quantity (MT-GRPO: the turn's own reward, plus the trajectory's normalised outcome; TCPO: the
    turn's credit) among the rows that reached that turn, and give turn ``k`` that one value; they
    sum no later-turn baselines, so the term above does not arise from their normalisation (the
    enumeration test shows MT-GRPO's expected gradient is the policy gradient plus ``λ·∇E[r_t]``,
    the turn reward acting as a shaping reward, with no stopping term). The bias appears when
    per-index-normalised rewards are *aggregated* over the remaining turns; this function is the
    aggregate done right: the return first, one comparison per turn after.

    ``normalization=`` takes any :class:`credax.Normalization` (e.g. ``Normalization()`` for a
    z-score of the returns per (prompt, turn)); the per-turn peer sets still never depend on the
    row's stopping turn, but self-inclusive means (``leave_one_out=False``) and std division
    re-introduce GRPO's usual small-group bias, and ``singleton="zero"`` gives ``0`` to a row alone
    at its turn (a weight that depends on the other rows only).

    Args:
      turn_rewards: ``float[B, K]`` reward of each turn (put an outcome reward on the last valid
        turn). Values at padded turns never matter (NaN included).
      turn_mask: ``bool[B, K]`` real turns; a row's valid turns form a prefix (the stopping turn
        is the last valid one). A row with no valid turn enters no statistic and gets ``0``.
      group_ids: ``int[B]`` prompt of each row (any integers), or a ``Groups``.
      gamma: discount of the return to go, in ``[0, 1]``; may be traced. Default 1.
      normalization: how the returns are compared within (prompt, turn); default above.

    Returns:
      ``float[B, K]`` in the dtype of ``turn_rewards`` (float32 for integer input); ``0`` at padded
      turns; ``K = 0`` gives an empty ``[B, 0]``. A valid non-finite reward makes NaN of the
      returns that include it and of their peers' advantages at those turns (as
      :func:`credax.group_normalize`).

    Raises:
      TypeError: non-numeric ``turn_rewards``, non-boolean ``turn_mask``, non-integer
        ``group_ids``, ``normalization`` not a ``Normalization``.
      ValueError: shapes disagree, ``gamma`` outside ``[0, 1]``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> r = jnp.array([[0.5, 1.0], [0.4, 0.0], [0.5, 0.0]])   # rows 0, 2 took a second turn
      >>> mask = jnp.array([[True, True], [True, False], [True, True]])
      >>> a = credax.unbiased_turn_advantages(r, mask, jnp.zeros(3, jnp.int32))
      >>> # G = [1.5, 1], [.4, -], [.5, 0]; turn 0: 1.5 - (.4+.5)/2 = 1.05, .4 - 1 = -.6,
      >>> # .5 - .95 = -.45; turn 1: 1 - 0 = 1, 0 - 1 = -1
      >>> [[round(float(v), 4) for v in row] for row in a]
      [[1.05, 1.0], [-0.6, 0.0], [-0.45, -1.0]]

    References:
      verl-project/verl#7244 (RFC, 2026-08-03: per-turn rewards and the stopping-turn bias of
      per-turn-index normalisation). Williams 1992 / Greensmith et al. 2004: a baseline may depend
      on the history, never on the action it scores.
    """
    r, turn_mask, out_dtype = prepare_turns(turn_rewards, turn_mask, "turn_rewards")
    check_x_and_groups(r, group_ids, "turn_rewards")
    if r.shape[1] == 0:  # no turns: an empty [B, 0]
        return jnp.zeros(r.shape, out_dtype)
    g = masked_discounted_returns(r, turn_mask, _checks.scalar(gamma, r.dtype, "gamma"))
    out = normalize_with_groups(g, group_ids, turn_mask, normalization_or(normalization, UNBIASED))
    return out.astype(out_dtype)

"""VETTA: turn-level GAE plus a within-response-centred token-level GAE residual.

Two value heads score the same rollout: ``V^turn`` at each turn (read at the turn's first action
token, as :func:`credax.turn_gae_advantages` does) and ``V^tok`` at every token. The turn GAE
says how good the turn was; the token GAE inside the response says which of its tokens did better
or worse than the response as a whole, once its mean over the response is removed.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._api import jit_public, reads
from ._collectives import vary_like
from ._gae import _check_gae_args, _check_unit_interval, _row_scalar, turn_gae_advantages
from ._turns import check_token_turn, gather_turns


class VETTA(NamedTuple):
    """VETTA advantages and their parts.

    Attributes:
      advantages: ``float[B, T]`` ``A^turn`` of the token's turn plus the centred residual; ``0``
        off the action tokens.
      turn_advantages: ``float[B, K]`` the turn-level GAE (``turn_gae_advantages``).
      token_residual: ``float[B, T]`` ``A^tok - mean over the response of A^tok``.
    """

    advantages: Array
    turn_advantages: Array
    token_residual: Array


def _segmented_gae(r, v, seg, ok, gamma, lam):
    """GAE along the tokens of each segment (a turn), reset at its end: ``V`` after the segment's
    last token is ``0`` and no advantage flows in from the next segment. ``gamma``/``lam`` ``[B]``."""
    zero = jnp.zeros_like(r[:, 0])

    def step(carry, x):
        v_next, a_next, seg_next = carry
        r_t, v_t, s_t, ok_t = x
        same = ok_t & (seg_next == s_t)
        delta = r_t + gamma * jnp.where(same, v_next, zero) - v_t
        a_t = delta + gamma * lam * jnp.where(same, a_next, zero)
        a_t = jnp.where(ok_t, a_t, zero)
        carry = (jnp.where(ok_t, v_t, v_next), jnp.where(ok_t, a_t, a_next),
                 jnp.where(ok_t, s_t, seg_next))
        return carry, a_t

    # vary_like: inside jax.shard_map the carry varies over the mesh axes its inputs vary over.
    init = vary_like((zero, zero, jnp.full(r.shape[:1], -1, seg.dtype)), r, v, seg, ok)
    _, adv = jax.lax.scan(step, init, (r.T, v.T, seg.T, ok.T), reverse=True)
    return adv.T


@reads("gamma", "lam", "token_gamma", "token_lam")
def _check_args(a) -> None:
    _check_gae_args(a)
    _check_unit_interval(a["token_gamma"], "token_gamma")
    _check_unit_interval(a["token_lam"], "token_lam")


@jit_public(check=_check_args, replicate=True)
def vetta_advantages(
    turn_rewards: Float[Array, "B K"],
    turn_values: Float[Array, "B T"],
    token_rewards: Float[Array, "B T"],
    token_values: Float[Array, "B T"],
    token_turn: Int[Array, "B T"],
    turn_mask: Bool[Array, "B K"],
    *,
    gamma: float | Float[Array, ""] = 1.0,
    lam: float | Float[Array, ""] | Float[Array, " B"] = 1.0,
    token_gamma: float | Float[Array, ""] | Float[Array, " B"] = 1.0,
    token_lam: float | Float[Array, ""] | Float[Array, " B"] = 1.0,
    token_mask: Bool[Array, "B T"] | None = None,
) -> VETTA:
    """VETTA token advantages: turn GAE plus the within-response-centred token GAE residual.

    With ``A^turn_k`` the turn-level GAE of the turn rewards and the turn head's values
    (:func:`credax.turn_gae_advantages`, ``gamma``, ``lam``) and, inside each turn ``k`` with
    action tokens ``j_1 < ... < j_n``, the token GAE of the token head (``token_gamma``,
    ``token_lam``; ``V`` after the turn's last token is ``0``: the response is the episode)::

        δ_j      = r_j + γ_tok V^tok_{j+1} - V^tok_j
        A^tok_j  = δ_j + γ_tok λ_tok A^tok_{j+1}
        A_{k,j}  = A^turn_k + (A^tok_{k,j} - mean_{j' in turn k} A^tok_{k,j'})

    So the mean of ``A`` over a turn's tokens is ``A^turn_k``: the residual only reshapes credit
    inside the response. Action tokens are those with ``token_turn`` in ``[0, K)`` on a valid turn
    (and ``token_mask`` where given); every other token is ``0`` and its values never matter. A
    turn without action tokens has no value and gets ``0`` (as in ``turn_gae_advantages``).

    Args:
      turn_rewards: ``float[B, K]`` one reward per turn.
      turn_values: ``float[B, T]`` the turn head's per-token values (read at each turn's first
        action token).
      token_rewards: ``float[B, T]`` per-token rewards of the token GAE (often ``0`` but the
        response's last token).
      token_values: ``float[B, T]`` the token head's values.
      token_turn: ``int[B, T]`` turn of each token, ``-1`` for none.
      turn_mask: ``bool[B, K]`` real turns.
      gamma, lam: the turn GAE's discount and λ (scalars or per-row ``[B]``), in ``[0, 1]``.
      token_gamma, token_lam: the token GAE's (scalars or per-row ``[B]``), in ``[0, 1]``.
      token_mask: optional ``bool[B, T]`` tokens that count as action tokens.

    Returns:
      :class:`VETTA` ``(advantages [B, T], turn_advantages [B, K], token_residual [B, T])``.

    Raises:
      TypeError: non-integer ``token_turn``, non-boolean masks.
      ValueError: shapes disagree; ``gamma``/``lam`` (or the token ones) outside ``[0, 1]``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> tt = jnp.array([[0, 0, 1, 1]])
      >>> out = credax.vetta_advantages(jnp.array([[0.0, 1.0]]), jnp.zeros((1, 4)),
      ...                               jnp.array([[0.0, 1.0, 0.0, 0.0]]), jnp.zeros((1, 4)),
      ...                               tt, jnp.array([[True, True]]))
      >>> # turn GAE (V = 0, γ = λ = 1): returns (1, 1); token GAE of turn 0: (1, 1) -> residual 0
      >>> out.advantages.tolist()
      [[1.0, 1.0, 1.0, 1.0]]

    References:
      VETTA (arXiv 2610.08402): turn and token values from two heads of a small shared critic,
      ``A_{t,j} = A^turn_t + (A^tok_{t,j} - mean_j A^tok_{t,·})`` in PPO. The authors' code
      (``Jiaju-Chen/VETTA-official``) is not in the stores; the reset of the token GAE at each turn's
      end (bootstrap ``0``) is credax's reading of "token GAE inside a response".
    """
    r_tok = _checks.as_float_array(token_rewards, "token_rewards")
    _checks.check_ndim(r_tok, "token_rewards", 2, "[B, T]")
    v_tok = _checks.as_float_array(token_values, "token_values")
    _checks.check_shape(v_tok, "token_values", r_tok.shape, "[B, T]")
    token_turn = check_token_turn(token_turn, r_tok.shape[0])
    _checks.check_shape(token_turn, "token_turn", r_tok.shape, "[B, T]")
    tmask = _checks.as_mask(token_mask, "token_mask", r_tok.shape)
    turn = turn_gae_advantages.body(turn_rewards, turn_values, token_turn, turn_mask, gamma=gamma,
                                    lam=lam, token_mask=token_mask)
    a_turn = turn.advantages
    batch, num_turns = a_turn.shape
    out_dtype = _numeric.output_dtype(jnp.result_type(a_turn.dtype, r_tok.dtype, v_tok.dtype))
    dt = _numeric.compute_dtype(out_dtype)
    tmask_turns = _checks.as_mask(turn_mask, "turn_mask", a_turn.shape)
    inside = (token_turn >= 0) & (token_turn < num_turns)
    valid_turn = gather_turns(tmask_turns.astype(jnp.int32), token_turn) > 0
    ok = tmask & inside & valid_turn
    zero = jnp.zeros((), dt)
    r = jnp.where(ok, r_tok.astype(dt), zero)
    v = jax.lax.stop_gradient(jnp.where(ok, v_tok.astype(dt), zero))
    g_tok = _row_scalar(token_gamma, dt, batch, "token_gamma")
    l_tok = _row_scalar(token_lam, dt, batch, "token_lam")
    a_tok = _segmented_gae(r, v, jnp.where(ok, token_turn, -1), ok, g_tok, l_tok)
    # Mean of A^tok over each turn's action tokens: one segment per (row, turn).
    seg = jnp.where(ok, jnp.arange(batch)[:, None] * num_turns + token_turn, batch * num_turns)
    cols = jnp.stack([a_tok, ok.astype(dt)], axis=-1).reshape(-1, 2)
    sums = jax.ops.segment_sum(cols, seg.reshape(-1), batch * num_turns + 1)
    mean = _numeric.safe_div(sums[:, 0], sums[:, 1], sums[:, 1] > 0)[seg.reshape(-1)]
    residual = jnp.where(ok, a_tok - mean.reshape(a_tok.shape), zero)
    adv = jnp.where(ok, gather_turns(a_turn.astype(dt), token_turn) + residual, zero)
    return VETTA(adv.astype(out_dtype), a_turn.astype(out_dtype), residual.astype(out_dtype))

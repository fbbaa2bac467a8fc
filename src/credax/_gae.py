"""Value-based credit: GAE over tokens or turns, length-adaptive λ, and the clipped value loss.

The critic's side of PPO, in the same data model as the rest of credax:

* One row is one trajectory, the timestep axis is last: ``[B, T]`` tokens or ``[B, K]`` turns.
  The recursion runs along a row only, so it never crosses an episode boundary (there is no
  packing of several episodes into one row: see the conventions).
* ``mask`` marks the timesteps; masked positions are *skipped*, not zero-rewarded steps: they
  neither contribute nor consume a discount step, and the value after a step is the value at the
  next valid step (verl and AReaL skip prompt/observation tokens the same way). Values there
  (NaN included) never matter, and every output is ``0`` there.
* After a row's last valid step the next value is ``bootstrap[b]`` (``0`` by default: the episode
  ended). Pass the critic's value at the truncation point for a trajectory cut by a length limit
  (AReaL's ``seq_no_eos_mask × bootstrap_values``).
* Turn-level GAE (AReaL's ``gae_timestep_unit="turn"``) is the same recursion on ``[B, K]`` with
  one reward per turn and the value of each turn read at its first action token
  (:func:`turn_values`); a turn that generated no token has no value and is skipped.
"""

from __future__ import annotations

from typing import Annotated, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._api import check_concrete, jit_public, reads
from ._loss_options import Normalizer, check_agg
from ._losses import aggregate_values
from ._turns import check_token_turn, masked_discounted_sum, next_valid


class GAE(NamedTuple):
    """Generalised advantage estimates and the critic's regression targets."""

    advantages: Array
    returns: Array


class TurnValues(NamedTuple):
    """The value of each turn (at its first action token) and whether the turn has a token."""

    values: Array
    has_token: Array


class TurnGAE(NamedTuple):
    """Turn-level GAE: advantages and returns per turn, and the turn values they used."""

    advantages: Array
    returns: Array
    values: Array


class ValueLoss(NamedTuple):
    """The clipped value loss and the fraction of timesteps where the clipped branch was taken."""

    loss: Array
    clip_frac: Array


def _check_unit_interval(value, name: str) -> None:
    """A concrete ``γ`` / ``λ`` in ``[0, 1]``: a scalar, or every value of a per-row ``[B]`` array
    (NumPy, a list, or a committed JAX array, read back: ``B`` numbers). A traced one is used as
    given (its values cannot be seen before tracing)."""
    check_concrete(value, name, lambda v: 0.0 <= v <= 1.0, "lie in [0, 1]")
    host = None if value is None or np.ndim(value) == 0 else _checks.concrete_array(value)
    if host is None or not _checks.real_dtype(host.dtype):
        return  # traced or a scalar (checked above); a wrong dtype is named by the trace-time check
    bad = np.flatnonzero(~((host >= 0) & (host <= 1)))
    if bad.size:
        i = int(bad[0])
        shown = np.format_float_positional(host.reshape(-1)[i], trim="0")
        raise ValueError(f"`{name}` must lie in [0, 1]; got {shown} at row {i}.")


@reads("gamma", "lam")
def _check_gae_args(a) -> None:
    _check_unit_interval(a["gamma"], "gamma")
    _check_unit_interval(a["lam"], "lam")


def _row_scalar(value, dtype, batch: int, name: str) -> jax.Array:
    """A hyperparameter given as a scalar or one value per row: ``[B]`` in ``dtype``."""
    value = jnp.asarray(value)
    if value.ndim == 0:
        return jnp.broadcast_to(_checks.scalar(value, dtype, name), (batch,))
    if value.shape != (batch,):
        raise ValueError(f"`{name}` must be a scalar or have shape [B] = ({batch},); got {value.shape}.")
    _checks.check_real(value, name, bool_ok=False)
    return value.astype(dtype)


def _gae(r, v, mask, gamma, lam, bootstrap):
    """GAE on prepared inputs (compute dtype, selected to 0 off the mask)."""
    v_next = next_valid(v, mask, bootstrap)
    delta = jnp.where(mask, r + gamma[:, None] * v_next - v, jnp.zeros_like(r))
    adv = masked_discounted_sum(delta, mask, gamma * lam)
    ret = jnp.where(mask, adv + v, jnp.zeros_like(adv))
    return adv, ret


def _prepare_timesteps(rewards, values, mask, bootstrap, gamma, lam):
    r = _checks.as_float_array(rewards, "rewards")
    _checks.check_ndim(r, "rewards", 2, "[B, N] (tokens [B, T] or turns [B, K])")
    v = _checks.as_float_array(values, "values")
    _checks.check_shape(v, "values", r.shape, "[B, N]")
    mask = _checks.as_mask(mask, "mask", r.shape)
    out_dtype = _numeric.output_dtype(jnp.promote_types(r.dtype, v.dtype))
    dt = _numeric.compute_dtype(out_dtype)
    batch = r.shape[0]
    r = jnp.where(mask, r.astype(dt), jnp.zeros((), dt))
    v = jax.lax.stop_gradient(jnp.where(mask, v.astype(dt), jnp.zeros((), dt)))
    if bootstrap is None:
        boot = jnp.zeros((batch,), dt)
    else:
        boot = _checks.as_float_array(bootstrap, "bootstrap")
        _checks.check_shape(boot, "bootstrap", (batch,), "[B]")
        boot = jax.lax.stop_gradient(boot.astype(dt))
    gamma = _row_scalar(gamma, dt, batch, "gamma")
    lam = _row_scalar(lam, dt, batch, "lam")
    return r, v, mask, boot, gamma, lam, out_dtype


@jit_public(check=_check_gae_args)
def gae_advantages(
    rewards: Float[Array, "B N"],
    values: Float[Array, "B N"],
    mask: Bool[Array, "B N"],
    *,
    gamma: float | Float[Array, ""] = 1.0,
    lam: float | Float[Array, ""] | Float[Array, " B"] = 1.0,
    bootstrap: Float[Array, " B"] | None = None,
) -> GAE:
    """Generalised advantage estimation along the last axis (tokens or turns), skipping masked steps.

    Over the valid steps ``t_1 < t_2 < ... < t_n`` of a row, with ``V_{n+1} = bootstrap``::

        δ_j = r_j + γ V_{j+1} - V_j
        A_j = δ_j + γλ A_{j+1}          (A_{n+1} = 0)
        R_j = A_j + V_j                 (the critic's target)

    Masked positions are skipped (they do not consume a step) and get ``0``. ``λ = 1`` gives the
    Monte-Carlo advantage ``Σ γ^i r - V``; ``λ = 0`` the one-step TD error. No whitening is applied
    (verl whitens the advantages after this step; ``credax.group_normalize`` with one group, or
    your own batch statistics, does that).

    Args:
      rewards: ``float[B, N]`` reward of each step (token rewards ``[B, T]`` with the outcome on the
        last generated token, or one reward per turn ``[B, K]``). Values off the mask are ignored.
      values: ``float[B, N]`` critic values ``V(s_t)`` (treated as constants: no gradient).
      mask: ``bool[B, N]`` the steps (generated tokens, or valid turns).
      gamma: discount ``γ`` in ``[0, 1]``; a scalar or one value per row; may be traced.
      lam: ``λ`` in ``[0, 1]``; a scalar or ``float[B]`` per row (e.g. :func:`vapo_lambda`); may be
        traced.
      bootstrap: optional ``float[B]`` value after the last valid step (truncated trajectories);
        ``None``: ``0``, the episode terminated.

    Returns:
      ``GAE(advantages, returns)``, both ``float[B, N]`` in the promoted dtype of ``rewards`` and
      ``values``; ``0`` at masked steps.

    Raises:
      TypeError: non-boolean ``mask``, non-numeric inputs.
      ValueError: shapes disagree; a concrete ``gamma`` or ``lam`` outside ``[0, 1]``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> r = jnp.array([[0.0, 0.0, 1.0]])
      >>> v = jnp.array([[0.5, 0.0, 0.5]])
      >>> m = jnp.array([[True, False, True]])   # the middle step is an observation: skipped
      >>> out = credax.gae_advantages(r, v, m, gamma=0.9, lam=0.5)
      >>> # δ = (0 + .9·.5 - .5, 1 - .5) = (-.05, .5); A_0 = -.05 + .45·.5 = .175
      >>> [round(float(x), 4) for x in out.advantages[0]], [round(float(x), 4) for x in out.returns[0]]
      ([0.175, 0.0, 0.5], [0.675, 0.0, 1.0])

    References:
      Schulman et al. 2016, GAE (arXiv 1506.02438). Reproduces verl ``compute_gae_advantage_return``
      (before its ``masked_whiten``; verl's returns at masked tokens carry the running estimate,
      credax's are ``0``) and AReaL ``_compute_token_level_gae`` with ``bootstrap`` as its
      ``bootstrap_values × seq_no_eos_mask``.
    """
    r, v, mask, boot, gamma, lam, out_dtype = _prepare_timesteps(
        rewards, values, mask, bootstrap, gamma, lam)
    adv, ret = _gae(r, v, mask, gamma, lam, boot)
    return GAE(adv.astype(out_dtype), ret.astype(out_dtype))


def _first_token_values(values, token_turn, token_mask, num_turns: int):
    """Value at each turn's first token and whether it has one, on prepared inputs."""
    batch, length = token_turn.shape
    inside = token_mask & (token_turn >= 0) & (token_turn < num_turns)
    seg = jnp.where(inside, jnp.arange(batch)[:, None] * num_turns + token_turn, batch * num_turns)
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
    pos = jnp.where(inside, pos, length)
    first = jax.ops.segment_min(pos.reshape(-1), seg.reshape(-1), batch * num_turns + 1)[:-1]
    first = jnp.minimum(first, length).reshape(batch, num_turns)
    has_token = first < length
    picked = jnp.take_along_axis(values, jnp.clip(first, 0, length - 1), axis=1)
    return jnp.where(has_token, picked, jnp.zeros_like(picked)), has_token


@jit_public(static_argnames=("num_turns",), replicate=True)
def turn_values(
    values: Float[Array, "B T"],
    token_turn: Int[Array, "B T"],
    *,
    num_turns: int,
    mask: Bool[Array, "B T"] | None = None,
) -> TurnValues:
    """The critic's value of each turn: ``V_k = values[b, first token t of turn k]``.

    The state a turn acts on is the state before its first action token, whose value the critic
    emits at that token (AReaL's turn-level GAE reads it there). Tokens with ``token_turn == -1``
    (prompt, observations, padding) or ``mask`` false are not action tokens.

    Args:
      values: ``float[B, T]`` per-token critic values.
      token_turn: ``int[B, T]`` turn of each token, ``-1`` for none.
      num_turns: static ``K``.
      mask: optional ``bool[B, T]`` tokens that count as action tokens.

    Returns:
      ``TurnValues(values: float[B, K], has_token: bool[B, K])``; ``values`` is ``0`` for a turn
      without an action token.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> v = jnp.array([[9.0, 0.1, 0.2, 9.0, 0.3]])
      >>> out = credax.turn_values(v, jnp.array([[-1, 0, 0, -1, 2]]), num_turns=3)
      >>> out.values, out.has_token
      (Array([[0.1, 0. , 0.3]], dtype=float32), Array([[ True, False,  True]], dtype=bool))
    """
    num_turns = _checks.check_static_int(num_turns, "num_turns", minimum=1)
    v = _checks.as_float_array(values, "values")
    _checks.check_ndim(v, "values", 2, "[B, T]")
    token_turn = check_token_turn(token_turn, v.shape[0])
    _checks.check_shape(token_turn, "token_turn", v.shape, "[B, T]")
    mask = _checks.as_mask(mask, "mask", v.shape)
    out_dtype = _numeric.output_dtype(v.dtype)
    tv, has_token = _first_token_values(v.astype(_numeric.compute_dtype(v.dtype)), token_turn, mask,
                                        num_turns)
    return TurnValues(tv.astype(out_dtype), has_token)


@jit_public(check=_check_gae_args, replicate=True)
def turn_gae_advantages(
    turn_rewards: Float[Array, "B K"],
    values: Float[Array, "B T"],
    token_turn: Int[Array, "B T"],
    turn_mask: Bool[Array, "B K"],
    *,
    gamma: float | Float[Array, ""] = 1.0,
    lam: float | Float[Array, ""] | Float[Array, " B"] = 1.0,
    bootstrap: Float[Array, " B"] | None = None,
    token_mask: Bool[Array, "B T"] | None = None,
) -> TurnGAE:
    """Turn-level GAE: each turn is one timestep, valued at its first action token.

    ``V_k`` = :func:`turn_values` of ``values``, then :func:`gae_advantages` over the turns of each
    row with one reward per turn. The steps are the valid turns that generated at least one token
    (``turn_mask & has_token``): a padded turn is never a step and gets ``0``, and so does a valid
    turn without action tokens (it has no value; its reward is not used — give the reward to the
    turn whose action earned it). Broadcast the result to tokens with
    :func:`credax.broadcast_to_tokens` or pass it to :func:`credax.policy_loss` with ``token_turn``.

    Args:
      turn_rewards: ``float[B, K]`` reward of each turn (e.g. the outcome on the last turn, or
        per-turn environment rewards). Values at padded turns never matter.
      values: ``float[B, T]`` per-token critic values (no gradient).
      token_turn: ``int[B, T]`` turn of each token, ``-1`` for none.
      turn_mask: ``bool[B, K]`` real turns.
      gamma, lam, bootstrap: as :func:`gae_advantages` (``lam`` per row from
        ``vapo_lambda(turn_mask, ...)`` is VAPO's λ with turns as the length).
      token_mask: optional ``bool[B, T]`` action tokens (default: every token with a turn).

    Returns:
      ``TurnGAE(advantages, returns, values)``, each ``float[B, K]``; ``0`` where a turn is not a
      step. ``returns`` are the critic's targets at each turn's first token.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> tt = jnp.array([[-1, 0, 0, -1, 1, 1]])          # prompt, turn 0, observation, turn 1
      >>> v = jnp.array([[0.0, 0.4, 0.9, 0.0, 0.6, 0.1]])   # V_0 = 0.4, V_1 = 0.6
      >>> out = credax.turn_gae_advantages(jnp.array([[0.0, 1.0]]), v, tt, jnp.array([[True, True]]))
      >>> # γ = λ = 1: A_1 = 1 - 0.6 = 0.4; A_0 = 0 + 0.6 - 0.4 + 0.4 = 0.6
      >>> [round(float(x), 4) for x in out.advantages[0]]
      [0.6, 0.4]

    References:
      AReaL ``_compute_turn_level_gae`` (``gae_timestep_unit="turn"``): turn value at the first
      active action token, rewards summed per turn (credax takes them per turn directly), returns
      broadcast to the turn's tokens.
    """
    r = _checks.as_float_array(turn_rewards, "turn_rewards")
    _checks.check_ndim(r, "turn_rewards", 2, "[B, K]")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", r.shape)
    v = _checks.as_float_array(values, "values")
    _checks.check_ndim(v, "values", 2, "[B, T]")
    if v.shape[0] != r.shape[0]:
        raise ValueError(f"`values` must have shape [B, T] with B={r.shape[0]}; got {v.shape}.")
    token_turn = check_token_turn(token_turn, r.shape[0])
    _checks.check_shape(token_turn, "token_turn", v.shape, "[B, T]")
    token_mask = _checks.as_mask(token_mask, "token_mask", v.shape)
    out_dtype = _numeric.output_dtype(jnp.promote_types(r.dtype, v.dtype))
    dt = _numeric.compute_dtype(out_dtype)
    tv, has_token = _first_token_values(v.astype(dt), token_turn, token_mask, r.shape[1])
    steps = turn_mask & has_token
    r, tv, steps, boot, gamma, lam, _ = _prepare_timesteps(r.astype(dt), tv, steps, bootstrap,
                                                           gamma, lam)
    adv, ret = _gae(r, tv, steps, gamma, lam, boot)
    return TurnGAE(adv.astype(out_dtype), ret.astype(out_dtype), tv.astype(out_dtype))


@jit_public()
def vapo_lambda(
    mask: Bool[Array, "B N"],
    *,
    alpha: Annotated[_checks.Scalar, _checks.Rule(lambda v: v > 0, "be positive (λ = 1 - 1/(α·L))")] = 0.05,
) -> Float[Array, " B"]:
    """VAPO's length-adaptive GAE λ per row: ``λ = max(0, 1 - 1 / (α · L))``, ``L`` valid steps.

    ``L`` is the row's number of valid steps in ``mask``: generated tokens for a token mask, turns
    for a turn mask (AReaL's ``timestep_lengths``). Long rows get λ near 1 (low bias for long
    credit paths), short ones a smaller λ; a row with ``L = 0`` gets ``0``. Pass the result as
    ``lam`` to :func:`gae_advantages` or :func:`turn_gae_advantages`.

    Args:
      mask: ``bool[B, N]`` steps of each row.
      alpha: ``α > 0`` (VAPO uses 0.05 over tokens); may be traced.

    Returns:
      ``float32[B]``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> m = jnp.arange(40)[None, :] < jnp.array([[40], [10], [0]])
      >>> credax.vapo_lambda(m, alpha=0.05)   # 1 - 1/2, max(0, 1 - 2), 0
      Array([0.5, 0. , 0. ], dtype=float32)

    References:
      Yue et al. 2025, VAPO (arXiv 2504.05118), length-adaptive GAE; AReaL
      ``lambda_fn.vapo_length_adaptive_gae`` (same clamp at 0 and ``L = 0`` rule).
    """
    mask = _checks.as_array(mask, "mask")
    _checks.check_mask(mask, "mask")
    _checks.check_ndim(mask, "mask", 2, "[B, N]")
    length = jnp.sum(mask, axis=-1, dtype=jnp.float32)
    alpha = _checks.scalar(alpha, jnp.float32, "alpha")
    positive = length > 0
    lam = 1 - _numeric.safe_div(jnp.ones_like(length), alpha * length, positive)
    return jnp.where(positive, jnp.maximum(lam, 0), jnp.zeros_like(lam))


@jit_public(static_argnames=("agg",))
def value_loss(
    values: Float[Array, "B N"],
    old_values: Float[Array, "B N"],
    returns: Float[Array, "B N"],
    mask: Bool[Array, "B N"],
    *,
    clip: Annotated[_checks.Scalar, _checks.Rule(lambda v: v > 0, "be positive (or None for no "
                                                  "clipping)")] | None = 0.5,
    agg: str = "token-mean",
    normalizer: Normalizer | None = None,
) -> ValueLoss:
    """PPO's clipped value loss: ``½ · aggregate(max((V - R)², (clip(V, V_old ± c) - R)²))``.

    The new value may move at most ``c`` away from the rollout-time value before the clipped
    branch takes over (and, being the larger loss, removes the gradient that would move it
    further). ``clip=None`` is the plain ``½ (V - R)²``. ``clip_frac`` is the fraction of valid
    steps where the clipped loss is strictly larger (verl's ``vf_clipfrac``).

    Args:
      values: ``float[B, N]`` current critic predictions (differentiated).
      old_values: ``float[B, N]`` the critic's values at rollout time (constants).
      returns: ``float[B, N]`` regression targets (e.g. ``gae_advantages(...).returns``; constants).
      mask: ``bool[B, N]`` steps that count; values elsewhere never matter.
      clip: ``c > 0`` or ``None``; verl's ``cliprange_value`` default is 0.5. May be traced.
      agg, normalizer: as :func:`credax.aggregate`.

    Returns:
      ``ValueLoss(loss, clip_frac)`` float32 scalars (float64 for float64 ``values``).

    Raises:
      ValueError: shapes disagree, unknown ``agg``, a concrete ``clip <= 0``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> v, old, ret = jnp.array([[1.0, 0.0]]), jnp.array([[0.0, 0.0]]), jnp.array([[2.0, 1.0]])
      >>> out = credax.value_loss(v, old, ret, jnp.ones((1, 2), bool), clip=0.5)
      >>> # step 0: max((1-2)², (0.5-2)²) = 2.25 (clipped); step 1: max(1, 1) = 1 -> ½·mean = 0.8125
      >>> float(out.loss), float(out.clip_frac)
      (0.8125, 0.5)

    References:
      verl ``compute_value_loss`` (from TRL's PPO trainer): same form, ``0.5 ×`` its ``agg_loss``,
      ``clipfrac = mean(clipped > unclipped)``.
    """
    check_agg(agg, normalizer)
    v = _checks.as_float_array(values, "values")
    _checks.check_ndim(v, "values", 2, "[B, N]")
    mask = _checks.as_mask(mask, "mask", v.shape)
    dt = _numeric.compute_dtype(v.dtype)
    sg = jax.lax.stop_gradient

    def prep(x, name):
        x = _checks.as_float_array(x, name)
        _checks.check_shape(x, name, v.shape, "[B, N]")
        return sg(jnp.where(mask, x.astype(dt), jnp.zeros((), dt)))

    old, ret = prep(old_values, "old_values"), prep(returns, "returns")
    v = jnp.where(mask, v.astype(dt), jnp.zeros((), dt))
    unclipped = jnp.square(v - ret)
    if clip is None:
        losses = unclipped
        clip_frac = jnp.zeros((), dt)
    else:
        c = _checks.scalar(clip, dt, "clip")
        clipped = jnp.square(jnp.clip(v, old - c, old + c) - ret)
        losses = jnp.maximum(unclipped, clipped)
        count = jnp.sum(mask, dtype=dt)
        took = jnp.where(mask, sg(clipped) > sg(unclipped), False)
        clip_frac = _numeric.safe_div(jnp.sum(took, dtype=dt), count, count > 0)
    loss = 0.5 * aggregate_values(losses, mask, agg, normalizer)
    return ValueLoss(loss, clip_frac)

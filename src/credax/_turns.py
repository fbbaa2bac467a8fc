"""Turn-space tools: best prior score, future best, discounts, returns, token broadcast, surprisal.

Turn tensors are ``[B, K]``: one row per trajectory, turn index ``k`` 0-based on the last axis
(the papers' 1-based ``k`` is ``k + 1`` here, so their ``γ^{k-1}`` is ``γ^k``). ``turn_mask`` marks
real turns; valid turns form a prefix of each row (``validate_turns`` rejects a gap), but every
function here treats masked entries as absent whatever they hold (NaN and inf included) and returns
exactly ``0`` there. Credit is computed in turn space and only then scattered to tokens through an
explicit ``token_turn`` map — never by scanning token masks, which is how peers lost rewards across
tool-observation spans (verl-project/verl#7278).

Running maxima are doubling passes and returns a ``lax.scan`` over the turn axis: no Python loop
over turns.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._api import concrete_numpy, jit_public
from ._checks import Finite, Unit


def prepare_turns(scores, turn_mask, name: str = "scores"):
    """Shared argument handling for ``[B, K]`` turn tensors: (values in compute dtype, bool mask,
    output dtype)."""
    scores = _checks.as_float_array(scores, name)
    _checks.check_ndim(scores, name, 2, "[B, K]")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", scores.shape)
    out_dtype = _numeric.output_dtype(scores.dtype)
    return scores.astype(_numeric.compute_dtype(scores.dtype)), turn_mask, out_dtype


# Up to this many turns TCPO's two running maxima are one reduction over a [B, K, K] broadcast
# (masked_turn_maxima); beyond, doubling passes. Measured on the CPU (the TCPO step with the layout
# promise, both paths in one process, results identical, B = 4096): up to K = 16 the reduction
# is faster (the maxima alone at K = 16: 336 against 491 µs), from K = 17 slower, and at K = 28
# and 32 the step took 8.8-9.4 ms against 2.0-2.7 ms. Past 16 turns the reduction's time grows
# far faster than its K² compares (why, inside XLA's CPU code generation, was not pinned down).
_ONE_PASS_TURNS = 16


def running_max(x: jax.Array, *, reverse: bool = False) -> jax.Array:
    """Cumulative maximum along the turn axis of ``x[B, K]`` (from the end when ``reverse``).

    Doubling steps (Hillis-Steele): ``x = max(x, x shifted by d)`` for ``d = 1, 2, 4, ...`` —
    ``⌈log₂ K⌉`` elementwise passes with no loop, bit-identical to a sequential scan (max is exact
    and associative). On the CPU it was faster than ``lax.cummax`` at every measured size but
    one, where they tied (``credax.best_prior``, B = 512, 4096, 65536 and K = 4 to 32: e.g. 134
    against 225 µs at B = 4096, K = 8 and 527 against 1026 µs at K = 32; 14.2 against 14.0 ms at
    B = 65536, K = 32), for up to 0.1 s more compile. A ``lax.scan`` over turns would be a while
    loop whose K iterations each launch kernels.
    """
    turns = x.shape[1]
    lowest = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    d = 1
    while d < turns:
        if reverse:
            shifted = jnp.pad(x[:, d:], ((0, 0), (0, d)), constant_values=lowest)
        else:
            shifted = jnp.pad(x[:, :-d], ((0, 0), (d, 0)), constant_values=lowest)
        x = jnp.maximum(x, shifted)
        d *= 2
    return x


def masked_best_prior(s: jax.Array, turn_mask: jax.Array, initial: jax.Array) -> jax.Array:
    """``max(initial, max_{t<k, valid} s_t)`` on prepared inputs; values at masked turns undefined."""
    neg_inf = jnp.array(-jnp.inf, dtype=s.dtype)
    running = running_max(jnp.where(turn_mask, s, neg_inf))
    before = jnp.concatenate([jnp.full_like(running[:, :1], neg_inf), running[:, :-1]], axis=1)
    return jnp.maximum(before, initial)


def masked_future_best(s: jax.Array, turn_mask: jax.Array) -> jax.Array:
    """``max_{t>=k, valid} s_t`` on prepared inputs; ``-inf`` where no valid turn follows."""
    neg_inf = jnp.array(-jnp.inf, dtype=s.dtype)
    return running_max(jnp.where(turn_mask, s, neg_inf), reverse=True)


def _window_operands(v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``[B, t, k]`` views of ``v[B, K]``: ``v[b, t]`` where ``t < k`` (before ``k``) and where
    ``t >= k`` (from ``k`` on), ``-inf`` elsewhere."""
    turns = v.shape[1]
    neg_inf = jnp.array(-jnp.inf, dtype=v.dtype)
    t = jnp.arange(turns)[:, None]
    k = jnp.arange(turns)[None, :]
    vb = jnp.broadcast_to(v[:, :, None], v.shape + (turns,))
    return jnp.where(t < k, vb, neg_inf), jnp.where(t >= k, vb, neg_inf)


@jax.custom_jvp
def _before_and_from(v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(max_{t<k} v_t, max_{t>=k} v_t)`` of ``v[B, K]`` (``-inf`` for an empty range): one
    variadic reduction over a ``[B, K, K]`` broadcast, compiled as one kernel with its producers
    fused in (two running maxima are several kernels, slower on the CPU up to 16 turns, plus a
    shift for the exclusive maximum). Exact, so bit-identical to a sequential scan."""
    neg_inf = jnp.array(-jnp.inf, dtype=v.dtype)
    return jax.lax.reduce(_window_operands(v), (neg_inf, neg_inf),
                          lambda p, q: (jnp.maximum(p[0], q[0]), jnp.maximum(p[1], q[1])), (1,))


@_before_and_from.defjvp
def _before_and_from_jvp(primals, tangents):
    # The derivative of jnp.max over each window (ties share the tangent equally).
    def maxima(v):
        before, after = _window_operands(v)
        return jnp.max(before, axis=1), jnp.max(after, axis=1)

    return _before_and_from(*primals), jax.jvp(maxima, primals, tangents)[1]


def masked_turn_maxima(s: jax.Array, turn_mask: jax.Array,
                       initial: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(masked_best_prior(s, turn_mask, initial), masked_future_best(s, turn_mask))`` in one
    pass (TCPO needs both): one kernel up to ``_ONE_PASS_TURNS`` turns (``O(K²)`` compares per
    row), the two running maxima (doubling passes) beyond."""
    if s.shape[1] > _ONE_PASS_TURNS:
        return masked_best_prior(s, turn_mask, initial), masked_future_best(s, turn_mask)
    before, after = _before_and_from(jnp.where(turn_mask, s, jnp.array(-jnp.inf, dtype=s.dtype)))
    return jnp.maximum(before, initial), after


def discount_powers(num_turns: int, gamma: jax.Array) -> jax.Array:
    """``γ^k`` for ``k = 0..K-1`` in ``gamma``'s dtype; ``0^0 = 1``, so ``γ = 0`` keeps turn 0 only."""
    k = jnp.arange(num_turns)
    # Repeated multiplication via cumprod would drift; integer powers are exact enough and
    # finite for long horizons (γ^k underflows to 0, never to NaN).
    return jnp.where(k == 0, jnp.ones((), gamma.dtype), gamma ** k.astype(gamma.dtype))


@jit_public(replicate=True)
def best_prior(
    scores: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    initial: Finite = 0.0,
) -> Float[Array, "B K"]:
    """Best score before each turn: ``m_k = max(initial, max_{t<k} s_t)`` over valid turns.

    ``m_0 = initial`` (TCPO's best prior of the first turn; scores in ``[0, 1]`` make ``0`` the
    natural floor).

    Args:
      scores: ``float[B, K]`` per-turn verifier scores.
      turn_mask: ``bool[B, K]`` real turns.
      initial: the reference before any turn; may be traced.

    Returns:
      ``float[B, K]``; ``0`` at masked turns.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> s = jnp.array([[0.0, 0.5, 1.0, 0.5]])
      >>> credax.best_prior(s, jnp.array([[True, True, True, False]]))
      Array([[0. , 0. , 0.5, 0. ]], dtype=float32)
    """
    s, turn_mask, out_dtype = prepare_turns(scores, turn_mask)
    initial = _checks.scalar(initial, s.dtype, "initial")
    m = masked_best_prior(s, turn_mask, initial)
    return jnp.where(turn_mask, m, 0).astype(out_dtype)


@jit_public(replicate=True)
def future_best(
    scores: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
) -> Float[Array, "B K"]:
    """Best score from each turn on: ``u_k = max_{t>=k} s_t`` over valid turns.

    Returns:
      ``float[B, K]``; ``0`` at masked turns.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.future_best(jnp.array([[0.0, 0.5, 0.2]]), jnp.array([[True, True, True]]))
      Array([[0.5, 0.5, 0.2]], dtype=float32)
    """
    s, turn_mask, out_dtype = prepare_turns(scores, turn_mask)
    u = masked_future_best(s, turn_mask)
    return jnp.where(turn_mask, u, 0).astype(out_dtype)


@jit_public(static_argnames=("num_turns",))
def discount_weights(num_turns: int, gamma: float | Float[Array, ""]) -> Float[Array, " K"]:
    """Turn weights ``γ^k``, ``k = 0..K-1`` (the papers' ``γ^{k-1}`` with 1-based ``k``).

    Args:
      num_turns: static ``K``.
      gamma: discount; may be traced.

    Returns:
      ``float32[K]`` (float64 for a float64 ``gamma``).

    Raises:
      TypeError: ``num_turns`` not an int; ``gamma`` ``None`` or not a real number.
      ValueError: ``num_turns < 0``; ``gamma`` not a scalar, or (x64 off) a concrete value finite
        but beyond float32's range.

    Examples:
      >>> import credax
      >>> credax.discount_weights(4, 0.5)
      Array([1.   , 0.5  , 0.25 , 0.125], dtype=float32)
    """
    num_turns = _checks.check_static_int(num_turns, "num_turns")
    gamma = jnp.asarray(gamma)
    gamma = _checks.scalar(gamma, _numeric.compute_dtype(gamma.dtype), "gamma")
    return discount_powers(num_turns, gamma)


@jit_public(replicate=True)
def discounted_returns(
    rewards: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    gamma: Unit,
) -> Float[Array, "B K"]:
    """Discounted return of each turn: ``G_k = Σ_{t>=k, valid} γ^{t-k} r_t``.

    Computed by a reverse scan ``G_k = r_k + γ G_{k+1}`` (stable for any horizon: no ``γ^{-k}``).
    Masked turns contribute nothing; with prefix masks this is the return to the end of the
    trajectory.

    Args:
      rewards: ``float[B, K]`` per-turn rewards.
      turn_mask: ``bool[B, K]``.
      gamma: discount in ``[0, 1]``; may be traced. ``γ = 0`` returns the rewards.

    Returns:
      ``float[B, K]``; ``0`` at masked turns.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.discounted_returns(jnp.array([[0.0, 1.0, 1.0]]), jnp.ones((1, 3), bool), gamma=0.5)
      Array([[0.75, 1.5 , 1.  ]], dtype=float32)
    """
    r, turn_mask, out_dtype = prepare_turns(rewards, turn_mask, "rewards")
    gamma = _checks.scalar(gamma, r.dtype, "gamma")
    return masked_discounted_returns(r, turn_mask, gamma).astype(out_dtype)


def masked_discounted_returns(r: jax.Array, turn_mask: jax.Array, gamma: jax.Array) -> jax.Array:
    """The body of :func:`discounted_returns` on prepared inputs; ``0`` at masked turns."""
    r = jnp.where(turn_mask, r, jnp.zeros_like(r))

    def step(carry, r_k):
        g = r_k + gamma * carry
        return g, g

    _, g = jax.lax.scan(step, jnp.zeros_like(r[:, 0]), r.T, reverse=True)
    return jnp.where(turn_mask, g.T, jnp.zeros_like(r))


def gather_turns(turn_values: jax.Array, token_turn: jax.Array) -> jax.Array:
    """``turn_values[b, token_turn[b, t]]``, ``0`` where ``token_turn`` is outside ``[0, K)``.

    Shared by ``broadcast_to_tokens`` and the fused policy loss (which gathers per-turn advantages
    inside the loss instead of materialising a ``[B, T]`` tensor first).
    """
    num_turns = turn_values.shape[1]
    inside = (token_turn >= 0) & (token_turn < num_turns)
    picked = jnp.take_along_axis(turn_values, jnp.clip(token_turn, 0, num_turns - 1), axis=1)
    return jnp.where(inside, picked, jnp.zeros_like(picked))


def check_token_turn_shape(token_turn, batch: int, name: str = "token_turn") -> None:
    """``token_turn`` (NumPy or JAX, concrete or traced) is an integer ``[B, T]`` with ``B =
    batch``: the rule of the compiled functions and of ``validate_turns``."""
    _checks.check_int(token_turn, name)
    _checks.check_ndim(token_turn, name, 2, "[B, T]")
    _checks.check_leading(token_turn, name, (batch,), "[B, T]", f"B={batch}")


def check_token_turn(token_turn, batch: int, name: str = "token_turn") -> jax.Array:
    token_turn = _checks.as_array(token_turn, name)
    check_token_turn_shape(token_turn, batch, name)
    return _numeric.widen_index(token_turn)


@jit_public(replicate=True)
def broadcast_to_tokens(
    turn_values: Float[Array, "B K"],
    token_turn: Int[Array, "B T"],
) -> Float[Array, "B T"]:
    """Give every token the value of the turn that generated it.

    ``out[b, t] = turn_values[b, token_turn[b, t]]``, and ``0`` where ``token_turn == -1`` (prompt,
    tool/environment observation and padding tokens receive no credit). Indices ``>= K`` are
    treated like ``-1`` (``validate_turns`` rejects them eagerly).

    Args:
      turn_values: ``float[B, K]`` per-turn advantages.
      token_turn: ``int[B, T]`` turn index of each token or ``-1``.

    Returns:
      ``float[B, T]`` in ``turn_values``' dtype.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.broadcast_to_tokens(jnp.array([[0.5, -1.0]]), jnp.array([[-1, 0, 0, -1, 1, -1]]))
      Array([[ 0. ,  0.5,  0.5,  0. , -1. ,  0. ]], dtype=float32)
    """
    turn_values = _checks.as_float_array(turn_values, "turn_values")
    _checks.check_ndim(turn_values, "turn_values", 2, "[B, K]")
    token_turn = check_token_turn(token_turn, turn_values.shape[0])
    return gather_turns(turn_values.astype(_numeric.output_dtype(turn_values.dtype)), token_turn)


@jit_public(replicate=True)
def broadcast_to_turns(
    values: Float[Array, " B"],
    turn_mask: Bool[Array, "B K"],
) -> Float[Array, "B K"]:
    """Give every real turn of a trajectory the trajectory's value (an outcome advantage).

    ``out[b, k] = values[b]`` where ``turn_mask[b, k]``, else ``0``: the per-turn form of a
    trajectory-level advantage (GRPO, RLOO, GPG, Dr. GRPO, ...), the input
    :func:`broadcast_to_tokens` and the fused policy loss take. Masked turns are exactly ``0``
    whatever ``values`` holds there (a padded row's NaN included).

    Args:
      values: ``float[B]`` one value per trajectory (padded rows: anything).
      turn_mask: ``bool[B, K]`` real turns.

    Returns:
      ``float[B, K]`` in ``values``' dtype (float32 for integer input).

    Raises:
      ValueError: ``values`` not 1-d, or ``turn_mask`` not ``[B, K]`` with ``values``' ``B``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.broadcast_to_turns(jnp.array([0.5, -1.0]),
      ...                           jnp.array([[True, True, False], [True, False, False]]))
      Array([[ 0.5,  0.5,  0. ],
             [-1. ,  0. ,  0. ]], dtype=float32)

    References:
      What ``credax.credit`` does with a row-level method's output; verl's outcome estimators
      write ``scores.unsqueeze(-1) * response_mask`` (a product, which keeps a padded NaN),
      credax selects.
    """
    values = _checks.as_float_array(values, "values")
    _checks.check_ndim(values, "values", 1, "[B]")
    turn_mask = _checks.as_array(turn_mask, "turn_mask")
    _checks.check_ndim(turn_mask, "turn_mask", 2, "[B, K]")
    _checks.check_leading(turn_mask, "turn_mask", values.shape, "[B, K]", f"B={values.shape[0]}")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", turn_mask.shape)
    out = values.astype(_numeric.output_dtype(values.dtype))[:, None]
    return jnp.where(turn_mask, out, jnp.zeros((), out.dtype))


def _check_layout(arguments) -> None:
    """Host (NumPy, list) lengths must be ``>= 0``; JAX arrays stay on the device (no read-back
    per training step) and a negative value there reads as ``0``."""
    for name in ("prompt_lengths", "action_lengths", "env_lengths"):
        host = concrete_numpy(arguments.get(name))
        if host is None or host.dtype.kind not in "iu" or not host.size or host.min() >= 0:
            continue
        at = tuple(int(i) for i in np.argwhere(host < 0)[0])
        raise ValueError(f"`{name}` must be >= 0 (a token count); got {host[at]} at index {at}.")


@jit_public(static_argnames=("num_tokens",), check=_check_layout, replicate=True)
def token_turn_from_layout(
    prompt_lengths: Int[Array, "*B"],
    action_lengths: Int[Array, "B K"],
    env_lengths: Int[Array, "B K"],
    *,
    num_tokens: int,
) -> Int[Array, "B T"]:
    """Build ``token_turn`` in the graph from a fixed sequence layout.

    Row ``b`` is laid out as ``prompt_lengths[b]`` prompt tokens, then for each turn ``k``:
    ``action_lengths[b, k]`` action tokens (the policy's, tagged ``k``) followed by
    ``env_lengths[b, k]`` environment tokens (feedback, tool output: ``-1``), then padding
    (``-1``) up to ``num_tokens``. With ``s_k = p + Σ_{j<k} (a_j + e_j)``::

        token_turn[b, t] = k    if s_k <= t < s_k + a_k
                           -1   otherwise (prompt, environment, padding)

    Tokens past ``num_tokens`` are cut off (the layout is truncated, never wrapped). A turn with
    ``action_lengths = 0`` has no tokens (use it for padded turns). Pure ``jnp`` on static
    shapes: it runs inside ``jit``/``vmap`` on traced lengths (``pad_rollouts`` builds the same
    map on the host from ragged rollouts).

    Args:
      prompt_lengths: ``int[B]`` (or a scalar for every row) prompt tokens per row.
      action_lengths: ``int[B, K]`` the policy's tokens in each turn; ``0`` at padded turns.
      env_lengths: ``int[B, K]`` environment tokens after each turn's action.
      num_tokens: static ``T``, the sequence length.

    Returns:
      ``int32[B, T]``: the turn of each token, ``-1`` at prompt, environment and padding tokens
      (the convention of :func:`broadcast_to_tokens` and the policy loss).

    Raises:
      TypeError: a length array not of an integer dtype; ``num_tokens`` not an int.
      ValueError: shapes that do not agree (``action_lengths`` and ``env_lengths`` both ``[B, K]``,
        ``prompt_lengths`` a scalar or ``[B]``); ``num_tokens < 0``; a negative length given as a
        host value (NumPy, list). In a JAX array (traced or not: no read-back per step) a
        negative length reads as ``0``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.token_turn_from_layout(jnp.array([2]), jnp.array([[2, 1]]), jnp.array([[1, 2]]),
      ...                               num_tokens=10)
      Array([[-1, -1,  0,  0, -1,  1, -1, -1, -1, -1]], dtype=int32)

    References:
      The fixed layout of a multi-turn rollout buffer (prompt, then action and observation
      spans per turn, as verl-agent and Tunix's agentic learner write them); credax's
      ``token_turn`` convention (``-1`` outside actions) is the peers' response/loss mask with
      the turn index in place of ``1``.
    """
    num_tokens = _checks.check_static_int(num_tokens, "num_tokens")
    action = _checks.as_int_array(action_lengths, "action_lengths")
    env = _checks.as_int_array(env_lengths, "env_lengths")
    _checks.check_ndim(action, "action_lengths", 2, "[B, K]")
    _checks.check_shape(env, "env_lengths", action.shape, "[B, K]")
    prompt = _checks.as_int_array(prompt_lengths, "prompt_lengths")
    _checks.check_ndim(prompt, "prompt_lengths", (0, 1), "[B] or a scalar")
    if prompt.ndim == 1:
        _checks.check_shape(prompt, "prompt_lengths", action.shape[:1], "[B]")
    batch, num_turns = action.shape
    action, env = jnp.maximum(action, 0).astype(jnp.int32), jnp.maximum(env, 0).astype(jnp.int32)
    prompt = jnp.broadcast_to(jnp.maximum(prompt, 0).astype(jnp.int32), (batch,))
    if num_turns == 0:
        return jnp.full((batch, num_tokens), -1, jnp.int32)
    span = action + env
    starts = prompt[:, None] + jnp.cumsum(span, axis=1) - span  # s_k: exclusive prefix sums
    t = jnp.arange(num_tokens, dtype=jnp.int32)
    # The last turn whose action starts at or before t (side="right": a zero-length turn is
    # passed over by the turn starting at the same position); prompt tokens find none (-1).
    k = jax.vmap(lambda s: jnp.searchsorted(s, t, side="right"))(starts).astype(jnp.int32) - 1
    kc = jnp.clip(k, 0, num_turns - 1)
    start = jnp.take_along_axis(starts, kc, axis=1)
    length = jnp.take_along_axis(action, kc, axis=1)
    inside = (k >= 0) & (t[None, :] < start + length)
    return jnp.where(inside, kc, -1).astype(jnp.int32)


@jit_public(static_argnames=("num_turns", "reduce"), replicate=True)
def turn_surprisal(
    token_logprobs: Float[Array, "B T"],
    token_turn: Int[Array, "B T"],
    *,
    num_turns: int,
    reduce: str = "mean",
) -> Float[Array, "B K"]:
    """Surprisal of each turn: mean (or sum) of ``-log p`` over the tokens it generated.

    Tokens with ``token_turn == -1`` (or outside ``[0, num_turns)``) are ignored, whatever their
    log-prob holds (NaN included). Turns without tokens get ``0``. TCPO selects its counterfactual
    turns by this quantity (*(reading)*: the paper does not give the formula; mean token NLL is
    length-neutral, ``reduce="sum"`` is the alternative).

    Args:
      token_logprobs: ``float[B, T]`` log-probabilities of the sampled tokens (rollout policy).
      token_turn: ``int[B, T]``.
      num_turns: static ``K``.
      reduce: ``"mean"`` or ``"sum"`` (static).

    Returns:
      ``float[B, K]``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> lp = jnp.log(jnp.array([[0.5, 0.25, 1.0, 0.5]]))
      >>> credax.turn_surprisal(lp, jnp.array([[0, 0, -1, 1]]), num_turns=3)
      Array([[1.0397208, 0.6931472, 0.       ]], dtype=float32)
    """
    _checks.check_option(reduce, "reduce", ("mean", "sum"))
    num_turns = _checks.check_static_int(num_turns, "num_turns", minimum=1)
    lp = _checks.as_float_array(token_logprobs, "token_logprobs")
    _checks.check_ndim(lp, "token_logprobs", 2, "[B, T]")
    token_turn = check_token_turn(token_turn, lp.shape[0])
    _checks.check_shape(token_turn, "token_turn", lp.shape, "[B, T]")
    out_dtype = _numeric.output_dtype(lp.dtype)
    lp = lp.astype(_numeric.compute_dtype(lp.dtype))
    batch = lp.shape[0]
    inside = (token_turn >= 0) & (token_turn < num_turns)
    # Flat segment b*K + k; tokens without a turn go to one spare segment that is dropped.
    seg = jnp.where(inside, jnp.arange(batch)[:, None] * num_turns + token_turn, batch * num_turns)
    nll = jnp.where(inside, -lp, jnp.zeros_like(lp))
    both = jnp.stack([nll, inside.astype(lp.dtype)], axis=-1).reshape(-1, 2)
    sums = jax.ops.segment_sum(both, seg.reshape(-1), batch * num_turns + 1)[:-1]
    total, count = sums[:, 0].reshape(batch, num_turns), sums[:, 1].reshape(batch, num_turns)
    out = total if reduce == "sum" else _numeric.safe_div(total, count, count > 0)
    return out.astype(out_dtype)


# --------------------------------------------------------------------------------------------
# Masked reverse scans: the shared primitive of value-based credit (GAE over tokens or turns).
# --------------------------------------------------------------------------------------------


def next_valid(x: jax.Array, mask: jax.Array, init: jax.Array) -> jax.Array:
    """For each position of ``x[B, N]``, the value of ``x`` at the next *valid* position after it.

    ``init[B]`` where no valid position follows (the bootstrap value after the last step). Masked
    positions are skipped: they do not consume a step (prompt/observation tokens inside a
    trajectory, as verl and AReaL skip them). Values at masked positions are never read.
    """

    def step(carry, col):
        x_t, m_t = col
        return jnp.where(m_t, x_t, carry), carry

    if x.shape[1] == 0:  # no positions: nothing follows anything (x[:, 0] does not exist)
        return x
    # ``+ 0`` gives the carry the rows' sharding: under an Explicit mesh ``jnp.where`` needs its
    # cases sharded alike, and an unsharded ``init`` (a default bootstrap) would not be.
    init = init + jnp.zeros_like(x[:, 0])
    _, out = jax.lax.scan(step, init, (x.T, mask.T), reverse=True)
    return out.T


def masked_discounted_sum(x: jax.Array, mask: jax.Array, discount: jax.Array) -> jax.Array:
    """``S_t = x_t + d · S_{t'}`` over valid positions, ``t'`` the next valid one; ``0`` off the mask.

    ``discount`` is a scalar or one value per row (``[B]``, e.g. a length-adaptive λ·γ). Masked
    positions neither contribute nor consume a discount step (the difference from
    :func:`discounted_returns`, whose masked turns are a padded suffix). A reverse ``lax.scan``:
    stable for any horizon.
    """
    discount = jnp.broadcast_to(discount, x.shape[:1])
    if x.shape[1] == 0:  # no positions: an empty sum
        return jnp.zeros_like(x)

    def step(carry, col):
        x_t, m_t = col
        s = jnp.where(m_t, x_t + discount * carry, carry)
        return s, jnp.where(m_t, s, jnp.zeros_like(s))

    _, out = jax.lax.scan(step, jnp.zeros_like(x[:, 0]), (x.T, mask.T), reverse=True)
    return out.T


def prepare_anchored_steps(outcome_rewards, step_rewards, anchor_ids, turn_mask):
    """Shared argument handling of the anchor-state estimators (GiGPO, HGPO; PGPO, which reads no
    outcome, passes ``outcome_rewards=None``).

    Returns ``(outcome [B] or None, steps [B, K], anchors [B, K], turn_mask, out_dtype,
    compute_dtype)``; the float arrays are not yet cast.
    """
    s = _checks.as_float_array(step_rewards, "step_rewards")
    _checks.check_ndim(s, "step_rewards", 2, "[B, K]")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", s.shape)
    anchors = _checks.as_int_array(anchor_ids, "anchor_ids")
    _checks.check_shape(anchors, "anchor_ids", s.shape, "[B, K]")
    r = None
    if outcome_rewards is not None:
        r = _checks.as_float_array(outcome_rewards, "outcome_rewards")
        _checks.check_shape(r, "outcome_rewards", s.shape[:1], "[B]")
    out_dtype = _numeric.output_dtype(s.dtype if r is None else jnp.promote_types(r.dtype, s.dtype))
    return r, s, anchors, turn_mask, out_dtype, _numeric.compute_dtype(out_dtype)

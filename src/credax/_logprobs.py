"""Token log-probabilities without the ``[B, T, V]`` log-softmax: the memory engineering of the loss.

Two entry points, both ``[B, T]`` out:

* :func:`token_logprobs` from materialised logits, with a custom VJP whose backward pass holds
  nothing ``[..., V]``-sized but the gradient itself;
* :func:`token_logprobs_from_hidden` from the last hidden states and the unembedding, optionally
  chunked over the sequence with ``lax.scan`` + ``jax.checkpoint`` so the full logits never exist.

Masked positions are selected to ``0`` (values there never matter, gradients included);
concrete out-of-range tokens at real positions raise a ``ValueError`` before tracing, and traced
ones (inside the caller's ``jit``) are NaN, so a data bug stays visible either way.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _collectives, _numeric
from ._api import concrete_numpy, jit_public, reads, replicate_explicit

# --------------------------------------------------------------------------------------------
# Token log-probabilities.
# --------------------------------------------------------------------------------------------


def _scaled(x: jax.Array, inv_temp: jax.Array | None) -> jax.Array:
    """``x / T`` written as ``x * (1 / T)``; no operation at all without a temperature."""
    return x if inv_temp is None else x * inv_temp


def _logsumexp(logits: jax.Array, dtype, inv_temp: jax.Array | None = None) -> jax.Array:
    """``log Σ_v exp(logits[..., v] / T)`` in ``dtype`` as two fused reductions over the raw logits.

    The max is taken on the logits as they are (exact in any dtype) and the cast to ``dtype``
    (and the temperature's scaling, ``T > 0`` keeps the max where it is) happens inside the
    exp-sum, so no ``[..., V]`` intermediate (converted, scaled or shifted copy, log-softmax)
    needs to exist. Rows that are entirely ``-inf`` give ``-inf``.
    """
    top = jax.lax.stop_gradient(jnp.max(logits, axis=-1)).astype(dtype)
    top = jnp.where(jnp.isfinite(top), top, jnp.zeros_like(top))
    shifted = _scaled(logits.astype(dtype) - top[..., None], inv_temp)
    return _scaled(top, inv_temp) + jnp.log(jnp.sum(jnp.exp(shifted), axis=-1))


def _picked(logits: jax.Array, tokens: jax.Array, dtype, inv_temp) -> jax.Array:
    picked = jnp.take_along_axis(logits, tokens[..., None], axis=-1)[..., 0].astype(dtype)
    return _scaled(picked, inv_temp)


@jax.custom_vjp
def _logprob_core(logits: jax.Array, tokens: jax.Array, mask: jax.Array, inv_temp=None) -> jax.Array:
    """``(logits[token] - logsumexp(logits / T)·T) / T``; ``tokens`` in range, ``mask`` only shapes
    the VJP; ``inv_temp`` is ``1 / T`` (a constant: it gets no gradient) or ``None`` for T = 1."""
    dtype = _numeric.compute_dtype(logits.dtype)
    return _picked(logits, tokens, dtype, inv_temp) - _logsumexp(logits, dtype, inv_temp)


def _logprob_core_fwd(logits, tokens, mask, inv_temp=None):
    dtype = _numeric.compute_dtype(logits.dtype)
    lse = _logsumexp(logits, dtype, inv_temp)
    return _picked(logits, tokens, dtype, inv_temp) - lse, (logits, tokens, mask, lse, inv_temp)


def _logprob_core_bwd(residuals, g):
    # d logp / d logits = (onehot(token) - softmax(logits / T)) / T, written as one elementwise
    # expression of the logits so the backward pass holds nothing [..., V]-sized but the gradient
    # itself (autodiff of logsumexp keeps a softmax or a converted copy of the logits alive
    # instead). The select makes masked rows exactly 0 even when their logits are NaN (0 * NaN
    # would be NaN).
    logits, tokens, mask, lse, inv_temp = residuals
    dtype = lse.dtype
    softmax = jnp.exp(_scaled(logits.astype(dtype), inv_temp) - lse[..., None])
    vocab = jax.lax.broadcasted_iota(tokens.dtype, logits.shape, logits.ndim - 1)
    onehot = (vocab == tokens[..., None]).astype(dtype)
    scale = g if inv_temp is None else g * inv_temp
    grad = jnp.where(mask[..., None], scale[..., None] * (onehot - softmax), jnp.zeros_like(softmax))
    no_temp_grad = None if inv_temp is None else jnp.zeros_like(inv_temp)
    return grad.astype(logits.dtype), None, None, no_temp_grad


_logprob_core.defvjp(_logprob_core_fwd, _logprob_core_bwd)


def _autodiff_core(logits: jax.Array, tokens: jax.Array, mask: jax.Array, inv_temp=None) -> jax.Array:
    """The same value as :func:`_logprob_core`, differentiated by plain autodiff.

    Used on the freshly computed logits of the hidden-state path, where XLA fuses the matmul
    output with autodiff's softmax gradient better than with the custom VJP (fewer temporary bytes;
    ``benchmarks/memory.py`` measures both); there the logits are finite at masked positions
    (the hidden states are selected to 0 first), so no select is needed in the backward pass.
    """
    del mask
    dtype = _numeric.compute_dtype(logits.dtype)
    logits = _scaled(logits.astype(dtype), inv_temp)
    picked = jnp.take_along_axis(logits, tokens[..., None], axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def _picked_logprobs(logits: jax.Array, tokens: jax.Array, mask: jax.Array | None, dtype,
                     core=_logprob_core, inv_temp: jax.Array | None = None):
    """``logits[token] - logsumexp(logits)`` in ``dtype``; NaN for out-of-range tokens, 0 masked.

    With the default core, differentiable in reverse mode only (a custom VJP keeps the backward
    pass free of ``[..., V]`` temporaries); ``jax.jvp`` / forward-mode Hessians are not supported.
    """
    num_classes = logits.shape[-1]
    in_range = (tokens >= 0) & (tokens < num_classes)
    valid = jnp.ones_like(tokens, dtype=bool) if mask is None else mask  # tokens' sharding
    safe = jnp.where(in_range & valid, tokens, jnp.zeros_like(tokens))
    lp = core(logits, safe, valid, inv_temp).astype(dtype)
    # An out-of-range token on a real position is a data bug: keep it visible as NaN.
    lp = jnp.where(in_range, lp, jnp.full_like(lp, jnp.nan))
    return lp if mask is None else _numeric.select(mask, lp)


def check_temperature(temperature) -> None:
    """Eager range check of a concrete ``temperature`` (a traced one is used as given)."""
    if temperature is None:
        return
    _, host = _checks.option_number(temperature, "temperature")  # every real scalar form
    if host is None:
        return  # traced: used as given
    if not (math.isfinite(host) and host > 0):
        raise ValueError(
            f"`temperature` must be positive and finite (logits are divided by it); got {host}. "
            "Greedy decoding (T = 0) has no log-probabilities to score: pass the sampler's T."
        )
    if not jax.config.jax_enable_x64:
        # Without x64 the logits are divided in float32: T must be a positive float32 whose
        # reciprocal is finite (1e-46 is 0 there, 1e-39 has 1/T = inf, 1e39 is inf itself).
        with np.errstate(over="ignore", divide="ignore"):
            t32 = np.float32(host)
            inverse = np.float32(1) / t32
        if not (np.isfinite(t32) and t32 > 0 and np.isfinite(inverse)):
            raise ValueError(
                f"`temperature` is {float(host):g}: positive and finite as a double, but float32 "
                f"(JAX's dtype without `jax_enable_x64`) makes it {float(t32):g} and 1/T "
                f"{float(inverse):g}; the logits would be inf or NaN.")


@reads("temperature")
def _check_temperature_arg(arguments) -> None:
    check_temperature(arguments["temperature"])


@functools.partial(jax.jit, static_argnums=1)
def _first_out_of_range(tokens, vocab: int, mask=None):
    """Flat index of the first unmasked token outside ``[0, vocab)``, or -1 (on the device: one
    dispatch, one scalar comes back)."""
    bad = (tokens < 0) | (tokens >= vocab)
    if mask is not None:
        bad = bad & mask
    return jnp.where(jnp.any(bad), jnp.argmax(bad.reshape(-1)), -1)


def check_token_range(tokens, vocab, mask) -> None:
    """``ValueError`` for a concrete token id outside ``[0, vocab)`` at an unmasked position.

    NumPy / list ids are checked on the host, a committed JAX array on its device (one scalar
    comes back). Ids traced by the caller's ``jit`` cannot be seen: they give NaN there (the
    documented behaviour), as do ids whose shape disagrees (the trace-time check names it).
    """
    if isinstance(tokens, jax.core.Tracer) or isinstance(mask, jax.core.Tracer) or vocab is None:
        return
    if isinstance(tokens, jax.Array):
        if not tokens.is_fully_addressable or not jnp.issubdtype(tokens.dtype, jnp.integer):
            return
        host = None
    else:
        host = concrete_numpy(tokens)
        if host is None or not np.issubdtype(host.dtype, np.integer):
            return
    shape = np.shape(tokens)
    if not np.prod(shape, dtype=int):
        return  # no token (T = 0 or B = 0): nothing out of range
    if mask is not None:
        mask_dtype = mask.dtype if isinstance(mask, jax.Array) else np.asarray(mask).dtype
        if np.shape(mask) != shape or mask_dtype != np.bool_:
            return  # the trace-time checks name the mask's problem
    if host is not None:
        keep = np.ones(shape, bool) if mask is None else np.asarray(mask)
        bad = np.flatnonzero(((host < 0) | (host >= vocab)) & keep)
        flat = int(bad[0]) if bad.size else -1
    else:
        found = _first_out_of_range(tokens, int(vocab), mask)
        if isinstance(found, jax.core.Tracer):
            return  # concrete ids closed over inside the caller's jit: the trace cannot look
        flat = int(found)
    if flat >= 0:
        index = tuple(int(i) for i in np.unravel_index(flat, shape))
        value = (host.reshape(-1)[flat] if host is not None else tokens.reshape(-1)[flat])
        raise ValueError(
            f"`tokens` must lie in [0, V={vocab}) at unmasked positions; tokens"
            f"{list(index)} = {int(value)}. Mask padding ids (such as -100) out with `mask`; "
            "inside your own jit such ids cannot be seen and give NaN there.")


def _check_logprobs_args(arguments) -> None:
    check_temperature(arguments["temperature"])
    if arguments.get("vocab_axis") is not None:
        return  # a vocabulary shard: V is the axis's, not the slice's (ids are traced there)
    source = arguments.get("logits", arguments.get("unembedding"))
    shape = np.shape(source) if hasattr(source, "shape") or isinstance(source, list) else None
    if shape and len(shape) == (3 if "logits" in arguments else 2):
        vocab = shape[-1] if "logits" in arguments else shape[1]
        hidden = np.shape(arguments["hidden"]) if "hidden" in arguments else None
        # A [V, D] unembedding passed for [D, V]: the body's shape check names it; reading V off
        # the wrong axis here would blame the tokens instead.
        misshaped = hidden is not None and (not hidden or hidden[-1] != shape[0])
        if vocab and not misshaped:
            check_token_range(arguments["tokens"], vocab, arguments.get("mask"))


def _inverse_temperature(temperature, dtype) -> jax.Array | None:
    return None if temperature is None else 1 / _checks.scalar(temperature, dtype, "temperature")


def _check_logits(logits) -> jax.Array:
    """``logits`` as a real ``[B, T, V]`` array with a vocabulary axis ``V >= 1``."""
    logits = _checks.as_float_array(logits, "logits")
    _checks.check_ndim(logits, "logits", 3, "[B, T, V]")
    if logits.shape[-1] == 0:
        raise ValueError(f"`logits` must have a vocabulary axis V >= 1; got shape {logits.shape}.")
    return logits


def _check_tokens(tokens, shape, name: str = "tokens") -> jax.Array:
    tokens = _checks.as_index_array(tokens, name)
    _checks.check_shape(tokens, name, shape, "[B, T]")
    return tokens


@jit_public(check=_check_logprobs_args)
def token_logprobs(
    logits: Float[Array, "B T V"],
    tokens: Int[Array, "B T"],
    *,
    mask: Bool[Array, "B T"] | None = None,
    temperature: float | Float[Array, ""] | None = None,
) -> Float[Array, "B T"]:
    """Log-probability of each taken token: ``logits[b, t, tokens[b, t]] - logsumexp(logits[b, t])``.

    With a sampling ``temperature`` T the logits are divided by T first:
    ``logp = log softmax(logits / T)[token]`` — the distribution the tokens were drawn from.

    Computed in float32 (float64 stays float64) whatever the logits' dtype, without materialising
    a ``[B, T, V]`` log-softmax: the forward pass is a gather and two fused reductions over the
    vocabulary, and a custom VJP writes the gradient ``onehot - softmax`` in one elementwise pass
    (no ``[B, T, V]`` temporary beyond the gradient itself for float32 logits, forward and
    backward, as ``benchmarks/memory.py`` measures; bfloat16 logits cost one float32 copy there,
    as the CPU backend upcasts bfloat16 arithmetic). The backward pass still produces the
    ``[B, T, V]`` gradient of the logits, as it must; to avoid holding logits at all, use
    :func:`token_logprobs_from_hidden` with a ``chunk_size``. Differentiable in reverse mode
    (``grad``, ``vjp``); forward mode (``jvp``) is not supported.

    No shift is applied: ``logits[:, t]`` scores ``tokens[:, t]``. For a causal language model,
    whose logits at position ``t`` predict the token at ``t + 1``, pass ``logits[:, :-1]`` and
    ``tokens[:, 1:]`` (``credax.nnx.sequence_logprobs`` does this for a Flax NNX model).

    Args:
      logits: ``float[B, T, V]`` unnormalised scores (float32, bfloat16, float16 or float64).
      tokens: ``int[B, T]`` taken token ids, in ``[0, V)``.
      mask: optional ``bool[B, T]``; positions with ``False`` return ``0`` and neither their
        logits nor their tokens (NaN logits, padding ids such as ``-100``) affect any output or
        gradient.
      temperature: optional sampling temperature ``T > 0`` (may be traced); ``None`` (default)
        is ``T = 1`` with no extra operation. Score with the temperature the rollout engine
        sampled with: sampling at 0.7 and scoring at 1 makes the first-update ratio differ from
        1 although the policy has not changed. The scaling happens inside the fused reductions
        (no scaled copy of the logits is made); the gradient is ``(onehot - softmax(z/T)) / T``.

    Returns:
      ``float32[B, T]`` (float64 for float64 logits); ``0`` at masked positions; NaN at unmasked
      positions whose token lies outside ``[0, V)`` when the ids are traced by the caller's
      ``jit`` (concrete ids raise instead).

    Raises:
      TypeError: ``tokens`` is not an integer array, or ``mask`` is not boolean.
      ValueError: ``logits`` is not ``[B, T, V]`` or the shapes disagree; a concrete
        ``temperature`` that is not positive and finite; a concrete token id (NumPy, list, or a
        JAX array outside ``jit``) outside ``[0, V)`` at an unmasked position.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> logits = jnp.log(jnp.array([[[0.5, 0.25, 0.25], [0.1, 0.6, 0.3]]]))
      >>> lp = credax.token_logprobs(logits, jnp.array([[0, 2]]))
      >>> [round(float(x), 4) for x in jnp.exp(lp[0])]
      [0.5, 0.3]
      >>> hot = credax.token_logprobs(logits, jnp.array([[0, 2]]), temperature=2.0)
      >>> round(float(jnp.exp(hot[0, 0])), 4)   # sqrt(.5) / (sqrt(.5) + 2 sqrt(.25))
      0.4142

    References:
      The fused log-sum-exp form is what peers use to avoid a full log-softmax (verl
      ``logprobs_from_logits``, TRL ``selective_log_softmax``); maxtext PR#5231 for float32 logits.
    """
    logits = _check_logits(logits)
    shape = logits.shape[:2]
    tokens = _check_tokens(tokens, shape)
    if mask is not None:
        mask = _checks.as_mask(mask, "mask", shape)
    dtype = _numeric.compute_dtype(logits.dtype)
    return _picked_logprobs(logits, tokens, mask, dtype,
                            inv_temp=_inverse_temperature(temperature, dtype))


def _entropy_values(logits: jax.Array, dtype, inv_temp: jax.Array | None = None) -> jax.Array:
    """``H = log S - Σ_v e^{s_v - log S} s_v`` with ``s = (logits - max) / T``, ``S = Σ e^s``.

    The same quantity as ``logsumexp(z) - Σ softmax(z) z`` written on the *shifted* logits
    ``s <= 0`` (the largest exactly 0): both terms are ``O(1)``, so the absolute error is float
    resolution (~1e-7) whatever the logits' magnitude. The unshifted form subtracts two numbers
    near the largest logit and loses everything below its ulp (logits ``[300, 290]``: float64
    gives ``H = 4.994e-4``, float32 gave ``0.0``; now ``4.99e-4``). Two fused reductions over the
    vocabulary, each an elementwise expression inside its reduction, as before: no ``[..., V]``
    softmax is materialised in the forward pass. ``-inf`` logits are tokens of probability 0 and
    add nothing (``e^s · s`` is 0 there, not ``0 · -inf = NaN``); a row of only ``-inf``
    is no distribution and gives NaN. ``max(·, 0)`` guards the rounding of a one-hot row.
    """
    top = jax.lax.stop_gradient(jnp.max(logits, axis=-1)).astype(dtype)
    top = jnp.where(jnp.isfinite(top), top, jnp.zeros_like(top))
    z = logits.astype(dtype)
    total = jnp.sum(jnp.exp(_scaled(z - top[..., None], inv_temp)), axis=-1)
    log_total = jnp.log(total)
    # The same shifted logits for the second sum, spelt z + (-top) (bit-identical to z - top):
    # an expression both sums shared would be materialised as a [..., V] array of its own
    # (XLA merges identical expressions), ~2.5x slower on the CPU, measured.
    # -inf (a token of probability 0) is clamped to a finite -1e30, whose e^s is exactly 0: the
    # product is 0, not 0 · -inf = NaN, and the gradient there is 0. A clamp, not a select: the
    # CPU's fused reduction takes it in (a select made XLA write the operand out first, ~2.5x).
    s = jnp.maximum(_scaled(z + (-top)[..., None], inv_temp), jnp.asarray(-1e30, dtype))
    weighted = jnp.sum(jnp.exp(s - log_total[..., None]) * s, axis=-1)
    h = jnp.maximum(log_total - weighted, jnp.zeros_like(log_total))
    return jnp.where(total > 0, h, jnp.full_like(h, jnp.nan))


class LogprobsEntropy(NamedTuple):
    """Token log-probabilities and the policy's per-token entropy, from one pass over the logits."""

    logprobs: Array
    entropy: Array


@jit_public(check=_check_temperature_arg)
def token_entropy(
    logits: Float[Array, "B T V"],
    *,
    mask: Bool[Array, "B T"] | None = None,
    temperature: float | Float[Array, ""] | None = None,
) -> Float[Array, "B T"]:
    """Entropy of the policy at each position: ``H = -Σ_v p_v log p_v``, ``p = softmax(logits / T)``.

    Computed as ``logsumexp(z) - Σ_v p_v z_v`` in float32 (float64 stays) with two fused
    reductions, without materialising a log-softmax (the trick of :func:`token_logprobs`).
    Differentiable (the gradient is what an entropy bonus needs); for logits that never exist in
    full use ``token_logprobs_from_hidden(..., with_entropy=True)``. Pass it to
    :func:`policy_loss` as ``entropy`` for a bonus, or aggregate it as a metric.

    Args:
      logits: ``float[B, T, V]``.
      mask: optional ``bool[B, T]``; masked positions return ``0`` (NaN logits there included).
      temperature: optional ``T > 0`` (may be traced); ``None`` is ``T = 1``.

    Returns:
      ``float32[B, T]`` (float64 for float64 logits), ``>= 0``; ``0`` at masked positions. The
      entropy is computed on the shifted logits, so its absolute error is float resolution
      (~1e-7 in float32) whatever their magnitude (near one-hot rows such as ``[300, 290]`` keep
      their ``4.99e-4``). ``-inf`` logits are tokens of probability 0; a row of only ``-inf`` is
      NaN (no distribution); ``+inf`` or NaN logits give NaN.

    Raises:
      ValueError: ``logits`` is not ``[B, T, V]`` with ``V >= 1``, or ``mask`` has another shape;
        a concrete ``temperature`` that is not positive and finite.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> logits = jnp.log(jnp.array([[[0.5, 0.25, 0.25], [1.0, 1e-30, 1e-30]]]))
      >>> [round(float(h), 4) for h in credax.token_entropy(logits)[0]]   # 1.5 ln 2, ~0
      [1.0397, 0.0]

    References:
      verl ``entropy_from_logits`` (``logsumexp - Σ softmax · logits``); used as verl's
      ``entropy_coeff`` bonus and logged as ``actor/entropy``.
    """
    logits = _check_logits(logits)
    dtype = _numeric.compute_dtype(logits.dtype)
    if mask is not None:
        mask = _checks.as_mask(mask, "mask", logits.shape[:2])
        logits = jnp.where(mask[..., None], logits, jnp.zeros_like(logits))
    out = _entropy_values(logits, dtype, _inverse_temperature(temperature, dtype))
    return out if mask is None else _numeric.select(mask, out)


def _vocab_parallel_logprobs(h, w, tok, m, dtype, inv_temp, axis, with_entropy):
    """:func:`token_logprobs_from_hidden`'s chunk with the vocabulary split over mesh axis
    ``axis`` (``credax._collectives.vocab_parallel_chunk``); differentiated by autodiff, whose
    transpose of each ``psum`` hands every device its own share of the gradient."""
    c = _collectives.vocab_parallel_chunk(h, w, tok, dtype, inv_temp, axis)
    lp = _collectives.vocab_parallel_logprobs(c, inv_temp)
    lp = lp if m is None else _numeric.select(m, lp)
    if not with_entropy:
        return lp
    ent = _collectives.vocab_parallel_entropy(c, inv_temp, axis)
    return LogprobsEntropy(lp, ent if m is None else _numeric.select(m, ent))


def check_hidden_and_unembedding(hidden, unembedding) -> tuple[jax.Array, jax.Array]:
    """``hidden [B, T, D]`` and ``unembedding [D, V]`` as float arrays, ``V >= 1`` and the ``D`` of
    both equal (the checks of every function from hidden states), named in the errors."""
    hidden = _checks.as_float_array(hidden, "hidden")
    _checks.check_ndim(hidden, "hidden", 3, "[B, T, D]")
    unembedding = _checks.as_float_array(unembedding, "unembedding")
    _checks.check_ndim(unembedding, "unembedding", 2, "[D, V]")
    dim = hidden.shape[2]
    if unembedding.shape[1] == 0:
        raise ValueError(f"`unembedding` must have a vocabulary axis V >= 1; got shape "
                         f"{unembedding.shape}.")
    if unembedding.shape[0] != dim:
        raise ValueError(
            f"`unembedding` must have shape [D, V] with D={dim} (the last axis of `hidden`); "
            f"got {unembedding.shape}.")
    return hidden, unembedding


@jit_public(static_argnames=("chunk_size", "with_entropy", "vocab_axis"),
            check=_check_logprobs_args)
def token_logprobs_from_hidden(
    hidden: Float[Array, "B T D"],
    unembedding: Float[Array, "D V"],
    tokens: Int[Array, "B T"],
    *,
    chunk_size: int | None = None,
    mask: Bool[Array, "B T"] | None = None,
    temperature: float | Float[Array, ""] | None = None,
    with_entropy: bool = False,
    vocab_axis: str | tuple[str, ...] | None = None,
) -> Float[Array, "B T"] | LogprobsEntropy:
    """Token log-probabilities from the last hidden states, without ever holding ``[B, T, V]`` logits.

    ``logp[b, t] = z[tokens[b, t]] - logsumexp(z)`` with ``z = hidden[b, t] @ unembedding``, the
    product accumulated in float32. With ``chunk_size=c`` the sequence is walked in chunks of
    ``c`` positions by a ``lax.scan``; each chunk's logits and log-sum-exp sit inside
    ``jax.checkpoint``, so the forward pass keeps only the chunk's inputs and the backward pass
    recomputes the ``[B, c, V]`` logits chunk by chunk. Peak temporary memory is then a few
    ``[B, c, V]`` buffers plus the ``[D, V]`` gradient accumulator, instead of about twice the
    full logits (logits and their softmax gradient) — the fused linear log-prob that keeps RL on
    long sequences in memory. Results and gradients equal the unchunked computation up to float
    summation order.

    ``T`` need not be a multiple of ``c``: the last chunk is padded (masked) internally.
    Gradients flow to ``hidden`` and ``unembedding``; in bfloat16 the per-chunk ``unembedding``
    gradients are summed in bfloat16 (the dtype of the parameter).

    Args:
      hidden: ``float[B, T, D]`` final hidden states (after the final norm).
      unembedding: ``float[D, V]`` output projection (a tied embedding is ``embedding.T``).
      tokens: ``int[B, T]`` taken token ids; ``hidden[:, t]`` scores ``tokens[:, t]`` (no shift).
      chunk_size: static; positions per chunk, or ``None`` to compute the full logits at once.
      mask: optional ``bool[B, T]``; masked positions return ``0`` and their hidden states and
        tokens affect nothing, gradients included.
      temperature: optional sampling temperature ``T > 0`` (may be traced): ``z / T`` is scored,
        chunk by chunk on the chunked path. ``None`` (default) is ``T = 1``.
      with_entropy: static; also return the per-token entropy (:func:`token_entropy`) computed
        from the same chunk logits (no second matmul), as ``LogprobsEntropy(logprobs, entropy)``.
      vocab_axis: static; inside ``jax.shard_map``, the mesh axis over which the unembedding's
        vocabulary is split: each device passes its own ``[D, V/n]`` slice (device ``i`` of the
        axis holding ids ``[i·V/n, (i+1)·V/n)``) and the same ``hidden`` and global ``tokens``.
        Each device computes its chunk logits ``[B, c, V/n]``; the log-sum-exp (a ``pmax`` of the
        max, a ``psum`` of the exp-sum) and the taken token's logit (a ``psum``) are combined
        across the axis as ``[B, c]`` values, never the ``[B, c, V]`` logits or the ``[D, V]``
        unembedding. The result (and entropy) is the whole vocabulary's, the same on every device
        of the axis; the gradient w.r.t. ``hidden`` is summed over the axis (an all-reduce of
        ``[B, T, D]``, as any vocabulary-parallel head's), the one w.r.t. the slice is the
        slice's. ``None`` (default): the unembedding is whole. docs/guides/scale.md.

    Returns:
      ``float32[B, T]`` (float64 for float64 inputs); ``0`` at masked positions; NaN at unmasked
      positions whose token lies outside ``[0, V)`` when the ids are traced (concrete ids raise,
      as in :func:`token_logprobs`). With ``with_entropy``: a
      ``LogprobsEntropy(logprobs, entropy)`` of two such arrays.

    Raises:
      TypeError: non-integer ``tokens``, non-boolean ``mask``, or a non-int ``chunk_size``.
      ValueError: shapes disagree, ``chunk_size < 1``, a concrete ``temperature`` that is not
        positive and finite, or a concrete token id outside ``[0, V)`` at an unmasked position.

    Examples:
      >>> import credax, jax, jax.numpy as jnp
      >>> h = jax.random.normal(jax.random.key(0), (2, 6, 4))
      >>> w = jax.random.normal(jax.random.key(1), (4, 11))
      >>> tok = jnp.array([[1, 2, 3, 4, 5, 6], [0, 10, 9, 8, 7, 6]])
      >>> full = credax.token_logprobs_from_hidden(h, w, tok)
      >>> chunked = credax.token_logprobs_from_hidden(h, w, tok, chunk_size=4)
      >>> bool(jnp.allclose(full, chunked, atol=1e-6))
      True

    References:
      The chunked linear-cross-entropy idea of Liger-Kernel's fused linear cross entropy and of
      Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models" (arXiv
      2411.09009); here expressed with ``lax.scan`` + ``jax.checkpoint`` so XLA needs no custom
      kernel.
    """
    split = None if vocab_axis is not None else _collectives.explicit_vocab_split(unembedding)
    if split is None:
        return _from_hidden(hidden, unembedding, tokens, chunk_size, mask, temperature,
                            with_entropy, vocab_axis)
    # The unembedding sharded over its vocabulary on Explicit mesh axes: vocabulary-parallel in
    # a shard_map of its own (never gathered); the other inputs replicated.
    mesh, axis = split
    whole = jax.sharding.PartitionSpec()
    given = {k: replicate_explicit(v) for k, v in
             dict(hidden=hidden, tokens=tokens, mask=mask, temperature=temperature).items()
             if isinstance(v, jax.Array)}

    def shard(w, given):
        a = {**dict(hidden=hidden, tokens=tokens, mask=mask, temperature=temperature), **given}
        return _from_hidden(a["hidden"], w, a["tokens"], chunk_size, a["mask"], a["temperature"],
                            with_entropy, axis)

    return jax.shard_map(shard, mesh=mesh, in_specs=(jax.sharding.PartitionSpec(None, axis), whole),
                         out_specs=whole)(unembedding, given)


def _from_hidden(hidden, unembedding, tokens, chunk_size, mask, temperature, with_entropy,
                 vocab_axis):
    """The body of :func:`token_logprobs_from_hidden` (``vocab_axis``: this device's shard)."""
    hidden, unembedding = check_hidden_and_unembedding(hidden, unembedding)
    batch, length, _ = hidden.shape
    tokens = _check_tokens(tokens, (batch, length))
    if mask is not None:
        mask = _checks.as_mask(mask, "mask", (batch, length))
    if chunk_size is not None:
        chunk_size = _checks.check_static_int(chunk_size, "chunk_size", minimum=1)

    common = jnp.promote_types(hidden.dtype, unembedding.dtype)
    if not jnp.issubdtype(common, jnp.floating):
        common = jnp.dtype(jnp.float32)
    dtype = _numeric.compute_dtype(common)
    hidden, unembedding = hidden.astype(common), unembedding.astype(common)
    if mask is not None:
        hidden = jnp.where(mask[..., None], hidden, jnp.zeros_like(hidden))

    inv_temp = _inverse_temperature(temperature, dtype)

    _collectives.check_axis_name(vocab_axis, "vocab_axis")

    def logprobs(h, tok, m):
        if vocab_axis is not None:
            return _vocab_parallel_logprobs(h, unembedding, tok, m, dtype, inv_temp, vocab_axis,
                                            with_entropy)
        logits = jnp.einsum("btd,dv->btv", h, unembedding, preferred_element_type=dtype)
        lp = _picked_logprobs(logits, tok, m, dtype, core=_autodiff_core, inv_temp=inv_temp)
        if not with_entropy:
            return lp
        ent = _entropy_values(logits, dtype, inv_temp)
        return LogprobsEntropy(lp, ent if m is None else _numeric.select(m, ent))

    if chunk_size is None or chunk_size >= length:
        return logprobs(hidden, tokens, mask)

    num_chunks = -(-length // chunk_size)
    pad = num_chunks * chunk_size - length
    # ones_like keeps the tokens' sharding (an Explicit mesh's selects need it inside the scan).
    valid = jnp.ones_like(tokens, dtype=bool) if mask is None else mask
    if pad:
        hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
        tokens = jnp.pad(tokens, ((0, 0), (0, pad)))
        valid = jnp.pad(valid, ((0, 0), (0, pad)))
    padded = length + pad

    def chunks(x):  # [B, n*c, ...] -> [n, B, c, ...]: the scan walks the leading axis
        return jnp.moveaxis(x.reshape(batch, num_chunks, chunk_size, *x.shape[2:]), 1, 0)

    # Only the chunk's inputs are saved for the backward pass; the [B, c, V] logits are
    # recomputed there (prevent_cse=False is the documented setting inside scan).
    chunk_fn = jax.checkpoint(logprobs, prevent_cse=False)
    chunk_mask = (mask is not None) or bool(pad)

    def step(carry, xs):
        h, tok, m = xs
        return carry, chunk_fn(h, tok, m if chunk_mask else None)

    _, out = jax.lax.scan(step, None, (chunks(hidden), chunks(tokens), chunks(valid)))
    return jax.tree_util.tree_map(
        lambda x: jnp.moveaxis(x, 0, 1).reshape(batch, padded)[:, :length], out)

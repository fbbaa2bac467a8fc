"""The policy loss straight from hidden states: one chunked pass, three GEMMs a chunk.

``policy_loss(token_logprobs_from_hidden(h, W, tokens, chunk_size=c), ...)`` cannot know the
loss's gradient while it computes a chunk's log-probs, so under ``jax.grad`` its backward pass
recomputes every chunk's logits: four ``[N, D] x [D, V]``-sized GEMMs in all (forward, recompute,
``d h``, ``d W``). With a per-token ratio the loss is a sum of per-token terms whose weights depend
on the mask only (every aggregation mode is ``Σ_{b,t} w_{b,t} ℓ(logp_{b,t})``), so a token's
gradient ``∂L/∂logp_{b,t}`` is known the moment its log-prob is: :func:`policy_loss_from_hidden`
computes it inside the forward scan, chunk by chunk, and with it the chunk's ``d h`` and its share
of ``d W`` (Liger-Kernel's fused linear losses compute their gradients in the forward pass the same
way). Three GEMMs a chunk, the floor; the backward pass only scales the stored gradients. Where a
token's gradient depends on its whole row (a sequence ratio, VESPO's sequence weight) a
forward-only scan first computes every log-prob: four GEMMs a chunk there.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _collectives, _numeric
from ._api import _replicate_tree, jit_public, replicate_explicit
from ._logprobs import (
    _check_logprobs_args,
    _check_tokens,
    _inverse_temperature,
    _scaled,
    check_hidden_and_unembedding,
)
from ._loss_options import MOVED_TO_LOSS_OPTIONS, LossOptions, as_loss_options
from ._losses import PolicyLoss, _check_policy_args, _policy_loss_body, _token_advantages

_STATIC = ("chunk_size", "vocab_axis", "axis_name")
# Token arrays of the loss, padded to the chunked length (masked there) with these values.
_TOKEN_FIELDS = ("old_logp", "ref_logp", "rollout_logp")


def _check_args(arguments) -> None:
    _check_logprobs_args(arguments)
    _check_policy_args(arguments)


def _chunk_logprobs(h, w, tok, valid, dtype, inv_temp):
    """Logits ``h @ w`` (accumulated in ``dtype``) of one chunk and their token log-probs, as
    :func:`credax.token_logprobs_from_hidden` computes them (NaN for out-of-range tokens, 0 masked)."""
    logits = jnp.einsum("bcd,dv->bcv", h, w, preferred_element_type=dtype)
    vocab = logits.shape[-1]
    in_range = (tok >= 0) & (tok < vocab)
    safe = jnp.where(in_range & valid, tok, jnp.zeros_like(tok))
    z = _scaled(logits, inv_temp)
    picked = jnp.take_along_axis(z, safe[..., None], axis=-1)[..., 0]
    lse = jax.nn.logsumexp(z, axis=-1)
    lp = jnp.where(in_range, picked - lse, jnp.full_like(lse, jnp.nan))
    return logits, safe, in_range, lse, _numeric.select(valid, lp)


def _vocab_parallel_chunk_logprobs(h, w, tok, valid, dtype, inv_temp, axis):
    """:func:`_chunk_logprobs` of a vocabulary shard (``vocab_axis``): this device's ``[B, c, V/n]``
    logits, the token's index in the shard, and the whole vocabulary's log-sum-exp and log-prob
    (``credax._collectives.vocab_parallel_chunk``: ``[B, c]`` collectives only); ``here`` marks
    the tokens this shard holds."""
    c = _collectives.vocab_parallel_chunk(h, w, tok, dtype, inv_temp, axis)
    lp = _numeric.select(valid, _collectives.vocab_parallel_logprobs(c, inv_temp))
    return c.logits, c.local, c.in_range, c.lse, lp, c.here


def _run(hidden, unembedding, tokens, valid, consts, chunk_size: int, with_grad: bool,
         vocab_axis=None, axis_name=None):
    """The chunked scan over ``[n, B, c, ...]`` inputs: the ``[n, B, c]`` log-probs and, with
    ``with_grad``, the gradients of the loss w.r.t. the chunked hidden states and ``unembedding``.
    With ``vocab_axis`` the unembedding is this device's vocabulary shard: the sums over the
    vocabulary (log-sum-exp, taken logit, ``d h``, the temperature's mean logit) are ``psum``-ed
    over that axis, ``d W`` stays the shard's."""
    dtype = _numeric.compute_dtype(hidden.dtype)
    inv_temp = _inverse_temperature(consts["temperature"], dtype)
    num_chunks, batch, _, dim = hidden.shape
    loss_args = _loss_args(consts)

    def loss_of(lp_chunks):  # [n, B, c] log-probs -> the scalar loss
        return _loss(lp_chunks, loss_args, axis_name).loss

    if with_grad and _couples_rows(loss_args["options"]):
        # A sequence ratio or VESPO's sequence weight makes a token's gradient depend on its whole
        # row: a first, forward-only pass (GEMM 1 a chunk) gives every log-prob, and each chunk's
        # gradient below is taken at the true log-probs of the others: four GEMMs a chunk.
        base, _, _ = _run(hidden, unembedding, tokens, valid, consts, chunk_size, with_grad=False,
                          vocab_axis=vocab_axis, axis_name=axis_name)
    else:
        # Positions outside the chunk being differentiated hold the behaviour policy's log-probs
        # (ratio 1, finite): with a per-token loss their values do not enter the chunk's gradient.
        base = _chunks_of(_numeric.select(loss_args["mask"], loss_args["old_logp"].astype(dtype)),
                          num_chunks, chunk_size)

    def over_vocab(x):  # a sum over the vocabulary: this shard's part, then the axis's
        return x if vocab_axis is None else jax.lax.psum(x, vocab_axis)

    def step(carry, xs):
        index, h, tok, m = xs
        if vocab_axis is None:
            logits, safe, in_range, lse, lp = _chunk_logprobs(h, unembedding, tok, m, dtype,
                                                              inv_temp)
            here = None
        else:
            logits, safe, in_range, lse, lp, here = _vocab_parallel_chunk_logprobs(
                h, unembedding, tok, m, dtype, inv_temp, vocab_axis)
        if not with_grad:
            return carry, (lp, None)
        dw, d_inv_temp = carry
        g = jax.grad(lambda x: loss_of(base.at[index].set(x)))(lp)
        # An out-of-range token is NaN in the loss; like the composition, it sends no gradient.
        g = jnp.where(in_range & m, g, jnp.zeros_like(g))
        coef = g if inv_temp is None else g * inv_temp
        # d logp / d logits = (onehot - softmax(z / T)) / T, one elementwise pass over the chunk.
        softmax = jnp.exp(_scaled(logits, inv_temp) - lse[..., None])
        vocab = jax.lax.broadcasted_iota(safe.dtype, logits.shape, logits.ndim - 1)
        onehot = vocab == safe[..., None]
        onehot = (onehot if here is None else onehot & here[..., None]).astype(dtype)
        dlogits = (coef[..., None] * (onehot - softmax)).astype(unembedding.dtype)
        dh = over_vocab(jnp.einsum("bcv,dv->bcd", dlogits, unembedding,
                                   preferred_element_type=dtype))
        dw = dw + jnp.einsum("bcd,bcv->dv", h, dlogits, preferred_element_type=dtype)
        if inv_temp is not None:
            # d logp / d (1/T) = z[token] - Σ_v softmax(z/T)_v z_v: the temperature's gradient,
            # as the composition's autodiff gives it.
            picked = jnp.take_along_axis(logits, safe[..., None], axis=-1)[..., 0]
            if here is not None:
                picked = over_vocab(jnp.where(here, picked, jnp.zeros_like(picked)))
            mean_z = over_vocab(jnp.sum(softmax * logits, axis=-1))
            d_inv_temp = d_inv_temp + jnp.sum(g * (picked - mean_z))
        return (dw, d_inv_temp), (lp, dh.astype(hidden.dtype))

    init = None
    if with_grad:
        # Inside jax.shard_map an accumulator varies over every mesh axis its inputs vary over:
        # d W over all of them, the temperature's sum over all but the vocabulary axis (its
        # terms are psum-ed over it).
        inputs = (hidden, tokens, valid, consts)
        init = (_collectives.vary_like(jnp.zeros(unembedding.shape, dtype), unembedding, *inputs),
                _collectives.vary_like(jnp.zeros((), dtype), unembedding, *inputs,
                                       exclude=vocab_axis))
    xs = (jnp.arange(num_chunks), hidden, tokens, valid)
    carry, (lp, dh) = jax.lax.scan(step, init, xs)
    return lp, dh, carry


def _couples_rows(options: LossOptions) -> bool:
    """Whether a token's ``∂L/∂logp`` depends on the other tokens' log-probs of its row."""
    return options.ratio == "sequence" or options.surrogate == "vespo"


def _chunks_of(x, num_chunks, chunk_size):  # [B, n*c, ...] -> [n, B, c, ...]
    batch = x.shape[0]
    return jnp.moveaxis(x.reshape(batch, num_chunks, chunk_size, *x.shape[2:]), 1, 0)


def _unchunk(x):  # [n, B, c, ...] -> [B, n*c, ...]
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], x.shape[1] * x.shape[2], *x.shape[3:])


def _loss(lp_chunks, loss_args, axis_name=None) -> PolicyLoss:
    args = dict(loss_args)
    lp = _unchunk(lp_chunks)
    return _policy_loss_body(lp, args.pop("old_logp"), args.pop("advantages"), args.pop("mask"),
                             **args, axis_name=axis_name)


def _loss_args(consts):
    return {k: v for k, v in consts.items() if k != "temperature"}


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _fused(hidden, unembedding, tokens, valid, consts, chunk_size, vocab_axis, axis_name):
    lp, _, _ = _run(hidden, unembedding, tokens, valid, consts, chunk_size, with_grad=False,
                    vocab_axis=vocab_axis, axis_name=axis_name)
    return _loss(lp, _loss_args(consts), axis_name)


def _fused_fwd(hidden, unembedding, tokens, valid, consts, chunk_size, vocab_axis, axis_name):
    lp, dh, (dw, d_inv_temp) = _run(hidden, unembedding, tokens, valid, consts, chunk_size,
                                    with_grad=True, vocab_axis=vocab_axis, axis_name=axis_name)
    out = _loss(lp, _loss_args(consts), axis_name)
    # Empty slices of the primals: their types (the mesh axes they vary over inside shard_map)
    # for the backward pass, at no memory cost.
    like = (hidden[:0], unembedding[:0])
    return out, (dh, dw.astype(unembedding.dtype), d_inv_temp, lp, consts, like)


def _fused_bwd(chunk_size, vocab_axis, axis_name, residuals, cotangent):
    # The metrics are stop_gradient quantities of policy_loss: only the loss carries a gradient.
    # old_logp, advantages, ref_logp and rollout_logp are constants of policy_loss (no gradient).
    # The numeric options' gradients (d loss / d normalizer, kl_coef, ...) are the loss body's at
    # the computed log-probs, which do not depend on them.
    dh, dw, d_inv_temp, lp, consts, (hidden_like, unembedding_like) = residuals
    g = cotangent.loss
    args = _loss_args(consts)
    _, options_vjp = jax.vjp(lambda o: _loss(lp, {**args, "options": o}, axis_name).loss,
                             args["options"])
    (d_options,) = options_vjp(g)
    d_consts = {k: None for k in consts}
    d_consts["options"] = d_options
    # Inside jax.shard_map a gradient is summed over the mesh axes it varies over and its primal
    # does not (a replicated unembedding's gradient is the sum of every batch shard's), as
    # autodiff's transpose of the implicit broadcast gives it.
    like = _collectives.sum_to_like
    if consts.get("temperature") is not None:
        _, temp_vjp = jax.vjp(lambda t: _inverse_temperature(t, d_inv_temp.dtype),
                              consts["temperature"])
        (d_consts["temperature"],) = temp_vjp(like(g * d_inv_temp, consts["temperature"]))
    return (like(g * dh.astype(g.dtype), hidden_like).astype(dh.dtype),
            like(g * dw.astype(g.dtype), unembedding_like).astype(dw.dtype), None, None, d_consts)


_fused.defvjp(_fused_fwd, _fused_bwd)


# Under Explicit mesh axes the chunked scan's selects cannot resolve a batch-sharded operand against
# its unsharded carries (ShardingTypeError, tests/test_multidevice.py): the inputs are gathered
# first (credax._api.replicate_explicit), which costs the data parallelism of this call there,
# except an unembedding sharded over its vocabulary, which is never gathered: the head then runs
# vocabulary-parallel inside a shard_map of its own (credax._collectives.explicit_vocab_split).
# Auto (GSPMD) shardings and single-device arrays pass unchanged.
@jit_public(static_argnames=_STATIC, check=_check_args, hints=MOVED_TO_LOSS_OPTIONS)
def policy_loss_from_hidden(
    hidden: Float[Array, "B T D"],
    unembedding: Float[Array, "D V"],
    tokens: Int[Array, "B T"],
    old_logp: Float[Array, "B T"],
    advantages: Float[Array, "B T"] | Float[Array, "B K"] | Float[Array, " B"],
    mask: Bool[Array, "B T"],
    *,
    chunk_size: int | None = None,
    temperature: float | Float[Array, ""] | None = None,
    options: LossOptions | None = None,
    ref_logp: Float[Array, "B T"] | None = None,
    token_turn: Int[Array, "B T"] | None = None,
    rollout_logp: Float[Array, "B T"] | None = None,
    entropy: Float[Array, "B T"] | None = None,
    vocab_axis: str | tuple[str, ...] | None = None,
    axis_name: str | tuple[str, ...] | None = None,
) -> PolicyLoss:
    """:func:`policy_loss` of the log-probs of ``hidden @ unembedding``, fused: three GEMMs a chunk.

    Equals ``policy_loss(token_logprobs_from_hidden(hidden, unembedding, tokens, mask=mask,
    chunk_size=c, temperature=T), old_logp, advantages, mask, options=options, ...)`` — value,
    metrics and the gradients w.r.t. ``hidden`` and ``unembedding`` — up to float summation order,
    with every option of :func:`policy_loss` but ``entropy``.

    How: with a per-token ratio the loss is ``Σ_{b,t} w_{b,t} ℓ_{b,t}(logp_{b,t})`` where the
    weights ``w`` depend on the mask alone (``1/N`` for token-mean, ``1/(n_b S)`` for
    seq-mean-token-mean, ...), so ``∂L/∂logp_{b,t}`` is known as soon as ``logp_{b,t}`` is. One
    ``lax.scan`` over chunks of ``c`` positions computes, per chunk: the logits ``z = h W`` (GEMM 1),
    their log-sum-exp and the taken token's log-prob, the chunk's ``g = ∂L/∂logp`` (autodiff of the
    same loss body :func:`policy_loss` runs), ``d z = g (onehot - softmax(z/T)) / T`` in one
    elementwise pass, ``d h = d z Wᵀ`` (GEMM 2) and ``d W += hᵀ d z`` (GEMM 3). The loss and its
    metrics are then :func:`policy_loss` of the ``[B, T]`` log-probs. Under ``jax.grad`` nothing
    is recomputed: a custom VJP scales the stored ``d h`` and ``d W`` by the loss's cotangent
    (``metrics`` carry no gradient, as in :func:`policy_loss`); the gradients w.r.t. traced
    hyperparameters (``normalizer``, ``kl_coef``, the clip bounds, ``temperature``) are the
    composition's too, the loss body's at the computed log-probs (the temperature's from one more
    reduction a chunk, only when a temperature is given). Without differentiation only
    GEMM 1 runs. A sequence ratio (``ratio="sequence"``: GSPO, LUSPO) and VESPO's sequence weight
    make a token's gradient depend on the whole row: there a forward-only scan computes every
    log-prob first and each chunk's ``g`` is taken at them, four GEMMs a chunk (as many as the
    composition's, still without ``[B, T, V]`` logits). Temporaries: a few ``[B, c, V]`` buffers
    and the ``[D, V]`` float32 gradient accumulator; the ``[B, T, V]`` logits never exist. The
    per-chunk ``g`` evaluates the loss body on ``[B, T]`` arrays once per chunk: ``O(B·T)``
    elementwise work a chunk, nothing next to a GEMM of ``B·c·D·V``.

    ``T`` need not be a multiple of ``c`` (the last chunk is padded and masked internally; errors
    quote the shapes as given). ``T = 0`` gives what :func:`policy_loss` gives an empty mask:
    loss 0, zero gradients. In bfloat16 the GEMM operands stay bfloat16 and ``d W`` is
    accumulated in float32 over chunks, then cast to the parameter's dtype.

    Reverse mode only: ``jax.grad``, ``jax.vjp`` and ``jax.jacrev`` work; forward-mode autodiff
    (``jax.jvp``, ``jax.jacfwd``, ``jax.hessian``) raises JAX's ``TypeError`` "can't apply
    forward-mode autodiff (jvp) to a custom_vjp function". For forward mode use the two-call
    composition ``policy_loss(token_logprobs_from_hidden(hidden, unembedding, tokens, mask=mask,
    chunk_size=c), old_logp, advantages, mask, options=options)``, which supports both modes.

    Args:
      hidden: ``float[B, T, D]`` final hidden states; ``hidden[:, t]`` scores ``tokens[:, t]``.
      unembedding: ``float[D, V]`` output projection.
      tokens: ``int[B, T]`` taken token ids.
      old_logp, advantages, mask: as in :func:`policy_loss` (``mask`` is also the log-probs'
        mask: masked hidden states, tokens and log-probs affect nothing, gradients included).
      chunk_size: static; positions per chunk (``None``: one chunk of the whole sequence).
      temperature: optional sampling temperature ``T > 0`` (may be traced), as in
        :func:`token_logprobs_from_hidden`.
      options: a :class:`credax.LossOptions`, as in :func:`policy_loss` (every ``surrogate``,
        both ``ratio`` levels).
      ref_logp, token_turn, rollout_logp: as in :func:`policy_loss`.
      entropy: not supported (an entropy bonus needs the entropy's own gradient to the logits);
        use ``token_logprobs_from_hidden(..., with_entropy=True)`` and :func:`policy_loss`.
      vocab_axis: static; inside ``jax.shard_map``, the mesh axis over which the unembedding's
        vocabulary is split (each device passes its ``[D, V/n]`` slice, device ``i`` of the axis
        holding ids ``[i·V/n, (i+1)·V/n)``; ``hidden``, ``tokens`` and the loss's inputs are the
        same on every device of the axis), as in :func:`token_logprobs_from_hidden`: per chunk
        the log-sum-exp, the taken logit and ``d h`` are combined across the axis (``[B, c]`` and
        ``[B, c, D]`` collectives), ``d W`` is the slice's own. The loss and ``d hidden`` are the
        whole vocabulary's on every device, the unembedding's gradient is the slice's.
      axis_name: static; the mesh axis the rows are split over, for the loss's global token
        normaliser (as in :func:`policy_loss`).

    Returns:
      ``PolicyLoss(loss, metrics)`` as :func:`policy_loss`. ``loss`` is NaN when an unmasked
      token id traced by the caller's ``jit`` lies outside ``[0, V)`` (its log-prob is NaN);
      such a token sends no gradient, as in the composition.

    Raises:
      ValueError: an ``entropy`` (unsupported, named); everything
        :func:`policy_loss` and :func:`token_logprobs_from_hidden` raise for (shapes,
        ``chunk_size < 1``, hyperparameters out of range, concrete out-of-range token ids).
      TypeError: non-integer ``tokens``, non-boolean ``mask``, a non-int ``chunk_size``.

    Examples:
      >>> import credax, jax, jax.numpy as jnp
      >>> h = jax.random.normal(jax.random.key(0), (2, 6, 4))
      >>> w = jax.random.normal(jax.random.key(1), (4, 11))
      >>> tok = jnp.array([[1, 2, 3, 4, 5, 6], [0, 10, 9, 8, 7, 6]])
      >>> mask = jnp.ones((2, 6), bool)
      >>> old = credax.token_logprobs_from_hidden(h, w, tok) - 0.1
      >>> adv = jnp.array([1.0, -1.0])
      >>> fused = jax.grad(lambda h: credax.policy_loss_from_hidden(
      ...     h, w, tok, old, adv, mask, chunk_size=4).loss)(h)
      >>> two_calls = jax.grad(lambda h: credax.policy_loss(credax.token_logprobs_from_hidden(
      ...     h, w, tok, mask=mask, chunk_size=4), old, adv, mask).loss)(h)
      >>> bool(jnp.allclose(fused, two_calls, atol=1e-6))
      True

    References:
      Liger-Kernel's chunked fused linear PPO/GRPO losses (gradients in the forward pass);
      Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models" (arXiv 2411.09009).
    """
    split = None if vocab_axis is not None else _collectives.explicit_vocab_split(unembedding)
    if split is None:
        unembedding = replicate_explicit(unembedding)
    (hidden, tokens, old_logp, advantages, mask, temperature, options, ref_logp, token_turn,
     rollout_logp) = (_replicate_tree(x) for x in (hidden, tokens, old_logp, advantages, mask,
                                                    temperature, options, ref_logp, token_turn,
                                                    rollout_logp))
    options = as_loss_options(options)
    if entropy is not None:
        raise ValueError(
            "`entropy` is not supported by policy_loss_from_hidden (an entropy bonus needs the "
            "entropy's gradient to the logits): use token_logprobs_from_hidden(..., "
            "with_entropy=True) and policy_loss(..., entropy=...) with `entropy_coef`.")

    _collectives.check_axis_name(vocab_axis, "vocab_axis")
    _collectives.check_axis_name(axis_name)
    hidden, unembedding = check_hidden_and_unembedding(hidden, unembedding)
    batch, length, _ = hidden.shape
    shape = (batch, length)
    tokens = _check_tokens(tokens, shape)
    mask = _checks.as_mask(mask, "mask", shape)
    chunk_size = length if chunk_size is None else _checks.check_static_int(
        chunk_size, "chunk_size", minimum=1)
    chunk_size = max(1, min(chunk_size, length))

    common = jnp.promote_types(hidden.dtype, unembedding.dtype)
    if not jnp.issubdtype(common, jnp.floating):
        common = jnp.dtype(jnp.float32)
    hidden, unembedding = hidden.astype(common), unembedding.astype(common)
    # Masked hidden states are 0 before the GEMM: NaN there cannot reach a logit or a gradient.
    hidden = jnp.where(mask[..., None], hidden, jnp.zeros_like(hidden))

    # The loss's [B, T] inputs, checked and typed as policy_loss does, padded to whole chunks
    # (masked there: the padding adds nothing to any sum or count).
    old_logp = _checks.as_float_array(old_logp, "old_logp")
    _checks.check_shape(old_logp, "old_logp", shape, "[B, T]")
    advantages = _checks.as_float_array(advantages, "advantages")
    if token_turn is not None:
        token_turn = _checks.as_int_array(token_turn, "token_turn")
        _checks.check_shape(token_turn, "token_turn", shape, "[B, T]")
    tokens_of = dict(old_logp=old_logp, ref_logp=ref_logp, rollout_logp=rollout_logp)
    for name in ("ref_logp", "rollout_logp"):
        if tokens_of[name] is not None:
            tokens_of[name] = _checks.as_float_array(tokens_of[name], name)
            _checks.check_shape(tokens_of[name], name, shape, "[B, T]")
    # The advantages' shape against the caller's [B, T] (the padded one is internal): the loss
    # body's own check, run here for its errors (its values are not used).
    _token_advantages(advantages, token_turn, mask, shape, jnp.float32)

    if length == 0:  # no token: policy_loss of an empty mask (loss 0, zero gradients, no scan)
        return _policy_loss_body(jnp.zeros(shape, _numeric.compute_dtype(common)), old_logp,
                                 advantages, mask, options=options, ref_logp=ref_logp,
                                 token_turn=token_turn, rollout_logp=rollout_logp, entropy=None,
                                 axis_name=axis_name)
    num_chunks = -(-length // chunk_size)
    pad = num_chunks * chunk_size - length

    def padded(x, value=0):
        if x is None or not pad:
            return x
        return jnp.pad(x, ((0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 2), constant_values=value)

    per_token_adv = token_turn is None and advantages.ndim == 2
    consts = dict(
        {name: padded(tokens_of[name]) for name in _TOKEN_FIELDS},
        advantages=padded(advantages) if per_token_adv else advantages,
        mask=padded(mask, False), token_turn=padded(token_turn, -1), temperature=temperature,
        options=options, entropy=None)
    # Every leaf an array (the options' static modes are their pytree's aux data).
    consts = jax.tree_util.tree_map(jnp.asarray, consts)
    h, tok, valid = (_chunks_of(x, num_chunks, chunk_size)
                     for x in (padded(hidden), padded(tokens), consts["mask"]))
    if split is not None:  # the vocabulary split over Explicit mesh axes: its own shard_map
        mesh, axis = split

        def shard(h, w, tok, valid, consts):
            return _fused(h, w, tok, valid, consts, chunk_size, axis, axis_name)

        whole = jax.sharding.PartitionSpec()
        return jax.shard_map(shard, mesh=mesh, out_specs=whole, in_specs=(
            whole, jax.sharding.PartitionSpec(None, axis), whole, whole, whole))(
                h, unembedding, tok, valid, consts)
    return _fused(h, unembedding, tok, valid, consts, chunk_size, vocab_axis, axis_name)

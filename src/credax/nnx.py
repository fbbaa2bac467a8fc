"""The thin Flax NNX wrapper: a model, a batch, and :func:`credax.policy_loss` — plumbing only.

Nothing here computes anything of its own: :func:`sequence_logprobs` calls the model and
:func:`credax.token_logprobs` (or :func:`credax.token_logprobs_from_hidden`), and
:func:`policy_loss_fn` hands the result to :func:`credax.policy_loss`. The functions take the model
as their first argument and return ``(loss, metrics)``, the shape ``nnx.value_and_grad(...,
has_aux=True)`` and ``nnx.Optimizer`` expect.

**Alignment (next-token prediction), stated once.** Every per-token array of a
:class:`PolicyBatch` is aligned with ``tokens``: entry ``[b, t]`` is about the token
``tokens[b, t]``. A causal model's output at position ``t`` predicts the token at ``t + 1``, so

    logp[b, t] = log softmax(model(tokens)[b, t - 1])[tokens[b, t]]      for t >= 1,

and position ``0`` has no prediction: it is never scored (``logp[:, 0] = 0``) and never trained
on, whatever ``mask[:, 0]`` says. ``old_logp`` and ``ref_logp`` must follow the same alignment —
compute them with :func:`sequence_logprobs` on the rollout / reference model, or take the sampler's
per-token log-probs of the generated tokens and write them at the tokens' own positions.

The module does not import flax: the model is any callable (an ``nnx.Module`` in practice), and
``import credax`` stays as cheap as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from . import _checks
from ._head import policy_loss_from_hidden
from ._logprobs import token_logprobs, token_logprobs_from_hidden
from ._loss_options import MOVED_TO_LOSS_OPTIONS
from ._losses import PolicyMetrics, policy_loss


class PolicyBatch(NamedTuple):
    """One optimisation batch, every per-token field aligned with ``tokens`` (see the module doc).

    Attributes:
      tokens: ``int[B, T]`` the whole sequences (prompt, generated turns, observations, padding).
      mask: ``bool[B, T]`` tokens trained on: those the policy generated. ``mask[:, 0]`` is
        ignored (the first token has no prediction).
      old_logp: ``float[B, T]`` behaviour-policy log-prob of ``tokens[b, t]`` given
        ``tokens[b, :t]``; ``old_logp[:, 0]`` must be ``0`` (nothing predicts the first token;
        NaN or inf padding is allowed): a finite nonzero value there is the sign of log-probs
        aligned with the predictions instead, a ``ValueError`` (concrete) or a NaN loss (traced)
        in :func:`policy_loss_fn`. Required:
        ``None`` is a ``TypeError`` naming the on-policy fix.
      advantages: ``float[B, T]`` per token, ``float[B]`` per row, or ``float[B, K]`` per turn
        with ``token_turn``.
      token_turn: optional ``int[B, T]`` turn index of each token, ``-1`` for none.
      ref_logp: optional ``float[B, T]`` reference-policy log-probs, same alignment (``0`` at
        position 0), for a KL term.

    A ``NamedTuple`` is a pytree: it passes through ``nnx.jit`` and can be sharded with
    ``jax.device_put(batch, NamedSharding(mesh, P("data")))`` (``None`` fields have no leaves).
    """

    tokens: Int[Array, "B T"]
    mask: Bool[Array, "B T"]
    old_logp: Float[Array, "B T"]
    advantages: Float[Array, "B T"] | Float[Array, "B K"] | Float[Array, " B"]
    token_turn: Int[Array, "B T"] | None = None
    ref_logp: Float[Array, "B T"] | None = None


def _call(model, tokens):
    return model(tokens)


def sequence_logprobs(
    model: Any,
    tokens: Int[Array, "B T"],
    mask: Bool[Array, "B T"] | None = None,
    *,
    apply: Callable[[Any, jax.Array], Any] | None = None,
    chunk_size: int | None = None,
    temperature: float | Float[Array, ""] | None = None,
    vocab_axis: str | tuple[str, ...] | None = None,
) -> Float[Array, "B T"]:
    """Log-prob of each token given its prefix, aligned with ``tokens``; ``0`` at position 0.

    ``out[b, t] = log p(tokens[b, t] | tokens[b, :t])`` from the model's output at ``t - 1``,
    with ``p = softmax(logits / temperature)`` when a sampling temperature is given.

    Args:
      model: the policy; ``apply(model, tokens)`` must return either logits ``[B, T, V]`` or a
        pair ``(hidden [B, T, D], unembedding [D, V])``, in which case the log-probs are computed
        by :func:`credax.token_logprobs_from_hidden` and never hold the ``[B, T, V]`` logits when
        ``chunk_size`` is set.
      tokens: ``int[B, T]``.
      mask: optional ``bool[B, T]`` tokens whose log-prob is wanted; others are ``0`` and their
        logits cannot affect gradients (NaN included).
      apply: how to call the model; default ``model(tokens)``.
      chunk_size: sequence chunk for the hidden-state path (static); needs the pair output.
      temperature: optional sampling temperature ``T > 0`` (may be traced), passed to
        :func:`credax.token_logprobs` / :func:`credax.token_logprobs_from_hidden`. Use the
        rollout engine's temperature for ``old_logp`` *and* for the trained ``logp`` (through
        ``policy_loss_fn(..., temperature=T)``), or the first update's ratio is not 1.
      vocab_axis: inside ``jax.shard_map``, the mesh axis over which the model's unembedding
        (the pair output's ``[D, V/n]`` slice) is split, as in
        :func:`credax.token_logprobs_from_hidden`; needs the pair output.

    Returns:
      ``float32[B, T]``; ``0`` at position 0 and at masked positions.

    Raises:
      ValueError: ``chunk_size`` with a model that returns logits, outputs of the wrong shape, or
        a concrete ``temperature`` that is not positive and finite.
    """
    tokens = _checks.as_index_array(tokens, "tokens")
    _checks.check_ndim(tokens, "tokens", 2, "[B, T]")
    batch, length = tokens.shape
    if mask is not None:
        mask = _checks.as_mask(mask, "mask", tokens.shape)
    if length == 0:  # no position, nothing to predict (and no model call on an empty sequence)
        return jnp.zeros((batch, 0), jnp.float32)
    out = (apply or _call)(model, tokens)
    # Predictions at position t score tokens[t + 1]; the last position predicts nothing.
    targets = jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], axis=1)
    wanted = jnp.ones((batch, length - 1), bool) if mask is None else mask[:, 1:]
    scored = jnp.concatenate([wanted, jnp.zeros((batch, 1), bool)], axis=1)
    if isinstance(out, tuple | list):
        hidden, unembedding = out
        lp = token_logprobs_from_hidden(
            hidden, unembedding, targets, chunk_size=chunk_size, mask=scored, temperature=temperature,
            vocab_axis=vocab_axis)
    else:
        if vocab_axis is not None:
            raise ValueError(
                "`vocab_axis` needs a model output `(hidden [B, T, D], unembedding [D, V/n])`; this "
                "model returned logits. Use `apply=` to return the pair.")
        if chunk_size is not None:
            raise ValueError(
                "`chunk_size` needs a model output `(hidden [B, T, D], unembedding [D, V])`; this "
                "model returned logits, which are already whole. Use `apply=` to return the pair."
            )
        lp = token_logprobs(out, targets, mask=scored, temperature=temperature)
    return jnp.concatenate([jnp.zeros((batch, 1), lp.dtype), lp[:, :-1]], axis=1)


# Options policy_loss_fn takes: the wrapper's own, and the loss's `options=` (a LossOptions).
_POLICY_OPTIONS = frozenset({"apply", "chunk_size", "temperature", "fused", "options",
                             "vocab_axis"})


def policy_loss_fn(model: Any, batch: PolicyBatch, **options) -> tuple[Float[Array, ""], PolicyMetrics]:
    """``(loss, metrics)`` of :func:`credax.policy_loss` for an NNX model on a :class:`PolicyBatch`.

    Differentiate it with ``nnx.value_and_grad(policy_loss_fn, has_aux=True)(model, batch)``.
    Bind options with ``functools.partial(policy_loss_fn, options=credax.LossOptions(...))``: flax's
    transforms resolve every argument to a position and refuse keyword arguments at call time
    (``nnx.value_and_grad(f)(model, batch, agg=...)`` raises "keyword arguments could not be
    resolved to positions"), which is also why the options are ``**options`` rather than named
    keyword-only parameters. ``batch.mask[:, 0]`` is dropped (position 0 is never predicted).

    Args:
      model: the policy (see :func:`sequence_logprobs` for what it must return).
      batch: a :class:`PolicyBatch`.
      **options: ``apply``, ``chunk_size`` and ``temperature`` as in :func:`sequence_logprobs`
        (score with the sampler's temperature); ``fused=True`` (a model returning
        ``(hidden, unembedding)``) computes the loss with :func:`credax.policy_loss_from_hidden`
        — the same value and gradients, three GEMMs a chunk instead of four (four where the
        loss couples a row: ``ratio="sequence"``, VESPO); ``vocab_axis`` (inside
        ``jax.shard_map``, a model whose pair output holds this device's ``[D, V/n]`` unembedding
        slice) names the mesh axis the vocabulary is split over
        (:func:`credax.policy_loss_from_hidden`); ``options``, a :class:`credax.LossOptions` (e.g.
        ``credax.presets.VERL_LOSS``), goes to the loss. A loss field given loose
        (``clip_low=...``) is a ``TypeError`` saying it goes in ``options=``.

    Returns:
      ``(loss, PolicyMetrics)``.

    Raises:
      TypeError: ``batch`` is not a :class:`PolicyBatch`, ``batch.old_logp`` is ``None``, or an
        option is unknown (a loss field given loose names ``options=``).
      ValueError: a concrete ``old_logp`` / ``ref_logp`` with a finite nonzero value at position 0
        (aligned with the predictions, not with ``tokens``: the on-policy ratio would not be 1);
        traced, the loss is NaN instead.

    Examples:
      >>> import credax, credax.nnx, jax.numpy as jnp
      >>> from flax import nnx
      >>> model = nnx.Embed(5, 5, rngs=nnx.Rngs(0))   # a bigram "language model": logits = E[token]
      >>> tokens = jnp.array([[1, 2, 3, 4]])
      >>> mask = jnp.array([[False, True, True, True]])
      >>> old = credax.nnx.sequence_logprobs(model, tokens, mask)
      >>> batch = credax.nnx.PolicyBatch(tokens, mask, old, advantages=jnp.array([1.0]))
      >>> (loss, metrics), grads = nnx.value_and_grad(credax.nnx.policy_loss_fn, has_aux=True)(
      ...     model, batch)
      >>> float(loss), float(metrics.mean_ratio)   # on-policy: ratio 1, loss = -mean(A)
      (-1.0, 1.0)
    """
    if not isinstance(batch, PolicyBatch):
        raise TypeError(f"`batch` must be a credax.nnx.PolicyBatch; got {type(batch).__name__}.")
    unknown = sorted(set(options) - _POLICY_OPTIONS)
    if unknown:
        moved = [k for k in unknown if k in MOVED_TO_LOSS_OPTIONS]
        hint = f" {MOVED_TO_LOSS_OPTIONS[moved[0]]}" if moved else ""
        raise TypeError(
            f"`policy_loss_fn` got unknown option(s) {unknown}; valid options are "
            f"{sorted(_POLICY_OPTIONS)}.{hint}"
        )
    apply = options.pop("apply", None)
    chunk_size = options.pop("chunk_size", None)
    temperature = options.pop("temperature", None)
    vocab_axis = options.pop("vocab_axis", None)
    _check_alignment(batch)
    mask = _checks.as_mask(batch.mask, "batch.mask", jnp.shape(batch.tokens))
    if options.pop("fused", False):
        return _fused_policy_loss(model, batch, mask, apply, chunk_size, temperature, options,
                                  vocab_axis)
    logp = sequence_logprobs(model, batch.tokens, mask, apply=apply, chunk_size=chunk_size,
                             temperature=temperature, vocab_axis=vocab_axis)
    mask = mask.at[:, 0].set(False)
    out = policy_loss(logp, batch.old_logp, batch.advantages, mask, options=options.get("options"),
                      token_turn=batch.token_turn, ref_logp=batch.ref_logp)
    return _misaligned_is_nan(out.loss, batch), out.metrics


ON_POLICY_FIX = ("on the first update of a freshly sampled batch pass the sampler's log-probs at "
                 "the tokens' own positions (`pad_rollouts` does: `batch.old_logp`), or "
                 "`jax.lax.stop_gradient(credax.nnx.sequence_logprobs(model, tokens, mask))` of the "
                 "model that sampled (ratio 1)")


def _check_alignment(batch: PolicyBatch) -> None:
    """``old_logp`` is given, and position 0 (never predicted) holds no log-prob: a nonzero
    ``old_logp[:, 0]`` / ``ref_logp[:, 0]`` means the log-probs are aligned with the predictions
    (``logp[:, t]`` about ``tokens[t + 1]``), not with ``tokens`` — an on-policy ratio away from 1.
    Concrete fields are checked here; traced ones make the loss NaN (:func:`_misaligned_is_nan`)."""
    if batch.old_logp is None:
        raise TypeError("`PolicyBatch.old_logp` is None: the loss needs the behaviour policy's "
                        f"log-probs `float[B, T]` aligned with `tokens`; {ON_POLICY_FIX}.")
    for name in ("old_logp", "ref_logp"):
        value = getattr(batch, name)
        if value is None or isinstance(value, jax.core.Tracer) or jnp.ndim(value) != 2:
            continue
        first = np.asarray(value)[:, 0]  # concrete: read on the host (indexing inside a trace would stage it)
        held = np.isfinite(first) & (first != 0)  # NaN / inf there: padding garbage, allowed
        if np.any(held):
            row = int(np.flatnonzero(held)[0])
            raise ValueError(
                f"`PolicyBatch.{name}[:, 0]` must be 0: position 0 has no prediction, so nothing "
                f"scores tokens[:, 0]; got {name}[{row}, 0] = {float(first[row])}. Every per-token "
                f"field is aligned with `tokens` ({name}[b, t] = log p(tokens[b, t] | tokens[b, :t])"
                "); log-probs aligned with the predictions (the model's output at t scoring token "
                "t + 1) must move one position right: `jnp.pad(lp[:, :-1], ((0, 0), (1, 0)))`, "
                f"or {ON_POLICY_FIX}.")


def _misaligned_is_nan(loss, batch: PolicyBatch):
    """The loss, NaN where a traced ``old_logp`` / ``ref_logp`` holds a log-prob at position 0
    (the rule :func:`_check_alignment` checks on concrete fields)."""
    bad = jnp.zeros((), bool)
    for value in (batch.old_logp, batch.ref_logp):
        if value is not None and isinstance(value, jax.core.Tracer) and jnp.ndim(value) == 2:
            bad = bad | jnp.any(jnp.isfinite(value[:, :1]) & (value[:, :1] != 0))
    return jnp.where(bad, jnp.full((), jnp.nan, loss.dtype), loss)


def _fused_policy_loss(model, batch, mask, apply, chunk_size, temperature, options,
                       vocab_axis=None):
    """``policy_loss_fn`` through :func:`credax.policy_loss_from_hidden`: the model's output at
    ``t`` scores ``tokens[t + 1]``, so every per-token field is taken from position 1 on (position 0
    is never predicted, so dropping it changes no count, sum or gradient)."""
    tokens = _checks.as_index_array(batch.tokens, "tokens")
    _checks.check_ndim(tokens, "tokens", 2, "[B, T]")
    out = (apply or _call)(model, tokens)
    if not isinstance(out, tuple | list):
        raise ValueError("`fused=True` needs a model output `(hidden [B, T, D], unembedding [D, V])`; "
                         "this model returned logits. Use `apply=` to return the pair.")
    hidden, unembedding = out
    later = lambda x: None if x is None else x[:, 1:]
    advantages = batch.advantages
    if batch.token_turn is None and jnp.ndim(advantages) == 2:  # per token: aligned with tokens
        advantages = later(advantages)
    result = policy_loss_from_hidden(
        hidden[:, :-1], unembedding, tokens[:, 1:], later(batch.old_logp), advantages,
        mask[:, 1:], chunk_size=chunk_size, temperature=temperature,
        token_turn=later(batch.token_turn), ref_logp=later(batch.ref_logp),
        options=options.get("options"), vocab_axis=vocab_axis)
    return _misaligned_is_nan(result.loss, batch), result.metrics

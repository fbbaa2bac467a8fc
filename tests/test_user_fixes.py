"""Issue 16 §5: the fixes users hit on the way from rollouts to a loss.

* ``policy_loss`` takes per-trajectory ``[B]`` advantages together with ``token_turn``;
* ``temperature`` in ``token_logprobs``, ``token_logprobs_from_hidden`` (chunked too) and
  ``credax.nnx.sequence_logprobs``: logits are divided by T before the log-softmax, so scoring
  at the sampler's temperature gives a first-update ratio of exactly 1.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from tests import random_inputs as rd


def _np_logprobs(logits, tokens, temperature):
    """Independent NumPy reference: log softmax(logits / T) at the taken token, in float64."""
    z = np.asarray(logits, np.float64) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    logsm = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return np.take_along_axis(logsm, np.asarray(tokens)[..., None], axis=-1)[..., 0]


# ------------------------------------------------------------------------------------------
# [B] advantages with token_turn.
# ------------------------------------------------------------------------------------------


def test_row_advantages_with_token_turn_equal_hand_broadcast():
    logp = jnp.log(jnp.array([[0.5, 0.6, 0.7, 0.8, 0.9], [0.4, 0.3, 0.2, 0.5, 0.5]]))
    old = jnp.log(jnp.array([[0.5, 0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5, 0.5]]))
    mask = jnp.ones((2, 5), bool)  # deliberately true on observation tokens too
    token_turn = jnp.array([[-1, 0, 0, -1, 1], [0, -1, 1, 1, -1]])
    adv = jnp.array([1.5, -0.5])
    out = credax.policy_loss(logp, old, adv, mask, token_turn=token_turn)
    # Hand-built equivalent: each row's value on the tokens of a turn, and only those trained on.
    effective = np.array([[0, 1, 1, 0, 1], [1, 0, 1, 1, 0]], bool)
    token_adv = np.where(effective, np.array([[1.5], [-0.5]]), 0.0)
    ref = credax.policy_loss(logp, old, jnp.asarray(token_adv, jnp.float32), jnp.asarray(effective))
    np.testing.assert_array_equal(np.asarray(out.loss), np.asarray(ref.loss))
    for got, want in zip(out.metrics, ref.metrics, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # The same batch, [B, K] advantages that are constant per row: the same loss.
    per_turn = jnp.array([[1.5, 1.5], [-0.5, -0.5]])
    np.testing.assert_array_equal(
        np.asarray(credax.policy_loss(logp, old, per_turn, mask, token_turn=token_turn).loss),
        np.asarray(out.loss))


def test_row_advantages_with_token_turn_gradient_matches():
    logp = jnp.log(jnp.array([[0.5, 0.6, 0.7, 0.8]]))
    old = jnp.log(jnp.full((1, 4), 0.5))
    token_turn = jnp.array([[0, -1, 1, 1]])
    mask = jnp.ones((1, 4), bool)

    def loss(lp, adv, **kw):
        return credax.policy_loss(lp, old, adv, mask, **kw).loss

    g_row = jax.grad(loss)(logp, jnp.array([2.0]), token_turn=token_turn)
    g_tok = jax.grad(loss)(logp, jnp.array([[2.0, 0.0, 2.0, 2.0]]))
    # The observation token (index 1) is excluded from the row version; the token version
    # counts it in the token-mean denominator (3 vs 4 tokens), so compare after rescaling.
    np.testing.assert_allclose(np.asarray(g_row)[0, [0, 2, 3]],
                               np.asarray(g_tok)[0, [0, 2, 3]] * 4 / 3, rtol=1e-6)
    assert float(g_row[0, 1]) == 0.0


# ------------------------------------------------------------------------------------------
# temperature.
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
def test_token_logprobs_temperature_matches_numpy(temperature):
    logits = rd.normal(0, (2, 6, 9)) * 3
    tokens = rd.randint(1, (2, 6), 0, 9)
    got = credax.token_logprobs(logits, tokens, temperature=temperature)
    np.testing.assert_allclose(np.asarray(got), _np_logprobs(logits, tokens, temperature),
                               atol=2e-6, rtol=1e-6)


def test_token_logprobs_temperature_gradient_matches_autodiff():
    logits = rd.normal(2, (2, 5, 7))
    tokens = rd.randint(3, (2, 5), 0, 7)
    mask = jnp.array([[True, True, False, True, True], [True, False, True, True, False]])
    w = rd.normal(4, (2, 5))

    def ours(x):
        return jnp.sum(w * credax.token_logprobs(x, tokens, mask=mask, temperature=0.7))

    def plain(x):
        lp = jnp.take_along_axis(jax.nn.log_softmax(x / 0.7), tokens[..., None], -1)[..., 0]
        return jnp.sum(jnp.where(mask, w * lp, 0.0))

    np.testing.assert_allclose(np.asarray(jax.grad(ours)(logits)),
                               np.asarray(jax.grad(plain)(logits)), atol=1e-6)


@pytest.mark.parametrize("chunk_size", [None, 2, 4])
def test_hidden_path_temperature_matches_numpy_and_grads(chunk_size):
    h = rd.normal(5, (2, 7, 4))
    w = rd.normal(6, (4, 11))
    tok = rd.randint(7, (2, 7), 0, 11)
    got = credax.token_logprobs_from_hidden(h, w, tok, chunk_size=chunk_size, temperature=0.6)
    logits = np.asarray(h, np.float64) @ np.asarray(w, np.float64)
    np.testing.assert_allclose(np.asarray(got), _np_logprobs(logits, tok, 0.6), atol=5e-6)

    def ours(hh, ww):
        return credax.token_logprobs_from_hidden(hh, ww, tok, chunk_size=chunk_size,
                                                 temperature=0.6).sum()

    def plain(hh, ww):
        lp = jax.nn.log_softmax((hh @ ww) / 0.6)
        return jnp.take_along_axis(lp, tok[..., None], -1).sum()

    for a, b in zip(jax.grad(ours, (0, 1))(h, w), jax.grad(plain, (0, 1))(h, w), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)


def test_temperature_may_be_traced_without_recompiling():
    logits = rd.normal(8, (1, 3, 5))
    tok = jnp.array([[0, 1, 2]])
    # chex raises AssertionError if the function is traced a second time (a recompile).
    f = jax.jit(chex.assert_max_traces(lambda t: credax.token_logprobs(logits, tok, temperature=t),
                                       n=1))
    np.testing.assert_allclose(np.asarray(f(0.5)), _np_logprobs(logits, tok, 0.5), atol=2e-6)
    np.testing.assert_allclose(np.asarray(f(2.0)), _np_logprobs(logits, tok, 2.0), atol=2e-6)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_temperature_raises_naming_it(bad):
    logits = jnp.zeros((1, 2, 3))
    tok = jnp.zeros((1, 2), jnp.int32)
    with pytest.raises(ValueError, match="temperature"):
        credax.token_logprobs(logits, tok, temperature=bad)
    with pytest.raises(ValueError, match="temperature"):
        credax.token_logprobs_from_hidden(jnp.zeros((1, 2, 4)), jnp.zeros((4, 3)), tok,
                                          temperature=bad)


def test_first_update_ratio_is_one_when_temperatures_agree():
    nnx = pytest.importorskip("flax.nnx")
    import credax.nnx as cnnx

    class Bigram(nnx.Module):
        def __init__(self, rngs):
            self.embed = nnx.Embed(13, 13, rngs=rngs)

        def __call__(self, tokens):
            return self.embed(tokens) * 4.0  # peaked logits: T matters

    model = Bigram(nnx.Rngs(0))
    tokens = rd.randint(9, (3, 8), 0, 13)
    mask = jnp.ones((3, 8), bool).at[:, 0].set(False)
    for path in ("logits", "hidden"):
        apply = None
        chunk = None
        if path == "hidden":
            apply = lambda m, t: (jax.nn.one_hot(t, 13), m.embed.embedding[...] * 4.0)  # noqa: E731
            chunk = 3
        old = cnnx.sequence_logprobs(model, tokens, mask, apply=apply, chunk_size=chunk,
                                     temperature=0.7)
        batch = cnnx.PolicyBatch(tokens, mask, old, advantages=jnp.array([1.0, -0.5, 0.25]))
        fn = functools.partial(cnnx.policy_loss_fn, apply=apply, chunk_size=chunk)
        _, agree = fn(model, batch, temperature=0.7)
        _, mismatch = fn(model, batch)  # scored at T = 1: the silent bug of the issue
        assert float(agree.mean_ratio) == 1.0
        assert float(agree.approx_kl) == 0.0
        assert abs(float(mismatch.mean_ratio) - 1.0) > 1e-3
        # Against NumPy: sampling distribution log softmax(E[prev] * 4 / 0.7).
        logits = np.asarray(model(tokens))[:, :-1]
        want = _np_logprobs(logits, np.asarray(tokens)[:, 1:], 0.7)
        np.testing.assert_allclose(np.asarray(old)[:, 1:], want, atol=5e-6)

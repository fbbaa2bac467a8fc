"""credax._logprobs: token log-probabilities at a temperature, and their bad input.

``temperature`` in ``token_logprobs``, ``token_logprobs_from_hidden`` (chunked too) and
``credax.nnx.sequence_logprobs``: logits are divided by T before the log-softmax, so scoring at the
sampler's temperature gives a first-update ratio of exactly 1 (against an independent float64 NumPy
log-softmax and plain autodiff). The log-prob goldens and references of the loss pipeline stay in
tests/test_losses.py.

Bad input: the probes of the log-prob functions are the table ``probe`` at the end (the rule, in
tests/probes.py: a subject's probes in its own file, a sweep of one kind across many functions in
tests/test_bad_input.py).
"""

from __future__ import annotations

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from tests import random_inputs as rd
from tests.probes import INF, NAN, Probes, nan_exactly, raises


def _np_logprobs(logits, tokens, temperature):
    """Independent NumPy reference: log softmax(logits / T) at the taken token, in float64."""
    z = np.asarray(logits, np.float64) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    logsm = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return np.take_along_axis(logsm, np.asarray(tokens)[..., None], axis=-1)[..., 0]


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


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("nonfinite", "token_logprobs_nan_logit")
def _():
    logits = np.zeros((1, 2, 3), np.float32)
    logits[0, 0, 2] = NAN
    lp = credax.token_logprobs(logits, np.array([[0, 1]]))
    nan_exactly(lp, [[True, False]])
    np.testing.assert_allclose(lp[0, 1], -np.log(3.0), rtol=1e-6)
    h = np.ones((1, 2, 2), np.float32)
    h[0, 1, 0] = NAN
    nan_exactly(credax.token_logprobs_from_hidden(h, np.eye(2, 3, dtype=np.float32), np.array([[0, 1]])),
                [[False, True]])


NARROW = ("int8", "int16", "uint8", "uint16")


for _dt in NARROW:

    def _p(dt=_dt):
        # A vocabulary one past the dtype's largest id: the token is the last one, in range.
        top = int(np.iinfo(dt).max)
        v = top + 1
        logits = np.zeros((1, 2, v), np.float32)
        logits[0, 0, top] = 2.0
        tokens = np.array([[top, 0]], dt)
        lp = credax.token_logprobs(logits, tokens)
        # logsumexp = log(e^2 + v - 1) at t = 0, log(v) at t = 1
        np.testing.assert_allclose(lp, [[2 - np.log(np.e ** 2 + v - 1), -np.log(v)]], rtol=1e-5)
        g = jax.grad(lambda z: credax.token_logprobs(z, tokens)[0, 0])(jnp.asarray(logits))
        # d logp / d logits = onehot - softmax: at the taken (last) id 1 - e²/(e² + v - 1)
        np.testing.assert_allclose(g[0, 0, top], 1 - np.e ** 2 / (np.e ** 2 + v - 1), rtol=1e-5)
        assert float(g[0, 0, 0]) < 0  # the one-hot did not wrap onto id 0

    probe("narrow", f"token_logprobs_{_dt}")(_p)



for _dt in NARROW:

    def _p(dt=_dt):
        top = int(np.iinfo(dt).max)
        h = np.ones((1, 1, 2), np.float32)
        w = np.zeros((2, top + 1), np.float32)
        lp = credax.token_logprobs_from_hidden(h, w, np.array([[top]], dt), chunk_size=1)
        np.testing.assert_allclose(lp, [[-np.log(top + 1)]], rtol=1e-5)

    probe("narrow", f"token_logprobs_from_hidden_{_dt}")(_p)



@probe("narrow", "int16_v32768")
def _():
    # The real case: V = 32768 with int16 tokens (the top id 32767 is the last one).
    logits = np.zeros((1, 1, 32768), np.float32)
    lp = credax.token_logprobs(logits, np.array([[32767]], np.int16))
    np.testing.assert_allclose(lp, [[-np.log(32768.0)]], rtol=1e-6)


@probe("neg_inf", "token_logprobs_all_neg_inf_row")
def _():
    # A row of -inf logits (every token impossible) at a valid position: log-prob is NaN (0/0),
    # kept visible; masked it is 0 with a zero gradient.
    logits = np.full((1, 1, 3), -INF, np.float32)
    assert np.isnan(credax.token_logprobs(logits, np.array([[0]]))[0, 0])
    f = lambda z: credax.token_logprobs(z, np.array([[0]]), mask=np.array([[False]]))[0, 0]
    assert float(f(jnp.asarray(logits))) == 0.0
    np.testing.assert_array_equal(jax.grad(f)(jnp.asarray(logits)), np.zeros((1, 1, 3)))


@probe("named", "zero_vocabulary")
def _():
    raises(ValueError, "`logits` must have a vocabulary axis", credax.token_logprobs,
           np.zeros((1, 2, 0), np.float32), np.zeros((1, 2), np.int32))
    raises(ValueError, "`unembedding` must have a vocabulary axis", credax.token_logprobs_from_hidden,
           np.zeros((1, 2, 3), np.float32), np.zeros((3, 0), np.float32), np.zeros((1, 2), np.int32))


@probe("vocab", "v0_everywhere")
def _():
    raises(ValueError, "V >= 1", credax.token_logprobs, np.zeros((1, 2, 0), np.float32),
           np.zeros((1, 2), int))
    raises(ValueError, "V >= 1", credax.token_logprobs_from_hidden, np.zeros((1, 2, 3), np.float32),
           np.zeros((3, 0), np.float32), np.zeros((1, 2), int), with_entropy=True)


TOKENS_OUT = {
    "equal_v": np.array([[0, 4]]),
    "negative": np.array([[-1, 0]]),
    "int32_max": np.array([[0, 2**31 - 1]]),
    "jax_array": jnp.array([[0, 7]]),
    "list": [[0, 5]],
}


for _label, _tokens in TOKENS_OUT.items():

    def _p(tokens=_tokens):
        # Before: NaN log-probs with no error.
        raises(ValueError, r"`tokens` must lie in \[0, V=4\)", credax.token_logprobs,
               np.zeros((1, 2, 4), np.float32), tokens)
        raises(ValueError, r"`tokens` must lie in \[0, V=4\)", credax.token_logprobs_from_hidden,
               np.zeros((1, 2, 3), np.float32), np.zeros((3, 4), np.float32), tokens)

    probe("vocab", f"tokens_outside_vocab_{_label}")(_p)


@probe("vocab", "tokens_outside_vocab_masked_are_fine")
def _():
    # Padding ids (-100) at masked positions are allowed: documented, 0 there.
    out = credax.token_logprobs(np.zeros((1, 2, 4), np.float32), np.array([[1, -100]]),
                                mask=np.array([[True, False]]))
    np.testing.assert_allclose(out, [[-math.log(4), 0.0]], rtol=1e-6)
    raises(ValueError, r"tokens\[0, 1\] = -100", credax.token_logprobs,
           np.zeros((1, 2, 4), np.float32), np.array([[1, -100]]), mask=np.array([[True, True]]))


@probe("vocab", "tokens_outside_vocab_inside_jit_are_nan")
def _():
    # Inside the caller's jit the ids are traced and cannot be checked: NaN there (documented).
    f = jax.jit(lambda t: credax.token_logprobs(jnp.zeros((1, 2, 4)), t))
    out = np.asarray(f(jnp.array([[1, 4]])))
    assert abs(out[0, 0] + math.log(4)) < 1e-6 and np.isnan(out[0, 1])


@probe("vocab", "tokens_closed_over_inside_jit_are_nan")
def _():
    # Concrete ids closed over by the caller's jit are not checked there (the check would need a
    # value the trace does not have): NaN, no crash. (Before the fix of this round's check: a
    # ConcretizationTypeError from inside JAX; found by tests/test_losses.py.)
    tokens = jnp.array([[1, 4]])
    out = np.asarray(jax.jit(lambda x: credax.token_logprobs(x, tokens))(jnp.zeros((1, 2, 4))))
    assert abs(out[0, 0] + math.log(4)) < 1e-6 and np.isnan(out[0, 1])


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

"""Per-token entropy: from logits and in the chunked hidden-state path, as a metric and a bonus.

Ground truth: an explicit float64 softmax loop (tests/reference/estimators.py), verl's
``entropy_from_logits`` re-stated in NumPy, a hand-worked golden, chunked == unchunked values and
gradients, and the entropy bonus of ``policy_loss`` worked by hand.
"""

import jax
import jax.numpy as jnp
import numpy as np

import credax
from tests import random_inputs as rd
from tests.reference import estimators as ref
from tests.reference import peer_forms as peer


def test_golden_uniform_and_peaked():
    # Uniform over 4: ln 4. p = (.5, .25, .25): .5 ln 2 + 2 · .25 ln 4 = 1.5 ln 2.
    logits = jnp.log(jnp.array([[[0.25, 0.25, 0.25, 0.25], [0.5, 0.25, 0.25, 1e-30]]]))
    np.testing.assert_allclose(credax.token_entropy(logits), [[np.log(4), 1.5 * np.log(2)]],
                               atol=1e-6)


def entropy_max_diff(cases=100, seed=0):
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(cases):
        logits = rng.normal(0, float(rng.choice([0.1, 1.0, 5.0])), size=(2, 3, 17))
        temperature = float(rng.choice([0.7, 1.0, 1.3]))
        got = np.asarray(credax.token_entropy(logits, temperature=temperature), np.float64)
        worst = max(worst, float(np.abs(got - ref.token_entropy(logits, temperature)).max()),
                    float(np.abs(got - peer.verl_entropy_from_logits(logits / temperature)).max()))
    return worst


def test_matches_reference_and_verl():
    # float32: lse - Σ p z subtracts two numbers of the logits' size (up to ~15 here), so the
    # absolute error is a few float32 ulps of 15 (measured 1.6e-5 at the largest scale).
    assert entropy_max_diff(cases=30) < 5e-5


def test_chunked_hidden_path_equals_full_logits_values_and_gradients():
    key = rd.streams(0, 3)
    h = rd.normal(key[0], (2, 7, 5))
    w = rd.normal(key[1], (5, 13))
    tok = rd.randint(key[2], (2, 7), 0, 13)
    mask = jnp.arange(7)[None, :] < jnp.array([[7], [4]])
    full = credax.token_entropy(jnp.einsum("btd,dv->btv", h, w), mask=mask)
    out = credax.token_logprobs_from_hidden(h, w, tok, chunk_size=3, mask=mask, with_entropy=True)
    np.testing.assert_allclose(out.entropy, full, atol=1e-5)
    np.testing.assert_allclose(out.logprobs, credax.token_logprobs_from_hidden(h, w, tok, mask=mask),
                               atol=1e-5)

    def chunked(hh, ww):
        return jnp.sum(credax.token_logprobs_from_hidden(hh, ww, tok, chunk_size=3, mask=mask,
                                                         with_entropy=True).entropy)

    def direct(hh, ww):
        return jnp.sum(credax.token_entropy(jnp.einsum("btd,dv->btv", hh, ww), mask=mask))

    for g1, g2 in zip(jax.grad(chunked, argnums=(0, 1))(h, w), jax.grad(direct, argnums=(0, 1))(h, w),
                      strict=True):
        np.testing.assert_allclose(g1, g2, atol=1e-4)


def test_masked_nan_logits_never_matter():
    logits = jnp.ones((1, 2, 3)).at[0, 1].set(jnp.nan)
    mask = jnp.array([[True, False]])
    f = lambda x: jnp.sum(credax.token_entropy(x, mask=mask))  # noqa: E731
    assert float(f(logits)) == float(np.log(3.0)) or abs(float(f(logits)) - np.log(3)) < 1e-6
    assert bool(jnp.all(jnp.isfinite(jax.grad(f)(logits))))


def test_policy_loss_entropy_bonus():
    # logp = old, A = 0: the surrogate is 0; entropies (1, 3) token-mean 2; coef .1 -> loss -0.2.
    logp = jnp.zeros((1, 2))
    ent = jnp.array([[1.0, 3.0]])
    out = credax.policy_loss(logp, logp, jnp.zeros((1, 2)), jnp.ones((1, 2), bool), entropy=ent,
                             options=credax.LossOptions(entropy_coef=0.1))
    np.testing.assert_allclose(out.loss, -0.2, atol=1e-6)
    np.testing.assert_allclose(out.metrics.entropy, 2.0, atol=1e-6)
    try:
        credax.policy_loss(logp, logp, jnp.zeros((1, 2)), jnp.ones((1, 2), bool),
                           options=credax.LossOptions(entropy_coef=0.1))
    except ValueError as err:
        assert "`entropy" in str(err)
    else:
        raise AssertionError("entropy_coef without entropy must raise")

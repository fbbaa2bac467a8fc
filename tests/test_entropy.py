"""Per-token entropy: from logits and in the chunked hidden-state path, as a metric and a bonus.

Ground truth: an explicit float64 softmax loop (tests/reference/estimators.py), verl's
``entropy_from_logits`` re-stated in NumPy, a hand-worked golden, chunked == unchunked values and
gradients, and the entropy bonus of ``policy_loss`` worked by hand.

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from tests import random_inputs as rd
from tests.probes import INF, Probes, raises
from tests.reference import estimators as ref
from tests.reference import peer_forms as peer
from tests.reference.estimators import token_entropy as entropy_reference


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


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("vocab", "entropy_v0")
def _():
    # Before: "zero-size array to reduction operation max" from inside JAX.
    raises(ValueError, r"`logits` must have a vocabulary axis V >= 1", credax.token_entropy,
           np.zeros((1, 2, 0), np.float32))
    raises(ValueError, r"`logits` must have a vocabulary axis V >= 1", credax.token_entropy,
           np.zeros((1, 2, 0), np.float32), mask=np.ones((1, 2), bool))


NEG_INF_ROWS = {
    # [0, -inf, -inf]: one-hot, H = 0 (before: NaN from 0 · -inf).
    "one_hot": [0.0, -INF, -INF, -INF],
    # [1, 2, -inf, -inf]: the entropy of softmax([1, 2]) = 0.5822 (reference).
    "two_live": [1.0, 2.0, -INF, -INF],
    "live_at_end": [-INF, -INF, 3.0, 3.0],  # H = ln 2
    "three_live_large": [500.0, -INF, 499.0, 498.0],
}


for _label, _row in NEG_INF_ROWS.items():

    def _p(row=_row):
        x = np.array([[row]], np.float32)
        np.testing.assert_allclose(credax.token_entropy(x)[0, 0], entropy_reference(x)[0, 0],
                                   rtol=1e-5, atol=1e-7)
        g = jax.grad(lambda v: credax.token_entropy(v).sum())(jnp.asarray(x))
        assert np.isfinite(np.asarray(g)).all()
        h = credax.token_entropy(x, temperature=0.5)
        np.testing.assert_allclose(h[0, 0], entropy_reference(x, 0.5)[0, 0], rtol=1e-5, atol=1e-7)

    probe("vocab", f"entropy_neg_inf_{_label}")(_p)


@probe("vocab", "entropy_all_neg_inf_row_is_nan")
def _():
    # A row of only -inf is no distribution: NaN (documented), the other rows as without it.
    x = np.array([[[-INF, -INF], [0.0, 0.0]]], np.float32)
    out = np.asarray(credax.token_entropy(x))
    assert np.isnan(out[0, 0]) and abs(out[0, 1] - math.log(2)) < 1e-6
    out = np.asarray(credax.token_entropy(x, mask=np.array([[False, True]])))  # masked: 0
    assert out[0, 0] == 0.0


NEAR_ONE_HOT = {
    "issue30_300_290": [[300.0, 290.0]],  # 4.994e-4 (issue 30; float32 before: 0.0)
    "1000_990_980": [[1000.0, 990.0, 980.0]],
    "50_30": [[50.0, 30.0]],
    "mixed_rows": [[300.0, 290.0], [0.0, 0.0], [-5.0, 20.0]],
    "1e4_gap_5": [[1e4, 1e4 - 5.0]],
}


for _label, _rows in NEAR_ONE_HOT.items():

    def _p(rows=_rows):
        # Float32 keeps H to ~1e-7 absolute (float resolution of the O(1) shifted terms) and
        # 1e-3 relative, whatever the logits' magnitude; before, the error was the ulp of the
        # largest logit (3e-5 at 300: [300, 290] gave 0.0, float64 4.994e-4).
        x = np.array([rows], np.float32)
        np.testing.assert_allclose(credax.token_entropy(x), entropy_reference(x), rtol=1e-3,
                                   atol=1e-7)
        lp = credax.token_logprobs_from_hidden(x, np.eye(x.shape[-1], dtype=np.float32),
                                               np.zeros(x.shape[:2], int), with_entropy=True)
        np.testing.assert_allclose(lp.entropy, entropy_reference(x), rtol=1e-3, atol=1e-7)

    probe("vocab", f"entropy_near_one_hot_{_label}")(_p)


@probe("vocab", "entropy_random_large_logits_vs_float64")
def _():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(2, 8, 50)) * 30 + 200).astype(np.float32)
    np.testing.assert_allclose(credax.token_entropy(x), entropy_reference(x), rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(credax.token_entropy(x, temperature=0.7),
                               entropy_reference(x, 0.7), rtol=1e-3, atol=1e-5)


@probe("vocab", "entropy_gradient_matches_float64")
def _():
    # dH/dz_v = -p_v (log p_v + H), from H = -Σ p log p; reference in float64.
    x = np.array([[[300.0, 290.0, 285.0]]], np.float32)
    g = np.asarray(jax.grad(lambda v: credax.token_entropy(v).sum())(jnp.asarray(x)))
    z = x.astype(np.float64)[0, 0]
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    h = -(p * np.log(p)).sum()
    np.testing.assert_allclose(g[0, 0], -p * (np.log(p) + h), rtol=1e-2, atol=1e-8)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

"""Tests of credax/_losses.py: token log-probs, KL estimators, aggregation, the clipped loss.

Ground truth: hand-worked golden values (arithmetic in the comments), the float64 loop references
of tests/reference/losses.py, verl's formulas worked by hand on small batches, and identities
(GSPO-token == the pure sequence objective, [B, K] + token_turn == the broadcast [B, T]).

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.test_util import check_grads

import credax
from tests import random_inputs as rd
from tests.probes import INF, NAN, Probes, nan_exactly
from tests.reference import losses as ref

MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum",
         "seq-mean-token-sum-norm")
F32 = jnp.float32


def close(actual, expected, atol=1e-6, rtol=1e-5, err_msg=""):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, atol=atol, rtol=rtol,
                               err_msg=err_msg)


def norm_kwargs(mode, value=None):
    """`normalizer` is required for the Dr. GRPO mode only."""
    if mode == "seq-mean-token-sum-norm":
        return {"normalizer": 8.0 if value is None else value}
    return {} if value is None else {"normalizer": value}


# ------------------------------------------------------------------------------------------
# token_logprobs
# ------------------------------------------------------------------------------------------


def test_token_logprobs_golden():
    # logits (1, 2, 3), token 2: 3 - log(e + e² + e³) = -log(1 + e^-1 + e^-2)
    #   = -log(1 + 0.36787944 + 0.13533528) = -log(1.50321472) = -0.40760596.
    # token 0: 1 - log(e + e² + e³) = -2 - 0.40760596 = -2.40760596.
    logits = jnp.array([[[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]])
    out = credax.token_logprobs(logits, jnp.array([[2, 0]]))
    assert out.dtype == F32
    close(out, [[-0.40760596, -2.40760596]])


def test_token_logprobs_matches_log_softmax_and_reference():
    logits = 4.0 * rd.normal(0, (3, 7, 50))
    tokens = rd.randint(1, (3, 7), 0, 50)
    out = credax.token_logprobs(logits, tokens)
    expected = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tokens[..., None], -1)[..., 0]
    close(out, np.asarray(expected), atol=1e-5, rtol=0)
    close(out, ref.token_logprobs(np.asarray(logits), np.asarray(tokens)), atol=1e-5, rtol=0)


def test_token_logprobs_custom_vjp_matches_autodiff_of_log_softmax():
    logits = 3.0 * rd.normal(20, (2, 6, 40))
    tokens = rd.randint(21, (2, 6), 0, 40)
    weights = rd.normal(22, (2, 6))
    mask = jnp.arange(6)[None, :] < jnp.array([[6], [2]])

    def reference(x):
        lp = jnp.take_along_axis(jax.nn.log_softmax(x, -1), tokens[..., None], -1)[..., 0]
        return jnp.sum(jnp.where(mask, weights * lp, 0.0))

    def fused(x):
        return jnp.sum(weights * credax.token_logprobs(x, tokens, mask=mask))

    close(jax.jit(jax.grad(fused))(logits), np.asarray(jax.grad(reference)(logits)), atol=1e-6)


def test_token_logprobs_bf16_logits_computed_in_float32():
    logits = (3.0 * rd.normal(2, (2, 5, 33))).astype(jnp.bfloat16)
    tokens = rd.randint(3, (2, 5), 0, 33)
    out = credax.token_logprobs(logits, tokens)
    assert out.dtype == F32
    # bf16 -> f32 is exact, so the result is the float32 computation on the same values.
    close(out, ref.token_logprobs(np.asarray(logits.astype(F32)), np.asarray(tokens)), atol=1e-5)
    grad = jax.grad(lambda x: credax.token_logprobs(x, tokens).sum())(logits)
    assert grad.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(grad)))


def test_token_logprobs_mask_nan_logits_and_padding_ids():
    logits = rd.normal(4, (2, 4, 6))
    tokens = jnp.array([[1, 2, -100, 5], [0, 6, 3, 3]])  # -100 and 6 are out of range
    mask = jnp.array([[True, True, False, True], [True, False, True, False]])
    poisoned = logits.at[0, 2].set(jnp.nan).at[1, 1].set(jnp.inf).at[1, 3].set(-jnp.inf)

    def f(x):
        return credax.token_logprobs(x, tokens, mask=mask)

    clean, dirty = f(logits), f(poisoned)
    np.testing.assert_array_equal(clean, dirty)
    assert float(clean[0, 2]) == 0.0 and float(clean[1, 1]) == 0.0
    g_clean = jax.grad(lambda x: f(x).sum())(logits)
    g_dirty = jax.grad(lambda x: f(x).sum())(poisoned)
    np.testing.assert_array_equal(g_clean, g_dirty)
    assert bool(jnp.all(g_dirty[~mask] == 0))
    # Out-of-range tokens at real positions: concrete ids are refused by name; traced ids (inside
    # the caller's own jit, where they cannot be read) stay visible as NaN.
    with pytest.raises(ValueError, match=r"tokens\[0, 2\] = -100"):
        credax.token_logprobs(logits, tokens)
    out = jax.jit(lambda x, t: credax.token_logprobs(x, t))(logits, tokens)
    assert bool(jnp.isnan(out[0, 2])) and bool(jnp.isnan(out[1, 1]))


def test_token_logprobs_grad_matches_finite_differences():
    with jax.enable_x64(True):
        logits = rd.normal(5, (2, 3, 5), dtype=jnp.float64)
        tokens = jnp.array([[0, 4, 2], [1, 1, 3]])
        check_grads(jax.jit(lambda x: credax.token_logprobs(x, tokens)), (logits,), order=1,
                    modes=["rev"])


def test_token_logprobs_shape_errors():
    with pytest.raises(ValueError, match="logits"):
        credax.token_logprobs(jnp.zeros((2, 3)), jnp.zeros((2, 3), jnp.int32))
    with pytest.raises(ValueError, match="tokens"):
        credax.token_logprobs(jnp.zeros((2, 3, 4)), jnp.zeros((2, 4), jnp.int32))
    with pytest.raises(TypeError, match="tokens"):
        credax.token_logprobs(jnp.zeros((2, 3, 4)), jnp.zeros((2, 3)))


# ------------------------------------------------------------------------------------------
# token_logprobs_from_hidden
# ------------------------------------------------------------------------------------------


def _hidden_case(batch=2, length=10, dim=6, vocab=37, seed=0, dtype=F32):
    k1, k2, k3 = rd.streams(seed, 3)
    hidden = rd.normal(k1, (batch, length, dim)).astype(dtype)
    unembedding = (rd.normal(k2, (dim, vocab)) / math.sqrt(dim)).astype(dtype)
    tokens = rd.randint(k3, (batch, length), 0, vocab)
    return hidden, unembedding, tokens


@pytest.mark.parametrize("chunk_size", [None, 1, 4, 5, 10])
def test_from_hidden_matches_reference_and_unchunked(chunk_size):
    hidden, w, tokens = _hidden_case()
    out = credax.token_logprobs_from_hidden(hidden, w, tokens, chunk_size=chunk_size)
    close(out, ref.token_logprobs_from_hidden(hidden, w, tokens), atol=1e-5, rtol=0)

    def loss(h, u, c):
        lp = credax.token_logprobs_from_hidden(h, u, tokens, chunk_size=c)
        return jnp.sum(lp * jnp.linspace(0.3, 1.7, lp.size).reshape(lp.shape))

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
    g, g_full = grad(hidden, w, chunk_size), grad(hidden, w, None)
    for a, b in zip(g, g_full, strict=True):
        close(a, np.asarray(b), atol=1e-5, rtol=1e-5)


def test_from_hidden_mask_and_nan_hidden():
    hidden, w, tokens = _hidden_case(length=9)
    mask = jnp.arange(9)[None, :] < jnp.array([[6], [9]])
    poisoned = jnp.where(mask[..., None], hidden, jnp.nan)
    bad_tokens = jnp.where(mask, tokens, -1)
    for chunk in (None, 4):
        def f(h, tok, c=chunk):
            return credax.token_logprobs_from_hidden(h, w, tok, chunk_size=c, mask=mask)

        np.testing.assert_array_equal(f(hidden, tokens), f(poisoned, bad_tokens))
        g = jax.jit(jax.grad(lambda h, f=f: f(h, bad_tokens).sum()))(poisoned)
        assert bool(jnp.all(jnp.isfinite(g))) and bool(jnp.all(g[~mask] == 0))


def test_from_hidden_bf16():
    hidden, w, tokens = _hidden_case(dtype=jnp.bfloat16)
    out = credax.token_logprobs_from_hidden(hidden, w, tokens, chunk_size=4)
    assert out.dtype == F32
    expected = ref.token_logprobs_from_hidden(hidden.astype(F32), w.astype(F32), tokens)
    close(out, expected, atol=2e-2, rtol=0)  # bf16 products, float32 accumulation


def test_from_hidden_grad_finite_differences():
    with jax.enable_x64(True):
        hidden, w, tokens = _hidden_case(length=5, dim=3, vocab=7, dtype=jnp.float64)
        check_grads(
            jax.jit(lambda h, u: credax.token_logprobs_from_hidden(h, u, tokens, chunk_size=2)),
            (hidden, w), order=1, modes=["rev"],
        )


def test_from_hidden_errors():
    hidden, w, tokens = _hidden_case()
    with pytest.raises(ValueError, match="unembedding"):
        credax.token_logprobs_from_hidden(hidden, w.T, tokens)
    with pytest.raises(ValueError, match="chunk_size"):
        credax.token_logprobs_from_hidden(hidden, w, tokens, chunk_size=0)


# ------------------------------------------------------------------------------------------
# kl_divergence
# ------------------------------------------------------------------------------------------

# δ = logp - ref for the four tokens: 0.5, log(0.35/0.5) = log 0.7 = -0.35667494, 0, -2.
KL_LOGP = [-1.0, math.log(0.35), -0.2, -3.0]
KL_REF = [-1.5, math.log(0.5), -0.2, -1.0]
KL_GOLDEN = {
    "k1": [0.5, -0.35667494, 0.0, -2.0],
    # ½δ²: 0.125, ½·0.12721701 = 0.06360851, 0, 2.
    "k2": [0.125, 0.06360851, 0.0, 2.0],
    # r - 1 - log r, r = π_ref/π = exp(-δ): e^-0.5 - 1 + 0.5 = 0.60653066 - 0.5 = 0.10653066;
    # r = 0.5/0.35 = 1.42857143: 0.42857143 - 0.35667494 = 0.07189649; 0; e² - 1 - 2 = 4.38905610.
    "k3": [0.10653066, 0.07189649, 0.0, 4.38905610],
    "abs": [0.5, 0.35667494, 0.0, 2.0],
}


@pytest.mark.parametrize("estimator", sorted(KL_GOLDEN))
def test_kl_golden(estimator):
    out = credax.kl_divergence(jnp.array(KL_LOGP), jnp.array(KL_REF), estimator=estimator)
    close(out, KL_GOLDEN[estimator])


@pytest.mark.parametrize(
    ("verl_name", "estimator"), [("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3"), ("abs", "abs")]
)
def test_kl_parity_with_verl(verl_name, estimator):
    # verl kl_penalty_forward, worked by hand on the same batch:
    #   kl = logp - ref; mse = 0.5 (logp - ref)²; abs = |logp - ref|;
    #   low_var_kl: x = clamp(ref - logp, ±20); clamp(exp(x) - x - 1, ±10). Every value here is
    #   inside verl's ±10 output clamp (largest 4.389), so credax must agree exactly.
    verl_values = {
        "kl": [0.5, -0.35667494, 0.0, -2.0],
        "mse": [0.125, 0.06360851, 0.0, 2.0],
        "low_var_kl": [0.10653066, 0.07189649, 0.0, 4.38905610],
        "abs": [0.5, 0.35667494, 0.0, 2.0],
    }
    out = credax.kl_divergence(jnp.array(KL_LOGP), jnp.array(KL_REF), estimator=estimator)
    close(out, verl_values[verl_name])


def test_k3_no_cancellation_and_large_gaps():
    # Naive float32 exp(x) - x - 1 at x = 1e-6: exp(x) rounds to 1 + 2^-23 · 8, and the result
    # is -5.96e-8 < 0 instead of x²/2 = 5e-13 (the cancellation of google/tunix#2315).
    x = jnp.float32(1e-6)
    assert float(jnp.exp(x) - x - 1) < 0  # the failure this guards against
    lp = jnp.array([0.0, 0.0, -1e-6, -30.0, -1.0], F32)
    rf = jnp.array([1e-8, -1e-8, 0.0, -1.0, -30.0], F32)
    out = credax.kl_divergence(lp, rf)
    assert bool(jnp.all(out >= 0)) and bool(jnp.all(jnp.isfinite(out)))
    # x = ref - logp: 1e-8 -> x²/2 = 5e-17; -30 -> x = 29 clamped to 20: e^20 - 21 = 485165174.41;
    # x = -29 clamped to -20: e^-20 + 19 = 19.000000002.
    close(out[:2], [5e-17, 5e-17], atol=1e-22, rtol=1e-3)
    close(out[3:], [485165174.41, 19.000000002], rtol=1e-6)
    g = jax.grad(lambda a: credax.kl_divergence(a, rf).sum())(lp)
    assert bool(jnp.all(jnp.isfinite(g)))
    assert float(g[3]) == 0.0 and float(g[4]) == 0.0  # beyond the clamp: no gradient


@given(
    st.lists(st.floats(-40.0, 0.0, width=32), min_size=8, max_size=8),
    st.lists(
        st.sampled_from([0.0, 1e-9, -1e-9, 1e-7, -1e-7, 1e-4, -3e-4, 1 / 3, -1 / 3, 0.4999,
                         -0.5001, 0.95, -2.0, 25.0, -60.0]),
        min_size=8, max_size=8,
    ),
)
def test_k3_nonnegative_property(logp, gaps):
    lp = jnp.array(logp, F32)
    rf = lp + jnp.array(gaps, F32)
    out = credax.kl_divergence(lp, rf, estimator="k3")
    assert bool(jnp.all(out >= 0)) and bool(jnp.all(jnp.isfinite(out)))
    expected = [ref.kl(a, b, "k3") for a, b in zip(np.asarray(lp), np.asarray(rf), strict=True)]
    close(out, expected, atol=1e-12, rtol=2e-4)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "abs"])
def test_kl_grad_finite_differences(estimator):
    with jax.enable_x64(True):
        lp = jnp.array([-1.0, -0.3, -2.5, -0.9], jnp.float64)
        rf = jnp.array([-1.2, -0.1, -0.4, -0.6], jnp.float64)  # |δ| away from 0 (abs kink)
        check_grads(jax.jit(lambda a: credax.kl_divergence(a, rf, estimator=estimator)), (lp,),
                    order=2)


def test_kl_expected_gradients_on_a_categorical():
    # Exact expectations over a 5-way categorical π = softmax(θ) (tokens sampled from π, so the
    # sampling weights carry no gradient): E_a~π[∇θ est(a)] = Σ_a sg(π_a) ∇θ est(log π_a, log ρ_a).
    # k2 gives ∇ KL(π || ρ); k1 gives 0 (E[∇ log π] = 0); k3 gives ∇ KL(ρ || π), the reverse KL —
    # the biases of user-issues #42, pinned down.
    with jax.enable_x64(True):
        theta = jnp.array([0.3, -1.2, 0.8, 0.05, -0.4], jnp.float64)
        log_rho = jax.nn.log_softmax(jnp.array([1.0, 0.2, -0.5, 0.0, 0.35], jnp.float64))

        def expected_grad(estimator):
            def surrogate(t):
                logp = jax.nn.log_softmax(t)
                est = credax.kl_divergence(logp, log_rho, estimator=estimator)
                return jnp.sum(jax.lax.stop_gradient(jnp.exp(logp)) * est)
            return jax.grad(surrogate)(theta)

        def forward_kl(t):
            logp = jax.nn.log_softmax(t)
            return jnp.sum(jnp.exp(logp) * (logp - log_rho))

        def reverse_kl(t):
            return jnp.sum(jnp.exp(log_rho) * (log_rho - jax.nn.log_softmax(t)))

        close(expected_grad("k2"), np.asarray(jax.grad(forward_kl)(theta)), atol=1e-12)
        close(expected_grad("k1"), np.zeros(5), atol=1e-12)
        close(expected_grad("k3"), np.asarray(jax.grad(reverse_kl)(theta)), atol=1e-12)


def test_kl_mask_and_dtype():
    lp = jnp.array([[-1.0, jnp.nan]], jnp.bfloat16)
    rf = jnp.array([[-1.5, 3.0]], jnp.bfloat16)
    out = credax.kl_divergence(lp, rf, mask=jnp.array([[True, False]]))
    assert out.dtype == jnp.bfloat16
    assert float(out[0, 1]) == 0.0 and abs(float(out[0, 0]) - 0.10653066) < 1e-3
    with pytest.raises(ValueError, match="estimator"):
        credax.kl_divergence(lp, rf, estimator="low_var_kl")


# ------------------------------------------------------------------------------------------
# aggregate
# ------------------------------------------------------------------------------------------

# Row 0: all valid (1, 2, 4); row 1: one valid token (3) with NaN / inf masked; row 2: empty.
AGG_V = jnp.array([[1.0, 2.0, 4.0], [3.0, jnp.nan, jnp.inf], [9.0, 9.0, 9.0]])
AGG_M = jnp.array([[True, True, True], [True, False, False], [False, False, False]])
AGG_GOLDEN = {
    "token-mean": 10.0 / 4,  # (1 + 2 + 4 + 3) / 4 tokens
    "token-sum": 10.0,
    "seq-mean-token-mean": (7.0 / 3 + 3.0) / 2,  # the empty row is not a sequence: 2.6666667
    "seq-mean-token-sum": (7.0 + 3.0) / 2,
    "seq-mean-token-sum-norm": 10.0 / 6,  # normalizer 6 = 2 sequences × length 3
}


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_golden(mode):
    kwargs = {"normalizer": 6.0} if mode == "seq-mean-token-sum-norm" else {}
    out = credax.aggregate(AGG_V, AGG_M, mode=mode, **kwargs)
    close(out, AGG_GOLDEN[mode])
    clean = jnp.where(AGG_M, AGG_V, 0.0)
    close(out, ref.aggregate(np.asarray(clean), np.asarray(AGG_M), mode, kwargs.get("normalizer")))


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_parity_with_verl_agg_loss(mode):
    # verl agg_loss on loss_mat = [[1, 2, 4], [3, 0, 0], [9, 9, 9]] (finite: verl multiplies by the
    # mask) and loss_mask as float, dp_size = 1, no global counts:
    #   token-mean   masked_sum / mask.sum()             = 10 / 4 = 2.5
    #   token-sum    masked_sum                          = 10
    #   seq-mean-token-mean  Σ_rows (row_sum / (n + 1e-8)) over rows with n > 0 / 2
    #                        = (7/3 + 3/1) / 2 = 2.66666667 (the 1e-8 is below float32 resolution)
    #   seq-mean-token-sum   (7 + 3) / 2 = 5
    #   seq-mean-token-sum-norm  5 / loss_scale_factor, default horizon = 3: 1.66666667
    # credax's normalizer for the last mode is the whole divisor: 2 sequences × 3 = 6.
    verl = {"token-mean": 2.5, "token-sum": 10.0, "seq-mean-token-mean": 2.66666667,
            "seq-mean-token-sum": 5.0, "seq-mean-token-sum-norm": 1.66666667}
    values = jnp.array([[1.0, 2.0, 4.0], [3.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    kwargs = {"normalizer": 2 * 3} if mode == "seq-mean-token-sum-norm" else {}
    close(credax.aggregate(values, AGG_M, mode=mode, **kwargs), verl[mode])


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_empty_mask_is_zero_with_zero_grad(mode):
    empty = jnp.zeros((2, 3), bool)
    values = jnp.full((2, 3), jnp.nan)

    def f(v):
        return credax.aggregate(v, empty, mode=mode, **norm_kwargs(mode))

    assert float(f(values)) == 0.0
    g = jax.grad(f)(values)
    assert bool(jnp.all(g == 0))


def test_aggregate_global_normalizer_zero_and_errors():
    v = jnp.ones((2, 2))
    m = jnp.ones((2, 2), bool)
    # A traced zero (a psum over empty masks) gives 0; a concrete 0 is rejected (issue 13).
    assert float(jax.jit(lambda n: credax.aggregate(v, m, normalizer=n))(0.0)) == 0.0
    with pytest.raises(ValueError, match="normalizer"):
        credax.aggregate(v, m, normalizer=0)
    with pytest.raises(ValueError, match="normalizer"):
        credax.aggregate(v, m, mode="seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="normalizer"):
        credax.aggregate(v, m, mode="token-sum", normalizer=4.0)
    with pytest.raises(ValueError, match="normalizer"):
        credax.aggregate(v, m, normalizer=-1.0)
    with pytest.raises(ValueError, match="mode"):
        credax.aggregate(v, m, mode="token_mean")
    with pytest.raises(TypeError, match="mask"):
        credax.aggregate(v, jnp.ones((2, 2)))


def test_aggregate_grad_finite_differences():
    with jax.enable_x64(True):
        v = rd.normal(7, (3, 4), dtype=jnp.float64)
        m = jnp.array([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], bool)
        for mode in MODES:
            check_grads(jax.jit(lambda x, mode=mode: credax.aggregate(x, m, mode=mode,
                                                                      **norm_kwargs(mode))),
                        (v,), order=1, modes=["rev"])


# ------------------------------------------------------------------------------------------
# policy_loss: golden values, one per clip branch, and verl parity
# ------------------------------------------------------------------------------------------

# Log-ratios (logp - old) and advantages of a 2 x 4 batch; token (1, 3) is padding.
DELTA = np.array([[0.1, 0.5, -0.7, 1.5], [-0.1, 0.0, 0.2, 0.0]])
OLD = np.array([[-1.0, -1.0, -2.0, -0.5], [-0.3, -2.2, -0.9, -1.0]])
LOGP = OLD + DELTA
ADV = np.array([[0.35, 0.35, -0.35, -0.35], [-1.0, 0.5, 2.0, 0.0]])
MASK = np.array([[True, True, True, True], [True, True, True, False]])
# With clip 0.2 / 0.2 and dual clip 3, per token (r = e^δ):
#  (0,0) A=.35, r=1.10517092 inside:  -A·r = -0.38680982                      gradient -A·r
#  (0,1) A=.35, r=1.64872127 > 1.2:   max(-0.57705244, -0.42) = -0.42        high clip binds
#  (0,2) A=-.35, r=0.49658530 < 0.8:  max(0.17380486, 0.28) = 0.28           low clip binds
#  (0,3) A=-.35, r=4.48168907:        max(1.56859117, 0.42) = 1.56859117,
#                                     dual: min(1.56859117, 3·0.35) = 1.05    dual clip binds
#  (1,0) A=-1, r=0.90483742 inside:   0.90483742                              gradient r
#  (1,1) A=.5, r=1:                   -0.5                                    gradient -A
#  (1,2) A=2, r=1.22140276 > 1.2:     max(-2.44280552, -2.4) = -2.4           high clip binds
TOKEN_LOSSES = np.array([[-0.38680982, -0.42, 0.28, 1.05], [0.90483742, -0.5, -2.4, 0.0]])
# Row sums: 0.52319018 (4 tokens), -1.99516258 (3 tokens); total -1.4719724 over 7 tokens.
PG_GOLDEN = {
    "token-mean": -1.4719724 / 7,  # -0.21028177
    "token-sum": -1.4719724,
    "seq-mean-token-mean": (0.52319018 / 4 - 1.99516258 / 3) / 2,  # -0.26712832
    "seq-mean-token-sum": (0.52319018 - 1.99516258) / 2,  # -0.7359862
    "seq-mean-token-sum-norm": -1.4719724 / 8,  # normalizer 8 = 2 rows × 4
}


def _golden_call(**kwargs):
    kwargs.setdefault("dual_clip", 3.0)
    adv = kwargs.pop("advantages", jnp.array(ADV, F32))
    arrays = {k: kwargs.pop(k) for k in ("ref_logp", "token_turn", "rollout_logp", "entropy")
              if k in kwargs}
    return credax.policy_loss(jnp.array(LOGP, F32), jnp.array(OLD, F32), adv, jnp.array(MASK),
                              options=credax.LossOptions(**kwargs), **arrays)


@pytest.mark.parametrize("mode", MODES)
def test_policy_loss_golden_every_branch(mode):
    out = _golden_call(agg=mode, **norm_kwargs(mode))
    close(out.loss, PG_GOLDEN[mode])
    close(out.metrics.policy_loss, PG_GOLDEN[mode])
    m = out.metrics
    close([m.clip_frac_low, m.clip_frac_high, m.dual_clip_frac], [1 / 7, 2 / 7, 1 / 7])
    # approx_kl: mean of r - 1 - log r = (0.00517092 + 0.14872127 + 0.19658530 + 1.98168907
    #   + 0.00483742 + 0 + 0.02140276) / 7 = 2.35840674 / 7 = 0.33691525.
    close(m.approx_kl, 0.33691525)
    # mean ratio: 10.85840674 / 7 = 1.55120096.
    close(m.mean_ratio, 1.55120096)
    assert float(m.kl) == 0.0


def test_policy_loss_golden_gradient_signs():
    def loss(lp):
        return credax.policy_loss(lp, jnp.array(OLD, F32), jnp.array(ADV, F32), jnp.array(MASK),
                                  options=credax.LossOptions(dual_clip=3.0)).loss

    g = jax.grad(loss)(jnp.array(LOGP, F32))
    # token-mean: dℓ/dlogp / 7; clipped tokens exactly 0. (0,0): -0.38680982/7 = -0.05525855
    # (A > 0 pushes logp up under descent); (1,0): A < 0: +0.90483742/7 = 0.12926249;
    # (1,1): -0.5/7 = -0.07142857; padding (1,3): 0.
    expected = [[-0.05525855, 0.0, 0.0, 0.0], [0.12926249, -0.07142857, 0.0, 0.0]]
    close(g, expected)
    assert float(g[0, 1]) == 0.0 and float(g[0, 2]) == 0.0 and float(g[0, 3]) == 0.0


def test_policy_loss_parity_with_verl_vanilla():
    # verl compute_policy_loss_vanilla (clip_ratio_low = high = 0.2, clip_ratio_c = 3.0) on the
    # same batch, worked by hand from its code path:
    #   pg_losses1 = -A·r, pg_losses2 = -A·clamp(r, 0.8, 1.2), clip_pg_losses1 = max(1, 2),
    #   pg_losses3 = -A·3, clip_pg_losses2 = min(3, clip1), pg_losses = where(A < 0, clip2, clip1)
    #   -> the per-token values of TOKEN_LOSSES; agg_loss token-mean: -1.4719724 / 7 = -0.21028177,
    #   seq-mean-token-mean: -0.26712832.
    #   pg_clipfrac = mean(pg_losses2 > pg_losses1) = tokens (0,1), (0,2), (1,2): 3/7 = 0.42857143
    #   pg_clipfrac_lower = mean((clip1 > pg_losses3) & A < 0) = token (0,3): 1/7 = 0.14285714
    for mode, verl_loss in (("token-mean", -0.21028177), ("seq-mean-token-mean", -0.26712832)):
        out = _golden_call(clip_low=0.2, clip_high=0.2, dual_clip=3.0, agg=mode)
        close(out.loss, verl_loss)
        close(out.metrics.clip_frac_low + out.metrics.clip_frac_high, 0.42857143)
        close(out.metrics.dual_clip_frac, 0.14285714)


def test_policy_loss_without_dual_clip_and_clip_higher():
    # No dual clip: token (0,3) keeps 1.56859117; total -1.4719724 - 1.05 + 1.56859117.
    out = _golden_call(dual_clip=None)
    close(out.loss, (-1.4719724 - 1.05 + 1.56859117) / 7)
    assert float(out.metrics.dual_clip_frac) == 0.0
    # Clip-higher 0.28: (1,2) r = 1.22140276 < 1.28 is no longer clipped: -2·1.22140276 =
    # -2.44280552 replaces -2.4; (0,1) r = 1.6487 > 1.28: -0.35·1.28 = -0.448 replaces -0.42.
    out = _golden_call(clip_high=0.28)
    close(out.loss, (-1.4719724 + 2.4 - 2.44280552 + 0.42 - 0.448) / 7)
    close(out.metrics.clip_frac_high, 1 / 7)


def test_policy_loss_kl_term_golden():
    # One token, on-policy (r = 1), A = 0.5, ref such that δ = logp - ref = 0.5:
    # surrogate -0.5, k3 = e^-0.5 - 1 + 0.5 = 0.10653066, loss = -0.5 + 0.1·0.10653066.
    lp = jnp.array([[-1.0]])
    out = credax.policy_loss(lp, lp, jnp.array([[0.5]]), jnp.ones((1, 1), bool),
                             ref_logp=jnp.array([[-1.5]]), options=credax.LossOptions(kl_coef=0.1))
    close(out.loss, -0.5 + 0.010653066)
    close(out.metrics.kl, 0.10653066)
    close(out.metrics.policy_loss, -0.5)
    g = jax.grad(lambda x: credax.policy_loss(x, lp, jnp.array([[0.5]]), jnp.ones((1, 1), bool),
                                              ref_logp=jnp.array([[-1.5]]),
                                              options=credax.LossOptions(kl_coef=0.1)).loss)(lp)
    # d/dlogp: surrogate -A·r -> -0.5; k3 = e^(ref-logp) - 1 - (ref-logp) -> 1 - e^-0.5 = 0.39346934.
    close(g, [[-0.5 + 0.1 * 0.39346934]])


def test_gspo_golden_and_defining_property():
    # Row 0: δ = (0.5, -0.5, 0.3): per-token ratios 1.65 and 0.61 lie outside [0.8, 1.2], but the
    # sequence ratio s = exp(mean δ) = e^0.1 = 1.10517092 is inside: nothing is clipped.
    # Row 1: δ = (0.1, 0.3, pad): s = e^0.2 = 1.22140276 > 1.2: clipped, -A·1.2 with A = 1.
    old = jnp.array([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    delta = jnp.array([[0.5, -0.5, 0.3], [0.1, 0.3, jnp.nan]])
    mask = jnp.array([[True, True, True], [True, True, False]])
    adv = jnp.array([1.0, 1.0])  # one advantage per row

    def f(lp):
        return credax.policy_loss(lp, old, adv, mask, options=credax.LossOptions(ratio="sequence",
                                                             agg="seq-mean-token-mean"))

    out = f(old + delta)
    # seq-mean-token-mean: (-1.10517092 + -1.2) / 2 = -1.15258546
    close(out.loss, -1.15258546)
    close(out.metrics.clip_frac_high, 2 / 5)  # the two tokens of row 1
    close(out.metrics.mean_ratio, (3 * 1.10517092 + 2 * 1.22140276) / 5)
    g = jax.jit(jax.grad(lambda lp: f(lp).loss))(old + delta)
    # Row 0: d/dlogp_t of ½·⅓·Σ_t -A·s = -s/6 = -0.18419515 per token; row 1 clipped: 0.
    close(g, [[-0.18419515] * 3, [0.0, 0.0, 0.0]])
    token = credax.policy_loss(old + delta, old, adv, mask,
                               options=credax.LossOptions(agg="seq-mean-token-mean"))
    assert float(token.metrics.clip_frac_high) > 0  # token-level ratios do clip here


def test_gspo_token_form_equals_sequence_objective():
    # With one advantage per row and seq-mean-token-mean, GSPO-token has GSPO's objective and
    # gradient: J = mean_b -min-form(A_b s_b) with s_b = exp(mean_t δ) differentiated through.
    key = rd.streams(11, 3)
    old = -jnp.abs(rd.normal(key[0], (4, 6)))
    lp = old + 0.05 * rd.normal(key[1], (4, 6))
    adv = rd.normal(key[2], (4,))
    mask = jnp.arange(6)[None, :] < jnp.array([[6], [3], [1], [5]])

    def gspo(x):
        n = mask.sum(-1).astype(F32)
        s = jnp.exp(jnp.where(mask, x - old, 0.0).sum(-1) / n)
        per_seq = jnp.maximum(-adv * s, -adv * jnp.clip(s, 0.99, 1.01))
        return per_seq.mean()

    def credax_gspo(x):
        return credax.policy_loss(x, old, adv, mask,
                                  options=credax.LossOptions(ratio="sequence", clip_low=0.01,
                                                             clip_high=0.01,
                                                             agg="seq-mean-token-mean")).loss

    close(credax_gspo(lp), float(gspo(lp)), atol=1e-6)
    close(jax.jit(jax.grad(credax_gspo))(lp), np.asarray(jax.grad(gspo)(lp)), atol=1e-6)


# ------------------------------------------------------------------------------------------
# policy_loss: references, masks, normalizers, per-turn advantages
# ------------------------------------------------------------------------------------------


def _random_batch(seed, batch=3, length=5, turns=3):
    k = rd.streams(seed, 6)
    old = -jnp.abs(rd.normal(k[0], (batch, length)))
    logp = old + 0.4 * rd.normal(k[1], (batch, length))
    adv = rd.normal(k[2], (batch, length))
    refp = old + 0.3 * rd.normal(k[3], (batch, length))
    mask = rd.bernoulli(k[4], 0.7, (batch, length))
    turn_adv = rd.normal(k[5], (batch, turns))
    return logp, old, adv, refp, mask, turn_adv


VARIANTS = [dict(clip_low=0.2, clip_high=0.28, dual_clip=dual, agg=mode, ratio=level,
                 **norm_kwargs(mode))
            for mode in MODES for level in ("token", "sequence") for dual in (None, 3.0)]


@jax.jit
def _all_variants(logp, old, adv, mask, refp):
    # One compiled program for every option combination keeps the property test cheap.
    return [credax.policy_loss(logp, old, adv, mask, ref_logp=refp,
                               options=credax.LossOptions(kl_coef=0.05, **kw))
            for kw in VARIANTS]


@given(
    seed=st.integers(0, 2**16),
    empty_row=st.booleans(),
    poison=st.sampled_from([None, jnp.nan, jnp.inf]),
)
def test_policy_loss_matches_reference(seed, empty_row, poison):
    logp, old, adv, refp, mask, _ = _random_batch(seed)
    adv = adv.at[0, 0].set(0.35).at[1, 1].set(1 / 3)
    if empty_row:
        mask = mask.at[2].set(False)
    if poison is not None:
        logp, old, adv, refp = (jnp.where(mask, x, poison) for x in (logp, old, adv, refp))
    outs = _all_variants(logp, old, adv, mask, refp)
    clean = [np.where(mask, np.asarray(x, np.float64), 0.0) for x in (logp, old, adv, refp)]
    for kwargs, out in zip(VARIANTS, outs, strict=True):
        exp_loss, exp_metrics = ref.policy_loss(
            clean[0], clean[1], clean[2], np.asarray(mask), ref=clean[3], kl_coef=0.05,
            kl_estimator="k3", **kwargs)
        close(out.loss, exp_loss, atol=1e-5)
        for name, value in exp_metrics.items():
            close(getattr(out.metrics, name), value, atol=1e-5)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_masked_values_change_neither_loss_nor_gradients(level):
    logp, old, adv, refp, mask, _ = _random_batch(3)

    @jax.jit
    def run(lp, o, a, r):
        def f(x):
            return credax.policy_loss(x, o, a, mask, ref_logp=r,
                                      options=credax.LossOptions(kl_coef=0.1, ratio=level,
                                                                 dual_clip=3.0))
        (loss, metrics), g = jax.value_and_grad(lambda x: (f(x).loss, f(x).metrics),
                                                has_aux=True)(lp)
        return loss, metrics, g

    clean = run(logp, old, adv, refp)
    for poison in (jnp.nan, jnp.inf, -1e30):
        dirty = run(*(jnp.where(mask, x, poison) for x in (logp, old, adv, refp)))
        np.testing.assert_array_equal(clean[0], dirty[0])
        for a, b in zip(clean[1], dirty[1], strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(clean[2], dirty[2])
        assert bool(jnp.all(dirty[2][~mask] == 0))


def test_fully_masked_batch_zero_loss_zero_grad():
    logp, old, adv, refp, _, _ = _random_batch(4)
    empty = jnp.zeros(logp.shape, bool)

    @jax.jit
    def run(x):
        out = []
        for mode in MODES:
            for level in ("token", "sequence"):
                def f(x, mode=mode, level=level):
                    res = credax.policy_loss(x, old, adv, empty, ref_logp=refp,
                                             options=credax.LossOptions(
                                                 kl_coef=0.1, agg=mode, ratio=level,
                                                 dual_clip=3.0, **norm_kwargs(mode)))
                    return res.loss, res.metrics

                out.append(jax.value_and_grad(f, has_aux=True)(x))
        return out

    for (loss, metrics), g in run(jnp.full(logp.shape, jnp.nan)):
        assert float(loss) == 0.0
        assert all(float(v) == 0.0 for v in metrics)
        assert bool(jnp.all(g == 0))


def test_microbatch_split_with_global_normalizer():
    logp, old, adv, _, mask, _ = _random_batch(5, batch=6, length=7)
    mask = mask.at[4].set(False)  # a fully masked row inside one micro-batch
    tokens, rows = jnp.sum(mask), jnp.sum(jnp.any(mask, axis=-1))
    normalizers = {"token-mean": tokens, "seq-mean-token-mean": rows, "seq-mean-token-sum": rows,
                   "seq-mean-token-sum-norm": 6 * 7.0, "token-sum": None}

    @jax.jit
    def run(x):
        out = {}
        for mode in MODES:
            def loss(x, o, a, m, mode=mode):
                return credax.policy_loss(x, o, a, m, options=credax.LossOptions(agg=mode,
                                                                     normalizer=normalizers[mode],
                                                                     dual_clip=3.0, clip_high=0.28)).loss

            full = jax.value_and_grad(loss)(x, old, adv, mask)
            # Three micro-batches of two rows with different token counts.
            parts = [jax.value_and_grad(loss)(x[i:i + 2], old[i:i + 2], adv[i:i + 2],
                                              mask[i:i + 2]) for i in (0, 2, 4)]
            local = None
            if mode not in ("token-sum", "seq-mean-token-sum-norm"):
                local = credax.policy_loss(x, old, adv, mask,
                                           options=credax.LossOptions(agg=mode, dual_clip=3.0,
                                                                      clip_high=0.28)).loss
            out[mode] = (full, parts, local)
        return out

    for mode, ((full, g_full), parts, local) in run(logp).items():
        close(sum(float(v) for v, _ in parts), float(full), atol=1e-6, err_msg=mode)
        close(jnp.concatenate([g for _, g in parts]), np.asarray(g_full), atol=1e-7, err_msg=mode)
        if local is not None:  # the global normalizer of the full batch is its local one
            close(local, float(full), atol=1e-6, err_msg=mode)


def test_microbatch_without_normalizer_is_not_the_full_batch_loss():
    # The trap the normalizer exists for: averaging per-micro-batch token means is not the
    # full-batch token mean when micro-batches hold different token counts.
    logp, old, adv, _, mask, _ = _random_batch(6, batch=4, length=6)
    mask = mask.at[0].set(True).at[1:].set(jnp.arange(6) < 1)
    full = credax.policy_loss(logp, old, adv, mask).loss
    halves = [credax.policy_loss(logp[s], old[s], adv[s], mask[s]).loss
              for s in (slice(0, 2), slice(2, 4))]
    assert abs(float(sum(halves) / 2) - float(full)) > 1e-3


def test_per_turn_advantages_equal_broadcast():
    logp, old, _, refp, mask, turn_adv = _random_batch(8, batch=3, length=6, turns=3)
    token_turn = jnp.array([[-1, 0, 0, 1, 1, 2], [0, 0, -1, -1, 1, -1], [-1, -1, -1, -1, -1, -1]])
    turn_adv = turn_adv.at[1, 2].set(jnp.nan)  # a padded turn no token points at
    out = credax.policy_loss(logp, old, turn_adv, mask, token_turn=token_turn, ref_logp=refp,
                             options=credax.LossOptions(kl_coef=0.1, agg="seq-mean-token-mean"))
    token_adv = credax.broadcast_to_tokens(jnp.nan_to_num(turn_adv), token_turn)
    effective = mask & (token_turn >= 0)  # tokens of no turn are excluded even if mask is true
    expected = credax.policy_loss(logp, old, token_adv, effective, ref_logp=refp,
                                  options=credax.LossOptions(kl_coef=0.1, agg="seq-mean-token-mean"))
    close(out.loss, float(expected.loss), atol=1e-7)
    for a, b in zip(out.metrics, expected.metrics, strict=True):
        close(a, float(b), atol=1e-7)


def test_row_advantages_broadcast():
    logp, old, adv, _, mask, _ = _random_batch(9)
    rows = adv[:, 0]
    out = credax.policy_loss(logp, old, rows, mask)
    expected = credax.policy_loss(logp, old, jnp.broadcast_to(rows[:, None], logp.shape), mask)
    np.testing.assert_array_equal(out.loss, expected.loss)


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


def test_policy_loss_grad_finite_differences_smooth_region():
    # Ratios inside the band and outside it on the unclipped side. Token ratios only: the
    # GSPO-token surrogate's gradient is by design not the derivative of its value (stop-gradient
    # on the sequence part); test_gspo_token_form_equals_sequence_objective covers it.
    with jax.enable_x64(True):
        old = jnp.array([[-1.0, -0.5, -2.0, -0.7]], jnp.float64)
        delta = jnp.array([[0.05, -0.1, 0.6, -0.6]], jnp.float64)
        adv = jnp.array([[0.35, -1 / 3, -0.95, 0.5]], jnp.float64)  # r=1.82 with A<0, r=.55 A>0
        mask = jnp.ones((1, 4), bool)
        refp = old + 0.3
        def f(x):
            return credax.policy_loss(x, old, adv, mask, ref_logp=refp,
                                      options=credax.LossOptions(kl_coef=0.1, dual_clip=3.0,
                                                                 agg="seq-mean-token-mean")).loss

        check_grads(jax.jit(f), (old + delta,), order=1, modes=["rev"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(clip_low=0.0), "clip_low"),
        (dict(clip_low=-0.1), "clip_low"),
        (dict(clip_low=1.0), "clip_low"),
        (dict(clip_high=0.0), "clip_high"),
        (dict(clip_high=-0.2), "clip_high"),
        (dict(dual_clip=1.0), "dual_clip"),
        (dict(dual_clip=0.5), "dual_clip"),
        (dict(agg="seq-mean"), "agg"),
        (dict(kl_estimator="low_var_kl"), "kl_estimator"),
        (dict(ratio="seq"), "ratio"),
        (dict(agg="seq-mean-token-sum-norm"), "normalizer"),
        (dict(kl_coef=0.1), "ref_logp"),
        (dict(kl_coef=-0.1, ref_logp=jnp.zeros((2, 4))), "kl_coef"),
        (dict(normalizer=-3.0), "normalizer"),
        # [B] advantages with token_turn are accepted (broadcast per row); a wrong B is not.
        (dict(advantages=jnp.ones(3), token_turn=jnp.zeros((2, 4), jnp.int32)), "advantages"),
    ],
)
def test_policy_loss_invalid_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _golden_call(**kwargs)


def test_policy_loss_shape_errors():
    lp = jnp.zeros((2, 4))
    with pytest.raises(ValueError, match="old_logp"):
        credax.policy_loss(lp, jnp.zeros((2, 3)), lp, jnp.ones((2, 4), bool))
    with pytest.raises(ValueError, match="advantages"):
        credax.policy_loss(lp, lp, jnp.zeros((2, 3)), jnp.ones((2, 4), bool))
    with pytest.raises(TypeError, match="mask"):
        credax.policy_loss(lp, lp, lp, jnp.ones((2, 4)))


def test_policy_loss_inside_jit_and_vmap():
    logp, old, adv, refp, mask, _ = _random_batch(13)
    eager = credax.policy_loss(logp, old, adv, mask, ref_logp=refp,
                               options=credax.LossOptions(kl_coef=0.1))

    @jax.jit
    def step(lp, clip):
        return credax.policy_loss(lp, old, adv, mask, ref_logp=refp,
                                  options=credax.LossOptions(clip_high=clip, kl_coef=0.1)).loss

    close(step(logp, 0.2), float(eager.loss), atol=1e-7)
    stacked = jnp.stack([logp, logp + 0.1, logp - 0.2])
    batched = jax.vmap(lambda x: credax.policy_loss(x, old, adv, mask).loss)(stacked)
    looped = [float(credax.policy_loss(x, old, adv, mask).loss) for x in stacked]
    close(batched, looped, atol=1e-7)


def test_policy_loss_bf16_logprobs():
    logp, old, adv, _, mask, _ = _random_batch(14)
    out = credax.policy_loss(logp.astype(jnp.bfloat16), old.astype(jnp.bfloat16), adv, mask)
    assert out.loss.dtype == F32
    expected = credax.policy_loss(logp.astype(jnp.bfloat16).astype(F32),
                                  old.astype(jnp.bfloat16).astype(F32), adv, mask)
    close(out.loss, float(expected.loss), atol=1e-7)
    g = jax.grad(lambda x: credax.policy_loss(x, old, adv, mask).loss)(logp.astype(jnp.bfloat16))
    assert g.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(g)))


def test_log_ratio_clamp_keeps_huge_gaps_finite():
    # δ = 50: r = e^20 (clamped); A < 0 with dual clip -> loss -A·3; without dual clip, -A·e^20.
    lp, old = jnp.array([[0.0]]), jnp.array([[-50.0]])
    out = credax.policy_loss(lp, old, jnp.array([[-1.0]]), jnp.ones((1, 1), bool))
    close(out.loss, math.exp(20.0), rtol=1e-6)
    g = jax.grad(lambda x: credax.policy_loss(x, old, jnp.array([[-1.0]]),
                                              jnp.ones((1, 1), bool)).loss)(lp)
    assert float(g[0, 0]) == 0.0  # beyond the clamp: no gradient, no inf
    out = credax.policy_loss(lp, old, jnp.array([[-1.0]]), jnp.ones((1, 1), bool),
                             options=credax.LossOptions(dual_clip=3.0))
    close(out.loss, 3.0)


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


LP = np.log(np.array([[0.5, 0.25, 0.5]], np.float32))
TOK_MASK = np.ones((1, 3), bool)


@probe("nonfinite", "policy_loss_nan_logp")
def _():
    for field in ("logp", "old", "adv"):
        logp, old, adv = LP.copy(), LP.copy(), np.ones((1, 3), np.float32)
        {"logp": logp, "old": old, "adv": adv}[field][0, 1] = NAN
        out = credax.policy_loss(logp, old, adv, TOK_MASK)
        assert np.isnan(out.loss), field
        masked = credax.policy_loss(logp, old, adv, np.array([[True, False, True]]))
        assert float(masked.loss) == -1.0, field  # on-policy, A = 1: -mean(A·1)


@probe("nonfinite", "aggregate_and_kl")
def _():
    v = np.array([[1.0, NAN]], np.float32)
    assert np.isnan(credax.aggregate(v, np.ones((1, 2), bool)))
    assert float(credax.aggregate(v, np.array([[True, False]]))) == 1.0
    nan_exactly(credax.kl_divergence(np.array([NAN, -1.0], np.float32), np.array([-1.0, -1.0], np.float32)),
                [True, False])


NARROW = ("int8", "int16", "uint8", "uint16")


for _dt in NARROW:

    def _p(dt=_dt):
        # policy_loss with per-turn advantages and a narrow turn map: no token silently dropped.
        turn = int(np.iinfo(dt).max) if np.iinfo(dt).max < 300 else 299
        tt = np.array([[turn, turn]], dt)
        adv = np.zeros((1, turn + 1), np.float32)
        adv[0, turn] = 1.0
        out = credax.policy_loss(np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32), adv,
                                 np.ones((1, 2), bool), token_turn=tt)
        assert float(out.loss) == -1.0  # both tokens count: -mean(A·1)

    probe("narrow", f"policy_loss_token_turn_{_dt}")(_p)


NEG_INF_LP = np.array([[-INF, -1.0]], np.float32)
ONES12 = np.ones((1, 2), np.float32)
MASK12 = np.ones((1, 2), bool)


def _loss_and_grad(ref_logp=None, **options):
    def f(lp):
        return credax.policy_loss(lp, NEG_INF_LP, ONES12, MASK12, ref_logp=ref_logp,
                                  options=credax.LossOptions(**options)).loss

    return f(jnp.asarray(NEG_INF_LP)), jax.grad(f)(jnp.asarray(NEG_INF_LP))


for _label, _options in {
    "token": {},
    "sequence": dict(ratio="sequence"),
    "kl_k3": dict(ref_logp=NEG_INF_LP, kl_coef=0.5),
    "kl_k1": dict(ref_logp=NEG_INF_LP, kl_coef=0.5, kl_estimator="k1"),
    "kl_weighted": dict(ref_logp=NEG_INF_LP, kl_coef=0.5, kl_ratio_weight=True),
    "seq_mean": dict(agg="seq-mean-token-mean"),
    "dual_clip": dict(dual_clip=3.0),
}.items():

    def _p(options=_options):
        # Token 0 is impossible under both policies (loss 0, gradient 0); token 1 is on-policy
        # with A = 1: loss -1 / 2 tokens, gradient -A·r / N = -0.5 (sequence ratio: the same).
        # k1 = logp - ref adds its own gradient kl_coef · 1 / N = 0.25 at the finite token.
        loss, grad = _loss_and_grad(**options)
        assert float(loss) == -0.5
        extra = 0.25 if options.get("kl_estimator") == "k1" else 0.0
        np.testing.assert_array_equal(grad, [[0.0, -0.5 + extra]])

    probe("neg_inf", f"policy_loss_neg_inf_{_label}")(_p)


@probe("neg_inf", "kl_neg_inf")
def _():
    for est in ("k1", "k2", "k3", "abs"):
        x = jnp.array([-INF, -2.0])
        out = credax.kl_divergence(x, x, estimator=est)
        np.testing.assert_array_equal(out, [0.0, 0.0])
        g = jax.grad(lambda v, e=est, r=x: jnp.sum(credax.kl_divergence(v, r, estimator=e)))(x)
        assert np.isfinite(np.asarray(g)).all(), est


@probe("neg_inf", "kl_one_sided_inf_is_honest")
def _():
    # π(token) = 0 under the reference only: k1 = logp - ref = +inf (a real infinite KL), and k3,
    # whose exp argument is clamped at ±20, stays finite: e^-20 - 1 + 20.
    out = credax.kl_divergence(jnp.array([-1.0]), jnp.array([-INF]), estimator="k1")
    assert float(out[0]) == INF
    k3 = credax.kl_divergence(jnp.array([-1.0]), jnp.array([-INF]), estimator="k3")
    np.testing.assert_allclose(k3, [np.exp(-20.0) - 1 + 20], rtol=1e-6)


@probe("neg_inf", "new_policy_neg_inf")
def _():
    # logp = -inf, old finite: the log-ratio is clamped at -20, the token is clipped (A > 0 side
    # is not, A = 1 keeps -A·r = -e^-20) and carries no gradient beyond the clamp.
    f = lambda lp: credax.policy_loss(lp, np.zeros((1, 1), np.float32), np.ones((1, 1), np.float32),
                                      np.ones((1, 1), bool)).loss
    lp = jnp.array([[-INF]])
    np.testing.assert_allclose(f(lp), -np.exp(-20.0), rtol=1e-6)
    assert float(jax.grad(f)(lp)[0, 0]) == 0.0


R_TIE = np.float32(np.exp(np.float32(0.2)))  # exp(0.2) in float32 ...
EPS_TIE = float(np.float32(R_TIE - np.float32(1)))  # ... and a clip_high that puts it on 1 + ε
LOW_TIE = float(np.float32(1) - np.float32(np.exp(np.float32(-0.2))))  # 1 - ε_low = exp(-0.2)


def _tie_grad(log_r, adv, **options):
    def f(lp):
        return credax.policy_loss(lp, np.zeros((1, 1), np.float32), np.full((1, 1), adv, np.float32),
                                  np.ones((1, 1), bool), options=credax.LossOptions(**options)).loss

    return float(jax.grad(f)(jnp.full((1, 1), log_r, jnp.float32))[0, 0])


@probe("tie", "high_bound_positive_adv")
def _():
    # r = 1 + ε exactly, A = 1: both surrogate branches equal -A·r; torch.clamp passes the
    # gradient of the clipped branch whole and torch.maximum splits the tie evenly, so
    # dℓ/dlogp = 0.5·(-A·r) + 0.5·(-A·r) = -r. (jnp.clip's half gradient gave 0.75 of that.)
    assert float(np.float32(1) + np.float32(EPS_TIE)) == float(R_TIE)
    np.testing.assert_allclose(_tie_grad(0.2, 1.0, clip_high=EPS_TIE), -R_TIE, rtol=1e-6)


@probe("tie", "high_bound_negative_adv")
def _():
    # r = 1 + ε, A = -1: the loss is smooth there (max(-A r, -A clip r) = r for r >= 1+ε too):
    # dℓ/dlogp = -A·r = r.
    np.testing.assert_allclose(_tie_grad(0.2, -1.0, clip_high=EPS_TIE), R_TIE, rtol=1e-6)


@probe("tie", "low_bound")
def _():
    r_low = float(np.exp(np.float32(-0.2)).astype(np.float32))
    # r = 1 - ε_low exactly: full gradient for either sign of A: dℓ/dlogp = -A·r.
    assert float(np.float32(1) - np.float32(LOW_TIE)) == r_low
    np.testing.assert_allclose(_tie_grad(-0.2, -1.0, clip_low=LOW_TIE), r_low, rtol=1e-6)
    np.testing.assert_allclose(_tie_grad(-0.2, 1.0, clip_low=LOW_TIE), -r_low, rtol=1e-6)


@probe("tie", "dual_clip")
def _():
    # r = c = e^1.5 (dual clip exactly binding), A = -1: torch.min(-A·c, -A·r) splits the tie:
    # dℓ/dlogp = 0.5·(-A·r) = 0.5·r.
    c = float(np.exp(np.float32(1.5)).astype(np.float32))
    np.testing.assert_allclose(_tie_grad(1.5, -1.0, dual_clip=c), 0.5 * c, rtol=1e-6)


@probe("tie", "inside_and_beyond")
def _():
    # Just inside: -A·r; beyond the bound: exactly 0 (clipped).
    np.testing.assert_allclose(_tie_grad(0.1, 1.0), -np.exp(0.1), rtol=1e-6)
    assert _tie_grad(0.5, 1.0) == 0.0


@probe("tie", "log_ratio_clamp")
def _():
    # log-ratio exactly on the clamp (20): torch.clamp passes the gradient; A = -1 keeps the
    # token unclipped by the ratio bounds (r > 1 + ε with A < 0 is the unclipped branch).
    np.testing.assert_allclose(_tie_grad(20.0, -1.0), np.exp(np.float32(20.0)), rtol=1e-6)
    assert _tie_grad(20.5, -1.0) == 0.0


@probe("tie", "kl_clamp")
def _():
    # k3 exactly at a clamp c: full gradient, as torch.clamp. k3(δ) with δ = logp - ref,
    # x = -δ: e^x - 1 - x; d/dlogp = -(e^x - 1) = 1 - e^x.
    x = np.float32(-3.0)
    lp = jnp.full((1,), -x)
    c = float(credax.kl_divergence(lp, jnp.zeros(1))[0])  # places the value exactly on the clamp
    f = lambda lp: jnp.sum(credax.kl_divergence(lp, jnp.zeros(1), clamp=c))
    np.testing.assert_allclose(f(lp), c, rtol=1e-6)
    np.testing.assert_allclose(jax.grad(f)(lp), [1 - np.exp(x)], rtol=1e-5)


# The surrogates other than the clip (CISPO, SAPO, VESPO): empty input, impossible tokens, their
# bounds. Each case's value worked by hand in its comment.
SURROGATES = {"cispo": dict(surrogate="cispo"), "sapo": dict(surrogate="sapo"),
              "vespo": dict(surrogate="vespo")}


def _surrogate_loss_and_grad(lp, old, adv, mask, options, **arrays):
    def f(x):
        return credax.policy_loss(x, old, adv, mask, options=options, **arrays)

    out = f(jnp.asarray(lp))
    return out, jax.grad(lambda x: f(x).loss)(jnp.asarray(lp))


@probe("contract", "surrogates_empty_mask")
def _():
    # No trained token: loss 0, zero gradient and zero metrics for every surrogate, the KL term,
    # the rollout correction (folded into VESPO's weight) and a sequence ratio included.
    lp = np.full((2, 3), -1.0, np.float32)
    for name, fields in SURROGATES.items():
        for ratio in ("token", "sequence"):
            opts = credax.LossOptions(**fields, ratio=ratio, kl_coef=0.5, kl_ratio_weight=True)
            out, grad = _surrogate_loss_and_grad(lp, lp - 0.3, np.ones(2, np.float32),
                                                 np.zeros((2, 3), bool), opts, ref_logp=lp + 0.2,
                                                 rollout_logp=lp - 0.1)
            assert float(out.loss) == 0.0, name
            assert not np.any(np.asarray(grad)), name
            assert all(float(m) == 0.0 for m in out.metrics), name


@probe("contract", "surrogates_empty_row")
def _():
    # A row with no trained token changes nothing (token-mean): its tokens are not counted and
    # VESPO's weight of an empty row (log W = 0) multiplies no token.
    rng = np.random.default_rng(0)
    lp = rng.uniform(-2, -0.5, (2, 3)).astype(np.float32)
    old = (lp + rng.uniform(-0.3, 0.3, (2, 3))).astype(np.float32)
    adv = np.array([1.0, -0.5], np.float32)
    mask = np.array([[True, True, False], [True, False, True]])
    pad = lambda x, v: np.concatenate([x, np.full((1, 3), v, x.dtype)])  # noqa: E731
    for name, fields in SURROGATES.items():
        opts = credax.LossOptions(**fields)
        a, ga = _surrogate_loss_and_grad(lp, old, adv, mask, opts)
        b, gb = _surrogate_loss_and_grad(pad(lp, NAN), pad(old, NAN), np.append(adv, 7.0),
                                         pad(mask, False), opts)
        np.testing.assert_allclose(b.loss, a.loss, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(gb[:2], ga, rtol=1e-6, err_msg=name)
        assert not np.any(np.asarray(gb[2])), name


@probe("neg_inf", "surrogates_impossible_token")
def _():
    # Token 0: logp = old_logp = -inf (impossible under both: loss 0, gradient 0, not 0·-inf =
    # NaN); token 1 on-policy, logp = -1, A = 1, N = 2 tokens:
    #   cispo: ℓ = -min(1, 5)·1·(-1) = 1           -> loss 1/2;  dℓ/dlogp = -1      -> -1/2
    #   sapo:  ℓ = -(4/1)·σ(0)·1 = -2              -> loss -1;   dℓ/dlogp = -4σ(0)(1-σ(0))·r = -1 -> -1/2
    #   vespo: log W = 0 + 0, φ(1) = 1, ℓ = 1      -> loss 1/2;  dℓ/dlogp = -φ·A = -1 -> -1/2
    want = {"cispo": 0.5, "sapo": -1.0, "vespo": 0.5}
    for name, fields in SURROGATES.items():
        out, grad = _surrogate_loss_and_grad(NEG_INF_LP, NEG_INF_LP, ONES12, MASK12,
                                             credax.LossOptions(**fields))
        assert float(out.loss) == want[name], name
        np.testing.assert_array_equal(grad, [[0.0, -0.5]], err_msg=name)


@probe("neg_inf", "surrogates_new_policy_neg_inf")
def _():
    # logp = -inf at a trained token, old = 0, A = 1. CISPO and VESPO weight the log-likelihood
    # itself: ℓ = -w·A·logp = +inf (an honest infinity, as the objective is), their gradient -w·A
    # stays finite: CISPO w = min(e^-20, 5) (the log-ratio clamped at -20); VESPO log W is
    # clamped to log 1e-8, φ = exp(3 + 2·log 1e-8 - 3e-8). SAPO's value is finite:
    # -(4/1)·σ(e^-20 - 1) and its gradient 0 beyond the log-ratio clamp.
    f = lambda lp, o: credax.policy_loss(lp, np.zeros((1, 1), np.float32),  # noqa: E731
                                         np.ones((1, 1), np.float32), np.ones((1, 1), bool),
                                         options=o).loss
    lp = jnp.array([[-INF]])
    for name, w in (("cispo", np.exp(-20.0)), ("vespo", np.exp(3 + 2 * np.log(1e-8) - 3e-8))):
        opts = credax.LossOptions(**SURROGATES[name])
        assert float(f(lp, opts)) == INF, name
        np.testing.assert_allclose(jax.grad(f)(lp, opts), [[-w]], rtol=1e-5, err_msg=name)
    sapo = credax.LossOptions(surrogate="sapo")
    np.testing.assert_allclose(f(lp, sapo), -4 / (1 + np.exp(1 - np.exp(-20.0))), rtol=1e-6)
    assert float(jax.grad(f)(lp, sapo)[0, 0]) == 0.0


@probe("tie", "cispo_cap")
def _():
    # r = cispo_max exactly (r = exp(0.2) in float32, cap R_TIE): the weight is min(r, cap) = cap
    # either way, a constant: dℓ/dlogp = -cap·A. Beyond the cap the gradient stays -cap·A (CISPO
    # never zeroes a token, unlike the clip), and the cap counts as binding only beyond it.
    for log_r in (0.2, 0.5):
        out, grad = _surrogate_loss_and_grad(
            np.full((1, 1), log_r, np.float32), np.zeros((1, 1), np.float32),
            np.ones((1, 1), np.float32), np.ones((1, 1), bool),
            credax.LossOptions(surrogate="cispo", cispo_max=float(R_TIE)))
        np.testing.assert_allclose(grad, [[-R_TIE]], rtol=1e-6)
        np.testing.assert_allclose(out.loss, -R_TIE * log_r, rtol=1e-6)
        assert float(out.metrics.clip_frac_high) == (0.0 if log_r == 0.2 else 1.0)


@probe("tie", "sapo_on_policy")
def _():
    # r = 1: the gate's gradient factor 4σ(0)(1 - σ(0)) = 1 for any τ, so dℓ/dlogp = -A exactly
    # (the policy gradient), for A > 0 (τ_pos) and A < 0 (τ_neg); the value is -(2/τ)·A.
    for adv, tau in ((1.0, 0.7), (-2.0, 3.0)):
        out, grad = _surrogate_loss_and_grad(
            np.full((1, 1), -1.0, np.float32), np.full((1, 1), -1.0, np.float32),
            np.full((1, 1), adv, np.float32), np.ones((1, 1), bool),
            credax.LossOptions(surrogate="sapo", sapo_tau_pos=0.7, sapo_tau_neg=3.0))
        np.testing.assert_allclose(grad, [[-adv]], rtol=1e-6)
        np.testing.assert_allclose(out.loss, -2 / tau * adv, rtol=1e-6)


@probe("tie", "vespo_weight_bounds")
def _():
    # φ(W) = W^k e^{λ(1 - W)}: exactly 1 at W = 1 (log W = 0.3 - 0.3); log W is clamped to
    # [log 1e-8, 20], so a row summing to 25 has the weight of one summing to 20 (and 1e-9 that
    # of 1e-8). φ is a constant: dℓ/dlogp = -φ·A at every token. k = 0.5, λ = 0.01 keep φ(e^20)
    # finite: exp(0.01 + 10 - 0.01·e^20).
    opts = credax.LossOptions(surrogate="vespo", vespo_k_pos=0.5, vespo_lambda_pos=0.01)

    def grad_at(log_ratios):
        lr = np.asarray([log_ratios], np.float32)
        return _surrogate_loss_and_grad(lr - 1.0, np.full_like(lr, -1.0), np.ones(1, np.float32),
                                        np.ones(lr.shape, bool), opts)[1]

    np.testing.assert_array_equal(grad_at([0.3, -0.3]), [[-0.5, -0.5]])
    phi = lambda log_w: np.exp(0.01 + 0.5 * log_w - 0.01 * np.exp(log_w))  # noqa: E731
    np.testing.assert_allclose(grad_at([12.5, 12.5]), grad_at([10.0, 10.0]), rtol=1e-6)
    np.testing.assert_allclose(grad_at([10.0, 10.0]), [[-phi(20.0) / 2] * 2], rtol=1e-4)
    np.testing.assert_allclose(grad_at([-10.0, -10.0]), [[-phi(np.log(1e-8)) / 2] * 2],
                               rtol=1e-4)


@probe("f32", "vespo_weight_overflow_dropped")
def _():
    # k = 100, λ = 1e-3, log W = 10: log φ = 1e-3 + 1000 - 1e-3·e^10 ≈ 978, beyond float32's
    # exp: that row's weight is dropped (0), as TRL's nan_to_num(posinf=0) drops it; the other
    # row (log W = 0, φ = 1, A = 1, logp = -1 on its 2 tokens of N = 4) gives loss 2/4.
    lp = np.array([[4.0, 4.0], [-1.0, -1.0]], np.float32)
    old = np.array([[-1.0, -1.0], [-1.0, -1.0]], np.float32)
    opts = credax.LossOptions(surrogate="vespo", vespo_k_pos=100.0, vespo_lambda_pos=1e-3)
    out, grad = _surrogate_loss_and_grad(lp, old, np.ones(2, np.float32), np.ones((2, 2), bool),
                                         opts)
    assert float(out.loss) == 0.5
    np.testing.assert_array_equal(grad, [[0.0, 0.0], [-0.25, -0.25]])


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

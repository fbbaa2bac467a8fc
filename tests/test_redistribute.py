"""redistribute_advantages: a trajectory advantage spread over its turns by per-turn weights.

Ground truth: the float64 loop of ``tests/reference/redistribute.py`` (written from the
docstring's formulas), hand-worked goldens, and the properties the five methods rely on: identity
under uniform weights, sign preservation, the mean / sum invariant, padding invariance.
No method's public code exists to compare with (DRACO, VICT, IAPO, TASPO, FACTOR: the field notes
of 2026-12-03 §1 and the search tool's code index hold none; checked for this issue).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import credax
from tests.reference import redistribute as ref

MODES = ("mean_preserving", "telescoping")


def test_golden():
    # Row 0: weights (1, 3, 0), n = 3, Σw = 4: mean-preserving w~ = 3w/4 = (.75, 2.25, 0), times
    # A = 2 -> (1.5, 4.5, 0) (mean 2); telescoping A·w/4 = (.5, 1.5, 0) (sum 2).
    # Row 1: all-zero weights on its two valid turns: uniform -> (-1, -1) / (-.5, -.5).
    # Row 2: one valid turn with weight 0: A in both modes. Row 3: no valid turn: 0.
    adv = np.array([2.0, -1.0, 0.5, 7.0], np.float32)
    w = np.array([[1, 3, 0], [0, 0, np.nan], [0, np.inf, 5], [1, 1, 1]], np.float32)
    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]], bool)
    mean = credax.redistribute_advantages(adv, w, mask)
    tele = credax.redistribute_advantages(adv, w, mask, mode="telescoping")
    np.testing.assert_allclose(mean, [[1.5, 4.5, 0], [-1, -1, 0], [0.5, 0, 0], [0, 0, 0]], rtol=1e-6)
    np.testing.assert_allclose(tele, [[0.5, 1.5, 0], [-0.5, -0.5, 0], [0.5, 0, 0], [0, 0, 0]],
                               rtol=1e-6)


def random_case(rng, batch=5, turns=4):
    mask = np.arange(turns)[None, :] < rng.integers(0, turns + 1, batch)[:, None]
    w = rng.choice([0.0, 0.5, 1.0, 2.0, 1e-3, 3.7], size=(batch, turns)).astype(np.float32)
    w[rng.random((batch, turns)) < 0.2] = 0.0
    w[~mask] = np.nan
    return rng.normal(size=batch).astype(np.float32), w, mask


@pytest.mark.parametrize("mode", MODES)
def test_matches_reference(mode):
    rng = np.random.default_rng(0)
    for _ in range(30):
        adv, w, mask = random_case(rng)
        got = credax.redistribute_advantages(adv, w, mask, mode=mode)
        np.testing.assert_allclose(got, ref.redistribute(adv, w, mask, mode), rtol=1e-6, atol=1e-6)


@st.composite
def cases(draw):
    b, k = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    mask = rng.random((b, k)) < draw(st.sampled_from([0.3, 0.7, 1.0]))
    scale = draw(st.sampled_from([1e-30, 1.0, 1e30]))
    w = (rng.random((b, k)) * scale).astype(np.float32)
    w[rng.random((b, k)) < 0.2] = 0.0
    return rng.normal(size=b).astype(np.float32) * 3, w, mask


@given(case=cases(), mode=st.sampled_from(MODES))
def test_invariants(case, mode):
    adv, w, mask = case
    out = np.asarray(credax.redistribute_advantages(adv, w, mask, mode=mode), np.float64)
    n = mask.sum(1)
    assert np.isfinite(out).all()
    # sign preservation: every turn has A_i's sign or is 0
    assert (out * adv[:, None] >= 0).all()
    # the invariant: mean (mean-preserving) or sum (telescoping) over valid turns is A_i
    total = out.sum(1)
    want = np.where(n > 0, adv * (n if mode == "mean_preserving" else 1), 0.0)
    np.testing.assert_allclose(total, want, rtol=1e-5, atol=1e-5 * np.abs(adv).max())
    # padding invariance: garbage in padded weights never matters
    junk = np.where(mask, w, np.float32(np.nan))
    np.testing.assert_array_equal(out, credax.redistribute_advantages(adv, junk, mask, mode=mode))
    assert (out[~mask] == 0).all()
    # identity: uniform weights give A_i on every valid turn (mean-preserving), A_i / n telescoping
    uniform = np.asarray(credax.redistribute_advantages(adv, np.full_like(w, 0.3), mask, mode=mode))
    per_turn = adv[:, None] if mode == "mean_preserving" else adv[:, None] / np.maximum(n, 1)[:, None]
    np.testing.assert_allclose(uniform, np.where(mask, per_turn, 0), rtol=1e-6)


def test_bad_weights_and_arguments():
    adv, mask = np.ones(2, np.float32), np.ones((2, 2), bool)
    for bad in (-1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="`weights` must be >= 0 and finite"):
            credax.redistribute_advantages(adv, np.array([[1, bad], [1, 1]], np.float32), mask)
    # padded weights are never checked
    ok = credax.redistribute_advantages(adv, np.array([[1, -1], [1, 1]], np.float32),
                                        np.array([[1, 0], [1, 1]], bool))
    np.testing.assert_allclose(ok, [[1, 0], [1, 1]])
    # traced: the row with a bad weight is NaN, the others are untouched
    f = jax.jit(lambda w: credax.redistribute_advantages(adv, w, mask))
    out = np.asarray(f(jnp.array([[1.0, -1.0], [1.0, 3.0]])))
    assert np.isnan(out[0]).all()
    np.testing.assert_allclose(out[1], [0.5, 1.5])
    with pytest.raises(ValueError, match="`mode`"):
        credax.redistribute_advantages(adv, np.ones((2, 2)), mask, mode="sum")
    with pytest.raises(ValueError, match="`weights`"):
        credax.redistribute_advantages(adv, np.ones((3, 2)), mask)
    with pytest.raises(TypeError, match="`turn_mask`"):
        credax.redistribute_advantages(adv, np.ones((2, 2)), np.ones((2, 2)))


def test_gradients_are_finite_and_flow_to_both_inputs():
    adv = jnp.array([1.0, -2.0])
    w = jnp.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
    mask = jnp.array([[True, True, True], [True, True, False]])
    ga, gw = jax.grad(lambda a, w: credax.redistribute_advantages(a, w, mask).sum() ** 2,
                      argnums=(0, 1))(adv, w)
    assert np.isfinite(np.asarray(ga)).all() and np.isfinite(np.asarray(gw)).all()
    # the sum of a mean-preserving row is n·A_i whatever the weights: no gradient to them
    np.testing.assert_allclose(gw, 0.0, atol=1e-6)
    gw2 = jax.grad(lambda w: credax.redistribute_advantages(adv, w, mask)[0, 0])(w)
    assert float(gw2[0, 0]) > 0 and float(gw2[0, 2]) < 0  # more weight, more share


@pytest.mark.parametrize("mode", ["mean_preserving", "telescoping"])
def test_any_finite_weights_give_the_documented_result(mode):
    # Issue 44 item 2: weights >= 2**126 made 1/max(w) subnormal, flushed to 0 on CPU, and the row
    # came out all 0. Only ratios matter, so a row scaled by a power of two gives the same result
    # (exactly: the scaling is exact). Expected by hand for w = (1, 3, 0) on three valid turns,
    # S = 4: mean-preserving 3·w/S = (0.75, 2.25, 0), telescoping w/S = (0.25, 0.75, 0).
    want = [0.75, 2.25, 0.0] if mode == "mean_preserving" else [0.25, 0.75, 0.0]
    mask = np.ones((1, 3), bool)
    for scale in (2.0 ** 126, 2.0 ** 127 / 3, 2.0 ** -100, 1.0):
        w = np.array([[1.0, 3.0, 0.0]], np.float32) * np.float32(scale)
        got = credax.redistribute_advantages(np.ones(1, np.float32), w, mask, mode=mode)
        np.testing.assert_allclose(got, [want], rtol=1e-6, err_msg=str(scale))
    # the largest float32 weights: equal weights spread uniformly; 3e38 against 1.7e38
    top = np.finfo(np.float32).max
    got = credax.redistribute_advantages(np.ones(1, np.float32), np.full((1, 3), top), mask,
                                         mode=mode)
    np.testing.assert_allclose(got, [[1.0] * 3] if mode == "mean_preserving" else [[1 / 3] * 3],
                               rtol=1e-6)
    w = np.array([[2.0 ** 127, 3e38, 1.0]], np.float32)
    share = np.array([2.0 ** 127, float(np.float32(3e38)), 1.0]) / (2.0 ** 127 + float(np.float32(3e38)))
    got = credax.redistribute_advantages(np.ones(1, np.float32), w, mask, mode=mode)
    # (the weight 1.0's share, 6e-39, is below float32's normal range: flushed to 0)
    np.testing.assert_allclose(got[0], share * (3 if mode == "mean_preserving" else 1), rtol=1e-6,
                               atol=1e-37)
    # subnormal weights (below 2**-126, read as 0 by XLA's arithmetic on CPU) keep their ratio
    w = np.array([[1.0, 3.0, 0.0]], np.float32) * np.float32(2.0 ** -140)
    got = credax.redistribute_advantages(np.ones(1, np.float32), w, mask, mode=mode)
    np.testing.assert_allclose(got, [want], rtol=1e-6)
    # gradients stay finite for huge weights (their true size, ~1e-38, is at float32's edge) and
    # keep their sign at ordinary ones
    for w0, sign in ((2.0 ** 127, 0), (1.0, 1)):
        g = jax.grad(lambda w: credax.redistribute_advantages(
            jnp.ones(1), w, jnp.ones((1, 3), bool), mode=mode)[0, 0])(jnp.array([[w0, w0 / 2, 0.0]]))
        assert np.isfinite(np.asarray(g)).all() and float(g[0, 0]) * sign >= 0

"""Shrinkage baselines (James–Stein toward the across-prompt mean) for GRPO and RLOO.

Ground truth: the per-prompt loop of ``tests/reference/estimators.py::shrinkage_baseline``,
hand-worked goldens, the limiting cases (c = 0 is Dr. GRPO / RLOO), and the variance reduction
itself on synthetic Bernoulli prompts (the figure of benchmarks/shrinkage.py, at test size).

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from benchmarks import shrinkage as bench
from tests.probes import Probes
from tests.reference import estimators as ref


def test_golden_loo():
    # Four prompts of two, r = (1,1), (0,1), (0,0), (1,0); leave_one_out: m_p = 1.
    #   μ_p = (1, .5, 0, .5), μ̄ = .5, S = Σ(μ_p − μ̄)² = .5, σ² = 1/4 (pooled: ss 1 over 4 dof)
    #   c = (4 − 3)·(.25/1)/.5 = .5; others' means: (1, 1), (1, 0), (0, 0), (0, 1)
    #   b = .5 + .5·(others − .5) -> (.75, .75), (.75, .25), (.25, .25), (.25, .75)
    r = jnp.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    out = credax.shrinkage_baseline(r, jnp.array([0, 0, 1, 1, 2, 2, 3, 3]), leave_one_out=True)
    np.testing.assert_allclose(out.baseline, [0.75, 0.75, 0.75, 0.25, 0.25, 0.25, 0.25, 0.75],
                               atol=1e-6)
    np.testing.assert_allclose(out.shrinkage, 0.5, atol=1e-6)
    np.testing.assert_allclose(out.grand_mean, 0.5, atol=1e-6)


def test_few_prompts_is_plain_dr_grpo_and_rloo():
    # P = 3 < 4: c = 0, the baselines are the per-prompt mean and the leave-one-out mean.
    r = jnp.array([1.0, 0.0, 0.35, 1 / 3, 0.5, 0.9])
    ids = jnp.array([4, 4, -1, -1, 9, 9])
    np.testing.assert_allclose(credax.shrinkage_advantages(r, ids),
                               credax.grpo_advantages(
                                   r, ids, normalization=credax.Normalization(scale="none")),
                               atol=1e-6)
    np.testing.assert_allclose(credax.shrinkage_advantages(r, ids, leave_one_out=True),
                               credax.rloo_advantages(r, ids), atol=1e-6)


def test_matches_reference():
    rng = np.random.default_rng(0)
    for case in range(60):
        # A few batch sizes (1 to 23, the edges included), so jit compiles 8 programs and not one
        # per case; ids, rewards and masks stay random per case.
        batch = int(rng.choice([1, 2, 9, 23]))
        ids = rng.integers(-2, 6, size=batch).astype(np.int32)
        r = rng.choice([0.0, 1.0, 0.35, 1 / 3, 0.5], size=batch)
        mask = rng.random(batch) < 0.85
        r[~mask] = np.nan
        loo = bool(case % 2)
        got = credax.shrinkage_baseline(r, ids, mask, leave_one_out=loo)
        base, coef, grand = ref.shrinkage_baseline(r, ids, mask, leave_one_out=loo)
        np.testing.assert_allclose(got.baseline, base, atol=1e-5)
        np.testing.assert_allclose(got.shrinkage, coef, atol=1e-5)
        if mask.any():
            np.testing.assert_allclose(got.grand_mean, grand, atol=1e-5)


def test_variance_reduction_on_bernoulli_prompts():
    # The benchmark at test size: 64 prompts of 8, 200 batches. The shrinkage estimators must not
    # be worse than the per-prompt ones (measured ratios at full size are in the benchmark).
    res = bench.measure(num_prompts=64, group_size=8, batches=200, seed=0)
    assert res["shrinkage"]["mse"] < res["dr_grpo"]["mse"]
    assert res["shrinkage_loo"]["mse"] < res["rloo"]["mse"]


def test_against_the_true_advantage_self_inclusion_decides_the_sign():
    # R = V_p + δ + η (benchmarks/shrinkage.py::against_true_advantage), truth A* = δ. Derivation:
    # with the self-inclusive mean μ_p, A − A* = η_i − (μ_p − V_p) and E[η_i (μ_p − V_p)] = sd_η²/n,
    # so plain Dr. GRPO cancels a share 1/n of η_i; the shrunk baseline (1 − c) μ_p + c μ̄ keeps
    # only (1 − c) of it and, at the James–Stein c, gains c·(sd_δ² + sd_η²)/n on the estimate of
    # V_p: net (c/n)(sd_η² − sd_δ²). The leave-one-out mean has no share of η_i: it only gains.
    for sd_action, sd_rest in bench.REGIMES:
        res = bench.against_true_advantage(sd_action, sd_rest, batches=300, seed=0)
        assert res["rloo_change"] < -0.004, res
        predicted = res["dr_grpo_first_order"]
        if sd_action == sd_rest:
            assert abs(res["dr_grpo_change"]) < 5e-4, res
        else:
            assert np.sign(res["dr_grpo_change"]) == np.sign(sd_rest - sd_action), res
            np.testing.assert_allclose(res["dr_grpo_change"], predicted, rtol=0.15)


def test_masked_rows_and_jit():
    r = jnp.array([1.0, jnp.nan, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    ids = jnp.array([0, 0, 1, 1, 2, 2, 3, 3, 0])
    mask = jnp.array([True, False, True, True, True, True, True, True, True])
    out = jax.jit(lambda x: credax.shrinkage_advantages(x, ids, mask))(r)
    assert float(out[1]) == 0.0 and bool(jnp.all(jnp.isfinite(out)))
    with pytest.raises(TypeError, match="`mask`"):
        credax.shrinkage_baseline(r, ids, mask.astype(float))
    with pytest.raises(ValueError, match="`rewards`"):
        credax.shrinkage_baseline(jnp.zeros((9, 2)), ids)


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


R8 = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
IDS8 = np.array([0, 0, 1, 1, 2, 2, 3, 3])


# shrinkage_baseline(R8, IDS8) hand-worked in its docstring: c = 0.25 for every prompt and
# advantages (.125, .125, -.5, .5, -.125, -.125, .5, -.5). c is scale-free and the advantages
# scale with the rewards, so r·s gives c = .25 and s·A for every s.
SHRINK_A = np.array([0.125, 0.125, -0.5, 0.5, -0.125, -0.125, 0.5, -0.5])


for _s in (1e10, 1e19, 1e20, 1e25, 1e30, 1e35, 1e38, 1e-10, 1e-20, 1e-30, 1e-36):
    for _loo in (False, True):

        def _p(s=_s, loo=_loo):
            # Before: NaN from 1e20 up (squares overflow) and c = 1 from 1e-20 down (squares
            # underflow to 0: "identical prompt means").
            x = (R8 * s).astype(np.float32)
            out = credax.shrinkage_baseline(x, IDS8, leave_one_out=loo)
            ref = credax.shrinkage_baseline(R8.astype(np.float32), IDS8, leave_one_out=loo)
            np.testing.assert_allclose(out.shrinkage, ref.shrinkage, rtol=1e-5)
            np.testing.assert_allclose(np.asarray(out.baseline, np.float64) / s,
                                       np.asarray(ref.baseline), rtol=1e-5, atol=1e-6)
            adv = np.asarray(credax.shrinkage_advantages(x, IDS8, leave_one_out=loo), np.float64)
            if not loo:
                np.testing.assert_allclose(adv / s, SHRINK_A, rtol=1e-5, atol=1e-6)

        probe("f32", f"shrinkage_scale_{_s:g}_{'loo' if _loo else 'mean'}")(_p)


@probe("f32", "shrinkage_offset_near_float32_max")
def _():
    # r = 3e38 + R8·1e37 (all finite): c as for R8 (it is shift- and scale-free), no NaN.
    x = (np.float64(3e38) + R8 * 1e37).astype(np.float32)
    out = credax.shrinkage_baseline(x, IDS8)
    np.testing.assert_allclose(out.shrinkage, 0.25, rtol=1e-4)
    assert np.isfinite(np.asarray(out.baseline)).all()


@probe("f32", "shrinkage_nan_valid_reward_poisons_every_row")
def _():
    # A NaN reward at a valid row is in the grand mean and the pooled variance of every prompt:
    # NaN at every valid row (before: silently left out, with its row still counted in n_p).
    x = R8.astype(np.float32).copy()
    x[3] = np.nan
    out = credax.shrinkage_baseline(x, IDS8)
    assert np.isnan(np.asarray(out.baseline)).all() and np.isnan(float(out.grand_mean))
    m = np.ones(8, bool)
    m[3] = False  # masked: absent, the others finite
    assert np.isfinite(np.asarray(credax.shrinkage_baseline(x, IDS8, m).baseline)).all()


@probe("f32", "shrinkage_mixed_magnitudes")
def _():
    # One prompt at 1e30, the others 0/1: spread ~ 1e60 in float32 used to overflow. With
    # μ = (1e30, .5, 0, .5), μ̄ ≈ 2.5e29, Σ(μ - μ̄)² ≈ .75e60, σ² = (0 + .5 + 0 + .5)/4 = .25:
    # c = (4 - 3)(.25/2)/.75e60 ≈ 1.7e-61 -> 0 in float32: the baselines are the prompt means.
    x = R8.astype(np.float32).copy()
    x[:2] = 1e30
    out = credax.shrinkage_baseline(x, IDS8)
    np.testing.assert_allclose(out.shrinkage, 0.0, atol=1e-30)
    np.testing.assert_allclose(out.baseline, [1e30, 1e30, 0.5, 0.5, 0, 0, 0.5, 0.5], rtol=1e-5)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

"""Tests of the turn-space tools: best_prior, future_best, discount_weights, discounted_returns,
broadcast_to_tokens, turn_surprisal (SPEC §3).

Ground truth: the NumPy loops of ``tests/reference/groups.py``, hand-worked goldens, hypothesis
properties. Every function must treat masked turns as absent whatever they hold (NaN, inf), also
for masks that are not prefixes (validate_turns rejects those, the math must not care).

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

import credax
from tests.probes import NAN, Probes, nan_exactly
from tests.reference import groups as ref

GARBAGE = (math.nan, math.inf, -math.inf, 1e30)
B, K, T = 4, 5, 12  # the property tests' shapes (one compiled program per function)


def assert_close(actual, expected, rtol=1e-5, atol=1e-6, err_msg=""):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol, atol=atol,
                               err_msg=err_msg)


# --------------------------------------------------------------------------------------------
# Golden cases
# --------------------------------------------------------------------------------------------


def test_best_prior_golden():
    # m_0 = initial = 0; m_1 = max(0, 0) = 0; m_2 = max(0, 0, .5) = .5; turn 3 padded -> 0.
    s = jnp.array([[0.0, 0.5, 1.0, 0.5]])
    mask = jnp.array([[True, True, True, False]])
    np.testing.assert_array_equal(credax.best_prior(s, mask), [[0.0, 0.0, 0.5, 0.0]])
    # initial .7 dominates every earlier score here: [.7, .7, .7, 0].
    np.testing.assert_allclose(credax.best_prior(s, mask, initial=0.7), [[0.7, 0.7, 0.7, 0.0]])
    # A masked NaN in the middle (not a prefix mask) is absent: m = [0, 0(pad), .2, .9].
    s = jnp.array([[0.2, jnp.nan, 0.9, 0.1]])
    mask = jnp.array([[True, False, True, True]])
    np.testing.assert_allclose(credax.best_prior(s, mask), [[0.0, 0.0, 0.2, 0.9]])
    # initial below every score: m_0 = -1, then the running max.
    np.testing.assert_allclose(credax.best_prior(jnp.array([[0.3, 0.1, 0.4]]), jnp.ones((1, 3), bool),
                                                 initial=-1.0), [[-1.0, 0.3, 0.3]])


def test_future_best_golden():
    # u_k = max_{t >= k}: [max(0, .5, .2), max(.5, .2), .2] = [.5, .5, .2]
    np.testing.assert_allclose(
        credax.future_best(jnp.array([[0.0, 0.5, 0.2]]), jnp.ones((1, 3), bool)), [[0.5, 0.5, 0.2]])
    # masked inf at turn 2 is absent: [max(.1, .3), .3, 0(pad), 0(pad)]
    np.testing.assert_allclose(
        credax.future_best(jnp.array([[0.1, 0.3, jnp.inf, -jnp.inf]]),
                           jnp.array([[True, True, False, False]])), [[0.3, 0.3, 0.0, 0.0]])


def test_discounts_golden():
    np.testing.assert_allclose(credax.discount_weights(4, 0.5), [1.0, 0.5, 0.25, 0.125])
    np.testing.assert_array_equal(credax.discount_weights(3, 0.0), [1.0, 0.0, 0.0])  # 0^0 = 1
    np.testing.assert_array_equal(credax.discount_weights(3, 1.0), [1.0, 1.0, 1.0])
    assert credax.discount_weights(0, 0.9).shape == (0,)
    assert credax.discount_weights(4, 0.5).dtype == jnp.float32
    # G_2 = 1; G_1 = 1 + .5 × 1 = 1.5; G_0 = 0 + .5 × 1.5 = .75
    mask = jnp.ones((1, 3), bool)
    np.testing.assert_allclose(credax.discounted_returns(jnp.array([[0.0, 1.0, 1.0]]), mask,
                                                         gamma=0.5), [[0.75, 1.5, 1.0]])
    # masked NaN in the middle: G_2 = 2, G_1 = 0 (pad), G_0 = 1 + .5² × 2 = 1.5
    r = jnp.array([[1.0, jnp.nan, 2.0]])
    np.testing.assert_allclose(
        credax.discounted_returns(r, jnp.array([[True, False, True]]), gamma=0.5),
        [[1.5, 0.0, 2.0]])
    # γ = 0 returns the rewards; γ = 1 the plain reward-to-go.
    r = jnp.array([[0.35, 1 / 3, 0.95]])
    np.testing.assert_array_equal(credax.discounted_returns(r, mask, gamma=0.0), r)
    np.testing.assert_allclose(credax.discounted_returns(r, mask, gamma=1.0),
                               [[0.35 + 1 / 3 + 0.95, 1 / 3 + 0.95, 0.95]], rtol=1e-6)


def test_broadcast_and_surprisal_golden():
    out = credax.broadcast_to_tokens(jnp.array([[0.5, -1.0]]), jnp.array([[-1, 0, 0, -1, 1, -1]]))
    np.testing.assert_array_equal(out, [[0.0, 0.5, 0.5, 0.0, -1.0, 0.0]])
    # turn 0: tokens p = .5, .25 -> mean(ln 2, ln 4) = 1.5 ln 2 = 1.03972; sum 3 ln 2 = 2.07944
    # turn 1: p = .5 -> ln 2; turn 2: no token -> 0; the -1 token (p = 1, or NaN) is ignored.
    tt = jnp.array([[0, 0, -1, 1]])
    for ignored in (0.0, jnp.nan):
        lp = jnp.array([[math.log(0.5), math.log(0.25), ignored, math.log(0.5)]])
        np.testing.assert_allclose(credax.turn_surprisal(lp, tt, num_turns=3),
                                   [[1.5 * math.log(2), math.log(2), 0.0]], rtol=1e-6)
        np.testing.assert_allclose(credax.turn_surprisal(lp, tt, num_turns=3, reduce="sum"),
                                   [[3 * math.log(2), math.log(2), 0.0]], rtol=1e-6)


# --------------------------------------------------------------------------------------------
# Strategy, one compiled program, reference comparison
# --------------------------------------------------------------------------------------------


@st.composite
def turn_cases(draw, b=B, k=K, t=T):
    score = st.one_of(st.sampled_from((0.0, 0.35, 1 / 3, 0.95, 1.0)),
                      st.integers(0, 20).map(lambda v: v / 20))
    s = np.array(draw(st.lists(score, min_size=b * k, max_size=b * k))).reshape(b, k)
    if draw(st.booleans()):  # prefix masks (validated data), lengths 0..K (0 = all-masked row)
        lengths = draw(st.lists(st.integers(0, k), min_size=b, max_size=b))
        mask = np.arange(k)[None, :] < np.array(lengths)[:, None]
    else:  # any mask: the math must treat masked turns as absent anyway
        mask = np.array(draw(st.lists(st.booleans(), min_size=b * k, max_size=b * k)))
        mask = mask.reshape(b, k)
    garbage = draw(st.sampled_from(GARBAGE))
    s = np.where(mask, s, garbage).astype(np.float32)
    # token_turn points at valid turns or is -1; log-probs garbage at -1 tokens.
    tt = np.full((b, t), -1, np.int32)
    for row in range(b):
        valid = np.flatnonzero(mask[row])
        if valid.size:
            picks = draw(st.lists(st.integers(-1, valid.size - 1), min_size=t, max_size=t))
            tt[row] = [-1 if p < 0 else valid[p] for p in picks]
    lp = -np.array(draw(st.lists(st.integers(0, 40).map(lambda v: v / 8), min_size=b * t,
                                 max_size=b * t))).reshape(b, t)
    lp = np.where(tt >= 0, lp, garbage).astype(np.float32)
    initial = draw(st.sampled_from((0.0, 0.5, -1.0)))
    gamma = draw(st.sampled_from((0.0, 0.5, 0.95, 1.0)))
    return s, mask, lp, tt, initial, gamma


NAMES = ["best_prior", "future_best", "discounted_returns", "broadcast_to_tokens",
         "turn_surprisal", "turn_surprisal_sum"]


def _all_fns(s, mask, lp, tt, initial, gamma):
    k = s.shape[1]
    # broadcast a padded-zero version: turn values are outputs of credax functions, 0 at padding
    values = jnp.where(mask, s, 0.0)
    return [
        lambda: credax.best_prior(s, mask, initial=initial),
        lambda: credax.future_best(s, mask),
        lambda: credax.discounted_returns(s, mask, gamma=gamma),
        lambda: credax.broadcast_to_tokens(values, tt),
        lambda: credax.turn_surprisal(lp, tt, num_turns=k),
        lambda: credax.turn_surprisal(lp, tt, num_turns=k, reduce="sum"),
    ]


@jax.jit
def _turn_all(s, mask, lp, tt, initial, gamma):
    return [f() for f in _all_fns(s, mask, lp, tt, initial, gamma)]


def turn_outputs(case):
    return [np.asarray(o, np.float64) for o in _turn_all(*case)]


def turn_references(s, mask, lp, tt, initial, gamma):
    return [
        ref.best_prior(s, mask, initial=initial),
        ref.future_best(s, mask),
        ref.discounted_returns(s, mask, gamma=gamma),
        ref.broadcast_to_tokens(np.where(mask, s, 0.0), tt),
        ref.turn_surprisal(lp, tt, num_turns=s.shape[1]),
        ref.turn_surprisal(lp, tt, num_turns=s.shape[1], reduce="sum"),
    ]


@given(case=turn_cases())
def test_match_reference(case):
    for name, got, exp in zip(NAMES, turn_outputs(case), turn_references(*case), strict=True):
        assert_close(got, exp, err_msg=name)
    mask = case[1]
    for got in turn_outputs(case)[:3]:
        assert np.all(got[~mask] == 0.0)


def test_match_reference_larger_and_public_wrappers():
    rng = np.random.default_rng(0)
    b, k, t = 6, 9, 40
    for trial in range(3):
        lengths = rng.integers(0 if trial else 1, k + 1, size=b)
        mask = np.arange(k)[None, :] < lengths[:, None]
        if trial == 2:
            mask = rng.random((b, k)) < 0.6
        s = np.where(mask, rng.random((b, k)), np.nan).astype(np.float32)
        tt = np.full((b, t), -1, np.int32)
        for row in range(b):
            valid = np.flatnonzero(mask[row])
            if valid.size:
                tt[row] = np.where(rng.random(t) < 0.7, rng.choice(valid, size=t), -1)
        lp = np.where(tt >= 0, -rng.exponential(size=(b, t)), np.nan).astype(np.float32)
        case = (s, mask, lp, tt, float(rng.random()), float(rng.choice([0.9, 0.99])))
        for name, got, exp in zip(NAMES, [f() for f in _all_fns(*case)], turn_references(*case),
                                  strict=True):
            assert_close(got, exp, err_msg=name)
    for gamma in (0.0, 0.5, 0.95, 1.0):
        assert_close(credax.discount_weights(7, gamma), ref.discount_weights(7, gamma))


@pytest.mark.parametrize("k", [1, 2, 7, 16, 17, 32, 33])
def test_turn_maxima_in_one_pass(k):
    # TCPO takes the best prior and the future best from one reduction (masked_turn_maxima) up to
    # 16 turns, from the two running maxima (doubling passes) beyond. Values: the NumPy loops of
    # the reference, at valid turns, exactly (a maximum is exact). Gradients, with distinct scores
    # (no ties): each output's derivative is 1 at its window's argmax, so d sum(w * m) / ds[b, t]
    # is the sum of the weights of the turns whose best prior is s[b, t] (0 where `initial` wins),
    # computed here by a loop over windows.
    from credax._turns import masked_turn_maxima

    rng = np.random.default_rng(k)
    b = 5
    mask = rng.random((b, k)) < 0.7
    s = np.where(mask, rng.permutation(b * k).reshape(b, k) / (b * k), np.nan).astype(np.float32)
    initial = np.float32(0.3)
    w = rng.standard_normal((b, k)).astype(np.float32)

    def both(v):
        m, u = masked_turn_maxima(v, jnp.asarray(mask), jnp.float32(initial))
        return jnp.where(mask, m, 0.0), jnp.where(mask, u, 0.0)

    m, u = jax.jit(both)(jnp.asarray(s))
    np.testing.assert_array_equal(np.asarray(m, np.float64), ref.best_prior(s, mask, initial=initial))
    np.testing.assert_array_equal(np.asarray(u, np.float64), ref.future_best(s, mask))
    grad_m, grad_u = (jax.jit(jax.grad(lambda v, i=i: jnp.sum(w * both(v)[i])))(jnp.asarray(s))
                      for i in (0, 1))
    want_m, want_u = np.zeros((b, k)), np.zeros((b, k))
    for row in range(b):
        for col in np.flatnonzero(mask[row]):
            prior = [t for t in range(col) if mask[row, t]]
            if prior and s[row, prior].max() > initial:
                want_m[row, prior[int(np.argmax(s[row, prior]))]] += w[row, col]
            after = [t for t in range(col, k) if mask[row, t]]
            want_u[row, after[int(np.argmax(s[row, after]))]] += w[row, col]
    np.testing.assert_allclose(np.asarray(grad_m), want_m, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grad_u), want_u, rtol=1e-6, atol=1e-6)


def test_long_horizon_returns_are_stable():
    # K = 1000, γ = .999: a reverse scan, no γ^{-k}; compared with the float64 loop.
    rng = np.random.default_rng(1)
    r = rng.random((1, 1000)).astype(np.float32)
    mask = np.ones((1, 1000), bool)
    mask[0, 900:] = False
    for gamma in (0.999, 0.5):
        got = credax.discounted_returns(r, mask, gamma=gamma)
        assert np.all(np.isfinite(got))
        assert_close(got, ref.discounted_returns(r, mask, gamma=gamma), rtol=1e-4, atol=1e-5)
    w = credax.discount_weights(5000, 0.9)
    assert np.all(np.isfinite(w)) and float(w[-1]) == 0.0  # underflows to 0, never NaN


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@given(case=turn_cases(), garbage=st.sampled_from(GARBAGE))
def test_padding_invariance_turns_tokens_and_rows(case, garbage):
    s, mask, lp, tt, initial, gamma = case
    base = turn_outputs(case)
    # two masked turns and three ignored tokens appended to every row, holding garbage
    sp = np.concatenate([s, np.full((B, 2), garbage, np.float32)], axis=1)
    mp = np.concatenate([mask, np.zeros((B, 2), bool)], axis=1)
    lpp = np.concatenate([lp, np.full((B, 3), garbage, np.float32)], axis=1)
    ttp = np.concatenate([tt, np.full((B, 3), -1, np.int32)], axis=1)
    padded = turn_outputs((sp, mp, lpp, ttp, initial, gamma))
    for name, a, p in zip(NAMES, base, padded, strict=True):
        if name == "broadcast_to_tokens":
            assert_close(p[:, :T], a, err_msg=name)
            assert np.all(p[:, T:] == 0.0)
        else:
            np.testing.assert_array_equal(p[:, :K], a, err_msg=name)
            assert np.all(p[:, K:] == 0.0), name
    # an appended all-masked row
    sr = np.concatenate([s, np.full((1, K), garbage, np.float32)])
    mr = np.concatenate([mask, np.zeros((1, K), bool)])
    lpr = np.concatenate([lp, np.full((1, T), garbage, np.float32)])
    ttr = np.concatenate([tt, np.full((1, T), -1, np.int32)])
    rows = turn_outputs((sr, mr, lpr, ttr, initial, gamma))
    for name, a, p in zip(NAMES, base, rows, strict=True):
        np.testing.assert_array_equal(p[:B], a, err_msg=name)
        assert np.all(p[B:] == 0.0), name


@given(case=turn_cases(), seed=st.integers(0, 999))
def test_row_permutation_equivariance(case, seed):
    s, mask, lp, tt, initial, gamma = case
    perm = np.random.default_rng(seed).permutation(B)
    base = turn_outputs(case)
    moved = turn_outputs((s[perm], mask[perm], lp[perm], tt[perm], initial, gamma))
    for name, a, b in zip(NAMES, base, moved, strict=True):
        np.testing.assert_array_equal(b, a[perm], err_msg=name)


@jax.jit
def _turn_grads(s, mask, lp, tt, initial, gamma):
    w = jnp.linspace(-1.0, 2.0, s.size, dtype=jnp.float32).reshape(s.shape)
    wt = jnp.linspace(-1.0, 2.0, lp.size, dtype=jnp.float32).reshape(lp.shape)
    k = s.shape[1]
    return [
        jax.grad(lambda v: jnp.sum(w * credax.best_prior(v, mask, initial=initial)))(s),
        jax.grad(lambda v: jnp.sum(w * credax.future_best(v, mask)))(s),
        jax.grad(lambda v: jnp.sum(w * credax.discounted_returns(v, mask, gamma=gamma)))(s),
        jax.grad(lambda g: jnp.sum(credax.discounted_returns(s, mask, gamma=g)))(gamma),
        jax.grad(lambda v: jnp.sum(wt * credax.broadcast_to_tokens(v, tt)))(s),
        jax.grad(lambda v: jnp.sum(w * credax.turn_surprisal(v, tt, num_turns=k)))(lp),
        jax.grad(lambda v: jnp.sum(w * credax.turn_surprisal(v, tt, num_turns=k,
                                                             reduce="sum")))(lp),
    ]


@given(case=turn_cases(), garbage=st.sampled_from(GARBAGE))
def test_masked_values_change_neither_outputs_nor_gradients(case, garbage):
    s, mask, lp, tt, initial, gamma = case
    s2 = np.where(mask, s, garbage).astype(np.float32)
    lp2 = np.where(tt >= 0, lp, garbage).astype(np.float32)
    other = (s2, mask, lp2, tt, initial, gamma)
    for name, a, b in zip(NAMES, turn_outputs(case), turn_outputs(other), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    g1 = _turn_grads(s, mask, lp, tt, jnp.float32(initial), jnp.float32(gamma))
    g2 = _turn_grads(s2, mask, lp2, tt, jnp.float32(initial), jnp.float32(gamma))
    for i, (a, b) in enumerate(zip(g1, g2, strict=True)):
        np.testing.assert_array_equal(a, b)
        assert np.all(np.isfinite(a)), i
    for a in g1[:3]:
        assert np.all(np.asarray(a)[~mask] == 0.0)
    for a in g1[5:]:
        assert np.all(np.asarray(a)[tt < 0] == 0.0)


@given(case=turn_cases(), which=st.integers(0, len(NAMES) - 1))
def test_jit_equals_eager(case, which):
    jitted = turn_outputs(case)[which]
    with jax.disable_jit():
        eager = np.asarray(_all_fns(*case)[which](), np.float64)
    np.testing.assert_allclose(jitted, eager, rtol=1e-6, atol=1e-7)


@jax.jit
def _vmapped(s, mask, lp, tt, initial, gamma):
    # an extra leading axis over whole batches; γ and initial batched too
    return [
        jax.vmap(lambda a, m, i: credax.best_prior(a, m, initial=i))(s, mask, initial),
        jax.vmap(credax.future_best)(s, mask),
        jax.vmap(lambda a, m, g: credax.discounted_returns(a, m, gamma=g))(s, mask, gamma),
        jax.vmap(credax.broadcast_to_tokens)(jnp.where(mask, s, 0.0), tt),
        jax.vmap(lambda a, b: credax.turn_surprisal(a, b, num_turns=K))(lp, tt),
        jax.vmap(lambda a, b: credax.turn_surprisal(a, b, num_turns=K, reduce="sum"))(lp, tt),
        jax.vmap(lambda g: credax.discount_weights(K, g))(gamma),
    ]


@given(cases=st.lists(turn_cases(), min_size=3, max_size=3))
def test_vmap_over_extra_axis_equals_loop(cases):
    stacked = [np.stack(a) for a in zip(*cases, strict=True)]
    stacked[4] = stacked[4].astype(np.float32)
    stacked[5] = stacked[5].astype(np.float32)
    outs = _vmapped(*stacked)
    for i, case in enumerate(cases):
        loop = turn_outputs(case) + [np.asarray(credax.discount_weights(K, case[5]))]
        for name, a, b in zip(NAMES + ["discount_weights"], outs, loop, strict=True):
            np.testing.assert_allclose(np.asarray(a[i], np.float64), b, rtol=1e-6, atol=1e-7,
                                       err_msg=name)


# --------------------------------------------------------------------------------------------
# dtypes and argument checks
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_inputs(dtype):
    rng = np.random.default_rng(3)
    s = jnp.asarray(rng.random((3, 4)), dtype)
    mask = jnp.asarray(np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], bool))
    tt = jnp.array([[0, 1, -1, 3], [1, 1, 0, -1], [0, -1, -1, 0]], jnp.int32)
    outs = {
        "best_prior": credax.best_prior(s, mask, initial=0.25),
        "future_best": credax.future_best(s, mask),
        "discounted_returns": credax.discounted_returns(s, mask, gamma=0.9),
        "broadcast_to_tokens": credax.broadcast_to_tokens(s, tt),
        "turn_surprisal": credax.turn_surprisal(-s, tt, num_turns=4),
    }
    ups = {
        "best_prior": credax.best_prior(s.astype(jnp.float32), mask, initial=0.25),
        "future_best": credax.future_best(s.astype(jnp.float32), mask),
        "discounted_returns": credax.discounted_returns(s.astype(jnp.float32), mask, gamma=0.9),
        "broadcast_to_tokens": credax.broadcast_to_tokens(s.astype(jnp.float32), tt),
        "turn_surprisal": credax.turn_surprisal(-s.astype(jnp.float32), tt, num_turns=4),
    }
    for name, out in outs.items():
        assert out.dtype == dtype, name
        # computed in float32, then cast back
        np.testing.assert_array_equal(np.asarray(out, np.float32),
                                      np.asarray(ups[name].astype(dtype), np.float32), name)


def test_integer_inputs_and_float64():
    mask = np.ones((1, 3), bool)
    assert credax.best_prior(np.array([[0, 1, 0]]), mask).dtype == jnp.float32
    assert credax.discounted_returns(np.array([[0, 1, 1]]), mask, gamma=0.5).dtype == jnp.float32
    with jax.enable_x64(True):
        r = np.array([[0.1, 1 / 3, 0.35]])
        out = credax.discounted_returns(r, mask, gamma=0.95)
        assert out.dtype == jnp.float64
        np.testing.assert_allclose(out, ref.discounted_returns(r, mask, gamma=0.95), rtol=1e-14)
        assert credax.best_prior(r, mask).dtype == jnp.float64
        assert credax.future_best(r, mask).dtype == jnp.float64
        assert credax.broadcast_to_tokens(r, np.array([[0, -1, 2]])).dtype == jnp.float64
        lp = np.log(np.array([[0.5, 0.25, 0.125]]))
        out = credax.turn_surprisal(lp, np.array([[0, 0, 1]]), num_turns=2)
        assert out.dtype == jnp.float64
        np.testing.assert_allclose(out, [[1.5 * math.log(2), 3 * math.log(2)]], rtol=1e-14)
        assert credax.discount_weights(3, np.float64(0.9)).dtype == jnp.float64


S2 = np.zeros((2, 3), np.float32)
M2 = np.ones((2, 3), bool)
TT = np.zeros((2, 4), np.int32)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: credax.best_prior(np.zeros(3), np.ones(3, bool)), ValueError, "scores"),
        (lambda: credax.best_prior(S2, np.ones((2, 3))), TypeError, "turn_mask"),
        (lambda: credax.future_best(S2, np.ones((2, 4), bool)), ValueError, "turn_mask"),
        (lambda: credax.future_best(np.full((2, 3), 1j), M2), TypeError, "scores"),
        (lambda: credax.discounted_returns(np.zeros((2, 3, 1)), M2, gamma=0.9), ValueError,
         "rewards"),
        (lambda: credax.discounted_returns(S2, M2, gamma=np.ones(2)), ValueError, "gamma"),
        (lambda: credax.best_prior(S2, M2, initial=np.ones(2)), ValueError, "initial"),
        (lambda: credax.broadcast_to_tokens(S2, TT.astype(np.float32)), TypeError, "token_turn"),
        (lambda: credax.broadcast_to_tokens(S2, np.zeros((3, 4), np.int32)), ValueError,
         "token_turn"),
        (lambda: credax.broadcast_to_tokens(np.zeros(3), TT), ValueError, "turn_values"),
        (lambda: credax.turn_surprisal(np.zeros((2, 5)), TT, num_turns=3), ValueError,
         "token_turn"),
        (lambda: credax.turn_surprisal(np.zeros((2, 4)), TT, num_turns=3, reduce="max"),
         ValueError, "reduce"),
        (lambda: credax.turn_surprisal(np.zeros((2, 4)), TT, num_turns=0), ValueError,
         "num_turns"),
        (lambda: credax.turn_surprisal(np.zeros((2, 4)), TT, num_turns=2.0), TypeError,
         "num_turns"),
        (lambda: credax.turn_surprisal(np.zeros(4), TT, num_turns=2), ValueError,
         "token_logprobs"),
        (lambda: credax.discount_weights(3.0, 0.9), TypeError, "num_turns"),
        (lambda: credax.discount_weights(-1, 0.9), ValueError, "num_turns"),
        (lambda: credax.discount_weights(3, np.ones(2)), ValueError, "gamma"),
    ],
)
def test_argument_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_argument_errors_under_jit():
    with pytest.raises(TypeError, match="turn_mask"):
        jax.jit(lambda s, m: credax.best_prior(s, m))(S2, np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="scores"):
        jax.jit(lambda s: credax.future_best(s, np.ones(3, bool)))(np.zeros(3, np.float32))


@pytest.mark.parametrize("turns", [1, 2, 3, 5, 8, 16, 33])
@pytest.mark.parametrize("reverse", [False, True])
def test_running_max_doubling_equals_sequential(turns, reverse):
    # credax._turns.running_max (a private helper: this file is its module's unit test)
    from credax._turns import running_max

    rng = np.random.default_rng(turns)
    x = rng.integers(-3, 4, size=(6, turns)).astype(np.float32)
    x[rng.random(x.shape) < 0.3] = -np.inf
    ref = np.maximum.accumulate(x[:, ::-1] if reverse else x, axis=1)
    ref = ref[:, ::-1] if reverse else ref
    np.testing.assert_array_equal(running_max(jnp.asarray(x), reverse=reverse), ref)
    xi = rng.integers(-5, 5, size=(4, turns)).astype(np.int32)
    refi = np.maximum.accumulate(xi[:, ::-1] if reverse else xi, axis=1)
    refi = refi[:, ::-1] if reverse else refi
    np.testing.assert_array_equal(running_max(jnp.asarray(xi), reverse=reverse), refi)


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("nonfinite", "turn_scans")
def _():
    s = np.array([[0.0, NAN, 1.0, 0.5]], np.float32)
    m = np.ones((1, 4), bool)
    nan_exactly(credax.best_prior(s, m), [[False, False, True, True]])  # max over t < k
    nan_exactly(credax.future_best(s, m), [[True, True, False, False]])  # max over t >= k
    nan_exactly(credax.discounted_returns(s, m, gamma=0.5), [[True, True, False, False]])


@probe("nonfinite", "broadcast_and_surprisal")
def _():
    out = credax.broadcast_to_tokens(np.array([[NAN, 2.0]], np.float32), np.array([[0, -1, 1, 0]]))
    nan_exactly(out, [[True, False, False, True]])
    lp = np.array([[-1.0, NAN, -2.0, NAN]], np.float32)
    sur = credax.turn_surprisal(lp, np.array([[0, 1, 1, -1]]), num_turns=3)
    nan_exactly(sur, [[False, True, False]])  # the NaN at a token of no turn is ignored
    assert float(sur[0, 0]) == 1.0


NARROW = ("int8", "int16", "uint8", "uint16")


for _dt in NARROW:

    def _p(dt=_dt):
        # A narrow turn map whose flat segment b·K + k exceeds the dtype (int8: 1·128 + 127).
        turn = min(int(np.iinfo(dt).max), 299)
        tt = np.array([[turn], [turn]], dt)
        sur = credax.turn_surprisal(np.array([[-2.0], [-3.0]], np.float32), tt, num_turns=turn + 1)
        assert sur[:, turn].tolist() == [2.0, 3.0] and float(jnp.sum(sur)) == 5.0
        vals = np.zeros((2, turn + 1), np.float32)
        vals[:, turn] = 3.0
        assert credax.broadcast_to_tokens(vals, tt).tolist() == [[3.0], [3.0]]

    probe("narrow", f"token_turn_{_dt}")(_p)



@probe("ids", "int64_within_int32_is_fine")
def _():
    # int64 values that fit pass unchanged: turn 1's value on token 2.
    out = credax.broadcast_to_tokens(np.array([[3.0, 4.0]], np.float32), np.array([[0, -1, 1]]))
    np.testing.assert_array_equal(out, [[3.0, 0.0, 4.0]])


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()


# --------------------------------------------------------------------------------------------
# broadcast_to_turns, token_turn_from_layout, credit (issue 47: what a user's own loop needs)
# --------------------------------------------------------------------------------------------


def test_broadcast_to_turns_golden():
    # Row 0 has 2 real turns, row 1 one, row 2 none (its NaN value is padding): by hand.
    values = jnp.array([0.5, -1.0, jnp.nan])
    mask = jnp.array([[True, True, False], [True, False, False], [False, False, False]])
    out = credax.broadcast_to_turns(values, mask)
    np.testing.assert_array_equal(np.asarray(out), [[0.5, 0.5, 0.0], [-1.0, 0.0, 0.0],
                                                    [0.0, 0.0, 0.0]])
    assert out.dtype == jnp.float32
    # Integer input becomes float32; the shapes are checked by name.
    assert credax.broadcast_to_turns(jnp.array([2]), jnp.array([[True]])).dtype == jnp.float32
    with pytest.raises(ValueError, match="turn_mask"):
        credax.broadcast_to_turns(jnp.zeros(2), jnp.ones((3, 2), bool))
    with pytest.raises(ValueError, match="values"):
        credax.broadcast_to_turns(jnp.zeros((2, 1)), jnp.ones((2, 2), bool))


def _layout_loop(prompt, action, env, num_tokens):
    """The layout written out token by token (an independent Python reference)."""
    out = np.full((len(action), num_tokens), -1, np.int32)
    for b in range(len(action)):
        tags = [-1] * int(np.broadcast_to(prompt, (len(action),))[b])
        for k in range(len(action[b])):
            tags += [k] * int(action[b][k]) + [-1] * int(env[b][k])
        tags = (tags + [-1] * num_tokens)[:num_tokens]
        out[b] = tags
    return out


def test_token_turn_from_layout_golden():
    # Row 0: 2 prompt tokens, turn 0 = 2 action + 1 env, turn 1 = 1 action + 2 env, then pad:
    #   positions 0 1 | 2 3 | 4 | 5 | 6 7 | 8 9  ->  -1 -1 0 0 -1 1 -1 -1 -1 -1
    # Row 1: 1 prompt token, turn 0 has no action (a padded turn) but 2 env tokens, turn 1 = 3
    #   action tokens cut at T = 10 after 4 + 3 = 7 tokens: -1 | -1 -1 | 1 1 1 | -1 x4
    prompt = jnp.array([2, 1])
    action = jnp.array([[2, 1], [0, 3]])
    env = jnp.array([[1, 2], [2, 0]])
    out = credax.token_turn_from_layout(prompt, action, env, num_tokens=10)
    want = [[-1, -1, 0, 0, -1, 1, -1, -1, -1, -1], [-1, -1, -1, 1, 1, 1, -1, -1, -1, -1]]
    np.testing.assert_array_equal(np.asarray(out), want)
    assert out.dtype == jnp.int32
    # Truncation: T = 4 cuts row 0 inside turn 0's action.
    np.testing.assert_array_equal(
        np.asarray(credax.token_turn_from_layout(prompt, action, env, num_tokens=4)),
        [[-1, -1, 0, 0], [-1, -1, -1, 1]])
    # A scalar prompt length serves every row.
    np.testing.assert_array_equal(
        np.asarray(credax.token_turn_from_layout(2, action[:1], env[:1], num_tokens=10)), want[:1])


def test_token_turn_from_layout_matches_the_loop_and_runs_in_the_graph():
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 4, size=6)
    action = rng.integers(0, 4, size=(6, 3))
    env = rng.integers(0, 3, size=(6, 3))
    for num_tokens in (0, 5, 30):
        got = credax.token_turn_from_layout(prompt, action, env, num_tokens=num_tokens)
        np.testing.assert_array_equal(np.asarray(got), _layout_loop(prompt, action, env, num_tokens))
    # Inside jit and vmap on traced lengths (one row per vmapped instance): the same map.
    f = jax.jit(jax.vmap(lambda p, a, e: credax.token_turn_from_layout(
        p[None], a[None], e[None], num_tokens=30)[0]))
    np.testing.assert_array_equal(np.asarray(f(prompt, action, env)),
                                  _layout_loop(prompt, action, env, 30))
    # The map broadcast_to_tokens reads: each action token gets its turn's value.
    tt = credax.token_turn_from_layout(prompt, action, env, num_tokens=30)
    vals = jnp.arange(18, dtype=jnp.float32).reshape(6, 3) + 1
    tok = np.asarray(credax.broadcast_to_tokens(vals, tt))
    assert np.array_equal(tok != 0, np.asarray(tt) >= 0)


def test_token_turn_from_layout_refuses_bad_layouts_by_name():
    a = np.array([[1, 2]])
    with pytest.raises(ValueError, match="`env_lengths` must be >= 0"):
        credax.token_turn_from_layout(np.array([1]), a, np.array([[0, -1]]), num_tokens=5)
    with pytest.raises(ValueError, match="prompt_lengths"):
        credax.token_turn_from_layout(np.array([1, 2]), a, a, num_tokens=5)
    with pytest.raises(ValueError, match="env_lengths"):
        credax.token_turn_from_layout(np.array([1]), a, np.array([[1, 2, 3]]), num_tokens=5)
    with pytest.raises(TypeError, match="action_lengths"):
        credax.token_turn_from_layout(np.array([1]), a.astype(np.float32), a, num_tokens=5)
    with pytest.raises((TypeError, ValueError), match="num_tokens"):
        credax.token_turn_from_layout(np.array([1]), a, a, num_tokens=-1)


def _credit_batch(**fields):
    base = dict(
        scores=np.array([[0.2, 1.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.5, 1.0]], np.float32),
        turn_mask=np.array([[True, True, False], [True, False, False], [True, True, True]]),
        group_ids=np.array([7, 7, 7]), rewards=np.array([1.0, 0.0, 0.5], np.float32),
        roles=np.array([[0, 0, -1], [2, -1, -1], [1, 2, 0]]),
        token_turn=np.array([[0, 1, -1], [0, -1, -1], [0, 1, 2]]))
    return credax.TurnBatch(**{**base, **fields})


def test_credit_broadcasts_row_methods_to_turns():
    # RLOO by hand: each rollout's reward minus the mean of the other two:
    #   1 - (0 + 0.5)/2 = 0.75, 0 - (1 + 0.5)/2 = -0.75, 0.5 - (1 + 0)/2 = 0
    out = credax.credit(_credit_batch(), "rloo")
    np.testing.assert_allclose(np.asarray(out), [[0.75, 0.75, 0], [-0.75, 0, 0], [0, 0, 0]],
                               atol=1e-7)
    # Dr. GRPO (no std): reward minus the group mean 0.5 -> 0.5, -0.5, 0 on the real turns.
    dr = credax.credit(_credit_batch(), "grpo", normalization=credax.Normalization(scale="none"))
    np.testing.assert_allclose(np.asarray(dr), [[0.5, 0.5, 0], [-0.5, 0, 0], [0, 0, 0]], atol=1e-7)
    # The full name is the same method.
    np.testing.assert_array_equal(np.asarray(credax.credit(_credit_batch(), "rloo_advantages")),
                                  np.asarray(out))


def test_credit_turn_methods_and_options():
    b = _credit_batch(turn_rewards=np.array([[0.2, 0.8, 0], [0.5, 0, 0], [0, 0.5, 0.5]], np.float32))
    # Role credit with lam = 0.5 on top of GRPO: row 0 is decisive twice (+1 each),
    #   0.5 + 0.5 * 1 = 1.0 on both turns; row 1 no-progress (-0.1): -0.5 - 0.05 = -0.55;
    #   row 2 exploration, no-progress, decisive: 0 + 0.5 * (0.5, -0.1, 1).
    grpo = np.asarray(credax.credit(b, "grpo"))
    tri = np.asarray(credax.credit(b, "triage", lam=0.5))
    role = np.array([[1.0, 1.0, 0], [-0.1, 0, 0], [0.5, -0.1, 1.0]])
    np.testing.assert_allclose(tri, grpo + 0.5 * role, atol=1e-6)
    # Every accepted method gives [B, K] with exact zeros at masked turns, under jit too.
    for method in ("tcpo", "mt_grpo", "unbiased_turn", "gpg", "shrinkage_advantages",
                   "retrospective_credit", "hindsight_credit", "role_credit", "redistribute"):
        out = jax.jit(lambda x, m=method: credax.credit(x, m))(b)
        assert out.shape == (3, 3), method
        assert np.all(np.asarray(out)[~b.turn_mask] == 0), method


def test_credit_refuses_by_name():
    b = _credit_batch()
    with pytest.raises(ValueError, match="unknown credit method 'gdpo'.*grpo"):
        credax.credit(b, "gdpo")  # its registry call has stand-ins: not offered
    with pytest.raises(ValueError, match=r"needs TurnBatch\.turn_rewards"):
        credax.credit(b, "mt_grpo")
    with pytest.raises(TypeError, match="`batch` must be a credax.TurnBatch"):
        credax.credit(dict(b._asdict()), "grpo")
    with pytest.raises(TypeError, match="`method`"):
        credax.credit(b, credax.grpo_advantages)
    assert credax.credit_methods()["tcpo"] == "tcpo_advantages"

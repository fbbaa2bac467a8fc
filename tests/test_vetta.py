"""VETTA: turn GAE plus the within-response-centred token GAE residual.

Ground truth: the float64 loop of ``tests/reference/vetta.py``, a hand-worked golden, and the
property that makes the residual a residual: a turn's mean token advantage is its turn advantage.
The authors' code (Jiaju-Chen/VETTA-official) is not in the stores, so there is no parity test.
"""

import jax
import numpy as np
import pytest

import credax
from tests.reference import vetta as ref


def test_golden():
    # One row, two turns, tokens [-1, 0, 0, 0, -1, 1, 1]; γ = λ = 1 everywhere.
    # Turn head values at each turn's first token: V_0 = 0.5 (token 1), V_1 = 0.2 (token 5);
    # turn rewards (0, 1): δ_1 = 1 - .2 = .8, A_1 = .8; δ_0 = 0 + .2 - .5 = -.3, A_0 = -.3 + .8 = .5.
    # Token GAE of turn 0, rewards (0, 0, 1), V^tok (.1, .4, .6), V after the turn 0:
    #   A = (1 - .1, 1 - .4, 1 - .6) = (.9, .6, .4), mean 19/30 -> residual (.2667, -.0333, -.2333)
    # turn 1: rewards (0, 0), V^tok (.3, .3): δ = (0, -.3), A = (-.3, -.3) -> residual (0, 0).
    tt = np.array([[-1, 0, 0, 0, -1, 1, 1]])
    tv = np.array([[9.0, 0.5, 7.0, 7.0, 9.0, 0.2, 7.0]], np.float32)
    r_tok = np.array([[0, 0, 0, 1, 0, 0, 0]], np.float32)
    v_tok = np.array([[9.0, 0.1, 0.4, 0.6, 9.0, 0.3, 0.3]], np.float32)
    out = credax.vetta_advantages(np.array([[0.0, 1.0]], np.float32), tv, r_tok, v_tok, tt,
                                  np.array([[True, True]]))
    m = 19 / 30
    np.testing.assert_allclose(out.turn_advantages, [[0.5, 0.8]], atol=1e-6)
    np.testing.assert_allclose(out.token_residual,
                               [[0, 0.9 - m, 0.6 - m, 0.4 - m, 0, 0, 0]], atol=1e-6)
    np.testing.assert_allclose(out.advantages,
                               [[0, 0.5 + 0.9 - m, 0.5 + 0.6 - m, 0.5 + 0.4 - m, 0, 0.8, 0.8]],
                               atol=1e-6)


def random_case(rng, batch=4, turns=3, length=12):
    tt = rng.integers(-1, turns, size=(batch, length))
    tt = np.sort(np.where(tt < 0, turns + 5, tt), axis=1)  # turns in order, then padding
    tt = np.where(tt >= turns, -1, tt)
    mask = rng.random((batch, turns)) < 0.8
    f = lambda: rng.normal(size=(batch, length)).astype(np.float32)  # noqa: E731
    return rng.normal(size=(batch, turns)).astype(np.float32), f(), f(), f(), tt, mask


@pytest.mark.parametrize("seed", range(4))
def test_matches_reference(seed):
    rng = np.random.default_rng(seed)
    case = random_case(rng)
    kw = dict(gamma=float(rng.choice([1.0, 0.9])), lam=float(rng.choice([1.0, 0.8])),
              token_gamma=float(rng.choice([1.0, 0.95])), token_lam=float(rng.choice([1.0, 0.7])))
    tmask = rng.random(case[4].shape) < 0.9
    got = credax.vetta_advantages(*case, **kw, token_mask=tmask)
    want = ref.vetta(*case, **kw, token_mask=tmask)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)
    # the residual is centred: a turn's mean token advantage is its turn advantage
    adv, turn_adv = np.asarray(got.advantages), np.asarray(got.turn_advantages)
    tt, km = case[4], case[5]
    for b in range(tt.shape[0]):
        for k in range(km.shape[1]):
            js = (tt[b] == k) & tmask[b]
            if km[b, k] and js.any():
                np.testing.assert_allclose(adv[b, js].mean(), turn_adv[b, k], atol=1e-5)


def test_padding_never_matters_and_errors():
    rng = np.random.default_rng(9)
    tr, tv, r, v, tt, km = random_case(rng)
    base = credax.vetta_advantages(tr, tv, r, v, tt, km)
    off = tt < 0
    junk = credax.vetta_advantages(np.where(km, tr, np.nan), np.where(off, np.nan, tv),
                                   np.where(off, np.nan, r), np.where(off, np.nan, v), tt, km)
    np.testing.assert_array_equal(base.advantages, junk.advantages)
    assert np.isfinite(np.asarray(base.advantages)).all()
    g = jax.grad(lambda x: credax.vetta_advantages(tr, tv, x, v, tt, km).advantages.sum())(r)
    assert np.isfinite(np.asarray(g)).all()
    with pytest.raises(ValueError, match="`token_lam`"):
        credax.vetta_advantages(tr, tv, r, v, tt, km, token_lam=1.5)
    with pytest.raises(ValueError, match="`token_values`"):
        credax.vetta_advantages(tr, tv, r, v[:, :3], tt, km)
    with pytest.raises(TypeError, match="`token_turn`"):
        credax.vetta_advantages(tr, tv, r, v, tt.astype(float), km)

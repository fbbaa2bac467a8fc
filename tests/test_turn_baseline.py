"""The turn baseline of verl RFC #7244: unbiased when the policy decides how many turns to take.

Ground truth: the exact expected gradient of a two-turn MDP whose policy controls stopping,
enumerated over every joint outcome of a group in NumPy (``tests/reference/turn_baseline.py``),
against the closed forms worked below; the NumPy loop reference of the formula; hand-worked
degenerate cases.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from tests.reference import turn_baseline as ref

# The MDP (see tests/reference/turn_baseline.py): continue with p = σ(θ1) (reward C) or stop
# (reward S); after continuing, a good answer with q = σ(θ2) (reward 1) else 0.
P, Q, C, S = 0.6, 0.3, 0.5, 0.4
LOO_RAW = credax.Normalization(scale="none", eps=0.0, singleton="raw", leave_one_out=True)


def true_gradient():
    # J = (1-p)s + p(c + q): ∂J/∂θ1 = p(1-p)(c + q - s) = .24·.4 = .096; ∂J/∂θ2 = p·q(1-q) = .126
    return np.array([P * (1 - P) * (C + Q - S), P * Q * (1 - Q)])


@pytest.mark.parametrize("group_size", [2, 3, 4])
def test_unbiased_by_enumeration(group_size):
    rewards, mask, ids, score, prob = ref.enumerate_groups(group_size, P, Q, C, S)
    assert prob.sum() == pytest.approx(1.0)
    adv = credax.unbiased_turn_advantages(rewards, mask, ids)
    got = ref.expected_gradient(np.asarray(adv), score, prob, group_size)
    np.testing.assert_allclose(got, true_gradient(), rtol=0, atol=2e-7)


@pytest.mark.parametrize("group_size", [2, 3, 4])
def test_per_index_then_sum_has_the_rfc_bias(group_size):
    # The RFC's construction: centre each reward per turn index (leave-one-out over the rows that
    # reached that index, baseline 0 when no peer did), then credit turn t with the sum from t to
    # the row's own last turn. Turn 1 of a continuing row is charged b_2 = mean of the other
    # continuing rows' turn-2 rewards; E[b_2] = q·P(some peer continued) = q(1 - (1-p)^{G-1}).
    # So E[∂/∂θ1] = ∂J/∂θ1 - p(1-p)·q·(1 - (1-p)^{G-1}); θ2 (no later turn) is unbiased.
    # G = 2: .096 - .24·.3·.6 = .0528; G = 3: .096 - .24·.3·.84 = .03552.
    rewards, mask, ids, score, prob = ref.enumerate_groups(group_size, P, Q, C, S)
    z = credax.group_normalize(rewards, ids, mask, normalization=LOO_RAW)
    biased = credax.discounted_returns(z, mask, gamma=1.0)
    got = ref.expected_gradient(np.asarray(biased), score, prob, group_size)
    bias = -P * (1 - P) * Q * (1 - (1 - P) ** (group_size - 1))
    np.testing.assert_allclose(got, true_gradient() + [bias, 0.0], rtol=0, atol=2e-7)
    assert bias < -0.04  # not a rounding effect: 45-70 % of the true gradient here
    # The NumPy form of the same construction agrees (the credax composition is what we think).
    np.testing.assert_allclose(biased, ref.per_index_then_sum(rewards, mask, ids), atol=1e-6)


def test_mt_grpo_has_no_stopping_term():
    # MT-GRPO gives turn k  Â^O_i + λ Â^T_{i,k}: no later-turn baselines. With the outcome = the
    # total return and the same leave-one-out centring, E = ∇J + λ·(each turn's reward credited to
    # its own action only): θ1: λ p(1-p)(c - s) = .5·.24·.1 = .012; θ2: λ p q(1-q) = .5·.126.
    group_size, lam = 3, 0.5
    rewards, mask, ids, score, prob = ref.enumerate_groups(group_size, P, Q, C, S)
    outcome = np.where(mask, rewards, 0.0).sum(axis=1)
    adv = credax.mt_grpo_advantages(rewards, outcome, mask, ids, turn_coef=lam, normalization=LOO_RAW)
    got = ref.expected_gradient(np.asarray(adv), score, prob, group_size)
    shaping = lam * np.array([P * (1 - P) * (C - S), P * Q * (1 - Q)])
    np.testing.assert_allclose(got, true_gradient() + shaping, rtol=0, atol=2e-7)


def test_matches_numpy_reference():
    rng = np.random.default_rng(3)
    batch, turns = 12, 5
    lengths = rng.integers(0, turns + 1, size=batch)
    mask = np.arange(turns)[None] < lengths[:, None]
    ids = rng.choice([-4, 2, 9], size=batch).astype(np.int32)
    rewards = rng.normal(size=(batch, turns)).astype(np.float32)
    rewards[~mask] = np.nan
    want = ref.unbiased_turn_advantages(rewards, mask, ids, gamma=0.9)
    got = credax.unbiased_turn_advantages(rewards, mask, ids, gamma=0.9)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # Any Normalization: a z-score of the returns per (prompt, turn), singletons 0.
    want = ref.unbiased_turn_advantages(rewards, mask, ids, gamma=0.9, loo=False, std=True,
                                        eps=1e-6, singleton="zero")
    got = credax.unbiased_turn_advantages(rewards, mask, ids, gamma=0.9,
                                          normalization=credax.Normalization())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_equal_turn_counts_equal_the_per_index_sum():
    # Everyone stops at the same turn: Σ_{k>=t} b_k^{(-i)} is the leave-one-out mean of G_t, so the
    # two constructions coincide (the bias needs variable turn counts).
    rng = np.random.default_rng(5)
    rewards = rng.normal(size=(6, 3)).astype(np.float32)
    mask = np.ones((6, 3), bool)
    ids = np.array([0, 0, 0, 1, 1, 1])
    a = credax.unbiased_turn_advantages(rewards, mask, ids)
    z = credax.group_normalize(rewards, ids, mask, normalization=LOO_RAW)
    np.testing.assert_allclose(a, credax.discounted_returns(z, mask, gamma=1.0), atol=1e-5)


def test_hand_worked_and_degenerate():
    # Prompt 0 (rows 0-2): G = [1.5, 1], [.4, -], [.5, 0]. Turn 0: 1.5 - .45 = 1.05, .4 - 1 = -.6,
    # .5 - .95 = -.45. Turn 1 (rows 0, 2): 1 - 0 = 1, 0 - 1 = -1.
    # Prompt 7 (row 3, alone): its raw returns 2+3 = 5, 3. Row 4 (prompt 0, no valid turn): 0, and
    # it joins no statistic. Padding holds NaN and inf.
    nan, inf = np.nan, np.inf
    r = np.array([[0.5, 1.0], [0.4, nan], [0.5, 0.0], [2.0, 3.0], [inf, nan]], np.float32)
    m = np.array([[1, 1], [1, 0], [1, 1], [1, 1], [0, 0]], bool)
    ids = np.array([0, 0, 0, 7, 0])
    a = np.asarray(credax.unbiased_turn_advantages(r, m, ids))
    np.testing.assert_allclose(a, [[1.05, 1.0], [-0.6, 0.0], [-0.45, -1.0], [5.0, 3.0], [0, 0]],
                               atol=1e-6)
    # singleton="zero": a row alone at its turn gets 0.
    zero = credax.unbiased_turn_advantages(r, m, ids, normalization=LOO_RAW.replace(singleton="zero"))
    np.testing.assert_allclose(zero[3], [0.0, 0.0])
    np.testing.assert_allclose(zero[:3], a[:3], atol=1e-6)


def test_all_stop_at_once_and_constant():
    # Every row stops after turn 0 with the same reward: all advantages exactly 0 (a constant set).
    r = np.array([[0.3, 9.0], [0.3, 9.0], [0.3, 9.0]], np.float32)
    m = np.array([[1, 0], [1, 0], [1, 0]], bool)
    a = credax.unbiased_turn_advantages(r, m, np.zeros(3, np.int32))
    np.testing.assert_array_equal(a, np.zeros((3, 2)))


def test_nonfinite_valid_reward_is_nan_where_it_enters():
    # A NaN at a valid turn: the return of that row up to it is NaN, and so is every advantage of
    # its peers at those turns (their baselines include it); other prompts are untouched.
    r = np.array([[0.0, np.nan], [1.0, 0.0], [1.0, 2.0], [0.0, 1.0]], np.float32)
    a = np.asarray(credax.unbiased_turn_advantages(r, np.ones((4, 2), bool), np.array([0, 0, 1, 1])))
    assert np.isnan(a[:2]).all()
    np.testing.assert_allclose(a[2:], [[2.0, 1.0], [-2.0, -1.0]])  # G = [3, 2], [1, 1]


def test_gamma_traced_and_checked():
    r = np.array([[1.0, 1.0], [0.0, 0.0]], np.float32)
    m = np.ones((2, 2), bool)
    f = jax.jit(lambda g: credax.unbiased_turn_advantages(r, m, np.zeros(2, np.int32), gamma=g))
    # γ = .5: G = [1.5, 1], [0, 0] -> ±1.5, ±1 (leave-one-out of two: x_i - x_j).
    np.testing.assert_allclose(f(0.5), [[1.5, 1.0], [-1.5, -1.0]])
    with pytest.raises(ValueError, match="gamma"):
        credax.unbiased_turn_advantages(r, m, np.zeros(2, np.int32), gamma=1.5)
    with pytest.raises(TypeError, match="normalization"):
        credax.unbiased_turn_advantages(r, m, np.zeros(2, np.int32), normalization="loo")
    with pytest.raises(ValueError, match="turn_mask"):
        credax.unbiased_turn_advantages(r, np.ones((2, 3), bool), np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="group_ids|turn_rewards"):
        credax.unbiased_turn_advantages(r, m, np.zeros(3, np.int32))


def test_gradient_flows_to_rewards():
    # d A_{0,0} / d r: A_{0,0} = G_{0,0} - G_{1,0} = r00 + r01 - r10 - r11 for two rows.
    r = jnp.array([[1.0, 2.0], [0.5, 0.0]])
    g = jax.grad(lambda x: credax.unbiased_turn_advantages(x, jnp.ones((2, 2), bool),
                                                           jnp.zeros(2, jnp.int32))[0, 0])(r)
    np.testing.assert_allclose(g, [[1.0, 1.0], [-1.0, -1.0]])


@pytest.mark.parametrize("shape", [(3, 0), (0, 2), (0, 0)])
def test_zero_length_axes(shape):
    out = credax.unbiased_turn_advantages(np.zeros(shape, np.float32), np.ones(shape, bool),
                                          np.zeros(shape[0], np.int32))
    assert out.shape == shape

"""VPR's state-relative candidate advantage is GRPO over state groups, and GiGPO's step level with
one step per row: ``credax.presets.VPR`` against a NumPy restatement of ``thu-nics/VPR``'s
``compute_vpr_turn_level_advantage`` (``tests/reference/vpr.py``)."""

import numpy as np
import pytest

import credax
from credax import presets
from tests.reference import vpr as ref


def batch(rng, states=12, k=4):
    """``states`` state groups of ``k`` candidates (one of size 1, some with equal rewards), oracle
    rewards in {-1, 0, .5, 1} plus a terminal bonus 1 on some rows, state ids sparse."""
    state = np.repeat(rng.choice(10_000, states, replace=False), k)
    state = np.concatenate([state, [77_777]])  # a group of one candidate
    rewards = rng.choice([-1.0, 0.0, 0.5, 1.0], size=state.size)
    rewards[:k] = 0.5  # an equal-reward group
    rewards += (rng.random(state.size) < 0.1) * 1.0
    return rewards.astype(np.float32), state.astype(np.int64)


def test_group_whiten_is_grpo_over_state_groups_and_gigpo():
    rng = np.random.default_rng(0)
    for _ in range(5):
        r, state = batch(rng)
        want, train = ref.vpr_state_group(r, state)
        got = credax.grpo_advantages(r, state, normalization=presets.VPR)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        # The rows VPR trains on: groups with two or more candidates and unequal rewards.
        np.testing.assert_array_equal(~np.asarray(credax.degenerate_groups(r, state)), train)
        # GiGPO with the episode level off (constant outcomes give exactly 0) and the state as the
        # anchor of a one-step row: the same numbers, whatever γ (a one-step return is r).
        b = r.size
        gig = credax.gigpo_advantages(np.zeros(b), r[:, None], state[:, None], np.ones((b, 1), bool),
                                      np.zeros(b, np.int32), gamma=0.3, normalization=presets.VPR)
        np.testing.assert_allclose(gig[:, 0], want, rtol=1e-5, atol=1e-6)


def test_mean_then_batch_whiten_is_two_group_normalisations():
    rng = np.random.default_rng(1)
    r, state = batch(rng)
    want, train = ref.vpr_state_group(r, state, mode="mean_then_batch_whiten")
    centred = credax.grpo_advantages(r, state, normalization=presets.VPR.replace(scale="none"))
    train_c = ~credax.degenerate_groups(r, state)
    got = credax.group_normalize(centred, np.zeros(r.size, np.int32), train_c,
                                 normalization=presets.VPR)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(train_c), train)


def test_hand_worked():
    # State 3: rewards (1, 0, 0, 1): μ = .5, population σ = .5 -> ±1/(1 + 2e-8); state 9: (.5, .5):
    # equal rewards -> 0 and skipped; state 5 alone -> 0.
    r = np.array([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 2.0], np.float32)
    state = np.array([3, 3, 3, 3, 9, 9, 5])
    got = credax.grpo_advantages(r, state, normalization=presets.VPR)
    np.testing.assert_allclose(got, [1, -1, -1, 1, 0, 0, 0], rtol=1e-6)
    np.testing.assert_array_equal(credax.degenerate_groups(r, state), [0, 0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("spread", [1e-9, 5e-9])
def test_spread_below_eps_differs(spread):
    # VPR zeroes a group whose population std is <= 1e-8 (and skips it); credax zeroes only an
    # exactly constant group, so rewards (0, 2s) with s = 1e-9 give -s / (s + 1e-8) = -.0909
    # (s = 5e-9: -.3333): documented in docs/guides/stepwise.md.
    r = np.array([0.0, 2 * spread], np.float32)
    want, train = ref.vpr_state_group(r, np.array([0, 0]))
    assert not train.any() and (want == 0).all()
    got = credax.grpo_advantages(r, np.array([0, 0]), normalization=presets.VPR)
    np.testing.assert_allclose(got[0], -spread / (spread + 1e-8), rtol=1e-5)

"""MT-GRPO (SPEC §6): golden cases, the paper code's 2-turn rule, the loop reference, properties.

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
from credax.testing import turn_batches
from tests.probes import IDS4, M43, ROWS01, S4, S4_CLEAN, Probes, nan_exactly
from tests.reference import tcpo as ref

NAN, INF = float("nan"), float("inf")
VALUES = (0.0, 0.35, 1 / 3, 0.5, 0.95, 1.0, 2.0)
SIZES = ((1, 1), (3, 4), (6, 3))
PADS = (NAN, INF, -INF, 7.0)


def batches(sizes=SIZES):
    """(turn rewards, outcome, prefix mask, ids) from ``credax.testing.turn_batches``: ragged rows
    (rows without a turn too, whose outcome is garbage and must not matter), singleton and
    constant groups, arbitrary int32 ids, NaN/inf/huge padding."""
    return turn_batches(shapes=sizes, score_range=(0.0, 2.0), min_turns=0, dtype=np.float64).map(
        lambda b: (b.scores, b.rewards, b.turn_mask, b.group_ids))


def test_golden_ragged_with_singletons():
    # prompt 9: rows 0, 1, 2 with 3, 2, 1 turns; prompt -1: row 3 alone.
    # outcome (prompt 9) = 1, 0, .5: μ = .5, σ = .5 -> Â^O = 1, -1, 0 ; row 3 singleton -> 0.
    # turn 0 (prompt 9): 1, 0, .5 -> 1, -1, 0 ; turn 1 (rows 0, 1): 1, 0 -> μ .5, σ .7071 ->
    #   .7071, -.7071 ; turn 2 (row 0 alone) -> 0 ; row 3 every turn singleton -> 0.
    # A = Â^O + 0.5 Â^T (eps = 0)
    turn = np.array([[1, 1, 0.35], [0, 0, NAN], [0.5, NAN, NAN], [0.2, 0.9, NAN]], np.float32)
    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0]], bool)
    outcome = np.array([1, 0, 0.5, 1], np.float32)
    a = credax.mt_grpo_advantages(turn, outcome, mask, np.array([9, 9, 9, -1]), turn_coef=0.5,
                                  normalization=credax.Normalization(eps=0.0))
    h = 0.5 / math.sqrt(2)
    np.testing.assert_allclose(a, [[1.5, 1 + h, 1], [-1.5, -1 - h, 0], [0, 0, 0], [0, 0, 0]],
                               atol=1e-6)


def _paper_code_2turn(turn_reward, outcome, group_size, coef):
    """The repository's rule (SiliangZeng/Multi-Turn-RL-Agent, MTGRPOEnvTrainer), rewritten:
    rollouts in contiguous groups of `num_generations`; each reward normalised in its group with
    torch's unbiased std and +1e-4; first-turn tokens get Â^O + λ Â^T, later tokens Â^O."""

    def norm(r):
        r = r.reshape(-1, group_size)
        mean = r.mean(axis=1, keepdims=True)
        std = r.std(axis=1, ddof=1, keepdims=True)
        return ((r - mean) / (std + 1e-4)).reshape(-1)

    a_t, a_o = norm(np.asarray(turn_reward, np.float64)), norm(np.asarray(outcome, np.float64))
    return a_o + coef * a_t, a_o  # (first-turn tokens, later tokens)


@pytest.mark.parametrize("coef", [1.0, 0.3])
def test_reproduces_the_paper_code_two_turn_rule(coef):
    rng = np.random.default_rng(0)
    group_size, prompts = 5, 3
    b = group_size * prompts
    turn_reward = rng.choice([0.0, 0.5, 1.0, 1.5], size=b)
    outcome = rng.choice([0.0, 1.0, 1 / 3, 2.0], size=b)
    first, later = _paper_code_2turn(turn_reward, outcome, group_size, coef)
    # credax: two turns, the turn reward on turn 0 and a constant (0) on turn 1.
    turns = np.stack([turn_reward, np.zeros(b)], axis=1).astype(np.float32)
    a = credax.mt_grpo_advantages(turns, outcome.astype(np.float32), np.ones((b, 2), bool),
                                  np.repeat(np.arange(prompts), group_size), turn_coef=coef,
                                  normalization=credax.presets.TRL)
    np.testing.assert_allclose(a[:, 0], first, atol=1e-5)
    np.testing.assert_allclose(a[:, 1], later, atol=1e-5)
    # ... and on tokens: prompt (-1), turn-0 tokens, a tool result (-1), turn-1 tokens.
    token_turn = np.tile(np.array([-1, -1, 0, 0, 0, -1, -1, 1, 1]), (b, 1))
    tokens = credax.broadcast_to_tokens(a, token_turn)
    expected = np.where(token_turn == 0, first[:, None], np.where(token_turn == 1,
                                                                  later[:, None], 0.0))
    np.testing.assert_allclose(tokens, expected, atol=1e-5)


Z_OPTIONS = (
    {},
    dict(ddof=0, eps_mode="sqrt", singleton="raw", eps=1e-4),
    dict(scale="none", leave_one_out=True),
    dict(center=False, singleton="center"),
)


@given(batches(), st.sampled_from([1.0, 0.0, 0.5]))
def test_matches_reference(batch, coef):
    turn, outcome, mask, ids = batch
    with jax.enable_x64(True):
        a = credax.mt_grpo_advantages(jnp.asarray(turn), jnp.asarray(outcome), mask, ids,
                                      turn_coef=coef)
    assert a.dtype == jnp.float64
    np.testing.assert_allclose(a, ref.mt_grpo(turn, outcome, mask, ids, turn_coef=coef),
                               atol=1e-9, rtol=0)


@given(batches(sizes=((6, 3),)), st.sampled_from(range(len(Z_OPTIONS))))
def test_matches_reference_every_option(batch, which):
    turn, outcome, mask, ids = batch
    with jax.enable_x64(True):
        a = credax.mt_grpo_advantages(jnp.asarray(turn), jnp.asarray(outcome), mask, ids,
                                      normalization=credax.Normalization(**Z_OPTIONS[which]))
    np.testing.assert_allclose(a, ref.mt_grpo(turn, outcome, mask, ids, **Z_OPTIONS[which]),
                               atol=1e-9, rtol=0)


# Identities with other estimators (λ = 0, ω = 0, ...) live in tests/test_identities.py.


def test_constant_turn_rewards_add_nothing():
    # Every turn reward equal within each (prompt, turn): Â^T = 0 exactly, A = GRPO broadcast.
    turn = np.array([[0.35, 1.0], [0.35, 1.0], [2.0, 1 / 3], [2.0, NAN]], np.float32)
    mask = np.array([[1, 1], [1, 1], [1, 1], [1, 0]], bool)
    outcome = np.array([1.0, 0.0, 0.5, 0.25], np.float32)
    ids = np.array([4, 4, 8, 8])
    a = credax.mt_grpo_advantages(turn, outcome, mask, ids, turn_coef=3.0)
    grpo = np.asarray(credax.grpo_advantages(outcome, ids))
    np.testing.assert_array_equal(a, np.where(mask, grpo[:, None], 0.0))


@given(batches(sizes=((3, 4), (6, 3))), st.sampled_from(PADS), st.sampled_from(PADS))
def test_masked_values_never_matter(batch, pad1, pad2):
    turn, outcome, mask, ids = batch
    has_turn = mask.any(axis=1)

    def run(pad):
        t = np.where(mask, turn, pad).astype(np.float32)
        o = np.where(has_turn, outcome, pad).astype(np.float32)
        return _mt_and_grads(t, o, mask, ids, 0.7)

    (a1, g1), (a2, g2) = run(pad1), run(pad2)
    np.testing.assert_array_equal(a1, a2)
    for x, y in zip(g1, g2, strict=True):
        np.testing.assert_array_equal(x, y)
        assert np.isfinite(np.asarray(x)).all()
    assert (np.asarray(g1[0])[~mask] == 0).all() and (np.asarray(g1[1])[~has_turn] == 0).all()
    assert (np.asarray(a1)[~mask] == 0).all()


@jax.jit
def _mt_and_grads(turn, outcome, mask, ids, coef):
    weights = jnp.arange(1.0, turn.shape[1] + 1, dtype=turn.dtype)[None, :]

    def loss(t, o, c):
        return jnp.sum(credax.mt_grpo_advantages(t, o, mask, ids, turn_coef=c) * weights)

    out = credax.mt_grpo_advantages(turn, outcome, mask, ids, turn_coef=coef)
    return out, jax.grad(loss, argnums=(0, 1, 2))(turn, outcome, coef)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_in_float32_and_cast_back(dtype):
    turn = jnp.asarray([[0.0, 1.0], [1.0, 0.35]], dtype)
    outcome = jnp.asarray([1.0, 0.0], jnp.float32)
    a = credax.mt_grpo_advantages(turn, outcome, np.ones((2, 2), bool), np.zeros(2, np.int32))
    b = credax.mt_grpo_advantages(turn.astype(jnp.float32), outcome, np.ones((2, 2), bool),
                                  np.zeros(2, np.int32))
    assert a.dtype == dtype
    np.testing.assert_array_equal(a, b.astype(dtype))


T, R, M = np.zeros((2, 3), np.float32), np.zeros(2, np.float32), np.ones((2, 3), bool)


@pytest.mark.parametrize("call, error, match", [
    (lambda: credax.mt_grpo_advantages(T[0], R, M, np.zeros(2, np.int32)), ValueError,
     "turn_rewards"),
    (lambda: credax.mt_grpo_advantages(T, R[:1], M, np.zeros(2, np.int32)), ValueError,
     "outcome_rewards"),
    (lambda: credax.mt_grpo_advantages(T, R, M.astype(int), np.zeros(2, np.int32)), TypeError,
     "turn_mask"),
    (lambda: credax.mt_grpo_advantages(T, R, M, np.zeros(3, np.int32)), ValueError, "B=3"),
    (lambda: credax.mt_grpo_advantages(T, R, M, np.zeros(2, np.int32), turn_coef=np.ones(2)),
     ValueError, "turn_coef"),
    (lambda: credax.mt_grpo_advantages(T, R, M, np.zeros(2, np.int32),
                                       normalization=credax.Normalization(eps_mode="mul")),
     ValueError, "eps_mode"),
    # the removed loose keywords name themselves and `normalization=`
    (lambda: credax.mt_grpo_advantages(T, R, M, np.zeros(2, np.int32), eps_mode="sqrt"),
     TypeError, r"'eps_mode'(.|\n)*normalization=credax\.Normalization"),
    (lambda: credax.mt_grpo_advantages(T, R, M, np.zeros(2, np.int32), ddof=0),
     TypeError, r"'ddof'(.|\n)*normalization=credax\.Normalization"),
    (lambda: credax.mt_grpo_advantages(T, R, M, np.zeros(2, np.int32), **credax.presets.TRL),
     TypeError, "must be a mapping"),
    (lambda: credax.mt_grpo_advantages(T, R, M, np.zeros(2, np.int32),
                                       normalization=credax.presets.TRL.asdict()),
     TypeError, "normalization"),
])
def test_errors_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("nonfinite", "mt_grpo")
def _():
    out = credax.mt_grpo_advantages(S4, np.array([1.0, 0.0, 1.0, 0.0], np.float32), M43, IDS4)
    # group 0's turn-1 set holds the NaN; outcomes are clean
    nan_exactly(out, [[False, True, False], [False, True, False], [False] * 3, [False] * 3])
    out = credax.mt_grpo_advantages(S4_CLEAN, np.array([NAN, 0.0, 1.0, 0.0], np.float32), M43, IDS4)
    nan_exactly(out, ROWS01)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

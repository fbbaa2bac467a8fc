"""Identities between estimators, in one place (as rlax gathers its own).

Each test states an algebraic identity between two public functions and checks it on the batches
of ``credax.testing.turn_batches`` (ragged masks, singletons, constant groups, NaN padding): the
estimators are not checked against themselves but against another estimator that the identity
says they reduce to. The expected side is either another credax function or the identity's own
closed form (e.g. ``n / (n - 1)``), never a copy of the code under test.
"""

import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings

import credax
import credax.testing as ct

SHAPES = ((6, 3),)  # one shape: each identity compiles its two sides once
BATCHES = ct.turn_batches(shapes=SHAPES)
FEW = settings(max_examples=20)


def _valid(x, mask):
    return np.where(mask, np.asarray(x, np.float64), 0.0)


@FEW
@given(BATCHES)
def test_grpo_is_group_normalize_of_the_outcome(b):
    np.testing.assert_array_equal(credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask),
                                  credax.group_normalize(b.rewards, b.group_ids, b.row_mask))


@FEW
@given(BATCHES)
def test_rloo_is_leave_one_out_dr_grpo_and_n_over_n_minus_1_of_centering(b):
    rloo = np.asarray(credax.rloo_advantages(b.rewards, b.group_ids, b.row_mask), np.float64)
    loo = credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask,
                                 normalization=credax.Normalization(scale="none", leave_one_out=True))
    np.testing.assert_allclose(rloo, loo, rtol=1e-6, atol=1e-6)
    # x_i - mean_{j≠i} x_j = n/(n-1) (x_i - μ): the leave-one-out centring is plain centring scaled.
    n = np.asarray(credax.group_count(b.group_ids, b.row_mask), np.float64)
    centred = np.asarray(credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask,
                                                normalization=credax.Normalization(scale="none")))
    np.testing.assert_allclose(rloo, np.where(n > 1, centred * n / np.maximum(n - 1, 1), 0.0),
                               rtol=1e-5, atol=1e-5)


@FEW
@given(BATCHES)
def test_gdpo_with_one_unit_component_is_grpo(b):
    one = credax.gdpo_advantages(b.rewards[:, None], b.group_ids, b.row_mask, weights=jnp.ones(1))
    np.testing.assert_allclose(one, credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask),
                               rtol=1e-6, atol=1e-6)


@FEW
@given(BATCHES)
def test_triage_with_lambda_zero_is_grpo_broadcast_over_valid_turns(b):
    a = credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask)
    out = credax.triage_advantages(a, b.roles, b.turn_mask, lam=0.0)
    np.testing.assert_array_equal(out, _valid(np.asarray(a)[:, None] * np.ones(b.turn_mask.shape),
                                              b.turn_mask))


@FEW
@given(BATCHES)
def test_scalar_process_with_lambda_zero_is_grpo_broadcast(b):
    a = credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask)
    out = credax.scalar_process_advantages(a, b.scores, b.turn_mask, lam=0.0)
    np.testing.assert_array_equal(out, credax.triage_advantages(a, b.roles, b.turn_mask, lam=0.0))


@FEW
@given(BATCHES)
def test_mt_grpo_with_turn_coef_zero_is_grpo_of_the_outcome_broadcast(b):
    out = credax.mt_grpo_advantages(b.scores, b.rewards, b.turn_mask, b.group_ids, turn_coef=0.0)
    grpo = credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask)
    np.testing.assert_allclose(out, _valid(np.asarray(grpo)[:, None] * np.ones(b.turn_mask.shape),
                                           b.turn_mask), rtol=1e-6, atol=1e-6)


@FEW
@given(BATCHES)
def test_gigpo_with_omega_zero_is_episode_grpo(b):
    out = credax.gigpo_advantages(b.rewards, b.scores, b.roles, b.turn_mask, b.group_ids,
                                  omega=0.0)
    grpo = credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask)
    np.testing.assert_allclose(out, _valid(np.asarray(grpo)[:, None] * np.ones(b.turn_mask.shape),
                                           b.turn_mask), rtol=1e-6, atol=1e-6)


@FEW
@given(BATCHES)
def test_gigpo_anchored_on_the_turn_index_is_the_per_prompt_turn_zscore_of_returns(b):
    # Anchor = turn index: the anchor groups are exactly group_normalize's (prompt, turn) sets.
    turn_anchor = np.broadcast_to(np.arange(b.turn_mask.shape[1], dtype=np.int32),
                                  b.turn_mask.shape)
    args = (b.rewards, b.scores, turn_anchor, b.turn_mask, b.group_ids)
    step = (np.asarray(credax.gigpo_advantages(*args, gamma=0.9), np.float64)
            - np.asarray(credax.gigpo_advantages(*args, gamma=0.9, omega=0.0), np.float64))
    returns = credax.discounted_returns(b.scores, b.turn_mask, gamma=0.9)
    z = credax.group_normalize(returns, b.group_ids, b.turn_mask)
    np.testing.assert_allclose(step, z, rtol=1e-5, atol=1e-5)


@FEW
@given(BATCHES)
def test_tcpo_with_only_progress_and_no_normalisation_is_the_improvement(b):
    out = credax.tcpo_advantages(b.scores, b.turn_mask, b.group_ids, preservation_weight=0.0,
                                 regression_weight=0.0, hindsight_weight=0.0, normalize=False,
                                 gamma=1.0)
    improvement = credax.retrospective_credit(b.scores, b.turn_mask).improvement
    np.testing.assert_array_equal(out.advantages, improvement)


@FEW
@given(BATCHES)
def test_tcpo_retrospective_part_is_retrospective_credit(b):
    out = credax.tcpo_advantages(b.scores, b.turn_mask, b.group_ids)
    alone = credax.retrospective_credit(b.scores, b.turn_mask)
    for got, want in zip(out.retrospective, alone, strict=True):
        np.testing.assert_array_equal(got, want)


@FEW
@given(BATCHES)
def test_hindsight_baseline_is_the_peer_mean_over_eligible_turns(b):
    h = credax.hindsight_credit(b.scores, b.turn_mask, b.group_ids)
    pm = credax.peer_mean(h.future_best, b.group_ids, h.eligible)
    np.testing.assert_array_equal(h.baseline, pm.mean)
    np.testing.assert_array_equal(h.peer_count, pm.count)


@FEW
@given(BATCHES)
def test_degenerate_groups_are_exactly_zero_under_centred_grpo(b):
    degenerate = np.asarray(credax.degenerate_groups(b.rewards, b.group_ids, b.row_mask))
    for preset in (credax.presets.TRL, credax.presets.TRL_NONE, credax.Normalization()):
        out = np.asarray(credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask,
                                                normalization=preset))
        assert np.all(out[degenerate] == 0.0)

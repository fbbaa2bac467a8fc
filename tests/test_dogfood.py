"""credax's own functions under credax.testing: the invariants users check, checked on us.

Each public estimator runs through every checker that its contract promises (SPEC §0: masked
entries are exactly 0 and never matter, rows are trajectories in any order, groups come from ids
only, jit == eager, finite gradients). Zero mean per (group, turn) is checked only where the output
is a centred, group-normalised quantity. Adapters are module-level functions, so the checkers run
on one function share its compilations (credax.testing caches the jit on (fn, adapter)).
"""

import jax.numpy as jnp
import pytest

import credax
import credax.testing as ct

EXAMPLES = 8
SHAPES = ((6, 3),)  # one shape: each checker compiles at most three programs per function


def _turns(fn):  # fn(scores, turn_mask)
    return lambda b: fn(b.scores, b.turn_mask)


def _per_turn_groups(fn):  # group_normalize over [B, K]: a z-score per (prompt, turn)
    return lambda b: fn(b.scores, b.group_ids, b.turn_mask)


def _outcome(fn):  # one reward per row; a row is valid when it has a real turn
    return lambda b: fn(b.rewards, b.group_ids, b.row_mask)


def _returns(fn):
    return lambda b: fn(b.scores, b.turn_mask, gamma=0.9)


def _tcpo(fn):  # canonical signature; the advantages are the main output
    return lambda b: fn(b.scores, b.turn_mask, b.group_ids).advantages


def _triage(fn):  # GRPO outcome advantages plus role credit (roles include -1, unlabeled)
    return lambda b: fn(credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask), b.roles,
                        b.turn_mask)


def _mt_grpo(fn):
    return lambda b: fn(b.scores, b.rewards, b.turn_mask, b.group_ids)


def _g2po(fn):  # roles double as small categorical anchor ids: shared nodes
    return lambda b: fn(b.rewards, b.roles, b.turn_mask, b.group_ids).advantages


def _turn_baseline(fn):  # scores as per-turn rewards
    return lambda b: fn(b.scores, b.turn_mask, b.group_ids)


def _gigpo(fn):  # roles double as small categorical anchor ids: many shared anchor states
    return lambda b: fn(b.rewards, b.scores, b.roles, b.turn_mask, b.group_ids)


def _hgpo(fn):  # the GiGPO batch; the advantages are the main output
    return lambda b: fn(b.rewards, b.scores, b.roles, b.turn_mask, b.group_ids).advantages


def _peer_mean(fn):
    return lambda b: fn(b.scores, b.group_ids, b.turn_mask).mean


def _gdpo(fn):  # two components: the outcome and its square (both constant within a group)
    def call(b):
        # The square is taken on valid rows only (a product with padding garbage would put NaN
        # into the adapter's own gradient); padded rows keep their garbage in both columns.
        valid = jnp.where(b.row_mask, b.rewards, jnp.zeros_like(b.rewards))
        square = jnp.where(b.row_mask, valid * valid, b.rewards)
        return fn(jnp.stack([b.rewards, square], axis=1), b.group_ids, b.row_mask,
                  weights=jnp.array([1.0, 0.5]))

    return call


def _credit_of(fn):  # retrospective credit: the main field of the NamedTuple
    return lambda b: fn(b.scores, b.turn_mask).credit


def _grouped_credit_of(fn):  # hindsight credit
    return lambda b: fn(b.scores, b.turn_mask, b.group_ids).credit


def _roles(fn):
    return lambda b: fn(b.roles, b.turn_mask)


def _process(fn):  # the scores double as per-turn judge scores
    return lambda b: fn(credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask), b.scores,
                        b.turn_mask, lam=0.5)


def _gae(fn):  # scores as rewards, half of them as values: a row-wise recursion
    return lambda b: fn(b.scores, 0.5 * b.scores, b.turn_mask, gamma=0.9, lam=0.95).advantages


def _kl(fn):
    return lambda b: fn(b.scores, 0.5 * b.scores, mask=b.turn_mask)


COMMON = ("padding_invariance", "permutation_equivariance", "group_isolation", "masked_zero",
          "finite_gradients", "jit_matches_eager")
CENTRED = COMMON + ("group_zero_mean",)
NO_GRAD = tuple(c for c in COMMON if c != "finite_gradients")  # boolean outputs
# Shrinkage pulls every group toward the across-prompt mean: not group-isolated, by design.
POOLED = tuple(c for c in COMMON if c != "group_isolation")

# name in credax, adapter, checks
SPECS = [
    ("group_normalize", _per_turn_groups, CENTRED),
    ("grpo_advantages", _outcome, CENTRED),
    ("rloo_advantages", _outcome, CENTRED),
    ("best_prior", _turns, COMMON),
    ("future_best", _turns, COMMON),
    ("discounted_returns", _returns, COMMON),
    ("tcpo_advantages", _tcpo, CENTRED),
    ("triage_advantages", _triage, COMMON),
    ("mt_grpo_advantages", _mt_grpo, COMMON),
    ("gigpo_advantages", _gigpo, COMMON),
    ("unbiased_turn_advantages", _turn_baseline, CENTRED),
    ("g2po_advantages", _g2po, COMMON),
    ("hgpo_advantages", _hgpo, COMMON),
    ("group_mean", _per_turn_groups, COMMON),
    ("peer_mean", _peer_mean, COMMON),
    ("gdpo_advantages", _gdpo, CENTRED),
    ("degenerate_groups", _outcome, NO_GRAD),
    ("shrinkage_advantages", _outcome, POOLED),
    ("retrospective_credit", _credit_of, COMMON),
    ("hindsight_credit", _grouped_credit_of, COMMON),
    ("raw_score_credit", _turns, COMMON),
    ("adjacent_delta_credit", _turns, COMMON),
    ("role_credit", _roles, COMMON),
    ("scalar_process_advantages", _process, COMMON),
    ("gae_advantages", _gae, COMMON),
    ("kl_divergence", _kl, COMMON),
]
# Public array functions not in SPECS, and why (the checkers need [B] or [B, K] outputs of a batch):
# token-level ([B, T]: broadcast_to_tokens, token_logprobs*, turn_values, turn_gae_advantages),
# scalars or fits (aggregate, policy_loss, value_loss, fit_role_constants, optimal_mixing_weight,
# vapo_lambda, discount_weights), windows/labels (judge_windows, parse_roles, the validators), a
# ranking whose ties break by row index (select_top_surprisal: not permutation-equivariant on ties),
# alternatives [B, K, M] (counterfactual_credit), turn_surprisal (token log-probs in, tested in
# test_turns.py), group_count (integer counts, no float input), and the batch-statistic estimators
# reinforce_pp_advantages, reinforce_pp_baseline_advantages ([B, T], whitened over the batch's tokens)
# and gpg_advantages (α counts the batch's nonzero rewards): not group-isolated by design.

CASES = [
    pytest.param(name, adapter, check, id=f"{name}-{check}")
    for name, adapter, checks in SPECS
    for check in checks
]


@pytest.mark.parametrize("name, adapter, check", CASES)
def test_invariant(name, adapter, check):
    # Eager execution (jax.disable_jit) dispatches every op from Python: fewer examples there.
    examples = 4 if check == "jit_matches_eager" else EXAMPLES
    getattr(ct, f"check_{check}")(getattr(credax, name), adapter=adapter, shapes=SHAPES,
                                  max_examples=examples)


def test_group_normalize_on_outcomes_with_verl_singletons():
    # verl keeps a singleton's raw score: centred sets of two or more still average to zero, so
    # min_size=2 (the default) is the right check, and the raw singletons stay masked correctly.
    fn = lambda r, g, m: credax.group_normalize(r, g, m, normalization=credax.presets.VERL)  # noqa: E731
    ct.check_group_zero_mean(fn, adapter=_outcome, shapes=SHAPES, max_examples=EXAMPLES)
    ct.check_masked_zero(fn, adapter=_outcome, shapes=SHAPES, max_examples=EXAMPLES)


def test_batch_scale_is_not_group_isolated():
    # TRL's scale_rewards="batch" divides by the batch std: by design a group's output depends on
    # the other groups, and the checker says so.
    fn = lambda r, g, m: credax.group_normalize(r, g, m, normalization=credax.presets.TRL_BATCH)  # noqa: E731
    with pytest.raises(AssertionError, match="^group isolation violated"):
        ct.check_group_isolation(fn, adapter=_outcome, shapes=SHAPES, max_examples=40,
                                 shrink=False)

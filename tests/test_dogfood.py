"""credax's own functions under credax.testing: the invariants users check, checked on us.

Each public estimator runs through every checker that its contract promises (SPEC §0: masked
entries are exactly 0 and never matter, rows are trajectories in any order, groups come from ids
only, jit == eager, finite gradients). Zero mean per (group, turn) is checked only where the output
is a centred, group-normalised quantity. Adapters are module-level functions, so the checkers run
on one function share its compilations (credax.testing caches the jit on (fn, adapter)).
"""

import pytest

import credax
import credax.testing as ct
from credax.testing import calls

EXAMPLES = 8
SHAPES = ((6, 3),)  # one shape: each checker compiles at most three programs per function
# One reward per row, a row valid when it has a real turn: GRPO's call, for other functions of
# the same arguments.
OUTCOME = calls.CALLS["grpo_advantages"].adapter


# The call table's entries that state the invariants their output satisfies (Call.checks); the
# adapter is the entry's own (one object per entry, so the checkers on one function share its
# compilations). Public array functions without checks, and why (the checkers need [B] or [B, K]
# outputs of a batch): token-level ([B, T]: broadcast_to_tokens, token_logprobs*, turn_values,
# turn_gae_advantages, vetta_advantages), scalars or fits (aggregate, policy_loss, value_loss,
# fit_role_constants, optimal_mixing_weight, vapo_lambda, discount_weights), windows/labels
# (judge_windows, parse_roles, the validators), a ranking whose ties break by row index
# (select_top_surprisal: not permutation-equivariant on ties), alternatives [B, K, M]
# (counterfactual_credit), turn_surprisal (token log-probs in, tested in test_turns.py), group_count
# (integer counts, no float input), and the batch-statistic estimators reinforce_pp_advantages,
# reinforce_pp_baseline_advantages ([B, T], whitened over the batch's tokens) and gpg_advantages (α
# counts the batch's nonzero rewards): not group-isolated by design.
SPECS = [(label, c) for label, c in calls.ALL.items() if c.checks]

CASES = [
    pytest.param(label, check, id=f"{label}-{check}")
    for label, c in SPECS
    for check in c.checks
]


def test_every_estimator_with_invariants_is_checked():
    # The estimators the invariant checks cannot state (see above) are the only ones left out.
    unchecked = {name for name in calls.ESTIMATORS if name not in {c.name for _, c in SPECS}}
    assert unchecked == {"counterfactual_credit", "gpg_advantages",
                         "reinforce_pp_advantages", "reinforce_pp_baseline_advantages",
                         "turn_gae_advantages", "vetta_advantages"}


@pytest.mark.parametrize("label, check", CASES)
def test_invariant(label, check):
    c = calls.ALL[label]
    # Eager execution (jax.disable_jit) dispatches every op from Python: fewer examples there.
    examples = 4 if check == "jit_matches_eager" else EXAMPLES
    getattr(ct, f"check_{check}")(getattr(credax, c.name), adapter=c.adapter, shapes=SHAPES,
                                  max_examples=examples)


def test_group_normalize_on_outcomes_with_verl_singletons():
    # verl keeps a singleton's raw score: centred sets of two or more still average to zero, so
    # min_size=2 (the default) is the right check, and the raw singletons stay masked correctly.
    fn = lambda r, g, m: credax.group_normalize(r, g, m, normalization=credax.presets.VERL)  # noqa: E731
    ct.check_group_zero_mean(fn, adapter=OUTCOME, shapes=SHAPES, max_examples=EXAMPLES)
    ct.check_masked_zero(fn, adapter=OUTCOME, shapes=SHAPES, max_examples=EXAMPLES)


def test_batch_scale_is_not_group_isolated():
    # TRL's scale_rewards="batch" divides by the batch std: by design a group's output depends on
    # the other groups, and the checker says so.
    fn = lambda r, g, m: credax.group_normalize(r, g, m, normalization=credax.presets.TRL_BATCH)  # noqa: E731
    with pytest.raises(AssertionError, match="^group isolation violated"):
        ct.check_group_isolation(fn, adapter=OUTCOME, shapes=SHAPES, max_examples=40,
                                 shrink=False)

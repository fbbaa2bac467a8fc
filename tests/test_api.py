"""The public API is exactly the names SPEC.md fixes (plus documented additions), all importable."""

import subprocess
import sys

import credax

# Names fixed by SPEC.md §1-§7, listed by hand from the spec (not from credax).
SPEC_NAMES = {
    # §1
    "group_normalize", "groups", "Groups", "group_mean", "group_count", "peer_mean", "PeerMean",
    "presets",
    # §2
    "grpo_advantages", "rloo_advantages", "gdpo_advantages", "degenerate_groups",
    # §3
    "best_prior", "future_best", "discount_weights", "discounted_returns", "broadcast_to_tokens",
    "turn_surprisal", "validate_turns",
    # §4
    "retrospective_credit", "Retrospective", "hindsight_credit", "Hindsight",
    "counterfactual_credit", "Counterfactual", "select_top_surprisal", "tcpo_advantages", "TCPO",
    "raw_score_credit", "adjacent_delta_credit",
    # §5
    "Role", "TRIAGE_ROLE_CONSTANTS", "role_credit", "triage_advantages",
    "scalar_process_advantages", "fit_role_constants", "RoleFit", "optimal_mixing_weight",
    "judge_windows", "Windows", "parse_roles", "validate_roles",
    # §6
    "mt_grpo_advantages", "gigpo_advantages",
    # §7
    "token_logprobs", "token_logprobs_from_hidden", "kl_divergence", "aggregate", "policy_loss",
    "PolicyLoss", "nnx",
}
ADDITIONS = {
    "PolicyMetrics",  # the metrics NamedTuple of PolicyLoss
    "validate_rewards", "validate_alternatives",  # eager checks of [B] rewards and alternatives (#13)
    "Normalization",  # issue 12: the one normalisation options object
    "policy_loss_from_hidden",  # issue 31: the fused LM-head policy loss (three GEMMs a chunk)
    "LossOptions",  # issue 36: the one options value of the policy loss
}
# Issue 15's estimators (documented in docs/guides/estimators.md), listed by hand from the issue.
ESTIMATORS = {
    # value-based credit
    "gae_advantages", "GAE", "turn_gae_advantages", "TurnGAE", "turn_values", "TurnValues",
    "vapo_lambda", "value_loss", "ValueLoss",
    # hierarchical history groups
    "hgpo_advantages", "HGPO",
    # shrinkage baselines
    "shrinkage_baseline", "shrinkage_advantages", "Shrinkage",
    # entropy
    "token_entropy", "LogprobsEntropy",
    # diagnostics
    "dead_groups", "DeadGroups", "anchor_hit_ratio", "credit_by_turn", "credit_by_role",
    "CreditSummary",
}
# Issue 30's estimators (documented in docs/guides/stepwise.md and estimators.md), by hand.
ISSUE_30 = {
    "unbiased_turn_advantages",  # the turn baseline of verl RFC #7244
    "reinforce_pp_advantages", "reinforce_pp_baseline_advantages", "gpg_advantages",  # verl's
    "g2po_advantages", "G2PO",  # the state-graph advantage of Nala-YN/G2PO
}
# Issue 38's primitives (docs/guides/redistribution.md), by hand.
ISSUE_38 = {
    "redistribute_advantages",  # the shared step of DRACO, VICT, IAPO, TASPO, FACTOR
    "vetta_advantages", "VETTA",  # turn GAE + the within-response-centred token GAE residual
    "pgpo_advantages", "PGPO",  # the anchor-group potential difference
    "faca_advantages",  # the next user turn's reaction, normalised per segment, plus the outcome
}


# Issue 16's rollouts plumbing (documented in docs/guides/rollouts.md), listed by hand.
ROLLOUTS = {
    "Rollout", "Turn", "Buckets", "pad_rollouts", "PaddedRollouts", "RolloutBatch",
    "RolloutLayout", "read_rollouts", "write_rollouts", "RolloutFormatError",
    "rollouts_from_tunix",  # issue 39: Tunix's trajectories in memory (format="tunix" on disk)
}


def test_public_names_match_spec():
    assert set(credax.__all__) == SPEC_NAMES | ADDITIONS | ESTIMATORS | ROLLOUTS | ISSUE_30 | ISSUE_38


def test_every_name_resolves():
    for name in credax.__all__:
        assert getattr(credax, name) is not None


def test_spec_constants():
    assert tuple(credax.TRIAGE_ROLE_CONSTANTS) == (1.0, 0.5, -0.1, -0.5)
    assert [int(r) for r in credax.Role] == [0, 1, 2, 3]
    assert [r.name for r in credax.Role] == ["DECISIVE", "EXPLORATION", "NO_PROGRESS", "REGRESSION"]


def test_import_is_light():
    # `import credax` loads neither flax nor hypothesis (optional extras / submodules).
    code = "import sys, credax; print('flax' in sys.modules, 'hypothesis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]

"""The public API is exactly the names SPEC.md fixes (plus documented additions), all importable."""

import subprocess
import sys

import credax

# The public names by subject, listed by hand from SPEC.md §1-§7 and the guides that document the
# later additions (never read from credax): a name missing here, or one credax no longer exports,
# fails test_public_names_are_exactly_the_subjects'.
SUBJECTS = {
    # Groups and normalisation (SPEC §1; issue 12's options value).
    "groups": {"groups", "Groups", "group_normalize", "group_mean", "group_count", "peer_mean",
               "PeerMean", "Normalization", "presets"},
    # Outcome estimators: one value per rollout (SPEC §2; docs/guides/estimators.md).
    "outcome": {"grpo_advantages", "rloo_advantages", "gdpo_advantages", "degenerate_groups",
                "gpg_advantages", "reinforce_pp_advantages", "reinforce_pp_baseline_advantages",
                "shrinkage_baseline", "shrinkage_advantages", "Shrinkage"},
    # Turn tools (SPEC §3).
    "turns": {"best_prior", "future_best", "discount_weights", "discounted_returns",
              "broadcast_to_tokens", "turn_surprisal", "broadcast_to_turns",
              "token_turn_from_layout"},
    # One call for every credit method (issue 47; docs/guides/credit-lab.md).
    "credit": {"credit", "credit_methods", "TurnBatch"},
    # Eager validators (SPEC §3, §5; issue 13).
    "validators": {"validate_turns", "validate_rewards", "validate_alternatives", "validate_roles"},
    # TCPO's credit (SPEC §4; docs/guides/tcpo.md).
    "tcpo": {"retrospective_credit", "Retrospective", "hindsight_credit", "Hindsight",
             "counterfactual_credit", "Counterfactual", "select_top_surprisal", "tcpo_advantages",
             "TCPO", "raw_score_credit", "adjacent_delta_credit"},
    # Judge roles (SPEC §5; docs/guides/triage.md).
    "roles": {"Role", "TRIAGE_ROLE_CONSTANTS", "role_credit", "triage_advantages",
              "scalar_process_advantages", "fit_role_constants", "RoleFit", "optimal_mixing_weight",
              "judge_windows", "Windows", "parse_roles"},
    # Step-wise group estimators (SPEC §6; docs/guides/stepwise.md, redistribution.md).
    "stepwise": {"mt_grpo_advantages", "gigpo_advantages", "hgpo_advantages", "HGPO",
                 "unbiased_turn_advantages", "g2po_advantages", "G2PO", "pgpo_advantages", "PGPO",
                 "redistribute_advantages", "faca_advantages"},
    # Value-based credit (docs/guides/estimators.md).
    "values": {"gae_advantages", "GAE", "turn_gae_advantages", "TurnGAE", "turn_values",
               "TurnValues", "vapo_lambda", "value_loss", "ValueLoss", "vetta_advantages", "VETTA"},
    # Log-probs and the policy loss (SPEC §7; docs/guides/policy-loss.md).
    "loss": {"token_logprobs", "token_logprobs_from_hidden", "token_entropy", "LogprobsEntropy",
             "kl_divergence", "aggregate", "policy_loss", "PolicyLoss", "PolicyMetrics",
             "policy_loss_from_hidden", "LossOptions", "nnx"},
    # Credit diagnostics (docs/guides/estimators.md).
    "diagnostics": {"dead_groups", "DeadGroups", "anchor_hit_ratio", "credit_by_turn",
                    "credit_by_role", "CreditSummary"},
    # Rollouts plumbing (docs/guides/rollouts.md, tunix.md).
    "rollouts": {"Rollout", "Turn", "Buckets", "pad_rollouts", "PaddedRollouts", "RolloutBatch",
                 "RolloutLayout", "read_rollouts", "write_rollouts", "RolloutFormatError",
                 "rollouts_from_tunix"},
}


def test_public_names_are_exactly_the_subjects():
    listed = set().union(*SUBJECTS.values())
    assert set(credax.__all__) == listed, (
        f"not listed here: {sorted(set(credax.__all__) - listed)}; "
        f"listed but not public: {sorted(listed - set(credax.__all__))}")


def test_each_name_has_one_subject():
    seen = {}
    for subject, names in SUBJECTS.items():
        for name in names:
            assert name not in seen, f"{name} is listed under {seen[name]} and {subject}"
            seen[name] = subject


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

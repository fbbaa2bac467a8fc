"""credax.tunix against the real, pinned Tunix (google-tunix 0.1.7, the `tunix` extra; CPU).

The estimators run here, side by side with Tunix's own (they are NumPy/JAX functions of
``(rewards, num_generations)``). Everything that builds Tunix models, losses and learners runs once,
in a fresh interpreter (tests/tunix_worker.py, about a minute), and is checked from its JSON.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

import credax

with warnings.catch_warnings():  # Tunix's dependencies warn at import (deprecations)
    warnings.simplefilter("ignore")
    tunix = pytest.importorskip("tunix", reason="the `tunix` extra (google-tunix) is not installed")
    from tunix.rl import algo_core, function_registry

    import credax.tunix as ct

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_pinned_version():
    import importlib.metadata

    assert importlib.metadata.version("google-tunix") == "0.1.7"


def test_every_name_is_in_tunix_registry():
    estimators = function_registry.default_registry.list_functions("advantage_estimator")
    losses = function_registry.default_registry.list_functions("policy_loss_fn")
    assert {"credax_grpo", "credax_drgrpo", "credax_rloo", "credax_shrinkage",
            "credax_shrinkage_loo"} <= set(estimators)
    assert {"credax", "credax_verl", "credax_verl_gspo", "credax_trl_grpo", "credax_trl_bnpo",
            "credax_trl_dr_grpo", "credax_trl_dapo"} <= set(losses)
    assert function_registry.get_advantage_estimator("credax_rloo") is ct.rloo
    assert sorted(ct.register()) == sorted([*ct.ESTIMATORS, *ct.POLICY_LOSSES])


def test_estimators_on_a_hand_worked_batch():
    # Two prompts, G = 3 consecutive generations each: (1, 0, 1) and (0.5, 0.5, 0.5).
    r = np.array([1.0, 0.0, 1.0, 0.5, 0.5, 0.5])
    # GRPO: μ = 2/3, unbiased σ = sqrt(((1/3)² · 2 + (2/3)²) / 2) = sqrt(1/3); constant group 0.
    s = (1 / 3) ** 0.5
    np.testing.assert_allclose(ct.grpo(r, 3), [(1 / 3) / (s + 1e-6), (-2 / 3) / (s + 1e-6),
                                               (1 / 3) / (s + 1e-6), 0, 0, 0], rtol=1e-5)
    # Dr. GRPO: r - μ.
    np.testing.assert_allclose(ct.drgrpo(r, 3), [1 / 3, -2 / 3, 1 / 3, 0, 0, 0], atol=1e-6)
    # RLOO: r_i - mean of the other two: 1 - 1/2, 0 - 1, 1 - 1/2.
    np.testing.assert_allclose(ct.rloo(r, 3), [0.5, -1.0, 0.5, 0, 0, 0], atol=1e-6)
    assert ct.grpo(r, 3).dtype == np.float32 and ct.grpo(r, 3).shape == (6,)


def test_estimators_match_tunix_own_and_credax_direct():
    rng = np.random.default_rng(0)
    rewards = np.round(rng.random(24), 2)
    rewards[8:12] = 0.35  # a constant group: 0 under both
    ids = np.arange(24) // 4
    np.testing.assert_allclose(ct.grpo(rewards, 4), algo_core.compute_advantages(rewards, 4),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ct.drgrpo(rewards, 4),
                               np.asarray(algo_core.compute_drgrpo_advantages(rewards, 4)), atol=1e-6)
    np.testing.assert_allclose(ct.rloo(rewards, 4),
                               np.asarray(algo_core.compute_rloo_advantages(rewards, 4)), atol=1e-6)
    r32 = rewards.astype(np.float32)
    np.testing.assert_array_equal(ct.shrinkage(rewards, 4),
                                  np.asarray(credax.shrinkage_advantages(r32, ids)))
    np.testing.assert_array_equal(ct.shrinkage_loo(rewards, 4),
                                  np.asarray(credax.shrinkage_advantages(r32, ids, leave_one_out=True)))
    assert not np.array_equal(ct.shrinkage(rewards, 4), ct.drgrpo(rewards, 4))  # it does pool


@pytest.mark.parametrize("rewards, g, match", [
    (np.zeros((2, 2)), 2, "`rewards` must be a 1-D real array"),
    (np.array(["a", "b"]), 2, "`rewards`"),
    (np.zeros(6), 4, "`num_generations` must be a positive int dividing N = 6"),
    (np.zeros(6), 0, "`num_generations`"),
    (np.zeros(6), 2.0, "`num_generations`"),
])
def test_estimator_bad_input_names_the_argument(rewards, g, match):
    with pytest.raises(ValueError, match=match):
        ct.grpo(rewards, g)


def test_turn_advantages_checks_its_inputs():
    mask = np.ones((4, 3), bool)
    with pytest.raises(ValueError, match=r"`token_turn` must have the completion's shape \[B, L\] = \(4, 3"):
        ct.turn_advantages(np.zeros((4, 1)), np.ones((4, 1), bool), np.zeros((4, 2), np.int32),
                           completion_mask=mask, num_generations=2)
    with pytest.raises(ValueError, match="`token_turn` values must lie in"):
        ct.turn_advantages(np.zeros((4, 1)), np.ones((4, 1), bool), np.full((4, 3), 1, np.int32),
                           completion_mask=mask, num_generations=2)
    with pytest.raises(ValueError, match="`num_generations`"):
        ct.turn_advantages(np.zeros((4, 1)), np.ones((4, 1), bool), np.zeros((4, 3), np.int32),
                           completion_mask=mask, num_generations=3)
    with pytest.raises(TypeError, match="`turns` must be a function"):
        ct.TurnCreditGRPOLearner(turns=None)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    out = tmp_path_factory.mktemp("tunix") / "out.json"
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "tunix_worker.py"), str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(out.read_text())


def test_credax_loss_is_tunix_grpo_loss(worker):
    # Same model, same TrainExample, four GRPOConfig settings (Tunix's default
    # sequence-mean-token-mean with k1 KL, token-mean with low_var_kl, gspo-token, sum-norm with
    # dual clip): loss, gradients and Tunix's logged metrics agree.
    assert len(worker["loss"]) == 4
    for case in worker["loss"]:
        assert case["credax"] == pytest.approx(case["tunix"], rel=1e-6, abs=1e-7), case["setting"]
        assert case["grad_diff"] <= 1e-5 * case["grad_scale"], case
        for key in ("pg_loss", "kl", "kl_loss", "pg_clipfrac", "ppo_kl", "is_ratio/mean"):
            assert case["credax_aux"][key] == pytest.approx(case["tunix_aux"][key], rel=1e-5, abs=1e-6), (
                case["setting"], key)
    # The settings differ from each other: a loss that ignored algo_config would fail above.
    assert len({round(c["tunix"], 6) for c in worker["loss"]}) == 4


def test_preset_losses_are_the_presets(worker):
    presets = worker["presets"]
    assert presets["credax_verl"] == pytest.approx(worker["preset_direct"]["credax_verl"], rel=1e-6)
    assert presets["credax_trl_dr_grpo"] == pytest.approx(worker["preset_direct"]["credax_trl_dr_grpo"],
                                                          rel=1e-6)
    assert all(np.isfinite(v) for v in presets.values())
    # token-mean (bnpo) and sequence-mean (grpo) differ on this ragged mask.
    assert presets["credax_trl_bnpo"] != pytest.approx(presets["credax_trl_grpo"])


def test_grpo_learner_trains_with_credax_estimator_and_loss(worker):
    run = worker["grpo_run"]
    assert run["steps"] == 2 and len(run["calls"]) == 2
    for call in run["calls"]:
        # rewards 0, 1, 2, 0 in groups of G = 2: RLOO = (0 - 1, 1 - 0, 2 - 0, 0 - 2).
        assert call["G"] == 2 and call["rewards"] == [0.0, 1.0, 2.0, 0.0]
        assert call["advantages"] == [-1.0, 1.0, 2.0, -2.0]
    assert run["moved"] > 0  # the parameters were updated through the credax loss


def test_turn_credit_learner_gives_per_token_advantages(worker):
    run = worker["turn_run"]
    (example,) = run["examples"]
    layout = run["layout"]
    token_turn = np.array(layout["token_turn"])
    scores = np.array(layout["scores"])
    # method = score + 10 × prompt group; rows 0, 1 are prompt 0, rows 2, 3 prompt 1.
    per_turn = scores + 10.0 * np.array([0, 0, 1, 1])[:, None]
    expected = np.where(token_turn >= 0, per_turn[np.arange(4)[:, None], np.clip(token_turn, 0, 1)], 0.0)
    np.testing.assert_allclose(example["advantages"], expected, rtol=1e-6)
    assert np.array(example["advantages"]).shape == token_turn.shape  # [B, L]
    # Tokens outside every turn (row 0, positions 4-5) left the loss.
    np.testing.assert_array_equal(example["completion_mask"],
                                  np.array(layout["completion_mask"]) & (token_turn >= 0))
    assert run["moved"] > 0

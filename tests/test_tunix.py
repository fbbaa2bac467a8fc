"""credax.tunix against the real, pinned Tunix (google-tunix 0.1.7, the `tunix` extra; CPU).

The estimators run here, side by side with Tunix's own (they are NumPy/JAX functions of
``(rewards, num_generations)``). Everything that builds Tunix models, losses and learners runs once,
in a fresh interpreter (tests/tunix_worker.py, about a minute), and is checked from its JSON.
"""

from __future__ import annotations

import inspect
import json
import pathlib
import subprocess
import sys
import warnings

import jax.numpy as jnp
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
    with pytest.raises(TypeError, match="give exactly one of `turns`"):
        ct.TurnCreditGRPOLearner(turns=None)
    with pytest.raises(TypeError, match="`turn_rewards` must be a function"):
        ct.TurnCreditGRPOLearner(turn_rewards=[1.0])


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


# --------------------------------------------------------------------------------------------
# Tunix's two GRPO conventions as presets.
# --------------------------------------------------------------------------------------------


def test_tunix_presets_are_tunix_own_formulas():
    rng = np.random.default_rng(1)
    rewards = np.round(rng.random(16), 2).astype(np.float32)
    rewards[4:8] = 0.5  # a constant group: 0 under both
    ids = np.arange(16) // 4
    core = np.asarray(credax.grpo_advantages(rewards, ids, normalization=credax.presets.TUNIX))
    np.testing.assert_allclose(core, algo_core.compute_advantages(rewards, 4), rtol=1e-5, atol=1e-6)
    # The orchestrator's GRPOAdapter.compute_advantages (not in the pinned 0.1.7), restated in
    # float64: r.reshape(-1, G); (r - r.mean(-1)) / (r.std(-1) + 1e-6), population std.
    r = rewards.astype(np.float64).reshape(-1, 4)
    adapter = ((r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True) + 1e-6)).reshape(-1)
    orch = np.asarray(credax.grpo_advantages(rewards, ids, normalization=credax.presets.TUNIX_ORCHESTRATOR))
    np.testing.assert_allclose(orch, adapter, rtol=1e-5, atol=1e-6)
    assert not np.allclose(core, orch)


def test_tunix_presets_hand_worked():
    # One group (1, 0, 1): μ = 2/3; deviations (1/3, -2/3, 1/3).
    # ddof 1: σ = sqrt((1/9 + 4/9 + 1/9) / 2) = sqrt(1/3) = 0.57735; 1/3 / σ = 0.57735.
    # ddof 0: σ = sqrt((6/9) / 3) = sqrt(2/9) = 0.47140; 1/3 / σ = 0.70711.
    r = np.array([1.0, 0.0, 1.0], np.float32)
    ids = np.zeros(3, np.int32)
    core = credax.grpo_advantages(r, ids, normalization=credax.presets.TUNIX)
    orch = credax.grpo_advantages(r, ids, normalization=credax.presets.TUNIX_ORCHESTRATOR)
    s1, s0 = (1 / 3) ** 0.5, (2 / 9) ** 0.5
    np.testing.assert_allclose(core, [(1 / 3) / (s1 + 1e-6), (-2 / 3) / (s1 + 1e-6), (1 / 3) / (s1 + 1e-6)],
                               rtol=1e-6)
    np.testing.assert_allclose(orch, [(1 / 3) / (s0 + 1e-6), (-2 / 3) / (s0 + 1e-6), (1 / 3) / (s0 + 1e-6)],
                               rtol=1e-6)


# --------------------------------------------------------------------------------------------
# Turns from Tunix's own data.
# --------------------------------------------------------------------------------------------


def test_turns_from_mask_with_holes_hand_worked():
    mask = np.array([[0, 0, 0, 1, 0, 0],     # one turn: token 3 (the hole Tunix leaves)
                     [1, 1, 0, 0, 1, 0],     # two turns: tokens 0-1, token 4
                     [0, 0, 0, 0, 0, 0],     # emptied by Tunix's overlong filter: no turn
                     [1, 1, 1, 1, 1, 1]])    # one turn, the whole completion
    t = ct.turns_from_mask(mask, [[2.0], [0.25, 0.5], [7.0, 7.0], [1.0]])
    assert t.token_turn.dtype == np.int32 and t.token_turn.tolist() == [
        [-1, -1, -1, 0, -1, -1], [0, 0, -1, -1, 1, -1], [-1] * 6, [0] * 6]
    assert t.turn_mask.tolist() == [[True, False], [True, True], [False, False], [True, False]]
    assert t.rewards.tolist() == [[2.0, 0.0], [0.25, 0.5], [0.0, 0.0], [1.0, 0.0]]
    # scores: each turn's reward (scores="reward", the default), their running total with
    # scores="total"; outcome: their sum (the emptied row's are unused).
    assert t.scores.tolist() == [[2.0, 0.0], [0.25, 0.5], [0.0, 0.0], [1.0, 0.0]]
    total = ct.turns_from_mask(mask, [[2.0], [0.25, 0.5], [7.0, 7.0], [1.0]], scores="total")
    assert total.scores.tolist() == [[2.0, 0.0], [0.25, 0.75], [0.0, 0.0], [1.0, 0.0]]
    assert t.outcome.tolist() == [2.0, 0.75, 0.0, 1.0]
    # The run-of-holes row trains at token 3 only; the emptied row at none.
    adv, narrowed = ct.turn_advantages(t, completion_mask=mask, num_generations=2, method="turn_baseline")
    assert np.asarray(narrowed).tolist() == mask.tolist() and narrowed.dtype == jnp.asarray(mask).dtype
    # turn baseline: row 0 G = (2), row 1 G = (0.75, 0.5); leave-one-out peers per turn index:
    # row 0 turn 0: 2 - 0.75 = 1.25; row 1 turn 0: 0.75 - 2 = -1.25, turn 1 has no peer: 0.5.
    # rows 2, 3: row 3's only peer (row 2) has no turn: raw G = 1; row 2 nothing.
    np.testing.assert_allclose(np.asarray(adv), [[0, 0, 0, 1.25, 0, 0], [-1.25, -1.25, 0, 0, 0.5, 0],
                                                 [0] * 6, [1.0] * 6], atol=1e-6)


@pytest.mark.parametrize("mask, rewards, error, match", [
    (np.array([[1, 0, 1]]), [[1.0]], ValueError,
     r"`turn_rewards\[0\]` has 1 rewards but row 0 .* has 2 turns"),
    (np.array([[1, 2, 0]]), [[1.0]], ValueError,
     r"`completion_mask` must hold only 0 and 1; completion_mask\[0, 1\] = 2"),
    (np.array([[1.0, 0.0]]), [[1.0]], TypeError, "`completion_mask` must be a boolean or 0/1 integer"),
    (np.array([[1, 0]]), [[float("nan")]], ValueError, r"`turn_rewards\[0\]` must be finite"),
    (np.array([[1, 0]]), [[1e39]], ValueError, r"`turn_rewards\[0\]` holds 1e\+39.*beyond float32's range"),
    (np.array([[1, 0]]), [[1.0], [1.0]], ValueError, "`turn_rewards` must have one entry per row, 1"),
    (np.array([[1, 0]]), 3.0, TypeError, "`turn_rewards` must be a sequence"),
])
def test_turns_from_mask_refuses_by_name(mask, rewards, error, match):
    with pytest.raises(error, match=match):
        ct.turns_from_mask(mask, rewards)


def _steps(*rows):
    return [[dict(assistant_tokens=list(range(a)), env_tokens=list(range(e)), reward=r) for a, e, r in row]
            for row in rows]


def test_turns_from_steps_hand_worked():
    # Row 0: step 0 = 2 model tokens + 1 env token, step 1 = 2 model tokens (cut at L = 6 after 1).
    # Row 1: one step of 3 model tokens, no env tokens.
    steps = _steps([(2, 1, 0.5), (2, 0, 0.25), (3, 0, 1.0)], [(3, 0, 1.0)])
    t = ct.turns_from_steps(steps, length=6, anchors=[["s0", "s1", "s0"], ["s0"]])
    # Row 0: tokens 0-1 turn 0, 2 env, 3-4 turn 1, 5 turn 2 (its other 2 tokens cut off).
    assert t.token_turn.tolist() == [[0, 0, -1, 1, 1, 2], [0, 0, 0, -1, -1, -1]]
    assert t.turn_mask.tolist() == [[True, True, True], [True, False, False]]
    assert t.rewards.tolist() == [[0.5, 0.25, 1.0], [1.0, 0.0, 0.0]]
    assert t.scores.tolist() == [[0.5, 0.25, 1.0], [1.0, 0.0, 0.0]] and t.outcome.tolist() == [1.75, 1.0]
    total = ct.turns_from_steps(steps, length=6, scores="total")
    assert total.scores.tolist() == [[0.5, 0.75, 1.75], [1.0, 0.0, 0.0]]
    # Anchors are densified exactly, in order of first appearance; -1 on padded turns.
    assert t.anchors.tolist() == [[0, 1, 0], [0, -1, -1]]
    # Tunix's objects work the same as the "Steps"-mode dicts.
    from tunix.rl.agentic.agents.agent_types import Step

    objects = [[Step(assistant_tokens=np.arange(a), env_tokens=np.arange(e) if e else None, reward=r)
                for a, e, r in row] for row in ([(2, 1, 0.5), (2, 0, 0.25), (3, 0, 1.0)], [(3, 0, 1.0)])]
    assert ct.turns_from_steps(objects, length=6).token_turn.tolist() == t.token_turn.tolist()
    # Checked against the completion mask Tunix built: model tokens 1, env tokens 0.
    good = np.array([[1, 1, 0, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    ct.turns_from_steps(steps, length=6, completion_mask=good)
    emptied = np.array([[0] * 6, [1, 1, 1, 0, 0, 0]])  # row 0 emptied (overlong filter): not checked
    ct.turns_from_steps(steps, length=6, completion_mask=emptied)
    wrong = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])  # token 2 of row 0 is the env's
    with pytest.raises(ValueError, match=r"do not lay out as the completion: completion_mask\[0, 2\]"):
        ct.turns_from_steps(steps, length=6, completion_mask=wrong)


@pytest.mark.parametrize("steps, kwargs, error, match", [
    ([[{"assistant_tokens": [1]}]], {}, ValueError, r"`steps\[0\]\[0\]` has no `reward`"),
    ([[{"assistant_tokens": [1], "reward": "1"}]], {}, TypeError,
     r"`steps\[0\]\[0\].reward` must be a real"),
    ([[{"assistant_tokens": [1], "reward": float("inf")}]], {}, ValueError, "must be finite"),
    ([[{"assistant_tokens": [1], "reward": 1.0}]], {"length": -1}, ValueError,
     "`length` must be a non-negative"),
    ([[{"assistant_tokens": [1], "reward": 1.0}]], {"anchors": [["a", "b"]]}, ValueError,
     r"`anchors\[0\]` must have one key per step, 1; got 2"),
    ([[{"assistant_tokens": [1], "reward": 1.0}]], {"anchors": [[float("nan")]]}, ValueError, "NaN"),
])
def test_turns_from_steps_refuses_by_name(steps, kwargs, error, match):
    with pytest.raises(error, match=match):
        ct.turns_from_steps(steps, **{"length": 4, **kwargs})


def test_named_methods_are_credax_functions_on_the_layout():
    # Two prompts × G = 2, ragged turns; each named method = the credax function on the layout.
    steps = _steps([(1, 1, 0.0), (1, 0, 1.0)], [(2, 0, 0.5)], [(1, 1, 1.0), (1, 1, 0.0), (1, 0, 0.5)],
                   [(1, 1, 0.25), (1, 0, 0.25)])
    t = ct.turns_from_steps(steps, length=6, anchors=[["a", "b"], ["a"], ["c", "d", "c"], ["c", "d"]])
    mask = (t.token_turn >= 0)
    ids = np.array([0, 0, 1, 1])
    tm = t.turn_mask
    direct = {
        "tcpo": credax.tcpo_advantages(t.scores, tm, ids).advantages,
        "mt_grpo": credax.mt_grpo_advantages(t.rewards, t.outcome, tm, ids),
        "gigpo": credax.gigpo_advantages(t.outcome, t.rewards, t.anchors, tm, ids),
        "turn_baseline": credax.unbiased_turn_advantages(t.rewards, tm, ids),
    }
    assert set(direct) == set(ct.TURN_METHODS)
    for name, per_turn in direct.items():
        adv, _ = ct.turn_advantages(t, completion_mask=mask, num_generations=2, method=name)
        expected = np.where(t.token_turn >= 0, np.asarray(per_turn)[np.arange(4)[:, None],
                                                                     np.clip(t.token_turn, 0, None)], 0.0)
        np.testing.assert_allclose(np.asarray(adv), expected, rtol=1e-6, err_msg=name)
    # A layout with scores only (the three-tuple form) cannot feed the reward methods.
    bare = ct.TurnLayout(scores=t.scores, turn_mask=tm, token_turn=t.token_turn)
    with pytest.raises(ValueError, match="method 'mt_grpo' needs the turns' rewards and outcome"):
        ct.turn_advantages(bare, completion_mask=mask, num_generations=2, method="mt_grpo")
    no_anchor = ct.turns_from_steps(steps, length=6)
    with pytest.raises(ValueError, match="method 'gigpo' needs the turns' anchors: give anchors="):
        ct.turn_advantages(no_anchor, completion_mask=mask, num_generations=2, method="gigpo")
    with pytest.raises(ValueError, match="`method` must be one of"):
        ct.turn_advantages(t, completion_mask=mask, num_generations=2, method="gae")


# --------------------------------------------------------------------------------------------
# #37: the host arrays credax.tunix receives are checked before its own conversions; what
# `method` returns is checked. Before the fix, int64 2**32, bool scores, a mask value 3 and the
# three bad method outputs ran on (zeros or NaN advantages), `method=3` crashed ("'int' object is
# not callable") and 1e39 was reported as inf; float token_turn and NaN scores were caught
# already (kept as regressions).
# --------------------------------------------------------------------------------------------

_MASK = np.ones((2, 2), bool)


def _call(scores=None, turn_mask=None, token_turn=None, method="tcpo", completion_mask=_MASK):
    scores = np.zeros((2, 1)) if scores is None else scores
    turn_mask = np.ones((2, 1), bool) if turn_mask is None else turn_mask
    token_turn = np.zeros((2, 2), np.int32) if token_turn is None else token_turn
    return ct.turn_advantages(scores, turn_mask, token_turn, completion_mask=completion_mask,
                              num_generations=2, method=method)


@pytest.mark.parametrize("kwargs, error, match", [
    # int64 token_turn 2**32 wrapped to 0 under jnp.asarray (a valid turn): silently accepted.
    (dict(token_turn=np.full((2, 2), 2**32, np.int64)), ValueError,
     r"`token_turn` holds 4294967296 at index \(0, 0\), outside int32.*would wrap"),
    (dict(token_turn=np.zeros((2, 2))), TypeError, "`token_turn` must be an integer array"),
    (dict(scores=np.array([[np.nan], [0.0]])), ValueError,
     r"`scores` must be finite .* scores\[0, 0\] = nan"),
    (dict(scores=np.array([[1e39], [0.0]])), ValueError,
     r"`scores` holds 1e\+39 at index \(0, 0\).*beyond float32's range"),
    (dict(scores=np.array([[True], [False]])), TypeError, "`scores` must be a real"),
    (dict(completion_mask=np.array([[1, 3], [1, 1]])), ValueError,
     "`completion_mask` must hold only 0 and 1"),
    (dict(method=lambda s, m, g: s[:, :0]), ValueError,
     r"`method` <lambda> must return \[B, K\] = \(2, 1\)"),
    (dict(method=lambda s, m, g: np.zeros((2, 1), np.int32)), TypeError, "must return floating advantages"),
    (dict(method=lambda s, m, g: s / 0.0), ValueError,
     r"returned a non-finite advantage on a valid turn: \[0, 0\]"),
    (dict(method=3), TypeError, "`method` must be a name of TURN_METHODS or a function"),
])
def test_turn_advantages_probes(kwargs, error, match):
    with pytest.raises(error, match=match):
        _call(**kwargs)


def test_scores_at_padded_turns_never_matter():
    # NaN on a padded turn is allowed (credax's convention); only valid turns are checked.
    adv, _ = _call(scores=np.array([[0.0, np.nan], [1.0, np.nan]]), turn_mask=np.array([[True, False]] * 2))
    assert np.isfinite(np.asarray(adv)).all()


# Before the fix all three non-finite cases returned [nan, nan]; bools were refused already.
@pytest.mark.parametrize("rewards, match", [
    (np.array([0.0, np.nan]), r"`rewards` must be finite .* rewards\[1\] = nan"),
    (np.array([0.0, np.inf]), "`rewards` must be finite"),
    (np.array([0.0, 1e39]), "beyond float32's range"),
    (np.array([True, False]), "`rewards` must be a 1-D real array"),
])
def test_estimator_rewards_probes(rewards, match):
    with pytest.raises(ValueError, match=match):
        ct.grpo(rewards, 2)


def test_turn_rewards_learner_needs_no_layout(worker):
    # TurnCreditGRPOLearner(turn_rewards=) on the tiny cluster: the turns are the completion
    # mask's runs; row b's one turn has reward b; turn baseline over G = 2:
    # A_i = r_i - r_j for the pair (i, j) of a prompt (r_i when j has no turn).
    run = worker["turn_rewards_run"]
    mask = np.array(run["mask"], bool)
    has = mask.any(axis=1)
    r = np.arange(4, dtype=np.float64)
    per_row = np.array([r[i] - r[i ^ 1] if has[i ^ 1] else r[i] for i in range(4)])
    np.testing.assert_allclose(run["advantages"], np.where(mask, per_row[:, None], 0.0), atol=1e-6)
    assert has.all() and run["rewards"] == [[0.0], [1.0], [2.0], [3.0]]  # every row had its turn
    np.testing.assert_array_equal(run["completion_mask"], mask.astype(int))
    assert run["moved"] > 0


def test_agentic_learner_trains_on_per_step_rewards(worker):
    # Tunix's own agentic GRPOLearner on a 3-turn environment; the engine's per-step token counts
    # and rewards reach credax's turn baseline (float64 NumPy reference) per token.
    from tests.reference import turn_baseline as ref

    run = worker["agentic_run"]
    assert run["groups"] and run["moved"] > 0
    multi_turn = False
    for group in run["groups"]:
        steps = group["steps"]
        length = len(group["advantages"][0])
        k = max(len(s) for s in steps)
        multi_turn |= k > 1
        token_turn = np.full((2, length), -1)
        rewards, turn_mask = np.zeros((2, k)), np.zeros((2, k), bool)
        for b, row in enumerate(steps):
            pos = 0
            for t, (n_model, n_env, reward) in enumerate(row):
                token_turn[b, pos:pos + n_model] = t
                pos += n_model + n_env
                rewards[b, t], turn_mask[b, t] = reward, True
            # Tunix's trajectory reward is the sum of its step rewards.
            assert group["trajectory_reward"][b] == pytest.approx(sum(s[2] for s in row))
            # Tunix's own mask marks exactly the model's tokens (1) among the environment's (0).
            tunix_mask = np.array(group["tunix_mask"][b][:length], bool)
            np.testing.assert_array_equal(tunix_mask, token_turn[b, :len(tunix_mask)] >= 0)
        per_turn = ref.unbiased_turn_advantages(rewards, turn_mask, np.zeros(2, int))
        at_token = per_turn[np.arange(2)[:, None], np.clip(token_turn, 0, None)]
        expected = np.where(token_turn >= 0, at_token, 0.0)
        np.testing.assert_allclose(group["advantages"], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(group["completion_mask"], (token_turn >= 0).astype(int))
        # The state each step acted on: the reset observation, then each step's observation.
        assert all(len(s) == len(row) for s, row in zip(group["states"], steps, strict=True))
    assert multi_turn  # at least one trajectory took more than one turn


# #44 item 7: Tunix's agentic learner fed TCPO the running totals of the step rewards (up to 1.42
# and more on TinyTurnsEnv, whose rewards are per-turn scores in [0, 1]); TCPO is defined on
# per-turn verifier scores in [0, 1], where its regression and preservation terms have their scale.
def _agentic_steps():
    # Two trajectories of TinyTurnsEnv-like steps: each reward is the share of new words (a score
    # of the turn in [0, 1]); running totals 0.8, 1.5, 2.1 and 0.6, 1.1.
    return _steps([(2, 1, 0.8), (2, 1, 0.7), (1, 0, 0.6)], [(2, 1, 0.6), (2, 0, 0.5)])


def test_tcpo_gets_the_per_turn_scores_from_the_steps():
    steps = _agentic_steps()
    layout = ct.turns_from_steps(steps, length=9)
    np.testing.assert_allclose(layout.scores, [[0.8, 0.7, 0.6], [0.6, 0.5, 0.0]], rtol=1e-6)
    # What the learner trains on is TCPO of those scores, per token.
    mask = (layout.token_turn >= 0).astype(int)
    adv, _ = ct.learners.group_advantages(steps, [["a"] * 3, ["a"] * 2], mask)
    tm = layout.turn_mask
    per_turn = np.asarray(credax.tcpo_advantages(layout.scores, tm, np.zeros(2, np.int32)).advantages)
    expected = np.where(layout.token_turn >= 0,
                        per_turn[np.arange(2)[:, None], np.clip(layout.token_turn, 0, None)], 0.0)
    np.testing.assert_allclose(np.asarray(adv), expected, atol=1e-6)


def test_tcpo_refuses_scores_off_its_scale_by_name():
    # The running totals (scores="total") leave [0, 1] here: refused with the way out, not trained
    # on the wrong scale (a drop 1.5 -> 0.6 read as a regression of 0.9).
    steps = _agentic_steps()
    total = ct.turns_from_steps(steps, length=9, scores="total")
    mask = (total.token_turn >= 0).astype(int)
    with pytest.raises(ValueError, match=r"method 'tcpo' reads per-turn verifier scores in \[0, 1\]; "
                                         r"scores\[0, 1\] = 1\.5\. .*scores='reward'"):
        ct.turn_advantages(total, completion_mask=mask, num_generations=2, method="tcpo")
    with pytest.raises(ValueError, match="method 'tcpo' reads per-turn verifier scores"):
        ct.learners.group_advantages(steps, None, mask, scores="total")
    # The reward methods read the rewards, whatever the scores.
    ct.turn_advantages(total, completion_mask=mask, num_generations=2, method="turn_baseline")
    with pytest.raises(ValueError, match=r"`scores` must be one of \('reward', 'total'\)"):
        ct.turns_from_steps(steps, length=9, scores="running")
    assert inspect.signature(ct.AgenticTurnCreditGRPOLearner.__init__).parameters[
        "scores"].default == "reward"


def test_rollouts_from_tunix_objects():
    # Tunix 0.1.7's own dataclasses (numpy tokens, an enum status, prompt_tokens set by the
    # engine as an attribute) read as their JSON form reads.
    from tunix.rl.agentic.agents import agent_types as at

    steps = [at.Step(assistant_tokens=np.array([4, 5]), env_tokens=np.array([9]), reward=np.float32(0.5),
                     logprobs=np.array([-0.5, -1.0])),
             at.Step(assistant_tokens=np.array([6]), reward=0.25, logprobs=np.array([-0.25]))]
    traj = at.Trajectory(steps=steps, reward=0.75, status=at.TrajectoryStatus.SUCCEEDED)
    traj.prompt_tokens = np.array([1, 2, 3])
    item = at.TrajectoryItem(pair_index=1, group_id=12, start_step=0, traj=traj, metadata={})
    (r,) = credax.rollouts_from_tunix([item])
    assert r.prompt_id == 12 and list(r.prompt) == [1, 2, 3] and r.outcome == 0.75
    assert [list(t.action) for t in r.turns] == [[4, 5], [6]]
    assert [list(t.observation) for t in r.turns] == [[9], []]
    assert [t.score for t in r.turns] == [0.5, 0.75] and [t.reward for t in r.turns] == [0.5, 0.25]
    assert [list(t.logprobs) for t in r.turns] == [[-0.5, -1.0], [-0.25]]
    assert r.meta["status"] == "SUCCEEDED" and r.meta["pair_index"] == 1


def test_a_credax_estimator_as_method_gives_its_advantages():
    # Issue 44 item 9 (round 4's class 12): method=credax.tcpo_advantages returns a TCPO
    # NamedTuple, and NumPy answered "inhomogeneous shape". Its .advantages are taken (the same as
    # method="tcpo"); another tuple is refused by name.
    steps = _steps([(1, 1, 0.0), (1, 0, 1.0)], [(2, 0, 0.5)], [(1, 1, 1.0), (1, 0, 0.5)],
                   [(1, 1, 0.25), (1, 0, 0.25)])
    t = ct.turns_from_steps(steps, length=6)
    mask = t.token_turn >= 0
    named, _ = ct.turn_advantages(t, completion_mask=mask, num_generations=2, method="tcpo")
    given, _ = ct.turn_advantages(t, completion_mask=mask, num_generations=2,
                                  method=credax.tcpo_advantages)
    np.testing.assert_allclose(np.asarray(given), np.asarray(named), rtol=1e-6)
    with pytest.raises(TypeError, match="must return one .* array of advantages; got a tuple"):
        ct.turn_advantages(t, completion_mask=mask, num_generations=2,
                           method=lambda s, m, g: (s, s))

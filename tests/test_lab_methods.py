"""The lab's credit methods built on credax's newer estimators (shrinkage baselines, HGPO, the
value baseline through credax.gae_advantages), on hand-worked batches and an independent NumPy
James–Stein reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from benchmarks.lab import methods as M
from benchmarks.lab.policy import Rollout
from tests.reference import estimators as ref


def context(scores, turn_mask, outcome, group_ids, *, values=None, anchors=None):
    """A Context holding only what the outcome/step methods read."""
    scores = jnp.asarray(scores, jnp.float32)
    B, K = scores.shape
    zeros = jnp.zeros((B, K), jnp.int32)
    r = Rollout(obs=None, tokens=None, logp=None, token_mask=None,
                turn_mask=jnp.asarray(turn_mask, bool), scores=scores, roles=zeros,
                anchors=zeros if anchors is None else jnp.asarray(anchors, jnp.int32), before=None)
    g = jnp.asarray(group_ids, jnp.int32)
    groups = credax.groups(g, num_groups=int(g.max()) + 1)
    vals = jnp.zeros((B, K), jnp.float32) if values is None else jnp.asarray(values, jnp.float32)
    return M.Context(r, groups, jnp.asarray(outcome, jnp.float32), vals, None, None,
                     jax.random.key(0))


S = M.Settings()


def test_value_baseline_is_outcome_minus_value_on_real_turns():
    # γ = λ = 1 GAE with the return on the last real turn: A_k = outcome − V_k; padded turns 0.
    ctx = context(np.zeros((2, 3)), [[True, True, False], [True, True, True]], [1.0, 0.5], [0, 0],
                  values=[[0.2, 0.4, 0.9], [0.1, 0.3, 0.6]])
    np.testing.assert_allclose(M.value_baseline(ctx, S), [[0.8, 0.6, 0.0], [0.4, 0.2, -0.1]],
                               atol=1e-6)


def test_outcome_rewards_put_the_return_on_the_last_real_turn():
    out = M.outcome_rewards(jnp.asarray([[True, True, False], [True, False, False]]),
                            jnp.asarray([0.7, -0.2]))
    np.testing.assert_allclose(out, [[0.0, 0.7, 0.0], [-0.2, 0.0, 0.0]])


def test_shrinkage_hand_case_on_every_real_turn():
    # Four prompts of two, rewards (1,1 | 0,1 | 0,0 | 1,0): prompt means μ = (1, .5, 0, .5),
    # grand mean .5, Σ(μ_p − .5)² = .5, pooled within variance (0 + .5 + 0 + .5)/4 = .25,
    # c = (P − 3)(σ²/n)/Σ(μ_p − μ̄)² = 1 · .125/.5 = .25, b = .5 + .75(μ_p − .5)
    # = (.875, .5, .125, .5), A = r − b.
    r = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    mask = np.ones((8, 2), bool)
    mask[3, 1] = False
    ctx = context(np.zeros((8, 2)), mask, r, [0, 0, 1, 1, 2, 2, 3, 3])
    want = np.asarray([0.125, 0.125, -0.5, 0.5, -0.125, -0.125, 0.5, -0.5])
    got = np.asarray(M.shrink(ctx, S))
    np.testing.assert_allclose(got, np.where(mask, want[:, None], 0.0), atol=1e-6)
    # Leave-one-out: m_p = 1, c = 1 · .25/.5 = .5; the others' mean of each row:
    # (1,1 | 1,0 | 0,0 | 0,1) -> b = .5 + .5(μ̂ − .5) = (.75,.75 | .75,.25 | .25,.25 | .25,.75).
    loo = np.asarray([0.25, 0.25, -0.75, 0.75, -0.25, -0.25, 0.75, -0.75])
    np.testing.assert_allclose(M.shrink_rloo(ctx, S), np.where(mask, loo[:, None], 0.0), atol=1e-6)


@pytest.mark.parametrize("loo", [False, True])
def test_shrinkage_methods_match_the_numpy_reference(loo):
    # The lab's advantage is r - b, b the positive-part James–Stein baseline (tests/reference).
    rng = np.random.default_rng(3)
    for _ in range(5):
        g = np.repeat(np.arange(8), 8)
        r = (rng.random(8)[g] + 0.6 * rng.random(64)).astype(np.float32)
        ctx = context(np.zeros((64, 4)), np.ones((64, 4), bool), r, g)
        got = np.asarray((M.shrink_rloo if loo else M.shrink)(ctx, S))[:, 0]
        baseline, _, _ = ref.shrinkage_baseline(r, g, leave_one_out=loo)
        np.testing.assert_allclose(got, r.astype(np.float64) - baseline, atol=2e-5)


def test_hgpo_hand_case_with_the_verl_agent_preset():
    # One prompt, three trajectories, two turns, no turn cost (outcome = final score). Score
    # changes (0, 1), (0, 0), (0, .5); anchors: all start in state 1, then states 2, 2, 3.
    # Preset: history 2 (levels k = 1, 2, 3), γ = .95, weights (k + 1), population std.
    # Turn 1: G = (1, 0, .5). k = 1 (state 2) and k = 2 (states 1→2) hold rows 0, 1: ±1 each;
    # row 2 is a singleton at both levels (abstains); k = 3 needs three observations (none).
    # A = (2·1 + 3·1)/5 = 1 for row 0, −1 for row 1, 0 for row 2.
    # Turn 0: G = (.95, 0, .475), only k = 1 (state 1, all rows): mean .475, std .475·√(2/3):
    # A = (√1.5, −√1.5, 0).
    ctx = context([[0.0, 1.0], [0.0, 0.0], [0.0, 0.5]], np.ones((3, 2), bool), [1.0, 0.0, 0.5],
                  [0, 0, 0], anchors=[[1, 2], [1, 2], [1, 3]])
    want = [[np.sqrt(1.5), 1.0], [-np.sqrt(1.5), -1.0], [0.0, 0.0]]
    np.testing.assert_allclose(M.hgpo(ctx, S), want, atol=1e-4)


def test_hgpo_step_rewards_carry_the_turn_cost_and_padded_turns_get_zero():
    # Two trajectories of one prompt, costs 0.1 per turn: returns 1 − .2 = .8 and .5 − .1 = .4
    # (the second stops after one turn). The last real turn's step reward carries the costs:
    # rows' step rewards (0 + 0, 1 − .2) and (.5 − .1, pad). Turn 0 (state 1 both): G with
    # γ = .95 is (.95·.8, .4) = (.76, .4): ±1 after the population-std z-score (k = 1 only).
    ctx = context([[0.0, 1.0], [0.5, 0.5]], [[True, True], [True, False]], [0.8, 0.4], [0, 0],
                  anchors=[[1, 2], [1, 9]])
    got = np.asarray(M.hgpo(ctx, S))
    np.testing.assert_allclose(got[:, 0], [1.0, -1.0], atol=1e-4)
    assert got[1, 1] == 0.0  # padded
    assert got[0, 1] == 0.0  # a singleton at every level of turn 1: no informative level


def test_turn_baseline_is_return_to_go_against_the_other_rollouts_at_that_turn():
    # One prompt of three rollouts; scores after each turn, turn cost 0.1 (outcome = final score
    # - 0.1 * turns). Row 0: [0.5, 1.0] (2 turns, outcome 0.8); row 1: [0.5] (1 turn, 0.4);
    # row 2: [0.0, 0.5] (2 turns, 0.3). Step rewards r_k = Δscore - 0.1:
    # row 0 [0.4, 0.4], row 1 [0.4], row 2 [-0.1, 0.4]; returns to go G: row 0 [0.8, 0.4],
    # row 1 [0.4], row 2 [0.3, 0.4]. Turn 0 peers: all three; leave-one-out means
    # (0.4+0.3)/2 = .35, (.8+.3)/2 = .55, (.8+.4)/2 = .6 -> A = [.45, -.15, -.3]. Turn 1 peers:
    # rows 0 and 2 only (row 1 stopped): A = 0.4 - 0.4 = 0 for both.
    mask = [[True, True], [True, False], [True, True]]
    ctx = context([[0.5, 1.0], [0.5, 0.0], [0.0, 0.5]], mask, [0.8, 0.4, 0.3], [0, 0, 0])
    np.testing.assert_allclose(M.turn_baseline(ctx, S), [[0.45, 0.0], [-0.15, 0.0], [-0.3, 0.0]],
                               atol=1e-6)


def test_turn_baseline_with_the_past_return_added_back_is_the_outcome_against_peers_at_that_turn():
    # The same batch as above: outcomes R = (0.8, 0.4, 0.3). Turn 0 peers: all three, leave-one-out
    # means (.35, .55, .6) -> A = [.45, -.15, -.3] (turn 0 has no past: as turn_baseline). Turn 1
    # peers: rows 0 and 2; row 0: 0.8 - 0.3 = .5, row 2: 0.3 - 0.8 = -.5 (turn_baseline gave 0
    # to both: their returns to go at turn 1 are equal, their pasts 0.4 and -0.1 differ).
    mask = [[True, True], [True, False], [True, True]]
    ctx = context([[0.5, 1.0], [0.5, 0.0], [0.0, 0.5]], mask, [0.8, 0.4, 0.3], [0, 0, 0])
    got = M.turn_baseline_outcome(ctx, S)
    np.testing.assert_allclose(got, [[0.45, 0.5], [-0.15, 0.0], [-0.3, -0.5]], atol=1e-6)
    # The difference from turn_baseline is the row's past return minus its peers' mean past.
    past = np.asarray([[0.0, 0.4], [0.0, 0.0], [0.0, -0.1]])
    peers_past = np.asarray([[0.0, -0.1], [0.0, 0.0], [0.0, 0.4]])
    np.testing.assert_allclose(np.asarray(got) - np.asarray(M.turn_baseline(ctx, S)),
                               np.where(mask, past - peers_past, 0.0), atol=1e-6)


def test_gpg_and_reinforce_pp_baseline_on_every_real_turn():
    # Two prompts of two, returns (1, 0 | 1, 1): centred (.5, -.5 | 0, 0); GPG's α = 4 rows /
    # 3 nonzero returns: A = (2/3, -2/3, 0, 0) on every real turn.
    mask = np.ones((4, 2), bool)
    mask[1, 1] = False
    ctx = context(np.zeros((4, 2)), mask, [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    want = np.asarray([2 / 3, -2 / 3, 0.0, 0.0])
    np.testing.assert_allclose(M.gpg(ctx, S), np.where(mask, want[:, None], 0.0), atol=1e-6)
    # REINFORCE++-baseline whitens the centred returns over the 7 valid turns: values
    # (.5, .5, -.5, 0, 0, 0, 0), mean 1/14, unbiased variance Σ(x - 1/14)² / 6.
    x = np.asarray([0.5, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0])
    z = (x - x.mean()) / np.sqrt(x.var(ddof=1) + 1e-8)
    got = np.asarray(M.reinforce_pp_baseline(ctx, S))
    np.testing.assert_allclose(got[mask], z, atol=1e-5)
    assert np.all(got[~mask] == 0.0)


def test_faca_reads_the_score_change_as_the_reaction_and_none_on_the_last_turn():
    # One prompt, three rollouts of two turns, no turn cost (outcome = final score 1, .5, .5):
    # Â^O: mean 2/3, unbiased std 1/√12 -> 2/√3, -1/√3, -1/√3. Score changes (.5, .5), (0, .5),
    # (.5, 0); turn 0 has the reaction (turn 1 is the last: none): .5, 0, .5 -> mean 1/3, std
    # 1/√12 -> 1/√3, -2/√3, 1/√3. A = Â^O + Â^R on turn 0, Â^O on turn 1.
    ctx = context([[0.5, 1.0], [0.0, 0.5], [0.5, 0.5]], np.ones((3, 2), bool), [1.0, 0.5, 0.5],
                  [0, 0, 0])
    u = 1 / np.sqrt(3)
    np.testing.assert_allclose(M.faca(ctx, S), [[3 * u, 2 * u], [-3 * u, -u], [0.0, -u]],
                               atol=1e-4)


@pytest.mark.parametrize("name", ["g2po", "faca", "reinforce_pp", "reinforce_pp_baseline", "gpg"])
def test_variant_methods_trace_under_jit_and_zero_the_padding(name):
    # The lab traces every method under jit and vmap; each must give finite [B, K] credit, 0 on
    # padded turns (whatever the padding holds), with a real signal on the real turns.
    mask = np.array([[True, True, False], [True, False, False], [True, True, True], [True, True, False]])
    scores = np.where(mask, [[0.2, 0.6, 0.0], [1.0, 0.0, 0.0], [0.0, 0.4, 1.0], [0.5, 0.5, 0.0]], np.nan)
    anchors = [[1, 2, 9], [1, 9, 9], [3, 4, 5], [3, 4, 9]]
    ctx = context(scores, mask, [0.6, 1.0, 1.0, 0.5], [0, 0, 1, 1], anchors=anchors)
    method = M.VARIANTS[name]
    batched = jax.tree.map(lambda x: x[None], ctx)
    out = np.asarray(jax.jit(jax.vmap(lambda c: method.credit(c, S)))(batched)[0])
    assert out.shape == (4, 3) and np.all(np.isfinite(out))
    assert np.all(out[~mask] == 0.0) and np.any(out[mask] != 0.0)

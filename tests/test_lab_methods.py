"""The lab's credit methods built on credax's newer estimators (shrinkage baselines, HGPO, the
value baseline through credax.gae_advantages), on hand-worked batches and an independent NumPy
James–Stein reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from benchmarks.quality import methods as M
from benchmarks.quality.policy import Rollout


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


def js_reference(r, g, loo):
    """Positive-part James–Stein baseline in plain NumPy (the formula of arXiv 2511.03710 as
    credax's shrinkage_baseline documents it), written independently of credax."""
    ids = np.unique(g)
    P = len(ids)
    mu = np.array([r[g == p].mean() for p in ids])
    n = np.array([(g == p).sum() for p in ids])
    grand = mu.mean()
    within = sum(((r[g == p] - mu[i]) ** 2).sum() for i, p in enumerate(ids)) / (n - 1).sum()
    spread = ((mu - grand) ** 2).sum()
    out = np.empty_like(r)
    for i, p in enumerate(ids):
        rows = np.flatnonzero(g == p)
        m = n[i] - 1 if loo else n[i]
        c = np.clip((P - 3) * (within / m) / spread, 0.0, 1.0)
        for j in rows:
            others = (r[rows].sum() - r[j]) / (n[i] - 1) if loo else mu[i]
            out[j] = r[j] - (grand + (1 - c) * (others - grand))
    return out


@pytest.mark.parametrize("loo", [False, True])
def test_shrinkage_methods_match_an_independent_numpy_reference(loo):
    rng = np.random.default_rng(3)
    for _ in range(5):
        g = np.repeat(np.arange(8), 8)
        r = (rng.random(8)[g] + 0.6 * rng.random(64)).astype(np.float32)
        ctx = context(np.zeros((64, 4)), np.ones((64, 4), bool), r, g)
        got = np.asarray((M.shrink_rloo if loo else M.shrink)(ctx, S))[:, 0]
        np.testing.assert_allclose(got, js_reference(r.astype(np.float64), g, loo), atol=2e-5)


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

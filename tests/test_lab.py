"""The credit lab's parts on hand-worked inputs: the ground-truth estimator on states whose value
is worked out by hand, the credit metrics, the gradient statistics and the controls' machinery."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from benchmarks.lab import env as E
from benchmarks.lab import groundtruth as GT
from benchmarks.lab import metrics as X
from benchmarks.lab import refine as R
from benchmarks.lab.checkpoint import gradient_stats
from benchmarks.lab.methods import shuffle_valid

BIG = 50.0  # a bias that makes one token certain (exp(-50) is below float32 resolution)


def zero_policy(task, hidden=8):
    """A policy with every weight and bias 0: each slot is uniform over its possible tokens."""
    model = task.policy(hidden, rngs=nnx.Rngs(params=0))
    for _, v in nnx.iter_graph(model):
        if isinstance(v, nnx.Param):
            v[...] = jnp.zeros_like(v[...])
    return model


def one_state(task, **fields):
    """The reset state of one episode with some fields overwritten, fields ``[1, ...]``."""
    s = task.reset(jnp.asarray([fields.pop("target")], jnp.int32))
    return s._replace(**{k: jnp.asarray([v]) for k, v in fields.items()})


PROBE = E.Task(length=2, alphabet=3, turns=3)
TARGET = [2, 1]


def probe_tokens(kind, pos=0, val=0):
    return jnp.asarray([[kind, PROBE.pos_offset + pos, PROBE.val_offset + val]], jnp.int32)


def test_solved_answer_under_a_stop_only_policy_has_exact_values():
    # Target [2, 1], answer [2, 1] (score 1), turn 1 of 3. The policy always stops (type bias),
    # so V = 1 (stop keeps score 1; no turn cost on the probe task). Logged "stop": Q = 1, A* = 0.
    # Logged "write position 0 := 0": the answer becomes [0, 1], score 1/2, then the policy stops:
    # Q = 1/2, A* = -1/2. Every branch is deterministic: SE = 0.
    model = zero_policy(PROBE)
    model.type_head.bias[...] = jnp.asarray([BIG, -BIG, -BIG])
    s = one_state(PROBE, target=TARGET, answer=[2, 1], turn=1, score=1.0)
    key = jax.random.key(0)
    held = GT.estimate(model, s, probe_tokens(E.STOP), key, 16)
    broken = GT.estimate(model, s, probe_tokens(E.WRITE, 0, 0), key, 16)
    assert float(held.advantage[0]) == 0.0 and float(held.se[0]) == 0.0
    assert float(held.q[0]) == 1.0 and float(held.v[0]) == 1.0
    assert float(broken.advantage[0]) == -0.5 and float(broken.se[0]) == 0.0


def test_one_turn_left_under_a_uniform_policy_matches_the_hand_value():
    # Target [2, 1], answer [2, blank] (score 1/2), turn 2 of 3: one action left, then the end.
    # Uniform policy: type 1/3 each; position 1/2 each; value 1/3 each.
    #   stop, probe: score stays 1/2.
    #   write pos 0: value 2 keeps 1/2 (1/3), else 0 (2/3)          -> E = 1/6
    #   write pos 1: value 1 solves it, 1 (1/3), else still 1/2 (2/3) -> E = 2/3
    #   V = (1/2 + 1/2 + (1/6 + 2/3) / 2) / 3 = 17/36.
    # Logged "write pos 1 := 1": Q = 1, so A* = 1 - 17/36 = 19/36.
    # The V-branch return is 1 w.p. 1/18, 0 w.p. 1/9, 1/2 otherwise: Var = 4.75/18 - (17/36)^2.
    model = zero_policy(PROBE)
    s = one_state(PROBE, target=TARGET, answer=[2, PROBE.blank], turn=2, score=0.5)
    n = 4000
    gt = GT.estimate(model, s, probe_tokens(E.WRITE, 1, 1), jax.random.key(1), n)
    sd = math.sqrt(4.75 / 18 - (17 / 36) ** 2)
    assert abs(float(gt.se[0]) - sd / math.sqrt(n)) < 0.1 * sd / math.sqrt(n)
    assert abs(float(gt.advantage[0]) - 19 / 36) < 4 * float(gt.se[0])
    assert float(gt.q[0]) == 1.0
    assert abs(float(gt.v[0]) - 17 / 36) < 4 * float(gt.se[0])


def test_refinement_task_deterministic_policy_and_turn_cost():
    # Refinement, L=2, V=3, K=2, cost 0.1 per turn. Target [2, 1]; after turn 1 the submitted
    # answer [2, 1] passes both tests (score 1). The policy always submits [0, 0] (score 0).
    # Logged "stop": final score 1 after 2 turns, R = 1 - 0.2 = 0.8. The policy's own action:
    # R = 0 - 0.2 = -0.2. A* = 0.8 - (-0.2) = 1.0 exactly; logged = the policy's action: A* = 0.
    task = R.RefineTask(length=2, alphabet=3, turns=2, turn_cost=0.1)
    model = zero_policy(task)
    model.type_head.bias[...] = jnp.asarray([-BIG, BIG])
    model.val_out.bias[...] = jnp.asarray([BIG, -BIG, -BIG])
    s = one_state(task, target=TARGET, answer=[2, 1], turn=1, score=1.0)
    stop = jnp.asarray([[R.STOP, R.NUM_TYPES, R.NUM_TYPES]], jnp.int32)
    own = jnp.asarray([[R.SUBMIT, R.NUM_TYPES + 0, R.NUM_TYPES + 0]], jnp.int32)
    key = jax.random.key(2)
    a = GT.estimate(model, s, stop, key, 8)
    b = GT.estimate(model, s, own, key, 8)
    assert math.isclose(float(a.q[0]), 0.8, abs_tol=1e-6) and math.isclose(float(a.v[0]), -0.2, abs_tol=1e-6)
    assert math.isclose(float(a.advantage[0]), 1.0, abs_tol=1e-6) and float(a.se[0]) == 0.0
    assert float(b.advantage[0]) == 0.0 and float(b.se[0]) == 0.0


def test_refinement_step_roles_and_failed_candidates():
    task = R.RefineTask(length=2, alphabet=3, turns=4)
    s = task.reset(jnp.asarray([TARGET], jnp.int32))
    sub = lambda a, b: jnp.asarray([[R.SUBMIT, R.NUM_TYPES + a, R.NUM_TYPES + b]], jnp.int32)
    s, i1 = task.step(s, sub(2, 0))  # one test passes: 0 -> 1/2, decisive; (1, 0) fails
    assert float(i1.score[0]) == 0.5 and int(i1.role[0]) == E.DECISIVE
    assert bool(s.failed[0, 1, 0]) and int(s.failed.sum()) == 1
    s, i2 = task.step(s, sub(2, 2))  # same score, new failing candidate: exploration
    assert int(i2.role[0]) == E.EXPLORATION
    s, i3 = task.step(s, sub(2, 2))  # resubmitted: no progress
    assert int(i3.role[0]) == E.NO_PROGRESS
    s, i4 = task.step(s, sub(0, 2))  # breaks the passing test: regression, and K=4 ends it
    assert float(i4.score[0]) == 0.0 and int(i4.role[0]) == E.REGRESSION and bool(s.done[0])


def test_sample_pairs_draws_distinct_valid_turns():
    mask = jnp.asarray([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]], bool)
    rows, turns, used = GT.sample_pairs(mask, jax.random.key(3), 8)
    rows, turns, used = np.asarray(rows), np.asarray(turns), np.asarray(used)
    assert used.sum() == 6  # 6 valid turns, 8 slots
    picked = {(int(r), int(t)) for r, t, u in zip(rows, turns, used, strict=True) if u}
    assert picked == {(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (2, 2)}


# --- metrics on hand-worked inputs ----------------------------------------------------------------


def test_pearson_and_spearman_hand_values():
    # x = 1..4, y = [1, 3, 2, 4]: centred products sum to 2.25 - .25 - .25 + 2.25 = 4 over
    # sqrt(5 * 5): r = 0.8. The ranks equal the values, so Spearman = 0.8 as well.
    assert math.isclose(X.pearson([1, 2, 3, 4], [1, 3, 2, 4]), 0.8)
    assert math.isclose(X.spearman([1, 2, 3, 4], [10, 30, 20, 40]), 0.8)
    assert math.isclose(X.spearman([1, 2, 3], [1, 8, 27]), 1.0)  # monotone: 1 whatever the shape
    assert X.ranks([10, 20, 20, 30]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert math.isnan(X.pearson([1, 1, 1], [1, 2, 3]))


def test_sign_agreement_threshold_and_zero_credit():
    # |A*| > 2 SE = 0.2 for the first three pairs; signs agree on the first only (the third's
    # credit is 0, a disagreement): 1/3 of 3 pairs.
    frac, n = X.sign_agreement([1.0, -1.0, 0.0, 5.0], [0.5, 0.5, -0.5, 0.01], [0.1] * 4)
    assert n == 3 and math.isclose(frac, 1 / 3)
    assert math.isnan(X.sign_agreement([1.0], [0.0], [1.0])[0])


def test_affine_mse():
    assert X.affine_mse([0, 1, 2], [1, 3, 5]) == pytest.approx(0.0, abs=1e-12)  # A* = 1 + 2c
    # Unrelated credit: the best fit is the mean of A*, the MSE its variance 1/4.
    assert X.affine_mse([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.25)
    # Scale and shift of the credit do not matter.
    c, a = np.array([0.3, -1.0, 2.0, 0.5]), np.array([0.1, -0.4, 0.3, 0.2])
    assert X.affine_mse(c, a) == pytest.approx(X.affine_mse(10 * c - 3, a))


def test_role_cells():
    role = [E.DECISIVE, E.DECISIVE, E.REGRESSION, E.NO_PROGRESS]
    success = [True, True, True, False]
    a = [0.4, 0.2, -0.6, 0.0]
    c = [2.0, 1.0, -3.0, 0.0]  # exactly 5 x A*: the rescaled credit equals A* in every cell
    cells = X.role_cells(role, success, a, c)
    d = cells["decisive/success"]
    assert d["n"] == 2 and d["a_star"] == pytest.approx(0.3) and d["credit"] == pytest.approx(1.5)
    assert d["credit_rescaled"] == pytest.approx(0.3)
    assert cells["regression/success"]["a_star"] == pytest.approx(-0.6)
    assert cells["exploration/failure"]["n"] == 0 and math.isnan(cells["exploration/failure"]["a_star"])


def test_triage_theory_hand_values():
    # A* = [1, -1], σ = 1, GRPO = [0, 0] -> δ = [1, -1]. Roles decisive (c = 1), regression
    # (c = -0.5): c̄ = 0.25, Cov = (0.75·1 + (-0.75)·(-1)) / 2 = 0.75; λ* = (1 + 0.5) / 1.25 = 1.2;
    # MSE change at λ = 0.2: ((0.8)² + (-0.9)²) / 2 - 1 = -0.275.
    t = X.triage_theory([1.0, -1.0], 1.0, [0.0, 0.0], [0, 3], lam=0.2)
    assert t["cov"] == pytest.approx(0.75)
    assert t["lambda_star"] == pytest.approx(1.2)
    assert t["mse_change"] == pytest.approx(-0.275)


def test_triage_lambda_star_agrees_with_credax():
    import credax

    rng = np.random.default_rng(0)
    delta, roles = rng.normal(size=40), rng.integers(0, 4, size=40)
    ours = X.triage_theory(delta, 1.0, np.zeros(40), roles)["lambda_star"]
    theirs = float(credax.optimal_mixing_weight(jnp.asarray(delta, jnp.float32)[None],
                                                jnp.asarray(roles, jnp.int32)[None],
                                                jnp.ones((1, 40), bool)))
    assert theirs == pytest.approx(ours, rel=1e-5)


def test_bootstrap_interval_stays_in_range():
    mean, lo, hi = X.bootstrap_interval([0.0, 0.0, 0.0, 1.0, 1.0])
    assert mean == pytest.approx(0.4) and 0.0 <= lo <= mean <= hi <= 1.0
    assert X.bootstrap_interval([0.7]) == (0.7, None, None)
    assert X.bootstrap_interval([float("nan")]) == (None, None, None)
    s = X.summarize([1.0, float("nan"), 1.0])
    assert s["n"] == 2 and s["interval"] == [1.0, 1.0] and s["per_seed"][1] is None


def test_gradient_stats_hand_case():
    # Two pairs in different rows, orthogonal unit gradients: G = I. Credit [1, 0] against
    # A* = [1, 1]: cos = 1/sqrt(2). Bootstrap over B = 2 rows: the count of row 0 is 2, 1, 0 with
    # probabilities 1/4, 1/2, 1/4, g_b - g = (c_0 - 1)·e_0: E||.||² = 1/2, relative to ||g||² = 1.
    gram = jnp.eye(2)
    cos, relvar = gradient_stats(gram, jnp.asarray([[1.0, 0.0]]), jnp.asarray([1.0, 1.0]),
                                 jnp.asarray([0, 1]), jnp.asarray([True, True]), 2)
    assert float(cos[0]) == pytest.approx(1 / math.sqrt(2))
    assert float(relvar[0]) == pytest.approx(0.5)
    # Both pairs in one row: resampling moves them together, Var(c_0) = 1 - 1/B with B = 2
    # trajectories in the batch: E||(c_0 - 1)(e_0 + e_1)||² = 1/2 · 2 = 1, relative to 2: 1/2.
    _, rv = gradient_stats(gram, jnp.asarray([[1.0, 1.0]]), jnp.asarray([1.0, 1.0]),
                           jnp.asarray([0, 0]), jnp.asarray([True, True]), 2)
    assert float(rv[0]) == pytest.approx(0.5)


def test_shuffle_valid_is_a_permutation_uncorrelated_with_the_input():
    mask = jnp.asarray(np.arange(60).reshape(6, 10) % 10 < 7)  # 42 valid turns
    x = jnp.where(mask, jnp.arange(60, dtype=jnp.float32).reshape(6, 10), 0.0)
    corrs = []
    for i in range(200):
        y = np.asarray(shuffle_valid(x, mask, jax.random.key(i)))
        assert np.all(y[~np.asarray(mask)] == 0.0)
        assert sorted(y[np.asarray(mask)].tolist()) == sorted(np.asarray(x)[np.asarray(mask)].tolist())
        corrs.append(X.pearson(y[np.asarray(mask)], np.asarray(x)[np.asarray(mask)]))
    # Each correlation has sd 1/sqrt(41) ~ 0.16; their mean over 200 draws has sd ~ 0.011.
    assert abs(float(np.mean(corrs))) < 0.05


def test_refinement_policy_candidate_logits_equal_the_concatenated_linear_map():
    # RefinePolicy computes val_in([h, local]) as h·W_h (once per row) + local·W_local + b; the
    # reference is the plain nnx.Linear on the concatenation, h repeated at every position.
    task = R.RefineTask()
    model = task.policy(16, rngs=nnx.Rngs(params=0))
    obs = jax.random.uniform(jax.random.key(1), (5, task.obs_dim))
    L, V = task.length, task.alphabet
    h = model.trunk(obs)
    answer = obs[:, : L * (V + 1)].reshape(5, L, V + 1)
    passed = obs[:, L * (V + 1): L * (V + 2)].reshape(5, L, 1)
    failed = obs[:, L * (V + 2): L * (2 * V + 2)].reshape(5, L, V)
    local = jnp.concatenate([jnp.broadcast_to(h[:, None], (5, L, 16)),
                             jnp.broadcast_to(jnp.eye(L), (5, L, L)), answer, passed, failed], -1)
    want = model.val_out(jax.nn.relu(model.val_in(local)))
    np.testing.assert_allclose(model._logits(obs)[1], want, atol=1e-5)


def test_inverse_cdf_draws_each_token_with_its_softmax_probability():
    # logits log([0.5, 0.3, 0.2, 0]) (the last token impossible): u on an even grid of 10_000
    # points must land on token j exactly a p_j share of the time (up to the grid's 1e-4 step),
    # and never on the zero-probability token, even for u just below 1.
    from benchmarks.lab.policy import inverse_cdf

    p = np.array([0.5, 0.3, 0.2, 0.0])
    logits = jnp.asarray(np.log(np.maximum(p, 1e-30)), jnp.float32)
    u = (jnp.arange(10_000, dtype=jnp.float32) + 0.5) / 10_000
    draws = np.asarray(inverse_cdf(jnp.broadcast_to(logits, (10_000, 4)), u))
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / 10_000, p, atol=2e-4)
    top = inverse_cdf(logits[None], jnp.asarray([np.nextafter(np.float32(1), np.float32(0))]))
    assert int(top[0]) == 2
    # A certain token (the others at the policy's large negative logit) is drawn for every u.
    certain = jnp.asarray([-1e9, BIG, -1e9], jnp.float32)
    assert set(np.asarray(inverse_cdf(jnp.broadcast_to(certain, (10_000, 3)), u))) == {1}


def test_sampling_draws_follow_the_policy_and_share_common_random_numbers():
    # The refinement policy's slots under a seeded random model: the empirical token frequencies
    # of 20_000 draws match the model's own softmax within 5 standard errors, and the same noise
    # at the same observation gives the same tokens (what the ground truth's branch pairs rely on).
    from benchmarks.lab.policy import sampling_noise

    task = R.RefineTask(length=2, alphabet=3, turns=3)
    model = task.policy(8, rngs=nnx.Rngs(params=3))
    obs = jax.random.uniform(jax.random.key(2), (1, task.obs_dim))
    n = 20_000
    noise = sampling_noise(task, jax.random.key(4), (n,))
    tokens, _ = model.sample(jnp.broadcast_to(obs, (n, task.obs_dim)), noise)
    type_lg, val_lg = model._logits(obs)
    for slot, lg in [(0, type_lg[0]), (1, val_lg[0, 0]), (2, val_lg[0, 1])]:
        offset = 0 if slot == 0 else R.NUM_TYPES
        p = np.asarray(jax.nn.softmax(lg))
        freq = np.bincount(np.asarray(tokens[:, slot]) - offset, minlength=p.size) / n
        np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / n) + 1e-9)
    again, _ = model.sample(jnp.broadcast_to(obs, (n, task.obs_dim)), noise)
    np.testing.assert_array_equal(tokens, again)


# --- the ceiling's credit: the true advantage averaged over N branch pairs ------------------------


def _copies(task, state, tokens, copies):
    """``copies`` rows of one turn each holding ``state`` and the logged ``tokens``: [B, 1, ...]."""
    before = jax.tree.map(lambda x: jnp.broadcast_to(x[:, None], (copies, 1, *x.shape[1:])), state)
    return before, jnp.broadcast_to(tokens[:, None], (copies, 1, tokens.shape[-1]))


def test_per_turn_estimate_averages_n_pairs_to_the_hand_value_with_variance_over_n():
    # The one-turn-left state above: logged "write pos 1 := 1" solves it, so every Q-branch
    # returns exactly 1 and d = 1 - R_V with R_V = 1 w.p. 1/18, 0 w.p. 1/9, 1/2 otherwise:
    # E[d] = 19/36 and Var(d) = 4.75/18 - (17/36)^2 (hand values, as above). Each row's N-pair
    # estimate is a mean of N independent d's: mean 19/36, variance Var(d)/N.
    model = zero_policy(PROBE)
    s = one_state(PROBE, target=TARGET, answer=[2, PROBE.blank], turn=2, score=0.5)
    copies = 4000
    before, tokens = _copies(PROBE, s, probe_tokens(E.WRITE, 1, 1), copies)
    mask = jnp.ones((copies, 1), bool)
    var = 4.75 / 18 - (17 / 36) ** 2
    for n in (1, 4, 16):
        est = np.asarray(GT.per_turn_estimate(model, before, tokens, mask, jax.random.key(n), n))[:, 0]
        assert abs(est.mean() - 19 / 36) < 4 * math.sqrt(var / n / copies)
        # The sample variance of 4000 draws has a relative sd of about sqrt(2 / 4000) = 2.2%.
        assert abs(est.var(ddof=1) / (var / n) - 1) < 0.12, (n, est.var(ddof=1), var / n)
    # Padded turns are 0 whatever they hold.
    half = jnp.asarray(np.arange(copies) % 2 == 0)[:, None]
    est = np.asarray(GT.per_turn_estimate(model, before, tokens, half, jax.random.key(0), 4))
    assert np.all(est[1::2] == 0.0) and np.all(est[0::2] != 0.0)


def test_per_turn_estimate_is_exact_on_a_deterministic_state_for_every_n():
    # The stop-only policy of the first test: breaking the solved answer is worth exactly -1/2.
    model = zero_policy(PROBE)
    model.type_head.bias[...] = jnp.asarray([BIG, -BIG, -BIG])
    s = one_state(PROBE, target=TARGET, answer=[2, 1], turn=1, score=1.0)
    before, tokens = _copies(PROBE, s, probe_tokens(E.WRITE, 0, 0), 3)
    for n in (1, 4, 16):
        est = GT.per_turn_estimate(model, before, tokens, jnp.ones((3, 1), bool), jax.random.key(5), n)
        np.testing.assert_array_equal(np.asarray(est), -0.5)


def test_true_advantage_control_trains_on_its_own_estimate_scaled_to_unit_rms():
    from benchmarks.lab import methods as M

    n_pairs = M.METHODS["true_adv"].oracle
    assert n_pairs == 1 and M.VARIANTS["true_adv_n16"].oracle == 16
    assert M.METHODS["true_adv"].control and not M.METHODS["grpo"].control


# --- the metrics added to explain learning, on hand-worked inputs ---------------------------------


def test_pairwise_rank_accuracy_hand_case():
    # Row 0 holds pairs 0, 1, 2; row 1 holds pairs 3, 4. A* = [.5, .1, .3 | .2, .2], SE 0.01:
    # row 0's three pairs all differ clearly; row 1's pair ties (gap 0) and is not counted.
    # Credit [3, 1, 2 | ...] orders (0,1), (0,2), (1,2) right: 3 of 3. Credit [1, 1, 2]: (0,1)
    # ties (1/2), (0,2) wrong, (1,2) right: (0.5 + 0 + 1) / 3 = 0.5.
    a = [0.5, 0.1, 0.3, 0.2, 0.2]
    se = [0.01] * 5
    row = [0, 0, 0, 1, 1]
    assert X.pairwise_rank_accuracy([3, 1, 2, 9, 0], a, se, row) == (1.0, 3)
    assert X.pairwise_rank_accuracy([1, 1, 2, 0, 9], a, se, row) == (0.5, 3)
    # An outcome advantage ties every turn of a rollout: exactly chance.
    assert X.pairwise_rank_accuracy([7, 7, 7, 1, 1], a, se, row) == (0.5, 3)
    # Gaps inside the noise are not counted: with SE 0.2, |.5 - .1| = .4 < 2·sqrt(.08) = .57.
    assert math.isnan(X.pairwise_rank_accuracy([3, 1, 2, 9, 0], a, [0.2] * 5, row)[0])


def test_residual_bias_hand_case():
    # A* = [1, -1, 1, -1] on roles [D, R, E, E]; credit = A* + 0.5 on the two exploration turns
    # (a shaping bonus): c = [1, -1, 1.5, -0.5]. Fit c on A*: mean c = 0.25, mean A* = 0,
    # b = mean(A*·(c - .25)) / Var(A*) = (0.75 + 1.25 + 1.25 + 0.75)/4 / 1 = 1.0; a = 0.25.
    # Residuals c - 0.25 - A* = [-.25, -.25, .25, .25]; sd(c) = sqrt(mean((c - .25)²)) =
    # sqrt((.5625 + 1.5625 + 1.5625 + .5625)/4) = sqrt(1.0625).
    a = np.array([1.0, -1.0, 1.0, -1.0])
    c = np.array([1.0, -1.0, 1.5, -0.5])
    role = np.array([0, 3, 1, 1])
    sd = math.sqrt(1.0625)
    assert X.residual_bias(c, a, role == 1) == pytest.approx(0.25 / sd)
    assert X.residual_bias(c, a, role == 0) == pytest.approx(-0.25 / sd)
    # The count-weighted biases of a partition sum to 0.
    parts = [(role == r) for r in (0, 1, 3)]
    assert sum(p.sum() * X.residual_bias(c, a, p) for p in parts) == pytest.approx(0.0, abs=1e-12)
    # Credit = A* exactly: no bias anywhere; a constant credit: NaN (no scale to express it in).
    assert X.residual_bias(a, a, role == 1) == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(X.residual_bias(np.ones(4), a, role == 1))


def test_pearson_where_needs_three_pairs():
    assert X.pearson_where([1, 2, 3, 9], [1, 2, 3, 0], [True, True, True, False]) == pytest.approx(1.0)
    assert math.isnan(X.pearson_where([1, 2, 3], [1, 2, 3], [True, True, False]))


def test_across_method_rank_correlation_hand_cases():
    # Three methods, two seeds. A metric that orders the methods exactly as their success does in
    # every seed: ρ = 1 and every bootstrap resample also gives 1.
    metric = [[0.1, 0.2], [0.5, 0.6], [0.9, 0.8]]
    success = [[0.0, 0.1], [0.4, 0.5], [0.7, 0.9]]
    assert X.across_method_rank_correlation(metric, success) == (1.0, 1.0, 1.0)
    # Reversed: -1.
    rho, lo, hi = X.across_method_rank_correlation(metric, [s[::-1] for s in success[::-1]])
    assert (rho, lo, hi) == (-1.0, -1.0, -1.0)
    # Means over seeds [0.15, 0.55, 0.85] vs success means [0.5, 0.0, 1.0]: ranks (1,2,3) vs
    # (2,1,3): centred (-1,0,1) and (0,-1,1), Σ products 1 over sqrt(2·2): Spearman 0.5.
    rho, _, _ = X.across_method_rank_correlation(metric, [[0.5, 0.5], [0.0, 0.0], [1.0, 1.0]])
    assert rho == pytest.approx(0.5)


def test_batch_gradient_stats_against_an_explicit_bootstrap():
    # Independent check of the exact bootstrap formula: draw 20000 resamples of the B = 3
    # trajectories with replacement and measure the gradient's variance directly.
    from benchmarks.lab.checkpoint import batch_gradient_stats

    rng = np.random.default_rng(0)
    B, K, D = 3, 2, 4
    jac = rng.normal(size=(B * K, D)).astype(np.float32)
    credit = rng.normal(size=(1, B * K)).astype(np.float32)
    pairs, a_star = np.array([0, 3, 5]), np.array([0.5, -0.2, 0.3])
    snr, t = batch_gradient_stats(jac, credit, pairs, a_star, B)
    u = (credit[0].reshape(B, K, 1) * jac.reshape(B, K, D)).sum(axis=1).astype(np.float64)  # [B, D]
    U = u.sum(axis=0)
    counts = rng.multinomial(B, [1 / B] * B, size=20000)  # [R, B]
    boot = counts @ u  # [R, D]
    var = np.mean(np.sum((boot - U) ** 2, axis=1))
    assert snr[0] == pytest.approx(U @ U / var, rel=0.05)
    g = a_star @ jac[pairs].astype(np.float64)
    x = boot @ (g / np.linalg.norm(g))
    assert t[0] == pytest.approx((U @ g / np.linalg.norm(g)) / np.std(x), rel=0.05)


def test_shuffled_roles_keep_each_rollouts_labels():
    from benchmarks.lab import methods as M

    roles = jnp.asarray([[0, 1, 2, 3, 9], [1, 1, 0, 7, 7]], jnp.int32)
    mask = jnp.asarray([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], bool)
    moved = 0
    for i in range(40):
        out = np.asarray(M.shuffled_roles(roles, mask, jax.random.key(i)))
        assert out[0, 4] == -1 and list(out[1, 3:]) == [-1, -1]
        assert sorted(out[0, :4]) == [0, 1, 2, 3] and sorted(out[1, :3]) == [0, 1, 1]
        moved += int(list(out[0, :4]) != [0, 1, 2, 3])
    assert moved > 30  # a permutation of 4 is the identity 1 time in 24

"""The lab's exact tier (benchmarks/lab/exact.py): backward induction against hand-worked values and
a brute-force enumeration of trajectories, the exact policy gradient against finite differences,
the unbiased estimators' expected gradients equal to ∇J, and the committed table rebuilt from the
committed JSON."""

import json

import numpy as np
import pytest

from benchmarks.lab import exact as X
from benchmarks.lab import methods as M
from benchmarks.lab.example_credit import progress_credit


def _tier(name, theta=None, group=2):
    mdp = X.build(X.MDPS[name]())
    if theta is None:
        theta = np.zeros((mdp.num_obs, mdp.spec.actions))
    return X.prepare(mdp, theta, group)


def _state(mdp, s):
    return mdp.states.index(s)


def test_delayed_effect_by_hand_at_the_uniform_policy():
    # J = P(first = good) = 1/2. Q(s0, good) = 1, Q(s0, bad) = 0, V(s0) = 1/2: A = ±1/2. The
    # distractor turns cannot change the final score: A = 0 there. ∂J/∂θ[s0, b] = π_b·A_b = ±1/4.
    t = _tier("delayed")
    mdp, sol = t.mdp, t.sol
    s0 = _state(mdp, (0, None))
    assert sol.j == pytest.approx(0.5)
    np.testing.assert_allclose(sol.adv[s0], [0.5, -0.5])
    for s in [(1, 0), (1, 1), (2, 0), (2, 1)]:
        np.testing.assert_allclose(sol.adv[_state(mdp, s)], [0.0, 0.0], atol=1e-15)
    grad = np.zeros_like(sol.grad)
    grad[mdp.obs[s0]] = [0.25, -0.25]
    np.testing.assert_allclose(sol.grad, grad, atol=1e-15)


def test_information_gathering_by_hand_at_the_uniform_policy():
    # Actions (probe, answer 0, answer 1), each 1/3. With the bit revealed at turn 2 (the last):
    # probe ends with 0, the right answer 1, the wrong 0: V = 1/3, A = (−1/3, 2/3, −1/3) for h = 0.
    # Turn 1, revealed: Q = (1/3, 1, 0), V = 4/9. Turn 0: Q = (4/9, 1, 0) for h = 0, V = 13/27, so
    # A(probe) = 4/9 − 13/27 = −1/27: at the uniform policy the probe is (slightly) a mistake.
    t = _tier("probe")
    mdp, sol = t.mdp, t.sol
    np.testing.assert_allclose(sol.adv[_state(mdp, (0, 2, 0, None))], [-1 / 3, 2 / 3, -1 / 3])
    np.testing.assert_allclose(sol.q[_state(mdp, (0, 1, 0, None))], [1 / 3, 1.0, 0.0])
    np.testing.assert_allclose(sol.adv[_state(mdp, (0, 0, None, None))],
                               [4 / 9 - 13 / 27, 1 - 13 / 27, -13 / 27])
    assert sol.j == pytest.approx(13 / 27)


def _returns(t):
    """Return of every enumerated trajectory and its return to go from each turn, from the
    trajectory's own scores (no value function)."""
    c = t.mdp.spec.turn_cost
    n = t.tr.mask.sum(axis=1)
    final = t.tr.scores[np.arange(len(n)), n - 1]
    prev = np.concatenate([np.zeros((len(n), 1)), t.tr.scores[:, :-1]], axis=1)
    reward = np.where(t.tr.mask, t.tr.scores - prev - c, 0.0)
    togo = np.cumsum(reward[:, ::-1], axis=1)[:, ::-1]
    return final - c * n, togo


@pytest.mark.parametrize("name", list(X.MDPS))
def test_backward_induction_matches_brute_force_enumeration(name):
    # At a random policy: J is the probability-weighted mean return of the enumerated
    # trajectories, and Q(s, a) the mean return to go of those that took a at s.
    mdp = X.build(X.MDPS[name]())
    theta = np.random.default_rng(0).normal(size=(mdp.num_obs, mdp.spec.actions))
    t = X.prepare(mdp, theta, 2)
    w = t.tr.prob * mdp.prompt_p[t.tr.prompt]
    assert w.sum() == pytest.approx(1.0)
    ret, togo = _returns(t)
    assert t.sol.j == pytest.approx(float(w @ ret), abs=1e-12)
    checked = 0
    for s in range(len(mdp.states)):
        for a in range(mdp.spec.actions):
            at = t.tr.mask & (t.tr.state == s) & (t.tr.action == a)
            rows, turns = np.nonzero(at)
            if rows.size:
                q = np.sum(w[rows] * togo[rows, turns]) / np.sum(w[rows])
                assert t.sol.q[s, a] == pytest.approx(q, abs=1e-12)
                checked += 1
    assert checked >= mdp.spec.actions


@pytest.mark.parametrize("name", list(X.MDPS))
def test_exact_gradient_matches_finite_differences_of_the_enumerated_return(name):
    mdp = X.build(X.MDPS[name]())
    theta = np.random.default_rng(1).normal(size=(mdp.num_obs, mdp.spec.actions))

    def j(th):  # by enumeration, not by backward induction
        t = X.prepare(mdp, th, 1)
        return float((t.tr.prob * mdp.prompt_p[t.tr.prompt]) @ _returns(t)[0])

    h = 1e-6
    fd = np.zeros_like(theta)
    for i in np.ndindex(theta.shape):
        e = np.zeros_like(theta)
        e[i] = h
        fd[i] = (j(theta + e) - j(theta - e)) / (2 * h)
    np.testing.assert_allclose(X.solve(mdp, theta).grad, fd, atol=1e-8)


def test_batches_enumerate_every_ordered_group_with_its_probability():
    t = _tier("probe", group=2)
    n_per_prompt = [int(np.sum(t.tr.prompt == p)) for p in range(2)]
    assert len(t.bt.prob) == sum(n * n for n in n_per_prompt)
    assert t.bt.prob.sum() == pytest.approx(1.0)
    # every batch's rows share a prompt
    assert np.all(t.tr.prompt[t.bt.idx[:, 0]] == t.tr.prompt[t.bt.idx[:, 1]])


def test_midway_policy_is_between_the_uniform_policy_and_the_ascent():
    mdp = X.build(X.MDPS["stop"]())
    cps = X.checkpoints(mdp)
    assert np.all(cps["uniform"] == 0)
    j0, jm = X.solve(mdp, cps["uniform"]).j, X.solve(mdp, cps["midway"]).j
    assert jm > j0


_BY_NAME = {m.name: m for m in X.METHODS}


@pytest.mark.parametrize("name", ["stop", "probe"])
def test_unbiased_estimators_have_the_exact_gradient_as_expectation(name):
    # RLOO, the turn-count-unbiased turn baseline, the exact-value baseline and the exact
    # advantage itself are unbiased: with the sequence-sum aggregation E[ĝ] = ∇J (float32 credit).
    # Dr. GRPO centres on a mean that includes the row: E[ĝ] = (G − 1)/G · ∇J.
    t = _tier(name, group=2)
    for m in ("rloo", "turn_baseline", "value", "exact"):
        s = X.evaluate(t, _BY_NAME[m])
        assert s["bias"] < 1e-5, (m, s)
        assert s["cos_sum"] == pytest.approx(1.0, abs=1e-6)
    dr = X.evaluate(t, _BY_NAME["dr_grpo"])
    assert dr["scale"] == pytest.approx(0.5, abs=1e-5)
    assert dr["bias"] == pytest.approx(0.5, abs=1e-5)
    # and GRPO's std scaling is a bias: E[ĝ] is not ∇J (a test that can fail)
    assert X.evaluate(t, _BY_NAME["grpo"])["bias"] > 0.05


def test_identification_scores_by_hand_on_the_delayed_effect():
    # The exact advantage control: RMSE 0, sign accuracy 1, no mass on the zero-advantage turns.
    # GRPO gives every turn of a row the row's outcome advantage: with G = 2 its credit is ±1 on
    # the rows of a mixed pair and 0 on a tied pair, so 2/3 of its mass (two of three turns) is on
    # the distractors (A = 0) and its sign agrees with A on every mixed pair (P = 1/2): the turns
    # with A ≠ 0 of tied pairs get 0 credit (wrong): sign accuracy 1/2.
    t = _tier("delayed", group=2)
    ex = X.evaluate(t, _BY_NAME["exact"])
    assert ex["rmse"] == pytest.approx(0.0, abs=1e-7) and ex["sign"] == 1.0
    assert ex["zero_mass"] == pytest.approx(0.0)
    g = X.evaluate(t, _BY_NAME["grpo"])
    assert g["zero_mass"] == pytest.approx(2 / 3, abs=1e-6)
    assert g["sign"] == pytest.approx(0.5, abs=1e-6)


def test_user_rows_score_a_credit_function_with_the_lab_protocol():
    lines = X.user_rows(progress_credit, "progress", group=2, mdps=("delayed",))
    assert len(lines) == 2 and all(line.startswith("progress exact delayed/") for line in lines)
    assert "cos" in lines[0] and "sign" in lines[0]


def test_the_lab_adapters_used_are_the_lab_methods():
    # The tier reuses methods.py's adapters: a method of the same name is the same credit.
    t = _tier("recovery", group=2)
    b = X.jax.tree.map(lambda x: x[t.bt.idx[5]], t.turns)
    ctx = X.context(b, t.mdp.spec.units)
    np.testing.assert_allclose(X.METHODS[0].credit(b, t.mdp.spec.units), M.grpo(ctx, M.Settings()))


def test_committed_table_is_what_the_code_makes_from_the_committed_json():
    record = json.loads((X.RESULTS / "exact.json").read_text())
    assert (X.RESULTS / "exact.md").read_text() == X.render(record) + "\n"
    assert set(record["mdps"]) == set(X.MDPS)
    assert set(record["methods"]) == {m.name for m in X.METHODS}


def test_a_float32_zero_credit_is_a_zero_for_the_sign_accuracy():
    # Issue 44 item 12: exactly-zero credit comes out of float32 as ±1e-8, whose np.sign matched
    # A's sign half the time. By hand: credits 1e-8, -1e-8 and 0 are zero credits (wrong against
    # any nonzero A); 0.5 against A = 0.1 agrees, -2e-6 (above the tolerance) against -0.3 too.
    c = np.array([1e-8, -1e-8, 0.0, 0.5, -2e-6])
    a = np.array([0.3, -0.2, 0.1, 0.1, -0.3])
    np.testing.assert_array_equal(X.sign_agrees(c, a), [False, False, False, True, True])
    assert X.CREDIT_ZERO == 1e-6

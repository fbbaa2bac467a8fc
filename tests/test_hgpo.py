"""HGPO: level-weighted normalised returns over history groups nested in the prompt.

Ground truth: the loop of ``tests/reference/estimators.py::hgpo`` (explicit member lists per step
and level), verl-agent's ``hgpo_advantage_estimate`` re-stated in NumPy
(``tests/reference/peer_forms.py``; it needs torch and verl to run), a hand-worked golden, the
prompt-nesting guarantee. Padding, row permutation and masked zeros are tests/test_dogfood.py's
sweeps.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from tests.reference import estimators as ref
from tests.reference import peer_forms as peer

# Dyadic rewards with γ = 0.5 keep every return exact, so a constant group has an exactly
# representable mean in any summation order (the peer's float mean then has no residue either).
DYADIC = np.array([0.0, 1.0, 0.5, 0.25, -1.0])


def random_hgpo_batch(rng, batch=6, num_turns=4, num_states=3, dyadic=True):
    lengths = rng.integers(0, num_turns + 1, size=batch)
    lengths[0] = num_turns
    mask = np.arange(num_turns)[None, :] < lengths[:, None]
    ids = rng.choice([-3, 0, 7], size=batch).astype(np.int32)
    anchors = rng.integers(0, num_states, size=(batch, num_turns)).astype(np.int32)
    values = DYADIC if dyadic else np.array([0.0, 1.0, 0.35, 1 / 3, 0.95])
    steps = rng.choice(values, size=(batch, num_turns))
    outcome = rng.choice(values, size=batch)
    steps[~mask] = np.nan
    anchors[~mask] = 99  # garbage in padding never matters
    return outcome, steps, anchors, mask, ids


def test_golden():
    # One prompt, three trajectories, H = 1, γ = 1, eps = 0, α = 1 (weights 2 for k=1, 3 for k=2):
    #   anchors (1,2), (1,2), (1,3); step rewards (0,1), (0,0), (0,.5) -> returns (1,1), (0,0), (.5,.5)
    #   turn 0, k=1 (state 1): (1, 0, .5), μ=.5, population σ=.4082 -> (1.2247, -1.2247, 0)
    #   turn 1, k=1: state 2 -> (1, 0): ±1; state 3: singleton (abstains); k=2: (2,1) -> ±1
    #   advantages: turn 1 = (2·1 + 3·1)/5 = 1; the third trajectory: nothing votes -> 0.
    steps = jnp.array([[0.0, 1.0], [0.0, 0.0], [0.0, 0.5]])
    anchors = jnp.array([[1, 2], [1, 2], [1, 3]])
    out = credax.hgpo_advantages(jnp.zeros(3), steps, anchors, jnp.ones((3, 2), bool),
                                 jnp.zeros(3, int), history=1, gamma=1.0,
                                 normalization=credax.Normalization(ddof=0, eps=0.0))
    s = 1.5 ** 0.5
    np.testing.assert_allclose(out.advantages, [[s, 1.0], [-s, -1.0], [0.0, 0.0]], atol=1e-5)
    # The third trajectory sits exactly at its turn-0 group mean (0: abstains) and is alone at turn 1.
    np.testing.assert_array_equal(out.informative[2], np.zeros((2, 3), bool))
    np.testing.assert_array_equal(out.informative[0], [[False, True, False], [False, True, True]])


def test_matches_reference_loop():
    rng = np.random.default_rng(0)
    for case in range(40):
        outcome, steps, anchors, mask, ids = random_hgpo_batch(rng, dyadic=case % 2 == 0)
        kw = dict(history=int(rng.integers(0, 3)), gamma=float(rng.choice([0.5, 0.95])),
                  alpha=float(rng.choice([0.0, 1.0, 2.0])), episode_group=bool(case % 3 == 0),
                  episode_pooling=["trajectory", "step"][case % 2])
        norm = dict(scale="group" if case % 4 != 1 else "none", ddof=int(case % 5 == 0))
        got = credax.hgpo_advantages(outcome, steps, anchors, mask, ids, **kw,
                                     normalization=credax.Normalization(**norm))
        adv, levels, inform = ref.hgpo(outcome, steps, anchors, mask, ids, **kw, **norm)
        np.testing.assert_allclose(got.advantages, adv, atol=2e-5)
        np.testing.assert_allclose(got.levels, np.where(mask[..., None], levels, 0), atol=2e-5)
        np.testing.assert_array_equal(got.informative, inform)


def verl_agent_max_diff(cases=200, seed=1):
    """credax with the preset vs verl-agent's HGPO (also with base_group and mean_norm)."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for case in range(cases):
        outcome, steps, anchors, mask, ids = random_hgpo_batch(rng)
        base_group = case % 2 == 1
        mode = "mean_norm" if case % 3 == 2 else "mean_std_norm"
        preset = credax.presets.hgpo_verl_agent.keywords
        norm = preset["normalization"].replace(scale="group" if mode == "mean_std_norm" else "none")
        kw = dict(preset, gamma=0.5, episode_group=base_group, normalization=norm)
        got = np.asarray(credax.hgpo_advantages(outcome, steps, anchors, mask, ids, **kw).advantages)
        g = ref.discounted_returns(steps, mask, 0.5)
        rows = [(b, t) for b in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[b, t]]
        want = peer.verl_agent_hgpo(
            [outcome[b] for b, _ in rows], [g[b, t] for b, t in rows], [anchors[b, t] for b, t in rows],
            [ids[b] for b, _ in rows], [b for b, _ in rows], history_length=kw["history"],
            epsilon=norm.eps, mode=mode, length_weight_alpha=kw["alpha"], base_group=base_group)
        worst = max(worst, float(np.max(np.abs(np.array([got[b, t] for b, t in rows]) - want))))
    return worst


def test_parity_with_verl_agent():
    assert verl_agent_max_diff(cases=40) < 1e-5


def test_identical_observations_in_different_prompts_never_pool():
    # Two prompts, each with two trajectories through the very same observations (1, 2). Within a
    # prompt the returns differ; pooled over the batch the groups would have four members.
    steps = jnp.array([[0.0, 1.0], [0.0, 0.0], [0.0, 0.25], [0.0, 0.5]])
    anchors = jnp.array([[1, 2], [1, 2], [1, 2], [1, 2]])
    mask = jnp.ones((4, 2), bool)
    both = credax.hgpo_advantages(jnp.zeros(4), steps, anchors, mask, jnp.array([5, 5, 6, 6]),
                                  history=1, gamma=1.0)
    for rows, ids in (([0, 1], [5, 5]), ([2, 3], [6, 6])):
        alone = credax.hgpo_advantages(jnp.zeros(2), steps[jnp.array(rows)], anchors[:2], mask[:2],
                                       jnp.array(ids), history=1, gamma=1.0)
        np.testing.assert_allclose(both.advantages[jnp.array(rows)], alone.advantages, atol=1e-6)
    # Within each prompt a pair: ±1 at every level; pooled over four rows it would not be ±1.
    np.testing.assert_allclose(np.abs(both.advantages), 1.0, atol=1e-5)


def test_history_zero_is_gigpo_grouping_with_population_std():
    # H = 0, α = 0: one level (the anchor group of GiGPO); with ddof=1 and eps equal, the nonzero
    # step advantages equal GiGPO's step part (ω = 1 minus the episode part).
    rng = np.random.default_rng(3)
    outcome, steps, anchors, mask, ids = random_hgpo_batch(rng)
    h = credax.hgpo_advantages(outcome, steps, anchors, mask, ids, history=0,
                               normalization=credax.Normalization(ddof=1, eps=1e-6), gamma=0.95)
    gig = credax.gigpo_advantages(outcome, steps, anchors, mask, ids, gamma=0.95, omega=1.0)
    episode = credax.gigpo_advantages(outcome, steps, anchors, mask, ids, gamma=0.95, omega=0.0)
    step_part = np.asarray(gig) - np.asarray(episode)
    # HGPO divides by (w + eps) with w = 1: a factor 1/(1 + 1e-6) of GiGPO's step advantage.
    np.testing.assert_allclose(np.asarray(h.advantages) * (1 + 1e-6), step_part, atol=1e-5)


def test_jit_and_errors():
    rng = np.random.default_rng(4)
    outcome, steps, anchors, mask, ids = random_hgpo_batch(rng)
    f = jax.jit(lambda a: credax.hgpo_advantages(outcome, steps, anchors, mask, ids, alpha=a).advantages)
    np.testing.assert_allclose(f(2.0), credax.hgpo_advantages(outcome, steps, anchors, mask, ids,
                                                              alpha=2.0).advantages, atol=1e-6)
    with pytest.raises(ValueError, match="`history`"):
        credax.hgpo_advantages(outcome, steps, anchors, mask, ids, history=-1)
    with pytest.raises(ValueError, match="`episode_pooling`"):
        credax.hgpo_advantages(outcome, steps, anchors, mask, ids, episode_pooling="batch")
    with pytest.raises(TypeError, match="`anchor_ids`"):
        credax.hgpo_advantages(outcome, steps, anchors.astype(float), mask, ids)
    # scale, ddof and eps are one `normalization=` value now; the loose keywords name it
    for key, value in (("scale", "none"), ("ddof", 1), ("eps", 0.0)):
        with pytest.raises(TypeError, match=rf"'{key}'(.|\n)*normalization=credax\.Normalization"):
            credax.hgpo_advantages(outcome, steps, anchors, mask, ids, **{key: value})
    with pytest.raises(TypeError, match="normalization"):
        credax.hgpo_advantages(outcome, steps, anchors, mask, ids, normalization={"ddof": 0})
    # a history group of one abstains: only singleton="zero" is accepted
    with pytest.raises(ValueError, match="singleton"):
        credax.hgpo_advantages(outcome, steps, anchors, mask, ids,
                               normalization=credax.Normalization(ddof=0, singleton="raw"))
    # the default is the population std (ddof=0), eps 1e-6
    np.testing.assert_array_equal(
        credax.hgpo_advantages(outcome, steps, anchors, mask, ids).advantages,
        credax.hgpo_advantages(outcome, steps, anchors, mask, ids,
                               normalization=credax.Normalization(ddof=0, eps=1e-6)).advantages)


def test_each_level_hashes_the_previous_group_and_one_anchor_with_the_same_groups():
    # hgpo_advantages builds level k's groups from (level k-1's group index, the anchor k-1 steps
    # back) instead of the full tuple (prompt, a_t, ..., a_{t-k+1}). That relies on the group
    # index being the lowest valid row with the same key tuple, whatever the hash: checked here
    # against a NumPy dictionary of the full tuples, for every level of random histories.
    from credax import _group_ids
    from credax._hgpo import history_keys

    rng = np.random.default_rng(3)
    b, k = 64, 9
    anchors = jnp.asarray(rng.integers(0, 3, size=(b, k)).astype(np.int32))
    mask = jnp.asarray(np.arange(k)[None, :] < rng.integers(1, k + 1, b)[:, None])
    prompt = np.repeat(np.arange(b // 4), 4)
    n = b * k
    flat_prompt = jnp.asarray(np.broadcast_to(prompt[:, None], (b, k)).reshape(n))
    previous = flat_prompt
    for level in range(1, 6):
        keys, valid = history_keys(anchors, mask, level)
        valid = valid.reshape(n)
        nested = _group_ids.groups_from_keys(previous, keys[-1].reshape(n), valid=valid).index
        full = _group_ids.groups_from_keys(flat_prompt, *(key.reshape(n) for key in keys),
                                           valid=valid).index
        lowest, expected = {}, np.arange(n)
        tuples = np.stack([np.asarray(flat_prompt)] + [np.asarray(key).reshape(n) for key in keys])
        for row in range(n):
            if bool(valid[row]):
                expected[row] = lowest.setdefault(tuple(tuples[:, row]), row)
        np.testing.assert_array_equal(full, expected)
        np.testing.assert_array_equal(nested, expected)
        previous = nested


def test_genuine_float32_deviation_votes_and_float64_mean_abstains():
    # Returns 0.7, 0.85, 1.0 (one step each, one anchor, gamma 1: returns are the inputs). In
    # float32 these are *not* a progression: 0.7f + 1.0f = 1.699999988, 2 * 0.85f = 1.700000048,
    # so the mean of the three float32 values misses 0.85f by +1.99e-8 (exact rational
    # arithmetic): a genuine deviation, whose level value (~1.6e-7 after the population std
    # 0.1225) votes with weight 2 beside the episode level (weight 1). The exact reference on the
    # same float32 values agrees. (Before issue #38 a 4·n·ε tolerance made it abstain.)
    # In float64 0.7 + 1.0 == 2 * 0.85 exactly: at the mean, it abstains, A = A_e.
    from fractions import Fraction
    vals = np.array([0.7, 0.85, 1.0], np.float32)
    dev = Fraction(float(vals[1])) - sum(Fraction(float(v)) for v in vals) / 3
    assert float(dev) == pytest.approx(1.99e-8, rel=1e-2)
    args = (np.array([0.0, 1.0, 0.5], np.float32), vals[:, None], np.zeros((3, 1), np.int32),
            np.ones((3, 1), bool), np.zeros(3, np.int32))
    kw = dict(history=0, gamma=1.0, alpha=1.0, episode_group=True)
    out = credax.hgpo_advantages(*args, **kw)
    adv, levels, inform = ref.hgpo(*args, **kw, returns_dtype=np.float32)
    np.testing.assert_array_equal(out.informative, inform)
    assert bool(out.informative[1, 0, 1]) and 0 < float(out.levels[1, 0, 1]) < 1e-6
    # episode level: outcomes (0, 1, .5), mean .5, unbiased std .5 -> A_e = .5/(.5 + 1e-6)
    a_e = 0.5 / (0.5 + 1e-6)
    np.testing.assert_allclose(out.advantages[1, 0], a_e / 3, rtol=1e-5)  # (1·A_e + 2·~0)/3
    np.testing.assert_allclose(out.advantages, adv, rtol=1e-5)
    with jax.enable_x64(True):
        out64 = credax.hgpo_advantages(*(np.asarray(a, np.float64) if a.dtype.kind == "f" else a
                                         for a in (args[0], np.array([[0.7], [0.85], [1.0]]),
                                                   *args[2:])), **kw)
        assert not bool(out64.informative[1, 0, 1]) and float(out64.levels[1, 0, 1]) == 0.0
        np.testing.assert_allclose(out64.advantages[1, 0], a_e / (1 + 1e-6), rtol=1e-12)
    # A NaN return is not "at the mean": its group stays NaN.
    bad = credax.hgpo_advantages(np.zeros(3), np.array([[np.nan], [0.85], [1.0]], np.float32),
                                 np.zeros((3, 1), np.int32), np.ones((3, 1), bool),
                                 np.zeros(3, np.int32), history=0)
    assert np.isnan(np.asarray(bad.levels[:, 0, 1])).all()


def planted_exact_means(rng, count):
    """float32 groups whose last member is the exact mean (rational arithmetic) of the group,
    with non-dyadic values: the float mean of such a group often misses the member."""
    from fractions import Fraction
    out = []
    while len(out) < count:
        n = int(rng.integers(2, 7))
        vals = (rng.random(n) * rng.choice([1, 3, 10])).astype(np.float32)
        m = np.float32(vals.mean())
        last = Fraction(float(m)) * (n + 1) - sum(Fraction(float(v)) for v in vals)
        if Fraction(float(np.float32(float(last)))) == last:
            out.append(np.concatenate([vals, [np.float32(float(last)), m]]).astype(np.float32))
    return out


def test_member_exactly_at_its_mean_abstains_and_one_ulp_off_votes():
    # Groups whose last member is the exact mean of the group (rational arithmetic) while the
    # float mean misses it (the engine's centred value was a residue of ~1e-7 in 219 of 1265 such
    # groups): the level is exactly 0 and abstains. The same member moved by one ulp (a genuine
    # deviation of ~1e-7 relative) votes. Both against the exact reference.
    from credax._grouping import normalize_with_groups
    rng = np.random.default_rng(11)
    residues = 0
    for vals in planted_exact_means(rng, 60):
        n = len(vals)
        float_value = normalize_with_groups(jnp.asarray(vals), credax.groups(np.zeros(n, np.int32)),
                                            jnp.ones(n, bool), credax.Normalization(ddof=0))
        residues += float(float_value[-1]) != 0.0
        for nudge in (False, True):
            v = vals.copy()
            if nudge:
                v[-1] = np.nextafter(v[-1], np.float32(np.inf))
            args = (np.zeros(n, np.float32), v[:, None], np.zeros((n, 1), np.int32),
                    np.ones((n, 1), bool), np.zeros(n, np.int32))
            out = credax.hgpo_advantages(*args, history=0, gamma=1.0)
            adv, levels, inform = ref.hgpo(*args, history=0, gamma=1.0, alpha=1.0,
                                           returns_dtype=np.float32)
            np.testing.assert_array_equal(out.informative, inform)
            assert bool(out.informative[-1, 0, 1]) == nudge
            if not nudge:
                assert float(out.levels[-1, 0, 1]) == 0.0 and float(out.advantages[-1, 0]) == 0.0
            np.testing.assert_allclose(out.advantages, adv, rtol=1e-5, atol=1e-6)
    assert residues > 0  # the float mean did miss some exact means: the test can fail


@pytest.mark.parametrize("x64", [False, True])
def test_random_cases_match_the_exact_reference_without_abstaining(x64):
    # Non-dyadic rewards (0.35, 1/3, 0.95, ...), gamma 0.5 or 1 (the product gamma·G is exact, so
    # the returns are the same in any evaluation order, FMA or not). The reference computes the
    # returns in the compute dtype and decides "at the mean" in rational arithmetic: the
    # informative levels must be *equal*, no abstention on any genuine deviation. Before issue #38
    # (the 4·n·ε tolerance) 10 of these 240 configurations disagreed (in float32 and in x64), 4
    # of them with a step's advantage off by 0.28 to 0.5; now none.
    with jax.enable_x64(x64):
        for seed in range(3):
            rng = np.random.default_rng(seed)
            for case in range(80):
                outcome, steps, anchors, mask, ids = random_hgpo_batch(rng, dyadic=False)
                if not x64:
                    outcome, steps = outcome.astype(np.float32), steps.astype(np.float32)
                kw = dict(history=int(rng.integers(0, 3)), gamma=float(rng.choice([0.5, 1.0])),
                          alpha=float(rng.choice([0.0, 1.0, 2.0])), episode_group=case % 3 == 0,
                          episode_pooling=["trajectory", "step"][case % 2])
                got = credax.hgpo_advantages(outcome, steps, anchors, mask, ids, **kw)
                # float32: the returns are double-float pairs, exact here (issue 44)
                adv, _, inform = ref.hgpo(outcome, steps, anchors, mask, ids, **kw,
                                          returns_dtype=np.float64 if x64 else "exact")
                np.testing.assert_array_equal(got.informative, inform, err_msg=f"{seed} {case}")
                np.testing.assert_allclose(got.advantages, adv, atol=1e-10 if x64 else 2e-5)


def float64_verl_agent(outcome, steps, anchors, mask, ids, kw):
    """verl-agent's rule read in float64 (tests/reference/peer_forms.py) on the same float32
    inputs: the returns in float64 from the float32 rewards and γ, the float64 mean, ``!= 0``."""
    g = ref.discounted_returns(steps, mask, kw["gamma"])
    norm = kw["normalization"]
    rows = [(b, t) for b in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[b, t]]
    want = peer.verl_agent_hgpo(
        [outcome[b] for b, _ in rows], [g[b, t] for b, t in rows], [anchors[b, t] for b, t in rows],
        [ids[b] for b, _ in rows], [b for b, _ in rows], history_length=kw["history"],
        epsilon=norm.eps, mode="mean_norm" if norm.scale == "none" else "mean_std_norm",
        length_weight_alpha=kw["alpha"], base_group=kw["episode_group"])
    out = np.zeros(mask.shape)
    for (b, t), v in zip(rows, want, strict=True):
        out[b, t] = v
    return out


VERL_BASE = dict(episode_pooling="step", episode_singleton="raw")  # verl-agent's base_group


def test_the_inputs_tie_abstains_where_the_float32_returns_break_it():
    # The classic case (issue 44): step rewards all float32(0.35), history 1, gamma 1,
    # mean-centred, alpha 1, episode group on. Three trajectories of 2, 1 and 3 steps start in
    # state 0 (later states their own): their first returns are 2x, x and 3x (x = 0.35f), so the
    # first trajectory's 2x is *exactly* their mean in the inputs' arithmetic; the float32 return
    # 3x = fl(x + fl(x + x)) rounds, and credax's level-1 value was a residue 3e-8 that voted with
    # weight 2. At the mean it abstains: only the episode level votes, A_e = 1 - (2·1 + 0 + 0)/6
    # (outcomes 1, 0, 0 copied once per step) = 2/3, divided by 1 + eps -> 0.666666.
    # (Before: (1·2/3 + 2·3e-8)/3 = 0.2222222; verl-agent's rule in float64 gives 0.666666.)
    mask = np.arange(3)[None] < np.array([2, 1, 3])[:, None]
    steps = np.where(mask, np.float32(0.35), np.float32(0)).astype(np.float32)
    anchors = np.array([[0, 1, 9], [0, 9, 9], [0, 2, 3]], np.int32)
    args = (np.array([1.0, 0.0, 0.0], np.float32), steps, anchors, mask, np.zeros(3, np.int32))
    kw = dict(history=1, gamma=1.0, alpha=1.0, episode_group=True, **VERL_BASE,
              normalization=credax.Normalization(ddof=0, scale="none"))
    from fractions import Fraction
    x = np.float32(0.35)
    assert Fraction(float(x + (x + x))) != 3 * Fraction(float(x))  # the float32 return rounds
    out = credax.hgpo_advantages(*args, **kw)
    assert not bool(out.informative[0, 0, 1]) and float(out.levels[0, 0, 1]) == 0.0
    np.testing.assert_allclose(out.advantages[0, 0], (2 / 3) / (1 + 1e-6), rtol=1e-6)
    np.testing.assert_allclose(out.advantages, float64_verl_agent(*args, kw), atol=1e-6)


def test_the_issues_classic_case_equals_verl_agent():
    # Issue 44's classic case: step rewards all float32(0.35), history 1, gamma 1, mean-centred,
    # alpha 1, episode group on (verl-agent's base_group); the issue gives credax float32 0.0407407
    # at trajectory 0, step 0 and verl-agent 0.1222221. The issue does not state its shapes or
    # outcomes; this configuration reproduces both numbers to the issue's 7 digits (found by a
    # search over 2-4 trajectories of 1-4 steps; others do too, e.g. outcomes (1/3, 0.3, 0.1)):
    # trajectories of 2, 1 and 3 steps start in state 0 (later states their own), outcomes
    # (1/3, 0, 0.2) in float32. Step 0's returns 2x, x, 3x (x = 0.35f): trajectory 0 is exactly at
    # its level-1 mean in the inputs, so only the episode level votes:
    # A_e = 1/3 - (2·1/3 + 0 + 3·0.2)/6 = 11/90, A = A_e/(1 + eps) = 0.1222221.
    # At a3e9449 (ties decided on the float32 returns, where 3x rounds) level 1 voted with a
    # residue and weight 2: (1·A_e + 2·~0)/3 = 0.0407407.
    mask = np.arange(3)[None] < np.array([2, 1, 3])[:, None]
    steps = np.where(mask, np.float32(0.35), np.float32(0)).astype(np.float32)
    anchors = np.array([[0, 1, 9], [0, 9, 9], [0, 2, 3]], np.int32)
    args = (np.array([1 / 3, 0.0, 0.2], np.float32), steps, anchors, mask, np.zeros(3, np.int32))
    kw = dict(history=1, gamma=1.0, alpha=1.0, episode_group=True, **VERL_BASE,
              normalization=credax.Normalization(ddof=0, scale="none"))
    want = float64_verl_agent(*args, kw)
    assert round(float(want[0, 0]), 7) == 0.1222221  # the issue's value of verl-agent's code
    out = credax.hgpo_advantages(*args, **kw)
    np.testing.assert_allclose(out.advantages[0, 0], want[0, 0], atol=1e-6)
    assert not bool(out.informative[0, 0, 1])
    np.testing.assert_allclose(out.advantages, want, atol=1e-6)


def test_a_deviation_the_float32_returns_round_away_votes_with_its_float64_value():
    # Three steps of float32 0.1 return 3·0.1f = 0.30000000447 (real), one step of float32 0.3
    # returns 0.30000001192: a genuine deviation of 7.45e-9, which the float32 returns round
    # away (both are 0.3f), so credax saw a zero-spread group (abstains). Two trajectories share
    # state 0 at their first step (later states their own), history 0, population std: the
    # deviations are ±3.725e-9, sigma 3.725e-9, values ±3.725e-9 / (3.725e-9 + 1e-6) = ±0.003711,
    # as verl-agent's rule in float64 computes them (from the double-float returns).
    mask = np.array([[True, True, True], [True, False, False]])
    steps = np.array([[0.1, 0.1, 0.1], [0.3, 0, 0]], np.float32)
    anchors = np.array([[0, 1, 2], [0, 9, 9]], np.int32)
    args = (np.zeros(2, np.float32), steps, anchors, mask, np.zeros(2, np.int32))
    kw = dict(history=0, gamma=1.0, alpha=1.0, episode_group=False, **VERL_BASE,
              normalization=credax.Normalization(ddof=0))
    dev = (float(np.float32(0.3)) - 3 * float(np.float32(0.1))) / 2
    want = dev / (dev + 1e-6)
    out = credax.hgpo_advantages(*args, **kw)
    assert bool(out.informative[1, 0, 1]) and bool(out.informative[0, 0, 1])
    np.testing.assert_allclose(out.levels[:, 0, 1], [-want, want], rtol=1e-4)
    np.testing.assert_allclose(out.advantages, float64_verl_agent(*args, kw), rtol=1e-4, atol=1e-7)


VALUES = np.array([0.1, 0.35, 0.7, 1 / 3, 0.2, 0.3, 0.6], np.float32)


def near_tie_batch(rng, case):
    """Near-ties from non-dyadic rewards: even cases draw rewards from {v, 0, 2v, w} on
    trajectories of random lengths through one or two states (gamma 1 or < 1); odd cases plant
    ties exact for every gamma, (0, 2v), (2v, 0) and (v, v), among other patterns, gamma < 1."""
    v, w = rng.choice(VALUES, size=2)
    batch, turns = 8, 5
    steps, mask = np.zeros((batch, turns), np.float32), np.zeros((batch, turns), bool)
    if case % 2 == 0:
        lengths = rng.integers(1, turns + 1, size=batch)
        mask = np.arange(turns)[None] < lengths[:, None]
        steps = np.where(mask, rng.choice(np.array([v, v, 0, 2 * v, w], np.float32),
                                          size=mask.shape), 0).astype(np.float32)
        gamma = rng.choice([1.0, 1.0, 0.9, 0.95, 0.99])
        ids = (rng.random(batch) < 0.3).astype(np.int32)
    else:
        patterns = [[0, 2 * v], [2 * v, 0], [v, v], [v, 0, v], [0, v, v], [2 * v, 0, 0], [w, v], [w]]
        for b in range(batch):
            p = patterns[b] if b < 3 else patterns[int(rng.integers(len(patterns)))]
            steps[b, : len(p)], mask[b, : len(p)] = p, True
        gamma = rng.choice([0.9, 0.95, 0.99, 0.8, 0.5])
        ids = np.zeros(batch, np.int32)
    anchors = (rng.random((batch, turns)) < 0.2).astype(np.int32)
    outcome = rng.choice(VALUES, size=batch).astype(np.float32)
    kw = dict(history=int(rng.integers(0, 3)), gamma=float(np.float32(gamma)),
              alpha=float(rng.choice([0.0, 1.0, 2.0])), episode_group=bool(rng.random() < 0.5),
              **VERL_BASE, normalization=credax.Normalization(
                  ddof=0, scale=str(rng.choice(["group", "none"]))))
    return (outcome, steps, anchors, mask, ids), kw


def test_near_ties_match_verl_agent_in_float64():
    # Issue 44: credax in float32 equals verl-agent's rule in float64 on the same float32 inputs,
    # on 240 near-tie configurations (before: 10 of them differed, by up to 0.34, each where the
    # float32 rounding of the returns broke a tie of the inputs or made one). Max |difference| over all steps.
    rng = np.random.default_rng(44)
    worst = []
    for case in range(240):
        args, kw = near_tie_batch(rng, case)
        got = np.asarray(credax.hgpo_advantages(*args, **kw).advantages)
        worst.append(float(np.max(np.abs(got - float64_verl_agent(*args, kw)))))
    assert max(worst) < 2e-5, [(i, w) for i, w in enumerate(worst) if w >= 2e-5]


def test_exact_at_mean_against_rational_arithmetic():
    # The integer-limb decision of credax._group_stats.exact_at_mean against Fraction sums, for
    # random float32 sets (planted exact means, near misses, tiny and huge magnitudes, several
    # groups and trailing columns at once); off-grid sets are reported undecided, never wrong.
    from fractions import Fraction

    from credax._group_stats import exact_at_mean, group_stats
    rng = np.random.default_rng(5)
    sets = planted_exact_means(rng, 30)
    sets += [s * np.float32(2.0 ** 100) for s in sets[:5]] + [s * np.float32(2.0 ** -100)
                                                            for s in sets[5:10]]
    sets += [np.array([1.0, 1.2345 * 2.0 ** -70, 0.5], np.float32), np.array([3.0, 3.0], np.float32)]
    x = np.concatenate(sets)
    ids = np.concatenate([np.full(len(s), i) for i, s in enumerate(sets)]).astype(np.int32)
    x2 = np.stack([x, np.roll(x, 3)], axis=1)  # a trailing index: sets per (group, column)
    g = credax.groups(ids)
    mask = rng.random(x2.shape) < 0.9
    mask[ids >= len(sets) - 2] = True
    mask = jnp.asarray(mask)
    st = group_stats(jnp.asarray(x2), g, mask, sum_sq=False)
    got = exact_at_mean(jnp.asarray(x2), g, mask, st.inv_unit)
    m = np.asarray(mask)
    decided_any = 0
    for col in range(2):
        for gid in range(len(sets)):
            rows = np.nonzero((ids == gid) & m[:, col])[0]
            total = sum(Fraction(float(x2[r, col])) for r in rows)
            for r in rows:
                exact = Fraction(float(x2[r, col])) * len(rows) == total
                if bool(got.decided[r, col]):
                    decided_any += 1
                    assert bool(got.at_mean[r, col]) == exact, (gid, col, r)
                else:
                    assert not bool(got.at_mean[r, col])
    # the 1.2345·2**-70 member has bits below the limbs' grid (72 bits for these 286 rows; at
    # least 2**-32 of the scale in float32 for any batch): that set is undecided
    assert not bool(got.decided[np.nonzero(ids == len(sets) - 2)[0][0], 0])
    assert decided_any > 0.9 * m.sum()


@pytest.mark.parametrize("alpha", [100.0, 200.0, -60.0])
def test_large_alpha_is_finite_and_matches_the_formula(alpha):
    # 3^α overflows float32 from α ≈ 81 (inf/inf = NaN before); the weights are now divided by
    # the largest informative one. The float64 loop reference evaluates the formula directly.
    rng = np.random.default_rng(7)
    outcome, steps, anchors, mask, ids = random_hgpo_batch(rng)
    kw = dict(history=2, gamma=0.5, alpha=alpha)
    out = credax.hgpo_advantages(outcome, steps, anchors, mask, ids, **kw,
                                 normalization=credax.Normalization(ddof=0, eps=0.0))
    want, _, _ = ref.hgpo(outcome, steps, anchors, mask, ids, **kw, eps=0.0)
    assert np.isfinite(np.asarray(out.advantages)).all()
    np.testing.assert_allclose(out.advantages, want, rtol=1e-5, atol=1e-6)
    # With eps > 0 and a large -α every weight falls far below eps: the formula's value is ~0.
    small = credax.hgpo_advantages(outcome, steps, anchors, mask, ids, history=2, gamma=0.5,
                                   alpha=-200.0,
                                   normalization=credax.Normalization(ddof=0, eps=1e-6))
    np.testing.assert_allclose(small.advantages, 0.0, atol=1e-12)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
def test_zero_length_axes(shape):
    b, k = shape
    out = credax.hgpo_advantages(np.zeros(b, np.float32), np.zeros(shape, np.float32),
                                 np.zeros(shape, np.int32), np.ones(shape, bool),
                                 np.zeros(b, np.int32), history=2, episode_group=True)
    assert out.advantages.shape == shape
    assert out.levels.shape == (b, k, 4) and out.informative.shape == (b, k, 4)

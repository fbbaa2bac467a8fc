"""GiGPO: episode advantage + ω × step advantage within (prompt, anchor state) groups.

Ground truth: the NumPy loop of ``tests/reference/triage.py::gigpo_advantages`` (a Python dict of
anchor groups), golden cases by hand, identities (ω = 0 is episode GRPO; anchors equal to the turn
index give the per-(prompt, turn) z-score), and properties (anchor relabelling invariance, prompt
isolation, appended padding, jit/vmap/grad). Row permutation, padding values, masked zeros, jit ==
eager and compile once are tests/test_dogfood.py's sweeps.

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import credax
from credax import Normalization
from tests.probes import IDS4, M43, NAN, ROWS01, S4, S4_CLEAN, Probes, nan_exactly
from tests.reference import triage as ref

SHAPES = [(4, 3), (6, 5)]
VALUES = [0.0, 1.0, 0.35, 1 / 3, 0.95, -2.5]
IDS = [-3, 0, 7, 10**6]
ANCHORS = [0, 1, 2, -5]


@st.composite
def gigpo_batches(draw):
    batch, num_turns = draw(st.sampled_from(SHAPES))
    size = batch * num_turns
    lengths = np.array(draw(st.lists(st.integers(0, num_turns), min_size=batch, max_size=batch)))
    mask = np.arange(num_turns)[None, :] < lengths[:, None]
    ids = np.array(draw(st.lists(st.sampled_from(IDS), min_size=batch, max_size=batch)), np.int32)
    anchors = np.array(draw(st.lists(st.sampled_from(ANCHORS), min_size=size, max_size=size)),
                       np.int32).reshape(batch, num_turns)
    outcome = np.array(draw(st.lists(st.sampled_from(VALUES), min_size=batch, max_size=batch)))
    steps = np.array(draw(st.lists(st.sampled_from(VALUES), min_size=size, max_size=size)))
    steps = steps.reshape(batch, num_turns)
    # Padding may hold anything: NaN rewards, garbage anchors, NaN outcome for empty rows.
    steps[~mask] = np.nan
    anchors[~mask] = 123456
    outcome[lengths == 0] = np.nan
    return outcome, steps, anchors, mask, ids


def _call(batch, dtype=jnp.float32, **kw):
    outcome, steps, anchors, mask, ids = batch
    return credax.gigpo_advantages(jnp.asarray(outcome, dtype), jnp.asarray(steps, dtype),
                                   anchors, mask, ids, **kw)


NO_EPS = credax.Normalization(eps=0.0)


# ------------------------------------------------------------------------------------------
# Golden cases.
# ------------------------------------------------------------------------------------------

# One prompt, three trajectories, γ = 0.5. State 1 is visited by trajectory 0 at turn 0 and by
# trajectory 1 at turns 0 and 1 (a revisit at another turn index); state 2 by trajectory 0 at
# turn 1 and trajectory 2 at turn 0; state 3 once.
GOLDEN = dict(
    outcome=[1.0, 1.0, 0.0],
    steps=[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.35, 0.0, 0.0]],
    anchors=[[1, 2, 0], [1, 1, 3], [2, 0, 0]],
    mask=[[True, True, False], [True, True, True], [True, False, False]],
)


def _golden(scale="group", **kw):
    g = GOLDEN
    return np.asarray(credax.gigpo_advantages(
        jnp.array(g["outcome"]), jnp.array(g["steps"]), jnp.array(g["anchors"], jnp.int32),
        jnp.array(g["mask"]), jnp.array([4, 4, 4]), gamma=0.5,
        normalization=credax.Normalization(eps=0.0, scale=scale), **kw))


def test_golden_scaled():
    # Episode: R = (1, 1, 0), μ = 2/3, unbiased σ = sqrt((1/9 + 1/9 + 4/9) / 2) = sqrt(1/3):
    #   A^E = (1/3, 1/3, -2/3) / sqrt(1/3) = (0.57735, 0.57735, -1.154701).
    # Returns G (γ = 0.5): traj 0 (0.5, 1); traj 1 (0.25, 0.5, 1); traj 2 (0.35).
    # State 1: {0.5, 0.25, 0.5}: μ = 5/12, deviations (1/12, -1/6, 1/12), σ² = (1/144 · 2 + 1/36)/2
    #   = 1/48, σ = 0.1443376, z = (0.57735, -1.154701, 0.57735).
    # State 2: {1, 0.35}: deviations ±0.325, σ = 0.325 · sqrt(2), z = ±0.7071068.
    # State 3: a singleton -> 0.
    s3 = 1 / math.sqrt(3)
    expected = [
        [s3 + s3, s3 + 1 / math.sqrt(2), 0.0],
        [s3 - 2 * s3, s3 + s3, s3 + 0.0],
        [-2 * s3 - 1 / math.sqrt(2), 0.0, 0.0],
    ]
    np.testing.assert_allclose(_golden(), expected, rtol=1e-6, atol=1e-7)


def test_golden_mean_only():
    # scale="none" (GiGPO mean_norm): A^E = R - μ = (1/3, 1/3, -2/3); A^S = G - μ_anchor:
    #   state 1: (1/12, -1/6, 1/12); state 2: (0.325, -0.325); state 3 singleton: 0.
    expected = [
        [1 / 3 + 1 / 12, 1 / 3 + 0.325, 0.0],
        [1 / 3 - 1 / 6, 1 / 3 + 1 / 12, 1 / 3],
        [-2 / 3 - 0.325, 0.0, 0.0],
    ]
    np.testing.assert_allclose(_golden(scale="none"), expected, rtol=1e-6, atol=1e-7)
    # ω = 0.35 scales only the step part.
    half = _golden(scale="none", omega=0.35)
    np.testing.assert_allclose(half[0, 1], 1 / 3 + 0.35 * 0.325, rtol=1e-6)


def test_golden_matches_reference_in_float32():
    g = GOLDEN
    for scale in ("group", "none"):
        expected = ref.gigpo_advantages(g["outcome"], g["steps"], g["anchors"], np.array(g["mask"]),
                                        [4, 4, 4], gamma=0.5, eps=0.0, scale=scale)
        np.testing.assert_allclose(_golden(scale=scale), expected, rtol=1e-6, atol=1e-7)


def test_zero_spread_anchor_and_prompt_isolation():
    # Prompt 0: two trajectories in state 5 with equal non-dyadic returns 0.35 -> step 0 exactly,
    # even with eps = 0. Prompt 1: one trajectory, also "state 5": it does not join prompt 0's
    # group (anchors compare within a prompt), so it is a singleton -> 0; its episode group is a
    # singleton too -> 0 (credax default; verl-agent would keep the raw reward 0.95).
    outcome = jnp.array([1.0, 0.0, 0.95])
    steps = jnp.array([[0.35], [0.35], [7.0]])
    anchors = jnp.array([[5], [5], [5]], jnp.int32)
    args = (outcome, steps, anchors, jnp.ones((3, 1), bool), jnp.array([0, 0, 1]))
    out = np.asarray(credax.gigpo_advantages(*args, normalization=NO_EPS))
    np.testing.assert_allclose(out, [[1 / math.sqrt(2)], [-1 / math.sqrt(2)], [0]], rtol=1e-6)
    assert out[2, 0] == 0.0
    # The step part is exactly 0 (not a float residue amplified by 1 / eps).
    np.testing.assert_array_equal(out, np.asarray(credax.gigpo_advantages(*args, normalization=NO_EPS,
                                                                          omega=0.0)))


# ------------------------------------------------------------------------------------------
# Randomized comparison with the NumPy loop (float64).
# ------------------------------------------------------------------------------------------


@given(gigpo_batches(), st.sampled_from([0.95, 0.5, 0.0, 1.0]), st.sampled_from([1.0, 0.35, 0.0]),
       st.sampled_from(["group", "none"]))
def test_matches_reference(batch, gamma, omega, scale):
    outcome, steps, anchors, mask, ids = batch
    with jax.enable_x64(True):
        out = _call(batch, jnp.float64, gamma=gamma, omega=omega,
                    normalization=credax.Normalization(scale=scale))
        assert out.dtype == jnp.float64
    expected = ref.gigpo_advantages(outcome, steps, anchors, mask, ids, gamma=gamma, omega=omega,
                                    scale=scale)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-9, atol=1e-8)


# ------------------------------------------------------------------------------------------
# Identities.
# ------------------------------------------------------------------------------------------


# Identities with other estimators (λ = 0, ω = 0, ...) live in tests/test_identities.py.


@given(gigpo_batches())
def test_distinct_anchors_give_no_step_advantage(batch):
    outcome, steps, _, mask, ids = batch
    unique = np.arange(mask.size, dtype=np.int32).reshape(mask.shape)
    out = _call((outcome, steps, unique, mask, ids))
    episode = _call((outcome, steps, unique, mask, ids), omega=0.0)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(episode))


# ------------------------------------------------------------------------------------------
# Properties.
# ------------------------------------------------------------------------------------------


@given(gigpo_batches(), st.randoms(use_true_random=False))
def test_anchor_relabelling_invariance(batch, rnd):
    outcome, steps, anchors, mask, ids = batch
    # Any injective relabelling of anchor ids (here into sparse, negative, large int32 values).
    targets = rnd.sample([-(2**31), -7, 3, 999, 2**31 - 1, 65536, 12], len(ANCHORS))
    relabel = dict(zip(ANCHORS, targets, strict=True))
    relabelled = np.vectorize(lambda a: relabel.get(int(a), a))(anchors).astype(np.int32)
    out = np.asarray(_call(batch))
    np.testing.assert_allclose(np.asarray(_call((outcome, steps, relabelled, mask, ids))), out,
                               rtol=1e-6, atol=1e-7)


def test_appending_padding_changes_nothing():
    g = GOLDEN
    base = _golden()
    outcome = jnp.array(g["outcome"] + [jnp.nan])
    steps = jnp.pad(jnp.array(g["steps"]), ((0, 1), (0, 2)), constant_values=jnp.nan)
    anchors = jnp.pad(jnp.array(g["anchors"], jnp.int32), ((0, 1), (0, 2)), constant_values=1)
    mask = jnp.pad(jnp.array(g["mask"]), ((0, 1), (0, 2)), constant_values=False)
    out = np.asarray(credax.gigpo_advantages(outcome, steps, anchors, mask, jnp.array([4, 4, 4, 4]),
                                             gamma=0.5, normalization=NO_EPS))
    np.testing.assert_allclose(out[:3, :3], base, rtol=1e-6, atol=1e-7)
    assert np.all(out[3] == 0) and np.all(out[:, 3:] == 0)


# ------------------------------------------------------------------------------------------
# Checks, jit / vmap / grad.
# ------------------------------------------------------------------------------------------


def test_trace_time_checks():
    o, s, a, m, ids = (jnp.zeros(2), jnp.zeros((2, 3)), jnp.zeros((2, 3), jnp.int32),
                       jnp.ones((2, 3), bool), jnp.zeros(2, jnp.int32))
    with pytest.raises(TypeError, match="`anchor_ids` must be an integer"):
        credax.gigpo_advantages(o, s, a.astype(jnp.float32), m, ids)
    with pytest.raises(ValueError, match="`anchor_ids` must have shape"):
        credax.gigpo_advantages(o, s, a[:, :2], m, ids)
    with pytest.raises(ValueError, match="`outcome_rewards` must have shape"):
        credax.gigpo_advantages(jnp.zeros(3), s, a, m, ids)
    with pytest.raises(TypeError, match="`turn_mask` must be a boolean"):
        credax.gigpo_advantages(o, s, a, m.astype(jnp.int32), ids)
    with pytest.raises(ValueError, match="`scale` must be one of"):
        credax.gigpo_advantages(o, s, a, m, ids, normalization=credax.Normalization(scale="prompt"))
    # scale and eps are no longer keywords: one `normalization=` value carries them
    for key, value in (("scale", "none"), ("eps", 0.0)):
        with pytest.raises(TypeError, match=rf"'{key}'(.|\n)*normalization=credax\.Normalization"):
            credax.gigpo_advantages(o, s, a, m, ids, **{key: value})
    with pytest.raises(TypeError):  # a preset is not a mapping
        credax.gigpo_advantages(o, s, a, m, ids, **credax.presets.TRL)
    with pytest.raises(TypeError, match="normalization"):
        credax.gigpo_advantages(o, s, a, m, ids, normalization=credax.presets.TRL.asdict())
    with pytest.raises(ValueError, match="group_ids"):
        credax.gigpo_advantages(o, s, a, m, jnp.zeros(3, jnp.int32))


def test_dtypes():
    g = GOLDEN
    args = (jnp.array(g["anchors"], jnp.int32), jnp.array(g["mask"]), jnp.array([4, 4, 4]))
    bf = credax.gigpo_advantages(jnp.array(g["outcome"], jnp.bfloat16),
                                 jnp.array(g["steps"], jnp.bfloat16), *args, gamma=0.5,
                                 normalization=NO_EPS)
    assert bf.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(bf, np.float32), _golden(), rtol=2e-2, atol=2e-2)
    ints = credax.gigpo_advantages(jnp.array([1, 0, 0]), jnp.zeros((3, 3), jnp.int32), *args)
    assert ints.dtype == jnp.float32


def test_jit_with_traced_hyperparameters_equals_eager():
    g = GOLDEN
    args = (jnp.array(g["outcome"]), jnp.array(g["steps"]), jnp.array(g["anchors"], jnp.int32),
            jnp.array(g["mask"]), credax.groups(jnp.array([4, 4, 4])))

    @jax.jit
    def f(gamma, omega, eps):
        return credax.gigpo_advantages(*args, gamma=gamma, omega=omega,
                                       normalization=credax.Normalization(eps=eps))

    np.testing.assert_allclose(np.asarray(f(0.5, 1.0, 0.0)), _golden(), rtol=1e-6, atol=1e-7)


def test_vmap_equals_loop():
    rng = np.random.default_rng(0)
    n, batch, num_turns = 3, 6, 4
    outcome = jnp.asarray(rng.integers(0, 2, size=(n, batch)), jnp.float32)
    steps = jnp.asarray(rng.choice([0.0, 0.35, 1.0], size=(n, batch, num_turns)), jnp.float32)
    anchors = jnp.asarray(rng.integers(0, 3, size=(n, batch, num_turns)), jnp.int32)
    mask = jnp.asarray(np.arange(num_turns) < rng.integers(0, num_turns + 1, size=(n, batch, 1)))
    ids = jnp.asarray(rng.integers(-2, 2, size=(n, batch)), jnp.int32)
    fn = lambda o, s, a, m, i: credax.gigpo_advantages(o, s, a, m, i, gamma=0.9)
    batched = jax.vmap(fn)(outcome, steps, anchors, mask, ids)
    for i in range(n):
        np.testing.assert_allclose(np.asarray(batched[i]),
                                   np.asarray(fn(outcome[i], steps[i], anchors[i], mask[i], ids[i])),
                                   rtol=1e-6, atol=1e-7)


def test_grad():
    g = GOLDEN
    steps = jnp.array(g["steps"]).at[0, 2].set(jnp.nan).at[2, 1:].set(jnp.inf)
    anchors, mask = jnp.array(g["anchors"], jnp.int32), jnp.array(g["mask"])
    ids = jnp.array([4, 4, 4])

    def loss(outcome, steps, omega):
        adv = credax.gigpo_advantages(outcome, steps, anchors, mask, ids, gamma=0.5, omega=omega)
        return jnp.sum(adv * jnp.arange(1.0, 10.0).reshape(3, 3))

    go, gs, gw = jax.grad(loss, argnums=(0, 1, 2))(jnp.array(g["outcome"]), steps, 0.35)
    assert np.all(np.isfinite(np.asarray(go))) and np.all(np.isfinite(np.asarray(gs)))
    np.testing.assert_array_equal(np.asarray(gs)[~np.asarray(mask)], 0.0)
    # d/dω = Σ w · A^S, with A^S = gigpo(ω=1) - gigpo(ω=0).
    a1 = credax.gigpo_advantages(jnp.array(g["outcome"]), steps, anchors, mask, ids, gamma=0.5)
    a0 = credax.gigpo_advantages(jnp.array(g["outcome"]), steps, anchors, mask, ids, gamma=0.5,
                                 omega=0.0)
    weights = np.arange(1.0, 10.0).reshape(3, 3)
    np.testing.assert_allclose(float(gw), float(np.sum(weights * (np.asarray(a1) - np.asarray(a0)))),
                               rtol=1e-5)
    # Zero-spread groups everywhere (all rewards equal): outputs 0, gradients finite.
    flat = jax.grad(lambda s: jnp.sum(credax.gigpo_advantages(
        jnp.full(3, 0.35), s, anchors, mask, ids)))(jnp.full((3, 3), 0.35))
    assert np.all(np.isfinite(np.asarray(flat)))


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("nonfinite", "gigpo")
def _():
    anchors = np.arange(12).reshape(4, 3)  # every step its own anchor state: step advantage 0
    out = credax.gigpo_advantages(np.array([NAN, 0.0, 1.0, 0.0], np.float32), S4_CLEAN, anchors,
                                  M43, IDS4)
    nan_exactly(out, ROWS01)
    out = credax.gigpo_advantages(np.array([1.0, 0.0, 1.0, 0.0], np.float32), S4, anchors, M43, IDS4,
                                  gamma=0.5)
    # the NaN reward at (0, 1) reaches the returns of turns 0 and 1 of its row (their own anchor
    # groups): nothing else
    nan_exactly(out, [[True, True, False]] + [[False] * 3] * 3)


R2 = np.array([1.0, 0.0], np.float32)
IDS2 = np.array([3, 3])


@probe("named", "list_of_64bit_anchor_ids")
def _():
    # Anchors 2**40 and 2**40 + 2**32 collide in int32; densified on the host they stay apart:
    # each step is its own anchor group (step advantage 0) and only the episode part remains.
    anchors = [[2 ** 40], [2 ** 40 + 2 ** 32]]
    out = credax.gigpo_advantages(R2, np.array([[1.0], [0.0]], np.float32), anchors, np.ones((2, 1), bool),
                                  IDS2, normalization=Normalization(eps=0.0))
    np.testing.assert_allclose(out, [[0.70710677], [-0.70710677]], rtol=1e-6)
    out = credax.hgpo_advantages(R2, np.array([[1.0], [0.0]], np.float32), anchors, np.ones((2, 1), bool),
                                 IDS2)
    assert np.isfinite(np.asarray(out.advantages)).all()


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

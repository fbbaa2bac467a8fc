"""Value-based credit: token- and turn-level GAE, VAPO's λ, the clipped value loss.

Ground truth: the loops of ``tests/reference/estimators.py``; hand-worked goldens; side-by-side
parity with verl's and AReaL's functions re-stated in NumPy (``tests/reference/peer_forms.py``:
neither installs here); identities (λ = 1 is Monte Carlo, λ = 0 the TD error); properties (rows
never interact, masked values never matter, jit/vmap/grad).

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from tests.probes import INF, NAN, Probes, raises
from tests.reference import estimators as ref
from tests.reference import peer_forms as peer

VALUES = np.array([0.0, 1.0, 0.35, 1 / 3, -2.5, 0.95])


def close(a, b, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), atol=atol,
                               rtol=1e-5)


def fixed_shape(rng, batch, length):
    """``(batch, length)`` from the corners and the middle of the inclusive ranges ``batch`` and
    ``length``: each randomized comparison compiles 5 shapes (the smallest and largest of both,
    where the edge cases sit) instead of a new one per case; values and masks stay random."""
    (b0, b1), (l0, l1) = batch, length
    shapes = ((b0, l0), (b0, l1), (b1, l0), (b1, l1), ((b0 + b1) // 2, (l0 + l1) // 2))
    return shapes[int(rng.integers(len(shapes)))]


def random_token_batch(rng, batch=5, length=9):
    """Rewards/values with interior gaps in the mask (observation tokens) and NaN off the mask."""
    mask = rng.random((batch, length)) < 0.7
    mask[0] = False  # an empty row
    r = rng.choice(VALUES, (batch, length))
    v = rng.normal(size=(batch, length))
    r[~mask], v[~mask] = np.nan, np.nan
    return r, v, mask


# --------------------------------------------------------------------------------------------
# goldens
# --------------------------------------------------------------------------------------------


def test_gae_golden_with_observation_gap_and_bootstrap():
    # steps at t = 0, 2, 3 (t = 1 is an observation token: skipped, holds NaN); γ = 0.5, λ = 0.5,
    # bootstrap 2 (truncated). V = (1, ., 0, 1), r = (0, ., 1, 0).
    #   t=3: δ = 0 + .5·2 - 1 = 0;        A = 0
    #   t=2: δ = 1 + .5·1 - 0 = 1.5;      A = 1.5 + .25·0 = 1.5
    #   t=0: δ = 0 + .5·0 - 1 = -1;       A = -1 + .25·1.5 = -0.625
    # returns A + V = (.375, 0, 1.5, 1); masked entry 0.
    r = jnp.array([[0.0, jnp.nan, 1.0, 0.0]])
    v = jnp.array([[1.0, jnp.nan, 0.0, 1.0]])
    m = jnp.array([[True, False, True, True]])
    out = credax.gae_advantages(r, v, m, gamma=0.5, lam=0.5, bootstrap=jnp.array([2.0]))
    close(out.advantages, [[-0.625, 0.0, 1.5, 0.0]])
    close(out.returns, [[0.375, 0.0, 1.5, 1.0]])


def test_gae_identities_monte_carlo_and_td():
    rng = np.random.default_rng(0)
    r, v, m = random_token_batch(rng)
    # λ = 1: A_j = Σ_{i>=j} γ^(i-j) r_i - V_j over valid steps (bootstrap 0).
    adv = np.asarray(credax.gae_advantages(r, v, m, gamma=0.9, lam=1.0).advantages)
    for b in range(r.shape[0]):
        steps = np.flatnonzero(m[b])
        for j, t in enumerate(steps):
            g = sum(0.9 ** i * r[b, s] for i, s in enumerate(steps[j:]))
            assert abs(adv[b, t] - (g - v[b, t])) < 1e-4
    # λ = 0: the one-step TD error.
    adv0 = np.asarray(credax.gae_advantages(r, v, m, gamma=0.9, lam=0.0).advantages)
    for b in range(r.shape[0]):
        steps = np.flatnonzero(m[b])
        for j, t in enumerate(steps):
            nxt = v[b, steps[j + 1]] if j + 1 < len(steps) else 0.0
            assert abs(adv0[b, t] - (r[b, t] + 0.9 * nxt - v[b, t])) < 1e-5


def test_turn_gae_golden():
    # Row 0: tokens [prompt, t0, t0, obs, t1, t1, pad]; values at first tokens V_0 = .2, V_1 = .5;
    # turn rewards (0, 1); γ = 0.9, λ = 0.8:
    #   turn 1: δ = 1 - .5 = .5 -> A_1 = .5
    #   turn 0: δ = 0 + .9·.5 - .2 = .25 -> A_0 = .25 + .72·.5 = .61
    # Row 1: three valid turns but turn 1 has no action token: skipped (0); V_0 = .3, V_2 = .4,
    # rewards (0, 7 (unused), 1): A_2 = 1 - .4 = .6; A_0 = 0 + .9·.4 - .3 + .72·.6 = .492.
    # Its padded turn 3 holds NaN: 0.
    tt = jnp.array([[-1, 0, 0, -1, 1, 1, -1], [-1, 0, -1, 2, 2, -1, -1]])
    v = jnp.array([[9.0, 0.2, 0.7, 9.0, 0.5, 0.1, 9.0], [9.0, 0.3, 9.0, 0.4, 0.0, 9.0, 9.0]])
    rewards = jnp.array([[0.0, 1.0, jnp.nan, jnp.nan], [0.0, 7.0, 1.0, jnp.nan]])
    tm = jnp.array([[True, True, False, False], [True, True, True, False]])
    out = credax.turn_gae_advantages(rewards, v, tt, tm, gamma=0.9, lam=0.8)
    close(out.advantages, [[0.61, 0.5, 0, 0], [0.492, 0, 0.6, 0]])
    close(out.values, [[0.2, 0.5, 0, 0], [0.3, 0, 0.4, 0]])
    close(out.returns, [[0.81, 1.0, 0, 0], [0.792, 0, 1.0, 0]])


def test_vapo_lambda_golden():
    # α = 0.05: L = 40 -> 1 - 1/2 = .5; L = 100 -> .8; L = 10 -> max(0, -1) = 0; L = 0 -> 0.
    m = np.arange(100)[None, :] < np.array([[40], [100], [10], [0]])
    close(credax.vapo_lambda(m, alpha=0.05), [0.5, 0.8, 0.0, 0.0])


def test_value_loss_golden_and_unclipped():
    # V = (1, 3, 0), old = (0, 2.5, 0), R = (2, 2, 5), clip .5:
    #   t0: max((1-2)², (.5-2)²) = 2.25 (clipped larger); t1: clip(3, 2, 3) = 3, both (3-2)² = 1,
    #   equal: not counted; t2 masked (NaN). ½·mean(2.25, 1) = .8125; clip_frac = 1/2.
    v = jnp.array([[1.0, 3.0, jnp.nan]])
    old = jnp.array([[0.0, 2.5, jnp.nan]])
    ret = jnp.array([[2.0, 2.0, jnp.nan]])
    m = jnp.array([[True, True, False]])
    out = credax.value_loss(v, old, ret, m, clip=0.5)
    close(out.loss, 0.8125)
    close(out.clip_frac, 0.5)
    # clip=None: ½·mean((1-2)², (3-2)²) = ½·1 = 0.5.
    close(credax.value_loss(v, old, ret, m, clip=None).loss, 0.5)


# --------------------------------------------------------------------------------------------
# reference and peer parity
# --------------------------------------------------------------------------------------------


def gae_reference_max_diff(cases=200, seed=1):
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(cases):
        batch, length = fixed_shape(rng, (1, 5), (1, 11))
        r, v, m = random_token_batch(rng, batch=batch, length=length)
        lam = rng.choice([0.0, 0.5, 0.95, 1.0]) if rng.random() < 0.5 else rng.random(r.shape[0])
        gamma = float(rng.choice([0.0, 0.9, 1.0]))
        boot = rng.normal(size=r.shape[0]) if rng.random() < 0.5 else None
        got = credax.gae_advantages(r, v, m, gamma=gamma, lam=lam, bootstrap=boot)
        want = ref.gae(r, v, m, gamma=gamma, lam=lam, bootstrap=boot)
        for g, w in zip(got, want, strict=True):
            worst = max(worst, float(np.max(np.abs(np.asarray(g, np.float64) - w), initial=0.0)))
    return worst


def test_gae_matches_reference():
    assert gae_reference_max_diff(cases=60) < 1e-4


def verl_gae_max_diff(cases=200, seed=2):
    """credax vs verl's compute_gae_advantage_return on the valid tokens (bootstrap 0)."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(cases):
        batch, length = fixed_shape(rng, (1, 5), (1, 15))
        m = rng.random((batch, length)) < 0.7
        r, v = rng.choice(VALUES, (batch, length)), rng.normal(size=(batch, length))
        gamma, lam = float(rng.choice([0.9, 0.99, 1.0])), float(rng.choice([0.0, 0.95, 1.0]))
        adv, ret = peer.verl_gae(r, v, m.astype(float), gamma, lam)
        got = credax.gae_advantages(r, v, m, gamma=gamma, lam=lam)
        for g, w in ((got.advantages, adv), (got.returns, ret)):
            worst = max(worst, float(np.max(np.abs(np.asarray(g, np.float64) - w)[m], initial=0.0)))
    return worst


def test_gae_parity_with_verl():
    assert verl_gae_max_diff(cases=60) < 1e-4


def areal_token_gae_max_diff(cases=200, seed=3):
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(cases):
        batch, length = fixed_shape(rng, (1, 5), (2, 15))
        m = rng.random((batch, length)) < 0.7
        m[:, -1] = False  # AReaL's shifted loss mask: the last position is never a step
        r, v = rng.choice(VALUES, (batch, length)), rng.normal(size=(batch, length))
        no_eos = rng.random(batch) < 0.5
        boot = rng.normal(size=batch)
        lam = rng.random(batch)
        adv, ret = peer.areal_token_gae(r, v, m.astype(float), no_eos.astype(float), boot, 0.95, lam)
        got = credax.gae_advantages(r, v, m, gamma=0.95, lam=lam, bootstrap=np.where(no_eos, boot, 0))
        for g, w in ((got.advantages, adv), (got.returns, ret)):
            worst = max(worst, float(np.max(np.abs(np.asarray(g, np.float64) - w)[m], initial=0.0)))
    return worst


def test_token_gae_parity_with_areal():
    assert areal_token_gae_max_diff(cases=60) < 1e-4


def random_turn_tokens(rng, batch, length, num_turns):
    """token_turn with prompt/observation gaps, nondecreasing turn ids, some turns without tokens."""
    tt = np.full((batch, length), -1)
    for b in range(batch):
        k = 0
        for t in range(1, length):
            u = rng.random()
            if u < 0.25:
                continue  # observation / prompt token
            if u < 0.45 and k < num_turns - 1:
                k += int(rng.integers(1, 3)) if k < num_turns - 2 else 1
            tt[b, t] = k
    return tt


def areal_turn_gae_max_diff(cases=200, seed=4):
    """credax turn_gae (rewards summed per turn by the caller) vs AReaL's turn-level GAE."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(cases):
        # AReaL requires turn ids < the sequence length (it clamps larger ones into the last slot).
        (batch, length), num_turns = fixed_shape(rng, (1, 4), (5, 13)), 4
        tt = random_turn_tokens(rng, batch, length, num_turns)
        loss_mask = tt >= 0
        r = np.where(rng.random((batch, length)) < 0.3, rng.choice(VALUES, (batch, length)), 0.0)
        v = rng.normal(size=(batch, length))
        no_eos, boot = rng.random(batch) < 0.5, rng.normal(size=batch)
        lam, gamma = rng.random(batch), float(rng.choice([0.9, 1.0]))
        adv, ret = peer.areal_turn_gae(r, v, loss_mask.astype(float), tt, no_eos.astype(float), boot,
                                       gamma, lam)
        turn_r = np.zeros((batch, num_turns))
        for b, t in zip(*np.nonzero(loss_mask), strict=True):
            turn_r[b, tt[b, t]] += r[b, t]
        got = credax.turn_gae_advantages(turn_r, v, tt, np.ones((batch, num_turns), bool),
                                         gamma=gamma, lam=lam, bootstrap=np.where(no_eos, boot, 0))
        for g, w in ((got.advantages, adv), (got.returns, ret)):
            tokens = np.asarray(credax.broadcast_to_tokens(g, tt), np.float64)
            worst = max(worst, float(np.max(np.abs(tokens - w)[loss_mask], initial=0.0)))
    return worst


def test_turn_gae_parity_with_areal():
    assert areal_turn_gae_max_diff(cases=60) < 1e-4


def test_turn_gae_matches_reference():
    rng = np.random.default_rng(5)
    for _ in range(30):
        batch, length, num_turns = 4, 10, 4
        tt = random_turn_tokens(rng, batch, length, num_turns)
        tm = np.arange(num_turns)[None, :] < rng.integers(0, num_turns + 1, batch)[:, None]
        r = rng.choice(VALUES, (batch, num_turns))
        r[~tm] = np.nan
        v = rng.normal(size=(batch, length))
        got = credax.turn_gae_advantages(r, v, tt, tm, gamma=0.9, lam=0.7)
        want = ref.turn_gae(r, v, tt, tm, gamma=0.9, lam=0.7)
        for g, w in zip(got, want, strict=True):
            close(g, w)


def vapo_lambda_max_diff(cases=200, seed=6):
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(cases):
        lengths = rng.integers(0, 300, size=8)
        m = np.arange(300)[None, :] < lengths[:, None]
        alpha = float(rng.choice([0.01, 0.05, 0.5, 2.0]))
        got = np.asarray(credax.vapo_lambda(m, alpha=alpha), np.float64)
        worst = max(worst, float(np.max(np.abs(got - peer.areal_vapo_lambda(lengths, alpha)))),
                    float(np.max(np.abs(got - ref.vapo_lambda(m, alpha)))))
    return worst


def test_vapo_lambda_parity_with_areal():
    assert vapo_lambda_max_diff(cases=40) < 1e-6


def value_loss_max_diff(cases=200, seed=7):
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(cases):
        shape = fixed_shape(rng, (1, 4), (1, 8))
        m = rng.random(shape) < 0.7
        m[0, 0] = True
        vp, old, ret = (rng.normal(size=shape) for _ in range(3))
        clip = float(rng.choice([0.1, 0.5, 2.0]))
        got = credax.value_loss(vp, old, ret, m, clip=clip)
        loss, frac = peer.verl_value_loss(vp, ret, old, m.astype(float), clip)
        rloss, rfrac = ref.value_loss(vp, old, ret, m, clip)
        worst = max(worst, abs(float(got.loss) - loss), abs(float(got.clip_frac) - frac),
                    abs(float(got.loss) - rloss), abs(float(got.clip_frac) - rfrac))
    return worst


def test_value_loss_parity_with_verl():
    assert value_loss_max_diff(cases=60) < 1e-5


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------


def test_rows_never_interact_and_masked_values_never_matter():
    rng = np.random.default_rng(8)
    r, v, m = random_token_batch(rng)
    base = credax.gae_advantages(r, v, m, gamma=0.9, lam=0.9)
    # Changing another row (an episode boundary) changes nothing in row 1.
    r2, v2 = r.copy(), v.copy()
    r2[2:], v2[2:] = 5.0, -3.0
    other = credax.gae_advantages(r2, v2, m, gamma=0.9, lam=0.9)
    np.testing.assert_array_equal(np.asarray(base.advantages[1]), np.asarray(other.advantages[1]))
    # Masked values (NaN above) replaced by anything: bit-identical.
    r3, v3 = np.where(m, r, 1e6), np.where(m, v, -1e6)
    third = credax.gae_advantages(r3, v3, m, gamma=0.9, lam=0.9)
    np.testing.assert_array_equal(np.asarray(base.advantages), np.asarray(third.advantages))
    assert np.all(np.asarray(base.advantages)[~m] == 0)


def test_value_loss_gradient_finite_with_nan_padding_and_only_through_values():
    v = jnp.array([[1.0, jnp.nan], [0.5, 2.0]])
    old = jnp.array([[0.8, jnp.nan], [0.5, 1.0]])
    ret = jnp.array([[2.0, jnp.nan], [0.0, 2.0]])
    m = jnp.array([[True, False], [True, True]])
    g = jax.grad(lambda x: credax.value_loss(x, old, ret, m, clip=0.5).loss)(v)
    # token-mean over 3 steps, ½(V - R)²: d/dV = (V - R)/3 unless the clipped branch binds.
    # step (0,0): clip(1, .3, 1.3) = 1 -> unclipped = clipped -> (1-2)/3; (1,0): (.5-0)/3;
    # (1,1): clip(2, .5, 1.5) = 1.5 -> clipped (.25) < unclipped (0) ? no: unclipped 0 -> max is
    # clipped .25, whose gradient w.r.t. V is 0 (V is outside the clip range).
    close(g, [[-1 / 3, 0.0], [0.5 / 3, 0.0]])


def test_jit_vmap_and_traced_lambda():
    rng = np.random.default_rng(9)
    r, v, m = random_token_batch(rng)
    r, v = np.nan_to_num(r), np.nan_to_num(v)
    f = jax.jit(lambda lam: credax.gae_advantages(r, v, m, gamma=0.9, lam=lam).advantages)
    close(f(0.7), credax.gae_advantages(r, v, m, gamma=0.9, lam=0.7).advantages)
    stacked = jax.vmap(lambda rr: credax.gae_advantages(rr, v, m, gamma=0.9, lam=0.5).advantages)(
        jnp.stack([r, 2 * r]))
    close(stacked[1], credax.gae_advantages(2 * r, v, m, gamma=0.9, lam=0.5).advantages)


def test_errors_name_the_argument():
    r, m = jnp.zeros((2, 3)), jnp.ones((2, 3), bool)
    with pytest.raises(ValueError, match="`lam`"):
        credax.gae_advantages(r, r, m, lam=1.5)
    with pytest.raises(ValueError, match="`gamma`"):
        credax.gae_advantages(r, r, m, gamma=-0.1)
    with pytest.raises(ValueError, match="`lam`"):
        credax.gae_advantages(r, r, m, lam=jnp.ones(3))
    with pytest.raises(TypeError, match="`mask`"):
        credax.gae_advantages(r, r, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="`bootstrap`"):
        credax.gae_advantages(r, r, m, bootstrap=jnp.zeros(3))
    with pytest.raises(ValueError, match="`alpha`"):
        credax.vapo_lambda(m, alpha=0.0)
    with pytest.raises(ValueError, match="`clip`"):
        credax.value_loss(r, r, r, m, clip=-1.0)
    with pytest.raises(ValueError, match="`values`"):
        credax.turn_gae_advantages(r, jnp.zeros((3, 4)), jnp.zeros((3, 4), int), m)


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("f32", "gae_rewards_beyond_float32")
def _():
    r = np.zeros((1, 3))
    r[0, 2] = 5e38
    raises(ValueError, r"`rewards` holds 5e\+38", credax.gae_advantages, r, np.zeros((1, 3)),
           np.ones((1, 3), bool))


ZERO_GAE = {
    "gae_no_steps": (lambda: credax.gae_advantages(np.zeros((2, 0)), np.zeros((2, 0)),
                                                   np.ones((2, 0), bool)), (2, 0)),
    "gae_no_rows_no_steps": (lambda: credax.gae_advantages(np.zeros((0, 0)), np.zeros((0, 0)),
                                                           np.ones((0, 0), bool)), (0, 0)),
    "gae_no_steps_row_lam": (lambda: credax.gae_advantages(
        np.zeros((2, 0)), np.zeros((2, 0)), np.ones((2, 0), bool), lam=np.array([0.5, 1.0]),
        bootstrap=np.ones(2)), (2, 0)),
    "turn_gae_no_turns": (lambda: credax.turn_gae_advantages(
        np.zeros((2, 0)), np.zeros((2, 3)), -np.ones((2, 3), int), np.ones((2, 0), bool)), (2, 0)),
    "turn_gae_no_turns_no_tokens": (lambda: credax.turn_gae_advantages(
        np.zeros((2, 0)), np.zeros((2, 0)), np.zeros((2, 0), int), np.ones((2, 0), bool)), (2, 0)),
    "turn_gae_no_rows": (lambda: credax.turn_gae_advantages(
        np.zeros((0, 2)), np.zeros((0, 3)), np.zeros((0, 3), int), np.ones((0, 2), bool)), (0, 2)),
}


for _label, (_call, _shape) in ZERO_GAE.items():

    def _p(call=_call, shape=_shape):
        # Before: IndexError from inside the scan for an empty step axis.
        out = call()
        for field in out:
            assert field.shape == shape

    probe("gae", f"zero_length_{_label}")(_p)


@probe("gae", "zero_length_turn_values")
def _():
    out = credax.turn_values(np.zeros((2, 0), np.float32), np.zeros((2, 0), int), num_turns=2)
    assert out.values.shape == (2, 2) and not np.asarray(out.has_token).any()


_ROW = np.ones((2, 3), bool)


BAD_ROWS = {
    "lam_numpy_above_1": ("lam", np.array([0.5, 1.5]), r"`lam` must lie in \[0, 1\]; got 1.5 at row 1"),
    "lam_numpy_negative": ("lam", np.array([-0.1, 0.5]), r"`lam` must lie in \[0, 1\]; got -0.1 at row 0"),
    "lam_numpy_nan": ("lam", np.array([0.5, NAN]), r"`lam` must lie in \[0, 1\]; got nan at row 1"),
    "lam_list": ("lam", [0.9, 2.0], r"`lam` must lie in \[0, 1\]; got 2.0 at row 1"),
    "lam_jax_committed": ("lam", jnp.array([0.5, 1.01]), r"`lam` must lie in \[0, 1\]; got 1.01"),
    "gamma_numpy_above_1": ("gamma", np.array([1.0, 1.2]), r"`gamma` must lie in \[0, 1\]; got 1.2"),
    "gamma_numpy_negative": ("gamma", np.array([-1.0, 0.5]), r"`gamma` must lie in \[0, 1\]; got -1.0"),
    "gamma_jax_inf": ("gamma", jnp.array([INF, 0.5]), r"`gamma` must lie in \[0, 1\]; got inf"),
}


for _label, (_name, _value, _match) in BAD_ROWS.items():

    def _p(name=_name, value=_value, match=_match):
        # Before: the per-row values were never checked (only scalars were): γ = -1 or λ = 1.5
        # gave finite garbage, NaN gave NaN rows.
        raises(ValueError, match, credax.gae_advantages, np.zeros((2, 3)), np.zeros((2, 3)), _ROW,
               **{name: value})
        raises(ValueError, match, credax.turn_gae_advantages, np.zeros((2, 2)), np.zeros((2, 3)),
               np.array([[0, 0, 1], [0, 1, 1]]), np.ones((2, 2), bool), **{name: value})

    probe("gae", f"per_row_{_label}")(_p)


@probe("gae", "per_row_valid_values_work")
def _():
    # Row 0: λ = 0 (one-step TD), row 1: λ = 1 (Monte Carlo), γ = 1, V = 0, reward 1 at the end:
    # row 0 advantages (0, 0, 1) (δ_j = r_j), row 1 (1, 1, 1).
    r = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    out = credax.gae_advantages(r, np.zeros((2, 3)), _ROW, lam=np.array([0.0, 1.0]))
    np.testing.assert_allclose(out.advantages, [[0, 0, 1], [1, 1, 1]])


@probe("gae", "per_row_traced_is_used_as_given")
def _():
    # Inside the caller's jit the values cannot be seen: used as given (documented).
    f = jax.jit(lambda lam: credax.gae_advantages(np.zeros((2, 3)), np.zeros((2, 3)), _ROW,
                                                  lam=lam).advantages)
    assert f(jnp.array([0.5, 1.5])).shape == (2, 3)


@probe("gae", "per_row_wrong_shape_named")
def _():
    raises(ValueError, r"`lam` must be a scalar or have shape \[B\]", credax.gae_advantages,
           np.zeros((2, 3)), np.zeros((2, 3)), _ROW, lam=np.array([0.5, 0.5, 0.5]))


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

"""FACA: the outcome advantage plus the next user turn's reaction normalised per (prompt, segment).

Ground truth: hand-worked goldens (the derivation next to each) and the float64 loop of
``tests/reference/faca.py``, written from the docstring's formulas without credax. FACA's code is
not public (field notes 2026-12-03 §1), so there is no parity test. Properties: ``reaction_coef=0``
is GRPO's outcome advantage on every valid segment, padding and row order do not matter, the
degenerate-input rule (a NaN makes NaN of exactly the outputs whose formula reads it), and bad
input raises an error naming the argument.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from tests.reference import faca as ref

NAN = float("nan")
VALUES = np.array([0.0, 0.35, 1 / 3, 0.5, 1.0, 2.0, -1.0], np.float32)
EXACT = credax.Normalization(eps=0.0)


def test_golden_explicit_reaction_mask_singletons_and_unread_nans():
    # Prompt 4: rows 0, 1, 2; prompt 7: row 3 alone. reaction_coef 0.5, eps 0.
    # Â^O (prompt 4): outcomes 1, 0, .5: mean .5, unbiased std .5 -> 1, -1, 0; row 3 singleton 0.
    # Reactions read only where reaction_mask is true (the NaNs sit where it is false):
    #   (4, seg 0): rows 0, 1: 2, 0 -> mean 1, std √2 -> +1/√2, -1/√2
    #   (4, seg 1): rows 0, 2: 0, 1 -> -1/√2, +1/√2          (row 1's seg 1 has no reaction)
    #   (7, seg 0): row 3 alone -> 0
    # A = Â^O + .5 Â^R on reaction segments, Â^O on the other valid ones, 0 on padded ones:
    #   row 0: 1 + h, 1 - h, 1        row 1: -1 - h, -1, 0 (padded)
    #   row 2: 0 (no reaction), h, 0   row 3: 0, 0, 0 (padded)        with h = .5/√2
    reactions = np.array([[2, 0, NAN], [0, NAN, NAN], [NAN, 1, 5], [3, NAN, 0]], np.float32)
    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]], bool)
    react = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0]], bool)
    outcome = np.array([1, 0, 0.5, 1], np.float32)
    a = credax.faca_advantages(reactions, outcome, mask, np.array([4, 4, 4, 7]),
                               reaction_mask=react, reaction_coef=0.5, normalization=EXACT)
    h = 0.5 / math.sqrt(2)
    np.testing.assert_allclose(a, [[1 + h, 1 - h, 1], [-1 - h, -1, 0], [0, h, 0], [0, 0, 0]],
                               atol=1e-6)


def test_golden_default_mask_with_a_hole_and_a_padding_row():
    # One prompt. Row 2 is padding (no valid turn; NaN outcome and reactions: never read).
    # Row 3 has a hole: valid turns 0 and 2, so its last valid turn is 2.
    # Trajectories 0, 1, 3: outcomes 1, 0, 1: mean 2/3, unbiased std 1/√3 ->
    #   Â^O = 1/√3, -2/√3, 1/√3 (= .57735, -1.1547, .57735).
    # Default reactions: row 0 seg 0 (its last is 1), row 1 segs 0, 1, row 3 seg 0.
    #   seg 0: rows 0, 1, 3: 1, 0, 2 -> mean 1, std 1 -> 0, -1, 1
    #   seg 1: row 1 alone -> 0          (row 0's 9 is its last segment: no reaction)
    # A (coef 1): row 0: o, o, 0; row 1: -2o - 1, -2o, -2o; row 2: 0; row 3: o + 1, 0, o (o = 1/√3)
    reactions = np.array([[1, 9, NAN], [0, 3, 9], [NAN, NAN, NAN], [2, NAN, 9]], np.float32)
    mask = np.array([[1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 0, 1]], bool)
    outcome = np.array([1, 0, NAN, 1], np.float32)
    a = credax.faca_advantages(reactions, outcome, mask, np.zeros(4, np.int32),
                               normalization=EXACT)
    o = 1 / math.sqrt(3)
    want = [[o, o, 0], [-2 * o - 1, -2 * o, -2 * o], [0, 0, 0], [o + 1, 0, o]]
    np.testing.assert_allclose(a, want, atol=1e-6)
    np.testing.assert_allclose(a, ref.faca(reactions, outcome, mask, np.zeros(4), eps=0.0),
                               atol=1e-6)


def random_case(rng, batch=8, turns=4, holes=True):
    """Ragged rows (holes and rows without a turn too), a few prompts (singletons likely),
    values with repeats (constant sets), NaN wherever nothing may read it."""
    if holes:
        mask = rng.random((batch, turns)) < 0.7
    else:
        mask = np.arange(turns)[None, :] < rng.integers(0, turns + 1, size=(batch, 1))
    react = mask & (rng.random((batch, turns)) < 0.7)
    reactions = rng.choice(VALUES, size=(batch, turns))
    outcome = rng.choice(VALUES, size=batch)
    ids = rng.choice(np.array([-3, 0, 7], np.int32), size=batch)
    outcome[~mask.any(axis=1)] = np.nan
    return reactions, outcome, mask, react, ids


@pytest.mark.parametrize("norm, opts", [
    (None, {}),
    (credax.Normalization(eps=0.0, ddof=0), dict(eps=0.0, ddof=0)),
    (credax.Normalization(scale="none"), dict(scale="none")),
])
@pytest.mark.parametrize("coef", [1.0, 0.5, -2.0])
def test_matches_the_float64_loop(norm, opts, coef):
    rng = np.random.default_rng(0)
    for n in range(12):
        reactions, outcome, mask, react, ids = random_case(rng, holes=n % 2 == 0)
        given = None if n % 3 == 0 else react
        read = ref.default_reaction_mask(mask) if given is None else react
        reactions = np.where(read, reactions, np.nan).astype(np.float32)  # unread: NaN
        got = credax.faca_advantages(reactions, outcome, mask, ids, reaction_mask=given,
                                     reaction_coef=coef, normalization=norm)
        want = ref.faca(reactions, outcome, mask, ids, reaction_mask=given, reaction_coef=coef,
                        **opts)
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


def test_coef_zero_is_grpo_on_every_valid_segment():
    rng = np.random.default_rng(1)
    for _ in range(5):
        reactions, outcome, mask, react, ids = random_case(rng)
        has_turn = mask.any(axis=1)
        for given in (None, react):
            a = credax.faca_advantages(reactions, outcome, mask, ids, reaction_mask=given,
                                       reaction_coef=0.0)
            grpo = credax.grpo_advantages(outcome, ids, has_turn)
            np.testing.assert_array_equal(a, np.where(mask, np.asarray(grpo)[:, None], 0.0))


def test_padding_rows_and_turns_and_row_order_do_not_matter():
    rng = np.random.default_rng(2)
    for n in range(5):
        reactions, outcome, mask, react, ids = random_case(rng, holes=n % 2 == 1)
        given = None if n % 2 else react
        base = np.asarray(credax.faca_advantages(reactions, outcome, mask, ids,
                                                 reaction_mask=given))
        # Two padding rows and one padded turn, all garbage, inserted at random places.
        b, k = mask.shape
        rows = np.sort(rng.choice(b + 2, size=b, replace=False))
        big_mask = np.zeros((b + 2, k + 1), bool)
        big_mask[rows, :k] = mask
        big_x = np.full((b + 2, k + 1), np.nan, np.float32)
        big_x[rows, :k] = np.where(mask, reactions, 1e30)
        big_r = np.full(b + 2, np.nan, np.float32)
        big_r[rows] = outcome
        big_ids = rng.choice(np.array([-3, 0, 7], np.int32), size=b + 2)
        big_ids[rows] = ids
        big_react = None
        if given is not None:
            big_react = np.zeros((b + 2, k + 1), bool)
            big_react[rows, :k] = react
        padded = np.asarray(credax.faca_advantages(big_x, big_r, big_mask, big_ids,
                                                   reaction_mask=big_react))
        np.testing.assert_array_equal(padded[rows, :k], base)
        assert (np.delete(padded, rows, axis=0) == 0).all() and (padded[:, k] == 0).all()
        # Row order: the rows move with their values.
        perm = rng.permutation(b)
        moved = credax.faca_advantages(reactions[perm], outcome[perm], mask[perm], ids[perm],
                                       reaction_mask=None if given is None else react[perm])
        np.testing.assert_allclose(moved, base[perm], atol=1e-6)


def test_default_reaction_mask_is_every_valid_turn_but_the_last():
    rng = np.random.default_rng(4)
    reactions, outcome, mask, _, ids = random_case(rng, batch=12, turns=5)
    default = credax.faca_advantages(reactions, outcome, mask, ids)
    explicit = credax.faca_advantages(reactions, outcome, mask, ids,
                                      reaction_mask=ref.default_reaction_mask(mask))
    np.testing.assert_array_equal(default, explicit)
    # A row with one valid turn has no reaction: its turn gets Â^O, whatever the reaction.
    one = np.array([[True, False]])
    a = credax.faca_advantages(np.array([[NAN, NAN]], np.float32), np.ones(1, np.float32), one,
                               np.zeros(1, np.int32))
    np.testing.assert_array_equal(a, [[0.0, 0.0]])


def test_nan_reaction_makes_nan_of_its_set_only():
    rng = np.random.default_rng(5)
    reactions, outcome, mask, react, ids = random_case(rng, batch=10, turns=4)
    outcome = np.where(mask.any(axis=1), outcome, 0.0).astype(np.float32)
    react[0, 1] = mask[0, 1] = True  # the bad entry: row 0, segment 1, with a reaction
    base = np.asarray(credax.faca_advantages(reactions, outcome, mask, ids, reaction_mask=react))
    for bad in (np.nan, np.inf, -np.inf):
        x = reactions.copy()
        x[0, 1] = bad
        out = np.asarray(credax.faca_advantages(x, outcome, mask, ids, reaction_mask=react))
        hit = np.zeros(mask.shape, bool)
        hit[:, 1] = react[:, 1] & (ids == ids[0])  # (prompt of row 0, segment 1), reactions
        assert np.isnan(out[hit]).all()
        np.testing.assert_array_equal(out[~hit], base[~hit])
    # Unread: a NaN where the segment has no reaction (valid or padded) changes nothing.
    x = np.where(react, reactions, np.nan).astype(np.float32)
    np.testing.assert_array_equal(
        credax.faca_advantages(x, outcome, mask, ids, reaction_mask=react), base)
    # A NaN outcome: NaN on every valid segment of its prompt's rows, nothing else.
    r = outcome.copy()
    r[0] = np.nan
    out = np.asarray(credax.faca_advantages(reactions, r, mask, ids, reaction_mask=react))
    hit = mask & (ids == ids[0])[:, None]
    assert np.isnan(out[hit]).all()
    np.testing.assert_array_equal(out[~hit], base[~hit])


def test_nan_reaction_leaves_the_other_gradients_as_they_were():
    reactions = np.array([[NAN, 1.0, 0.0], [1.0, 0.0, 0.0], [0.5, 2.0, 0.0]], np.float32)
    clean = np.nan_to_num(reactions, nan=0.25)
    outcome = np.array([1.0, 0.0, 0.5], np.float32)
    mask = np.ones((3, 3), bool)
    ids = np.zeros(3, np.int32)
    keep = np.zeros((3, 3), bool)
    keep[:, 1:] = True  # every output but segment 0's set (the NaN's)

    def grad(x):
        return jax.grad(lambda x, o: jnp.sum(jnp.where(
            keep, credax.faca_advantages(x, o, mask, ids), 0.0) * jnp.arange(9.0).reshape(3, 3)),
            argnums=(0, 1))(jnp.asarray(x), jnp.asarray(outcome))

    g_bad, g_clean = grad(reactions), grad(clean)
    assert np.isfinite(g_bad[0]).all() and np.isfinite(g_bad[1]).all()
    np.testing.assert_array_equal(g_bad[0], g_clean[0])
    np.testing.assert_array_equal(g_bad[1], g_clean[1])


def test_traced_stray_reaction_mask_makes_its_row_nan():
    rng = np.random.default_rng(6)
    reactions, outcome, mask, react, ids = random_case(rng, holes=False)
    b = int(np.flatnonzero(mask.any(axis=1) & ~mask.all(axis=1))[0])  # a row with padding
    k = int(np.flatnonzero(~mask[b])[0])
    stray = react.copy()
    stray[b, k] = True
    out = np.asarray(jax.jit(lambda rm: credax.faca_advantages(
        reactions, outcome, mask, ids, reaction_mask=rm))(stray))
    base = np.asarray(credax.faca_advantages(reactions, outcome, mask, ids, reaction_mask=react))
    assert np.isnan(out[b][mask[b]]).all() and (out[b][~mask[b]] == 0).all()
    others = np.arange(len(ids)) != b
    np.testing.assert_array_equal(out[others], base[others])  # the stray entered no statistic


def test_traced_coefficient_compiles_once_and_reaches_only_reaction_segments(traced_once):
    rng = np.random.default_rng(7)
    reactions, outcome, mask, react, ids = random_case(rng)
    fn = traced_once(credax.faca_advantages)
    for coef in (0.5, 2.0):
        a = fn(reactions, outcome, mask, ids, reaction_mask=react, reaction_coef=jnp.float32(coef))
        want = ref.faca(reactions, outcome, mask, ids, reaction_mask=react, reaction_coef=coef)
        np.testing.assert_allclose(a, want, atol=2e-5)
    nan = np.asarray(jax.jit(lambda c: credax.faca_advantages(
        reactions, outcome, mask, ids, reaction_mask=react, reaction_coef=c))(jnp.float32(NAN)))
    assert np.isnan(nan[react]).all()
    zero = np.asarray(credax.faca_advantages(reactions, outcome, mask, ids, reaction_mask=react,
                                             reaction_coef=0.0))
    np.testing.assert_array_equal(nan[~react], zero[~react])


def test_dtypes_and_groups():
    x = jnp.asarray([[0.0, 1.0, 0.0], [1.0, 0.35, 0.0]], jnp.bfloat16)
    r = jnp.asarray([1.0, 0.0], jnp.bfloat16)
    mask = np.ones((2, 3), bool)
    a = credax.faca_advantages(x, r, mask, np.zeros(2, np.int32))
    b = credax.faca_advantages(x.astype(jnp.float32), r.astype(jnp.float32), mask,
                               credax.groups(np.zeros(2, np.int32)))
    assert a.dtype == jnp.bfloat16 and b.dtype == jnp.float32
    np.testing.assert_array_equal(a, b.astype(jnp.bfloat16))
    ints = credax.faca_advantages(np.array([[1, 0], [0, 0]]), np.array([1, 0]),
                                  np.ones((2, 2), bool), np.zeros(2, np.int32))
    assert ints.dtype == jnp.float32
    # No turns at all: an empty [B, 0].
    empty = credax.faca_advantages(np.zeros((2, 0), np.float32), np.zeros(2, np.float32),
                                   np.zeros((2, 0), bool), np.zeros(2, np.int32))
    assert empty.shape == (2, 0)


X, R, M = np.zeros((2, 3), np.float32), np.zeros(2, np.float32), np.array([[1, 1, 0], [1, 1, 1]], bool)
IDS = np.zeros(2, np.int32)
STRAY = np.array([[1, 0, 1], [0, 0, 0]], bool)


@pytest.mark.parametrize("call, error, match", [
    (lambda: credax.faca_advantages(X, R, M, IDS, reaction_mask=STRAY), ValueError,
     r"`reaction_mask` must be false on padded turns(.|\n)*row 0 has a reaction at padded turn 2"),
    (lambda: credax.faca_advantages(X, R, M, IDS, reaction_mask=jnp.asarray(STRAY)), ValueError,
     "`reaction_mask` must be false on padded turns"),
    (lambda: credax.faca_advantages(X, R, M, IDS, reaction_mask=STRAY.astype(np.float32)),
     TypeError, "`reaction_mask` must be a boolean array"),
    (lambda: credax.faca_advantages(X, R, M, IDS, reaction_mask=STRAY[:, :2]), ValueError,
     "`reaction_mask` must have shape"),
    (lambda: credax.faca_advantages(X[0], R, M, IDS), ValueError, "`reactions`"),
    (lambda: credax.faca_advantages(X, R[:1], M, IDS), ValueError, "`outcome_rewards`"),
    (lambda: credax.faca_advantages(X.astype(complex), R, M, IDS), TypeError, "`reactions`"),
    (lambda: credax.faca_advantages(X, R, M.astype(int), IDS), TypeError, "`turn_mask`"),
    (lambda: credax.faca_advantages(X, R, M, np.zeros(3, np.int32)), ValueError, "B=3"),
    (lambda: credax.faca_advantages(X, R, M, IDS.astype(float)), TypeError, "`group_ids`"),
    (lambda: credax.faca_advantages(X, R, M, IDS, reaction_coef=NAN), ValueError,
     "`reaction_coef` must be finite"),
    (lambda: credax.faca_advantages(X, R, M, IDS, reaction_coef=float("inf")), ValueError,
     "`reaction_coef` must be finite"),
    (lambda: credax.faca_advantages(X, R, M, IDS, reaction_coef=None), TypeError,
     "`reaction_coef` must be a number"),
    (lambda: credax.faca_advantages(X, R, M, IDS, reaction_coef=np.ones(2)), ValueError,
     "`reaction_coef`"),
    (lambda: credax.faca_advantages(X, R, M, IDS, normalization=credax.presets.TRL.asdict()),
     TypeError, "normalization"),
    (lambda: credax.faca_advantages(X, R, M, IDS, eps=0.0), TypeError,
     r"'eps'(.|\n)*normalization=credax\.Normalization"),
])
def test_errors_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()

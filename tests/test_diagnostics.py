"""Credit diagnostics: dead groups vs p^G + (1-p)^G, GiGPO's anchor hit ratio, credit summaries.

Ground truth: the loops of tests/reference/estimators.py, hand-worked goldens (in the docstrings
and below), and a Monte Carlo check that the expectation is what i.i.d. Bernoulli groups give.

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

import numpy as np
import pytest

import credax
from tests.probes import INF, NAN, Probes
from tests.reference import estimators as ref


def test_dead_groups_matches_reference():
    rng = np.random.default_rng(0)
    # 40 cases over four batch sizes (the corners and the middle of 1..19): jit compiles once per
    # size, where a fresh size per case compiled ~19 programs; ids, rewards and masks still vary.
    for _ in range(40):
        batch = int(rng.choice([1, 2, 7, 19]))
        r = rng.choice([0.0, 1.0, 0.5], size=batch)
        ids = rng.integers(-2, 5, size=batch).astype(np.int32)
        mask = rng.random(batch) < 0.85
        got = credax.dead_groups(r, ids, mask)
        want = ref.dead_groups(r, ids, mask)
        np.testing.assert_allclose([got.fraction, got.expected, got.num_groups], want, atol=1e-5)


def test_dead_fraction_expectation_on_iid_bernoulli():
    # 512 prompts of 8 with a shared p = 0.2: the measured dead fraction averages to
    # p^8 + (1-p)^8 = 0.16777 + 2.6e-6 (within Monte Carlo error over 20 batches, sd ~0.004).
    rng = np.random.default_rng(1)
    ids = np.repeat(np.arange(512, dtype=np.int32), 8)
    fractions, expected = [], []
    for _ in range(20):
        d = credax.dead_groups((rng.random(ids.size) < 0.2).astype(np.float32), ids)
        fractions.append(float(d.fraction))
        expected.append(float(d.expected))
    assert abs(np.mean(fractions) - (0.2 ** 8 + 0.8 ** 8)) < 0.01
    assert abs(np.mean(expected) - (0.2 ** 8 + 0.8 ** 8)) < 0.01


def test_anchor_hit_ratio_matches_reference_and_never_pools_prompts():
    rng = np.random.default_rng(2)
    for _ in range(30):
        anchors = rng.integers(0, 3, size=(5, 4)).astype(np.int32)
        mask = np.arange(4)[None, :] < rng.integers(0, 5, size=5)[:, None]
        ids = rng.integers(0, 3, size=5).astype(np.int32)
        np.testing.assert_allclose(credax.anchor_hit_ratio(anchors, mask, ids),
                                   ref.anchor_hit_ratio(anchors, mask, ids), atol=1e-6)
    # The same state in two prompts is no hit.
    assert float(credax.anchor_hit_ratio(np.array([[7], [7]]), np.ones((2, 1), bool),
                                         np.array([0, 1]))) == 0.0


def test_credit_summaries_match_reference():
    rng = np.random.default_rng(3)
    credit = rng.normal(size=(6, 5))
    mask = np.arange(5)[None, :] < rng.integers(0, 6, size=6)[:, None]
    credit[~mask] = np.nan
    roles = rng.integers(-1, 4, size=(6, 5)).astype(np.int32)
    by_turn = credax.credit_by_turn(credit, mask)
    turn_idx = np.broadcast_to(np.arange(5), (6, 5))
    want = ref.credit_by_category(credit, turn_idx, mask, 5)
    np.testing.assert_allclose(np.stack([by_turn.mean, by_turn.mean_abs, by_turn.count], 1), want,
                               atol=1e-5)
    by_role = credax.credit_by_role(credit, roles, mask)
    want = ref.credit_by_category(credit, roles, mask, 4)
    np.testing.assert_allclose(np.stack([by_role.mean, by_role.mean_abs, by_role.count], 1), want,
                               atol=1e-5)


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


R6 = np.array([0.5, 0.0, 1.0, 1.0, 0.0, 0.0], np.float32)  # row 0 gets the bad value
IDS6 = np.array([0, 0, 1, 1, 2, 2])


for _bad in (NAN, INF, -INF):

    def _p(bad=_bad):
        # Groups [bad, 0], [1, 1], [0, 0]: the bad group is dead (as degenerate_groups calls it:
        # no usable signal), the others are dead anyway -> 3/3; p includes the bad reward -> NaN.
        r = R6.copy()
        r[0] = bad
        d = credax.dead_groups(r, IDS6)
        assert float(d.fraction) == 1.0 and float(d.num_groups) == 3.0
        assert np.isnan(float(d.expected))

    probe("nonfinite", f"dead_groups_valid_{_bad}")(_p)

    def _p(bad=_bad):
        # [bad, 0, 1] has spread among its finite members, yet it is no live group: counted dead.
        # [1, 1, 0] is live -> fraction 1/2 (the bad value never makes a group look healthy).
        r = np.array([bad, 0.0, 1.0, 1.0, 1.0, 0.0], np.float32)
        d = credax.dead_groups(r, np.array([0, 0, 0, 1, 1, 1]))
        assert float(d.fraction) == 0.5 and np.isnan(float(d.expected))

    probe("nonfinite", f"dead_groups_spread_group_{_bad}")(_p)

    def _p(bad=_bad):
        # Row 0 masked: groups [0] (a singleton: dead), [1, 1], [0, 0] -> fraction 1;
        # p = 2/5, expected = (1 + (.4² + .6²) + (.4² + .6²)) / 3 = (1 + .52 + .52) / 3 = .68.
        r = R6.copy()
        r[0] = bad
        d = credax.dead_groups(r, IDS6, np.array([False, True, True, True, True, True]))
        assert float(d.fraction) == 1.0
        np.testing.assert_allclose(float(d.expected), 0.68, rtol=1e-6)

    probe("nonfinite", f"dead_groups_masked_{_bad}")(_p)


CREDIT = np.array([[1.0, -2.0, 7.0], [3.0, 9.0, 11.0]], np.float32)
CREDIT_MASK = np.array([[True, True, False], [True, False, False]])
CREDIT_ROLES = np.array([[0, 1, 2], [0, 3, 1]])


for _bad in (NAN, INF, -INF):

    def _p(bad=_bad):
        # Turn 0 holds {bad, 3}: NaN mean and mean |credit|, count 2; turn 1 = {-2}; turn 2 empty.
        c = CREDIT.copy()
        c[0, 0] = bad
        s = credax.credit_by_turn(c, CREDIT_MASK)
        np.testing.assert_array_equal(s.mean, [NAN, -2.0, 0.0])
        np.testing.assert_array_equal(s.mean_abs, [NAN, 2.0, 0.0])
        np.testing.assert_array_equal(s.count, [2.0, 1.0, 0.0])

    probe("nonfinite", f"credit_by_turn_valid_{_bad}")(_p)

    def _p(bad=_bad):
        # Masked turns are never read: turn 0 = {1, 3} -> 2, turn 1 = {-2}, turn 2 empty.
        c = CREDIT.copy()
        c[0, 2] = c[1, 1] = c[1, 2] = bad
        s = credax.credit_by_turn(c, CREDIT_MASK)
        np.testing.assert_array_equal(s.mean, [2.0, -2.0, 0.0])
        np.testing.assert_array_equal(s.mean_abs, [2.0, 2.0, 0.0])

    probe("nonfinite", f"credit_by_turn_masked_{_bad}")(_p)

    def _p(bad=_bad):
        # Counted turns: (0,0) role 0, (0,1) role 1, (1,0) role 0. The bad value is in role 0.
        c = CREDIT.copy()
        c[1, 0] = bad
        s = credax.credit_by_role(c, CREDIT_ROLES, CREDIT_MASK)
        np.testing.assert_array_equal(s.mean, [NAN, -2.0, 0.0, 0.0])
        np.testing.assert_array_equal(s.mean_abs, [NAN, 2.0, 0.0, 0.0])
        np.testing.assert_array_equal(s.count, [2.0, 1.0, 0.0, 0.0])

    probe("nonfinite", f"credit_by_role_valid_{_bad}")(_p)

    def _p(bad=_bad):
        # All turns valid; the bad values sit on an unlabeled (-1) and an unknown (7) turn, which
        # are not counted: role 0 = {1, 3} -> 2; role 1 = {-2, 11} -> 4.5, |.| 6.5; role 3 = {}.
        c = CREDIT.copy()
        c[0, 2] = c[1, 1] = bad
        roles = np.array([[0, 1, -1], [0, 7, 1]])
        s = credax.credit_by_role(c, roles, np.ones((2, 3), bool))
        np.testing.assert_array_equal(s.mean, [2.0, 4.5, 0.0, 0.0])
        np.testing.assert_array_equal(s.mean_abs, [2.0, 6.5, 0.0, 0.0])
        np.testing.assert_array_equal(s.count, [2.0, 2.0, 0.0, 0.0])

    probe("nonfinite", f"credit_by_role_uncounted_{_bad}")(_p)


@probe("ids", "anchor_hit_ratio_64bit_anchors")
def _():
    # Anchors 2**32 + 5 and 5 are two states: no step shares its (prompt, anchor) group -> 0.
    # Before: JAX wrapped 2**32 + 5 to 5 and the ratio was 1.
    out = credax.anchor_hit_ratio(np.array([[2**32 + 5], [5]]), np.ones((2, 1), bool),
                                  np.array([0, 0]))
    assert float(out) == 0.0


@probe("ids", "credit_by_role_int8_roles_many_roles")
def _():
    # int8 roles with num_roles=200: before, OverflowError from inside JAX ("Python integer 150
    # out of bounds for int8"). Widened first: role 5 and role 120 each count once.
    s = credax.credit_by_role(np.ones((1, 2), np.float32), np.array([[5, 120]], np.int8),
                              np.ones((1, 2), bool), num_roles=200)
    assert s.count[5] == 1 and s.count[120] == 1 and float(np.sum(s.count)) == 2


@probe("ids", "credit_by_role_uint8_roles")
def _():
    s = credax.credit_by_role(np.ones((1, 2), np.float32), np.array([[250, 0]], np.uint8),
                              np.ones((1, 2), bool), num_roles=300)
    assert s.count[250] == 1 and s.count[0] == 1


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

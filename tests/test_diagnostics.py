"""Credit diagnostics: dead groups vs p^G + (1-p)^G, GiGPO's anchor hit ratio, credit summaries.

Ground truth: the loops of tests/reference/estimators.py, hand-worked goldens (in the docstrings
and below), and a Monte Carlo check that the expectation is what i.i.d. Bernoulli groups give.
"""

import numpy as np

import credax
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

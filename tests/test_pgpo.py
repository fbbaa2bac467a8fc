"""PGPO: potentials from anchor-group mean returns, credited as their difference.

Ground truth: the float64 loop of ``tests/reference/pgpo.py``, hand-worked goldens, the telescoping
property of the γ = 1 potential difference, and padding/permutation properties. PGPO has no public
code (field notes 2026-12-03 §1), so there is no parity test.
"""

import numpy as np
import pytest

import credax
from tests.reference import pgpo as ref


def test_golden():
    # One prompt, three trajectories, γ = 1, outcome on the last step:
    #   anchors (1, 2) reward (0, 1): returns (1, 1); (1, 2) reward (0, 0): returns (0, 0);
    #   (1, 3) reward (0, 1): returns (1, 1).
    # Φ(1) = mean(1, 0, 1) = 2/3; Φ(2) = mean(1, 0) = .5; Φ(3) = 1 (singleton).
    # Row 0: (Φ(2) - Φ(1), G - Φ(2)) = (.5 - 2/3, 1 - .5) = (-1/6, .5)
    # Row 1: (.5 - 2/3, 0 - .5) = (-1/6, -.5); Row 2: (1 - 2/3, 1 - 1) = (1/3, 0).
    steps = np.array([[0, 1], [0, 0], [0, 1]], np.float32)
    anchors = np.array([[1, 2], [1, 2], [1, 3]])
    out = credax.pgpo_advantages(steps, anchors, np.ones((3, 2), bool), np.zeros(3, int))
    np.testing.assert_allclose(out.potentials, [[2 / 3, 0.5], [2 / 3, 0.5], [2 / 3, 1.0]],
                               atol=1e-6)
    np.testing.assert_allclose(out.advantages, [[-1 / 6, 0.5], [-1 / 6, -0.5], [1 / 3, 0.0]],
                               atol=1e-6)
    # γ = 1 telescopes: Σ_t A = G_last - Φ(s_0) = outcome - 2/3 (the outcome centred, GRPO's
    # numerator, with one shared start state).
    np.testing.assert_allclose(np.asarray(out.advantages).sum(1), [1 / 3, -2 / 3, 1 / 3], atol=1e-6)


def random_case(rng, batch=6, turns=4):
    lengths = rng.integers(0, turns + 1, batch)
    lengths[0] = turns
    mask = np.arange(turns)[None, :] < lengths[:, None]
    steps = rng.choice([0.0, 1.0, 0.35, 1 / 3], size=(batch, turns)).astype(np.float32)
    anchors = rng.integers(0, 3, size=(batch, turns)).astype(np.int32)
    ids = rng.choice([-3, 0, 7], size=batch).astype(np.int32)
    steps[~mask] = np.nan
    anchors[~mask] = 99
    return steps, anchors, mask, ids


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_matches_reference(gamma):
    rng = np.random.default_rng(0)
    for _ in range(20):
        steps, anchors, mask, ids = random_case(rng)
        got = credax.pgpo_advantages(steps, anchors, mask, ids, gamma=gamma)
        adv, phi = ref.pgpo(steps, anchors, mask, ids, gamma=gamma)
        np.testing.assert_allclose(got.advantages, adv, atol=1e-5)
        np.testing.assert_allclose(got.potentials, phi, atol=1e-5)


def test_padding_permutation_and_errors():
    rng = np.random.default_rng(3)
    steps, anchors, mask, ids = random_case(rng)
    base = credax.pgpo_advantages(steps, anchors, mask, ids)
    junk = credax.pgpo_advantages(np.where(mask, steps, 1e9), np.where(mask, anchors, 1), mask, ids)
    np.testing.assert_array_equal(base.advantages, junk.advantages)
    perm = rng.permutation(len(ids))
    permuted = credax.pgpo_advantages(steps[perm], anchors[perm], mask[perm], ids[perm])
    np.testing.assert_allclose(permuted.advantages, np.asarray(base.advantages)[perm], atol=1e-6)
    assert (np.asarray(base.advantages)[~mask] == 0).all()
    bad = steps.copy()
    bad[0, 0] = np.nan
    out = credax.pgpo_advantages(bad, anchors, mask, ids)
    assert np.isnan(np.asarray(out.potentials)[0, 0])
    with pytest.raises(ValueError, match="`gamma`"):
        credax.pgpo_advantages(steps, anchors, mask, ids, gamma=1.5)
    with pytest.raises(TypeError, match="`anchor_ids`"):
        credax.pgpo_advantages(steps, anchors.astype(float), mask, ids)

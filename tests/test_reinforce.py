"""REINFORCE++, REINFORCE++-baseline and GPG: hand-worked cases, and parity with verl 0.9.1's own
functions (``verl.trainer.ppo.core_algos``, run side by side on the same random batches when
verl and torch are installed)."""

import numpy as np
import pytest

import credax

PARITY_CASES = 40
# credax compiles once per (B, T): two fixed shapes, random lengths, groups and gaps inside them.
SHAPES = ((5, 4), (16, 9))


def _batch(rng, batch, length, gaps: bool):
    """Random prompts of 1..4 rollouts (singletons included), random response lengths, optional
    interior masked spans (tool observations), rewards with ties and zeros."""
    sizes = []
    while sum(sizes) < batch:
        sizes.append(int(rng.integers(1, 5)))
    sizes[-1] -= sum(sizes) - batch
    ids = np.repeat(rng.choice(1000, len(sizes), replace=False), sizes).astype(np.int64)
    rng.shuffle(ids)
    lengths = rng.integers(1, length + 1, size=batch)
    mask = np.arange(length)[None, :] < lengths[:, None]
    if gaps and length > 2:
        mask &= rng.random((batch, length)) > 0.3
        mask[:, 0] = True
    scores = rng.choice([0.0, 0.0, 1.0, 0.5, 0.25, 0.7], size=batch)
    return ids, mask, scores


def _outcome_cases(seed):
    rng = np.random.default_rng(seed)
    for case in range(PARITY_CASES):
        yield case, *_batch(rng, *SHAPES[case % 2], gaps=False)


def _last_token_rewards(scores, mask):
    out = np.zeros(mask.shape, np.float32)
    last = np.array([np.flatnonzero(row)[-1] for row in mask])
    out[np.arange(len(scores)), last] = scores
    return out


# --- hand-worked --------------------------------------------------------------------------------


def test_reinforce_pp_hand_worked_with_a_tool_span():
    # Row 0: tokens (0, [obs], 1) with γ = .5: the observation is skipped, G = (0 + .5·1, 0, 1).
    # Row 1: (0, 0, 0). Valid tokens: .5, 1, 0, 0, 0: μ = .3, σ² = (.04 + .49 + 3·.09)/4 = .2.
    # A = (x - .3)/sqrt(.2 + 1e-8): .4472, 1.5652, -.6708 (x3).
    r = np.array([[0.0, 5.0, 1.0], [0.0, 0.0, 0.0]], np.float32)
    m = np.array([[True, False, True], [True, True, True]])
    a = np.asarray(credax.reinforce_pp_advantages(r, m, gamma=0.5))
    s = np.sqrt(0.2 + 1e-8)
    want = np.array([[0.2 / s, 0.0, 0.7 / s], [-0.3 / s] * 3])
    np.testing.assert_allclose(a, want, rtol=1e-5)


def test_degenerate_batches_are_exactly_zero():
    # One valid token (verl's masked_var raises), or every return equal: exactly 0.
    one = credax.reinforce_pp_advantages(np.array([[3.0, 1.0]]), np.array([[True, False]]))
    np.testing.assert_array_equal(one, [[0.0, 0.0]])
    flat = credax.reinforce_pp_advantages(np.full((3, 2), 0.95, np.float32), np.ones((3, 2), bool),
                                          gamma=0.0)
    np.testing.assert_array_equal(flat, np.zeros((3, 2)))
    # REINFORCE++-baseline: every prompt constant -> centred scores 0 -> 0.
    base = credax.reinforce_pp_baseline_advantages(np.array([0.7, 0.7, 0.2, 0.2]),
                                                   np.array([1, 1, 2, 2]), np.ones((4, 3), bool))
    np.testing.assert_array_equal(base, np.zeros((4, 3)))
    # GPG: no nonzero reward -> α = B / max(0, 1) = B, and every advantage 0.
    np.testing.assert_array_equal(credax.gpg_advantages(np.zeros(3), np.array([0, 0, 1])), 0.0)


def test_gpg_mask_and_fixed_alpha():
    # Row 3 masked: B = 3 valid rows, nonzero 2 -> α = 1.5; prompt 0: ±.5 -> ±.75; row 2 alone
    # (prompt 1's other row is masked) keeps its reward .5 -> .75. f_norm = 2 halves it all.
    r = np.array([1.0, 0.0, 0.5, 9.0], np.float32)
    ids = np.array([0, 0, 1, 1])
    m = np.array([True, True, True, False])
    np.testing.assert_allclose(credax.gpg_advantages(r, ids, m), [0.75, -0.75, 0.75, 0.0])
    np.testing.assert_allclose(credax.gpg_advantages(r, ids, m, f_norm=2.0), [0.375, -0.375, 0.375, 0])
    np.testing.assert_allclose(credax.gpg_advantages(r, ids, m, alpha=1.0), [0.5, -0.5, 0.5, 0.0])


def test_bad_arguments_are_named():
    m = np.ones((2, 2), bool)
    with pytest.raises(ValueError, match="gamma"):
        credax.reinforce_pp_advantages(np.zeros((2, 2)), m, gamma=-0.1)
    with pytest.raises(ValueError, match="token_rewards"):
        credax.reinforce_pp_advantages(np.zeros(2), np.ones(2, bool))
    with pytest.raises(ValueError, match="response_mask"):
        credax.reinforce_pp_baseline_advantages(np.zeros(2), np.zeros(2, int), np.ones((3, 2), bool))
    with pytest.raises(ValueError, match="response_mask"):
        credax.reinforce_pp_baseline_advantages(np.zeros(2), np.zeros(2, int), np.ones(2, bool))
    with pytest.raises(TypeError, match="response_mask"):
        credax.reinforce_pp_baseline_advantages(np.zeros(2), np.zeros(2, int), np.ones((2, 2)))
    with pytest.raises(ValueError, match="f_norm"):
        credax.gpg_advantages(np.zeros(2), np.zeros(2, int), f_norm=0.0)
    with pytest.raises(ValueError, match="rewards"):
        credax.gpg_advantages(np.zeros((2, 1)), np.zeros(2, int))


@pytest.mark.parametrize("shape", [(3, 0), (0, 2), (0, 0)])
def test_zero_length_axes(shape):
    b = shape[0]
    assert credax.reinforce_pp_advantages(np.zeros(shape), np.ones(shape, bool)).shape == shape
    assert credax.reinforce_pp_baseline_advantages(np.zeros(b), np.zeros(b, np.int32),
                                                   np.ones(shape, bool)).shape == shape
    assert credax.gpg_advantages(np.zeros(b), np.zeros(b, np.int32)).shape == (b,)


def test_padding_garbage_never_matters():
    rng = np.random.default_rng(1)
    ids, mask, scores = _batch(rng, 5, 6, gaps=True)
    r = rng.normal(size=mask.shape).astype(np.float32)
    dirty = np.where(mask, r, np.nan).astype(np.float32)
    np.testing.assert_array_equal(credax.reinforce_pp_advantages(dirty, mask, gamma=0.9),
                                  credax.reinforce_pp_advantages(np.where(mask, r, 0), mask, gamma=0.9))


# --- parity with verl ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def verl_algos():
    torch = pytest.importorskip("torch")
    pytest.importorskip("verl")
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos

    return torch, core_algos, AlgoConfig


def test_reinforce_pp_matches_verl(verl_algos):
    torch, core_algos, AlgoConfig = verl_algos
    rng = np.random.default_rng(30)
    worst = 0.0
    for case in range(PARITY_CASES):
        batch, length = SHAPES[case % 2]
        ids, mask, _ = _batch(rng, batch, length, gaps=case % 4 < 2)
        if mask.sum() < 2:
            continue  # verl's unbiased token variance raises on one token (credax: 0, above)
        r = np.where(mask, rng.choice([0.0, 1.0, -0.5, 0.25], size=mask.shape), 0.0).astype(np.float32)
        gamma = (1.0, 0.9, 0.5)[case % 3]
        theirs, _ = core_algos.compute_reinforce_plus_plus_outcome_advantage(
            torch.from_numpy(r), torch.from_numpy(mask.astype(np.float32)),
            config=AlgoConfig(gamma=gamma))
        ours = np.asarray(credax.reinforce_pp_advantages(r, mask, gamma=gamma))
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-5, atol=2e-5, err_msg=f"case {case}")
        worst = max(worst, float(np.max(np.abs(ours - theirs.numpy()))))
    print(f"verl REINFORCE++ parity: max |credax - verl| = {worst:.3g}")


def test_reinforce_pp_baseline_matches_verl(verl_algos):
    torch, core_algos, _ = verl_algos
    for case, ids, mask, scores in _outcome_cases(31):
        if mask.sum() < 2:
            continue
        theirs, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
            torch.from_numpy(_last_token_rewards(scores, mask)),
            torch.from_numpy(mask.astype(np.float32)), index=ids)
        ours = np.asarray(credax.reinforce_pp_baseline_advantages(scores, ids, mask))
        if np.all(ours == 0):
            # A batch whose centred scores are all 0: verl's residue times 1e4 is not a signal.
            assert np.max(np.abs(theirs.numpy())) < 1e-2, case
            continue
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-5, atol=2e-5, err_msg=f"case {case}")


def test_gpg_matches_verl(verl_algos):
    torch, core_algos, _ = verl_algos
    for case, ids, mask, scores in _outcome_cases(32):
        f_norm = (1.0, 2.0)[case % 2]
        theirs, _ = core_algos.compute_gpg_outcome_advantage(
            torch.from_numpy(_last_token_rewards(scores, mask)),
            torch.from_numpy(mask.astype(np.float32)), index=ids, f_norm=f_norm)
        ours = np.asarray(credax.gpg_advantages(scores.astype(np.float32), ids, f_norm=f_norm))
        np.testing.assert_allclose(ours[:, None] * mask, theirs.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=f"case {case}")

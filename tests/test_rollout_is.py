"""Rollout/training mismatch correction in policy_loss: truncated IS weights per token / sequence.

Ground truth: verl's ``compute_rollout_correction_weights`` re-stated in NumPy
(``tests/reference/peer_forms.py``), hand-worked goldens, and the identity that matters most: the
weights are exactly 1 (the loss and its gradient bit-identical to no correction) when the rollout
and trainer log-probs agree.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from tests.reference import peer_forms as peer


def batch(seed=0, shape=(4, 7)):
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < 0.75
    mask[0, 0] = True
    logp = rng.normal(-1.0, 0.3, shape)
    old = logp + rng.normal(0, 0.2, shape)
    roll = old + rng.normal(0, 0.5, shape)
    adv = rng.normal(size=shape)
    for x in (logp, old, roll, adv):
        x[~mask] = np.nan
    return logp, old, roll, adv, mask


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_weights_are_exactly_one_when_log_probs_agree(level):
    logp, old, _, adv, mask = batch()
    def run(rollout_logp=None, **kw):
        f = lambda x: credax.policy_loss(x, old, adv, mask, rollout_logp=rollout_logp,  # noqa: E731
                                         options=credax.LossOptions(**kw))
        return jax.value_and_grad(lambda x: f(x).loss)(jnp.asarray(logp)), f(jnp.asarray(logp))
    (loss0, g0), out0 = run()
    (loss1, g1), out1 = run(rollout_logp=old, rollout_is=level, rollout_is_threshold=2.0)
    assert float(loss0) == float(loss1)
    np.testing.assert_array_equal(np.asarray(g0), np.asarray(g1))
    assert float(out1.metrics.rollout_is_mean) == 1.0
    assert float(out1.metrics.rollout_is_frac_high) == 0.0
    assert float(out1.metrics.rollout_is_frac_low) == 0.0


def test_token_golden():
    # logp = old (ratio 1, no clip): per-token loss -A. old - rollout = (log 3, log .25, 0):
    # weights (min(3, 2), .25, 1) = (2, .25, 1); A = (1, 1, -2) -> losses (-2, -.25, 2), mean -1/12.
    old = jnp.log(jnp.array([[0.3, 0.2, 0.5]]))
    roll = old - jnp.log(jnp.array([[3.0, 0.25, 1.0]]))
    adv = jnp.array([[1.0, 1.0, -2.0]])
    out = credax.policy_loss(old, old, adv, jnp.ones((1, 3), bool), rollout_logp=roll)
    np.testing.assert_allclose(out.loss, -1 / 12, atol=1e-6)
    # metrics: mean of (2, .25, 1) = 13/12; one token above 2, one below 1/2.
    np.testing.assert_allclose(out.metrics.rollout_is_mean, 13 / 12, atol=1e-6)
    np.testing.assert_allclose(out.metrics.rollout_is_frac_high, 1 / 3, atol=1e-6)
    np.testing.assert_allclose(out.metrics.rollout_is_frac_low, 1 / 3, atol=1e-6)


def test_sequence_golden():
    # Row log-ratio sum log 3 + log .25 = log .75 -> weight .75 for every token of the row.
    old = jnp.log(jnp.array([[0.3, 0.2, 0.5]]))
    roll = old - jnp.log(jnp.array([[3.0, 0.25, 1.0]]))
    adv = jnp.array([[1.0, 1.0, -2.0]])
    out = credax.policy_loss(old, old, adv, jnp.ones((1, 3), bool), rollout_logp=roll,
                             options=credax.LossOptions(rollout_is="sequence"))
    np.testing.assert_allclose(out.loss, 0.75 * 0.0, atol=1e-6)  # -(1 + 1 - 2)/3 · .75 = 0
    np.testing.assert_allclose(out.metrics.rollout_is_mean, 0.75, atol=1e-6)


def verl_rollout_is_max_diff(cases=200, seed=1):
    """Loss (token-mean of verl's vanilla pg_losses × weights) and token metrics vs verl."""
    worst = 0.0
    for case in range(cases):
        logp, old, roll, adv, mask = batch(seed + case, shape=(3, 6))
        level = ["token", "sequence"][case % 2]
        threshold = [2.0, 1.5, 5.0][case % 3]
        out = credax.policy_loss(logp, old, adv, mask, rollout_logp=roll,
                                 options=credax.LossOptions(rollout_is=level,
                                                            rollout_is_threshold=threshold))
        z = lambda x, m=mask: np.where(m, x, 0.0)  # noqa: E731  verl multiplies by the mask
        w, metrics = peer.verl_rollout_is_weights(z(old) - z(roll), mask, level, threshold)
        pg = peer.verl_vanilla_pg_losses(z(logp), z(old), z(adv), 0.2, 0.2) * w
        want = (pg * mask).sum() / mask.sum()
        worst = max(worst, abs(float(out.loss) - want))
        # sequence level: verl's fractions count rows (every row), not tokens
        worst = max(worst, abs(float(out.metrics.rollout_is_frac_high) - metrics["frac_high"]),
                    abs(float(out.metrics.rollout_is_frac_low) - metrics["frac_low"]))
        worst = max(worst, abs(float(out.metrics.rollout_is_mean) - metrics["mean"]))
    return worst


def test_parity_with_verl_rollout_is():
    assert verl_rollout_is_max_diff(cases=40) < 1e-5


def test_sequence_fractions_count_every_row_hand_worked():
    # Rows' log-ratio sums: log 3 (2 tokens), log 3 (1 token), 0 (3 tokens), and an empty row.
    # Threshold 2: two of the four rows are above (log 3 > log 2): frac_high = 2/4, as verl's
    # compute_is_metrics counts at sequence level (a plain mean over every row, the empty row's sum
    # 0 included); over non-empty rows it was 2/3 (credax before issue #38), over tokens 3/6
    # (before issue #30).
    old = np.zeros((4, 3), np.float32)
    roll = np.array([[-np.log(3.0), 0, 0], [-np.log(3.0), 0, 0], [0, 0, 0], [0, 0, 0]], np.float32)
    mask = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]], bool)
    adv = np.ones((4, 3), np.float32)
    out = credax.policy_loss(old, old, adv, mask, rollout_logp=roll,
                             options=credax.LossOptions(rollout_is="sequence"))
    np.testing.assert_allclose(out.metrics.rollout_is_frac_high, 2 / 4, rtol=1e-6)
    np.testing.assert_allclose(out.metrics.rollout_is_frac_low, 0.0)
    # A threshold below 1 (bounds 0.5 and 2 swap roles): log 0.5 < 0, so the empty row's sum 0 is
    # above it, as in verl: rows 0, 1, 2, 3 are all above -> 1; below log 2: rows 2, 3 -> 2/4.
    low = credax.policy_loss(old, old, adv, mask, rollout_logp=roll, options=credax.LossOptions(
        rollout_is="sequence", rollout_is_threshold=0.5))
    np.testing.assert_allclose(low.metrics.rollout_is_frac_high, 1.0, rtol=1e-6)
    np.testing.assert_allclose(low.metrics.rollout_is_frac_low, 2 / 4, rtol=1e-6)
    # An empty mask: 0 (verl raises).
    empty = credax.policy_loss(old, old, adv, np.zeros_like(mask), rollout_logp=roll,
                               options=credax.LossOptions(rollout_is="sequence",
                                                          rollout_is_threshold=0.5))
    assert float(empty.metrics.rollout_is_frac_high) == 0.0
    # Token level keeps counting tokens: 2 of the 6 valid tokens are above 2.
    out = credax.policy_loss(old, old, adv, mask, rollout_logp=roll,
                             options=credax.LossOptions(rollout_is="token"))
    np.testing.assert_allclose(out.metrics.rollout_is_frac_high, 2 / 6, rtol=1e-6)


def test_metrics_match_verls_own_function():
    torch = pytest.importorskip("torch")
    pytest.importorskip("verl")
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    for case in range(12):
        logp, old, roll, adv, mask = batch(100 + case, shape=(5, 6))
        mask[case % 5] = False  # an empty row: verl divides its sequence fractions by every row
        mask[(case + 1) % 5, 0] = True  # verl raises on an empty mask
        level, threshold = ["token", "sequence"][case % 2], [2.0, 1.5][case % 3 % 2]
        z = lambda x, m=mask: np.where(m, x, 0.0).astype(np.float32)  # noqa: E731
        _, metrics = compute_rollout_correction_weights(
            torch.from_numpy(z(old) - z(roll)), torch.from_numpy(mask.astype(np.float32)),
            rollout_is=level, rollout_is_threshold=threshold)
        out = credax.policy_loss(logp, old, adv, mask, rollout_logp=roll,
                                 options=credax.LossOptions(rollout_is=level,
                                                            rollout_is_threshold=threshold)).metrics
        for ours, theirs in ((out.rollout_is_frac_high, "rollout_is_ratio_fraction_high"),
                             (out.rollout_is_frac_low, "rollout_is_ratio_fraction_low"),
                             (out.rollout_is_mean, "rollout_is_mean")):
            np.testing.assert_allclose(float(ours), metrics[theirs], rtol=1e-5, atol=1e-6,
                                       err_msg=f"case {case} {theirs}")


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_infinite_log_probs(level):
    # Row 0: old = rollout = -inf at token 1 (the same impossible token: ratio 1). Row 1: rollout
    # -inf at token 0 (log-ratio +inf -> +20) and old -inf at token 1 (-inf -> -20): both signs in
    # one row, where verl gives NaN. Weights, token level: (1, 1, 1) and (min(e^20, 2) = 2,
    # e^-20, 1); sequence level: row sums 0 and +20 - 20 + 0 = 0, so every weight is 1.
    ninf = -np.inf
    old = np.array([[-1.0, ninf, -1.0], [-1.0, ninf, -1.0]], np.float32)
    roll = np.array([[-1.0, ninf, -1.0], [ninf, -1.0, -1.0]], np.float32)
    logp = np.full((2, 3), -1.0, np.float32)
    adv, mask = np.ones((2, 3), np.float32), np.ones((2, 3), bool)
    f = lambda x: credax.policy_loss(x, old, adv, mask, rollout_logp=roll,
                                     options=credax.LossOptions(rollout_is=level))  # noqa: E731
    out = f(jnp.asarray(logp))
    w = {"token": np.array([[1, 1, 1], [2, np.exp(-20.0), 1]]), "sequence": np.ones((2, 3))}[level]
    np.testing.assert_allclose(float(out.metrics.rollout_is_mean), w.mean(), rtol=1e-6)
    assert np.isfinite(float(out.loss))
    assert bool(jnp.all(jnp.isfinite(jax.grad(lambda x: f(x).loss)(jnp.asarray(logp)))))
    # NaN is not an infinity: it stays NaN (no finite garbage).
    bad = roll.copy()
    bad[0, 0] = np.nan
    assert np.isnan(float(credax.policy_loss(logp, old, adv, mask, rollout_logp=bad,
                                             options=credax.LossOptions(rollout_is=level)).loss))


def test_masked_values_never_matter_and_no_gradient_through_weights():
    logp, old, roll, adv, mask = batch(3)
    f = lambda x, r: credax.policy_loss(x, old, adv, mask, rollout_logp=r).loss  # noqa: E731
    g_logp, g_roll = jax.grad(f, argnums=(0, 1))(jnp.asarray(logp), jnp.asarray(roll))
    assert bool(jnp.all(jnp.isfinite(g_logp)))
    assert bool(jnp.all(g_roll == 0))
    assert float(f(jnp.asarray(logp), jnp.asarray(roll))) == float(
        f(jnp.asarray(np.where(mask, logp, 7.0)), jnp.asarray(np.where(mask, roll, -7.0))))


def test_errors():
    logp, old, roll, adv, mask = batch()
    with pytest.raises(ValueError, match="`rollout_is_threshold`"):
        credax.policy_loss(logp, old, adv, mask, rollout_logp=roll,
                           options=credax.LossOptions(rollout_is_threshold=0.0))
    with pytest.raises(ValueError, match="`rollout_is`"):
        credax.policy_loss(logp, old, adv, mask, rollout_logp=roll,
                           options=credax.LossOptions(rollout_is="geometric"))
    with pytest.raises(ValueError, match="`rollout_logp`"):
        credax.policy_loss(logp, old, adv, mask, rollout_logp=roll[:, :3])

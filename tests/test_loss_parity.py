"""Loss parity presets: ``policy_loss(..., options=preset)`` against NumPy re-statements of the peers.

The references (``tests/reference/peer_forms.py``: ``verl_policy_loss``, ``verl_gspo_grad``,
``trl_policy_loss``) restate, in float64 NumPy, the formulas of verl's
``compute_policy_loss_vanilla`` / ``compute_policy_loss_gspo`` / ``kl_penalty`` / ``agg_loss``
(verl/trainer/ppo/core_algos.py) and TRL's ``GRPOTrainer._compute_loss`` (trl/trainer/
grpo_trainer.py), read for their conventions, not copied. Gradients are central finite differences
of the reference (random cases stay away from the clip kinks; exact ties on a bound are worked by
hand in tests/test_losses.py, its probes of kind ``tie``). Each test draws ``CASES`` random
micro-batches with padding (including an empty row), clipped and unclipped tokens, both signs of
the advantage.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import presets
from tests.reference.peer_forms import trl_policy_loss, verl_gspo_grad, verl_policy_loss

B, T, CASES = 4, 6, 6


def _batch(seed, *, spread=0.6):
    rng = np.random.default_rng(seed)
    old = rng.uniform(-3.0, -0.1, (B, T))
    logp = old + rng.uniform(-spread, spread, (B, T))
    ref = old + rng.uniform(-1.0, 1.0, (B, T))
    adv = rng.normal(size=(B,))
    mask = rng.random((B, T)) < 0.8
    mask[0, :] = False  # an empty row (TRL "grpo" counts it, credax's seq-mean does not)
    mask[1, 0] = True
    return logp, old, adv, mask, ref


def _fd_grad(loss, logp, h=1e-6):
    g = np.zeros_like(logp)
    for idx in np.ndindex(logp.shape):
        up, dn = logp.copy(), logp.copy()
        up[idx] += h
        dn[idx] -= h
        g[idx] = (loss(up) - loss(dn)) / (2 * h)
    return g


def _credax(logp, old, adv, mask, ref, kl_coef, options):
    def f(lp):
        return credax.policy_loss(lp, jnp.asarray(old, jnp.float32), jnp.asarray(adv, jnp.float32),
                                  jnp.asarray(mask), ref_logp=jnp.asarray(ref, jnp.float32),
                                  options=options.replace(kl_coef=kl_coef)).loss

    lp = jnp.asarray(logp, jnp.float32)
    return float(f(lp)), np.asarray(jax.grad(f)(lp), np.float64)


def _inputs32(*arrays):
    # The reference sees exactly the float32 values credax sees.
    return [np.asarray(x, np.float32).astype(np.float64) if x.dtype != bool else x for x in arrays]


@pytest.mark.parametrize("seed", range(CASES))
def test_verl_vanilla_preset(seed):
    logp, old, adv, mask, ref = _inputs32(*_batch(seed))
    loss, grad = _credax(logp, old, adv, mask, ref, 0.1, presets.VERL_LOSS)
    want = verl_policy_loss(logp, old, adv, mask, ref, kl_coef=0.1)
    want_grad = _fd_grad(lambda lp: verl_policy_loss(lp, old, adv, mask, ref, kl_coef=0.1), logp)
    np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", range(CASES))
def test_verl_vanilla_dual_clip_and_kl_clamp_bind(seed):
    # Large gaps: the dual clip (r > 3, A < 0) and the k3 clamp at 10 (|ref - logp| ≈ 12) bind.
    logp, old, adv, mask, ref = _inputs32(*_batch(seed, spread=2.5))
    ref = np.asarray(logp - 12.0 * np.sign(np.random.default_rng(seed).normal(size=logp.shape)),
                     np.float32).astype(np.float64)
    loss, grad = _credax(logp, old, adv, mask, ref, 0.1, presets.VERL_LOSS)
    want = verl_policy_loss(logp, old, adv, mask, ref, kl_coef=0.1)
    want_grad = _fd_grad(lambda lp: verl_policy_loss(lp, old, adv, mask, ref, kl_coef=0.1), logp)
    np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", range(CASES))
def test_verl_gspo_preset(seed):
    logp, old, adv, mask, ref = _inputs32(*_batch(seed, spread=0.15))
    loss, grad = _credax(logp, old, adv, mask, ref, 0.0, presets.VERL_GSPO_LOSS)
    want = verl_policy_loss(logp, old, adv, mask, ref, kl_coef=0.0, gspo=True)
    np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, verl_gspo_grad(logp, old, adv, mask), rtol=1e-4, atol=1e-7)


def test_verl_gspo_clamps_at_plus_ten_only():
    # A sequence log-ratio of 12 is clamped to 10 (credax's default clamp is ±20); -30 is not.
    old = np.zeros((2, 1), np.float32)
    logp = np.array([[12.0], [-30.0]], np.float32)
    adv = np.array([-1.0, 1.0], np.float32)
    out = credax.policy_loss(logp, old, adv, np.ones((2, 1), bool), options=presets.VERL_GSPO_LOSS)
    # row 0: A < 0, r = e^10 > 1 + ε: ℓ = -A·r = e^10; row 1: r = e^-30 < 1 - ε, A > 0: the
    # unclipped branch -A·r = -e^-30 is the max; seq-mean over 2 rows.
    np.testing.assert_allclose(out.loss, (np.exp(10.0) - np.exp(-30.0)) / 2, rtol=1e-6)


# The clipped four against the NumPy restatement; all eight against TRL's own code:
# tests/test_loss_types.py.
@pytest.mark.parametrize("loss_type", ("grpo", "bnpo", "dr_grpo", "dapo"))
@pytest.mark.parametrize("seed", range(CASES))
def test_trl_presets(loss_type, seed):
    logp, old, adv, mask, ref = _inputs32(*_batch(seed))
    options = presets.trl_loss(loss_type, num_rows=B, max_completion_length=T)
    loss, grad = _credax(logp, old, adv, mask, ref, 0.04, options)
    ref_loss = lambda lp: trl_policy_loss(lp, old, adv, mask, ref, loss_type=loss_type, beta=0.04)
    np.testing.assert_allclose(loss, ref_loss(logp), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, _fd_grad(ref_loss, logp), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", range(CASES))
def test_trl_bias_corrected_kl(seed):
    logp, old, adv, mask, ref = _inputs32(*_batch(seed))
    options = presets.trl_loss("dapo", use_bias_correction_kl=True)
    loss, grad = _credax(logp, old, adv, mask, ref, 0.04, options)
    ref_loss = lambda lp: trl_policy_loss(lp, old, adv, mask, ref, loss_type="dapo", beta=0.04,
                                        bias_kl=True)
    np.testing.assert_allclose(loss, ref_loss(logp), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, _fd_grad(ref_loss, logp), rtol=1e-4, atol=1e-6)
    # And without it (use_bias_correction_kl=False): the plain k3 term.
    loss, grad = _credax(logp, old, adv, mask, ref, 0.04,
                         presets.trl_loss("dapo", use_bias_correction_kl=False))
    ref_loss = lambda lp: trl_policy_loss(lp, old, adv, mask, ref, loss_type="dapo", beta=0.04,
                                        bias_kl=False)
    np.testing.assert_allclose(loss, ref_loss(logp), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, _fd_grad(ref_loss, logp), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", range(CASES))
def test_trl_sequence_level(seed):
    # TRL's importance_sampling_level="sequence" (GSPO): the ratio's gradient flows through the
    # mean log-ratio, which is what the GSPO-token form computes; beta=0 (see trl_loss).
    logp, old, adv, mask, ref = _inputs32(*_batch(seed, spread=0.15))
    options = presets.trl_loss("grpo", num_rows=B, importance_sampling_level="sequence")
    loss, grad = _credax(logp, old, adv, mask, ref, 0.0, options)
    ref_loss = lambda lp: trl_policy_loss(lp, old, adv, mask, ref, loss_type="grpo", beta=0.0,
                                        level="sequence")
    np.testing.assert_allclose(loss, ref_loss(logp), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, _fd_grad(ref_loss, logp), rtol=1e-4, atol=1e-6)


def test_trl_default_is_bias_corrected_kl():
    # TRL 1.16 GRPOConfig: use_bias_correction_kl defaults to True (trl/trainer/grpo_config.py).
    assert presets.trl_loss().kl_ratio_weight is True
    assert presets.TRL_LOSS.kl_ratio_weight is True
    assert presets.trl_loss(use_bias_correction_kl=False).kl_ratio_weight is False


@pytest.mark.parametrize("seed", range(CASES))
def test_trl_sequence_level_bias_corrected_kl(seed):
    # At sequence level TRL weights each token's KL by coef_1 = exp(mean_t log-ratio) of its row,
    # whose gradient reaches every token of the row (not the GSPO-token ratio of the surrogate).
    options = presets.trl_loss("grpo", num_rows=B, importance_sampling_level="sequence")
    _assert_trl(seed, 0.15, options, loss_type="grpo", level="sequence")


def _assert_trl(seed, spread, options, **reference):
    """credax with ``options`` against ``trl_policy_loss(**reference)`` at beta 0.04: loss and
    finite-difference gradient."""
    logp, old, adv, mask, ref = _inputs32(*_batch(seed, spread=spread))
    loss, grad = _credax(logp, old, adv, mask, ref, 0.04, options)
    ref_loss = lambda lp: trl_policy_loss(lp, old, adv, mask, ref, beta=0.04, **reference)  # noqa: E731
    np.testing.assert_allclose(loss, ref_loss(logp), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, _fd_grad(ref_loss, logp), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", range(CASES))
def test_trl_delta(seed):
    # Large gaps so that r > δ = 1.5 binds on some negative-advantage tokens (random: no exact tie).
    options = presets.trl_loss("dapo", delta=1.5)
    assert options.ratio_cap == 1.5 and options.dual_clip is None
    _assert_trl(seed, 1.5, options, loss_type="dapo", delta=1.5)


def test_trl_delta_at_the_tie_is_not_the_dual_clip():
    # logp = log 3, old = 0 (r = 3), A = -1, δ = c = 3. Both losses are -A·δ = 3.
    # TRL: -min(clamp(r, max=3)·A, clip(r, .8, 1.2)·A) = -min(-3, -1.2) = 3 from the first branch;
    #   torch.clamp passes the gradient at the bound: d/dlogp (-A·r) = r = 3.
    # verl's dual clip: min(max(-A·r, -A·1.2), -A·3) = min(3, 3), a tie: torch.minimum (and
    #   jnp.minimum) split it, 3/2 = 1.5.
    logp = np.array([[np.log(3.0)]], np.float32)
    z, adv, m = np.zeros((1, 1), np.float32), np.array([-1.0], np.float32), np.ones((1, 1), bool)

    def grad(options):
        f = lambda lp: credax.policy_loss(lp, z, adv, m, options=options).loss  # noqa: E731
        return float(f(jnp.asarray(logp))), float(jax.grad(f)(jnp.asarray(logp))[0, 0])

    assert grad(presets.trl_loss("dapo", delta=3.0)) == pytest.approx((3.0, 3.0), rel=1e-6)
    assert grad(credax.LossOptions(dual_clip=3.0)) == pytest.approx((3.0, 1.5), rel=1e-6)
    with pytest.raises(ValueError, match="ratio_cap"):
        credax.policy_loss(logp, z, adv, m,
                           options=credax.LossOptions(ratio_cap=3.0, dual_clip=3.0))
    with pytest.raises(ValueError, match="ratio_cap"):
        credax.policy_loss(logp, z, adv, m, options=credax.LossOptions(ratio_cap=1.0))


def test_trl_grpo_divides_by_all_rows():
    # Hand-worked: rows [A=1, 2 tokens on-policy] and an empty row. TRL "grpo": (−1 + 0) / 2 rows;
    # credax's seq-mean-token-mean alone: −1 / 1 non-empty row.
    z = np.zeros((2, 2), np.float32)
    mask = np.array([[True, True], [False, False]])
    adv = np.array([1.0, 1.0], np.float32)
    assert float(credax.policy_loss(z, z, adv, mask,
                                    options=credax.LossOptions(agg="seq-mean-token-mean")).loss) == -1.0
    out = credax.policy_loss(z, z, adv, mask, options=presets.trl_loss("grpo", num_rows=2))
    assert float(out.loss) == -0.5


def test_trl_loss_errors():
    with pytest.raises(ValueError, match="`loss_type`"):
        presets.trl_loss("gspo")   # GSPO is grpo at importance_sampling_level="sequence"
    with pytest.raises(ValueError, match="num_rows"):
        presets.trl_loss("dr_grpo")
    with pytest.raises(ValueError, match="`importance_sampling_level`"):
        presets.trl_loss("grpo", importance_sampling_level="turn")
    opts = presets.trl_loss("dapo", num_items_in_batch=96, num_processes=4)
    assert opts.normalizer == 24.0 and opts.agg == "token-mean"

"""The eight TRL loss types side by side with the peers' own code, run on the same batches.

* **TRL 1.16** (``trl.trainer.grpo_trainer.GRPOTrainer._compute_loss``): the trainer's loss is
  called unbound on tensors, with a stand-in ``self`` that supplies the config fields the loss
  reads and returns the given log-probs in place of a model forward pass. It runs in float64 and
  its autograd gradient w.r.t. the log-probs is the reference for ``credax.policy_loss``.
* **Liger 0.8.5** (``liger_kernel.chunked_loss.LigerFusedLinearGRPOLoss``, ``compiled=False``:
  pure torch, no triton) takes hidden states and the unembedding: its value and its gradients
  w.r.t. both (float64) are the reference for ``credax.policy_loss_from_hidden`` and for the
  two-call composition ``policy_loss(token_logprobs_from_hidden(...))``.

credax computes in float32 from the float32-rounded inputs the peers see in float64, so the
tolerances are float32 rounding. Every batch has padding and an empty row; the ratios spread far
enough that every clip side binds somewhere. The cases cover both importance-sampling levels,
``delta``, the KL term with and without ``use_bias_correction_kl``, and TRL's vLLM importance
weights (credax's ``rollout_logp``). Where TRL and Liger disagree (Liger's token-level or KL-carrying
``luspo``, Liger refusing sequence level for cispo/sapo/vespo) credax follows TRL 1.16, and Liger is
compared where its rule is TRL's. Skipped without torch, trl or liger-kernel.
"""

from __future__ import annotations

import types
from collections import defaultdict

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import presets

torch = pytest.importorskip("torch")

B, T, D, V = 5, 7, 6, 13
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
CLIPPED = ("grpo", "dr_grpo", "dapo", "bnpo", "luspo")
# Per-loss-type TRL config overrides that make each loss's own knobs bind on these batches.
KNOBS = {
    "cispo": dict(epsilon_high=1.15),
    "sapo": dict(sapo_temperature_pos=0.8, sapo_temperature_neg=1.6),
    "vespo": dict(vespo_k_pos=1.5, vespo_lambda_pos=2.5, vespo_k_neg=2.5, vespo_lambda_neg=1.5),
}
MAX_COMPLETION_LENGTH = T + 3
ATOL, RTOL = 2e-6, 2e-5


def _f32(x):
    return np.asarray(np.asarray(x, np.float32), np.float64)


def _batch(seed, *, spread=0.5, token_advantages=False):
    rng = np.random.default_rng(seed)
    old = _f32(rng.uniform(-3.0, -0.2, (B, T)))
    logp = _f32(old + rng.uniform(-spread, spread, (B, T)))
    ref = _f32(old + rng.uniform(-0.8, 0.8, (B, T)))
    adv = _f32(rng.normal(size=(B, T) if token_advantages else (B,)))
    mask = rng.random((B, T)) < 0.75
    mask[0] = False           # an empty row
    mask[1, :2] = True        # at least two tokens elsewhere
    mask[2, -1] = False       # trailing padding
    roll = _f32(old + rng.uniform(-0.4, 0.4, (B, T)))
    return logp, old, adv, mask, ref, roll


# --------------------------------------------------------------------------------------------
# TRL 1.16: GRPOTrainer._compute_loss on tensors.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trl_loss_fn():
    grpo_trainer = pytest.importorskip("trl.trainer.grpo_trainer")
    return grpo_trainer.GRPOTrainer


def _trl_self(trainer_cls, logp_tensor, loss_type, *, level, beta, bias_kl, delta, vllm, **knobs):
    """A stand-in for a configured GRPOTrainer: the attributes ``_compute_loss`` reads."""
    config = dict(epsilon=0.2, epsilon_high=None, sapo_temperature_pos=1.0,
                  sapo_temperature_neg=1.05, vespo_k_pos=2.0, vespo_lambda_pos=3.0,
                  vespo_k_neg=3.0, vespo_lambda_neg=2.0)
    config.update(knobs)
    accelerator = types.SimpleNamespace(
        num_processes=1, sync_gradients=True, gather=lambda x: x, gather_for_metrics=lambda x: x,
        reduce=lambda x, reduction="sum": x)

    class Stand(types.SimpleNamespace):
        get_gamma_weights = staticmethod(trainer_cls.get_gamma_weights)

        def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
            return logp_tensor, torch.zeros_like(logp_tensor), None

    return Stand(
        args=types.SimpleNamespace(use_bias_correction_kl=bias_kl, delta=delta,
                                   steps_per_generation=1, **config),
        loss_type=loss_type, importance_sampling_level=level, beta=beta,
        epsilon_low=config["epsilon"],
        epsilon_high=config["epsilon_high"] if config["epsilon_high"] is not None
        else config["epsilon"],
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, aux_loss_enabled=False,
        use_vllm=vllm, vllm_importance_sampling_correction=vllm, model=types.SimpleNamespace(
            training=True), current_gradient_accumulation_steps=1, accelerator=accelerator,
        max_completion_length=MAX_COMPLETION_LENGTH, _entropy_bonus_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)))


def _trl(trainer_cls, batch, loss_type, *, level, beta, bias_kl, delta, rollout_is, items,
         **knobs):
    logp, old, adv, mask, ref, is_weight = batch
    lp = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    stand = _trl_self(trainer_cls, lp, loss_type, level=level, beta=beta, bias_kl=bias_kl,
                      delta=delta, vllm=rollout_is, **knobs)
    m = torch.tensor(mask, dtype=torch.long)
    inputs = dict(prompt_ids=torch.zeros((B, 0), dtype=torch.long),
                  prompt_mask=torch.zeros((B, 0), dtype=torch.long),
                  completion_ids=torch.zeros((B, T), dtype=torch.long), completion_mask=m,
                  advantages=torch.tensor(adv), old_per_token_logps=torch.tensor(old),
                  ref_per_token_logps=torch.tensor(ref),
                  num_items_in_batch=torch.tensor(float(items)))
    if rollout_is:
        inputs["importance_sampling_ratio"] = torch.tensor(is_weight)
    loss = trainer_cls._compute_loss(stand, None, inputs)
    loss.backward()
    return float(loss.detach()), lp.grad.numpy()


def _truncated_weight(old, roll, mask, threshold):
    # TRL's vLLM importance weight, token_truncate: min(exp(old - rollout), C); 1 off the mask
    # (TRL's VESPO sums its logs over every position).
    return np.where(mask, np.minimum(np.exp(old - roll), threshold), 1.0)


TRL_CASES = [
    (loss_type, level, kl)
    for loss_type in LOSS_TYPES for level in ("token", "sequence")
    for kl in ("none", "k3", "k3_bias_corrected")
]


@pytest.mark.parametrize(("loss_type", "level", "kl"), TRL_CASES)
def test_policy_loss_equals_trl(trl_loss_fn, loss_type, level, kl):
    seed = LOSS_TYPES.index(loss_type) * 10 + (level == "sequence") * 5 + len(kl)
    logp, old, adv, mask, ref, roll = _batch(seed)
    items = 2 * mask.sum() + 3  # an accumulation batch larger than this micro-batch
    delta = 1.25 if loss_type in CLIPPED and kl != "none" else None
    beta = 0.0 if kl == "none" else 0.15
    bias_kl = kl == "k3_bias_corrected"
    knobs = KNOBS.get(loss_type, {})
    want, want_grad = _trl(trl_loss_fn, (logp, old, adv, mask, ref, None), loss_type, level=level,
                           beta=beta, bias_kl=bias_kl, delta=delta, rollout_is=False,
                           items=items, **knobs)
    options = presets.trl_loss(loss_type, num_rows=B, max_completion_length=MAX_COMPLETION_LENGTH,
                               num_items_in_batch=items, importance_sampling_level=level,
                               delta=delta, use_bias_correction_kl=bias_kl,
                               **knobs).replace(kl_coef=beta)
    loss, grad = _credax_logp(logp, old, adv, mask, ref if beta else None, options)
    np.testing.assert_allclose(loss, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(grad, want_grad, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("rollout_is", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_policy_loss_equals_trl_per_token_advantages_and_rollout_weights(trl_loss_fn, loss_type,
                                                                         rollout_is):
    # (B, T) advantages (TRL's subclass hook) and TRL's vLLM importance weights: credax's
    # rollout_logp with a token- or sequence-level truncation (TRL's (B, T) or (B, 1) ratio),
    # multiplied into the loss, or (VESPO) folded into the sequence weight.
    logp, old, adv, mask, ref, roll = _batch(100 + LOSS_TYPES.index(loss_type),
                                             token_advantages=True)
    threshold = 1.2
    if rollout_is == "token":
        is_weight = _truncated_weight(old, roll, mask, threshold)
    else:  # one weight per row: min(exp(Σ_t (old - rollout)), C), its log-sum clamped to ±20
        row = np.clip(np.where(mask, old - roll, 0.0).sum(-1, keepdims=True), -20, 20)
        is_weight = np.minimum(np.exp(row), threshold)
    knobs = KNOBS.get(loss_type, {})
    want, want_grad = _trl(trl_loss_fn, (logp, old, adv, mask, ref, is_weight), loss_type,
                           level="token", beta=0.1, bias_kl=True, delta=None, rollout_is=True,
                           items=mask.sum(), **knobs)
    options = presets.trl_loss(loss_type, num_rows=B, max_completion_length=MAX_COMPLETION_LENGTH,
                               **knobs).replace(kl_coef=0.1, rollout_is_threshold=threshold,
                                                rollout_is=rollout_is)
    loss, grad = _credax_logp(logp, old, adv, mask, ref, options, rollout_logp=roll)
    np.testing.assert_allclose(loss, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(grad, want_grad, rtol=RTOL, atol=ATOL)


def _credax_logp(logp, old, adv, mask, ref, options, **arrays):
    f32 = lambda x: None if x is None else jnp.asarray(x, jnp.float32)  # noqa: E731
    extra = {k: f32(v) for k, v in arrays.items()}

    def f(lp):
        return credax.policy_loss(lp, f32(old), f32(adv), jnp.asarray(mask), ref_logp=f32(ref),
                                  options=options, **extra).loss

    value, grad = jax.value_and_grad(f)(f32(logp))
    return float(value), np.asarray(grad, np.float64)


# --------------------------------------------------------------------------------------------
# Liger 0.8.5: LigerFusedLinearGRPOLoss, hidden states and unembedding.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def liger_grpo():
    module = pytest.importorskip("liger_kernel.chunked_loss.grpo_loss")
    return module.LigerFusedLinearGRPOLoss


def _head_batch(seed):
    rng = np.random.default_rng(seed)
    hidden = _f32(rng.normal(size=(B, T, D)))
    w = _f32(rng.normal(scale=0.7, size=(D, V)))
    tokens = rng.integers(0, V, (B, T))
    logits = hidden @ w
    lp = logits[np.arange(B)[:, None], np.arange(T), tokens] - np.log(np.exp(logits).sum(-1))
    _, _, adv, mask, _, _ = _batch(seed)
    old = _f32(lp + rng.uniform(-0.5, 0.5, (B, T)))
    ref = _f32(lp + rng.uniform(-0.8, 0.8, (B, T)))
    return hidden, w, tokens, old, adv, mask, ref


LIGER_CASES = (
    [(t, "token", kl) for t in LOSS_TYPES if t != "luspo" for kl in ("none", "k3", "k3_bias")]
    + [(t, "sequence", kl) for t in ("grpo", "dr_grpo", "dapo", "bnpo")
       for kl in ("none", "k3_bias")]
    # Liger's luspo equals TRL 1.16's at sequence level without a KL term only (module doc).
    + [("luspo", "sequence", "none")]
)


@pytest.mark.parametrize(("loss_type", "level", "kl"), LIGER_CASES)
def test_fused_head_equals_liger(liger_grpo, loss_type, level, kl):
    seed = 200 + LOSS_TYPES.index(loss_type) * 10 + (level == "sequence") * 5 + len(kl)
    hidden, w, tokens, old, adv, mask, ref = _head_batch(seed)
    beta = 0.0 if kl == "none" else 0.15
    delta = 1.25 if loss_type in CLIPPED and kl == "k3" else None
    knobs = KNOBS.get(loss_type, {})
    # Liger's constructor takes TRL's names for these knobs (epsilon_high, sapo_*, vespo_*).
    module = liger_grpo(beta=beta, compiled=False, use_ref_model=beta != 0, chunk_size=2,
                        loss_type=loss_type, max_completion_length=MAX_COMPLETION_LENGTH,
                        importance_sampling_level=level, delta=delta,
                        use_bias_correction_kl=kl == "k3_bias",
                        **{"epsilon_low": 0.2, "epsilon_high": 0.2, **knobs})
    h = torch.tensor(hidden, requires_grad=True)
    wt = torch.tensor(w.T.copy(), requires_grad=True)   # Liger's weight is [V, D]
    loss, _ = module(h, wt, torch.tensor(tokens), torch.tensor(mask, dtype=torch.long),
                     torch.tensor(adv), ref_per_token_logps=torch.tensor(ref) if beta else None,
                     old_per_token_logps=torch.tensor(old))
    loss.backward()
    want, want_dh, want_dw = float(loss.detach()), h.grad.numpy(), wt.grad.numpy().T

    options = presets.trl_loss(loss_type, num_rows=B, max_completion_length=MAX_COMPLETION_LENGTH,
                               importance_sampling_level=level, delta=delta,
                               use_bias_correction_kl=kl == "k3_bias",
                               **knobs).replace(kl_coef=beta)
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    args = (jnp.asarray(tokens, jnp.int32), f32(old), f32(adv), jnp.asarray(mask))
    kwargs = dict(options=options, ref_logp=f32(ref) if beta else None)

    def fused(hh, ww):
        return credax.policy_loss_from_hidden(hh, ww, *args, chunk_size=3, **kwargs).loss

    def composition(hh, ww):
        lp = credax.token_logprobs_from_hidden(hh, ww, args[0], mask=args[3], chunk_size=3)
        return credax.policy_loss(lp, *args[1:], **kwargs).loss

    for fn in (fused, composition):
        value, (dh, dw) = jax.value_and_grad(fn, argnums=(0, 1))(f32(hidden), f32(w))
        np.testing.assert_allclose(float(value), want, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(dh, want_dh, rtol=1e-4, atol=ATOL)
        np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=ATOL)


def test_liger_refuses_what_credax_and_trl_run():
    # Liger 0.8.5 refuses sequence level for cispo, sapo and vespo; TRL runs them (with a
    # warning) and so does credax (tested against TRL above).
    grpo_loss = pytest.importorskip("liger_kernel.chunked_loss.grpo_loss")
    hidden, w, tokens, old, adv, mask, _ = _head_batch(0)
    module = grpo_loss.LigerFusedLinearGRPOLoss(beta=0.0, compiled=False, use_ref_model=False,
                                                loss_type="sapo", importance_sampling_level="sequence")
    with pytest.raises(ValueError, match="Sequence-level"):
        module(torch.tensor(hidden), torch.tensor(w.T.copy()), torch.tensor(tokens),
               torch.tensor(mask, dtype=torch.long), torch.tensor(adv),
               old_per_token_logps=torch.tensor(old))

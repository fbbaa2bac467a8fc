"""credax.policy_loss_from_hidden: the fused chunked LM-head policy loss (issue #31).

Three kinds of evidence: (1) value and gradients against an independent float64 reference (the
loop references of tests/reference/losses.py, gradients by central finite differences of that
reference, nothing of credax inside); (2) equality with the two-call composition
``policy_loss(token_logprobs_from_hidden(...))`` for every supported option, metrics included;
(3) the compiled program: three GEMMs under value_and_grad, one without, temporaries of O(chunk).
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import presets
from tests.reference import losses as ref

B, T, D, V = 3, 7, 4, 11


def _data(seed=0, *, all_masked_row=True):
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((B, T, D))
    unembedding = rng.standard_normal((D, V)) / np.sqrt(D)
    tokens = rng.integers(0, V, (B, T)).astype(np.int32)
    mask = rng.random((B, T)) > 0.25
    mask[:, 0] = False                     # a prompt token
    mask[0, 1] = True
    if all_masked_row:
        mask[2] = False                    # a padded row
    adv = rng.standard_normal(B)
    lp = ref.token_logprobs_from_hidden(hidden, unembedding, tokens)
    # the behaviour policy: near the current one, so that some ratios leave the clip range
    old = lp + 0.3 * rng.standard_normal((B, T))
    ref_logp = lp + 0.2 * rng.standard_normal((B, T))
    return hidden, unembedding, tokens, mask, adv, old, ref_logp


def _reference_loss(hidden, unembedding, tokens, mask, adv, old, *, temperature=1.0, **options):
    # logits / T = (hidden / T) @ W: the reference scores the tempered distribution this way
    lp = ref.token_logprobs_from_hidden(np.asarray(hidden) / temperature, unembedding, tokens, mask)
    return ref.policy_loss(lp, old, np.repeat(adv[:, None], T, axis=1), mask, **options)[0]


# The loss's per-token arrays (and the temperature) stay keywords; every other field of a case
# goes into one LossOptions.
_ARRAYS = ("ref_logp", "token_turn", "rollout_logp", "entropy", "temperature")


def _as_call(options: dict) -> dict:
    """A case's keywords as the loss takes them: the arrays by name, the rest as ``options=``."""
    loose = {k: v for k, v in options.items() if k not in _ARRAYS}
    return {**{k: v for k, v in options.items() if k in _ARRAYS},
            "options": credax.LossOptions(**loose)}


def _finite_difference(f, x, eps=1e-6):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (f(up) - f(down)) / (2 * eps)
    return grad


REFERENCE_CASES = [
    dict(),
    dict(agg="seq-mean-token-mean", dual_clip=3.0),
    dict(agg="token-sum", ref_logp=True, kl_coef=0.1, kl_estimator="k3"),
    dict(agg="seq-mean-token-sum-norm", normalizer=12.0, clip_high=0.28, ref_logp=True,
         kl_coef=0.05, kl_estimator="k2", temperature=0.7),
]


@pytest.mark.parametrize("case", REFERENCE_CASES, ids=lambda c: ",".join(c) or "default")
def test_matches_float64_reference_value_and_gradients(case):
    hidden, w, tokens, mask, adv, old, ref_logp = _data(1)
    options = dict(case)
    if options.pop("ref_logp", False):
        options["ref_logp"] = ref_logp
    temperature = options.pop("temperature", None)
    ref_options = {k: v for k, v in options.items() if k != "ref_logp"}
    if "ref_logp" in options:
        ref_options["ref"] = ref_logp
    reference = lambda h, u: _reference_loss(h, u, tokens, mask, adv, old,
                                             temperature=temperature or 1.0, **ref_options)
    f32 = lambda x: None if x is None else jnp.asarray(x, jnp.float32)
    jax_options = {k: (f32(v) if k == "ref_logp" else v) for k, v in options.items()}

    def loss(h, u):
        return credax.policy_loss_from_hidden(h, u, tokens, f32(old), f32(adv), mask, chunk_size=3,
                                              temperature=temperature, **_as_call(jax_options)).loss

    value, (dh, dw) = jax.value_and_grad(loss, argnums=(0, 1))(f32(hidden), f32(w))
    # the float32 inputs, in float64, are what the reference sees
    h64, w64 = np.asarray(f32(hidden), np.float64), np.asarray(f32(w), np.float64)
    np.testing.assert_allclose(float(value), reference(h64, w64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dh, _finite_difference(lambda h: reference(h, w64), h64),
                               atol=2e-5)
    np.testing.assert_allclose(dw, _finite_difference(lambda u: reference(h64, u), w64),
                               atol=2e-5)
    assert not np.any(dh[2]) and not np.any(dh[:, 0])   # padded row and prompt: no gradient


def _composition(hidden, w, tokens, old, adv, mask, *, chunk_size, temperature=None, **options):
    lp = credax.token_logprobs_from_hidden(hidden, w, tokens, mask=mask, chunk_size=chunk_size,
                                           temperature=temperature)
    return credax.policy_loss(lp, old, adv, mask, **options)


def _turn_data():
    rng = np.random.default_rng(5)
    token_turn = np.where(rng.random((B, T)) < 0.2, -1, rng.integers(0, 3, (B, T))).astype(np.int32)
    return token_turn, jnp.asarray(rng.standard_normal((B, 3)), jnp.float32)


COMPOSITION_CASES = {
    "default": dict(),
    "clip_higher+dual_clip": dict(clip_high=0.28, dual_clip=3.0),
    "ratio_cap": dict(ratio_cap=1.5, agg="seq-mean-token-mean"),
    "token_advantages": dict(token_advantages=True),
    "turn_advantages": dict(turn=True, agg="seq-mean-token-mean"),
    "row_advantages_with_turns": dict(turn_rows=True),
    "kl_k1_clamped_ratio_weight": dict(ref_logp=True, kl_coef=0.3, kl_estimator="k1",
                                       kl_clamp=0.2, kl_ratio_weight=True),
    "kl_abs": dict(ref_logp=True, kl_coef=0.3, kl_estimator="abs"),
    "rollout_token": dict(rollout=True, rollout_is_threshold=1.2),
    "rollout_sequence": dict(rollout=True, rollout_is="sequence"),
    "log_ratio_clamp_pair": dict(log_ratio_clamp=(-0.1, 0.15)),
    "normalizer": dict(normalizer=5.0),
    "temperature": dict(temperature=1.3, agg="seq-mean-token-sum"),
    # A token's gradient depends on its row here: the two-pass scan.
    "sequence_ratio": dict(ratio="sequence", agg="seq-mean-token-mean"),
    "sequence_ratio_kl_weight": dict(ratio="sequence", ref_logp=True, kl_coef=0.3,
                                     kl_ratio_weight=True, log_ratio_clamp=(-float("inf"), 10.0)),
    "luspo": dict(ratio="sequence", agg="seq-mean-token-sum", normalizer=4.0, ratio_cap=1.3),
    "cispo": dict(surrogate="cispo", cispo_max=1.1, ref_logp=True, kl_coef=0.2,
                  kl_ratio_weight=True),
    "sapo": dict(surrogate="sapo", sapo_tau_pos=0.7, sapo_tau_neg=2.0,
                 agg="seq-mean-token-mean"),
    "sapo_sequence": dict(surrogate="sapo", ratio="sequence"),
    "vespo": dict(surrogate="vespo", ref_logp=True, kl_coef=0.1),
    "vespo_turns_rollout": dict(surrogate="vespo", turn=True, rollout=True,
                                rollout_is_threshold=1.2),
}


CHUNKED_CASES = [(name, 3) for name in COMPOSITION_CASES] + [("default", None), ("default", 2),
                                                              ("turn_advantages", 2)]


@pytest.mark.parametrize(("name", "chunk_size"), CHUNKED_CASES)
def test_equals_the_two_call_composition(name, chunk_size):
    hidden, w, tokens, mask, adv, old, ref_logp = (jnp.asarray(x) if np.asarray(x).dtype != np.float64
                                                   else jnp.asarray(x, jnp.float32) for x in _data(2))
    options = dict(COMPOSITION_CASES[name])
    rng = np.random.default_rng(3)
    if options.pop("ref_logp", False):
        options["ref_logp"] = ref_logp
    if options.pop("rollout", False):
        options["rollout_logp"] = old + jnp.asarray(0.3 * rng.standard_normal((B, T)), jnp.float32)
    if options.pop("token_advantages", False):
        adv = jnp.asarray(rng.standard_normal((B, T)), jnp.float32)
    if options.pop("turn", False):
        options["token_turn"], adv = _turn_data()
    if options.pop("turn_rows", False):
        options["token_turn"] = _turn_data()[0]

    def grads(loss_fn):
        return jax.value_and_grad(lambda h, u: (lambda out: (out.loss, out.metrics))(
            loss_fn(h, u, tokens, old, adv, mask, chunk_size=chunk_size, **_as_call(options))),
            argnums=(0, 1), has_aux=True)(hidden, w)

    ((va, ma), ga), ((vb, mb), gb) = jax.jit(
        lambda: (grads(_composition), grads(credax.policy_loss_from_hidden)))()
    np.testing.assert_allclose(vb, va, rtol=1e-5, atol=1e-6)
    for x, y in zip(mb, ma, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    for x, y in zip(gb, ga, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_bfloat16_inputs_match_the_composition():
    hidden, w, tokens, mask, adv, old, _ = _data(4)
    hb, wb = jnp.asarray(hidden, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16)
    old, adv = jnp.asarray(old, jnp.float32), jnp.asarray(adv, jnp.float32)
    a = jax.value_and_grad(lambda h, u: _composition(h, u, tokens, old, adv, mask,
                                                     chunk_size=3).loss, argnums=(0, 1))(hb, wb)
    b = jax.value_and_grad(lambda h, u: credax.policy_loss_from_hidden(
        h, u, tokens, old, adv, mask, chunk_size=3).loss, argnums=(0, 1))(hb, wb)
    assert b[1][0].dtype == jnp.bfloat16 and b[1][1].dtype == jnp.bfloat16
    np.testing.assert_allclose(b[0], a[0], rtol=1e-5)          # the value is float32 either way
    for x, y in zip(b[1], a[1], strict=True):                    # bf16 gradients: bf16 resolution
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32),
                                   atol=2e-2, rtol=2e-2)


def test_unsupported_options_raise_naming_them():
    hidden, w, tokens, mask, adv, old, _ = _data()
    with pytest.raises(ValueError, match="`entropy`"):
        credax.policy_loss_from_hidden(hidden, w, tokens, old, adv, mask, entropy=np.zeros((B, T)),
                                       options=credax.LossOptions(entropy_coef=0.01))
    with pytest.raises(ValueError, match="chunk_size"):
        credax.policy_loss_from_hidden(hidden, w, tokens, old, adv, mask, chunk_size=0)
    with pytest.raises(ValueError, match="clip_low"):
        credax.policy_loss_from_hidden(hidden, w, tokens, old, adv, mask,
                                       options=credax.LossOptions(clip_low=1.5))
    with pytest.raises(ValueError, match="unembedding"):
        credax.policy_loss_from_hidden(hidden, w.T, tokens, old, adv, mask)


def test_empty_mask_is_zero_loss_zero_gradient_and_nan_ignored():
    hidden, w, tokens, _, adv, old, _ = _data()
    hidden = hidden.copy()
    hidden[0, 0] = np.nan                      # masked: must not reach anything
    empty = np.zeros((B, T), bool)
    value, grads = jax.value_and_grad(lambda h, u: credax.policy_loss_from_hidden(
        h, u, tokens, old, adv, empty, chunk_size=3).loss, argnums=(0, 1))(
        jnp.asarray(hidden, jnp.float32), jnp.asarray(w, jnp.float32))
    assert float(value) == 0.0
    for g in grads:
        assert np.all(np.asarray(g) == 0.0)


def test_out_of_range_tokens():
    hidden, w, tokens, mask, adv, old, _ = _data()
    bad = tokens.copy()
    bad[0, 1] = V                                # unmasked
    with pytest.raises(ValueError, match="tokens"):
        credax.policy_loss_from_hidden(hidden, w, bad, old, adv, mask)
    padded = tokens.copy()
    padded[~mask] = -100                         # masked padding ids are fine
    np.testing.assert_allclose(
        credax.policy_loss_from_hidden(hidden, w, padded, old, adv, mask).loss,
        credax.policy_loss_from_hidden(hidden, w, tokens, old, adv, mask).loss)
    # traced inside the caller's jit the id cannot be seen: NaN loss, as the composition
    h32, w32 = jnp.asarray(hidden, jnp.float32), jnp.asarray(w, jnp.float32)
    old32, adv32 = jnp.asarray(old, jnp.float32), jnp.asarray(adv, jnp.float32)
    fused = jax.jit(jax.value_and_grad(lambda h, u, tok: credax.policy_loss_from_hidden(
        h, u, tok, old32, adv32, mask, chunk_size=3).loss, argnums=(0, 1)))
    two = jax.jit(jax.value_and_grad(lambda h, u, tok: _composition(
        h, u, tok, old32, adv32, mask, chunk_size=3).loss, argnums=(0, 1)))
    (vf, gf), (vt, gt) = fused(h32, w32, bad), two(h32, w32, bad)
    assert np.isnan(float(vf)) and np.isnan(float(vt))
    for x, y in zip(gf, gt, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_jit_vmap_and_forward_only():
    hidden, w, tokens, mask, adv, old, _ = _data(6, all_masked_row=False)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    h, u, old, adv = f32(hidden), f32(w), f32(old), f32(adv)
    call = lambda h, clip: credax.policy_loss_from_hidden(h, u, tokens, old, adv, mask,
                                                          chunk_size=3,
                                                          options=credax.LossOptions(clip_low=clip)).loss
    eager = call(h, 0.2)
    np.testing.assert_allclose(jax.jit(call)(h, 0.2), eager, rtol=1e-6)   # traced clip_low
    stacked = jnp.stack([h, 2 * h])
    batched = jax.vmap(lambda x: jax.value_and_grad(call)(x, 0.2))(stacked)
    for i in range(2):
        v, g = jax.value_and_grad(call)(stacked[i], 0.2)
        np.testing.assert_allclose(batched[0][i], v, rtol=1e-5)
        np.testing.assert_allclose(batched[1][i], g, rtol=1e-5, atol=1e-7)
    # without differentiation the value is the composition's (the forward-only primal)
    np.testing.assert_allclose(
        eager, _composition(h, u, tokens, old, adv, mask, chunk_size=3).loss, rtol=1e-6)


def _dots(fn, *args):
    text = jax.jit(fn).lower(*args).compile().as_text()
    return re.findall(r"= \S+ dot\(", text)


def test_three_gemms_under_value_and_grad_one_without():
    spec = jax.ShapeDtypeStruct
    b, t, d, v, c = 2, 64, 16, 512, 16
    args = (spec((b, t, d), jnp.float32), spec((d, v), jnp.float32))
    tokens, mask = jnp.zeros((b, t), jnp.int32), jnp.ones((b, t), bool)
    old, adv = jnp.zeros((b, t)), jnp.ones((b,))

    def fused(h, u):
        return credax.policy_loss_from_hidden(h, u, tokens, old, adv, mask, chunk_size=c).loss

    def two_calls(h, u):
        return _composition(h, u, tokens, old, adv, mask, chunk_size=c).loss

    grad = lambda f: jax.value_and_grad(f, argnums=(0, 1))
    # dots in the compiled program (the scan body is compiled once: per chunk)
    assert len(_dots(grad(fused), *args)) == 3
    assert len(_dots(fused, *args)) == 1
    assert len(_dots(grad(two_calls), *args)) == 4   # the composition recomputes the logits
    compiled = jax.jit(grad(fused)).lower(*args).compile()
    chunk_bytes = b * c * v * 4
    # the goal of issue #31: at most 2 chunks of logits, plus the one [D, V] buffer of a chunk's
    # unembedding gradient before it is added to the running sum (no accumulating GEMM on CPU)
    temp = compiled.memory_analysis().temp_size_in_bytes
    assert temp <= 2 * chunk_bytes + d * v * 4, (temp - d * v * 4) / chunk_bytes


def test_hyperparameter_and_temperature_gradients_equal_the_composition():
    # d loss / d (normalizer, kl_coef, clip bounds, temperature) as the composition's autodiff
    # gives them; old_logp and advantages are constants of policy_loss (zero gradient)
    hidden, w, tokens, mask, adv, old, ref_logp = (jnp.asarray(x) if np.asarray(x).dtype != np.float64
                                                   else jnp.asarray(x, jnp.float32) for x in _data(7))
    names = ("normalizer", "kl_coef", "clip_low", "clip_high", "temperature")
    values = tuple(jnp.float32(v) for v in (9.0, 0.1, 0.05, 0.06, 0.8))

    def loss(fused, h, u, old_, adv_, *hyper):
        options = dict(zip(names, hyper, strict=True), ref_logp=ref_logp, dual_clip=3.0)
        if fused:
            return credax.policy_loss_from_hidden(h, u, tokens, old_, adv_, mask, chunk_size=3,
                                                  **_as_call(options)).loss
        return _composition(h, u, tokens, old_, adv_, mask, chunk_size=3, **_as_call(options)).loss

    args = (hidden, w, old, adv, *values)
    grads = jax.jit(lambda *a: tuple(jax.grad(functools.partial(loss, fused), tuple(range(9)))(*a)
                                     for fused in (False, True)))
    two, fused = grads(*args)
    assert float(jnp.abs(two[-1])) > 0 and float(jnp.abs(two[4])) > 0   # temperature, normalizer
    for x, y in zip(fused, two, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["cispo", "sapo", "vespo", "luspo"])
def test_nnx_runs_every_loss_type_fused_and_unfused(name):
    # credax.nnx passes the options through: the fused path (two-pass where the loss couples a
    # row) equals the two-call path under nnx.value_and_grad for each new loss type.
    from flax import nnx

    import credax.nnx as cnnx
    from tests.test_nnx import TinyLM, _batch, hidden_pair

    options = presets.trl_loss(name, num_rows=4, epsilon_high=1.1 if name == "cispo" else None,
                               importance_sampling_level="sequence" if name == "luspo" else "token")
    model = TinyLM(17, 8, rngs=nnx.Rngs(5))
    batch = _batch(model, seed=5, noise=0.3)

    def grad(**kw):
        fn = functools.partial(cnnx.policy_loss_fn, apply=hidden_pair, chunk_size=3,
                               options=options, **kw)
        return nnx.jit(nnx.value_and_grad(fn, has_aux=True))(model, batch)

    (loss, _), g = grad()
    (loss_f, _), g_f = grad(fused=True)
    np.testing.assert_allclose(loss_f, loss, rtol=1e-5, atol=1e-7)
    for a, b in zip(jax.tree.leaves(g_f), jax.tree.leaves(g), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

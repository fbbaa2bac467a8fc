"""The compiled-memory bound of the chunked linear log-prob (token_logprobs_from_hidden).

XLA's compiled memory analysis (``credax.bench.harness.compiled_memory``, the one place credax
measures it) is exact and needs no run: ``temp_size_in_bytes`` is the scratch space of the whole
forward + backward program, arguments and outputs excluded. The bound is
asserted against the bytes of the full ``[B, T, V]`` float32 logits.

At the issue's shape (B=8, T=4096, D=1024, V=32768, float32; logits 4,294,967,296 bytes) the CPU
compiler gives 8,590,327,808 temporary bytes unchunked (200.0%) and 814,112,952 with
``chunk_size=256`` (19.0%); this file checks the same ratios on a shape that compiles in a second.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax.bench.harness import compiled_memory
from tests import random_inputs as rd

B, T, D, V, CHUNK = 2, 512, 16, 4096, 32
LOGITS_BYTES = B * T * V * 4


def _temp_bytes(chunk_size, with_mask):
    def loss(hidden, unembedding, tokens, mask):
        lp = credax.token_logprobs_from_hidden(
            hidden, unembedding, tokens, chunk_size=chunk_size, mask=mask if with_mask else None
        )
        return jnp.sum(lp)

    spec = jax.ShapeDtypeStruct
    args = (spec((B, T, D), jnp.float32), spec((D, V), jnp.float32), spec((B, T), jnp.int32),
            spec((B, T), jnp.bool_))
    return _temp(jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), *args)


def _temp(jitted, *args):
    return compiled_memory(jitted, *args)["temp_size_in_bytes"]


@pytest.mark.parametrize("with_mask", [False, True])
def test_chunked_temp_bytes_below_quarter_of_logits(with_mask):
    chunked = _temp_bytes(CHUNK, with_mask)
    full = _temp_bytes(None, with_mask)
    # The unchunked program holds the logits and their softmax gradient: about 2x the logits.
    # Asserting it keeps this test able to fail if the analysis stopped counting them.
    assert full >= 1.5 * LOGITS_BYTES, full / LOGITS_BYTES
    assert chunked <= 0.25 * LOGITS_BYTES, chunked / LOGITS_BYTES


def test_chunked_gradients_equal_unchunked():
    b, t, d, v = 2, 96, 8, 300
    k = rd.streams(0, 4)
    hidden = rd.normal(k[0], (b, t, d))
    unembedding = rd.normal(k[1], (d, v)) / np.sqrt(d)
    tokens = rd.randint(k[2], (b, t), 0, v)
    weights = rd.normal(k[3], (b, t))

    def loss(h, w, chunk_size):
        lp = credax.token_logprobs_from_hidden(h, w, tokens, chunk_size=chunk_size)
        return jnp.sum(weights * lp)

    grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)), static_argnums=2)
    (v_full, g_full), (v_chunk, g_chunk) = grad(hidden, unembedding, None), grad(
        hidden, unembedding, 32)
    np.testing.assert_allclose(v_chunk, v_full, rtol=1e-5)
    for a, e in zip(g_chunk, g_full, strict=True):
        np.testing.assert_allclose(a, e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_token_logprobs_never_materialises_log_softmax(dtype, with_mask):
    # From logits, the forward pass is two fused reductions and a gather, and the custom VJP
    # writes the gradient in one elementwise pass: no [B, T, V] temporary in float32. The CPU
    # backend upcasts bfloat16 arithmetic to float32, which costs one float32 copy of the logits
    # there (1.0x); plain autodiff of logsumexp needed 2.0x for bfloat16 logits.
    def f(logits, tokens, mask):
        return credax.token_logprobs(logits, tokens, mask=mask if with_mask else None)

    spec = jax.ShapeDtypeStruct
    args = (spec((B, T, V), dtype), spec((B, T), jnp.int32), spec((B, T), jnp.bool_))
    forward = _temp(jax.jit(f), *args)
    both = _temp(jax.jit(jax.value_and_grad(lambda *a: jnp.sum(f(*a)))), *args)
    bound = 0.05 if dtype == jnp.float32 else 1.1
    assert forward <= bound * LOGITS_BYTES, forward / LOGITS_BYTES
    assert both <= bound * LOGITS_BYTES, both / LOGITS_BYTES


def test_turn_advantages_keep_no_token_copy_for_the_backward_pass():
    # policy_loss gathers [B, K] advantages to tokens through token_turn inside the loss. Under
    # value_and_grad, XLA kept the gathered [B, T] array for the backward pass (at 8M tokens 88
    # against 48 MiB of temporaries for [B, T] advantages) until the loss was rematerialised
    # (jax.checkpoint): now the fused form needs less than one [B, T] float32 array more scratch.
    b, k, t = 16, 8, 4096
    spec = jax.ShapeDtypeStruct
    floats, turns = spec((b, t), jnp.float32), spec((b, t), jnp.int32)

    def temp(advantages, token_turn):
        def loss(lp, old, adv, mask, tt):
            return credax.policy_loss(lp, old, adv, mask, token_turn=tt).loss

        args = (floats, floats, advantages, spec((b, t), jnp.bool_), token_turn)
        return _temp(jax.jit(jax.value_and_grad(loss)), *args)

    per_token = temp(floats, None)
    per_turn = temp(spec((b, k), jnp.float32), turns)
    assert per_turn - per_token < b * t * 4, (per_turn, per_token)

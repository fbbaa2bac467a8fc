"""Tests of credax/nnx.py: the next-token alignment, the hidden-state path, a train step, and
data parallelism over 8 forced CPU devices (in a subprocess).

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import credax
import credax.nnx as cnnx

try:
    from tests.probes import Probes, raises
except ImportError:  # imported from the tests folder itself (the data-parallel script below)
    from probes import Probes, raises


class TinyLM(nnx.Module):
    """Embedding, causal prefix mean, one tanh layer, untied head: a causal LM in four lines."""

    def __init__(self, vocab: int, dim: int, *, rngs: nnx.Rngs):
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.mix = nnx.Linear(dim, dim, rngs=rngs)
        self.head = nnx.Linear(dim, vocab, use_bias=False, rngs=rngs)

    def hidden(self, tokens):
        h = self.embed(tokens)
        steps = jnp.arange(1, tokens.shape[1] + 1, dtype=h.dtype)[None, :, None]
        return jnp.tanh(self.mix(jnp.cumsum(h, axis=1) / steps))

    def __call__(self, tokens):
        return self.head(self.hidden(tokens))


def hidden_pair(model, tokens):
    return model.hidden(tokens), model.head.kernel[...]


def _batch(model, batch=4, length=9, vocab=17, seed=0, noise=0.1):
    k = jax.random.split(jax.random.key(seed), 4)
    tokens = jax.random.randint(k[0], (batch, length), 0, vocab)
    ends = jax.random.randint(k[1], (batch, 1), 4, length + 1)
    pos = jnp.arange(length)[None, :]
    mask = (pos >= 2) & (pos < ends)  # two prompt tokens, then a response of varying length
    old = cnnx.sequence_logprobs(model, tokens, mask) + noise * jax.random.normal(k[2], mask.shape)
    old = jnp.where(mask, old, jnp.nan)  # padding holds garbage; it must not matter
    return cnnx.PolicyBatch(tokens, mask, old, jax.random.normal(k[3], (batch,)))


def test_sequence_logprobs_alignment():
    # A bigram "model": logits at position t are E[tokens[t]], so with the documented shift
    # logp[t] = log_softmax(E[tokens[t - 1]])[tokens[t]] for t >= 1 and logp[0] = 0.
    vocab = 7
    model = nnx.Embed(vocab, vocab, rngs=nnx.Rngs(3))
    table = np.asarray(model.embedding[...], np.float64)
    tokens = np.array([[3, 1, 4, 1, 5], [6, 0, 2, 6, 5]])
    expected = np.zeros(tokens.shape)
    for b in range(2):
        for t in range(1, 5):
            row = table[tokens[b, t - 1]]
            lse = np.log(np.sum(np.exp(row - row.max()))) + row.max()
            expected[b, t] = row[tokens[b, t]] - lse
    out = cnnx.sequence_logprobs(model, jnp.array(tokens))
    np.testing.assert_allclose(out, expected, atol=1e-5)
    mask = jnp.array([[True, True, False, True, True], [False] * 5])
    out = cnnx.sequence_logprobs(model, jnp.array(tokens), mask)
    np.testing.assert_allclose(out, np.where(np.asarray(mask) & (np.arange(5) > 0), expected, 0),
                               atol=1e-5)


def test_policy_loss_fn_on_policy_and_first_position_ignored():
    model = TinyLM(17, 8, rngs=nnx.Rngs(0))
    batch = _batch(model, noise=0.0)
    loss, metrics = cnnx.policy_loss_fn(model, batch)
    # On-policy: every ratio is 1, so the token-mean loss is -Σ A / N over the masked tokens.
    adv = jnp.broadcast_to(batch.advantages[:, None], batch.mask.shape)
    expected = -jnp.sum(jnp.where(batch.mask, adv, 0.0)) / jnp.sum(batch.mask, dtype=jnp.float32)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    np.testing.assert_allclose(metrics.mean_ratio, 1.0, rtol=1e-6)
    # mask[:, 0] has no prediction and is ignored.
    moved = batch._replace(mask=batch.mask.at[:, 0].set(True))
    np.testing.assert_array_equal(cnnx.policy_loss_fn(model, moved)[0], loss)


def test_policy_loss_fn_equals_manual_pipeline():
    model = TinyLM(17, 8, rngs=nnx.Rngs(1))
    batch = _batch(model, seed=1)
    opts = credax.LossOptions(agg="seq-mean-token-mean", clip_high=0.28, dual_clip=3.0)
    loss, metrics = cnnx.policy_loss_fn(model, batch, options=opts)
    logits = model(batch.tokens)
    logp = credax.token_logprobs(logits[:, :-1], batch.tokens[:, 1:])
    mask = batch.mask[:, 1:]
    manual = credax.policy_loss(logp, batch.old_logp[:, 1:], batch.advantages, mask, options=opts)
    np.testing.assert_allclose(loss, manual.loss, rtol=1e-6, atol=1e-7)
    for a, b in zip(metrics, manual.metrics, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_hidden_path_equals_logits_path(chunk_size):
    model = TinyLM(17, 8, rngs=nnx.Rngs(2))
    batch = _batch(model, seed=2)
    def grad(**options):
        fn = functools.partial(cnnx.policy_loss_fn, **options)
        return nnx.jit(nnx.value_and_grad(fn, has_aux=True))(model, batch)

    (loss, _), g = grad()
    (loss_h, _), g_h = grad(apply=hidden_pair, chunk_size=chunk_size)
    np.testing.assert_allclose(loss_h, loss, rtol=1e-5, atol=1e-7)
    for a, b in zip(jax.tree.leaves(g_h), jax.tree.leaves(g), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_fused_path_equals_the_two_call_path(chunk_size):
    # fused=True: credax.policy_loss_from_hidden on the shifted batch, same value, metrics, grads
    model = TinyLM(17, 8, rngs=nnx.Rngs(4))
    batch = _batch(model, seed=4)
    def grad(**options):
        fn = functools.partial(cnnx.policy_loss_fn, apply=hidden_pair, chunk_size=chunk_size,
                               options=credax.LossOptions(dual_clip=3.0), **options)
        return nnx.jit(nnx.value_and_grad(fn, has_aux=True))(model, batch)

    (loss, metrics), g = grad()
    (loss_f, metrics_f), g_f = grad(fused=True)
    np.testing.assert_allclose(loss_f, loss, rtol=1e-5, atol=1e-7)
    for a, b in zip(metrics_f, metrics, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    for a, b in zip(jax.tree.leaves(g_f), jax.tree.leaves(g), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="fused"):
        cnnx.policy_loss_fn(model, batch, fused=True)      # logits: no (hidden, unembedding)


def test_chunk_size_needs_hidden_pair():
    model = TinyLM(17, 8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="chunk_size"):
        cnnx.policy_loss_fn(model, _batch(model), chunk_size=4)
    with pytest.raises(TypeError, match="PolicyBatch"):
        cnnx.policy_loss_fn(model, tuple(_batch(model)))


def test_per_turn_advantages_and_masked_garbage():
    model = TinyLM(17, 8, rngs=nnx.Rngs(4))
    batch = _batch(model, batch=2, length=8, seed=4)
    token_turn = jnp.array([[-1, -1, 0, 0, 1, 1, -1, -1], [-1, -1, 0, 0, 0, 1, 1, 1]])
    turn_adv = jnp.array([[0.5, -1.0, jnp.nan], [0.35, 1 / 3, jnp.nan]])  # turn 2 is padding
    turns = batch._replace(advantages=turn_adv, token_turn=token_turn)
    grad = nnx.jit(nnx.value_and_grad(cnnx.policy_loss_fn, has_aux=True))
    (loss, _), g = grad(model, turns)
    token_adv = credax.broadcast_to_tokens(jnp.nan_to_num(turn_adv), token_turn)
    flat = batch._replace(advantages=token_adv, mask=batch.mask & (token_turn >= 0))
    (loss_flat, _), g_flat = grad(model, flat)
    np.testing.assert_allclose(loss, loss_flat, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_flat), strict=True):
        assert bool(jnp.all(jnp.isfinite(a)))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_train_step_raises_logprobs_of_positive_advantages():
    model = TinyLM(17, 16, rngs=nnx.Rngs(5))
    batch = _batch(model, seed=5, noise=0.0)
    batch = batch._replace(advantages=jnp.ones_like(batch.advantages))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
    loss_fn = functools.partial(cnnx.policy_loss_fn, options=credax.LossOptions(clip_high=0.28))

    @nnx.jit
    def train_step(model, optimizer, batch):
        (loss, metrics), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model, batch)
        optimizer.update(model, grads)
        return loss, metrics

    def mean_logp():
        lp = cnnx.sequence_logprobs(model, batch.tokens, batch.mask)
        return float(jnp.sum(lp) / jnp.sum(batch.mask[:, 1:], dtype=jnp.float32))

    before = mean_logp()
    # optax's bias correction mixes a Python float with an int32 step count, which the suite's
    # strict dtype promotion refuses; credax itself runs under the strict setting.
    with jax.numpy_dtype_promotion("standard"):
        for _ in range(3):
            _, metrics = train_step(model, optimizer, batch)
    assert mean_logp() > before
    assert float(metrics.mean_ratio) > 1.0  # the policy moved toward the rewarded tokens


DATA_PARALLEL = textwrap.dedent(
    """
    import functools, json, os, sys
    import jax, jax.numpy as jnp, optax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec as P
    # The tests folder itself, not `tests.`: verl (a test extra) installs a top-level `tests`
    # package that would shadow this repository's.
    sys.path.insert(0, os.path.join(sys.argv[1], "tests"))
    import credax, credax.nnx as cnnx
    from test_nnx import TinyLM, _batch

    assert len(jax.devices()) == 8, jax.devices()
    model = TinyLM(17, 8, rngs=nnx.Rngs(0))
    batch = _batch(model, batch=16, length=12, seed=7)
    loss_fn = functools.partial(
        cnnx.policy_loss_fn, options=credax.LossOptions(agg="seq-mean-token-mean", dual_clip=3.0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, batch):
        (loss, metrics), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model, batch)
        optimizer.update(model, grads)
        return loss, grads

    def run(place):
        m = TinyLM(17, 8, rngs=nnx.Rngs(0))
        opt = nnx.Optimizer(m, optax.adamw(1e-2), wrt=nnx.Param)
        nnx.update(m, place(nnx.state(m), P()))
        nnx.update(opt, place(nnx.state(opt), P()))
        loss, grads = train_step(m, opt, place(batch, P("data")))
        return loss, grads, nnx.state(m, nnx.Param), place(batch, P("data")).tokens.sharding

    one = run(lambda x, spec: jax.device_put(x, jax.devices()[0]))
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    many = run(lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec)))
    host = lambda t: [jax.device_get(x) for x in jax.tree.leaves(t)]
    diff = lambda a, b: max(float(abs(x - y).max()) for x, y in
                            zip(host(a), host(b), strict=True))
    print(json.dumps({
        "loss_one": float(one[0]), "loss_many": float(many[0]),
        "grad_diff": diff(one[1], many[1]), "param_diff": diff(one[2], many[2]),
        "grad_scale": max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(one[1])),
        "sharded_over": len(many[3].device_set),
    }))
    """
)


def test_data_parallel_matches_one_device(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "dp.py"
    script.write_text(DATA_PARALLEL)
    env = dict(os.environ, JAX_PLATFORMS="cpu",  # keeps the suite's XLA_FLAGS (conftest.py)
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8")
    done = subprocess.run([sys.executable, str(script), root], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["sharded_over"] == 8
    np.testing.assert_allclose(out["loss_many"], out["loss_one"], rtol=1e-6)
    assert out["grad_diff"] <= 1e-6 * max(1.0, out["grad_scale"])
    assert out["param_diff"] <= 1e-6


def test_chunked_head_memory_bound_holds_under_the_nnx_wrapper():
    # Compiled temporaries of nnx.value_and_grad(policy_loss_fn, chunk_size=c) on a model that is
    # nothing but the head's inputs (hidden states and unembedding as parameters), against the
    # functional path at the same shapes: the wrapper adds no [B, T, V]-sized buffer. One chunk of
    # logits is B x c x V float32; the chunked programs hold two of them (the chunk's logits and
    # their gradient) and one [D, V] buffer (the chunk's unembedding gradient before it is added
    # to the running sum), as benchmarks/memory.py and `python -m credax.bench --only lm_head`
    # measure; the unchunked program holds the whole logits twice (16 chunks here).
    from credax.bench.cases import nnx_temp_bytes
    from credax.bench.harness import compiled_memory

    class _Env:
        jax = jax

    b, t, d, v, c = 2, 64, 8, 4096, 8
    chunk, head = b * c * v * 4, d * v * 4
    spec = jax.ShapeDtypeStruct
    hidden, unembedding = jnp.zeros((b, t, d)), jnp.zeros((d, v))
    tokens = jnp.zeros((b, t), jnp.int32)
    mask = jnp.ones((b, t), bool)
    old, adv = jnp.zeros((b, t)), jnp.zeros((b,))
    wrapped = nnx_temp_bytes(_Env, hidden, unembedding, tokens, old, adv, mask, c)

    def functional(h, w, tok, od, a, m):
        lp = credax.token_logprobs_from_hidden(h, w, tok, chunk_size=c, mask=m)
        return credax.policy_loss(lp, od, a, m).loss

    def temp(chunk_size):
        f = functional if chunk_size else (lambda h, w, tok, od, a, m: credax.policy_loss(
            credax.token_logprobs_from_hidden(h, w, tok, mask=m), od, a, m).loss)
        args = [spec(x.shape, x.dtype) for x in (hidden, unembedding, tokens, old, adv, mask)]
        grad = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))
        return compiled_memory(grad, *args)["temp_size_in_bytes"]

    plain, whole = temp(c), temp(None)
    assert whole >= 8 * chunk, whole / chunk  # the analysis counts [B, T, V] buffers
    assert plain <= 2.1 * chunk + head, (plain - head) / chunk
    assert wrapped <= plain + 0.05 * chunk, (wrapped - plain) / chunk
    # the fused path (policy_loss_from_hidden) under the wrapper: the same bound
    fused = nnx_temp_bytes(_Env, hidden, unembedding, tokens, old, adv, mask, c, fused=True)
    assert fused <= 2.1 * chunk + head, (fused - head) / chunk


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("narrow", "nnx_sequence_logprobs_int16")
def _():
    class Uniform:  # a "model" whose logits are all zero over 300 ids
        def __call__(self, tokens):
            return jnp.zeros(tokens.shape + (300,))

    lp = credax.nnx.sequence_logprobs(Uniform(), np.array([[299, 299]], np.int16))
    np.testing.assert_allclose(lp, [[0.0, -np.log(300.0)]], rtol=1e-6)


@probe("named", "nnx_empty_sequence")
def _():
    out = credax.nnx.sequence_logprobs(lambda t: 1 / 0, np.zeros((2, 0), np.int32))
    assert out.shape == (2, 0)


@probe("named", "policy_loss_fn_unknown_option")
def _():
    batch = credax.nnx.PolicyBatch(np.zeros((1, 2), np.int32), np.ones((1, 2), bool),
                                   np.zeros((1, 2), np.float32), np.ones(1, np.float32))
    raises(TypeError, r"unknown option\(s\) \['clip_ratio'\]; valid options are .*'options'",
           credax.nnx.policy_loss_fn, lambda t: jnp.zeros((1, 2, 3)), batch, clip_ratio=0.2)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()


def test_log_probs_aligned_with_the_predictions_are_refused():
    # Issue 44 item 8: old_logp computed for the predictions (the output at t scoring token t + 1,
    # padded at the end) gave an on-policy ratio away from 1, silently. Position 0 is never
    # predicted, so a log-prob there is the sign: refused eagerly, a NaN loss under jit.
    model = TinyLM(17, 8, rngs=nnx.Rngs(0))
    batch = _batch(model, noise=0.0)
    right = cnnx.sequence_logprobs(model, batch.tokens, batch.mask)
    lp = jax.nn.log_softmax(model(batch.tokens), axis=-1)
    taken = jnp.take_along_axis(lp[:, :-1], batch.tokens[:, 1:, None], axis=-1)[..., 0]
    shifted = jnp.pad(taken, ((0, 0), (0, 1)))  # the prediction-aligned mistake
    wrong = batch._replace(old_logp=shifted)
    with pytest.raises(ValueError, match=r"`PolicyBatch.old_logp\[:, 0\]` must be 0"):
        cnnx.policy_loss_fn(model, wrong)
    with pytest.raises(ValueError, match=r"ref_logp\[:, 0\]"):
        cnnx.policy_loss_fn(model, batch._replace(ref_logp=shifted))
    for fused in (False, True):
        loss, _ = jax.jit(lambda b, f=fused: cnnx.policy_loss_fn(
            model, b, apply=hidden_pair, fused=f))(wrong)
        assert np.isnan(float(loss))
    # the fix the message names: one position right is the documented alignment
    fixed = batch._replace(old_logp=jnp.pad(taken, ((0, 0), (1, 0))))
    np.testing.assert_allclose(jnp.where(batch.mask, fixed.old_logp, 0), right, atol=1e-5)
    _, metrics = cnnx.policy_loss_fn(model, fixed)
    np.testing.assert_allclose(metrics.mean_ratio, 1.0, rtol=1e-5)


def test_old_logp_none_names_the_field_and_the_on_policy_fix():
    # Issue 44 item 9: PolicyBatch(old_logp=None) ended in "None is not a valid value for
    # jnp.array" from inside the loss.
    model = TinyLM(17, 8, rngs=nnx.Rngs(0))
    batch = _batch(model)._replace(old_logp=None)
    with pytest.raises(TypeError, match=r"`PolicyBatch.old_logp` is None.*sequence_logprobs"):
        cnnx.policy_loss_fn(model, batch)
    with pytest.raises(TypeError, match=r"`PolicyBatch.old_logp` is None"):
        jax.jit(lambda b: cnnx.policy_loss_fn(model, b))(batch)

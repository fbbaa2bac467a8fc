"""Median wall time of one jitted Flax NNX train step (credax.nnx.policy_loss_fn + adamw), after compile.

Run: ``.venv/bin/python -m benchmarks.nnx_step``. The model is the README's TinyLM (embedding, causal
prefix sum, tanh, head), small enough that the step measures credax's loss plumbing plus optax.
"""

import functools
import statistics
import time

import jax
import jax.numpy as jnp
import optax
from flax import nnx

import credax.nnx as cnnx

V, D, B, T, PROMPT = 256, 64, 8, 128, 16


class TinyLM(nnx.Module):
    def __init__(self, vocab, dim, *, rngs):
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.head = nnx.Linear(dim, vocab, use_bias=False, rngs=rngs)

    def __call__(self, tokens):  # [B, T] -> logits [B, T, V]
        return self.head(jnp.tanh(jnp.cumsum(self.embed(tokens), axis=1)))


def main(steps: int = 30) -> None:
    model = TinyLM(V, D, rngs=nnx.Rngs(0))
    keys = jax.random.split(jax.random.key(0), 2)
    tokens = jax.random.randint(keys[0], (B, T), 0, V)
    mask = jnp.broadcast_to(jnp.arange(T)[None] >= PROMPT, (B, T))
    old = cnnx.sequence_logprobs(model, tokens, mask)
    batch = cnnx.PolicyBatch(tokens, mask, old, jax.random.normal(keys[1], (B,)))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    loss_fn = functools.partial(cnnx.policy_loss_fn, agg="seq-mean-token-mean", dual_clip=3.0)

    @nnx.jit
    def train_step(model, optimizer, batch):
        (loss, metrics), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model, batch)
        optimizer.update(model, grads)
        return loss, metrics

    start = time.perf_counter()
    jax.block_until_ready(train_step(model, optimizer, batch))
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        jax.block_until_ready(train_step(model, optimizer, batch))
        times.append(time.perf_counter() - start)
    print(f"B={B} T={T} V={V} D={D}: first call (compile) {compile_s:.2f} s; median step "
          f"{1e3 * statistics.median(times):.2f} ms (min {1e3 * min(times):.2f}, max "
          f"{1e3 * max(times):.2f}) over {steps} steps on {jax.devices()[0].platform}")


if __name__ == "__main__":
    main()

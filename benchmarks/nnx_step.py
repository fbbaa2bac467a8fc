"""Median wall time of one jitted Flax NNX train step (credax.nnx.policy_loss_fn + adamw), after compile.

Run: ``.venv/bin/python -m benchmarks.nnx_step [tiny] [head] [--head-size quick|cpu|gpu]``
(default: both models, the ``cpu`` head size; ``quick`` is a plumbing check, ``gpu`` the size the
prepared GPU script runs).

* ``tiny``: the README's TinyLM (embedding, causal prefix sum, tanh, head) at V=256, small enough
  that the step measures credax's loss plumbing plus optax.
* ``head``: a model whose LM head dominates the step (V=32768, D=256: the head's three GEMMs are
  most of its FLOPs), trained on per-turn TCPO advantages through ``token_turn`` with the head
  chunked (``chunk_size``) and fused (``policy_loss_fn(fused=True)``: three GEMMs a chunk).
  Reported next to the step, with the conditions (device, versions, threads, load average): the
  credit computation of the same batch (``credax.tcpo_advantages`` with the contiguous layout
  promise, jitted, and GRPO, and both together) as a share of the step (goal < 1%), and the head's
  matmul floor (its three GEMMs as plain ``jnp.dot`` calls) as a share of the step.
"""

import functools
import os
import platform
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import credax
import credax.nnx as cnnx
from credax.bench.cases import make_token_turn, make_turns

V, D, B, T, PROMPT = 256, 64, 8, 128, 16
# the head-dominated step: 8 rollouts (2 prompts x 4) of 64 tokens, 8 turns each
HEAD = dict(vocab=32768, dim=256, batch=8, length=64, turns=8, group=4, chunk=16)
HEAD_SIZES = {
    "quick": dict(vocab=512, dim=32, batch=8, length=32, turns=4, group=4, chunk=8),
    "cpu": HEAD,
    # one accelerator: 32 rollouts of 512 tokens, V=128k, D=2048 (a 1 GiB head, 1 GiB a chunk)
    "gpu": dict(vocab=131072, dim=2048, batch=32, length=512, turns=8, group=8, chunk=64),
}


class TinyLM(nnx.Module):
    def __init__(self, vocab, dim, *, rngs):
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.head = nnx.Linear(dim, vocab, use_bias=False, rngs=rngs)

    def __call__(self, tokens):  # [B, T] -> logits [B, T, V]
        return self.head(jnp.tanh(jnp.cumsum(self.embed(tokens), axis=1)))


class HeadLM(nnx.Module):
    """Embedding, causal prefix mean, one tanh layer, untied head; returns (hidden, unembedding)."""

    def __init__(self, vocab, dim, *, rngs):
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.mix = nnx.Linear(dim, dim, rngs=rngs)
        self.head = nnx.Linear(dim, vocab, use_bias=False, rngs=rngs)

    def __call__(self, tokens):
        h = self.embed(tokens)
        steps = jnp.arange(1, tokens.shape[1] + 1, dtype=h.dtype)[None, :, None]
        return jnp.tanh(self.mix(jnp.cumsum(h, axis=1) / steps)), self.head.kernel[...]


def _median_s(fn, calls: int) -> tuple[float, float, float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times)


def _train_step(loss_fn):
    @nnx.jit
    def train_step(model, optimizer, batch):
        (loss, metrics), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model, batch)
        optimizer.update(model, grads)
        return loss, metrics

    return train_step


def tiny(steps: int = 30) -> None:
    model = TinyLM(V, D, rngs=nnx.Rngs(0))
    keys = jax.random.split(jax.random.key(0), 2)
    tokens = jax.random.randint(keys[0], (B, T), 0, V)
    mask = jnp.broadcast_to(jnp.arange(T)[None] >= PROMPT, (B, T))
    old = cnnx.sequence_logprobs(model, tokens, mask)
    batch = cnnx.PolicyBatch(tokens, mask, old, jax.random.normal(keys[1], (B,)))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    train_step = _train_step(functools.partial(
        cnnx.policy_loss_fn, options=credax.LossOptions(agg="seq-mean-token-mean", dual_clip=3.0)))
    start = time.perf_counter()
    jax.block_until_ready(train_step(model, optimizer, batch))
    compile_s = time.perf_counter() - start
    med, lo, hi = _median_s(lambda: train_step(model, optimizer, batch), steps)
    print(f"tiny: B={B} T={T} V={V} D={D}: first call (compile) {compile_s:.2f} s; median step "
          f"{1e3 * med:.2f} ms (min {1e3 * lo:.2f}, max {1e3 * hi:.2f}) over {steps} steps on "
          f"{jax.devices()[0].platform}")


def conditions() -> str:
    """What the figures were measured on: device, versions, threads, load average."""
    device = jax.devices()[0]
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    threads = os.environ.get("XLA_FLAGS", "") or "default XLA flags"
    return (f"conditions: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
            f"{device.platform} ({getattr(device, 'device_kind', '?')}), {os.cpu_count()} CPUs, "
            f"load average {'n/a' if load is None else ', '.join(f'{x:.2f}' for x in load)}; "
            f"Python {platform.python_version()}, jax {jax.__version__}, credax "
            f"{credax.__version__}; {threads}")


def head(steps: int = 7, fused: bool = True, **sizes) -> dict:
    z = {**HEAD, **sizes}
    vocab, dim, batch, length, turns, group = (z[k] for k in ("vocab", "dim", "batch", "length",
                                                              "turns", "group"))
    rng = np.random.default_rng(0)
    model = HeadLM(vocab, dim, rngs=nnx.Rngs(0))
    tokens = jnp.asarray(rng.integers(0, vocab, (batch, length)).astype(np.int32))
    scores, turn_mask = make_turns(rng, batch, turns)
    token_turn = make_token_turn(rng, turn_mask, length)
    mask = jnp.asarray(token_turn >= 0)
    ids = np.repeat(np.arange(batch // group), group)
    g = credax.groups(ids, layout="contiguous", group_size=group)
    s_j, m_j, tt_j = jnp.asarray(scores), jnp.asarray(turn_mask), jnp.asarray(token_turn)
    rewards = s_j[:, -1]

    tcpo = jax.jit(lambda s, m, g: credax.tcpo_advantages(s, m, g, gamma=0.9).advantages)
    grpo = jax.jit(lambda r, g: credax.grpo_advantages(r, g))
    advantages = tcpo(s_j, m_j, g)
    apply = lambda m, tok: m(tok)
    old = cnnx.sequence_logprobs(model, tokens, mask, apply=apply, chunk_size=z["chunk"])
    pbatch = cnnx.PolicyBatch(tokens, mask, old, advantages, token_turn=tt_j)
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    train_step = _train_step(functools.partial(cnnx.policy_loss_fn, apply=apply,
                                               chunk_size=z["chunk"], fused=fused))
    start = time.perf_counter()
    jax.block_until_ready(train_step(model, optimizer, pbatch))
    compile_s = time.perf_counter() - start

    n = batch * length
    h2 = jnp.asarray(rng.standard_normal((n, dim), dtype=np.float32))
    w = jnp.asarray(rng.standard_normal((dim, vocab), dtype=np.float32))
    g2 = jnp.asarray(rng.standard_normal((n, vocab), dtype=np.float32))
    gemms = [(jax.jit(lambda a, b: a @ b), (h2, w)), (jax.jit(lambda x, b: x @ b.T), (g2, w)),
             (jax.jit(lambda a, x: a.T @ x), (h2, g2))]

    def floor():
        return [jax.block_until_ready(f(*a)) for f, a in gemms]

    floor()
    jax.block_until_ready((tcpo(s_j, m_j, g), grpo(rewards, g)))
    # interleaved: each round times the step, the credit and the floor back to back
    step_t, tcpo_t, grpo_t, floor_t = [], [], [], []
    for _ in range(steps):
        step_t.append(_median_s(lambda: train_step(model, optimizer, pbatch), 1)[0])
        tcpo_t.append(_median_s(lambda: tcpo(s_j, m_j, g), 20)[0])
        grpo_t.append(_median_s(lambda: grpo(rewards, g), 20)[0])
        floor_t.append(_median_s(floor, 1)[0])
    med = statistics.median
    out = {"step_s": med(step_t), "tcpo_s": med(tcpo_t), "grpo_s": med(grpo_t),
           "floor_s": med(floor_t), "compile_s": compile_s}
    out["credit_share"] = (out["tcpo_s"] + out["grpo_s"]) / out["step_s"]
    print(f"head: B={batch} ({batch // group} prompts x {group}) T={length} K={turns} V={vocab} "
          f"D={dim} chunk_size={z['chunk']} {'fused' if fused else 'two calls'}: first call "
          f"(compile) {compile_s:.2f} s; median step {1e3 * out['step_s']:.1f} ms over {steps} "
          f"interleaved rounds on {jax.devices()[0].platform}")
    print(f"  {conditions()}")
    print(f"  credit: tcpo_advantages {1e3 * out['tcpo_s']:.3f} ms = "
          f"{100 * out['tcpo_s'] / out['step_s']:.3f}% of the step; grpo_advantages "
          f"{1e3 * out['grpo_s']:.3f} ms = {100 * out['grpo_s'] / out['step_s']:.3f}%; both "
          f"{100 * out['credit_share']:.3f}% (goal < 1%: "
          f"{'met' if out['credit_share'] < 0.01 else 'missed'})")
    print(f"  head matmul floor (3 GEMMs of 2·N·D·V, {6 * n * dim * vocab / 1e9:.1f} GFLOP): "
          f"{1e3 * out['floor_s']:.1f} ms = {100 * out['floor_s'] / out['step_s']:.0f}% of the step")
    return out


def main(steps: int = 30, models=("tiny",), head_size: str = "cpu", head_steps: int = 7) -> None:
    """``models`` to run (``"tiny"``, ``"head"``); ``steps`` timed steps of the tiny model;
    ``head_size`` one of :data:`HEAD_SIZES`."""
    unknown = set(models) - {"tiny", "head"}
    if unknown:
        raise SystemExit(f"unknown model(s) {sorted(unknown)}: choose tiny, head")
    if head_size not in HEAD_SIZES:
        raise SystemExit(f"unknown --head-size {head_size!r}: choose {', '.join(HEAD_SIZES)}")
    if "tiny" in models:
        tiny(steps)
    if "head" in models:
        head(head_steps, **HEAD_SIZES[head_size])


def _cli(argv) -> None:
    argv, size = list(argv), "cpu"
    if "--head-size" in argv:
        i = argv.index("--head-size")
        size = argv[i + 1] if i + 1 < len(argv) else ""
        del argv[i:i + 2]
    main(models=argv or ("tiny", "head"), head_size=size,
         head_steps=2 if size == "quick" else 7)


if __name__ == "__main__":
    _cli(sys.argv[1:])

"""The vocabulary-parallel fused head against the gathered and the single-device paths.

Run (8 forced CPU devices; the flag must be set before JAX starts)::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 PYTHONPATH=src \\
        python -m benchmarks.vocab_parallel [--vocab 32768 131072] [--tokens B,T] [--dim D]

On a multi-GPU host drop the flag: the mesh is the first ``--devices`` devices JAX sees (default 8,
or all of them if fewer); ``make bench-gpu`` and ``benchmarks/gpu_host.sh`` run it at the LM head's
GPU sizes (``--tokens 4,512 --dim 2048 --chunk 512 --min-devices 2``: skipped on one GPU).

One training step's head, ``jax.value_and_grad`` of
``policy_loss_from_hidden`` (token-mean, chunk ``--chunk`` positions) w.r.t. the hidden states and
the unembedding, three ways:

* ``vocab-parallel``: inside ``jax.shard_map`` each device holds ``W[:, its V/n]`` and calls the
  head with ``vocab_axis``: ``[B, c]`` collectives for the log-sum-exp, a ``[B, c, D]``
  all-reduce for ``d hidden``;
* ``gathered``: the same shards, all-gathered to the whole ``[D, V]`` on every device first (what an
  Explicit mesh did before issue #46), then the single-device head on each;
* ``single``: one device, the whole unembedding.

Per device: XLA's memory analysis of the compiled program (``compiled_memory``: arguments,
outputs, temporaries, in bytes; exact, deterministic) and the median wall time of ``--repeats``
runs after one warm-up. On forced CPU devices the "devices" share the host's cores, so the time of
the sharded paths says nothing about a speed-up on real devices; the memory does.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import credax
from credax.bench.harness import compiled_memory

MIB = 1 << 20


def paths(n, batch, length, dim, vocab, chunk):
    mesh = jax.make_mesh((n,), ("v",), devices=jax.devices()[:n])
    rng = np.random.default_rng(0)
    h = jnp.asarray(rng.normal(size=(batch, length, dim)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(dim, vocab)) / np.sqrt(dim), jnp.float32)
    tok = jnp.asarray(rng.integers(0, vocab, (batch, length)), jnp.int32)
    old = jnp.full((batch, length), -np.log(vocab), jnp.float32)
    adv = jnp.asarray(rng.normal(size=(batch,)), jnp.float32)
    mask = jnp.ones((batch, length), bool)

    def loss(h, w, vocab_axis=None):
        return credax.policy_loss_from_hidden(h, w, tok, old, adv, mask, chunk_size=chunk,
                                              vocab_axis=vocab_axis).loss

    grads = (P(), P(None, "v"))
    parallel = jax.jit(jax.shard_map(
        jax.value_and_grad(lambda h, w: loss(h, w, "v"), argnums=(0, 1)), mesh=mesh,
        in_specs=(P(), P(None, "v")), out_specs=(P(), grads)))

    # The whole unembedding on every device: jit all-gathers the vocabulary shards into the
    # shard_map's replicated input, then each device runs the single-device head.
    replicated = jax.shard_map(jax.value_and_grad(loss, argnums=(0, 1)), mesh=mesh,
                               in_specs=(P(), P()), out_specs=(P(), (P(), P())))
    gathered = jax.jit(lambda h, w: replicated(h, jax.sharding.reshard(w, NamedSharding(mesh, P()))))
    single = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    sharded_args = (jax.device_put(h, NamedSharding(mesh, P())),
                    jax.device_put(w, NamedSharding(mesh, P(None, "v"))))
    one = jax.devices()[0]
    single_args = (jax.device_put(h, one), jax.device_put(w, one))
    return {"vocab-parallel": (parallel, sharded_args), "gathered": (gathered, sharded_args),
            "single": (single, single_args)}


def timed(fn, args, repeats):
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--tokens", default="2,256", help="B,T (default 2,256: N = 512 tokens)")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-time", action="store_true", help="memory only (no run)")
    parser.add_argument("--min-devices", type=int, default=1,
                        help="print 'skipped' and exit 0 when JAX sees fewer devices (make bench-gpu)")
    args = parser.parse_args(argv)
    batch, length = (int(x) for x in args.tokens.split(","))
    n = min(args.devices, len(jax.devices()))
    if n < args.min_devices:
        print(f"vocab_parallel: skipped ({len(jax.devices())} {jax.devices()[0].platform} device(s); "
              f"needs {args.min_devices})")
        return
    print(f"{jax.devices()[0].platform} x{n} ({jax.devices()[0].device_kind}), jax {jax.__version__}; "
          f"B={batch} T={length} (N={batch * length}) D={args.dim} chunk={args.chunk}, float32; "
          "per device, MiB")
    print("| V | path | arguments | outputs | temporaries | args + temps | time (s) |")
    print("|---|---|---|---|---|---|---|")
    for vocab in args.vocab:
        for name, (fn, fargs) in paths(n, batch, length, args.dim, vocab, args.chunk).items():
            mem = compiled_memory(fn, *fargs)
            text = fn.lower(*fargs).compile().as_text()
            gathers = text.count("all-gather-start") + text.count(" all-gather(")
            t = "-" if args.no_time else f"{timed(fn, fargs, args.repeats):.3f}"
            a, o, tmp = (mem[k] / MIB for k in ("argument_size_in_bytes", "output_size_in_bytes",
                                                  "temp_size_in_bytes"))
            print(f"| {vocab:,} | {name}{' (all-gather)' if gathers else ''} | {a:.1f} | {o:.1f} "
                  f"| {tmp:.1f} | {a + tmp:.1f} | {t} |", flush=True)


if __name__ == "__main__":
    main()

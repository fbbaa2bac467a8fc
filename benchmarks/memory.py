"""Compiled temporary bytes of value_and_grad(token_logprobs_from_hidden), chunked vs unchunked.

Run: ``.venv/bin/python -m benchmarks.memory [B,T,D,V,chunk ...]`` (default 8,4096,1024,32768,256).
XLA's memory analysis (``credax.bench.harness.compiled_memory``) is exact and needs no run: only
lowering and compiling, so the issue's large shape costs seconds and no memory.
"""

import sys

import jax
import jax.numpy as jnp

import credax
from credax.bench.harness import compiled_memory


def temp_bytes(batch, seq, dim, vocab, chunk_size):
    spec = jax.ShapeDtypeStruct
    args = (spec((batch, seq, dim), jnp.float32), spec((dim, vocab), jnp.float32),
            spec((batch, seq), jnp.int32))

    def loss(hidden, unembedding, tokens):
        return jnp.sum(credax.token_logprobs_from_hidden(hidden, unembedding, tokens,
                                                         chunk_size=chunk_size))

    return compiled_memory(jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), *args)[
        "temp_size_in_bytes"]


def main(argv):
    shapes = [tuple(int(x) for x in a.split(",")) for a in argv] or [(8, 4096, 1024, 32768, 256)]
    for batch, seq, dim, vocab, chunk in shapes:
        logits = batch * seq * vocab * 4
        print(f"B={batch} T={seq} D={dim} V={vocab}: logits {logits:,} bytes")
        for cs in (None, chunk):
            t = temp_bytes(batch, seq, dim, vocab, cs)
            print(f"  chunk_size={cs}: temp {t:,} bytes = {100 * t / logits:.1f}% of the logits")


if __name__ == "__main__":
    main(sys.argv[1:])

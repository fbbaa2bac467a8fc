"""Why GRPO with JAX ids got slower under the thin entry (issue #36, item 2): where the id
hashing runs, measured.

    python -m benchmarks.dispatch_overlap                 # this tree; prints one JSON line
    PYTHONPATH=<other tree>/src python -m benchmarks.dispatch_overlap   # another tree's credax

Before the thin entry, ``grpo_advantages(rewards, jax_ids)`` converted the ids with
``credax.groups`` (one compiled program, the hashing) and then ran the estimator's program on the
``Groups``: two dispatches. Now the hashing runs inside the estimator's program: one dispatch.
On XLA's CPU client a dispatch returns before its program has run, and the program runs on
another thread; a warm call then costs one synchronisation (``block_until_ready``) plus whatever
of the programs' execution is not hidden behind Python's dispatch work. The rows, each the median
of ``--repeats`` repetitions of ``--calls`` calls, in µs per call (B = 64, 8 groups of 8):

* ``jitted_groups``: ``fn.jitted(rewards, g)`` with a ``Groups`` built once, blocked on each call;
* ``groups_alone``: ``credax.groups(jax_ids)``, blocked on each call;
* ``two_programs``: ``fn.jitted(rewards, credax.groups(jax_ids))``: the hashing's program, then the
  estimator's, blocked once at the end (the old entry's two dispatches);
* ``two_programs_blocked_between``: the same with a block after the hashing;
* ``entry_jax_ids``: ``fn(rewards, jax_ids)``, the public call;
* ``jitted_jax_ids``: ``fn.jitted(rewards, jax_ids)`` where the program takes raw ids (hashing
  inside; absent on a tree whose program takes only a ``Groups``);
* ``dispatch_only``: ``fn.jitted(rewards, g)`` never blocked on (the dispatch's Python side).

A benchmark, not a test: the figures depend on the machine and its load (printed with them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import credax

B = 64


def per_call_us(fn, calls: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean time of ``calls`` calls of ``fn``, in µs."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return round(statistics.median(times), 1)


def measure(calls: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    ids = jnp.asarray(np.repeat(np.arange(B // 8) * 1000 + 7, 8), jnp.int32)
    g = credax.groups(ids)
    rewards = jnp.asarray(rng.random(B), jnp.float32)
    f, ready = credax.grpo_advantages, jax.block_until_ready
    rows = {
        "jitted_groups": lambda: ready(f.jitted(rewards, g)),
        "groups_alone": lambda: ready(credax.groups(ids)),
        "two_programs": lambda: ready(f.jitted(rewards, credax.groups(ids))),
        "two_programs_blocked_between": lambda: ready(f.jitted(rewards, ready(credax.groups(ids)))),
        "entry_jax_ids": lambda: ready(f(rewards, ids)),
        "jitted_jax_ids": lambda: ready(f.jitted(rewards, ids)),
        "dispatch_only": lambda: f.jitted(rewards, g),
    }
    out = {"credax": os.path.dirname(credax.__file__), "loadavg": os.getloadavg(),
           "cpus": os.cpu_count(), "jax": jax.__version__}
    for name, fn in rows.items():
        try:
            out[name] = per_call_us(fn, calls, repeats)
        except (AttributeError, TypeError) as err:  # a tree whose program takes only a Groups
            out[name] = f"n/a ({type(err).__name__})"
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dispatch_overlap",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.calls, args.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

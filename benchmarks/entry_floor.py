"""How much of an entry's warm-call ratio any Python layer costs (issue #43, item 1).

    python -m benchmarks.entry_floor            # GRPO at B = 64: ratios to fn.jitted

``benchmarks/entry_overhead.py`` finds GRPO's public entry at 1.1-1.3x its ``fn.jitted`` while its
host step alone (``fn._host``) takes under 1 us of a ~25 us program. This script asks what a
Python layer that does *nothing* costs by the same measure: the median over ``--repeats``
alternated repetitions (100 warm calls each, ``jax.block_until_ready`` after each call) of the
per-repetition ratio to ``fn.jitted`` on the same arguments, for

* ``def``: ``def w(*a): return fn.jitted(*a)`` (one Python frame);
* ``class``: an object whose ``__call__`` calls a method that calls a method returning the
  arguments, then ``fn.jitted`` (three frames, a ``try``: the entry's shape, no work);
* ``entry``: the public entry itself;
* ``jitted``: ``fn.jitted`` against itself (the method's own spread);
* ``busy 0.7 us``, ``busy 2 us``: one frame that spins for that long before calling
  ``fn.jitted``: Python time alone, no work (0.7 us is the entry's host step with JAX ids).

A warm call is a dispatch, the program on XLA's CPU thread and a wait for it: the busy rows
measure what Python time alone, spent between two such calls, costs in this median on this
machine (the ratio a layer doing that much work cannot go below).

A benchmark, not a test: the numbers depend on the machine and its load (printed first).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import credax

B = 64


def _layers(jitted):
    def w(*a):
        return jitted(*a)

    class Layered:
        def __call__(self, *a):
            return self._run(a)

        def _run(self, a):
            try:
                return jitted(*self._host(a))
            except Exception:
                raise

        def _host(self, a):
            return tuple(a)

    return w, Layered()


def _timer(fn, args, calls):
    def run():
        start = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(fn(*args))
        return (time.perf_counter() - start) / calls
    return run


def _busy(jitted, us: float):
    """One frame that spends ``us`` microseconds of Python (a busy wait), then calls."""
    def f(*a):
        end = time.perf_counter() + us * 1e-6
        while time.perf_counter() < end:
            pass
        return jitted(*a)
    return f


def ratio(base, other, repeats: int) -> tuple[float, float, float]:
    """Median and quartiles of ``other / base`` per repetition, the order alternated."""
    base(), other()
    ratios = []
    for i in range(repeats):
        if i % 2:
            b, o = base(), other()
        else:
            o, b = other(), base()
        ratios.append(o / b)
    q1, med, q3 = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), q1, q3


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.entry_floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=201)
    p.add_argument("--calls", type=int, default=100)
    ns = p.parse_args(argv)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{os.cpu_count()} CPUs; JAX {jax.__version__}")
    rng = np.random.default_rng(0)
    rewards = jnp.asarray(rng.random(B), jnp.float32)
    ids = jnp.asarray(np.repeat(np.arange(B // 8) * 1000 + 7, 8), jnp.int32)
    fn = credax.grpo_advantages
    w, layered = _layers(fn.jitted)
    print("| ids | layer | median ratio to fn.jitted [middle half] |\n|---|---|---|")
    for form, group in (("JAX ids", ids), ("Groups", credax.groups(ids))):
        args = (rewards, group)
        base = _timer(fn.jitted, args, ns.calls)
        layers = (("jitted", fn.jitted), ("def", w), ("class", layered), ("entry", fn),
                  ("busy 0.7 us", _busy(fn.jitted, 0.7)), ("busy 2 us", _busy(fn.jitted, 2.0)))
        for label, f in layers:
            m, q1, q3 = ratio(base, _timer(f, args, ns.calls), ns.repeats)
            print(f"| {form} | {label} | {m:.3f} [{q1:.3f}-{q3:.3f}] |", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

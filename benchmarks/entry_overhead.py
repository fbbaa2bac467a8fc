"""The public entry's own cost on a warm call, against ``fn.jitted`` (issue #36, item 2).

    python -m benchmarks.entry_overhead            # B = 64, K = 8, T = 128; prints a table
    python -m benchmarks.entry_overhead --repeats 41 --calls 200 --json out.json
    python -m benchmarks.entry_overhead --profile mt_grpo_advantages   # its kernels, Groups vs ids

Each public credax function is an entry object whose ``jitted`` attribute is the compiled
program (``jax.jit`` of the body). The baseline of every row is ``fn.jitted`` called with a
precomputed :class:`credax.Groups` (``credax.groups(ids)`` done once, outside the timed loop), or
with the same arrays for a function without ids: the least a call can cost. Each grouped
function is called through its public entry with three id forms:

* ``numpy``: ``np.int64`` ids, as a data pipeline hands them over;
* ``jax``: ``int32`` JAX ids already on the device;
* ``groups``: the precomputed ``Groups`` itself.

Where ``fn.jitted`` itself takes JAX ids (it densifies them in the trace), ``jitted(jax)`` is timed
too, and the ``entry(jax)`` row also gives its ratio to it: the entry's own cost, without the
hashing that JAX ids add to the program.

Functions without ids (``policy_loss``, ``best_prior``) are called with JAX arrays only. A warm
call is ``jax.block_until_ready(f(*args))`` after compilation; the variants of one function are
timed in interleaved repetitions (each repetition runs every variant for ``--calls`` calls, in a
rotating order), and the entry / jitted ratio is taken per repetition, so a change of machine
load between repetitions affects both sides. The table gives the median ratio with the middle
half of the per-repetition ratios in brackets, the median time per call, and the Python function
calls one warm call makes (``sys.setprofile`` ``"call"`` events: Python frames entered, C
functions not counted). The host step alone (``fn._host``, no program) is timed per entry row
as the minimum of seven runs of 2,000 calls, and given beside the baseline's median: the part of
an entry's ratio the host step can explain. This is a benchmark, not a test: its numbers depend
on the machine and its load, which it prints first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import credax

B, K, T = 64, 8, 128


def _inputs():
    rng = np.random.default_rng(0)
    ids_np = np.repeat(np.arange(B // 8, dtype=np.int64) * 1000 + 7, 8)  # 8 rollouts per prompt
    ids_jax = jnp.asarray(ids_np, jnp.int32)
    ids_groups = credax.groups(ids_jax)
    f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    return dict(
        ids={"numpy": ids_np, "jax": ids_jax, "groups": ids_groups},
        rewards=f32(rng.random(B)),
        scores=f32(np.cumsum(rng.random((B, K)), axis=1) / K),
        turn_rewards=f32(rng.random((B, K))),
        turn_mask=jnp.asarray(np.arange(K)[None, :] < rng.integers(1, K + 1, B)[:, None]),
        logp=f32(-rng.random((B, T))),
        old_logp=f32(-rng.random((B, T))),
        token_mask=jnp.asarray(rng.random((B, T)) < 0.9),
    )


def _cases(x):
    """``(name, function, make(ids) -> (args, kwargs), id forms)`` for each function timed."""
    grouped = ("numpy", "jax", "groups")
    return [
        ("grpo_advantages", credax.grpo_advantages,
         lambda ids: ((x["rewards"], ids), {}), grouped),
        ("tcpo_advantages", credax.tcpo_advantages,
         lambda ids: ((x["scores"], x["turn_mask"], ids), {}), grouped),
        ("mt_grpo_advantages", credax.mt_grpo_advantages,
         lambda ids: ((x["turn_rewards"], x["rewards"], x["turn_mask"], ids), {}), grouped),
        ("policy_loss", credax.policy_loss,
         lambda ids: ((x["logp"], x["old_logp"], x["rewards"], x["token_mask"]), {}), ("arrays",)),
        ("best_prior", credax.best_prior,
         lambda ids: ((x["scores"], x["turn_mask"]), {}), ("arrays",)),
    ]


def _timer(fn, args, kwargs, calls):
    def run():
        start = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(fn(*args, **kwargs))
        return (time.perf_counter() - start) / calls
    return run


def host_step_us(fn, args, kwargs, calls: int = 2000, repeats: int = 7) -> float:
    """The entry's host step alone (``fn._host``: the argument normalisation and the value
    rules, no program), µs per call: the minimum over ``repeats`` runs of ``calls`` calls (a
    deterministic Python cost; the minimum is the run least disturbed by other work)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn._host(args, kwargs)
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def count_python_calls(fn, args, kwargs) -> int:
    """Python frames entered by one warm call (``sys.setprofile`` "call" events)."""
    n = 0

    def profile(frame, event, arg):
        nonlocal n
        if event == "call":
            n += 1

    jax.block_until_ready(fn(*args, **kwargs))
    sys.setprofile(profile)
    try:
        fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return n


def machine_state() -> dict:
    """Load average, CPUs and the processes using a CPU now (other work running or not)."""
    state = {"loadavg": os.getloadavg(), "cpus": os.cpu_count(), "platform": platform.platform(),
             "python": platform.python_version(), "jax": jax.__version__,
             "device": str(jax.devices()[0]),
             "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")}
    try:
        out = subprocess.run(["ps", "-eo", "pid,pcpu,comm", "--sort=-pcpu"], capture_output=True,
                             text=True, timeout=10).stdout.splitlines()[1:]
        busy = [line.split(None, 2) for line in out]
        state["busy"] = [f"{c} {p}%" for pid, p, c in busy
                         if float(p) >= 20 and int(pid) != os.getpid()]
    except Exception as e:  # pragma: no cover - no ps
        state["busy"] = [f"unknown ({e})"]
    return state


def _ratio(times, base):
    """The median of the per-repetition ratios and the quartiles around it."""
    ratios = [t / b for t, b in zip(times, base, strict=True)]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), q1, q3


def measure(repeats: int, calls: int) -> list[dict]:
    x = _inputs()
    rows = []
    for name, fn, make, forms in _cases(x):
        base_args, base_kwargs = make(x["ids"]["groups"])
        base = "jitted(Groups)" if "groups" in forms else "jitted"
        variants = {base: (fn.jitted, base_args, base_kwargs)}
        if "jax" in forms:  # what the entry hands its program for JAX ids, where it takes them
            args, kwargs = make(x["ids"]["jax"])
            try:
                jax.block_until_ready(fn.jitted(*args, **kwargs))
                variants["jitted(jax)"] = (fn.jitted, args, kwargs)
            except Exception:  # a program that takes only a Groups (ids converted before it)
                pass
        for form in forms:
            args, kwargs = make(x["ids"].get(form))
            variants[f"entry({form})"] = (fn, args, kwargs)
        timers = {}
        for label, (f, a, k) in variants.items():
            for _ in range(3):  # compile and warm
                jax.block_until_ready(f(*a, **k))
            timers[label] = _timer(f, a, k, calls)
        labels = list(timers)
        times = {label: [] for label in labels}
        for r in range(repeats):
            order = labels[r % len(labels):] + labels[:r % len(labels)]
            for label in order:
                times[label].append(timers[label]())
        for label in labels:
            f, a, k = variants[label]
            row = dict(function=name, variant=label, us=statistics.median(times[label]) * 1e6,
                       python_calls=count_python_calls(f, a, k))
            row["ratio"], row["ratio_q1"], row["ratio_q3"] = _ratio(times[label], times[base])
            if f is fn:  # an entry row: its host step alone, against the baseline's median
                row["host_us"] = host_step_us(f, a, k)
                row["host_share"] = row["host_us"] / (statistics.median(times[base]) * 1e6)
            if label == "entry(jax)" and "jitted(jax)" in times:
                row["same"], row["same_q1"], row["same_q3"] = _ratio(times[label],
                                                                     times["jitted(jax)"])
            rows.append(row)
    return rows


def profile(name: str) -> int:
    """Print the kernels of ``fn.jitted`` on a precomputed ``Groups`` and on JAX ids."""
    from credax.bench.profile import kernel_profile

    x = _inputs()
    (_, fn, make, forms), = [c for c in _cases(x) if c[0] == name]
    for form in ("groups", "jax") if "jax" in forms else ("arrays",):
        args, kwargs = make(x["ids"].get(form))
        rows = kernel_profile(lambda a=args, k=kwargs: fn.jitted(*a, **k), calls=50)
        print(f"{name}: fn.jitted with {form} ids: {len(rows)} kernel events, "
              f"{sum(r['us'] for r in rows):.1f} µs summed per call (nested events counted "
              "in their parent too)")
        for r in rows[:5]:
            print(f"  {r['name']}: {r['count']:g} per call, {r['us']:.1f} µs")
    return 0


def table(rows) -> str:
    lines = ["| function | call | µs / call | / jitted(Groups) or jitted [middle half] | "
             "/ jitted(same JAX ids) | host step µs (/ jitted) | Python calls |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        same = (f"{r['same']:.2f}× [{r['same_q1']:.2f}–{r['same_q3']:.2f}]" if "same" in r
                else "")
        host = f"{r['host_us']:.2f} ({r['host_share']:.3f})" if "host_us" in r else ""
        lines.append(f"| {r['function']} | {r['variant']} | {r['us']:.1f} | {r['ratio']:.2f}× "
                     f"[{r['ratio_q1']:.2f}–{r['ratio_q3']:.2f}] | {same} | {host} | "
                     f"{r['python_calls']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.entry_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--json", default=None, help="also write the rows and machine state here")
    parser.add_argument("--profile", default=None, metavar="FUNCTION",
                        help="instead: the kernels of FUNCTION's program from a Groups and from "
                             "JAX ids (credax.bench.profile.kernel_profile)")
    ns = parser.parse_args(argv)
    if ns.profile:
        return profile(ns.profile)
    before = machine_state()
    print(f"machine: {before['cpus']} CPUs, {before['platform']}, Python {before['python']}, "
          f"JAX {before['jax']}, device {before['device']}, "
          f"GLIBC_TUNABLES={before['glibc_tunables'] or '(unset)'}")
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*before["loadavg"]))
    print("other processes using >= 20% of a CPU at start: " + (", ".join(before["busy"]) or "none"))
    print(f"B={B}, K={K}, T={T}; {ns.repeats} interleaved repetitions of {ns.calls} calls each")
    started = time.time()
    rows = measure(ns.repeats, ns.calls)
    after = machine_state()
    print(table(rows))
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*after["loadavg"]))
    print("other processes using >= 20% of a CPU at end: " + (", ".join(after["busy"]) or "none"))
    print(f"wall time: {time.time() - started:.0f} s")
    if ns.json:
        with open(ns.json, "w") as fh:
            json.dump(dict(machine_start=before, machine_end=after, rows=rows, repeats=ns.repeats,
                           calls=ns.calls, B=B, K=K, T=T), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

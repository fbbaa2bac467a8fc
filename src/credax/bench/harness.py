"""The timing harness: agreement first, interleaved repetitions, paired ratios, compile events.

Method. Every implementation of a case is first checked against a float64 reference; one that
disagrees is not timed and the run fails. Then: two warm-up calls, a calibration call that sets how
many calls make one sample (at least ``min_sample_s`` of work, so the clock's resolution and the
per-sample overhead do not matter), and ``reps`` samples per implementation, interleaved —
repetition ``r`` runs every implementation once, in an order rotated by ``r`` — so drift on a shared
machine hits all of them alike. JAX results are ``block_until_ready``-ed after every call (CUDA torch
results are synchronised), so a sample is latency, not dispatch. Reported: median, quartiles, min and
max, and ratios of pairs computed per repetition (the two samples of a ratio were taken back to
back). Compile time comes from ``jax.monitoring`` events of a cold call after ``jax.clear_caches()``.

The roofline. :func:`copy_bandwidth` times a device copy (one read and one write of a large float32
array, through the same allocator as every output) in the same run; a case that moves ``n`` bytes
(inputs read once plus outputs written once: the least any implementation must move) in ``t``
seconds reaches ``n / t`` bytes/s, reported as a fraction of that copy bandwidth.
"""

from __future__ import annotations

import gc
import math
import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

now = time.perf_counter

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@dataclass
class Config:
    """How long and how often to time; the sizes of every case."""

    preset: str
    device: str
    reps: int
    min_sample_s: float
    impl_budget_s: float  # time one implementation may take in one case before it gets fewer reps
    skip_call_s: float  # a single call slower than this is not timed at all
    grpo_sizes: list[int]
    tcpo_sizes: list[tuple[int, int]]
    token_batch: int
    token_lengths: list[int]
    num_turns: int
    group_size: int = 8
    copy_mib: int = 64
    # sizes of the entry-point sweep: B, K, G, token batch, T, alternatives M, and the log-prob
    # shapes (batch, length, vocabulary, hidden width)
    sweep: dict[str, int] = field(default_factory=dict)
    # the LM-head case: (B, T, D, V, chunk_size) per run
    lm_head: list[tuple[int, int, int, int, int]] = field(default_factory=list)

    @property
    def quick(self) -> bool:
        return self.preset == "quick"


@dataclass
class Impl:
    """One implementation of a case: ``run()`` does the work and returns a synchronised result.

    ``bytes_in`` is what the implementation must read (its inputs, once); the bytes it writes are
    taken from the first result.
    """

    name: str
    run: Callable[[], Any]
    label: str
    to_numpy: Callable[[Any], np.ndarray]
    bytes_in: int | None = None


def as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch
        return x.detach().cpu().numpy()
    return np.asarray(x)


def nbytes(tree) -> int:
    """Bytes of every array leaf of a pytree (JAX, NumPy or torch)."""
    import jax

    total = 0
    for leaf in jax.tree_util.tree_leaves(tree):
        if hasattr(leaf, "nbytes"):
            total += int(leaf.nbytes)
        elif hasattr(leaf, "element_size"):  # torch
            total += int(leaf.element_size() * leaf.nelement())
    return total


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def stats(samples: list[float]) -> dict:
    a = np.asarray(samples)
    return {
        "median_s": float(np.median(a)),
        "q25_s": float(np.percentile(a, 25)),
        "q75_s": float(np.percentile(a, 75)),
        "min_s": float(a.min()),
        "max_s": float(a.max()),
        "samples_s": [float(v) for v in a],
    }


def time_calls(run: Callable[[], Any], cfg: Config, reps: int | None = None) -> dict:
    """Median-of-repetitions timing of one callable (warm-up, calibration, ``reps`` samples)."""
    run()
    t0 = now()
    run()
    one = max(now() - t0, 1e-7)
    inner = max(1, min(100_000, math.ceil(cfg.min_sample_s / one)))
    samples = []
    for _ in range(reps or cfg.reps):
        t0 = now()
        for _ in range(inner):
            run()
        samples.append((now() - t0) / inner)
    return {**stats(samples), "calls_per_sample": inner, "reps": len(samples)}


def device_memory():
    """``(bytes_in_use, peak_bytes_in_use)`` of the default device, ``None`` where the backend
    does not report them (the CPU backend)."""
    import jax

    try:
        ms = jax.devices()[0].memory_stats()
    except Exception:  # pragma: no cover - backend specific
        ms = None
    if not ms:
        return None
    return ms.get("bytes_in_use"), ms.get("peak_bytes_in_use")


class Runner:
    """Checks, times and records cases; collects notes and failures for the report."""

    def __init__(self, cfg: Config, copy_bw: float | None = None):
        self.cfg = cfg
        self.copy_bw = copy_bw  # bytes/s of the device copy measured in this run
        self.cases: list[dict] = []
        self.skipped: list[dict] = []
        self.failures: list[str] = []

    def skip(self, case: str, reason: str, params: dict | None = None) -> None:
        print(f"  SKIP {case} {params or ''}: {reason}")
        self.skipped.append({"case": case, "params": params or {}, "reason": reason})

    def run_case(
        self,
        case: str,
        params: dict,
        size: int,
        size_label: str,
        reference: np.ndarray,
        impls: list[Impl],
        ratios: list[tuple[str, str]],
        *,
        rtol: float = 1e-4,
        atol: float = 1e-4,
        notes: list[str] | None = None,
    ) -> dict:
        rec: dict[str, Any] = {
            "case": case, "params": params, "size": size, "size_label": size_label,
            "events": [], "agreement": {}, "results": {}, "ratios": {},
            "notes": list(notes or []), "labels": {i.name: i.label for i in impls},
        }
        print(f"\n[{case}] {params}")
        gc.collect()
        checked: list[Impl] = []
        moved: dict[str, int] = {}
        # 1. agreement with the float64 reference, before anything is timed
        for impl in impls:
            t0 = now()
            out = impl.run()
            first = now() - t0
            got = np.asarray(impl.to_numpy(out), dtype=np.float64)
            ok = got.shape == reference.shape and bool(
                np.allclose(got, reference, rtol=rtol, atol=atol)
            )
            err = float(np.max(np.abs(got - reference))) if got.shape == reference.shape else math.inf
            rec["events"].append(f"check:{impl.name}")
            rec["agreement"][impl.name] = {
                "ok": ok, "max_abs_err": err, "rtol": rtol, "atol": atol, "first_call_s": first,
            }
            if impl.bytes_in is not None:
                moved[impl.name] = impl.bytes_in + nbytes(out)
            if ok:
                checked.append(impl)
            else:
                msg = f"{case} {params}: {impl.name} disagrees with the reference (max |err| {err:.3g})"
                print("  FAIL " + msg)
                self.failures.append(msg)
        # 2. timing, interleaved
        rec["events"].append("time")
        results, timing_notes = self._time(checked)
        for name, r in results.items():
            if name in moved:
                r["bytes_moved"] = moved[name]
                r["gb_per_s"] = moved[name] / r["median_s"] / 1e9
                if self.copy_bw:
                    r["roofline_fraction"] = moved[name] / r["median_s"] / self.copy_bw
        rec["results"] = results
        rec["notes"] += timing_notes
        for num, den in ratios:
            if num in results and den in results:
                rec["ratios"][f"{num}/{den}"] = paired_ratio(results[num], results[den])
        print_case(rec)
        self.cases.append(rec)
        return rec

    def _time(self, impls: list[Impl]) -> tuple[dict, list[str]]:
        cfg = self.cfg
        plan = []
        notes = []
        for impl in impls:
            impl.run()  # warm-up (the agreement check was the first call)
            impl.run()
            t0 = now()
            impl.run()
            one = max(now() - t0, 1e-7)
            if one > cfg.skip_call_s:
                notes.append(f"{impl.name}: not timed, one call takes {one:.1f} s "
                             f"(> {cfg.skip_call_s:.0f} s)")
                continue
            inner = max(1, min(100_000, math.ceil(cfg.min_sample_s / one)))
            reps = cfg.reps
            if one * inner * reps > cfg.impl_budget_s:
                reps = max(3, int(cfg.impl_budget_s // (one * inner)))
                if reps < cfg.reps:
                    notes.append(f"{impl.name}: {reps} repetitions instead of {cfg.reps} "
                                 f"(one call takes {one:.2f} s)")
            plan.append((impl, inner, reps))
        samples: dict[str, list[float]] = {impl.name: [] for impl, _, _ in plan}
        for r in range(max((reps for _, _, reps in plan), default=0)):
            shift = r % max(len(plan), 1)
            order = plan[shift:] + plan[:shift]
            for impl, inner, reps in order:
                if r >= reps:
                    continue
                t0 = now()
                for _ in range(inner):
                    impl.run()
                samples[impl.name].append((now() - t0) / inner)
        results = {}
        for impl, inner, _ in plan:
            results[impl.name] = {**stats(samples[impl.name]), "calls_per_sample": inner,
                                  "reps": len(samples[impl.name])}
        return results, notes


def paired_ratio(a: dict, b: dict) -> dict:
    """The ratio ``a / b`` of two implementations' samples taken in the same repetitions.

    ``median`` is the ratio the reports and targets read; ``q25`` / ``q75`` (NumPy's linear
    percentiles of the per-repetition ratios) say how far one repetition's ratio moved from it:
    on a shared 2-CPU host a ratio of two calls of a few milliseconds moves by tens of percent
    between repetitions, and a target whose threshold lies between them is met in some runs and
    missed in others.

    Example:
      >>> r = paired_ratio({"samples_s": [2.0, 4.0, 6.0, 8.0], "median_s": 5.0},
      ...                  {"samples_s": [1.0, 1.0, 1.0, 1.0], "median_s": 1.0})
      >>> r["median"], r["q25"], r["q75"], r["min"], r["max"]
      (5.0, 3.5, 6.5, 2.0, 8.0)
    """
    n = min(len(a["samples_s"]), len(b["samples_s"]))
    paired = [x / y for x, y in zip(a["samples_s"][:n], b["samples_s"][:n], strict=True)]
    return {
        "median": float(np.median(paired)),
        "q25": float(np.percentile(paired, 25)),
        "q75": float(np.percentile(paired, 75)),
        "min": float(np.min(paired)),
        "max": float(np.max(paired)),
        "of_medians": a["median_s"] / b["median_s"],
        "pairs": n,
    }


def print_case(rec: dict) -> None:
    for name, r in rec["results"].items():
        roof = f"  {r['roofline_fraction']:.2f} of copy" if "roofline_fraction" in r else ""
        print(f"  {name:<26} {fmt_time(r['median_s']):>10}  "
              f"IQR {fmt_time(r['q25_s'])}–{fmt_time(r['q75_s'])}  "
              f"({r['reps']} reps × {r['calls_per_sample']} calls){roof}")
    for key, v in rec["ratios"].items():
        print(f"  ratio {key:<44} {v['median']:8.3f}  IQR {v['q25']:.3f}–{v['q75']:.3f}  "
              f"[{v['min']:.3f}, {v['max']:.3f}]")
    for note in rec["notes"]:
        print(f"  note: {note}")


# ------------------------------------------------------------------------------------------------
# the device copy: the roofline's denominator
# ------------------------------------------------------------------------------------------------


def copy_bandwidth(cfg: Config) -> dict:
    """Bytes/s of a device copy of a ``cfg.copy_mib`` MiB float32 array (one read + one write
    into a fresh output buffer, as every credax output is), timed like a case."""
    import jax
    import jax.numpy as jnp

    n = cfg.copy_mib * 2**20 // 4
    src = jax.device_put(jnp.arange(n, dtype=jnp.float32), jax.devices()[0])
    copy = jax.jit(lambda x: x + 1.0)  # one read, one write; `x + 1` is not elided as a copy could be

    def run():
        return jax.block_until_ready(copy(src))

    r = time_calls(run, cfg)
    moved = 2 * n * 4
    out = {"mib": cfg.copy_mib, "bytes_moved": moved, "median_s": r["median_s"],
           "bytes_per_s": moved / r["median_s"], "reps": r["reps"]}
    print(f"device copy: {cfg.copy_mib} MiB float32 in {fmt_time(r['median_s'])} -> "
          f"{out['bytes_per_s'] / 1e9:.2f} GB/s (read + write)")
    return out


# ------------------------------------------------------------------------------------------------
# compile time and recompilation
# ------------------------------------------------------------------------------------------------


def measure_compile(name: str, jitted, first, second, changed=None, changed_what: str = "",
                    cfg: Config | None = None) -> dict:
    """Cold first call (after ``jax.clear_caches()``), then same-shape calls: compile events.

    ``first``/``second`` call the function on fresh data of the same shapes; ``changed`` calls it
    with a different numeric hyperparameter (which is traced, so must not recompile). ``jitted``
    (the ``jax.jit`` object, or ``None`` for host functions) supplies the cache size.
    """
    import jax

    events: list[tuple[str, float, str]] = []

    def listener(event, duration, **kw):
        if event in (TRACE_EVENT, LOWER_EVENT, COMPILE_EVENT):
            events.append((event, float(duration), str(kw.get("fun_name", ""))))

    cache = (lambda: jitted._cache_size()) if jitted is not None else (lambda: None)
    jax.clear_caches()
    gc.collect()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        t0, c0 = now(), time.process_time()
        jax.block_until_ready(first())
        first_s, first_cpu_s = now() - t0, time.process_time() - c0
        cold = list(events)
        size_first = cache()
        events.clear()
        jax.block_until_ready(second())
        again = list(events)
        size_second = cache()
        events.clear()
        changed_events = None
        if changed is not None:
            jax.block_until_ready(changed())
            changed_events = list(events)
            events.clear()
        if cfg is not None:
            steady = time_calls(lambda: jax.block_until_ready(second()), cfg)
        else:
            samples = []
            for _ in range(7):
                t0 = now()
                jax.block_until_ready(second())
                samples.append(now() - t0)
            steady = stats(samples)
        after_steady = list(events)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)

    def total(evts, kind):
        return float(sum(d for e, d, _ in evts if e == kind))

    by_fun: dict[str, float] = {}
    for _, d, f in cold:
        by_fun[f] = by_fun.get(f, 0.0) + d
    compiles = lambda evts: sum(1 for e, _, _ in evts if e == COMPILE_EVENT)
    rec = {
        "fn": name,
        "first_call_s": first_s,
        # CPU seconds of the whole process during the cold call: the compile's work, which a
        # loaded machine does not inflate the way it inflates wall-clock time.
        "first_call_cpu_s": first_cpu_s,
        "trace_s": total(cold, TRACE_EVENT),
        "lower_s": total(cold, LOWER_EVENT),
        "backend_compile_s": total(cold, COMPILE_EVENT),
        "compile_total_s": total(cold, TRACE_EVENT) + total(cold, LOWER_EVENT)
        + total(cold, COMPILE_EVENT),
        "by_function_s": by_fun,
        "steady_median_s": steady["median_s"],
        "steady": {k: v for k, v in steady.items() if k != "samples_s"},
        "cache_size_after_first": size_first,
        "cache_size_after_second": size_second,
        "compiles_on_second_call": compiles(again),
        "compiles_on_changed_hyperparameter": None if changed_events is None
        else compiles(changed_events),
        "changed_hyperparameter": changed_what,
        "compiles_in_steady_calls": compiles(after_steady),
    }
    rec["recompiled"] = bool(
        rec["compiles_on_second_call"] or (rec["compiles_on_changed_hyperparameter"] or 0)
        or rec["compiles_in_steady_calls"] or size_second != size_first
    )
    print(f"  {name:<34} compile {fmt_time(rec['compile_total_s']):>9} "
          f"(XLA {fmt_time(rec['backend_compile_s'])}); first call {fmt_time(first_s)} "
          f"(CPU {fmt_time(first_cpu_s)}); steady {fmt_time(rec['steady_median_s'])}; "
          f"recompiled: {rec['recompiled']}")
    return rec


# A new process's first call of tcpo_advantages, run twice against one persistent cache
# directory: the first process compiles and writes the cache, the second loads it. The data are
# the sweep's (same builders, same keyword arguments), so the cold figure is comparable with the
# sweep's compile time.
_CACHE_PROBE = """
import json, sys, time
import numpy as np
import jax
import credax
from credax.bench.cases import make_ids, make_turns
batch, turns, group_size = (int(a) for a in sys.argv[1:4])
rng = np.random.default_rng(2026)
s, m = make_turns(rng, batch, turns)
ids = make_ids(rng, batch, group_size)
s, m, ids = (jax.device_put(a) for a in (s, m, ids))
jax.block_until_ready((s, m, ids))
t0, c0 = time.perf_counter(), time.process_time()
g = credax.groups(ids)
jax.block_until_ready(credax.tcpo_advantages(s, m, g, gamma=0.9, hindsight_weight=1.0))
print(json.dumps({"first_call_s": time.perf_counter() - t0,
                  "first_call_cpu_s": time.process_time() - c0}))
"""


def persistent_cache_first_call(batch: int, turns: int, group_size: int) -> dict:
    """``groups`` + ``tcpo_advantages`` as the first call of a fresh Python process, with JAX's
    persistent compilation cache (``jax_compilation_cache_dir``) empty, then warm.

    What a user pays at the start of every training run once the cache directory persists: the
    trace and lowering still run, XLA's compile is replaced by loading the compiled program. Two
    subprocesses of this interpreter (same ``JAX_PLATFORMS``, ``XLA_FLAGS`` and CPU affinity),
    one temporary cache directory, removed afterwards."""
    import json
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="credax-jax-cache-") as cache:
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache,
               # cache every program, however small or quick to compile
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
               "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
        runs = []
        for _ in range(2):
            done = subprocess.run(
                [sys.executable, "-c", _CACHE_PROBE, str(batch), str(turns), str(group_size)],
                env=env, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"persistent-cache probe failed:\n{done.stderr[-2000:]}")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        entries = len(os.listdir(cache))
    rec = {"batch": batch, "turns": turns, "group_size": group_size,
           "cold_first_call_s": runs[0]["first_call_s"],
           "cold_first_call_cpu_s": runs[0]["first_call_cpu_s"],
           "warm_first_call_s": runs[1]["first_call_s"],
           "warm_first_call_cpu_s": runs[1]["first_call_cpu_s"],
           "cache_entries": entries}
    print(f"  tcpo_advantages, new process: first call {fmt_time(rec['cold_first_call_s'])} with "
          f"an empty persistent cache, {fmt_time(rec['warm_first_call_s'])} with it warm "
          f"({entries} cache entries)")
    return rec


def compiled_memory(jitted, *args, **kwargs) -> dict | None:
    """XLA's own accounting of one compiled program: bytes accessed (cost analysis) and the
    argument / output / temporary buffer sizes in bytes (memory analysis; ``temp_size_in_bytes``
    is the scratch of the whole program, arguments and outputs excluded). ``None`` where the
    backend reports neither.

    The one place credax measures compiled memory: the benchmark's cases and sweep, the memory
    tests and ``benchmarks/memory.py`` call it. ``jitted`` is anything with ``.lower`` (a
    ``jax.jit`` function, a public credax function); ``args`` may be ``jax.ShapeDtypeStruct``
    (lowering and compiling need no data, so a large shape costs seconds and no memory).
    """
    compiled = jitted.lower(*args, **kwargs).compile()
    out: dict[str, Any] = {}
    try:
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list | tuple) else cost
        out["xla_bytes_accessed"] = float(cost.get("bytes accessed", float("nan")))
        out["xla_flops"] = float(cost.get("flops", float("nan")))
    except Exception:  # pragma: no cover - backend specific
        pass
    try:
        mem = compiled.memory_analysis()
        for key in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes"):
            out[key] = int(getattr(mem, key))
    except Exception:  # pragma: no cover - backend specific
        pass
    return out or None


def _proc_status_kib(*keys: str) -> dict[str, int] | None:
    try:
        with open("/proc/self/status") as f:
            found = {k: int(line.split()[1]) for line in f for k in keys if line.startswith(k + ":")}
    except OSError:
        return None
    return found if len(found) == len(keys) else None


def call_peak_bytes(run: Callable[[], Any]) -> dict:
    """Peak memory one call of ``run`` adds to the process, as the operating system or the device
    counts it: ``{"bytes": int | None, "how": str}``.

    On Linux the process's resident-set high-water mark is reset (``/proc/self/clear_refs``, value
    5), ``run()`` is called once, and the peak is the high-water mark minus the resident set just
    before the call (its inputs, already resident, are not counted; memory the allocator kept
    from earlier calls and reuses is not counted either). On a device that reports
    ``memory_stats`` the peak is ``peak_bytes_in_use`` after the call minus ``bytes_in_use``
    before it, which is exact only while no earlier call of the process peaked higher.
    """
    import jax

    if jax.devices()[0].platform == "cpu":
        before = _proc_status_kib("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            before = None
        if before is not None:
            run()
            after = _proc_status_kib("VmHWM")
            if after is not None:
                return {"bytes": max(0, after["VmHWM"] - before["VmRSS"]) * 1024,
                        "how": "resident-set high-water mark during the call minus the resident set "
                               "before it (/proc/self/clear_refs)"}
        return {"bytes": None, "how": "not measurable here (no /proc/self/clear_refs)"}
    mem = device_memory()
    if mem is None:
        return {"bytes": None, "how": "the device reports no memory_stats"}
    run()
    after = device_memory()
    return {"bytes": max(0, after[1] - mem[0]),
            "how": "device peak_bytes_in_use after the call minus bytes_in_use before (exact only "
                   "while no earlier call peaked higher)"}


# ------------------------------------------------------------------------------------------------
# the machine
# ------------------------------------------------------------------------------------------------


def machine_info(torch=None, torch_device: str | None = None) -> dict:
    import jax
    import jaxlib

    import credax

    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        cpu = platform.processor()
    dev = jax.devices()[0]
    info = {
        "nproc": os.cpu_count(),
        "sched_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "credax": getattr(credax, "__version__", "?"),
        "torch": torch.__version__ if torch is not None else None,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "backend": jax.default_backend(),
        "device_kind": getattr(dev, "device_kind", str(dev)),
        "jax_devices": [str(d) for d in jax.devices()],
        "torch_device": torch_device if torch is not None else None,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "memory_stats": device_memory() is not None,
    }
    try:
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=Path(__file__).resolve().parent, timeout=5,
        ).stdout.strip() or None
    except Exception:
        info["git_commit"] = None
    return info

"""``python -m credax.bench``: time credax on whatever device JAX sees (CPU, GPU or TPU).

    python -m credax.bench                          # default preset -> ./credax-bench/speed-<backend>.*
    python -m credax.bench --preset quick           # toy sizes, about a minute on a CPU
    python -m credax.bench --batch 16384 --turns 32 # your sizes instead of the preset's
    python -m credax.bench --preset gpu --require gpu   # what `make bench-gpu` runs

Every implementation is checked against a float64 reference before it is timed (a disagreement
fails the run). Reported: steady time (median of interleaved repetitions, ``block_until_ready``),
compile time, recompiles on a second call and on a changed hyperparameter, bytes moved, GB/s as a
fraction of a device copy measured in the same run (the roofline), XLA's compiled memory, the
device's peak memory where the backend reports it (``memory_stats``: GPU, TPU), and ratios against
the torch peers when torch is installed (``pip install '/path/to/credax[bench]'``, which also brings
matplotlib for the plot). Ratios are from one run on one machine; absolute times on a shared machine
are not comparable across runs.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

from .cases import CASES, PRESETS

# How to get a JAX that runs on each --platform (the message of a platform JAX cannot start).
PLATFORM_INSTALL = {
    "cpu": "pip install -U jax",
    "gpu": "pip install -U 'jax[cuda12]' (NVIDIA) or the ROCm wheels (AMD)",
    "cuda": "pip install -U 'jax[cuda12]'",
    "rocm": "the ROCm wheels: https://docs.jax.dev/en/latest/installation.html#amd-gpu-linux",
    "tpu": "pip install -U 'jax[tpu]'",
}


def _missing_platform(platform, exc) -> str:
    """Which platform JAX could not start, what it said, and how to install JAX for it."""
    said = str(exc).strip() or type(exc).__name__
    if platform is None:
        return f"JAX could not start its default backend ({said})."
    return (f"--platform {platform}: JAX could not start the {platform!r} backend on this machine "
            f"(no such device, or this jax has no {platform} plugin; JAX said: {said}). Install "
            f"JAX for it ({PLATFORM_INSTALL[platform]}) or drop --platform to use what JAX finds "
            "(`python -c 'import jax; print(jax.devices())'`).")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {value}")
    return value


def parse_args(argv, prog: str = "python -m credax.bench", default_out: Path | None = None,
               presets: dict | None = None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    extra = "".join(f", {name} ({what})" for name, (_, _, what) in (presets or {}).items())
    p.add_argument("--preset", choices=(*PRESETS, *(presets or {})), default="default",
                   help="sizes and timing budget: quick (toy, CI), default (CPU sizes), gpu "
                        f"(accelerator sizes, the whole run under 5 minutes on one GPU){extra}")
    p.add_argument("--quick", action="store_true", help="same as --preset quick")
    p.add_argument("--batch", type=_positive_int, default=None, help="B of the GRPO / TCPO cases and sweep")
    p.add_argument("--turns", type=_positive_int, default=None, help="K, turns per trajectory")
    p.add_argument("--tokens", type=_positive_int, default=None, help="T, tokens per trajectory")
    p.add_argument("--token-batch", type=_positive_int, default=None, help="B of the token cases")
    p.add_argument("--group-size", type=_positive_int, default=None, help="rollouts per prompt (default 8)")
    p.add_argument("--platform", choices=("cpu", "gpu", "cuda", "rocm", "tpu"), default=None,
                   help="set JAX_PLATFORMS before JAX starts (default: JAX's own choice)")
    p.add_argument("--device", choices=("cpu", "gpu"), default=None,
                   help="the earlier spelling of --platform (benchmarks.speed --device gpu)")
    p.add_argument("--require", choices=("cpu", "gpu", "tpu"), default=None,
                   help="fail unless JAX's default backend is this one")
    p.add_argument("--out", type=Path, default=default_out,
                   help="output directory (default: ./credax-bench, a temporary one with --quick)")
    p.add_argument("--reps", type=int, default=None, help="repetitions per implementation (>= 7)")
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="restrict the process to this many CPUs (affinity) and torch to this many "
                        "threads (default: each library's own). On a shared machine use 1: an "
                        "oversubscribed torch thread pool can make a parallel op 100x slower")
    p.add_argument("--only", default="", help=f"comma-separated cases: {','.join(CASES)}")
    p.add_argument("--entries", default="",
                   help="sweep only the entry points whose name contains one of these "
                        "comma-separated words (default: all)")
    p.add_argument("--no-torch", action="store_true", help="do not import or time the torch peers")
    p.add_argument("--profile", action="store_true",
                   help="with the sweep: each entry point's time per kernel (jax.profiler)")
    args = p.parse_args(argv)
    if args.quick:
        args.preset = "quick"
    if args.device is not None and args.platform is None:
        args.platform = args.device
    # `compile` was the earlier name of the sweep (compile time and recompilation per entry point)
    args.only = ",".join("sweep" if s.strip() == "compile" else s for s in args.only.split(","))
    if args.reps is not None and args.reps < 7:
        p.error("--reps must be at least 7")
    if args.threads is not None and hasattr(os, "sched_getaffinity"):
        available = len(os.sched_getaffinity(0))
        if args.threads > available:
            p.error(f"--threads {args.threads}: this process may run on {available} CPU(s)")
    group = args.group_size or 8
    for flag, value in (("--batch", args.batch),):
        if value is not None and value % group:
            p.error(f"{flag} {value} must be a multiple of the group size {group} "
                    "(--group-size, default 8)")
    unknown = {s.strip() for s in args.only.split(",") if s.strip()} - set(CASES)
    if unknown:
        p.error(f"--only: unknown cases {sorted(unknown)}; choose from {','.join(CASES)}")
    return args


def _backends_started() -> bool:
    """Whether this process's JAX has already created its backends (then platform, XLA flags and
    thread pools are fixed). ``import jax`` alone does not create them: ``import credax`` (and so
    ``python -m credax.bench``) imports jax, and the settings below still take effect."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # pragma: no cover - a jax without this private helper
        return True


def _before_jax(args) -> str | None:
    """Set what must be set before JAX creates its backends: ``--platform`` and ``--threads``.

    Returns an error message when a requested setting can no longer take effect: JAX's backends
    were already created in this process (``credax.bench.main`` called after JAX ran something),
    on another platform or with more CPUs than ``--threads``. Nothing is changed silently."""
    if _backends_started():
        import jax

        wrong = []
        if args.platform is not None:
            want = "gpu" if args.platform in ("cuda", "rocm") else args.platform
            if jax.default_backend() != want:
                wrong.append(f"--platform {args.platform} (JAX already runs on "
                             f"{jax.default_backend()!r})")
        if args.threads is not None and hasattr(os, "sched_getaffinity"):
            allowed = len(os.sched_getaffinity(0))
            if allowed != args.threads:
                wrong.append(f"--threads {args.threads} (XLA's thread pools were sized for "
                             f"{allowed} CPUs)")
        if wrong:
            return ("JAX's backends were already started in this process, so "
                    + " and ".join(wrong) + " cannot take effect. Run `python -m credax.bench` "
                    "in a fresh process, or set JAX_PLATFORMS / the CPU affinity before JAX starts.")
        return None
    if args.platform is not None:
        os.environ["JAX_PLATFORMS"] = args.platform
        if "jax" in sys.modules:  # jax read JAX_PLATFORMS when it was imported: set its config
            sys.modules["jax"].config.update("jax_platforms", args.platform)
    if args.threads is not None:
        # XLA sizes its CPU thread pools from the affinity mask; torch is set after import.
        if hasattr(os, "sched_setaffinity"):
            allowed = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, allowed[: args.threads])
        if args.threads == 1:
            flags = "--xla_cpu_multi_thread_eigen=false"
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()
    return None


def main(argv=None, *, prog: str = "python -m credax.bench", default_out: Path | None = None,
         presets: dict | None = None, targets=None) -> int:
    """Run the benchmark; ``presets`` and ``targets`` are for a caller's own goals.

    ``presets``: ``{name: (shipped preset, {Config field: value}, help text)}``, presets of one's
    own on top of the shipped ones. ``targets``: ``targets(cases, sweep) -> list[dict]``, goals
    read from the run's records (``target``, ``measured``, ``op``, ``threshold``, ``met``, ...),
    written to the JSON and as the report's Targets table. ``benchmarks/speed.py`` passes the
    project's own (``benchmarks/targets.py``).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv, prog, default_out, presets)
    error = _before_jax(args)
    if error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 2

    import jax

    from . import cases, report
    from .harness import Runner, copy_bandwidth, machine_info, now

    try:
        backend = jax.default_backend()
    except (RuntimeError, AssertionError) as exc:
        # e.g. --platform cuda on a machine whose JAX has no GPU plugin: JAX raises a RuntimeError
        # or, when JAX_PLATFORMS names only platforms it cannot start, a bare AssertionError.
        print(f"ERROR: {_missing_platform(args.platform, exc)}", file=sys.stderr)
        return 2
    if args.require is not None and backend != args.require:
        print(f"ERROR: --require {args.require}, but JAX's default backend is {backend!r} "
              f"(devices: {jax.devices()}). Install the matching jax (e.g. 'jax[cuda12]').")
        return 2
    base, fields = args.preset, None
    if args.preset in (presets or {}):
        base, fields, _ = presets[args.preset]
        fields = {**fields, "preset": args.preset}
    cfg = cases.make_config(base, backend, args.reps, fields=fields, batch=args.batch,
                            turns=args.turns, tokens=args.tokens, token_batch=args.token_batch,
                            group_size=args.group_size)
    out_dir = args.out or (Path(tempfile.gettempdir()) / "credax-bench-quick" if cfg.quick
                           else Path("credax-bench"))
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    want = lambda name: not only or name in only

    env = cases.Env(cfg, use_torch=not args.no_torch)
    # The run calls gc.collect() before every timed case and every cold compile (a collection
    # inside a timing would be timed). jax, torch and matplotlib leave ~280,000 long-lived objects
    # that each full collection walks: 0.12 s a collection, 21 of the quick preset's 61 s of CPU.
    # Frozen here (gc.freeze: moved to a generation no collection walks; they are still freed by
    # reference counting), each collection walks only what the run itself allocates; unfrozen
    # when the measurements end.
    gc.collect()
    gc.freeze()
    try:
        if args.threads is not None and env.torch is not None:
            env.torch.set_num_threads(args.threads)
        started = now()
        meta = {
            "command": f"{prog} {' '.join(argv)}".rstrip(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "preset": cfg.preset,
            "device": backend,
            "reps": cfg.reps,
            "min_sample_s": cfg.min_sample_s,
            "threads": args.threads,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "env": {k: os.environ[k] for k in ("GLIBC_TUNABLES", "JAX_PLATFORMS", "XLA_FLAGS",
                                               "OMP_NUM_THREADS") if k in os.environ},
            "huge_pages": "hugetlb" in os.environ.get("GLIBC_TUNABLES", ""),
            "machine": machine_info(env.peers.torch, env.torch_device),
            "sweep_sizes": dict(cfg.sweep),
            "torch_note": env.torch_note,
        }
        print(f"credax speed benchmark — {meta['command']}")
        m = meta["machine"]
        print(f"machine: {m['nproc']} CPUs, {m['cpu_model']}, jax {m['jax']} on {m['device_kind']} "
              f"{m['jax_devices']}, torch {m['torch']}")

        bw = copy_bandwidth(cfg)
        runner = Runner(cfg, copy_bw=bw["bytes_per_s"])
        if want("grpo"):
            for b in cfg.grpo_sizes:
                cases.case_grpo(env, runner, b)
        if want("tcpo"):
            for b, k in cfg.tcpo_sizes:
                cases.case_tcpo(env, runner, b, k)
        if want("triage"):
            for t in cfg.token_lengths:
                cases.case_triage_broadcast(env, runner, t)
        if want("loss"):
            for t in cfg.token_lengths:
                cases.case_policy_loss(env, runner, t)
        if want("lm_head"):
            for shape in cfg.lm_head:
                cases.case_lm_head(env, runner, *shape)
        sweep = (cases.run_sweep(env, cfg, bw["bytes_per_s"], args.entries, profile=args.profile)
                 if want("sweep") else [])
    finally:
        gc.unfreeze()  # a caller of main() in its own process gets its heap back as it was

    data = {
        "meta": {**meta, "wall_s": now() - started},
        "copy_bandwidth": bw,
        "cases": runner.cases,
        "sweep": sweep,
        "compile": sweep,  # the earlier key of the same records (notebooks read it)
        "not_timed": cases.NOT_TIMED,
        "targets": [] if targets is None else targets(runner.cases, sweep),
        "skipped": runner.skipped,
        "failures": runner.failures,
    }
    paths = report.write(data, out_dir, f"speed-{backend}")
    print("\n" + paths["md"].read_text())
    print(f"wrote {', '.join(str(p) for p in paths.values())} ({data['meta']['wall_s']:.1f} s)")
    if runner.failures:
        print("FAILED agreement checks:\n  " + "\n  ".join(runner.failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

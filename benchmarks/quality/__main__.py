"""Train the toy agent with every credit method and compare them: ``python -m benchmarks.quality``.

    python -m benchmarks.quality            # the demo: every method, 5 seeds, a few minutes on CPU
    python -m benchmarks.quality --full     # 10 seeds, longer training (the README's table)
    python -m benchmarks.quality --tiny     # seconds: a smoke run (CI)

Writes ``demo-results/quality.json`` (``seeds``, ``config``, ``methods``: per method and metric the
mean, the 95% interval and the per-seed values; ``curves``; timings) and ``demo-results/quality.png``
(held-out success against training step), and prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import platform
import sys
import time

import jax
import numpy as np

from . import env as E
from . import report
from .methods import METHODS
from .train import Config, get_runner

PRESETS = {
    # The demo: every method, 5 seeds. Fixed before any method was compared (see docs).
    "default": dict(config=Config(), seeds=5),
    "full": dict(config=Config(steps=500), seeds=10),
    # CI size: a 2-symbol code over 6 letters in 6 turns, a 64-wide model; GRPO learns it in ~80
    # steps. tests/test_quality_tiny.py uses this configuration.
    "tiny": dict(
        config=Config(task=E.Task(length=2, alphabet=6, turns=6), hidden=64, steps=80,
                      eval_every=20, eval_repeats=32),
        seeds=3,
    ),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.split("\n")[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="10 seeds, 500 steps (the README table)")
    size.add_argument("--tiny", action="store_true", help="a seconds-long smoke run (CI)")
    p.add_argument("--methods", default=None, help="comma-separated subset of: " + ",".join(METHODS))
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (0..n-1)")
    p.add_argument("--steps", type=int, default=None, help="training steps per run")
    p.add_argument("--out", default="demo-results", help="output folder (default: demo-results)")
    args = p.parse_args(argv)

    preset = "full" if args.full else "tiny" if args.tiny else "default"
    cfg: Config = PRESETS[preset]["config"]
    if args.steps is not None:
        cfg = dataclasses.replace(cfg, steps=args.steps)
    seeds = list(range(args.seeds if args.seeds is not None else PRESETS[preset]["seeds"]))
    names = list(METHODS) if args.methods is None else [m.strip() for m in args.methods.split(",")]
    unknown = [m for m in names if m not in METHODS]
    if unknown:
        p.error(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    methods = tuple(METHODS[m] for m in names)
    out = pathlib.Path(args.out)

    t = cfg.task
    print(
        f"credax credit-quality benchmark ({preset}): hidden code of L={t.length} symbols over "
        f"V={t.alphabet}, K={t.turns} turns, G={cfg.group} rollouts x {cfg.prompts} prompts per "
        f"step, {cfg.steps} steps, seeds {seeds}, {len(methods)} methods on "
        f"{jax.devices()[0].platform.upper()} ({os.cpu_count()} cores)",
        flush=True,
    )
    wall0, cpu0 = time.perf_counter(), time.process_time()
    runner = get_runner(cfg, methods)
    interactive = sys.stdout.isatty()

    def log(method, c, chunks, m, info):
        if interactive:
            print(
                f"\r  {method.label:<30} step {c * cfg.eval_every:>4}/{cfg.steps}  held-out success "
                f"{np.mean(m.success):.2f}  train score {np.mean(info['train_score']):.2f}   ",
                end="", flush=True,
            )

    results, curves, seconds, roles = {}, {}, {}, {}
    for i, method in enumerate(methods):
        t0 = time.perf_counter()
        if not interactive:
            print(f"  [{i + 1}/{len(methods)}] {method.label} ...", end="", flush=True)
        final, curve, infos = runner.run(method.name, seeds, log, steps=cfg.steps)
        seconds[method.name] = time.perf_counter() - t0
        results[method.name] = {key: report.summarize(getattr(final, key)) for key, _, _ in report.METRICS}
        roles[method.name] = {
            when: {
                role: report.summarize(infos[at]["role_adv"][:, r])
                for r, role in enumerate(["decisive", "exploration", "no_progress", "regression"])
            }
            for when, at in [("first_chunk", 0), ("last_chunk", -1)]
        }
        curves[method.name] = {
            "steps": [s for s, _ in curve],
            "success": [np.asarray(m.success).tolist() for _, m in curve],
            "final_score": [np.asarray(m.final_score).tolist() for _, m in curve],
        }
        msg = (f"success {report.fmt(results[method.name]['success'], '{:.2f}')}, "
               f"{seconds[method.name]:.0f}s")
        print(("\r  " + f"{method.label:<30} " if interactive else " ") + msg + " " * 20, flush=True)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0

    labels = {m.name: m.label for m in methods}
    print()
    print(f"Held-out targets, mean ± 95% interval over {len(seeds)} seeds (Student t):")
    print(report.table(results, labels))
    print(f"\nMean advantage by oracle role over the first {cfg.eval_every} training steps "
          f"(decisive / exploration / no-progress / regression):")
    print(report.role_table(roles, labels, "first_chunk"))
    print(f"\nwall time {wall:.0f} s (process CPU time {cpu:.0f} s; the first method's time "
          f"includes compiling the shared program)")

    record = {
        "seeds": seeds,
        "config": {**dataclasses.asdict(cfg), "preset": preset},
        "methods": {name: {"label": labels[name], **res} for name, res in results.items()},
        "credit_by_role": roles,
        "curves": curves,
        "timing": {"wall_s": wall, "cpu_s": cpu, "per_method_wall_s": seconds},
        "environment": {
            "jax": jax.__version__,
            "platform": jax.devices()[0].platform,
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
        },
        "command": "python -m benchmarks.quality " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    report.write_json(out / "quality.json", record)
    report.plot(out / "quality.png", curves, labels,
                report.title(t.length, t.alphabet, t.turns, len(seeds)))
    print(f"wrote {out / 'quality.json'} and {out / 'quality.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The credit lab: train every credit method on two tasks and measure its credit against the truth.

    python -m benchmarks.lab            # make demo: both tasks, every method + 2 controls;
                                        # the headline methods 20 seeds, the rest 5
    python -m benchmarks.lab --full     # 10 seeds, longer training
    python -m benchmarks.lab --tiny     # a first answer in about a minute: no training
    python -m benchmarks.lab --preset smoke   # the smallest training run (tests/test_lab_tiny.py)
    python -m benchmarks.lab --preset oracle   # the true-advantage ceiling at N = 1, 4, 16
    python -m benchmarks.lab --credit mymodule:my_credit --tasks refine   # score your method

Writes ``<out>/lab.json`` (per task: config, held-out metrics per method with bootstrap
intervals over seeds, learning curves, and at each checkpoint the ground-truth quality, every
method's credit metrics against A*, the role cells and TRIAGE's covariance), ``<out>/lab-<task>.png``
(learning curves) and ``<out>/lab-credit.png`` (credit against the ground truth), and prints the
tables. The two tasks train in two threads (JAX releases the GIL while a compiled program runs,
so on two cores the tasks share the machine instead of waiting for each other).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import pickle
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from . import checkpoint, report, tables
from . import env as E
from . import metrics as X
from . import refine as R
from .methods import BASELINES, DIAGNOSTICS, METHODS, VARIANTS
from .train import Config, get_runner

_SMALL = dict(hidden=64, prompts=8, group=8, eval_every=20, eval_repeats=4)

# The headline methods: the ones the guide's verdicts are about, trained on 20 seeds in the demo
# (the rest on 5). GRPO is the reference every paired difference is taken against; MT-GRPO,
# TRIAGE (oracle judge), TCPO + hindsight and the value baseline are the four orderings the
# previous round found robust at 20 seeds (TCPO + hindsight > GRPO and > the value baseline and
# MT-GRPO > GRPO on refine, TRIAGE > GRPO on probe; the value baseline is also the best unbiased
# method); the turn-count-unbiased baseline is the open puzzle (it learns less than GRPO on
# refine: 0.034 against 0.080 over 20 seeds, a difference 5 seeds cannot resolve).
HEADLINE = ("grpo", "mt_grpo", "value", "triage", "tcpo_hindsight", "turn_baseline")

PRESETS = {
    # The demo. Sizes were fixed from the time budget before any method was compared. The lab
    # measures at the initial policy and after training (a middle checkpoint at step 60 was
    # dropped when the bias controls and the per-turn gradient statistics came in: budget).
    "default": dict(
        configs={
            "probe": Config(task=E.Task(length=3, alphabet=5, turns=8), steps=120,
                            checkpoints=(0, 120), lab_seeds=5, lab_methods=HEADLINE, **_SMALL),
            "refine": Config(task=R.RefineTask(length=4, alphabet=5, turns=8), steps=120,
                             checkpoints=(0, 120), lab_seeds=5, lab_methods=HEADLINE, **_SMALL),
        },
        # Seeds 0..19 for the headline methods, 0..4 for the rest (the same seeds 0..4: every
        # paired difference is over the seeds both methods have). The step-0 lab covers every
        # seed (one lab per seed serves all methods); the step-120 lab the first 5 of each.
        seeds=20, headline=HEADLINE, rest_seeds=5,
    ),
    "full": dict(
        configs={
            "probe": Config(task=E.Task(length=4, alphabet=6, turns=10), steps=400,
                            checkpoints=(0, 100, 400), lab_branches=64, **_SMALL),
            "refine": Config(task=R.RefineTask(length=4, alphabet=6, turns=10), steps=400,
                             checkpoints=(0, 100, 400), lab_branches=64, **_SMALL),
        },
        seeds=10,
    ),
    # Smoke size: four methods, the lab at steps 0 and 20 (the others with --methods;
    # tests/test_lab_tiny.py runs every one). Compilation is most of its cost.
    "smoke": dict(
        methods=("grpo", "triage", "true_adv", "shuffled"),
        configs={
            "probe": Config(task=E.Task(length=2, alphabet=4, turns=5), hidden=32, prompts=4,
                            group=4, steps=20, eval_every=10, eval_repeats=4,
                            checkpoints=(0, 20), lab_pairs=32, lab_branches=8),
            "refine": Config(task=R.RefineTask(length=2, alphabet=4, turns=5), hidden=32,
                             prompts=4, group=4, steps=20, eval_every=10, eval_repeats=4,
                             checkpoints=(0, 20), lab_pairs=32, lab_branches=8),
        },
        seeds=3,
    ),
}
# The ceiling: the true-advantage control at N = 1, 4 and 16 branch pairs per turn against every
# unbiased (outcome-only) method, at the default sizes. Not in `make demo`: the N = 16 control's
# branch rollouts alone cost about as much CPU as a third of the demo (measured in the guide).
ORACLE_METHODS = ("grpo", "dr_grpo", "rloo", "shrink", "shrink_rloo", "value", "true_adv",
                  "true_adv_n4", "true_adv_n16")
# The machine-independence check (tests/test_lab_ci.py, in `make test`): a small refinement task
# whose one ordering (TCPO + hindsight above GRPO) is resolved at its seed count, so a fresh run
# on any machine must find it again; its committed run is benchmarks/lab/results/ci/lab.json.
CI_METHODS = ("grpo", "tcpo_hindsight")
# --tiny: the first answer (issue #47 item 5), no training: the smoke sizes' step-0 lab (each
# method's credit against the true advantage, 4 seeds), then the exact tier and the one-step
# measure at the initial policy for the same methods (first_answer). Trained differences need the
# full run; --tiny says so.
TINY_METHODS = ("grpo", "mt_grpo", "triage", "tcpo_hindsight", "shuffled")
PRESETS["tiny"] = dict(
    methods=TINY_METHODS, seeds=4,
    configs={k: dataclasses.replace(c, steps=0, checkpoints=(0,))
             for k, c in PRESETS["smoke"]["configs"].items()},
)
PRESETS["ci"] = dict(
    methods=CI_METHODS, seeds=12,
    configs={"refine": Config(task=R.RefineTask(length=3, alphabet=4, turns=6), hidden=32, prompts=8,
                              group=8, steps=120, eval_every=20, eval_repeats=4, checkpoints=(0,),
                              lab_pairs=64, lab_branches=16)},
)
# The turn-count-unbiased baseline's puzzle (issue #35 part 5): it learns less than GRPO on
# refine. Its mechanism probe, the same baseline with the past return added back
# (methods.turn_baseline_outcome), next to it and GRPO at the headline seed count, on the demo's
# refinement task; the lab at step 0 only (where all three share the policy and the batch).
PUZZLE_METHODS = ("grpo", "turn_baseline", "turn_baseline_outcome")
PRESETS["puzzle"] = dict(
    methods=PUZZLE_METHODS, seeds=20,
    configs={"refine": dataclasses.replace(PRESETS["default"]["configs"]["refine"], checkpoints=(0,),
                                           lab_seeds=0)},
)
PRESETS["oracle"] = dict(
    methods=ORACLE_METHODS, seeds=5,
    configs={k: dataclasses.replace(c, checkpoints=(0, 60, 120), lab_seeds=0)
             for k, c in PRESETS["default"]["configs"].items()})

_PRINT = threading.Lock()


# The methods a --credit run trains next to yours (unless --methods says otherwise): the outcome
# baseline, the two strongest per-turn methods of the committed demo, and both controls.
USER_REFERENCES = ("grpo", "mt_grpo", "triage", "tcpo_hindsight", "true_adv", "shuffled")


def user_method(spec: str):
    """A :class:`methods.Method` from ``module:function`` or ``path/to/file.py:function``.

    The function is the lab's credit protocol: ``credit(ctx, settings) -> f32[B, K]`` with
    ``ctx`` a :class:`methods.Context` (the rollout batch: scores, turn mask, roles, anchors, the
    outcome, the prompt groups, the value head's values, the policy) and ``settings`` the shared
    :class:`methods.Settings`. It is traced once under ``jax.jit`` and ``jax.vmap`` over the
    (seed) instances, like every built-in method: pure JAX, no Python side effects, ``0`` on
    padded turns (the lab masks them anyway). Optional attributes on the function: ``label``
    (the tables' name), ``agg`` (the loss aggregation, default ``token-mean``).
    """
    import importlib
    import importlib.util

    from .methods import Method

    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise ValueError(f"--credit {spec!r}: expected MODULE:FUNCTION or path/to/file.py:FUNCTION")
    try:
        if target.endswith(".py"):
            path = pathlib.Path(target)
            if not path.is_file():
                raise ValueError(f"--credit {spec!r}: no file {path}")
            loader = importlib.util.spec_from_file_location(f"credax_lab_user_{path.stem}", path)
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except ImportError as e:
        raise ValueError(f"--credit {spec!r}: cannot import {target!r} ({e})") from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"--credit {spec!r}: {target!r} has no function {attr!r}")
    return Method(attr, getattr(fn, "label", f"yours: {attr}"), fn, agg=getattr(fn, "agg", "token-mean"))


def exact_tier_rows(method) -> list[str]:
    """The exact tier's scores of a user method (``benchmarks.lab.exact.user_rows``: one line per
    MDP and policy, against the exact advantage and policy gradient), or one line saying why it
    could not run there (a function that needs the policy, ``ctx.model``, cannot)."""
    from . import exact

    try:
        return exact.user_rows(method.credit, method.name)
    except Exception as e:  # the user's function, on inputs it was not written for: say why
        return [f"cannot score {method.name} on the exact tier: {type(e).__name__}: {e}"]


def check_credit(method, cfg: Config, *, seed: int = 0) -> None:
    """Run a user's credit function once on the first batch (seed ``seed``'s initial policy, the
    training batch of step 0) and refuse, naming the problem, an output the lab cannot train on:
    not an array (a list, a tuple, None), not of shape ``[B, K]``, not a float dtype, or not
    finite on the batch's real turns. Seconds, before any method compiles.

    Raises:
        ValueError: the function raised, or its output fails one of the checks.
    """
    from . import train as T

    graphdef, state = T.init(cfg, jax.random.key(seed))
    model, _ = nnx.merge(graphdef, state)
    pool, _ = E.split_targets(cfg.task)
    ctx = T.make_context(model, jax.random.key(seed), pool, cfg)
    B, K = ctx.rollout.scores.shape
    where = f"--credit {method.name}: on the first batch (B={B} rollouts, K={K} turns)"
    try:
        out = jax.jit(lambda c: method.credit(c, cfg.settings))(ctx)
    except Exception as e:  # the user's code: any error, re-raised with where it came from
        raise ValueError(f"{where} the function raised {type(e).__name__}: {e}") from e
    if isinstance(out, list | tuple) or not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise ValueError(f"{where} it returned a {type(out).__name__}; return one array f32[B, K] "
                         "(e.g. jnp.stack the parts)")
    if tuple(out.shape) != (B, K):
        raise ValueError(f"{where} it returned shape {tuple(out.shape)}; expected [B, K] = ({B}, {K}): "
                         "one advantage per rollout and turn")
    if not jnp.issubdtype(out.dtype, jnp.floating):
        raise ValueError(f"{where} it returned dtype {out.dtype}; expected a float dtype (float32)")
    bad = ~np.isfinite(np.asarray(out, np.float64)) & np.asarray(ctx.rollout.turn_mask)
    if bad.any():
        b, k = map(int, np.argwhere(bad)[0])
        raise ValueError(f"{where} it returned {int(bad.sum())} non-finite values on real turns "
                         f"(the first at rollout {b}, turn {k}: {float(np.asarray(out)[b, k])})")


def say(*parts):
    with _PRINT:
        print(*parts, flush=True)


def seed_counts(methods, seeds: int, headline=(), rest: int | None = None) -> tuple[int, ...]:
    """Seeds per method: ``seeds`` for the ``headline`` methods (and for every method when
    ``rest`` is None), ``min(rest, seeds)`` for the others."""
    if rest is None:
        return (seeds,) * len(methods)
    return tuple(seeds if m.name in headline else min(rest, seeds) for m in methods)


def run_task(name: str, cfg: Config, methods, seeds, t0: float, raw: pathlib.Path | None = None,
             counts: tuple[int, ...] | None = None) -> dict:
    """Train and measure one task; return its JSON record. ``raw``: a pickle of the host-side
    runs, written after training, or read instead of training when it exists (``--from-raw``).
    ``counts``: seeds per method (``seed_counts``; None: every method all ``seeds``)."""
    if raw is not None and raw.exists():
        with open(raw, "rb") as f:
            return task_record(name, cfg, methods, pickle.load(f))
    if counts is not None and len(set(counts)) == 1 and counts[0] == len(seeds):
        counts = None
    runner = get_runner(cfg, tuple(methods), counts)

    def log(step, total, ms):
        top = "  ".join(f"{k} {float(np.mean(m.success)):.2f}" for k, m in ms.items())
        say(f"[{name}] step {step:>4}/{total}  {time.perf_counter() - t0:6.0f}s  held-out success: {top}")

    n_inst = sum(counts) if counts else len(methods) * len(seeds)
    say(f"[{name}] compiling and training {len(methods)} methods, {n_inst} (method, seed) instances ...")
    runs = runner.run(seeds, log, steps=cfg.steps)
    say(f"[{name}] trained, {time.perf_counter() - t0:.0f}s; measuring. Phases (wall s, compilation "
        "included): " + ", ".join(f"{k} {v:.0f}" for k, v in runner.timers.items()))
    if raw is not None:
        raw.parent.mkdir(parents=True, exist_ok=True)
        with open(raw, "wb") as f:
            pickle.dump(runs, f)
    return task_record(name, cfg, methods, runs)


def task_record(name, cfg, methods, runs) -> dict:
    labels = {m.name: m.label for m in methods}
    index = {m.name: i for i, m in enumerate(methods)}
    record = {"label": cfg.task.label, "config": dataclasses.asdict(cfg), "methods": {}, "curves": {},
              "seeds": {m.name: len(np.atleast_1d(runs[m.name].final.success)) for m in methods},
              "lab": {"ground_truth": {}, "credit": {}, "roles": {}, "triage": {}}}
    record["config"]["task"]["kind"] = cfg.task.name
    for m in methods:
        run = runs[m.name]
        record["methods"][m.name] = {
            "label": labels[m.name],
            **{key: X.summarize(getattr(run.final, key)) for key, _, _ in report.METRICS},
        }
        record["curves"][m.name] = {
            "steps": [s for s, _ in run.curve],
            **{key: [np.asarray(getattr(mm, key)).tolist() for _, mm in run.curve]
               for key in ("success", "ret")},
        }
    grpo = index.get("grpo")
    every = {**METHODS, **VARIANTS, **{d.name: d for d in DIAGNOSTICS},
             **{b.name: b for b in BASELINES}}
    for step in cfg.checkpoints:
        if step not in runs[methods[0].name].labs:
            continue
        st = str(step)
        credit, roles = {}, {}
        for m in methods:
            if step not in runs[m.name].labs:  # Config.lab_methods left it out
                continue
            lb = runs[m.name].labs[step]  # the method's own policy at this checkpoint
            per = checkpoint.method_metrics(lb, lb.index(m.name))
            credit[m.name] = {"label": labels[m.name], **{k: X.summarize(v) for k, v in per.items()}}
            roles[m.name] = checkpoint.role_metrics(lb, lb.index(m.name))
        record["lab"]["credit"][st] = credit
        record["lab"]["roles"][st] = roles
        # TCPO's parts and switched readings, measured on TCPO + hindsight's own policy; the
        # outcome baselines plain and shrunk, on GRPO's own batch.
        for key, host in [("diagnostics", "tcpo_hindsight"), ("baselines", "grpo")]:
            if host not in runs or step not in runs[host].labs:
                continue
            lb = runs[host].labs[step]
            rows = {}
            for i, n in enumerate(lb.names[1:], start=1):
                per = checkpoint.method_metrics(lb, i)
                rows[n] = {"label": every[n].label, "policy": host,
                           **{k: X.summarize(v) for k, v in per.items()}}
            record["lab"].setdefault(key, {})[st] = rows
        measured = [m.name for m in methods if step in runs[m.name].labs]
        on_grpo = grpo is not None and "grpo" in measured
        ref = runs["grpo" if on_grpo else measured[0]].labs[step]
        gt = checkpoint.ground_truth_quality(ref)
        record["lab"]["ground_truth"][st] = {
            "policy": ("grpo" if on_grpo else measured[0]) if step else "initial",
            "branches": cfg.lab_branches, "pairs_requested": cfg.lab_pairs,
            **{k: X.summarize(v) for k, v in gt.items()},
        }
        if on_grpo:
            tri = checkpoint.triage_metrics(ref, ref.index("grpo"), lam=cfg.settings.triage_lam)
            record["lab"]["triage"][st] = {
                k: {"label": v["label"], **{q: X.summarize(v[q]) for q in v if q != "label"}}
                for k, v in tri.items()
            }
    if "0" in record["lab"]["credit"] and len(methods) >= 3:
        controls = [m.name for m in methods if m.control]
        record["lab"]["predictive"] = checkpoint.metric_vs_learning(record, controls)
        # The same without the methods that add a hand-set bonus (they can win by shaping):
        # does credit accuracy predict learning among the methods that only estimate credit?
        record["lab"]["predictive_no_bonus"] = checkpoint.metric_vs_learning(
            record, controls + [m.name for m in methods if m.bonus])
    record["kinds"] = {m.name: {"unbiased": m.unbiased, "control": m.control, "bonus": m.bonus,
                                "oracle": m.oracle} for m in methods}
    return record


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--tier" in argv:  # the transformer tier has its own options (benchmarks/lab/lm.py)
        i = argv.index("--tier")
        tier = argv[i + 1] if i + 1 < len(argv) else None
        if tier != "lm":
            raise SystemExit(f"--tier: unknown tier {tier!r}; the one tier is 'lm'")
        from . import lm

        return lm.main(argv[:i] + argv[i + 2:])
    p = argparse.ArgumentParser(prog="python -m benchmarks.lab", description=__doc__.split("\n")[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="10 seeds, 400 steps")
    size.add_argument("--tiny", action="store_true", help="a first answer without training (about "
                      "a minute on 2 cores): each method's step-0 credit against the true advantage, "
                      "the exact tier and the one-step measure at the initial policy; trained "
                      "differences need the full run")
    size.add_argument("--preset", choices=sorted(PRESETS), default=None,
                      help="a named preset (oracle: the true-advantage ceiling at N = 1, 4, 16)")
    every = {**METHODS, **VARIANTS}
    p.add_argument("--methods", default=None, help="comma-separated subset of: " + ",".join(every))
    p.add_argument("--credit", action="append", default=[], metavar="MODULE:FUNCTION",
                   help="your own credit method, trained and measured like the others (repeatable): "
                   "a function (ctx: methods.Context, settings: methods.Settings) -> f32[B, K] in an "
                   "importable module or a .py file (path/to/file.py:function); see the guide")
    p.add_argument("--tasks", default=None, help="comma-separated: probe,refine (default: the "
                   "preset's tasks)")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (0..n-1)")
    p.add_argument("--steps", type=int, default=None, help="training steps per run")
    p.add_argument("--rest-seeds", type=int, default=None, help="seeds for the methods outside the "
                   "preset's headline set (default: the preset's; the demo trains its headline "
                   "methods on --seeds and the rest on fewer)")
    p.add_argument("--perturb", type=float, default=0.0, metavar="EPS",
                   help="multiply every method's training credit by 1 + EPS*z, z standard normal "
                   "(a change of the last bits: the in-process stand-in for another machine)")
    p.add_argument("--out", default="demo-results", help="output folder (default: demo-results)")
    p.add_argument("--raw", default=None, help="folder for pickles of the raw runs (written after "
                   "training; with --from-raw, read instead of training)")
    p.add_argument("--from-raw", action="store_true", help="rebuild the outputs from --raw pickles")
    args = p.parse_args(argv)

    preset = args.preset or ("full" if args.full else "tiny" if args.tiny else "default")
    seeds = list(range(args.seeds if args.seeds is not None else PRESETS[preset]["seeds"]))
    if not seeds:
        p.error("--seeds: at least one seed")
    rest = args.rest_seeds if args.rest_seeds is not None else PRESETS[preset].get("rest_seeds")
    default = PRESETS[preset].get("methods", list(METHODS))
    names = list(default) if args.methods is None else [m.strip() for m in args.methods.split(",")]
    unknown = [m for m in names if m not in every]
    if unknown:
        p.error(f"unknown method(s) {unknown}; choose from {list(every)}")
    methods = [every[m] for m in names]
    try:
        user = [user_method(spec) for spec in args.credit]
    except ValueError as e:
        p.error(str(e))
    clash = [m.name for m in user if m.name in every or [u.name for u in user].count(m.name) > 1]
    if clash:
        p.error(f"--credit: method name(s) {clash} already taken; rename the function")
    if user and args.methods is None:
        # Your method next to the references it is read against, not the whole demo.
        methods = [every[m] for m in USER_REFERENCES]
    methods += user
    tasks = (list(PRESETS[preset]["configs"]) if args.tasks is None
             else [t.strip() for t in args.tasks.split(",")])
    configs = {}
    for t in tasks:
        if t not in PRESETS[preset]["configs"]:
            p.error(f"unknown task {t!r} for preset {preset}; choose from "
                    + ", ".join(PRESETS[preset]["configs"]))
        cfg = PRESETS[preset]["configs"][t]
        if args.steps is not None:
            marks = tuple(sorted({0, args.steps // 2 // cfg.eval_every * cfg.eval_every, args.steps}))
            cfg = dataclasses.replace(cfg, steps=args.steps, checkpoints=marks)
        if args.perturb:
            cfg = dataclasses.replace(cfg, perturb=args.perturb)
        if cfg.lab_methods:
            # Methods named with --methods are all measured after training; a user's always.
            keep = () if args.methods is not None else cfg.lab_methods + tuple(m.name for m in user)
            cfg = dataclasses.replace(cfg, lab_methods=keep)
        configs[t] = cfg
    # A user's methods and the ones named with --methods are read at the preset's full seeds.
    headline = set(PRESETS[preset].get("headline", ())) | {m.name for m in user}
    counts = seed_counts(methods, len(seeds), headline, rest)
    for m in user:  # the user's function on one real batch before anything compiles
        try:
            check_credit(m, next(iter(configs.values())))
        except ValueError as e:
            p.error(str(e))
    out = pathlib.Path(args.out)

    by_count = {}
    for m, c in zip(methods, counts, strict=True):
        by_count.setdefault(c, []).append(m.name)
    say(f"credax credit lab ({preset}): tasks {tasks}, {len(methods)} methods, on "
        f"{jax.devices()[0].platform.upper()} ({os.cpu_count()} cores); seeds: "
        + "; ".join(f"{c} for {', '.join(ns)}" for c, ns in sorted(by_count.items(), reverse=True)))
    for t, cfg in configs.items():
        k = cfg.task
        say(f"  {t}: {k.label}, L={k.length} V={k.alphabet} K={k.turns}, G={cfg.group} x "
            f"{cfg.prompts} prompts, {cfg.steps} steps, hidden {cfg.hidden}; ground truth at steps "
            f"{list(cfg.checkpoints)}: {cfg.lab_pairs} pairs x {cfg.lab_branches} branch pairs")
    compile_s = [0.0]

    def on_duration(event, secs, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compile_s[0] += secs

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    results, errors = {}, []

    def work(t):
        try:
            raw = pathlib.Path(args.raw) / f"raw-{t}.pkl" if args.raw else None
            if raw is not None and raw.exists() and not args.from_raw:
                raw.unlink()
            results[t] = run_task(t, configs[t], methods, seeds, wall0, raw, counts)
        except BaseException as e:  # re-raised on the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in tasks]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    timing = {"wall_s": wall, "cpu_s": cpu, "compile_wall_s": compile_s[0],
              "note": "process CPU time (user+sys) of the whole run, compilation included; "
                      "compile_wall_s: XLA backend compilation, wall seconds summed over "
                      "programs (the two task threads compile concurrently)"}
    command = "python -m benchmarks.lab " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.raw:  # the training run's timing and command travel with its pickles (--from-raw keeps them)
        saved = pathlib.Path(args.raw) / "timing.json"
        if args.from_raw and saved.exists():
            timing = json.loads(saved.read_text())
            command = timing.pop("command", command)
        elif not args.from_raw:
            saved.write_text(json.dumps({**timing, "command": command}))

    record = {
        "preset": preset,
        "seeds": seeds,
        "tasks": {t: results[t] for t in tasks},
        "timing": timing,
        "environment": report.environment(),
        "command": command,
    }
    first_lines = []
    if preset == "tiny":  # the first answer: one-step and the exact tier beside the step-0 lab
        from . import first

        first_lines, record["first_answer"] = first.run(record, configs, methods, user, log=say)
    report.write_json(out / "lab.json", record)
    for t in tasks:
        report.plot_task(out / f"lab-{t}.png", record["tasks"][t], tables.seed_note(record))
    report.plot_seeds(out / "lab-seeds.png", record)
    report.plot_credit(out / "lab-credit.png", record)
    report.plot_predictive(out / "lab-predict.png", record)
    print()
    print(tables.render(record))
    print(f"\nwall time {wall:.0f} s, process CPU time {cpu:.0f} s (compilation included; XLA "
          f"compilation {compile_s[0]:.0f} s wall summed over programs)"
          + (f"; the tables use the training run's timing from {args.raw}" if args.from_raw else ""))
    exact_rows = {m.name: exact_tier_rows(m) for m in user}
    summary = {n: (f"{len(rows)} rows below" if rows and not rows[0].startswith("cannot") else
                   (rows[0] if rows else None)) for n, rows in exact_rows.items()}
    if preset != "tiny":  # --tiny trains nothing: its first answer (above) is the verdict
        for line in tables.verdicts(record, [m.name for m in user], summary):
            print(line)
    for rows in exact_rows.values():
        for line in rows:
            print(line)
    for line in first_lines:
        print(line)
    print(f"wrote {out / 'lab.json'}, " + ", ".join(str(out / f"lab-{t}.png") for t in tasks)
          + f", {out / 'lab-seeds.png'}, {out / 'lab-credit.png'}, {out / 'lab-predict.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

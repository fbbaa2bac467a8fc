"""The lab's one-step measure: each method's expected improvement from one update at fixed policies.

    python -m benchmarks.lab.onestep                 # both tasks, writes results/onestep/
    python -m benchmarks.lab.onestep --tasks probe --batches 16 --out /tmp/onestep

A trained verdict is one sample of a chaotic 120-step process. This measure needs no training:
at a few checkpoint policies ``θ`` shared by every method (the initial policy of the lab's seed 0,
and GRPO's parameters after some steps of the lab's own seed-0 GRPO run, ``train.Runner``'s
programs driven step by step), each method's credit on a batch ``b`` gives its policy gradient
``ĝ_b`` (the gradient of the lab's clipped policy loss at ``θ_old = θ``, where the ratio is 1 and
the loss is ``−Σ Â·log π / n``, ``n`` the method's aggregation count; no value loss), and

    Δ(α) = E_b[ J_b(θ + α·ĝ_b / ‖ĝ_b‖) − J_b(θ) ]

for step lengths ``α`` in parameter space (unit-normalised: the measure compares directions, not
the methods' arbitrary advantage scales; a zero gradient takes no step). ``J_b`` is the mean
held-out return (what every method maximises) on every evaluation target, ``repeats`` episodes
each, with batch ``b``'s own evaluation key: the same episodes' random numbers for every method,
every ``α`` and ``θ`` itself on that batch (common random numbers), another key on each batch, so
the t-interval over batches holds the evaluation's noise too (issue #47: with one key for every
batch, each absolute Δ moved by more than its interval from one key to another). The batches are
the same for every method (same rollouts, same keys): the per-batch differences between two
methods are paired, and the intervals are 95 % t-intervals over the batches (of the mean, and of
the paired difference with GRPO).

:func:`predict` then asks, from the lab's JSON (``results/lab.json``; the lead refreshes it with
the 20-seed run): which step-0 credit metrics rank the methods as this measure at the initial
policy does, and whether this measure ranks them as their final trained success does (Spearman
across methods, bootstrap intervals over the lab's seeds and this measure's batches jointly).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from . import env as E
from . import refine as R
from .methods import METHODS, Method
from .train import (
    COLD,
    HOT,
    SAMPLING,
    Batch,
    Config,
    evaluate,
    get_runner,
    loss_fn,
    make_context,
    to_sequence,
)

RESULTS = pathlib.Path(__file__).parent / "results" / "onestep"
LAB_JSON = pathlib.Path(__file__).parent / "results" / "lab.json"
# Every method of the demo (the lab.json rows this measure is read against) and its two controls.
DEFAULT_METHODS: tuple[Method, ...] = tuple(METHODS.values())


@dataclasses.dataclass(frozen=True)
class Setup:
    """One task's measure: the lab configuration, the checkpoints of the reference run, sizes."""

    config: Config
    checkpoints: tuple[int, ...] = (0, 40, 120)  # steps of the seed-0 GRPO reference run
    batches: int = 32  # independent batches per checkpoint (shared by every method)
    alphas: tuple[float, ...] = (0.03, 0.1, 0.3)  # step lengths in parameter space
    repeats: int = 16  # held-out episodes per evaluation target
    seed: int = 0


def _default_configs():
    from .__main__ import PRESETS

    return PRESETS["default"]["configs"]


def presets() -> dict[str, dict[str, Setup]]:
    """``default``: the demo's task sizes; ``tiny``: CI (seconds once compiled)."""
    cfgs = _default_configs()
    tiny = {
        "probe": Config(task=E.Task(length=2, alphabet=4, turns=5), hidden=32, prompts=4, group=4,
                        steps=20, eval_every=10),
        "refine": Config(task=R.RefineTask(length=2, alphabet=4, turns=5), hidden=32, prompts=4,
                         group=4, steps=20, eval_every=10),
    }
    return {
        "default": {"probe": Setup(cfgs["probe"], repeats=64), "refine": Setup(cfgs["refine"])},
        "tiny": {t: Setup(c, checkpoints=(0, 10), batches=6, alphas=(0.3,), repeats=4)
                 for t, c in tiny.items()},
    }


def reference_states(setup: Setup) -> dict[int, object]:
    """The seed-0 GRPO run of the lab (``train.Runner``'s programs and key schedule, one method,
    one seed), its ``(model, optimizer)`` state at each checkpoint step (seed axis dropped)."""
    cfg = setup.config
    grpo = METHODS["grpo"]
    runner = get_runner(cfg, (grpo,))
    keys = jax.vmap(jax.random.key)(jnp.asarray([setup.seed], dtype=jnp.uint32))
    fold = lambda ks, i: jax.vmap(lambda k: jax.random.fold_in(k, i))(ks)  # noqa: E731
    k_init, k_train = fold(keys, 0), fold(keys, 1)
    states = runner.init_state(k_init)
    dr, uv = (jnp.asarray(f) for f in runner._flags)
    out = {}
    last = max(setup.checkpoints)
    if 0 in setup.checkpoints:
        out[0] = states
    for c in range(-(-last // cfg.eval_every)):
        step_keys = jax.vmap(lambda kk: jax.random.split(kk, cfg.eval_every))(fold(k_train, c))
        for k in range(cfg.eval_every):
            ctx = runner.roll(states, step_keys[:, k], runner.train_pool)
            adv = runner.step_credit(states, ctx)
            states, _ = runner.update(states, ctx, adv, dr, uv)
            step = c * cfg.eval_every + k + 1
            if step in setup.checkpoints:
                out[step] = states
    graphdef = runner.graphdef
    return {s: nnx.merge(graphdef, jax.tree.map(lambda x: x[0], st))[0] for s, st in out.items()}


class Programs:
    """The compiled programs of one task: batches, every method's credit, and the update's
    improvement at each step length."""

    def __init__(self, setup: Setup, methods: tuple[Method, ...], graphdef):
        cfg = setup.config
        self.setup, self.methods, self.graphdef = setup, methods, graphdef
        self.train_pool, self.eval_pool = E.split_targets(cfg.task)
        gd = self.graphdef
        merge = lambda st: nnx.merge(gd, st)  # noqa: E731

        def batch(state, key):
            return make_context(merge(state), key, self.train_pool, cfg)._replace(model=None)

        def credits(state, ctx):
            model = merge(state)
            return jnp.stack([jax.lax.stop_gradient(m.credit(ctx._replace(model=model),
                                                             cfg.settings)) for m in methods])

        def ret(state, key):
            return evaluate(merge(state), self.eval_pool, key, setup.repeats).ret

        def improve(state, ctx, adv, dr, key, j0):
            r = ctx.rollout
            B, K = r.scores.shape
            pb = Batch(to_sequence(r, adv, ctx.token_turn), r.obs, ctx.values, ctx.values,
                       r.turn_mask)
            tokens = jnp.sum(pb.policy.mask.astype(jnp.float32))
            normalizer = jnp.where(dr, jnp.float32(B * K * cfg.task.slots), tokens)
            grads = nnx.grad(lambda m: loss_fn(m, pb, normalizer, jnp.float32(0.0), cfg)[0])(
                merge(state))
            leaves = jax.tree.leaves(grads)
            sq = sum(jnp.sum(jnp.square(g)) for g in leaves)
            ok = sq > 0
            inv = jnp.where(ok, 1.0 / jnp.sqrt(jnp.where(ok, sq, 1.0)), 0.0)  # double where
            out = []
            for a in setup.alphas:  # descend the loss: θ − α ĝ/‖ĝ‖
                new = jax.tree.map(lambda p, g, a=a: p - a * inv * g, state, grads)
                out.append(ret(new, key) - j0)
            return jnp.stack(out)

        self.batch = jax.jit(jax.vmap(batch, in_axes=(None, 0)), compiler_options=SAMPLING)
        self.credits = jax.jit(jax.vmap(credits, in_axes=(None, 0)), compiler_options=COLD)
        self.ret = jax.jit(ret, compiler_options=SAMPLING)
        self.improve = jax.jit(jax.vmap(improve, in_axes=(None, 0, 0, None, 0, 0)),
                               compiler_options=HOT)


def measure(setup: Setup, methods: tuple[Method, ...] = DEFAULT_METHODS, log=None) -> dict:
    """One task's record: per checkpoint, ``J(θ)`` and per method the per-batch ``Δ(α)``."""
    states = reference_states(setup)
    prog = Programs(setup, methods, nnx.split(next(iter(states.values())))[0])
    key = jax.random.fold_in(jax.random.key(setup.seed), 12345)
    # One evaluation key per batch (shared by every method, α and θ on that batch).
    k_eval = jax.random.split(jax.random.fold_in(key, 0), setup.batches)
    ret_each = jax.vmap(prog.ret, in_axes=(None, 0))
    out = {}
    for step, model in states.items():
        t0 = time.process_time()
        state = nnx.state(model)
        keys = jax.random.split(jax.random.fold_in(key, 1 + step), setup.batches)
        ctx = prog.batch(state, keys)
        adv = np.asarray(prog.credits(state, ctx))  # [n, M, B, K]
        j0 = ret_each(state, k_eval)  # J_b(θ), [n]
        rows = {}
        for i, m in enumerate(methods):
            dr = jnp.asarray(m.agg == "seq-mean-token-sum-norm")
            delta = np.asarray(prog.improve(state, ctx, jnp.asarray(adv[:, i]), dr, k_eval, j0))
            rows[m.name] = {"label": m.label, "delta": delta.T.tolist()}  # [alpha][batch]
        out[str(step)] = {"J": float(jnp.mean(j0)), "J_per_batch": np.asarray(j0).tolist(),
                          "methods": rows}
        if log:
            log(f"  step {step}: J = {float(jnp.mean(j0)):.4f}, {time.process_time() - t0:.0f} CPU s")
    return out


def t_interval(x) -> tuple[float, float, float]:
    """Mean and 95 % t-interval of the mean (two-sided, ``n − 1`` degrees of freedom)."""
    from scipy import stats

    x = np.asarray(x, np.float64)
    m = float(x.mean())
    if x.size < 2:
        return m, m, m
    h = float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return m, m - h, m + h


def summarize(record: dict) -> dict:
    """Per task, checkpoint, method and α: the mean Δ and the paired difference with GRPO, each
    with its 95 % t-interval over batches, and whether the difference is resolved (0 outside)."""
    out = {}
    for task, tr in record["tasks"].items():
        alphas = tr["alphas"]
        out[task] = {}
        for step, ck in tr["checkpoints"].items():
            grpo = np.asarray(ck["methods"]["grpo"]["delta"])
            rows = {}
            for name, m in ck["methods"].items():
                d = np.asarray(m["delta"])
                rows[name] = [{"alpha": a, "delta": t_interval(d[i]),
                               "vs_grpo": t_interval(d[i] - grpo[i])} for i, a in enumerate(alphas)]
            out[task][step] = rows
    return out


# --- what predicts what --------------------------------------------------------------------------


def _spearman_boot(a_samples, b_samples, *, resamples: int = 2000, seed: int = 0):
    """Spearman of the means of two ``[M, n]`` sample arrays across the ``M`` methods, with a
    95 % percentile interval over joint bootstrap resamples of each side's columns (the lab's
    seeds are shared by every method, as are this measure's batches: one index draw per side and
    resample). Methods with no finite value on a side are left out; ``None`` where fewer than 3
    methods remain or a side ties every method."""
    from scipy import stats

    a, b = np.asarray(a_samples, float), np.asarray(b_samples, float)
    rng = np.random.default_rng(seed)

    def means(x, idx):  # [R, M] NaN-skipping means of the resampled columns
        v = x[:, idx]  # [M, R, n]
        ok = np.isfinite(v)
        return (np.where(ok, v, 0.0).sum(-1) / np.maximum(ok.sum(-1), 1)).T

    ia = np.concatenate([np.arange(a.shape[1])[None],
                         rng.integers(0, a.shape[1], (resamples, a.shape[1]))])
    ib = np.concatenate([np.arange(b.shape[1])[None],
                         rng.integers(0, b.shape[1], (resamples, b.shape[1]))])
    ma, mb = means(a, ia), means(b, ib)  # row 0: the point estimate
    keep = np.isfinite(np.nanmean(a, axis=1)) & np.isfinite(np.nanmean(b, axis=1))
    if keep.sum() < 3:
        return None, None, None
    ra, rb = (stats.rankdata(x[:, keep], axis=1) for x in (ma, mb))
    ra, rb = ra - ra.mean(1, keepdims=True), rb - rb.mean(1, keepdims=True)
    den = np.sqrt(np.sum(ra * ra, 1) * np.sum(rb * rb, 1))
    rho = np.where(den > 0, np.sum(ra * rb, 1) / np.where(den > 0, den, 1.0), np.nan)
    if not np.isfinite(rho[0]):
        return None, None, None
    boot = rho[1:][np.isfinite(rho[1:])]
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return float(rho[0]), float(lo), float(hi)


def _shared_seeds(per_seed):
    """The per-seed values of every method on the seeds they all have: the lab trains method
    ``i`` on seeds ``0 … S_i − 1`` (20 for the headline methods, 5 for the rest in the demo), so
    the common seeds are the first ``min S_i``; ``None`` (no value at that seed) becomes NaN."""
    n = min(len(v) for v in per_seed)
    return [[np.nan if x is None else x for x in v[:n]] for v in per_seed]


# Step-0 credit metrics of lab.json read against the measure (the lab's own "predictive" set).
PREDICTORS = ("pearson", "spearman", "sign_agree", "rank_acc", "affine_mse", "grad_cos", "grad_snr",
              "grad_t", "length_bonus")


def predict(record: dict, lab: dict, *, alpha_index: int | None = None) -> dict:
    """What predicts what, per task: Spearman (with interval) across the lab's non-control methods
    of each step-0 credit metric of ``lab`` (the lab's JSON record) with ``Δ`` at the initial
    policy, and of ``Δ`` at each checkpoint with the lab's final held-out success.

    ``alpha_index``: which step length (default the middle one)."""
    out = {}
    for task, tr in record["tasks"].items():
        if task not in lab.get("tasks", {}):
            continue
        lt = lab["tasks"][task]
        ai = len(tr["alphas"]) // 2 if alpha_index is None else alpha_index
        controls = {n for n, k in lt.get("kinds", {}).items() if k.get("control")}
        names = [n for n in tr["checkpoints"]["0"]["methods"]
                 if n in lt["methods"] and n not in controls]
        delta0 = [tr["checkpoints"]["0"]["methods"][n]["delta"][ai] for n in names]
        credit0 = lt["lab"]["credit"].get("0", {})
        rows = {}
        for key in PREDICTORS:
            if not all(n in credit0 and key in credit0[n] for n in names):
                continue
            metric = _shared_seeds([credit0[n][key]["per_seed"] for n in names])
            rows[key] = _spearman_boot(metric, delta0)
        success = _shared_seeds([lt["methods"][n]["success"]["per_seed"] for n in names])
        final = {step: _spearman_boot([ck["methods"][n]["delta"][ai] for n in names], success)
                 for step, ck in tr["checkpoints"].items()}
        out[task] = {"alpha": tr["alphas"][ai], "methods": names, "seeds": len(success[0]),
                     "metric_vs_onestep": rows, "onestep_vs_success": final}
    return out


# --- tables and the figure ---------------------------------------------------------------------


def _ci(t, pattern="{:+.4f}"):
    m, lo, hi = t
    return f"{pattern.format(m)} [{pattern.format(lo)}, {pattern.format(hi)}]"


def _rho(t):
    m, lo, hi = t
    if m is None or not np.isfinite(m):
        return "—"
    return f"{m:+.2f}" + ("" if lo is None else f" [{lo:+.2f}, {hi:+.2f}]")


def render(record: dict, lab: dict | None = None) -> str:
    """The measure's markdown tables from its JSON record, and the prediction tables from the
    lab's JSON (``lab``; none: left out)."""
    summ = summarize(record)
    out = ["One-step expected improvement Δ(α) = E_b[J_b(θ + α·ĝ_b/‖ĝ_b‖) − J_b(θ)] of the held-out "
           "return, mean over the batches with its 95 % t-interval; \"vs GRPO\": the paired "
           "difference with GRPO on the same batches (bold: the interval excludes 0).", ""]
    for task, tr in record["tasks"].items():
        for step, ck in tr["checkpoints"].items():
            pol = "the initial policy" if step == "0" else f"GRPO's policy after {step} steps"
            out += [f"### {task}: {pol}", "",
                    f"J(θ) = {ck['J']:.4f}; {tr['batches']} batches of {tr['batch_rows']} rollouts; "
                    f"held-out evaluation {tr['eval_episodes']} episodes "
                    + ("with a key per batch (the interval holds the evaluation's noise)."
                       if tr.get("eval_keys") == "per batch" else "with one fixed key.")
                    + (f" J(θ) over the batches' keys: {min(ck['J_per_batch']):.4f} to "
                       f"{max(ck['J_per_batch']):.4f}." if "J_per_batch" in ck else ""), ""]
            head = "| method | " + " | ".join(
                f"Δ(α={a}) | vs GRPO (α={a})" for a in tr["alphas"]) + " |"
            out += [head, "|" + "---|" * (1 + 2 * len(tr["alphas"]))]
            for name, rows in summ[task][step].items():
                cells = []
                for r in rows:
                    vs = _ci(r["vs_grpo"])
                    if r["vs_grpo"][1] > 0 or r["vs_grpo"][2] < 0:
                        vs = f"**{vs}**"
                    cells += [_ci(r["delta"]), "—" if name == "grpo" else vs]
                out.append(f"| {ck['methods'][name]['label']} | " + " | ".join(cells) + " |")
            out.append("")
    if lab is not None:
        pred = predict(record, lab)
        for task, p in pred.items():
            out += [f"### {task}: what predicts what (α = {p['alpha']}, {len(p['methods'])} "
                    f"methods, the lab's {p['seeds']} seeds)", "",
                    "| step-0 credit metric (lab.json) | Spearman with Δ at the initial policy |",
                    "|---|---|"]
            out += [f"| {k} | {_rho(v)} |" for k, v in p["metric_vs_onestep"].items()]
            out += ["", "| Δ at checkpoint | Spearman with final held-out success (lab.json) |",
                    "|---|---|"]
            out += [f"| step {s} | {_rho(v)} |" for s, v in p["onestep_vs_success"].items()]
            out.append("")
    return "\n".join(out)


def plot(path: pathlib.Path, record: dict) -> None:
    """Δ at the middle step length with its interval, per method, one panel per (task, checkpoint)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summ = summarize(record)
    panels = [(t, s) for t in record["tasks"] for s in record["tasks"][t]["checkpoints"]]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 6.5), sharey=True,
                             squeeze=False)
    for ax, (task, step) in zip(axes[0], panels, strict=True):
        tr = record["tasks"][task]
        ai = len(tr["alphas"]) // 2
        rows = summ[task][step]
        names = list(rows)
        m = np.array([rows[n][ai]["delta"][0] for n in names])
        lo = np.array([rows[n][ai]["delta"][1] for n in names])
        hi = np.array([rows[n][ai]["delta"][2] for n in names])
        y = np.arange(len(names))
        ax.errorbar(m, y, xerr=[m - lo, hi - m], fmt="o", ms=3, capsize=2)
        ax.axvline(0, color="black", lw=0.8)
        ax.axvline(m[names.index("grpo")], color="grey", lw=0.8, ls="--")
        ax.set_yticks(y, [tr["checkpoints"][step]["methods"][n]["label"] for n in names], fontsize=7)
        ax.set_title(f"{task}, step {step}: Δ(α={tr['alphas'][ai]})", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].invert_yaxis()
    fig.suptitle("One-step expected improvement of the held-out return (95 % t-interval over "
                 "batches; dashed: GRPO)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(out: pathlib.Path, record: dict, lab_json: pathlib.Path = LAB_JSON) -> str:
    """Write ``onestep.json``, ``onestep.md`` (with the predictions from ``lab_json``) and
    ``onestep.png``; return the markdown."""
    lab = json.loads(lab_json.read_text()) if lab_json.exists() else None
    out.mkdir(parents=True, exist_ok=True)
    (out / "onestep.json").write_text(json.dumps(record, indent=1) + "\n")
    text = render(record, lab)
    (out / "onestep.md").write_text(text + "\n")
    plot(out / "onestep.png", record)
    return text


def run(setups: dict[str, Setup], methods=DEFAULT_METHODS, log=None) -> dict:
    record = {"tasks": {}}
    for task, setup in setups.items():
        if log:
            log(f"[{task}] reference run to step {max(setup.checkpoints)}, "
                f"{setup.batches} batches x {len(methods)} methods x {len(setup.alphas)} step sizes")
        cfg = setup.config
        n_eval = int(np.asarray(E.split_targets(cfg.task)[1]).shape[0])
        record["tasks"][task] = {
            "config": {**dataclasses.asdict(cfg), "task": {**dataclasses.asdict(cfg.task),
                                                           "kind": cfg.task.name}},
            "checkpoints_of": "the lab's seed-0 GRPO run", "seed": setup.seed,
            "alphas": list(setup.alphas), "batches": setup.batches,
            "batch_rows": cfg.prompts * cfg.group, "eval_episodes": n_eval * setup.repeats,
            "eval_keys": "per batch",
            "checkpoints": measure(setup, methods, log)}
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lab.onestep",
                                description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=("default", "tiny"), default="default")
    p.add_argument("--tasks", default="probe,refine", help="comma-separated: probe,refine")
    p.add_argument("--batches", type=int, default=None, help="batches per checkpoint")
    p.add_argument("--lab-json", default=str(LAB_JSON), help="the lab's JSON for the predictions")
    p.add_argument("--out", default=str(RESULTS), help="output folder (default: results/onestep)")
    args = p.parse_args(argv)
    setups = presets()[args.preset]
    tasks = [t.strip() for t in args.tasks.split(",")]
    unknown = [t for t in tasks if t not in setups]
    if unknown:
        p.error(f"--tasks: unknown task(s) {unknown}; choose from {list(setups)}")
    if args.batches is not None and args.batches < 2:
        p.error(f"--batches must be at least 2 (an interval needs two); got {args.batches}")
    chosen = {t: setups[t] if args.batches is None else
              dataclasses.replace(setups[t], batches=args.batches) for t in tasks}
    t0, c0 = time.perf_counter(), time.process_time()
    record = run(chosen, log=lambda s: print(s, flush=True))
    from .report import environment

    record["environment"] = environment()
    record["timing"] = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                        "note": "process CPU time, compilation included"}
    record["command"] = "python -m benchmarks.lab.onestep " + " ".join(
        sys.argv[1:] if argv is None else argv)
    text = write(pathlib.Path(args.out), record, pathlib.Path(args.lab_json))
    print(text)
    print(f"wall {record['timing']['wall_s']:.0f} s, process CPU {record['timing']['cpu_s']:.0f} s; "
          f"wrote {args.out}/onestep.json, onestep.md, onestep.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

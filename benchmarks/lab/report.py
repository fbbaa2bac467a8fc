"""The JSON record and the figures of the credit lab (tables: ``tables.py``).

Intervals everywhere are bootstrap percentile intervals over seeds (``metrics.bootstrap_interval``):
made of resampled means, they stay inside the metric's range.
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np

from . import metrics as X

# (key of train.Metrics, column title, format) of the held-out metrics, in table order.
METRICS = [
    ("success", "success", "{:.3f}"),
    ("ret", "return", "{:.3f}"),
    ("final_score", "final score", "{:.3f}"),
    ("best_turn", "best-turn score", "{:.3f}"),
    ("turns_to_success", "turns to 1st success", "{:.2f}"),
    ("reached", "ever solved", "{:.3f}"),
    ("length", "turns taken", "{:.2f}"),
    ("probes", "exploration turns", "{:.2f}"),
    ("regressions", "regressions", "{:.2f}"),
    ("broke_solved", "solved then broken", "{:.3f}"),
]


# The environment variables that can change how XLA compiles or how many threads run (recorded
# with every run, issue #47 item 3): the committed demo run of round #35 did not record them.
ENV_VARS = ("XLA_FLAGS", "GLIBC_TUNABLES", "JAX_PLATFORMS", "JAX_ENABLE_X64", "JAX_DEFAULT_MATMUL_PRECISION",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL",
            "LD_PRELOAD", "MALLOC_ARENA_MAX")
# What must match for a committed run to be reproducible value for value (the machine record;
# tests/test_lab_ci.py compares the trained values only where it matches). XLA_FLAGS is not in
# it: the suite's two flags (conftest.py) leave the ci preset's 48 trained values unchanged
# (measured, docs/guides/credit-lab.md), and the lab's programs set their own optimisation level.
MATCH = ("jax", "jaxlib", "numpy", "flax", "optax", "python", "cpu", "cpu_isa")


def environment() -> dict:
    """The run's environment: package versions, the processor, the threads the process may use,
    the C library, and every environment variable of :data:`ENV_VARS` that is set."""
    import os
    import platform

    import flax
    import jax
    import jaxlib
    import optax

    cpu, isa = None, None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if cpu is None and line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                if isa is None and line.startswith("flags"):
                    # The vector extensions XLA's CPU code generation targets (it compiles for
                    # the host's features): the same model name can hide a different set in a VM.
                    isa = " ".join(sorted(f for f in line.split(":", 1)[1].split()
                                          if f.startswith(("avx", "fma", "amx", "sse4"))))
    except OSError:
        cpu = platform.processor() or None
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "jax": jax.__version__, "jaxlib": jaxlib.__version__, "numpy": np.__version__,
        "flax": flax.__version__, "optax": optax.__version__,
        "python": platform.python_version(), "platform": jax.devices()[0].platform,
        "cpu": cpu, "cpu_isa": isa, "cpu_count": os.cpu_count(), "cpus_allowed": affinity,
        "libc": " ".join(platform.libc_ver()).strip() or None, "kernel": platform.release(),
        "env": {k: os.environ[k] for k in ENV_VARS if k in os.environ},
    }


def machine_match(a: dict | None, b: dict | None) -> list[str]:
    """The :data:`MATCH` fields on which two environment records differ (a missing one counts)."""
    a, b = a or {}, b or {}
    return [k for k in MATCH if a.get(k) is None or a.get(k) != b.get(k)]


def fmt(stat: dict, pattern: str) -> str:
    """``mean [lo, hi]`` of a ``metrics.summarize`` record; ``—`` when there is no value."""
    if stat is None or stat.get("mean") is None:
        return "—"
    lo, hi = stat["interval"]
    core = pattern.format(stat["mean"])
    if lo is None:
        return core
    return f"{core} [{pattern.format(lo)}, {pattern.format(hi)}]"


def _clean(x):
    """JSON-safe and compact: NaN/inf become null, floats keep 5 decimals."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        return _clean(x.item())
    if isinstance(x, float):
        return round(x, 5) if math.isfinite(x) else None
    return x


def write_json(path: pathlib.Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(record), indent=1) + "\n")


# Panels of the learning-curve figure: each method family against the GRPO reference.
PANELS = [
    ("Outcome and step-level baselines",
     ["grpo", "dr_grpo", "rloo", "shrink", "shrink_rloo", "mt_grpo", "gigpo", "hgpo", "value",
      "scalar_prm"]),
    ("TRIAGE: judge reliability", ["grpo", "triage", "triage_p02", "triage_p04", "triage_blind"]),
    ("Bias controls: shaping or credit?", ["grpo", "triage", "triage_shuffled", "explore_only",
                                           "triage_no_explore"]),
    ("TCPO rungs, turn-count baseline, controls",
     ["grpo", "tcpo_retro", "tcpo_hindsight", "tcpo_full", "turn_baseline", "true_adv",
      "true_adv_n4", "true_adv_n16", "shuffled", "tcpo_unnormalized", "tcpo_no_preserve"]),
]
CONTROLS = ("true_adv", "true_adv_n4", "true_adv_n16", "shuffled")


def _band(ys: np.ndarray):
    """Mean over seeds and its bootstrap percentile band, per curve point."""
    stats = [X.bootstrap_interval(row) for row in ys]
    mean = np.array([s[0] for s in stats], float)
    lo = np.array([s[1] if s[1] is not None else s[0] for s in stats], float)
    hi = np.array([s[2] if s[2] is not None else s[0] for s in stats], float)
    return mean, lo, hi


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_task(path: pathlib.Path, task: dict, seeds: int | str) -> None:
    """Held-out success (top) and return (bottom) against training step, one panel per family,
    mean over seeds with a 95% bootstrap band; a legend on every panel."""
    plt = _plt()
    curves, labels = task["curves"], {k: v["label"] for k, v in task["methods"].items()}
    panels = [(t, [m for m in names if m in curves]) for t, names in PANELS]
    panels = [(t, names) for t, names in panels if names]
    rows = [("success", "held-out success rate"), ("ret", "held-out return")]
    fig, axes = plt.subplots(len(rows), len(panels), figsize=(5.4 * len(panels), 3.8 * len(rows)),
                             sharey="row", sharex=True, squeeze=False)
    for r, (key, ylabel) in enumerate(rows):
        for ax, (sub, names) in zip(axes[r], panels, strict=True):
            for name in names:
                steps = np.asarray(curves[name]["steps"])
                mean, lo, hi = _band(np.asarray(curves[name][key], dtype=np.float64))
                style = dict(color="black", lw=2.2) if name == "grpo" else dict(lw=1.5)
                if name in CONTROLS:
                    style["ls"] = "--"
                (line,) = ax.plot(steps, mean, label=labels[name], **style)
                ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.10)
            ax.set_title(sub, fontsize=10)
            if r == len(rows) - 1:
                ax.set_xlabel("training step")
            ax.legend(fontsize=7, loc="best")
            ax.grid(alpha=0.3)
        axes[r][0].set_ylabel(ylabel)
    axes[0][0].set_ylim(-0.02, 1.02)
    k = task["config"]["task"]
    fig.suptitle(f"{task['label']}: L={k['length']}, V={k['alphabet']}, K={k['turns']}; "
                 + (f"{seeds} seeds" if isinstance(seeds, int) else seeds) + ", "
                 "mean and 95% bootstrap band over seeds", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_seeds(path: pathlib.Path, record: dict) -> None:
    """Per-seed held-out success after training, one strip per method and a panel per task:
    every seed a dot (jittered sideways), the mean a bar with its 95% bootstrap interval, the
    share of seeds solved (success >= 0.5) and the seed count under each strip. A mean between
    two clusters of dots is a bimodal method, not a middling one."""
    plt = _plt()
    tasks = record["tasks"]
    fig, axes = plt.subplots(len(tasks), 1, figsize=(max(8.0, 0.62 * max(len(t["methods"]) for t in
                             tasks.values())), 3.6 * len(tasks)), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, task in zip(axes[:, 0], tasks.values(), strict=True):
        names = sorted(task["methods"], key=lambda n: -(task["methods"][n]["success"]["mean"] or 0.0))
        for x, n in enumerate(names):
            st = task["methods"][n]["success"]
            v = np.array([np.nan if u is None else u for u in st["per_seed"]], float)
            v = v[np.isfinite(v)]
            color = "black" if n == "grpo" else "tab:gray" if n in CONTROLS else "tab:blue"
            ax.scatter(x + rng.uniform(-0.18, 0.18, v.size), v, s=11, alpha=0.65, color=color, lw=0)
            if st["mean"] is not None:
                ax.hlines(st["mean"], x - 0.3, x + 0.3, color="tab:red", lw=2)
                lo, hi = st["interval"]
                if lo is not None:
                    ax.vlines(x + 0.34, lo, hi, color="tab:red", lw=1)
            f = X.solved_fraction(v)
            ax.text(x, -0.2, f"{f['k']}/{f['n']}", ha="center", va="top", fontsize=7)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([task["methods"][n]["label"] for n in names], rotation=35, ha="right", fontsize=7)
        ax.set_ylim(-0.3, 1.05)
        ax.set_ylabel("held-out success")
        ax.set_title(f"{task['label']}: per seed (dots), mean and 95% bootstrap interval (red); "
                     "below: seeds solved (success >= 0.5) / seeds", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_credit(path: pathlib.Path, record: dict) -> None:
    """Each method's Pearson and Spearman correlation of its per-turn credit with A*, per task,
    at every checkpoint (each method on its own policy), mean and 95% bootstrap interval over seeds."""
    plt = _plt()
    tasks = list(record["tasks"])
    fig, axes = plt.subplots(1, 2 * len(tasks), figsize=(4.6 * 2 * len(tasks), 7.4), sharey=True,
                             squeeze=False)
    axes = axes[0]
    for t_i, t in enumerate(tasks):
        credit = record["tasks"][t]["lab"]["credit"]
        steps = sorted(credit, key=int)
        names = list(credit[steps[0]])
        y = np.arange(len(names))
        for c_i, metric in enumerate(["pearson", "spearman"]):
            ax = axes[2 * t_i + c_i]
            for s_i, st in enumerate(steps):
                off = (s_i - (len(steps) - 1) / 2) * 0.25
                # a method the lab did not measure at this checkpoint (Config.lab_methods): no mark
                none = {"mean": None, "interval": [None, None]}
                stats = [credit[st][n][metric] if n in credit[st] else none for n in names]
                mean = np.array([s["mean"] if s["mean"] is not None else np.nan for s in stats])
                lo = np.array([s["interval"][0] if s["interval"][0] is not None else np.nan for s in stats])
                hi = np.array([s["interval"][1] if s["interval"][1] is not None else np.nan for s in stats])
                err = np.vstack([mean - lo, hi - mean])
                ax.errorbar(mean, y + off, xerr=np.nan_to_num(err), fmt="o", ms=3.5, capsize=2,
                            label=f"step {st}" + (" (initial policy)" if st == "0" else ""))
            ax.axvline(0, color="grey", lw=0.8)
            ax.set_xlim(-0.5, 1.05)
            ax.set_title(f"{record['tasks'][t]['label']}\n{metric.capitalize()} with A*", fontsize=10)
            ax.grid(alpha=0.3, axis="x")
            # Below the panel: inside it the legend would cover some method's interval.
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.05), ncol=3,
                      frameon=False)
        axes[2 * t_i].set_yticks(y)
        axes[2 * t_i].set_yticklabels([credit[steps[0]][n]["label"] for n in names], fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle("Per-turn credit against the Monte-Carlo ground truth A* = Q - V of the current "
                 "policy (each method on its own policy; mean and 95% bootstrap interval over seeds)",
                 fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_predictive(path: pathlib.Path, record: dict) -> None:
    """Per credit metric at step 0, its rank correlation across methods with final success (and
    return), per task, with the 95% bootstrap interval over seeds (``checkpoint.metric_vs_learning``)."""
    from .tables import PREDICTIVE_LABELS

    tasks = [t for t in record["tasks"].values() if "predictive" in t["lab"]]
    if not tasks:
        return
    plt = _plt()
    metrics = list(tasks[0]["lab"]["predictive"]["metrics"])
    y = np.arange(len(metrics))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.6 * len(tasks), 0.42 * len(metrics) + 1.8),
                             sharey=True, squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        pred = task["lab"]["predictive"]["metrics"]
        for off, outcome, colour in [(-0.17, "success", "C0"), (0.17, "ret", "C1")]:
            st = [pred[m][outcome] for m in metrics]
            mean = np.array([v["mean"] if v["mean"] is not None else np.nan for v in st])
            lo = np.array([v["interval"][0] if v["interval"][0] is not None else np.nan for v in st])
            hi = np.array([v["interval"][1] if v["interval"][1] is not None else np.nan for v in st])
            # The point uses every seed, the interval resamples them: it need not contain the point.
            err = np.maximum(np.nan_to_num(np.vstack([mean - lo, hi - mean])), 0.0)
            ax.errorbar(mean, y + off, xerr=err, fmt="o", ms=4, capsize=2, color=colour,
                        label={"success": "final success", "ret": "final return"}[outcome])
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xlim(-1.05, 1.05)
        ax.grid(alpha=0.3, axis="x")
        n = len(task["lab"]["predictive"]["methods"])
        ax.set_title(f"{task['label']}\nSpearman ρ across {n} methods", fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
    axes[0][0].set_yticks(y)
    axes[0][0].set_yticklabels([PREDICTIVE_LABELS.get(m, m) for m in metrics], fontsize=8)
    axes[0][0].invert_yaxis()
    fig.suptitle("Does a credit metric at the initial policy predict what a method learns? "
                 "(+: better credit, more learning; 95% bootstrap interval over seeds)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)

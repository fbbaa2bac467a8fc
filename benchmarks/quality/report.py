"""Statistics over seeds, the printed table, the JSON record and the learning-curve plot."""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np

# Two-sided 95% Student-t quantiles t_{0.975, df}, df = 1..30 (beyond: the normal 1.96).
_T975 = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
]

# (JSON key, column title, format) of the reported metrics, in table order.
METRICS = [
    ("success", "success", "{:.3f}"),
    ("final_score", "final score", "{:.3f}"),
    ("best_turn", "best-turn score", "{:.3f}"),
    ("turns_to_success", "turns to 1st success", "{:.2f}"),
    ("reached", "ever solved", "{:.3f}"),
    ("length", "turns taken", "{:.2f}"),
]


def summarize(values) -> dict:
    """Mean and 95% Student-t interval over seeds; NaN seeds (no success at all, for
    turns-to-success) are left out and counted."""
    v = np.asarray(values, dtype=np.float64)
    finite = v[np.isfinite(v)]
    n = finite.size
    out = {"per_seed": [None if not np.isfinite(x) else float(x) for x in v], "n": int(n)}
    if n == 0:
        return {**out, "mean": None, "interval": [None, None], "half_width": None}
    mean = float(finite.mean())
    if n == 1:
        half = math.inf
    else:
        t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
        half = float(t * finite.std(ddof=1) / math.sqrt(n))
    interval = [mean - half, mean + half] if math.isfinite(half) else [None, None]
    return {**out, "mean": mean, "interval": interval, "half_width": half if math.isfinite(half) else None}


def fmt(stat: dict, pattern: str) -> str:
    if stat["mean"] is None:
        return "—"
    hw = stat["half_width"]
    core = pattern.format(stat["mean"])
    return core + (" ± " + pattern.format(hw) if hw is not None else "")


def table(results: dict, labels: dict, markdown: bool = False) -> str:
    """The per-method table (mean ± 95% half-width over seeds)."""
    head = ["method"] + [title for _, title, _ in METRICS]
    rows = [
        [labels[name]] + [fmt(res[key], pat) for key, _, pat in METRICS]
        for name, res in results.items()
    ]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(head), "-" * len(line(head))] + [line(r) for r in rows])


def _clean(x):
    """JSON-safe: NaN/inf become null."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(path: pathlib.Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(record), indent=1) + "\n")


# Panels of the learning-curve figure: each method family against the GRPO reference.
PANELS = [
    ("Outcome and step-level baselines",
     ["grpo", "dr_grpo", "rloo", "mt_grpo", "gigpo", "value", "scalar_prm"]),
    ("TRIAGE: judge reliability", ["grpo", "triage", "triage_p02", "triage_p04", "triage_blind"]),
    ("TCPO: ablation rungs", ["grpo", "tcpo_retro", "tcpo_hindsight", "tcpo_full"]),
]


def plot(path: pathlib.Path, curves: dict, labels: dict, title: str) -> None:
    """Held-out success rate against training step, mean over seeds with a 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(t, [m for m in names if m in curves]) for t, names in PANELS]
    panels = [(t, names) for t, names in panels if names]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), sharey=True, squeeze=False)
    for ax, (sub, names) in zip(axes[0], panels):
        for name in names:
            steps = np.asarray(curves[name]["steps"])
            ys = np.asarray(curves[name]["success"], dtype=np.float64)  # [points, seeds]
            mean = ys.mean(axis=1)
            n = ys.shape[1]
            if n > 1:
                t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
                half = t * ys.std(axis=1, ddof=1) / math.sqrt(n)
            else:
                half = np.zeros_like(mean)
            style = dict(color="black", lw=2.2) if name == "grpo" else dict(lw=1.6)
            (line,) = ax.plot(steps, mean, label=labels[name], **style)
            ax.fill_between(steps, mean - half, mean + half, color=line.get_color(), alpha=0.12)
        ax.set_title(sub, fontsize=11)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    axes[0][0].set_ylabel("held-out success rate")
    axes[0][0].set_ylim(-0.02, 1.02)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

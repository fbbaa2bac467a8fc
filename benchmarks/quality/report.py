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
    ("probes", "probes", "{:.2f}"),
    ("regressions", "regressions", "{:.2f}"),
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
    return core + (" ± " + pattern.replace("+", "").format(hw) if hw is not None else "")


def table(results: dict, labels: dict, markdown: bool = False) -> str:
    """The per-method table (mean ± 95% half-width over seeds)."""
    head = ["method"] + [title for _, title, _ in METRICS]
    rows = [
        [labels[name]] + [fmt(res[key], pat) for key, _, pat in METRICS]
        for name, res in results.items()
    ]
    return _render(head, rows, markdown)


ROLES = [("decisive", "decisive"), ("exploration", "exploration"), ("no_progress", "no-progress"),
         ("regression", "regression")]


def role_table(roles: dict, labels: dict, when: str, markdown: bool = False) -> str:
    """Mean advantage (over seeds) given to turns of each oracle role."""
    head = ["method"] + [title for _, title in ROLES]
    rows = [
        [labels[name]] + [fmt(per[when][key], "{:+.2f}") for key, _ in ROLES]
        for name, per in roles.items()
    ]
    return _render(head, rows, markdown)


def _render(head, rows, markdown):
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]

    def line(r):
        cells = zip(r, widths, strict=True)
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(cells))

    return "\n".join([line(head), "-" * len(line(head))] + [line(r) for r in rows])


def _clean(x):
    """JSON-safe and compact: NaN/inf become null, floats keep 5 decimals."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, float):
        return round(x, 5) if math.isfinite(x) else None
    return x


def write_json(path: pathlib.Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(record), indent=1) + "\n")


def replot(json_path: pathlib.Path, png_path: pathlib.Path) -> None:
    """Redraw the learning curves of a ``quality.json`` record."""
    record = json.loads(pathlib.Path(json_path).read_text())
    t = record["config"]["task"]
    labels = {name: res["label"] for name, res in record["methods"].items()}
    name = title(t["length"], t["alphabet"], t["turns"], len(record["seeds"]))
    plot(png_path, record["curves"], labels, name)


def title(length, alphabet, turns, seeds):
    return (f"Toy code-breaking agent: L={length}, V={alphabet}, K={turns}; "
            f"{seeds} seeds, mean ± 95% CI")


# Panels of the learning-curve figure: each method family against the GRPO reference.
PANELS = [
    ("Outcome and step-level baselines",
     ["grpo", "dr_grpo", "rloo", "mt_grpo", "gigpo", "value", "scalar_prm"]),
    ("TRIAGE: judge reliability", ["grpo", "triage", "triage_p02", "triage_p04", "triage_blind"]),
    ("TCPO: ablation rungs", ["grpo", "tcpo_retro", "tcpo_hindsight", "tcpo_full"]),
]


def plot(path: pathlib.Path, curves: dict, labels: dict, title: str) -> None:
    """Held-out success rate (top) and final score (bottom) against training step: mean over
    seeds with a 95% band (clipped to [0, 1])."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(t, [m for m in names if m in curves]) for t, names in PANELS]
    panels = [(t, names) for t, names in panels if names]
    rows = [("success", "held-out success rate"), ("final_score", "held-out final score")]
    fig, axes = plt.subplots(
        len(rows), len(panels), figsize=(5.2 * len(panels), 3.6 * len(rows)), sharey="row",
        sharex=True, squeeze=False,
    )
    for r, (key, ylabel) in enumerate(rows):
        for ax, (sub, names) in zip(axes[r], panels, strict=True):
            for name in names:
                steps = np.asarray(curves[name]["steps"])
                ys = np.asarray(curves[name][key], dtype=np.float64)  # [points, seeds]
                mean = ys.mean(axis=1)
                n = ys.shape[1]
                if n > 1:
                    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
                    half = t * ys.std(axis=1, ddof=1) / math.sqrt(n)
                else:
                    half = np.zeros_like(mean)
                style = dict(color="black", lw=2.2) if name == "grpo" else dict(lw=1.6)
                (line,) = ax.plot(steps, mean, label=labels[name], **style)
                lo, hi = np.clip(mean - half, 0, 1), np.clip(mean + half, 0, 1)
                ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.10)
            if r == 0:
                ax.set_title(sub, fontsize=11)
            if r == len(rows) - 1:
                ax.set_xlabel("training step")
                ax.legend(fontsize=8, loc="best")
            ax.grid(alpha=0.3)
        axes[r][0].set_ylabel(ylabel)
        axes[r][0].set_ylim(-0.02, 1.02)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(record: dict) -> str:
    """The README tables of a ``quality.json`` record."""
    labels = {name: res["label"] for name, res in record["methods"].items()}
    results = {
        name: {k: v for k, v in res.items() if k != "label"} for name, res in record["methods"].items()
    }
    parts = [table(results, labels, markdown=True)]
    if "credit_by_role" in record:
        parts.append(role_table(record["credit_by_role"], labels, "first_chunk", markdown=True))
    return "\n\n".join(parts)


if __name__ == "__main__":  # python -m benchmarks.quality.report demo-results/quality.json
    import sys

    print(markdown(json.loads(pathlib.Path(sys.argv[1]).read_text())))

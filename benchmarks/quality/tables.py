"""The credit lab's result tables, generated from the results JSON (never copied by hand).

    python -m benchmarks.quality.tables [results.json]   # rewrite the tables in the docs

rewrites what lies between ``<!-- lab-results:start -->`` and ``<!-- lab-results:end -->`` in
``docs/guides/credit-lab.md`` and, where the markers exist, in ``README.md``, from
``benchmarks/quality/results/lab.json`` (default). ``tests/test_lab_tables.py`` checks that the
committed documents match the committed JSON.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

from . import metrics as X
from .report import fmt

START, END = "<!-- lab-results:start -->", "<!-- lab-results:end -->"
ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "quality" / "results" / "lab.json"
GUIDE, README = ROOT / "docs" / "guides" / "credit-lab.md", ROOT / "README.md"


def _table(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _last(task) -> str:
    return max(task["lab"]["credit"], key=int)


def held_out(record) -> str:
    parts = []
    cols = [("success", "{:.2f}"), ("ret", "{:.2f}"), ("turns_to_success", "{:.1f}"),
            ("broke_solved", "{:.2f}")]
    for task in record["tasks"].values():
        k = task["config"]["task"]
        head = [f"{task['label']} (L={k['length']}, V={k['alphabet']}, K={k['turns']})",
                "success", "return", "turns to 1st success", "solved then broken"]
        rows = [[m["label"]] + [fmt(m[c], p) for c, p in cols] for m in task["methods"].values()]
        parts.append(_table(head, rows))
    return "\n\n".join(parts)


def credit(record, when: str = "0") -> str:
    tasks = record["tasks"]
    names = list(next(iter(tasks.values()))["lab"]["credit"][when])
    head = ["method"]
    for task in tasks.values():
        short = task["config"]["task"]["kind"]
        head += [f"{short} Pearson", f"{short} Spearman", f"{short} sign agree", f"{short} grad cos"]
    rows = []
    for n in names:
        row = [tasks[next(iter(tasks))]["lab"]["credit"][when][n]["label"]]
        for task in tasks.values():
            c = task["lab"]["credit"][when if when != "last" else _last(task)].get(n)
            row += ["—"] * 4 if c is None else [fmt(c[q], "{:.2f}") for q in
                                                 ("pearson", "spearman", "sign_agree", "grad_cos")]
        rows.append(row)
    return _table(head, rows)


def credit_last(record) -> str:
    tasks = record["tasks"]
    head, rows = ["method"], {}
    for task in tasks.values():
        st = _last(task)
        head += [f"{task['config']['task']['kind']} Pearson (step {st})",
                 f"{task['config']['task']['kind']} grad cos (step {st})"]
        for n, c in task["lab"]["credit"][st].items():
            cells = [fmt(c["pearson"], "{:.2f}"), fmt(c["grad_cos"], "{:.2f}")]
            rows.setdefault(n, [c["label"]]).extend(cells)
    return _table(head, list(rows.values()))


def ground_truth(record) -> str:
    head = ["task", "step (policy)", "N branch pairs", "pairs", "sd of Â*", "mean SE", "noise share SE²/Var",
            "share with abs(Â*) > 2 SE"]
    rows = []
    for task in record["tasks"].values():
        for st, g in sorted(task["lab"]["ground_truth"].items(), key=lambda kv: int(kv[0])):
            rows.append([task["config"]["task"]["kind"], f"{st} ({g['policy']})", str(g["branches"]),
                         fmt(g["pairs"], "{:.0f}"), fmt(g["sd"], "{:.3f}"), fmt(g["se"], "{:.3f}"),
                         fmt(g["noise_share"], "{:.3f}"), fmt(g["clear"], "{:.2f}")])
    return _table(head, rows)


def _paired_difference(a: dict, b: dict) -> dict:
    x = np.array([np.nan if v is None else v for v in a["per_seed"]], float)
    y = np.array([np.nan if v is None else v for v in b["per_seed"]], float)
    return X.summarize(x - y)


TRIAGE_METHOD = {"oracle": "triage", "p02": "triage_p02", "p04": "triage_p04", "blind": "triage_blind"}


def triage(record) -> str:
    head = ["task", "judge", "Cov(c, δ) at step 0", "λ* at step 0", "λ* (credax) at step 0",
            "MSE change at λ=0.2", "Cov(c, δ) last step (GRPO policy)", "TRIAGE − GRPO return"]
    rows = []
    for task in record["tasks"].values():
        tri = task["lab"]["triage"]
        if not tri:
            continue
        st0, st1 = "0", max(tri, key=int)
        for j, v in tri[st0].items():
            m = task["methods"].get(TRIAGE_METHOD[j])
            diff = _paired_difference(m["ret"], task["methods"]["grpo"]["ret"]) if m else None
            rows.append([task["config"]["task"]["kind"], v["label"], fmt(v["cov"], "{:+.3f}"),
                         fmt(v["lambda_star"], "{:+.3f}"), fmt(v["lambda_star_credax"], "{:+.3f}"),
                         fmt(v["mse_change"], "{:+.3f}"), fmt(tri[st1][j]["cov"], "{:+.3f}"),
                         fmt(diff, "{:+.3f}")])
    return _table(head, rows)


def diagnostics(record) -> str:
    tasks = record["tasks"]
    head, rows = ["TCPO part / switch (measured on TCPO + hindsight's policy)"], {}
    for task in tasks.values():
        diag = task["lab"].get("diagnostics", {})
        for st in sorted(diag, key=int):
            head.append(f"{task['config']['task']['kind']} Pearson (step {st})")
            for n, c in diag[st].items():
                rows.setdefault(n, [c["label"]]).append(fmt(c["pearson"], "{:.2f}"))
    width = len(head)
    return _table(head, [r + ["—"] * (width - len(r)) for r in rows.values()])


SHRINK_PAIRS = [("dr_grpo", "shrink"), ("rloo", "shrink_rloo")]


def baselines(record) -> str:
    """The shrinkage baseline's variance reduction on the lab's own rollouts: on GRPO's batch at
    each checkpoint, the mean squared error of the unscaled outcome advantage against A*, plain
    and shrunk, and their paired difference over seeds (all pairs, and the first turn only,
    where the baseline is the whole difference between the credit and A*)."""
    head = ["task", "step", "baseline", "MSE vs A* plain", "shrunk", "shrunk − plain",
            "turn-0 MSE plain", "turn-0 shrunk", "turn-0 shrunk − plain"]
    rows = []
    for task in record["tasks"].values():
        base = task["lab"].get("baselines", {})
        for st in sorted(base, key=int):
            b = base[st]
            for plain, shrunk in SHRINK_PAIRS:
                if plain not in b or shrunk not in b:
                    continue
                p, q = b[plain], b[shrunk]
                rows.append([task["config"]["task"]["kind"], st, p["label"],
                             fmt(p["raw_mse"], "{:.4f}"), fmt(q["raw_mse"], "{:.4f}"),
                             fmt(_paired_difference(q["raw_mse"], p["raw_mse"]), "{:+.4f}"),
                             fmt(p["raw_mse_first"], "{:.4f}"), fmt(q["raw_mse_first"], "{:.4f}"),
                             fmt(_paired_difference(q["raw_mse_first"], p["raw_mse_first"]),
                                 "{:+.4f}")])
    return _table(head, rows)


def summary(record) -> str:
    """The README's short block: per method, held-out success and the correlation of its credit
    with A* at the initial policy, on both tasks."""
    tasks = record["tasks"]
    first = next(iter(tasks.values()))
    head = ["method"]
    for task in tasks.values():
        k = task["config"]["task"]["kind"]
        head += [f"{k}: success", f"{k}: Pearson with A* (step 0)", f"{k}: Spearman (step 0)"]
    rows = []
    for n, m in first["methods"].items():
        row = [m["label"]]
        for task in tasks.values():
            c = task["lab"]["credit"]["0"][n]
            row += [fmt(task["methods"][n]["success"], "{:.2f}"), fmt(c["pearson"], "{:.2f}"),
                    fmt(c["spearman"], "{:.2f}")]
        rows.append(row)
    head_line = (f"`{record['command'].strip()}` ({record['preset']} preset, {len(record['seeds'])} "
                 "seeds; mean [95% bootstrap interval]; generated by `python -m benchmarks.quality.tables`, "
                 "every other table in [the credit lab guide](docs/guides/credit-lab.md)):")
    return head_line + "\n\n" + _table(head, rows)


def render(record) -> str:
    sections = [
        ("Held-out results (mean [95% bootstrap interval] over seeds)", held_out(record)),
        ("Credit against the ground truth at the initial policy (step 0)", credit(record, "0")),
        ("Credit against the ground truth at the last checkpoint (each method on its own policy)",
         credit_last(record)),
        ("Ground-truth estimator: N, standard error and spread of Â*", ground_truth(record)),
        ("TRIAGE's theory measured (δ = A*/σ − A_GRPO on the GRPO batch)", triage(record)),
        ("TCPO investigation: its parts and switched readings against A*", diagnostics(record)),
        ("Shrinkage baselines against A* (on GRPO's batch; return units, no rescaling)",
         baselines(record)),
    ]
    head = (f"Generated by `python -m benchmarks.quality.tables` from `{record['command'].strip()}` "
            f"({record['preset']} preset, seeds {record['seeds']}).")
    return "\n\n".join([head] + [f"**{title}**\n\n{body}" for title, body in sections])


def splice(text: str, block: str) -> str:
    """``text`` with the part between the markers replaced by ``block`` (markers kept)."""
    i, j = text.index(START) + len(START), text.index(END)
    return text[:i] + "\n" + block + "\n" + text[j:]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = pathlib.Path(argv[0]) if argv else RESULTS
    record = json.loads(path.read_text())
    for doc, block in [(GUIDE, render(record)), (README, summary(record))]:
        if doc.exists() and START in doc.read_text():
            doc.write_text(splice(doc.read_text(), block))
            print(f"updated {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

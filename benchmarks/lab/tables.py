"""The credit lab's result tables, generated from the results JSON (never copied by hand).

    python -m benchmarks.lab.tables [results.json [oracle.json]]   # rewrite the tables in the docs

rewrites what lies between ``<!-- lab-results:start -->`` and ``<!-- lab-results:end -->`` in
``docs/guides/credit-lab.md`` and, where the markers exist, in ``README.md``, from
``benchmarks/lab/results/lab.json`` (default). ``tests/test_lab_tables.py`` checks that the
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
RESULTS = ROOT / "benchmarks" / "lab" / "results" / "lab.json"
# The ceiling's own run (``python -m benchmarks.lab --preset oracle``), when committed.
ORACLE_RESULTS = ROOT / "benchmarks" / "lab" / "results" / "oracle" / "lab.json"
GUIDE, README = ROOT / "docs" / "guides" / "credit-lab.md", ROOT / "README.md"


def _table(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _last(task) -> str:
    return max(task["lab"]["credit"], key=int)


def _per_seed(stat) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in stat["per_seed"]], float)


def split_seeds(stat, *, low: float = 0.25, high: float = 0.75) -> bool:
    """A success rate whose seeds fall on both sides of the middle (some below ``low``, some
    above ``high``): a bimodal outcome that a few seeds cannot average into a ranking."""
    v = _per_seed(stat)
    v = v[np.isfinite(v)]
    return bool(v.size and v.min() < low and v.max() > high)


def versus(a: dict, b: dict) -> tuple[str, bool]:
    """``a − b`` paired over seeds, formatted, and whether its interval excludes 0 (resolved)."""
    d = _paired_difference(a, b)
    lo, hi = d["interval"]
    resolved = lo is not None and (lo > 0 or hi < 0)
    return fmt(d, "{:+.2f}"), resolved


def held_out(record) -> str:
    parts = []
    cols = [("success", "{:.2f}"), ("ret", "{:.2f}"), ("turns_to_success", "{:.1f}"),
            ("broke_solved", "{:.2f}")]
    for task in record["tasks"].values():
        k = task["config"]["task"]
        head = [f"{task['label']} (L={k['length']}, V={k['alphabet']}, K={k['turns']})",
                "success", "return", "turns to 1st success", "solved then broken",
                "success − GRPO (paired)", "seeds"]
        ref = task["methods"].get("grpo")
        rows = []
        for name, m in task["methods"].items():
            row = [m["label"]] + [fmt(m[c], p) for c, p in cols]
            if ref is None or name == "grpo":
                row.append("—")
            else:
                diff, resolved = versus(m["success"], ref["success"])
                row.append(diff + ("" if resolved else " (unresolved)"))
            row.append("split" if split_seeds(m["success"]) else "")
            rows.append(row)
        parts.append(_table(head, rows))
    return "\n\n".join(parts)


def headline(record) -> str:
    """The orderings a reader takes away, each with its paired interval over seeds: per task, the
    best method against the runner-up and against GRPO, and the best unbiased method against the
    best shaped one. "unresolved" where the interval includes 0; "split" marks a success rate
    whose seeds are bimodal (some below 0.25, some above 0.75)."""
    head = ["task", "ordering", "success difference (paired over seeds)", "resolved?"]
    rows = []
    for task in record["tasks"].values():
        kinds = task.get("kinds", {})
        ms = {n: m for n, m in task["methods"].items() if not kinds.get(n, {}).get("control")}
        if len(ms) < 2:
            continue
        order = sorted(ms, key=lambda n: -(ms[n]["success"]["mean"] or 0.0))
        pairs = [(order[0], order[1])]
        if "grpo" in ms and order[0] != "grpo":
            pairs.append((order[0], "grpo"))
        unbiased = [n for n in order if kinds.get(n, {}).get("unbiased")]
        shaped = [n for n in order if n in kinds and not kinds[n]["unbiased"]]
        if unbiased and shaped:
            pairs.append((shaped[0], unbiased[0]))
        for a, b in dict.fromkeys(pairs):  # in order, each once
            diff, resolved = versus(ms[a]["success"], ms[b]["success"])
            flags = [x for x in (a, b) if split_seeds(ms[x]["success"])]
            note = "yes" if resolved else "unresolved"
            if flags:
                note += " (split seeds: " + ", ".join(ms[x]["label"] for x in flags) + ")"
            rows.append([task["config"]["task"]["kind"], f"{ms[a]['label']} > {ms[b]['label']}", diff, note])
    return _table(head, rows)


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
            "MSE change at λ=0.2", "Cov(c, δ) last step (GRPO policy)", "seeds (step 0, last)",
            "TRIAGE − GRPO return"]
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
                         f"{v['cov']['n']}, {tri[st1][j]['cov']['n']}", fmt(diff, "{:+.3f}")])
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
                 "seeds; mean [95% bootstrap interval]; generated by `python -m benchmarks.lab.tables`, "
                 "every other table in [the credit lab guide](docs/guides/credit-lab.md)):")
    return head_line + "\n\n" + _table(head, rows)


PREDICTIVE_LABELS = {
    "pearson": "Pearson with A*", "spearman": "Spearman with A*", "sign_agree": "sign agreement",
    "affine_mse": "affine MSE (lower better)", "pearson_unchanged": "Pearson, score-unchanged turns",
    "rank_acc": "within-rollout turn ranking", "pearson_decisive": "Pearson, decisive turns",
    "pearson_exploration": "Pearson, exploration turns", "pearson_no_progress": "Pearson, no-progress turns",
    "pearson_regression": "Pearson, regression turns", "grad_cos": "gradient cosine with g*",
    "grad_relvar": "gradient relative variance (lower better)", "grad_snr": "gradient SNR, batch",
    "grad_t": "gradient progress along g* / its sd",
}


def _interval_above(stat) -> bool:
    lo = stat["interval"][0]
    return lo is not None and lo > 0


def predictive(record) -> str:
    """Per credit metric at step 0: the rank correlation across methods (controls left out) with
    final success and return, per task, 95% bootstrap interval over seeds (``checkpoint.metric_vs_learning``);
    lower-is-better metrics negated, so + always means "better credit, more learning". The last
    column per task leaves out the methods that add a hand-set bonus too (TRIAGE and its bias
    controls, the scalar process reward): among the methods that only estimate credit."""
    tasks = [t for t in record["tasks"].values() if "predictive" in t["lab"]]
    if not tasks:
        return "(no step-0 analysis in this record)"
    head = ["credit metric at step 0"]
    for t in tasks:
        k = t["config"]["task"]["kind"]
        head += [f"{k}: ρ with success", f"{k}: ρ with return", f"{k}: ρ with success, no bonus methods"]
    head.append("predicts success on every task?")
    metrics = list(tasks[0]["lab"]["predictive"]["metrics"])
    rows = []
    for metric in metrics:
        row, every, every_nb = [PREDICTIVE_LABELS.get(metric, metric)], True, True
        for t in tasks:
            v = t["lab"]["predictive"]["metrics"].get(metric)
            nb = t["lab"].get("predictive_no_bonus", {}).get("metrics", {}).get(metric)
            row += ["—", "—"] if v is None else [fmt(v["success"], "{:+.2f}"), fmt(v["ret"], "{:+.2f}")]
            row.append("—" if nb is None else fmt(nb["success"], "{:+.2f}"))
            every &= v is not None and _interval_above(v["success"])
            every_nb &= nb is not None and _interval_above(nb["success"])
        verdict = "yes" if every else "no"
        if every_nb and not every:
            verdict += " (yes without the bonus methods)"
        row.append(verdict)
        rows.append(row)
    first = tasks[0]["lab"]
    n = len(first["predictive"]["methods"])
    n_nb = len(first.get("predictive_no_bonus", {}).get("methods", []))
    return (f"Across {n} methods (the controls left out); \"no bonus methods\": the {n_nb} that add "
            "no hand-set per-turn bonus.\n\n" + _table(head, rows))


MORE = [("pearson_unchanged", "Pearson, unchanged score"), ("rank_acc", "turn ranking"),
        ("grad_snr", "grad SNR (batch)"), ("grad_t", "grad progress / sd")]


def credit_more(record, when: str = "0") -> str:
    """The metrics added to explain learning, at step 0."""
    tasks = record["tasks"]
    head, rows = ["method"], {}
    for task in tasks.values():
        k = task["config"]["task"]["kind"]
        head += [f"{k} {title}" for _, title in MORE]
        for n, c in task["lab"]["credit"][when].items():
            cells = [fmt(c.get(q), "{:.2f}") for q, _ in MORE]
            rows.setdefault(n, [c["label"]]).extend(cells)
    return _table(head, list(rows.values()))


def roles_table(record, when: str = "0") -> str:
    """Per-role Pearson with A* and per-role bias (``metrics.residual_bias``: mean credit A* does
    not explain, in the method's credit sd; + = the method favours that role's turns)."""
    from .metrics import ROLE_NAMES

    short = {"decisive": "D", "exploration": "E", "no_progress": "N", "regression": "R"}
    parts = []
    for task in record["tasks"].values():
        k = task["config"]["task"]["kind"]
        head = [f"{k}: method"] + [f"Pearson {short[r]}" for r in ROLE_NAMES] + \
               [f"bias {short[r]}" for r in ROLE_NAMES]
        rows = []
        for c in task["lab"]["credit"][when].values():
            rows.append([c["label"]] + [fmt(c.get(f"pearson_{r}"), "{:.2f}") for r in ROLE_NAMES]
                        + [fmt(c.get(f"bias_{r}"), "{:+.2f}") for r in ROLE_NAMES])
        parts.append(_table(head, rows))
    return "\n\n".join(parts)


TURN_COUNT = ("grpo", "mt_grpo", "tcpo_retro", "tcpo_hindsight", "tcpo_full", "turn_baseline",
              "true_adv", "true_adv_n16")


def turn_count(record) -> str:
    """The turn-count bias of per-(prompt, turn) baselines (verl RFC #7244): the credit a method
    gives to continuing over stopping beyond what A* says (``length_bonus``), at each checkpoint."""
    head = ["task", "step", "method", "bias on continue turns", "bias on stop turns",
            "length bonus (continue − stop)"]
    rows = []
    for task in record["tasks"].values():
        for st in sorted(task["lab"]["credit"], key=int):
            credit = task["lab"]["credit"][st]
            for n in TURN_COUNT:
                c = credit.get(n)
                if c is None or "length_bonus" not in c:
                    continue
                rows.append([task["config"]["task"]["kind"], st, c["label"],
                             fmt(c["bias_continue"], "{:+.3f}"), fmt(c["bias_stop"], "{:+.3f}"),
                             fmt(c["length_bonus"], "{:+.3f}")])
    return _table(head, rows)


def oracle(record) -> str:
    """The ceiling run: per method, held-out success and return, and the Pearson correlation with
    the lab's A* of the credit the method trains on (the true-advantage controls' own N-pair
    estimate, measured on the checkpoint batch with its own branch noise), at step 0 and last."""
    head = ["task", "method", "success", "return", "success − GRPO (paired)",
            "training credit's Pearson with A* (step 0)", "… (last checkpoint)"]
    rows = []
    for task in record["tasks"].values():
        last = _last(task)
        ref = task["methods"].get("grpo")
        for n, m in task["methods"].items():
            diff = "—" if ref is None or n == "grpo" else versus(m["success"], ref["success"])[0]
            c0, c1 = task["lab"]["credit"]["0"].get(n), task["lab"]["credit"][last].get(n)
            rows.append([task["config"]["task"]["kind"], m["label"], fmt(m["success"], "{:.2f}"),
                         fmt(m["ret"], "{:.2f}"), diff,
                         fmt(c0["pearson"], "{:.2f}") if c0 else "—",
                         fmt(c1["pearson"], "{:.2f}") if c1 else "—"])
    return _table(head, rows)


def render(record, oracle_record=None) -> str:
    sections = [
        ("Held-out results (mean [95% bootstrap interval] over seeds)", held_out(record)),
        ("Headline orderings, paired over seeds", headline(record)),
        ("Which credit metric predicts learning (step 0; Spearman ρ across methods, 95% bootstrap "
         "interval over seeds)", predictive(record)),
        ("Credit against the ground truth at the initial policy (step 0)", credit(record, "0")),
        ("More credit metrics at the initial policy (step 0)", credit_more(record, "0")),
        ("Per role at the initial policy (step 0): Pearson with A* and bias", roles_table(record, "0")),
        ("Turn-count bias: credit for continuing over stopping beyond A*", turn_count(record)),
        ("Credit against the ground truth at the last checkpoint (each method on its own policy)",
         credit_last(record)),
        ("Ground-truth estimator: N, standard error and spread of Â*", ground_truth(record)),
        ("TRIAGE's theory measured (δ = A*/σ − A_GRPO on the GRPO batch)", triage(record)),
        ("TCPO investigation: its parts and switched readings against A*", diagnostics(record)),
        ("Shrinkage baselines against A* (on GRPO's batch; return units, no rescaling)",
         baselines(record)),
    ]
    if oracle_record is not None:
        sections.insert(1, (f"The ceiling: true advantage at N = 1, 4, 16 branch pairs (`"
                            f"{oracle_record['command'].strip()}`, seeds {oracle_record['seeds']})",
                            oracle(oracle_record)))
    head = (f"Generated by `python -m benchmarks.lab.tables` from `{record['command'].strip()}` "
            f"({record['preset']} preset, seeds {record['seeds']}).")
    t = record.get("timing", {})
    if "wall_s" in t:
        head += (f" Run time: wall {t['wall_s']:.0f} s, process CPU (user+sys) {t['cpu_s']:.0f} s"
                 + (f", XLA compilation {t['compile_wall_s']:.0f} s wall summed over programs"
                    if t.get("compile_wall_s") is not None else "")
                 + f", {record['environment']['cpu_count']} cores.")
    return "\n\n".join([head] + [f"**{title}**\n\n{body}" for title, body in sections])


def splice(text: str, block: str) -> str:
    """``text`` with the part between the markers replaced by ``block`` (markers kept)."""
    i, j = text.index(START) + len(START), text.index(END)
    return text[:i] + "\n" + block + "\n" + text[j:]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = pathlib.Path(argv[0]) if argv else RESULTS
    record = json.loads(path.read_text())
    oracle_path = pathlib.Path(argv[1]) if len(argv) > 1 else ORACLE_RESULTS
    oracle_record = json.loads(oracle_path.read_text()) if oracle_path.exists() else None
    for doc, block in [(GUIDE, render(record, oracle_record)), (README, summary(record))]:
        if doc.exists() and START in doc.read_text():
            doc.write_text(splice(doc.read_text(), block))
            print(f"updated {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

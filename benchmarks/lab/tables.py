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
# The machine-independence check's preset (``--preset ci``): its committed run, the same run with
# every training credit multiplied by ``1 + 1e-6·z`` (``--perturb 1e-6``), and the ordering a
# fresh run must find again (tests/test_lab_ci.py).
CI_RESULTS = ROOT / "benchmarks" / "lab" / "results" / "ci" / "lab.json"
CI_PERTURBED = ROOT / "benchmarks" / "lab" / "results" / "ci-perturb" / "lab.json"
CI_ORDERING = ROOT / "benchmarks" / "lab" / "results" / "ci" / "ordering.json"
# The turn-count-unbiased baseline's mechanism probe (``--preset puzzle``).
PUZZLE_RESULTS = ROOT / "benchmarks" / "lab" / "results" / "puzzle" / "lab.json"
# ``make demo``'s command run again on another processor (the committed run's on another): what a
# reader's own machine should reproduce, compared by ``moved`` with ``columns`` naming the CPUs.
MACHINE_RESULTS = ROOT / "benchmarks" / "lab" / "results" / "machine" / "lab.json"


def _load(path):
    return json.loads(path.read_text()) if path.exists() else None


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


def _solved(stat) -> str:
    """Share of seeds with success >= 0.5 and its Wilson interval (``metrics.solved_fraction``)."""
    f = X.solved_fraction(_per_seed(stat))
    if not f["n"]:
        return "—"
    return f"{f['k']}/{f['n']} [{f['interval'][0]:.2f}, {f['interval'][1]:.2f}]"


def held_out(record) -> str:
    parts = []
    cols = [("success", "{:.2f}"), ("ret", "{:.2f}"), ("turns_to_success", "{:.1f}"),
            ("broke_solved", "{:.2f}")]
    for task in record["tasks"].values():
        k = task["config"]["task"]
        head = [f"{task['label']} (L={k['length']}, V={k['alphabet']}, K={k['turns']})",
                "seeds", "success", "seeds solved (≥ 0.5) [Wilson]", "return", "turns to 1st success",
                "solved then broken", "success − GRPO (paired)", "split"]
        ref = task["methods"].get("grpo")
        rows = []
        for name, m in task["methods"].items():
            row = [m["label"], str(len(m["success"]["per_seed"])), fmt(m["success"], "{:.2f}"),
                   _solved(m["success"])] + [fmt(m[c], p) for c, p in cols[1:]]
            if ref is None or name == "grpo":
                row.append("—")
            else:
                d = _paired_difference(m["success"], ref["success"])
                row.append(fmt(d, "{:+.2f}") + f" (n={d['n']})" + ("" if d["resolved"] else " unresolved"))
            row.append("split" if split_seeds(m["success"]) else "")
            rows.append(row)
        parts.append(_table(head, rows))
    return "\n\n".join(parts)


def _need(d) -> str:
    n = d["seeds_needed"]
    if d["resolved"] or n is None or np.isnan(n):
        return "—"
    return "> 10,000" if n > 1e4 else f"~{n:.0f}"


def headline(record) -> str:
    """The orderings a reader takes away, each with its paired interval over the seeds both
    methods have: per task, the best method against the runner-up and against GRPO, and the best
    unbiased method against the best shaped one. "tie" where the interval includes 0, with the
    seeds a resolution would need (``metrics.seeds_to_resolve``: ``(1.96·sd/|mean|)²`` from the
    paired differences' sd); "split" marks a success rate whose seeds are bimodal (some below
    0.25, some above 0.75)."""
    head = ["task", "ordering", "success difference (paired over seeds)", "paired seeds", "resolved?",
            "seeds to resolve"]
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
            d = _paired_difference(ms[a]["success"], ms[b]["success"])
            flags = [x for x in (a, b) if split_seeds(ms[x]["success"])]
            note = "yes" if d["resolved"] else "tie"
            if flags:
                note += " (split seeds: " + ", ".join(ms[x]["label"] for x in flags) + ")"
            rows.append([task["config"]["task"]["kind"], f"{ms[a]['label']} > {ms[b]['label']}",
                         fmt(d, "{:+.2f}"), str(d["n"]), note, _need(d)])
    return _table(head, rows)


def pairs_table(record, names=None) -> str:
    """Every pair of the methods with the most seeds (the headline set), paired over their
    seeds: the difference in held-out success, its sd, whether the 95% interval resolves it and,
    for a tie, the seeds a resolution would need. Ordered within a task by the difference."""
    head = ["task", "a − b", "success difference", "sd of the paired differences", "paired seeds",
            "resolved?", "seeds to resolve"]
    rows = []
    for task in record["tasks"].values():
        ms = task["methods"]
        n_max = max(len(m["success"]["per_seed"]) for m in ms.values())
        pick = [n for n in ms if len(ms[n]["success"]["per_seed"]) == n_max] if names is None else names
        pick = sorted(pick, key=lambda n: -(ms[n]["success"]["mean"] or 0.0))
        for i, a in enumerate(pick):
            for b in pick[i + 1:]:
                d = _paired_difference(ms[a]["success"], ms[b]["success"])
                rows.append([task["config"]["task"]["kind"], f"{ms[a]['label']} − {ms[b]['label']}",
                             fmt(d, "{:+.3f}"), "—" if d["sd"] is None else f"{d['sd']:.3f}", str(d["n"]),
                             "yes" if d["resolved"] else "tie", _need(d)])
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
    """``a − b`` over the seeds both have (``metrics.paired_difference``)."""
    return X.paired_difference(a["per_seed"], b["per_seed"])


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
    head_line = (f"`{record['command'].strip()}` ({record['preset']} preset, {seed_note(record)}; "
                 "mean [95% bootstrap interval]; generated by `python -m benchmarks.lab.tables`, "
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


def _flat(x, prefix=""):
    """``{path: number}`` of every number (``None`` kept) in a nested record."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            out.update(_flat(v, f"{prefix}/{k}"))
        return out
    if isinstance(x, list):
        out = {}
        for i, v in enumerate(x):
            out.update(_flat(v, f"{prefix}[{i}]"))
        return out
    return {prefix: x} if x is None or isinstance(x, int | float) and not isinstance(x, bool) else {}


def _compare(a, b) -> tuple[int, int, float]:
    """``(equal, total, max |a − b|)`` over the numbers two records share."""
    fa, fb = _flat(a), _flat(b)
    keys = sorted(set(fa) & set(fb))
    diffs = [abs(fa[k] - fb[k]) for k in keys if fa[k] is not None and fb[k] is not None]
    equal = sum(fa[k] == fb[k] for k in keys)
    return equal, len(keys), max(diffs, default=0.0)


def moved(a, b, columns=("unperturbed", "perturbed (1 + ε·z)"), most_seeds: bool = False) -> str:
    """What a change of the last bits moves: two runs of one preset (``b`` with ``--perturb``, or
    the same command on another machine; ``columns`` name the two) compared value for value. The
    step-0 lab (ground truth and every method's credit metrics, taken before any training step)
    against the trained outcomes (held-out metrics per seed and their means), and whether each
    paired ordering of ``a`` keeps its verdict in ``b`` (``most_seeds``: the pairs of the methods
    with the most seeds only, the headline methods of the demo)."""
    head = ["task", "what", "values equal", "largest difference"]
    rows = []
    for t, ta in a["tasks"].items():
        tb = b["tasks"][t]
        per_seed = lambda task: {n: m["success"]["per_seed"] for n, m in task["methods"].items()}
        for what, xa, xb in [
            ("step 0: ground truth (Â* quality)", ta["lab"]["ground_truth"].get("0"),
             tb["lab"]["ground_truth"].get("0")),
            ("step 0: every method's credit metrics", ta["lab"]["credit"].get("0"),
             tb["lab"]["credit"].get("0")),
            ("trained: held-out success per seed", per_seed(ta), per_seed(tb)),
            ("trained: every held-out metric (per seed, means, intervals)", ta["methods"], tb["methods"]),
        ]:
            if xa is None or xb is None:
                continue
            eq, n, mx = _compare(xa, xb)
            rows.append([t, what, f"{eq} / {n}", f"{mx:.3g}"])
    parts = [_table(head, rows)]
    head = ["task", "a − b", *columns, "same verdict?"]
    rows = []
    for t, ta in a["tasks"].items():
        tb, names = b["tasks"][t], list(ta["methods"])
        if most_seeds:
            top = max(ta["seeds"].values())
            names = [n for n in names if ta["seeds"][n] == top]
        for i, x in enumerate(names):
            for y in names[i + 1:]:
                da = _paired_difference(ta["methods"][x]["success"], ta["methods"][y]["success"])
                db = _paired_difference(tb["methods"][x]["success"], tb["methods"][y]["success"])
                same = da["resolved"] == db["resolved"] and (
                    not da["resolved"] or (da["mean"] > 0) == (db["mean"] > 0))
                rows.append([t, f"{ta['methods'][x]['label']} − {ta['methods'][y]['label']}",
                             fmt(da, "{:+.3f}") + ("" if da["resolved"] else " (tie)"),
                             fmt(db, "{:+.3f}") + ("" if db["resolved"] else " (tie)"),
                             "yes" if same else "no"])
    parts.append(_table(head, rows))
    return "\n\n".join(parts)


def exploration_split(record, task_name: str = "probe") -> str:
    """Is a bimodal success a property of exploration? Per method on ``task_name``, its seeds
    split into solved (held-out success >= 0.5) and not, and each group's mean number of
    exploration turns per held-out episode (``probes``: turns that revealed a new symbol) and
    turns taken; the rank correlation across all the method's seeds of exploration turns with
    success. Methods with every seed on one side show one group only."""
    task = record["tasks"].get(task_name)
    if task is None:
        return ""
    head = ["method", "seeds solved", "exploration turns: solved seeds",
            "exploration turns: other seeds", "turns taken: solved", "turns taken: other",
            "Spearman(exploration, success) over seeds"]
    rows = []
    for m in task["methods"].values():
        succ, probes, length = (_per_seed(m[k]) for k in ("success", "probes", "length"))
        solved = succ >= 0.5
        mean = lambda x, w: f"{np.mean(x[w]):.2f}" if w.any() else "—"
        ok = np.isfinite(succ) & np.isfinite(probes)
        rho = (X.spearman(probes[ok], succ[ok]) if ok.sum() >= 3 and np.ptp(succ[ok]) > 0
               and np.ptp(probes[ok]) > 0 else float("nan"))
        rows.append([m["label"], f"{int(solved.sum())}/{len(succ)}", mean(probes, solved),
                     mean(probes, ~solved), mean(length, solved), mean(length, ~solved),
                     "—" if np.isnan(rho) else f"{rho:+.2f}"])
    return _table(head, rows)


def puzzle(record) -> str:
    """Per method of the puzzle run: held-out success, and at step 0 (one policy and batch per
    seed for all) the credit's Pearson with ``A*``, with the state value ``V̂(h)``, the gradient
    cosine with ``g*``, the batch gradient's progress along ``g*`` over its sd, the length bonus."""
    head = ["task", "method", "seeds", "success", "Pearson with A*", "Pearson with the state value",
            "gradient cosine", "gradient progress / sd", "length bonus"]
    rows = []
    for task in record["tasks"].values():
        c = task["lab"]["credit"]["0"]
        for n, m in task["methods"].items():
            rows.append([task["config"]["task"]["kind"], m["label"], str(len(m["success"]["per_seed"])),
                         fmt(m["success"], "{:.3f}"), fmt(c[n]["pearson"], "{:.2f}"),
                         fmt(c[n]["pearson_state_value"], "{:+.2f}"), fmt(c[n]["grad_cos"], "{:.2f}"),
                         fmt(c[n]["grad_t"], "{:.2f}"), fmt(c[n]["length_bonus"], "{:+.2f}")])
    return _table(head, rows) + "\n\n" + pairs_table(record)


def seed_note(record) -> str:
    """Which methods ran on how many seeds (seeds ``0..n-1``; the same on every task)."""
    task = next(iter(record["tasks"].values()))
    counts = task.get("seeds") or {n: len(m["success"]["per_seed"]) for n, m in task["methods"].items()}
    by = {}
    for n, c in counts.items():
        by.setdefault(c, []).append(task["methods"][n]["label"])
    if len(by) == 1:
        return f"seeds 0..{next(iter(by)) - 1} for every method"
    return "; ".join(f"seeds 0..{c - 1} for {', '.join(ls) if c == max(by) else 'the rest'}"
                     for c, ls in sorted(by.items(), reverse=True))


def render(record, oracle_record=None, ci=None, puzzle_record=None, machine_record=None) -> str:
    """Every table of the guide from the demo's record, the ceiling's (``oracle_record``), the
    machine-independence pair ``ci = (run, perturbed run)`` of ``--preset ci``, the
    turn-baseline probe's (``puzzle_record``) and the demo's command on another processor
    (``machine_record``)."""
    sections = [
        ("Held-out results (mean [95% bootstrap interval] over seeds)", held_out(record)),
        ("Headline orderings, paired over seeds", headline(record)),
        ("Every pair of the headline methods (the most seeds), paired over seeds", pairs_table(record)),
        ("Probe/write: solved seeds against exploration (held-out, per seed)", exploration_split(record)),
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
    if puzzle_record is not None:
        title = (f"The turn-count-unbiased baseline's mechanism probe (`{puzzle_record['command'].strip()}`"
                 f", {seed_note(puzzle_record)}; step-0 credit metrics)")
        sections.append((title, puzzle(puzzle_record)))
    if ci is not None:
        a, b = ci
        sections.append((f"Machine independence: `{a['command'].strip()}` against `{b['command'].strip()}` "
                         f"({seed_note(a)})", moved(a, b)))
    if machine_record is not None:
        cpu = lambda r: r["environment"].get("cpu") or "the committed run's processor"
        columns = (f"committed run ({cpu(record)})", f"this run ({cpu(machine_record)})")
        sections.append((f"Another machine: `{machine_record['command'].strip()}` on "
                         f"{cpu(machine_record)} against the committed run "
                         f"({seed_note(machine_record)})",
                         moved(record, machine_record, columns, most_seeds=True)))
    head = (f"Generated by `python -m benchmarks.lab.tables` from `{record['command'].strip()}` "
            f"({record['preset']} preset; {seed_note(record)}).")
    t = record.get("timing", {})
    if "wall_s" in t:
        head += (f" Run time: wall {t['wall_s']:.0f} s, process CPU (user+sys) {t['cpu_s']:.0f} s"
                 + (f", XLA compilation {t['compile_wall_s']:.0f} s wall summed over programs"
                    if t.get("compile_wall_s") is not None else "")
                 + f", {record['environment']['cpu_count']} cores.")
    return "\n\n".join([head] + [f"**{title}**\n\n{body}" for title, body in sections if body])


def _verdict_part(task, name, other, what) -> str:
    d = _paired_difference(task["methods"][name]["success"], task["methods"][other]["success"])
    if d["mean"] is None:
        return f"vs {what}: no paired seeds"
    text = f"vs {what} {fmt(d, '{:+.3f}')} over {d['n']} paired seeds"
    if d["resolved"]:
        return text + (", resolved: better" if d["mean"] > 0 else ", resolved: worse")
    return text + f", unresolved (seeds to resolve: {_need(d)})"


def verdicts(record, names, exact=None) -> list[str]:
    """One line per user method and task: its held-out success paired with GRPO's and with the
    best other method's (by mean success; the controls and the user's methods left out), the
    interval, resolved or not (and roughly how many seeds would resolve it), and the exact tier
    (``exact``: name -> a short summary of its ``benchmarks.lab.exact.user_rows``; absent: not run)."""
    lines = []
    for t, task in record["tasks"].items():
        kinds = task.get("kinds", {})
        others = [n for n in task["methods"] if n not in names and not kinds.get(n, {}).get("control")]
        best = max(others, key=lambda n: task["methods"][n]["success"]["mean"] or 0.0, default=None)
        for name in names:
            m = task["methods"][name]
            parts = [f"success {fmt(m['success'], '{:.3f}')} ({len(m['success']['per_seed'])} seeds)"]
            if "grpo" in task["methods"]:
                parts.append(_verdict_part(task, name, "grpo", "GRPO"))
            if best is not None and best != "grpo":
                parts.append(_verdict_part(task, name, best, f"the best, {task['methods'][best]['label']},"))
            parts.append("exact tier: " + ((exact or {}).get(name) or "not run"))
            lines.append(f"verdict [{t}] {m['label']}: " + "; ".join(parts))
    lines += [advice(record, name) for name in names]
    return lines


# The guide's "Choosing a method" (docs/guides/credit-lab.md), one sentence per pattern of a
# method's verdicts against GRPO on the two tasks: (refine, probe) each "better", "worse" or "tie".
ADVICE = {
    ("better", "better"): "above GRPO on both tasks: no built-in method of the demo is (TCPO + "
    "hindsight and MT-GRPO win refine and lose probe, TRIAGE wins probe and ties MT-GRPO on "
    "refine); check the exact tier's cosines before trusting it",
    ("better", "worse"): "like the score-change methods (TCPO + hindsight, MT-GRPO): use it where "
    "a verifier scores every turn (refinement) — shown on the toy refine task, not settled for a "
    "language-model agent (the transformer tier: TCPO + hindsight ties or trails GRPO); where "
    "turns gather information that no score rewards, pay for exploration instead (TRIAGE with a "
    "judge that labels it, or an exploration bonus)",
    ("better", "tie"): "helps on refinement like the score-change methods (toy tier; not settled "
    "for a language-model agent), not settled on information gathering at these seeds",
    ("worse", "better"): "like TRIAGE / the exploration bonus on probe: it pays for "
    "information-gathering turns; on refinement the score-change methods are ahead",
    ("tie", "better"): "pays for information-gathering turns (probe) like TRIAGE; not settled on "
    "refinement at these seeds",
}


def advice(record, name) -> str:
    """One line: what the method's verdicts against GRPO say about when to use it, in the words
    of the guide's "Choosing a method" section (``ADVICE``), or "not settled"."""
    state = {}
    for t in ("refine", "probe"):
        task = record["tasks"].get(t)
        if task is None or "grpo" not in task["methods"] or name not in task["methods"]:
            continue
        d = _paired_difference(task["methods"][name]["success"], task["methods"]["grpo"]["success"])
        state[t] = ("tie" if d["mean"] is None or not d["resolved"] else
                    "better" if d["mean"] > 0 else "worse")
    label = next((task["methods"][name]["label"] for task in record["tasks"].values()
                  if name in task["methods"]), name)
    key = (state.get("refine", "tie"), state.get("probe", "tie"))  # not run: nothing resolved
    missing = [t for t in ("refine", "probe") if t not in state]
    if key in ADVICE:
        text = ADVICE[key]
    elif "better" not in key and "worse" in key:
        text = "below GRPO where resolved: GRPO (or RLOO, unbiased in the exact tier) is the safer choice"
    else:
        text = ("not settled: no difference with GRPO resolved at these seeds (the lines above give "
                "the seeds a resolution would need)")
    if missing:
        text += f"; not run on {', '.join(missing)}"
    return f"advice {label}: {text} (docs/guides/credit-lab.md, Choosing a method)"


def ci_records():
    """The committed ``--preset ci`` run and its perturbed twin, or None if either is missing."""
    if not (CI_RESULTS.exists() and CI_PERTURBED.exists()):
        return None
    return json.loads(CI_RESULTS.read_text()), json.loads(CI_PERTURBED.read_text())


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
    guide = render(record, oracle_record, ci_records(), _load(PUZZLE_RESULTS), _load(MACHINE_RESULTS))
    for doc, block in [(GUIDE, guide), (README, summary(record))]:
        if doc.exists() and START in doc.read_text():
            doc.write_text(splice(doc.read_text(), block))
            print(f"updated {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

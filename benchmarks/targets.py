"""The project's speed and memory targets (issue 18) and the side-by-side table of two runs.

``credax.bench`` ships the harness, the cases and the report; the goals credax sets itself live
here: :func:`evaluate_targets` reads them from one run's records (``benchmarks/speed.py`` passes
it to the harness, so ``make bench`` writes them into ``benchmarks/results/speed-cpu.*``), the
``targets`` preset times only the sizes they are read at, and the command below writes
``benchmarks/results/targets.md``:

    python -m benchmarks.targets NOHUGE.json HUGE.json   # the JSON of `make bench-nohuge` / `make bench`
    python -m benchmarks.speed --preset targets --threads 1   # a run of only the targets' sizes
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from credax.bench.harness import fmt_bytes, fmt_time
from credax.bench.report import load_label, target_value

OUT = Path(__file__).resolve().parent / "results" / "targets.md"

# `--preset targets`: the default preset with only the sizes the targets are read at.
PRESETS = {"targets": ("default", dict(grpo_sizes=[65536], tcpo_sizes=[(4096, 16)],
                                       token_lengths=[16384]),
                       "only the sizes the targets are read at")}


def _find(cases, case, **params):
    for rec in cases:
        if rec["case"] == case and all(rec["params"].get(k) == v for k, v in params.items()):
            return rec
    return None


def evaluate_targets(cases: list[dict], sweep: list[dict]) -> list[dict]:
    """Issue 18's targets, each a ratio from this one run (``None`` where its case did not run).

    ``cases`` and ``sweep``: the records of one ``credax.bench`` run (``data["cases"]``,
    ``data["sweep"]``); passed to ``credax.bench`` as ``main(targets=evaluate_targets)``.
    """
    targets = []

    def ratio(name, case, params, key, op, threshold):
        rec = _find(cases, case, **params)
        value = spread = None
        if rec is not None and key in rec["ratios"]:
            r = rec["ratios"][key]
            value, spread = r["median"], [r["q25"], r["q75"]]
        met = None if value is None else (value <= threshold if op == "<=" else value >= threshold)
        # The threshold inside the middle half of the per-repetition ratios: this run's verdict
        # is not a stable one (another run on the same host can give the other verdict).
        unsettled = spread is not None and spread[0] <= threshold <= spread[1]
        targets.append({"target": name, "case": case, "params": params, "ratio": key,
                        "measured": value, "spread": spread, "unsettled": unsettled, "op": op,
                        "threshold": threshold, "met": met})

    t = {"B": 4096, "K": 16}
    ratio("TCPO B=4096 K=16: torch turn loop / credax, contiguous layout (speed-up)", "tcpo", t,
          "torch_turn_loop/credax_contiguous", ">=", 20.0)
    ratio("TCPO B=4096 K=16: torch turn loop / credax in a jitted step, contiguous (speed-up)",
          "tcpo", t, "torch_turn_loop/credax_contiguous_step", ">=", 20.0)
    ratio("TCPO B=4096 K=16: torch turn loop / credax, raw ids (speed-up)", "tcpo", t,
          "torch_turn_loop/credax_raw_ids", ">=", 5.0)
    ratio("TCPO B=4096 K=16: torch turn loop / credax in a jitted step, raw ids (speed-up)",
          "tcpo", t, "torch_turn_loop/credax_raw_ids_step", ">=", 5.0)
    ratio("policy_loss 8M tokens: [B,K] turn advantages / [B,T] token advantages", "policy_loss",
          {"T": 16384}, "turn_advantages/token_advantages", "<=", 1.25)
    ratio("GRPO B=65536: credax (raw ids) / torch vectorised unique", "grpo", {"B": 65536},
          "credax_raw_ids/torch_vectorized", "<=", 1.5)
    ratio("GRPO B=65536: credax (Groups) / torch vectorised unique", "grpo", {"B": 65536},
          "credax_groups/torch_vectorized", "<=", 1.0)
    ratio("TRIAGE+broadcast 8M tokens: credax / copy floor", "triage_broadcast", {"T": 16384},
          "credax_triage_broadcast/copy_floor", "<=", 2.5)
    for vocab in (32768, 131072):
        v = f"V={vocab // 1024}k"
        for impl, what in (("credax_fused", "credax fused"), ("credax_chunked", "credax chunked")):
            ratio(f"LM head {v}: {what} value_and_grad / the 3 LM-head GEMMs (matmul floor)",
                  "lm_head", {"V": vocab}, f"{impl}/matmul_floor", "<=", 1.3)
            ratio(f"LM head {v}: torch chunked (Liger style) / {what} (speed-up)", "lm_head",
                  {"V": vocab}, f"torch_chunked/{impl}", ">=", 1.0)
        rec = _find(cases, "lm_head", V=vocab)
        for impl, what in (("credax_fused", "credax fused"), ("credax_chunked", "credax chunked"),
                           ("credax_nnx_fused", "credax.nnx fused"), ("credax_nnx", "credax.nnx")):
            mem = (rec or {}).get("memory", {}).get(impl, {})
            value = mem.get("temp_chunks")
            targets.append({"target": f"LM head {v}: {what} value_and_grad compiled temporaries, "
                            "in chunks of logits", "case": "lm_head", "params": {"V": vocab},
                            "measured": value, "op": "<=", "threshold": 2.0,
                            "met": None if value is None else value <= 2.0,
                            "without_unembedding_buffer": mem.get("temp_less_unembedding_chunks")})
    tc = [r for r in sweep if r["fn"] == "tcpo_advantages"]
    value = tc[0]["compile_total_s"] if tc else None
    targets.append({"target": "compile of tcpo_advantages (trace + lower + XLA), seconds",
                    "case": "sweep", "measured": value, "op": "<=", "threshold": 0.5,
                    "met": None if value is None else value <= 0.5,
                    "cpu_s": tc[0]["first_call_cpu_s"] if tc else None})
    cached = tc[0].get("persistent_cache") if tc else None
    targets.append({"target": "not a target, for the row above: first call of groups + "
                    "tcpo_advantages in a new process with JAX's persistent compilation cache "
                    "warm (trace + lower + cache load + run), seconds",
                    "case": "sweep", "measured": None if cached is None
                    else cached["warm_first_call_s"], "op": "(info)", "threshold": "",
                    "met": None, "cold_first_call_s": None if cached is None
                    else cached["cold_first_call_s"]})
    recompiled = [r["fn"] for r in sweep if r["recompiled"]]
    targets.append({"target": "no recompilation on a second call or a changed hyperparameter",
                    "case": "sweep", "measured": recompiled, "op": "==", "threshold": [],
                    "met": None if not sweep else not recompiled})
    return targets


def targets_markdown(runs: dict[str, dict]) -> str:
    """The targets of several runs side by side (e.g. with and without huge pages), with the
    roofline fractions of TCPO and of the broadcast and each run's command and machine state."""
    labels = list(runs)
    first = next(iter(runs.values()))
    lines = ["| target | goal | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for i, t in enumerate(first["targets"]):
        cells = []
        for label in labels:
            run = runs[label]["targets"][i]
            met = run["met"]
            cells.append(target_value(run) + ("" if met is None else (" ✓" if met else " ✗"))
                         + (" unsettled" if run.get("unsettled") else ""))
        lines.append(f"| {t['target']} | {t['op']} {t['threshold']} | " + " | ".join(cells) + " |")
    lines += ["", "A ratio is the median of the run's per-repetition ratios; in brackets the middle "
              "half of them (25th–75th percentile), and \"unsettled\" where the goal lies inside "
              "that range: another run on the same host can give the other verdict."]
    lines += ["", "| roofline (bytes of inputs + outputs / time / device copy) | "
              + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    rows = [("tcpo", {"B": 4096, "K": 16}, n) for n in
            ("credax_contiguous", "credax_raw_ids", "credax_contiguous_step", "output_floor")]
    rows += [("triage_broadcast", {"T": 16384}, n) for n in ("credax_broadcast", "copy_floor")]
    for case, params, name in rows:
        cells = []
        for label in labels:
            rec = next((c for c in runs[label]["cases"] if c["case"] == case and all(
                c["params"].get(k) == v for k, v in params.items())), None)
            r = None if rec is None else rec["results"].get(name)
            cells.append("—" if r is None or "roofline_fraction" not in r else
                         f"{r['roofline_fraction']:.2f} ({fmt_bytes(r['bytes_moved'])} in "
                         f"{fmt_time(r['median_s'])})")
        lines.append(f"| {case} {', '.join(f'{k}={v}' for k, v in params.items())} {name} | "
                     + " | ".join(cells) + " |")
    lines.append("")
    for label in labels:
        d = runs[label]
        m = d["meta"]["machine"]
        cb = d["copy_bandwidth"]
        tunables = d["meta"]["env"].get("GLIBC_TUNABLES")
        lines.append(f"- {label}: `{d['meta']['command']}` at {d['meta']['date']}"
                     f"{', GLIBC_TUNABLES=' + tunables if tunables else ', no glibc tunables'}; "
                     f"{m['nproc']} CPUs ({m['cpu_model']}), load average "
                     f"{', '.join(f'{x:.1f}' for x in m['load_average'] or [])} at start "
                     f"({load_label(m['load_average'])}); device copy {cb['bytes_per_s'] / 1e9:.2f} "
                     "GB/s.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        raise SystemExit(__doc__)
    runs = {"no glibc tunables (default)": json.loads(Path(argv[0]).read_text()),
            "huge pages (glibc.malloc.hugetlb=1)": json.loads(Path(argv[1]).read_text())}
    OUT.write_text(targets_markdown(runs))
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

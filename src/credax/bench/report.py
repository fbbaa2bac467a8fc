"""The report of a run: JSON (everything), a markdown table, and a plot.

matplotlib is imported only by :func:`plot` (it is in the ``bench`` extra); without it the run
writes the JSON and markdown and says that the plot was skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

from .harness import fmt_bytes, fmt_time

RATIO_HEADING = ("Ratios, all one way: time of the first ÷ time of the second, so above 1× the "
                 "second is faster; against a peer (torch, NumPy, an XLA diagnostic) credax is "
                 "second, against a floor (the lower bound) the floor is.")


def oriented(key: str) -> tuple[str, bool]:
    """A stored ratio ``a/b`` as the report shows it, ``(label, inverted)``: credax (or a floor)
    second, so every column reads the same way (``credax_x/torch`` is shown as
    ``torch/credax_x``, the inverse of its median)."""
    num, den = key.split("/")
    second = lambda name: name.startswith("credax") or name.endswith("_floor")
    if second(num) and not second(den):
        return f"{den}/{num}", True
    return key, False


def _sizes_note(recs: list[dict]) -> str:
    """The group size and K of a case as run (every size the records hold), for its heading."""
    parts = []
    for key, label in (("group_size", "groups of {}"), ("K", "K = {}")):
        values = sorted({rec["params"][key] for rec in recs if key in rec["params"]})
        if values:
            parts.append(label.format(", ".join(str(v) for v in values)))
    return f" ({'; '.join(parts)})" if parts else ""


def render_markdown(data: dict) -> str:
    m = data["meta"]["machine"]
    n = data["meta"]["threads"]
    threads = "" if n is None else f", pinned to {n} CPU(s), torch threads = {n}"
    lines = [
        f"Command: `{data['meta']['command']}` — {data['meta']['date']}, "
        f"preset `{data['meta']['preset']}`, device `{data['meta']['device']}` "
        f"({m['device_kind']})"
        f"{threads}"
        f"{''.join(f', {k}={v}' for k, v in data['meta']['env'].items())}.",
        f"Machine: {m['nproc']} CPUs (`nproc`), {m['cpu_model']}; load average at start "
        f"{', '.join(f'{x:.2f}' for x in (m['load_average'] or []))} "
        f"({load_label(m['load_average'])}); glibc tunables: "
        f"{data['meta']['env'].get('GLIBC_TUNABLES') or 'none'}; Python {m['python']}, "
        f"jax {m['jax']}, jaxlib {m['jaxlib']}, NumPy {m['numpy']}, torch {m['torch']} "
        f"({m['torch_threads']} threads).",
        "",
        "Median time per call (interquartile range in brackets); ratios are medians of "
        "per-repetition ratios, from this one run.",
        "",
    ]
    cb = data.get("copy_bandwidth")
    if cb:
        lines += [f"Device copy (the roofline): {cb['mib']} MiB float32 read + written in "
                  f"{fmt_time(cb['median_s'])}, **{cb['bytes_per_s'] / 1e9:.2f} GB/s**. A case's "
                  "roofline fraction is (bytes of its inputs + outputs) / time / that bandwidth.", ""]
    by_case: dict[str, list[dict]] = {}
    for rec in data["cases"]:
        by_case.setdefault(rec["case"], []).append(rec)
    titles = {  # sizes come from each case's own parameters (_sizes_note), never written here
        "grpo": "GRPO advantages, shuffled sparse int32 ids",
        "tcpo": "TCPO full pipeline (retrospective + hindsight + per-(prompt, turn) z-score, γ^k)",
        "grpo_contiguous": "GRPO, contiguous layout",
        "triage_broadcast": "TRIAGE turn advantages + broadcast to tokens",
        "policy_loss": "policy_loss forward (token-mean clipped surrogate)",
        "policy_loss_grad": "policy_loss value_and_grad w.r.t. logp",
        "lm_head": "LM head: value_and_grad of the policy loss from hidden states [B, T, D] through "
                   "the unembedding [D, V] (float32)",
    }
    size_keys = ("B", "K", "T", "D", "V", "chunk")
    for case, recs in by_case.items():
        impls = []
        for rec in recs:
            for name in rec["results"]:
                if name not in impls:
                    impls.append(name)
        lines.append(f"**{titles.get(case, case)}{_sizes_note(recs)}**")
        lines.append("")
        head = ["size"] + impls
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for rec in recs:
            size = ", ".join(f"{k}={v}" for k, v in rec["params"].items() if k in size_keys)
            row = [size]
            for name in impls:
                r = rec["results"].get(name)
                row.append("—" if r is None else
                           f"{fmt_time(r['median_s'])} [{fmt_time(r['q25_s'])}–{fmt_time(r['q75_s'])}]")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        ratio_keys = []
        for rec in recs:
            for key in rec["ratios"]:
                if key not in ratio_keys:
                    ratio_keys.append(key)
        if ratio_keys:
            lines.append(RATIO_HEADING)
            lines.append("")
            lines.append("| size | " + " | ".join(oriented(k)[0] for k in ratio_keys) + " |")
            lines.append("|" + "---|" * (len(ratio_keys) + 1))
            for rec in recs:
                size = ", ".join(f"{k}={v}" for k, v in rec["params"].items() if k in size_keys)
                cells = []
                for key in ratio_keys:
                    v = rec["ratios"].get(key)
                    cells.append("—" if v is None else
                                 f"{v['median'] ** (-1 if oriented(key)[1] else 1):.3g}×")
                lines.append(f"| {size} | " + " | ".join(cells) + " |")
            lines.append("")
        roof = [(rec, name, r) for rec in recs for name, r in rec["results"].items()
                if "roofline_fraction" in r]
        if roof:
            head = "Roofline (bytes of inputs + outputs / time, as a fraction of the copy): "
            lines.append(head + "; ".join(
                f"{', '.join(f'{k}={v}' for k, v in rec['params'].items() if k in ('B', 'K', 'T'))} "
                f"{name} {r['roofline_fraction']:.2f} ({fmt_bytes(r['bytes_moved'])})"
                for rec, name, r in roof if name.startswith(("credax", "copy", "output", "token", "turn"))))
            lines.append("")
        for rec in recs:
            if "memory" in rec:
                lines += [_lm_head_memory(rec), ""]
        notes = [f"{rec['params']}: {n}" for rec in recs for n in rec["notes"]]
        if notes:
            lines += ["Notes: " + "; ".join(notes), ""]
    if data["sweep"]:
        lines += ["**Every public entry point (sweep sizes "
                  + ", ".join(f"{k}={v}" for k, v in data["meta"]["sweep_sizes"].items())
                  + "): compile (cold, after `jax.clear_caches()`), recompilation, steady time, "
                  "bytes, roofline, memory**", "",
                  "| entry point | compile (trace + lower + XLA) | first call wall / CPU | steady | "
                  "compiles on 2nd call | on a changed hyperparameter | bytes moved | GB/s | of copy | "
                  "XLA temp | peak device memory |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in data["sweep"]:
            changed = r["compiles_on_changed_hyperparameter"]
            changed = "—" if changed is None else f"{changed} ({r['changed_hyperparameter']})"
            comp = r.get("compiled") or {}
            roof = r.get("roofline_fraction")
            peak = r["peak_bytes_in_use"]
            lines.append(
                f"| {r['fn']} | {fmt_time(r['compile_total_s'])} | {fmt_time(r['first_call_s'])} / "
                f"{fmt_time(r['first_call_cpu_s'])} | {fmt_time(r['steady_median_s'])} | "
                f"{r['compiles_on_second_call']} | {changed} | {fmt_bytes(r['bytes_moved'])} | "
                f"{r['gb_per_s']:.2f} | {'—' if roof is None else f'{roof:.2f}'} | "
                f"{fmt_bytes(comp.get('temp_size_in_bytes'))} | "
                f"{'not reported' if peak is None else fmt_bytes(peak)} |")
        lines.append("")
    profiled = [r for r in data["sweep"] if r.get("kernels")]
    if profiled:
        lines += ["**Time per kernel of each steady call** (`--profile`: jax.profiler events, "
                  "per call; the five longest)", ""]
        for r in profiled:
            ks = r["kernels"]
            top = ", ".join(f"{k['name']} {fmt_time(k['us'] * 1e-6)}" for k in ks[:5])
            lines.append(f"- {r['fn']}: {len(ks)} events, {fmt_time(sum(k['us'] for k in ks) * 1e-6)}"
                         f" in all; {top}")
        lines.append("")
    if data.get("targets"):  # goals a caller passed (`main(targets=...)`: benchmarks/targets.py)
        lines += ["**Targets** (a ratio is the median of the per-repetition ratios; in brackets "
                  "the middle half of them, and \"unsettled\" where the goal lies inside it: "
                  "another run can give the other verdict)", "", "| target | measured | goal | met |",
                  "|---|---|---|---|"]
    for t in data.get("targets", []):
        shown = target_value(t)
        goal = f"{t['op']} {t['threshold']}"
        met = {True: "yes", False: "**no**", None: "—"}[t["met"]]
        if t.get("unsettled"):
            met += " (unsettled)"
        lines.append(f"| {t['target']} | {shown} | {goal} | {met} |")
    if data["skipped"]:
        lines += ["", "Skipped: " + "; ".join(f"{s['case']} {s['params']}: {s['reason']}"
                                            for s in data["skipped"])]
    return "\n".join(lines) + "\n"


def _lm_head_memory(rec: dict) -> str:
    """One line of the LM-head case: the floor's GEMM rate and each implementation's memory, in
    chunks of logits."""
    p, g = rec["params"], rec.get("gemm", {})
    rate = g.get("gflop_per_s")
    parts = []
    for name, m in rec["memory"].items():
        t, u, pk = (m.get(k) for k in ("temp_chunks", "temp_less_unembedding_chunks",
                                       "process_peak_chunks"))
        cell = f"{name} temporaries {'—' if t is None else f'{t:.2f}'}"
        if u is not None:
            cell += f" ({u:.2f} without the [D, V] gradient buffer)"
        if pk is not None:
            cell += f", process peak {pk:.2f}"
        parts.append(cell)
    return (f"B={p['B']}, T={p['T']}, D={p['D']}, V={p['V']}, chunk={p['chunk']}: the floor is "
            f"{g.get('flops', 0) / 1e9:.1f} GFLOP (3 GEMMs of 2·N·D·V) in "
            f"{fmt_time(g.get('floor_median_s'))}, "
            f"{'—' if rate is None else f'{rate:.1f}'} GFLOP/s measured in this run. Memory in "
            f"chunks of logits ({fmt_bytes(rec['chunk_bytes'])}; the [D, V] unembedding is "
            f"{fmt_bytes(rec['unembedding_bytes'])}): " + "; ".join(parts) + ".")


def plot(data: dict, path: Path) -> bool:
    """Four panels (GRPO, TCPO, TRIAGE + broadcast, the loss); ``False`` without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("grpo", "GRPO advantages (shuffled ids)", "B (trajectories)"),
        ("tcpo", "TCPO full pipeline", "B·K (turn entries)"),
        ("triage_broadcast", "TRIAGE + broadcast to tokens", "B·T (tokens)"),
        ("policy_loss", "policy_loss forward / value_and_grad", "B·T (tokens)"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(13, 10))
    colors = {}
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def color(name):
        if name not in colors:
            colors[name] = palette[len(colors) % len(palette)]
        return colors[name]

    for ax, (case, title, xlabel) in zip(axes.flat, panels, strict=True):
        cases = [c for c in data["cases"] if c["case"] == case]
        if case == "policy_loss":
            cases += [c for c in data["cases"] if c["case"] == "policy_loss_grad"]
        series: dict[tuple[str, str], list[tuple[int, float, float, float]]] = {}
        for rec in cases:
            variant = ""
            if case == "tcpo":
                variant = f"K={rec['params']['K']}"
            if rec["case"] == "policy_loss_grad":
                variant = "grad"
            for name, r in rec["results"].items():
                series.setdefault((name, variant), []).append(
                    (rec["size"], r["median_s"], r["q25_s"], r["q75_s"]))
        styles = ["-", "--", ":", "-."]
        variants = sorted({v for _, v in series})
        for (name, variant), pts in sorted(series.items()):
            pts.sort()
            x = [p[0] for p in pts]
            y = [p[1] for p in pts]
            lo = [p[1] - p[2] for p in pts]
            hi = [p[3] - p[1] for p in pts]
            label = name + (f" ({variant})" if variant else "")
            ax.errorbar(x, y, yerr=[lo, hi], marker="o", ms=4, capsize=2,
                        linestyle=styles[variants.index(variant) % len(styles)],
                        color=color(name), label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title + _sizes_note([r for r in data["cases"] if r["case"] == case]))
        ax.set_xlabel(xlabel)
        ax.set_ylabel("median time per call (s)")
        ax.grid(True, which="both", alpha=0.3)
        if series:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
    m = data["meta"]["machine"]
    fig.suptitle(f"credax speed vs peers — {m['device_kind']}, {m['nproc']} CPUs "
                 f"({m['cpu_model']}), jax {m['jax']}, torch {m['torch']}"
                 + (" — QUICK MODE" if data["meta"]["preset"] == "quick" else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(data: dict, out_dir: Path, stem: str) -> dict[str, Path]:
    """``stem.json``, ``stem.md`` and (with matplotlib) ``stem.png`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {ext: out_dir / f"{stem}.{ext}" for ext in ("json", "md", "png")}
    paths["json"].write_text(json.dumps(data, indent=1) + "\n")
    paths["md"].write_text(render_markdown(data))
    if not plot(data, paths["png"]):
        print("NOTE: matplotlib is not installed (pip install '/path/to/credax[bench]'): no plot written")
        del paths["png"]
    return paths




def load_label(load_average: list[float] | None) -> str:
    """What the 1-minute load average at the start of a run says about the machine.

    Below 1, nothing else was using a CPU when the run began. At 1 or more a job was running then
    or had ended within the last minute or two (the average decays over about a minute, so a run
    started right after another one reads about 1 on a quiet 2-CPU machine). It says nothing
    about jobs that start later, hence "at start".

    Example:
      >>> load_label([0.3, 0.5, 0.9])
      'quiet at start: load average below 1'
      >>> load_label([2.4, 1.0, 0.5])
      'load average 2.4 at start: a job was running or had just ended'
      >>> load_label(None)
      'load average unknown'
    """
    if not load_average:
        return "load average unknown"
    if load_average[0] < 1.0:
        return "quiet at start: load average below 1"
    return f"load average {load_average[0]:.1f} at start: a job was running or had just ended"


def target_value(t: dict) -> str:
    """A target's measured value as the tables show it: ``1.91× [1.62–2.20]`` for a ratio with
    its per-repetition spread (runs written before the spread was recorded have none)."""
    v = t["measured"]
    if isinstance(v, float) and "without_unembedding_buffer" in t:
        w = t["without_unembedding_buffer"]
        return f"{v:.3g} chunks" + ("" if w is None else f" ({w:.3g} without the [D, V] buffer)")
    if isinstance(v, float):
        shown = f"{v:.3g}" + ("" if t["case"] == "sweep" else "×")
        if t.get("spread"):
            shown += f" [{t['spread'][0]:.3g}–{t['spread'][1]:.3g}]"
        return shown
    if v is None:
        return "not run"
    return str(v) or "none"

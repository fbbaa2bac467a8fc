"""``--tiny``'s first answer (issue #47 item 5): the tiers that resolve in seconds, no training.

For each method against GRPO, on each task:

- **step-0 credit against the true advantage**: the lab's Pearson correlation of the method's
  credit with ``Â*`` on the initial policy's batch (every method on the same batch), paired over
  the seeds, with its bootstrap interval;
- **one-step**: the expected improvement of the held-out return from one unit-length update at
  the initial policy (``onestep``: every method on the same batches, each batch evaluated on its
  own key), paired with GRPO's, with its t-interval over the batches;
- **the exact tier**: the committed table's cosine of the expected gradient with ``∇J`` and the
  sign accuracy on each MDP at the uniform policy (``results/exact/exact.json``; a ``--credit``
  method is scored on the tier here, ``G = 2`` to stay fast).

None of these says which method *trains* better: the trained differences (held-out success after
training, chaotic over seeds) need the full run, and ``--tiny`` says so.
"""

from __future__ import annotations

import dataclasses
import json
import time

from . import exact, onestep
from . import metrics as X

# The one-step measure's size in --tiny: the initial policy only, 8 batches (8 evaluation keys).
ONESTEP = dict(checkpoints=(0,), batches=8, alphas=(0.3,), repeats=4)
FULL_RUN = ("the full run: `make demo` (python -m benchmarks.lab; about 11 CPU-min, loaded "
            "2-core machine, 20 seeds for the headline methods)")


def _ci(d: dict, fmt: str = "{:+.3f}") -> str:
    lo, hi = d["interval"]
    if d["mean"] is None or lo is None:
        return "n/a"
    word = "resolved" if d["resolved"] else "tie"
    return f"{fmt.format(d['mean'])} [{fmt.format(lo)}, {fmt.format(hi)}] ({word})"


def onestep_record(configs: dict, methods, log=None) -> dict:
    """The one-step measure at the initial policy of each task's configuration."""
    setups = {t: onestep.Setup(dataclasses.replace(c, steps=0), **ONESTEP) for t, c in configs.items()}
    return onestep.run(setups, tuple(methods), log)


def exact_summary(names, user=()) -> dict:
    """``{name: {mdp: (cos, sign)}}`` at the uniform policy: built-in methods from the committed
    exact table, ``user`` methods (``methods.Method``) scored on the tier now (``G = 2``)."""
    out = {}
    committed = json.loads((exact.RESULTS / "exact.json").read_text()) \
        if (exact.RESULTS / "exact.json").exists() else None
    for name in names:
        if committed is None:
            break
        rows = {mdp: rec["policies"]["uniform"]["methods"].get(name)
                for mdp, rec in committed["mdps"].items()}
        if all(rows.values()):
            out[name] = {mdp: (r["cos"], r["sign"]) for mdp, r in rows.items()}
    for m in user:
        try:
            credit = lambda b, units, m=m: m.credit(exact.context(b, units), exact.M.Settings())  # noqa: E731
            rows = {}
            for mdp, tiers in exact.cases(2, tuple(exact.MDPS)).items():
                s = exact.scores(tiers["uniform"], exact.batch_credit(tiers["uniform"], credit), m.agg)
                rows[mdp] = (s["cos"], s["sign"])
            out[m.name] = rows
        except Exception as e:  # a function that needs the policy cannot run on the tier
            out[m.name] = f"cannot run on the exact tier: {type(e).__name__}: {e}"
    return out


def answer(record: dict, one: dict, ex: dict, names) -> list[str]:
    """The first answer's lines, one per task and method (GRPO is the reference)."""
    lines = ["First answer (no training): step-0 credit vs the true advantage, one-step "
             "improvement, the exact tier. Trained differences (held-out success after training) "
             "are NOT measured here: they need " + FULL_RUN + "."]
    summ = onestep.summarize(one)
    for t, task in record["tasks"].items():
        credit0 = task["lab"]["credit"].get("0", {})
        for name in names:
            if name == "grpo" or name not in credit0:
                continue
            label = task["methods"][name]["label"]
            parts = []
            if "grpo" in credit0:
                d = X.paired_difference(credit0[name]["pearson"]["per_seed"],
                                        credit0["grpo"]["pearson"]["per_seed"])
                parts.append(f"step-0 Pearson with A* minus GRPO's {_ci(d, '{:+.2f}')} over "
                             f"{d['n']} seeds")
            rows = summ.get(t, {}).get("0", {})
            if name in rows:
                m, lo, hi = rows[name][0]["vs_grpo"]
                word = "resolved" if lo > 0 or hi < 0 else "tie"
                n = len(one["tasks"][t]["checkpoints"]["0"]["methods"][name]["delta"][0])
                parts.append(f"one-step Δ(α={rows[name][0]['alpha']}) minus GRPO's {m:+.4f} "
                             f"[{lo:+.4f}, {hi:+.4f}] ({word}; {n} batches, each on its own "
                             "evaluation key)")
            e = ex.get(name)
            if isinstance(e, dict):
                parts.append("exact tier (uniform policy) cos / sign: " + ", ".join(
                    f"{mdp} {'—' if c is None else f'{c:+.2f}'} / {s:.2f}" for mdp, (c, s) in e.items()))
            elif e:
                parts.append(e)
            lines.append(f"first answer [{t}] {label} vs GRPO: " + "; ".join(parts))
    return lines


def run(record: dict, configs: dict, methods, user=(), log=None) -> tuple[list[str], dict]:
    """The first answer for ``record`` (a step-0 lab run): its lines and its JSON part."""
    t0, c0 = time.perf_counter(), time.process_time()
    one = onestep_record(configs, methods, log)
    ex = exact_summary([m.name for m in methods], user)
    names = [m.name for m in methods]
    lines = answer(record, one, ex, names)
    part = {"onestep": onestep.summarize(one), "exact_uniform": ex,
            "timing": {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0},
            "note": "no training: trained differences need " + FULL_RUN}
    return lines, part

"""Variance reduction of shrinkage baselines on synthetic Bernoulli prompt groups.

Run: ``.venv/bin/python -m benchmarks.shrinkage [--batches N] [--out PATH]``.

Model: each prompt p of a batch has a one-parameter policy with success probability
``p_p = sigmoid(θ_p)``; its ``G`` generations are ``y ~ Bernoulli(p_p)`` with reward ``r = y``. The
score is ``∇_θ log π(y) = y − p_p``, so an advantage ``A`` gives the per-prompt gradient estimate
``ĝ_p = (1/G) Σ_i A_i (y_i − p_p)`` of the true gradient ``g_p = p_p (1 − p_p)``. Reported per
estimator, over batches and prompts: the mean squared error ``E(ĝ − g)²`` (what the update
feels), its variance and squared bias, and the MSE ratio against the per-prompt baseline it
replaces (Dr. GRPO's prompt mean, RLOO's leave-one-out mean). Success probabilities are drawn
from a Beta(a, a) per batch (``a = 0.5``: many prompts nearly always or never solved, as in RLVR).

Second table (:func:`against_true_advantage`): the same estimators against the true advantage of
a trajectory's first action, in a model where the outcome is the prompt's value plus the
action's effect plus the noise of the rest of the trajectory. It explains why the credit lab
finds the shrunk Dr. GRPO form *farther* from ``A*`` than plain Dr. GRPO while the shrunk RLOO
form is closer (``docs/guides/credit-lab.md``, "Why shrinkage moves Dr. GRPO away from A*").
"""

from __future__ import annotations

import argparse
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

import credax

SIZES = [(64, 4), (64, 8), (256, 8), (256, 16), (1024, 8)]


def _advantages(r, ids):
    return {
        "none": r,
        "dr_grpo": credax.grpo_advantages(r, ids, normalization=credax.Normalization(scale="none")),
        "rloo": credax.rloo_advantages(r, ids),
        "shrinkage": credax.shrinkage_advantages(r, ids),
        "shrinkage_loo": credax.shrinkage_advantages(r, ids, leave_one_out=True),
    }


def measure(num_prompts: int, group_size: int, batches: int, seed: int = 0, beta: float = 0.5):
    rng = np.random.default_rng(seed)
    p = rng.beta(beta, beta, size=(batches, num_prompts))
    y = (rng.random((batches, num_prompts, group_size)) < p[..., None]).astype(np.float32)
    ids = jnp.repeat(jnp.arange(num_prompts, dtype=jnp.int32), group_size)
    groups = credax.groups(ids, num_groups=num_prompts)
    r = jnp.asarray(y.reshape(batches, -1))
    adv = jax.jit(jax.vmap(lambda x: _advantages(x, groups)))(r)
    score = y - p[..., None]
    true = p * (1 - p)
    out = {}
    for name, a in adv.items():
        a = np.asarray(a, np.float64).reshape(batches, num_prompts, group_size)
        g_hat = (a * score).mean(axis=-1)
        err = g_hat - true
        bias = err.mean(axis=0)  # per prompt position over batches (p differs per batch: pooled)
        out[name] = {"mse": float(np.mean(err ** 2)), "var": float(np.var(err)),
                     "bias2": float(np.mean(err) ** 2), "mean_abs_bias": float(np.abs(bias).mean())}
    for name, base in (("shrinkage", "dr_grpo"), ("shrinkage_loo", "rloo")):
        out[name]["mse_ratio_vs_" + base] = out[name]["mse"] / out[base]["mse"]
    return out


# (sd of the first action's own effect, sd of everything after it): the outcome noise after the
# action dominates, balances, or is dominated by the action's effect.
REGIMES = [(0.1, 0.5), (0.3, 0.3), (0.5, 0.1)]


def against_true_advantage(sd_action: float, sd_rest: float, *, num_prompts: int = 64,
                           group_size: int = 8, batches: int = 2000, sd_prompt: float = 0.3,
                           seed: int = 0) -> dict:
    """Outcome advantages against the true advantage of a trajectory's first action.

    Model: ``R = V_p + δ + η`` with prompt values ``V_p ~ N(0, sd_prompt²)``, the first action's
    own effect ``δ ~ N(0, sd_action²)`` (its true advantage, ``A* = Q − V = δ``) and the noise of
    everything after it ``η ~ N(0, sd_rest²)``. For each estimator, ``mean((A − A*)²)`` plain and
    with the shrinkage baseline, and the difference. A baseline built from the prompt's own rows
    includes ``R_i`` in the Dr. GRPO form (``r − mean``): it moves with ``η_i`` and cancels a
    share ``1/n`` of it; shrinking it toward the across-prompt mean gives back part of that share.
    To first order, with ``c`` the shrinkage coefficient and ``n`` the group size, the change of
    the Dr. GRPO form is ``(c / n)(sd_rest² − sd_action²)``: it hurts when the noise after the
    action exceeds the action's own effect. The leave-one-out (RLOO) form has no such share and
    gains in every regime.
    """
    rng = np.random.default_rng(seed)
    shape = (batches, num_prompts, group_size)
    value = rng.normal(0.0, sd_prompt, shape[:2] + (1,))
    action = rng.normal(0.0, sd_action, shape)
    rest = rng.normal(0.0, sd_rest, shape)
    r = jnp.asarray((value + action + rest).reshape(batches, -1), jnp.float32)
    ids = jnp.repeat(jnp.arange(num_prompts, dtype=jnp.int32), group_size)
    groups = credax.groups(ids, num_groups=num_prompts)

    def estimators(x):
        centred = credax.Normalization(scale="none")
        return {"dr_grpo": credax.grpo_advantages(x, groups, normalization=centred),
                "shrinkage": credax.shrinkage_advantages(x, groups),
                "rloo": credax.rloo_advantages(x, groups),
                "shrinkage_loo": credax.shrinkage_advantages(x, groups, leave_one_out=True),
                "c": credax.shrinkage_baseline(x, groups).shrinkage}

    out = jax.jit(jax.vmap(estimators))(r)
    truth = action.reshape(batches, -1)
    mse = {k: float(np.mean((np.asarray(v, np.float64) - truth) ** 2))
           for k, v in out.items() if k != "c"}
    c = float(np.mean(np.asarray(out["c"], np.float64)))
    return {"sd_action": sd_action, "sd_rest": sd_rest, "mse": mse, "mean_c": c,
            "dr_grpo_change": mse["shrinkage"] - mse["dr_grpo"],
            "dr_grpo_first_order": c / group_size * (sd_rest ** 2 - sd_action ** 2),
            "rloo_change": mse["shrinkage_loo"] - mse["rloo"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--out", default="benchmarks/results/shrinkage.json")
    args = parser.parse_args(argv)
    results = []
    print(f"{'P':>5} {'G':>3} | {'MSE Dr.GRPO':>11} {'shrink':>9} {'ratio':>6} | "
          f"{'MSE RLOO':>9} {'shrinkLOO':>9} {'ratio':>6}")
    for num_prompts, group_size in SIZES:
        res = measure(num_prompts, group_size, args.batches, beta=args.beta)
        results.append({"num_prompts": num_prompts, "group_size": group_size, **res})
        print(f"{num_prompts:>5} {group_size:>3} | {res['dr_grpo']['mse']:11.5f} "
              f"{res['shrinkage']['mse']:9.5f} {res['shrinkage']['mse_ratio_vs_dr_grpo']:6.3f} | "
              f"{res['rloo']['mse']:9.5f} {res['shrinkage_loo']['mse']:9.5f} "
              f"{res['shrinkage_loo']['mse_ratio_vs_rloo']:6.3f}")
    print("\nagainst the true advantage of the first action (R = V + δ + η; 64 prompts of 8):")
    print(f"{'sd δ':>5} {'sd η':>5} | {'Dr.GRPO':>8} {'shrunk':>8} {'change':>9} {'1st order':>9} | "
          f"{'RLOO':>8} {'shrunk':>8} {'change':>9}")
    truth = []
    for sd_action, sd_rest in REGIMES:
        res = against_true_advantage(sd_action, sd_rest, batches=args.batches)
        truth.append(res)
        m = res["mse"]
        print(f"{sd_action:5.2f} {sd_rest:5.2f} | {m['dr_grpo']:8.5f} {m['shrinkage']:8.5f} "
              f"{res['dr_grpo_change']:+9.5f} {res['dr_grpo_first_order']:+9.5f} | "
              f"{m['rloo']:8.5f} {m['shrinkage_loo']:8.5f} {res['rloo_change']:+9.5f}")
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"batches": args.batches, "beta": args.beta, "results": results,
                                "against_true_advantage": truth}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

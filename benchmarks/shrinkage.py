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
        "dr_grpo": credax.grpo_advantages(r, ids, scale="none"),
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
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"batches": args.batches, "beta": args.beta, "results": results},
                               indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

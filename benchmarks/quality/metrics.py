"""Host-side statistics of the credit lab, in plain NumPy: credit against ground truth, role
cells, TRIAGE's covariance, and bootstrap intervals over seeds.

Every function takes 1-D arrays over the sampled (trajectory, turn) pairs of one checkpoint batch
of one seed (already restricted to the used pairs) and returns plain floats; ``summarize`` turns
per-seed values into a mean with a bootstrap percentile interval.
"""

from __future__ import annotations

import numpy as np

TRIAGE_CONSTANTS = (1.0, 0.5, -0.1, -0.5)  # SPEC §5, the constants TRIAGE adds λ times
ROLE_NAMES = ("decisive", "exploration", "no_progress", "regression")


def pearson(x, y) -> float:
    """Pearson correlation; NaN when either input has no spread."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    xc, yc = x - x.mean(), y - y.mean()
    den = np.sqrt(np.sum(xc * xc) * np.sum(yc * yc))
    return float(np.sum(xc * yc) / den) if den > 0 else float("nan")


def ranks(x) -> np.ndarray:
    """1-based ranks, ties given their average rank."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x), np.float64)
    r[order] = np.arange(1, len(x) + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=r)
    return sums[inverse] / counts[inverse]


def spearman(x, y) -> float:
    """Spearman rank correlation (Pearson of average ranks)."""
    return pearson(ranks(x), ranks(y))


def sign_agreement(credit, a_star, se, *, z: float = 2.0) -> tuple[float, int]:
    """Fraction of the pairs with ``|A*| > z·SE`` whose credit has the sign of ``A*`` (a zero
    credit counts as a disagreement), and how many pairs qualified. NaN if none did."""
    credit, a_star, se = (np.asarray(v, np.float64) for v in (credit, a_star, se))
    clear = np.abs(a_star) > z * se
    n = int(clear.sum())
    if n == 0:
        return float("nan"), 0
    return float(np.mean(np.sign(credit[clear]) == np.sign(a_star[clear]))), n


def affine_fit(credit, a_star) -> tuple[float, float]:
    """``(α, β)`` of the least-squares ``A* ≈ α + β·credit`` (β = 0 for a constant credit)."""
    c, a = np.asarray(credit, np.float64), np.asarray(a_star, np.float64)
    var = np.var(c)
    beta = float(np.mean((c - c.mean()) * (a - a.mean())) / var) if var > 0 else 0.0
    return float(a.mean() - beta * c.mean()), beta


def affine_mse(credit, a_star) -> float:
    """``min_{α,β} mean (A* - α - β·credit)²`` in the return's units (``= Var(A*)·(1 - ρ²)``)."""
    alpha, beta = affine_fit(credit, a_star)
    a = np.asarray(a_star, np.float64)
    return float(np.mean(np.square(a - alpha - beta * np.asarray(credit, np.float64))))


def role_cells(role, success, a_star, credit) -> dict:
    """Per role × (successful / failed rollout): count, mean A*, mean credit, and mean credit
    after the best affine rescaling onto A* (same units as A*). Empty cells have ``n = 0`` and
    NaN means."""
    role, success = np.asarray(role), np.asarray(success, bool)
    a, c = np.asarray(a_star, np.float64), np.asarray(credit, np.float64)
    alpha, beta = affine_fit(c, a)
    out = {}
    for r, name in enumerate(ROLE_NAMES):
        for ok, outcome in [(True, "success"), (False, "failure")]:
            sel = (role == r) & (success == ok)
            n = int(sel.sum())
            nan = float("nan")
            out[f"{name}/{outcome}"] = {
                "n": n,
                "a_star": float(a[sel].mean()) if n else nan,
                "credit": float(c[sel].mean()) if n else nan,
                "credit_rescaled": float(alpha + beta * c[sel].mean()) if n else nan,
            }
    return out


def triage_theory(a_star, sigma, a_grpo, judged, *, lam: float = 0.2,
                  constants=TRIAGE_CONSTANTS) -> dict:
    """TRIAGE's error decomposition against the ground truth on one batch.

    ``δ = A*/σ - A_GRPO`` is GRPO's per-turn error on GRPO's own scale (``σ`` = the pooled
    within-prompt standard deviation of the returns, the scale GRPO divides by). With the judge's
    role credit ``c = constants[role]``: ``cov = Cov(c, δ)``; ``λ* = Σ c δ / Σ c²`` (credax's
    ``optimal_mixing_weight``, computed here independently); and the change in mean squared error
    that TRIAGE's ``A_GRPO + λ c`` makes, ``mean((δ - λc)²) - mean(δ²)`` (negative = TRIAGE's
    credit is closer to the truth). Unlabelled roles (``-1``) get ``c = 0``.
    """
    a, g = np.asarray(a_star, np.float64), np.asarray(a_grpo, np.float64)
    judged = np.asarray(judged)
    delta = a / sigma - g if sigma > 0 else -g
    consts = np.asarray(constants, np.float64)
    c = np.where(judged >= 0, consts[np.clip(judged, 0, len(consts) - 1)], 0.0)
    cov = float(np.mean((c - c.mean()) * (delta - delta.mean())))
    cc = float(np.sum(c * c))
    lam_star = float(np.sum(c * delta) / cc) if cc > 0 else 0.0
    mse_change = float(np.mean(np.square(delta - lam * c)) - np.mean(np.square(delta)))
    return {"cov": cov, "lambda_star": lam_star, "mse_change": mse_change}


def bootstrap_interval(values, *, level: float = 0.95, resamples: int = 4000, seed: int = 0):
    """Percentile bootstrap interval of the mean over seeds: ``(mean, lo, hi)``.

    The interval is made of resampled means, so it never leaves the range of the data (a rate
    stays in ``[0, 1]``); NaN seeds are left out. One seed gives ``(x, None, None)``; none gives
    ``(None, None, None)``.
    """
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None, None, None
    mean = float(v.mean())
    if v.size == 1:
        return mean, None, None
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(resamples, v.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return mean, float(lo), float(hi)


def summarize(values) -> dict:
    """``{"mean", "interval": [lo, hi], "per_seed", "n"}`` with a bootstrap percentile interval."""
    v = np.asarray(values, np.float64)
    mean, lo, hi = bootstrap_interval(v)
    return {
        "mean": mean,
        "interval": [lo, hi],
        "per_seed": [float(x) if np.isfinite(x) else None for x in v],
        "n": int(np.isfinite(v).sum()),
    }

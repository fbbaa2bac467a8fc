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


def pearson_where(credit, a_star, where, *, min_pairs: int = 3) -> float:
    """Pearson correlation on the pairs where ``where`` holds; NaN with fewer than ``min_pairs``."""
    where = np.asarray(where, bool)
    if where.sum() < min_pairs:
        return float("nan")
    return pearson(np.asarray(credit)[where], np.asarray(a_star)[where])


def pairwise_rank_accuracy(credit, a_star, se, row, *, z: float = 2.0) -> tuple[float, int]:
    """Within-trajectory turn ranking: over the pairs of sampled turns ``(i, j)`` of one
    trajectory whose true advantages differ clearly (``|Â*_i − Â*_j| > z·sqrt(SE_i² + SE_j²)``),
    the fraction the credit orders the same way, a tie in the credit counting one half (the AUC
    convention), and how many such pairs there were. NaN if none. Scale- and shift-free per
    trajectory: it asks only which turn of a rollout deserved more, the question an outcome
    advantage cannot answer (it ties every turn of a trajectory, so it scores exactly 0.5)."""
    c, a, se, row = (np.asarray(v) for v in (credit, a_star, se, row))
    i, j = np.triu_indices(len(a), k=1)
    same = row[i] == row[j]
    i, j = i[same], j[same]
    gap = a[i] - a[j]
    clear = np.abs(gap) > z * np.sqrt(se[i] ** 2 + se[j] ** 2)
    n = int(clear.sum())
    if n == 0:
        return float("nan"), 0
    agree = np.sign(c[i] - c[j])[clear] * np.sign(gap[clear])  # +1 right, -1 wrong, 0 tie
    return float(np.mean((agree + 1.0) / 2.0)), n


def residual_bias(credit, a_star, where) -> float:
    """How much more (positive) or less a method credits the turns where ``where`` holds than
    ``Â*`` explains, in units of the method's own credit standard deviation.

    Fit the credit on the ground truth over *all* pairs, ``credit ≈ a + b·Â*`` (least squares:
    the direction where noise in the credit does not attenuate the slope), and return the mean
    residual ``credit − a − b·Â*`` over the selected pairs divided by ``sd(credit)``. A credit that
    is ``Â*`` plus noise unrelated to the turn's kind scores about 0 on every kind of turn; a
    role bonus added on top (reward shaping) shows as a positive residual on that role. The
    residuals sum to 0 over all pairs, so the biases of a partition of the pairs, weighted by
    their counts, sum to 0: the measure says which turns a method favours relative to the rest.
    NaN on no pair or a constant credit."""
    where = np.asarray(where, bool)
    c, a = np.asarray(credit, np.float64), np.asarray(a_star, np.float64)
    sd = float(np.std(c))
    if not where.any() or not sd > 0:
        return float("nan")
    var_a = np.var(a)
    b = float(np.mean((a - a.mean()) * (c - c.mean())) / var_a) if var_a > 0 else 0.0
    resid = c - (c.mean() - b * a.mean()) - b * a
    return float(np.mean(resid[where]) / sd)


def across_method_rank_correlation(metric, outcome, *, resamples: int = 2000, seed: int = 0):
    """How well a credit metric ranks the methods by what they learn.

    ``metric`` and ``outcome`` are ``[M, S]`` per method and seed (the seeds paired: seed ``s``
    of every method shares its initial policy and its step-0 batch). The estimate is the
    Spearman correlation across the ``M`` methods of their seed-mean metric with their seed-mean
    outcome; the interval is the 95% percentile interval of the same statistic over bootstrap
    resamples of the seeds (one resample of seed indices for all methods, so the pairing is kept).
    A NaN seed of a method is left out of that method's mean. Returns ``(rho, lo, hi)``.
    """
    m, o = np.asarray(metric, np.float64), np.asarray(outcome, np.float64)

    def seed_mean(x, idx):  # NaN-skipping mean without NumPy's empty-slice warning (see below)
        x = x[:, idx]
        ok = np.isfinite(x)
        n = ok.sum(axis=1)
        return np.where(n > 0, np.where(ok, x, 0.0).sum(axis=1) / np.maximum(n, 1), np.nan)

    def rho(idx):
        mm, oo = seed_mean(m, idx), seed_mean(o, idx)
        ok = np.isfinite(mm) & np.isfinite(oo)
        if ok.sum() < 3 or np.ptp(mm[ok]) == 0 or np.ptp(oo[ok]) == 0:
            return float("nan")  # fewer than 3 methods, or a side with every method tied
        return spearman(mm[ok], oo[ok])

    # No warnings.catch_warnings here: the lab's two task threads would race on the global
    # warning filters (one thread's exit restores them under the other).
    S = m.shape[1]
    point = rho(np.arange(S))
    rng = np.random.default_rng(seed)
    boot = np.array([rho(rng.integers(0, S, size=S)) for _ in range(resamples)])
    boot = boot[np.isfinite(boot)]
    if S < 2 or boot.size == 0:
        return point, None, None
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return point, float(lo), float(hi)


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


def wilson_interval(k: int, n: int, *, z: float = 1.96) -> tuple[float | None, float | None]:
    """Wilson score interval of a proportion ``k / n`` (95% at ``z = 1.96``): unlike the normal
    interval it stays inside ``[0, 1]`` and is not empty at ``k = 0`` or ``k = n``.

    ``(p + z²/2n ± z·sqrt(p(1−p)/n + z²/4n²)) / (1 + z²/n)`` with ``p = k/n``; ``(None, None)``
    when ``n = 0``.
    """
    if n <= 0:
        return None, None
    p = k / n
    den = 1.0 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return float(max(0.0, mid - half)), float(min(1.0, mid + half))


def solved_fraction(values, *, threshold: float = 0.5) -> dict:
    """The share of seeds whose value is at least ``threshold`` ("solved": held-out success
    ``>= 0.5``), with its Wilson interval: the summary of a bimodal outcome that a mean hides.
    NaN seeds are left out."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    k, n = int(np.sum(v >= threshold)), int(v.size)
    lo, hi = wilson_interval(k, n)
    return {"mean": k / n if n else None, "interval": [lo, hi], "k": k, "n": n, "threshold": threshold}


def seeds_to_resolve(diffs, *, z: float = 1.96) -> float:
    """Seeds a paired difference would need for its 95% interval to exclude 0, if its mean and
    sd stayed what they are: ``n = ceil((z·sd / |mean|)²)`` (the normal interval's half-width
    ``z·sd/√n`` below ``|mean|``); ``inf`` for a zero mean, NaN with fewer than two seeds."""
    d = np.asarray(diffs, np.float64)
    d = d[np.isfinite(d)]
    if d.size < 2:
        return float("nan")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if mean == 0.0:
        return float("inf")
    return float(np.ceil((z * sd / abs(mean)) ** 2))


def paired_difference(a, b) -> dict:
    """``a − b`` over the seeds both have (the first ``min(len)``: seed ``s`` of every method
    shares its initial policy, prompts and evaluation keys), summarized with its bootstrap
    interval, plus ``sd`` of the per-seed differences, whether the interval excludes 0
    (``resolved``) and ``seeds_needed`` (``seeds_to_resolve``)."""
    n = min(len(a), len(b))
    x = np.array([np.nan if v is None else v for v in a[:n]], np.float64)
    y = np.array([np.nan if v is None else v for v in b[:n]], np.float64)
    d = x - y
    out = summarize(d)
    ok = d[np.isfinite(d)]
    lo, hi = out["interval"]
    out["sd"] = float(ok.std(ddof=1)) if ok.size > 1 else None
    out["resolved"] = bool(lo is not None and (lo > 0 or hi < 0))
    out["seeds_needed"] = seeds_to_resolve(d)
    return out

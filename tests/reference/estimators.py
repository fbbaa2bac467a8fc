"""Slow NumPy float64 loop references for the estimators of issue 15: GAE, value loss, HGPO,
shrinkage baselines, rollout importance sampling, entropy and credit diagnostics.

Written from the formulas in the credax docstrings, one row (or one group) at a time with plain
Python loops over explicit index lists. Values at masked positions are never read. Nothing here
imports credax or JAX.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# GAE and the value loss
# --------------------------------------------------------------------------------------------


def gae(rewards, values, mask, *, gamma=1.0, lam=1.0, bootstrap=None):
    """Row by row over the list of valid steps: δ_j = r_j + γ V_{j+1} - V_j, A_j = δ_j + γλ A_{j+1}."""
    r, v, m = _f64(rewards), _f64(values), np.asarray(mask, bool)
    batch, n = r.shape
    lam = np.broadcast_to(_f64(lam), (batch,))
    gamma = np.broadcast_to(_f64(gamma), (batch,))
    boot = np.zeros(batch) if bootstrap is None else _f64(bootstrap)
    adv, ret = np.zeros((batch, n)), np.zeros((batch, n))
    for b in range(batch):
        steps = [t for t in range(n) if m[b, t]]
        next_adv, next_value = 0.0, boot[b]
        for t in reversed(steps):
            delta = r[b, t] + gamma[b] * next_value - v[b, t]
            a = delta + gamma[b] * lam[b] * next_adv
            adv[b, t], ret[b, t] = a, a + v[b, t]
            next_adv, next_value = a, v[b, t]
    return adv, ret


def turn_values(values, token_turn, num_turns, token_mask=None):
    v, tt = _f64(values), np.asarray(token_turn)
    batch, length = tt.shape
    tm = np.ones(tt.shape, bool) if token_mask is None else np.asarray(token_mask, bool)
    out, has = np.zeros((batch, num_turns)), np.zeros((batch, num_turns), bool)
    for b in range(batch):
        for k in range(num_turns):
            tokens = [t for t in range(length) if tm[b, t] and tt[b, t] == k]
            if tokens:
                out[b, k], has[b, k] = v[b, tokens[0]], True
    return out, has


def turn_gae(turn_rewards, values, token_turn, turn_mask, *, gamma=1.0, lam=1.0, bootstrap=None,
             token_mask=None):
    num_turns = np.asarray(turn_mask).shape[1]
    tv, has = turn_values(values, token_turn, num_turns, token_mask)
    steps = np.asarray(turn_mask, bool) & has
    adv, ret = gae(np.where(steps, _f64(turn_rewards), 0.0), tv, steps, gamma=gamma, lam=lam,
                   bootstrap=bootstrap)
    return adv, ret, np.where(steps, tv, 0.0)


def vapo_lambda(mask, alpha):
    out = []
    for row in np.asarray(mask, bool):
        length = int(row.sum())
        out.append(0.0 if length == 0 else max(0.0, 1.0 - 1.0 / (alpha * length)))
    return np.array(out)


def value_loss(values, old_values, returns, mask, clip):
    """token-mean aggregation: ½ · mean over valid steps of max(unclipped, clipped)."""
    v, old, ret, m = _f64(values), _f64(old_values), _f64(returns), np.asarray(mask, bool)
    losses, took = [], []
    for b, t in zip(*np.nonzero(m), strict=True):
        un = (v[b, t] - ret[b, t]) ** 2
        if clip is None:
            losses.append(un)
            took.append(False)
            continue
        vc = min(max(v[b, t], old[b, t] - clip), old[b, t] + clip)
        cl = (vc - ret[b, t]) ** 2
        losses.append(max(un, cl))
        took.append(cl > un)
    if not losses:
        return 0.0, 0.0
    return 0.5 * math.fsum(losses) / len(losses), sum(took) / len(took)


# --------------------------------------------------------------------------------------------
# HGPO
# --------------------------------------------------------------------------------------------


def discounted_returns(step_rewards, turn_mask, gamma, dtype=np.float64):
    """``G_t = r_t + γ G_{t+1}`` over valid steps, each operation rounded in ``dtype`` (float64 by
    default; ``np.float32`` gives the returns a float32 computation holds, one rounding per
    operation as IEEE prescribes)."""
    s, m = np.asarray(step_rewards, dtype), np.asarray(turn_mask, bool)
    gamma = dtype(gamma)
    out = np.zeros(s.shape)
    for b in range(s.shape[0]):
        running = dtype(0.0)
        for t in reversed(range(s.shape[1])):
            if m[b, t]:
                running = dtype(s[b, t] + dtype(gamma * running))
                out[b, t] = running
    return out


def discounted_returns_exact(step_rewards, turn_mask, gamma):
    """``G_t = r_t + γ G_{t+1}`` in exact rational arithmetic on the given values (the rewards as
    float32 values when given in float32, and ``γ`` as given): an object array of ``Fraction``."""
    s, m = np.asarray(step_rewards), np.asarray(turn_mask, bool)
    gamma = Fraction(float(gamma))
    out = np.full(s.shape, Fraction(0), dtype=object)
    for b in range(s.shape[0]):
        running = Fraction(0)
        for t in reversed(range(s.shape[1])):
            if m[b, t]:
                running = Fraction(float(s[b, t])) + gamma * running
                out[b, t] = running
    return out


def _normalised(vals, own, ddof, scale, eps):
    n = len(vals)
    exact = [Fraction(v) for v in vals]  # floats convert exactly; Fractions stay
    if n <= 1 or n - ddof <= 0 or max(exact) == min(exact):
        return 0.0
    # The deviation from the mean in exact rational arithmetic on the values as given, rounded
    # once: exactly 0 at the mean (abstains), never 0 off it. A float mean (even fsum's correctly
    # rounded one) can turn either into the other.
    mean = sum(exact) / n
    dev = Fraction(own) - mean
    if dev == 0:
        return 0.0
    if scale in (False, "none"):
        return float(dev)
    sd = math.sqrt(float(sum((v - mean) ** 2 for v in exact) / (n - ddof)))
    return float(dev) / (sd + eps)


def hgpo(outcome, step_rewards, anchors, turn_mask, group_ids, *, history, gamma, alpha,
         episode_group=False, episode_pooling="trajectory", episode_singleton="zero", scale=True,
         ddof=0, eps=1e-6, returns_dtype=np.float64):
    """Loop form of credax.hgpo_advantages: explicit member lists per (step, level).

    A member's level value is exactly 0 (abstains) when it equals its group's mean in exact
    rational arithmetic on the returns; ``returns_dtype`` is the dtype the returns are computed
    in (``np.float32``: the returns of a float32 computation, to compare exact decisions;
    ``"exact"``: the real returns of the given values, :func:`discounted_returns_exact`)."""
    m, a = np.asarray(turn_mask, bool), np.asarray(anchors)
    ids = [int(i) for i in np.asarray(group_ids)]
    if returns_dtype == "exact":
        r = _f64(np.asarray(outcome))
        g = discounted_returns_exact(step_rewards, m, gamma)
    else:
        r = _f64(np.asarray(outcome, returns_dtype))
        g = discounted_returns(step_rewards, m, gamma, returns_dtype)
    batch, num_turns = m.shape
    levels = np.zeros((batch, num_turns, history + 2))
    inform = np.zeros((batch, num_turns, history + 2), bool)
    rows_with_turns = [b for b in range(batch) if m[b].any()]
    for i in range(batch):
        for t in range(num_turns):
            if not m[i, t]:
                continue
            if episode_group:
                if episode_pooling == "trajectory":
                    vals = [r[j] for j in rows_with_turns if ids[j] == ids[i]]
                else:
                    vals = [r[j] for j in rows_with_turns if ids[j] == ids[i] for s in range(num_turns)
                            if m[j, s]]
                if len(vals) == 1:
                    e = r[i] if episode_singleton == "raw" else 0.0
                else:
                    e = _normalised(vals, r[i], 1, scale, eps)
                levels[i, t, 0], inform[i, t, 0] = e, e != 0
            for k in range(1, history + 2):
                if t < k - 1 or not all(m[i, t - q] for q in range(k)):
                    continue
                key = [a[i, t - q] for q in range(k)]
                vals = [g[j, s] for j in range(batch) for s in range(k - 1, num_turns)
                        if ids[j] == ids[i] and all(m[j, s - q] for q in range(k))
                        and [a[j, s - q] for q in range(k)] == key]
                v = _normalised(vals, g[i, t], ddof, scale, eps)
                levels[i, t, k], inform[i, t, k] = v, v != 0
    w = (np.arange(history + 2) + 1.0) ** alpha
    adv = np.zeros((batch, num_turns))
    for i, t in zip(*np.nonzero(m), strict=True):
        sel = inform[i, t]
        if sel.any():
            adv[i, t] = float((w[sel] * levels[i, t, sel]).sum() / (w[sel].sum() + eps))
    return adv, levels, inform


# --------------------------------------------------------------------------------------------
# Shrinkage baselines
# --------------------------------------------------------------------------------------------


def shrinkage_baseline(rewards, group_ids, mask=None, leave_one_out=False):
    """Per prompt with explicit member lists: positive-part James–Stein toward the mean of means."""
    r = _f64(rewards)
    m = np.ones(r.shape, bool) if mask is None else np.asarray(mask, bool)
    ids = [int(i) for i in np.asarray(group_ids)]
    members = {}
    for i in range(len(r)):
        if m[i]:
            members.setdefault(ids[i], []).append(i)
    means = {p: math.fsum(r[j] for j in rows) / len(rows) for p, rows in members.items()}
    num_prompts = len(means)
    grand = math.fsum(means.values()) / num_prompts if num_prompts else 0.0
    spread = math.fsum((mu - grand) ** 2 for mu in means.values())
    dof = sum(len(rows) - 1 for rows in members.values())
    ss = math.fsum((r[j] - means[p]) ** 2 for p, rows in members.items() for j in rows)
    sigma2 = ss / dof if dof > 0 else 0.0
    base, coef = np.zeros(len(r)), np.zeros(len(r))
    for p, rows in members.items():
        n = len(rows)
        size = n - 1 if leave_one_out else n
        if size == 0:
            c = 1.0
        elif dof == 0:
            c = 0.0
        elif spread == 0:
            c = 1.0 if num_prompts > 3 else 0.0
        else:
            c = min(1.0, max(0.0, max(num_prompts - 3, 0) * sigma2 / size / spread))
        for i in rows:
            if leave_one_out:
                est = math.fsum(r[j] for j in rows if j != i) / (n - 1) if n > 1 else 0.0
            else:
                est = means[p]
            base[i] = grand + (1 - c) * (est - grand)
            coef[i] = c
    return base, coef, grand


# --------------------------------------------------------------------------------------------
# Entropy
# --------------------------------------------------------------------------------------------


def token_entropy(logits, temperature=1.0):
    """-Σ p log p per position, with an explicit float64 softmax per position."""
    z = _f64(logits) / temperature
    out = np.zeros(z.shape[:2])
    for b in range(z.shape[0]):
        for t in range(z.shape[1]):
            row = z[b, t] - z[b, t].max()
            p = np.exp(row) / np.exp(row).sum()
            out[b, t] = -math.fsum(pi * math.log(pi) for pi in p if pi > 0)
    return out


# --------------------------------------------------------------------------------------------
# Diagnostics
# --------------------------------------------------------------------------------------------


def dead_groups(rewards, group_ids, mask=None):
    r = _f64(rewards)
    m = np.ones(r.shape, bool) if mask is None else np.asarray(mask, bool)
    members = {}
    for i, g in enumerate(np.asarray(group_ids)):
        if m[i]:
            members.setdefault(int(g), []).append(r[i])
    if not members:
        return 0.0, 0.0, 0
    p = math.fsum(v for vals in members.values() for v in vals) / sum(map(len, members.values()))
    dead = sum(max(v) == min(v) for v in members.values()) / len(members)
    expected = math.fsum(p ** len(v) + (1 - p) ** len(v) for v in members.values()) / len(members)
    return dead, expected, len(members)


def anchor_hit_ratio(anchors, turn_mask, group_ids):
    a, m, ids = np.asarray(anchors), np.asarray(turn_mask, bool), np.asarray(group_ids)
    steps = [(b, t) for b in range(a.shape[0]) for t in range(a.shape[1]) if m[b, t]]
    if not steps:
        return 0.0
    hits = sum(any((j, s) != (b, t) and ids[j] == ids[b] and a[j, s] == a[b, t] for j, s in steps)
               for b, t in steps)
    return hits / len(steps)


def credit_by_category(credit, categories, valid, num):
    c = _f64(credit)
    out = []
    for k in range(num):
        vals = [c[idx] for idx in zip(*np.nonzero(valid & (categories == k)), strict=True)]
        out.append((math.fsum(vals) / len(vals) if vals else 0.0,
                    math.fsum(abs(v) for v in vals) / len(vals) if vals else 0.0, len(vals)))
    return np.array(out)

"""Slow NumPy float64 loop references for the estimators of issue 15: GAE, value loss, HGPO,
shrinkage baselines, rollout importance sampling, entropy and credit diagnostics.

Written from the formulas in the credax docstrings, one row (or one group) at a time with plain
Python loops over explicit index lists. Values at masked positions are never read. Nothing here
imports credax or JAX.
"""

from __future__ import annotations

import math

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

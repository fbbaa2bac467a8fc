"""NumPy float64 loop references for the stopping-turn question of verl RFC #7244.

Written from the formulas of ``credax.unbiased_turn_advantages``' docstring, one row at a time
over explicit index lists; values at masked turns are never read. Nothing here imports credax or
JAX. Also the two-turn stopping MDP of ``tests/test_turn_baseline.py``, enumerated exactly.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def returns_to_go(rewards, mask, gamma=1.0) -> np.ndarray:
    """``G_{i,t} = Σ_{k>=t, valid} γ^{k-t} r_{i,k}`` on valid turns, 0 elsewhere."""
    r, m = np.asarray(rewards, np.float64), np.asarray(mask, bool)
    out = np.zeros(r.shape)
    for i in range(r.shape[0]):
        for t in range(r.shape[1]):
            if m[i, t]:
                out[i, t] = sum(gamma ** (k - t) * r[i, k] for k in range(t, r.shape[1]) if m[i, k])
    return out


def peer_compare(x, mask, ids, *, loo=True, std=False, ddof=1, eps=0.0, singleton="raw"):
    """Per (prompt, turn index): ``x - mean(peers)`` (leave-one-out or self-inclusive), optionally
    divided by ``std + eps`` of the whole set; a set of one gives ``x`` (raw) or ``0`` (zero)."""
    x, m, ids = np.asarray(x, np.float64), np.asarray(mask, bool), np.asarray(ids)
    out = np.zeros(x.shape)
    for i in range(x.shape[0]):
        for t in range(x.shape[1]):
            if not m[i, t]:
                continue
            members = [j for j in range(x.shape[0]) if ids[j] == ids[i] and m[j, t]]
            n = len(members)
            if n <= 1 or n - ddof <= 0:
                out[i, t] = x[i, t] if singleton == "raw" else 0.0
                continue
            values = np.array([x[j, t] for j in members])
            if np.all(values == values[0]):
                continue  # a constant set: exactly 0
            others = [x[j, t] for j in members if j != i]
            centred = x[i, t] - (np.mean(others) if loo else np.mean(values))
            if std:
                centred /= math.sqrt(np.sum((values - values.mean()) ** 2) / (n - ddof)) + eps
            out[i, t] = centred
    return out


def unbiased_turn_advantages(rewards, mask, ids, *, gamma=1.0, **compare):
    """Return to go first, one comparison per (prompt, turn) after."""
    return peer_compare(returns_to_go(rewards, mask, gamma), mask, ids, **compare)


def per_index_then_sum(rewards, mask, ids, **compare):
    """The RFC's biased construction: centre each reward per turn index, then credit turn ``t``
    with the sum of the centred rewards of the turns from ``t`` to the row's own last turn."""
    z = peer_compare(rewards, mask, ids, **compare)
    return returns_to_go(z, mask, 1.0)


# --- the two-turn stopping MDP -----------------------------------------------------------------
#
# Turn 1: continue with p = σ(θ1) (reward c), or stop (reward s, the trajectory ends).
# Turn 2 (after continue): a good answer with q = σ(θ2) (reward 1), else 0.
# J = (1-p)s + p(c + q);  ∂J/∂θ1 = p(1-p)(c + q - s);  ∂J/∂θ2 = p·q(1-q).
# A trajectory is one of three outcomes: 0 = stop, 1 = continue + good, 2 = continue + bad.

OUTCOMES = ("stop", "good", "bad")


def outcome_arrays(outcome: int, c: float, s: float):
    """Turn rewards ``[2]`` and turn mask ``[2]`` of one outcome."""
    if outcome == 0:
        return [s, 0.0], [True, False]
    return [c, 1.0 if outcome == 1 else 0.0], [True, True]


def scores(outcome: int, p: float, q: float) -> np.ndarray:
    """``∇_{θ1,θ2} log π`` of each turn's action: ``[turn, param]``. σ'(θ)/σ(θ) = 1 - σ(θ)."""
    g = np.zeros((2, 2))
    g[0, 0] = -p if outcome == 0 else 1.0 - p
    if outcome == 1:
        g[1, 1] = 1.0 - q
    elif outcome == 2:
        g[1, 1] = -q
    return g


def enumerate_groups(group_size: int, p: float, q: float, c: float, s: float):
    """Every joint outcome of one group of ``group_size`` i.i.d. rollouts: the stacked batch
    (rewards [N·G, 2], mask, ids, per-row scores [N·G, 2, 2]) and each group's probability."""
    rewards, mask, ids, score, prob = [], [], [], [], []
    probs = (1.0 - p, p * q, p * (1.0 - q))
    for g, combo in enumerate(itertools.product(range(3), repeat=group_size)):
        prob.append(math.prod(probs[o] for o in combo))
        for o in combo:
            r, m = outcome_arrays(o, c, s)
            rewards.append(r)
            mask.append(m)
            ids.append(g)
            score.append(scores(o, p, q))
    return (np.array(rewards), np.array(mask), np.array(ids), np.array(score), np.array(prob))


def expected_gradient(advantages, score, prob, group_size: int) -> np.ndarray:
    """``E[(1/G) Σ_i Σ_t ∇log π(a_{i,t}) A_{i,t}]`` over the enumerated groups: ``[θ1, θ2]``."""
    adv = np.asarray(advantages, np.float64)
    per_row = np.einsum("bt,btp->bp", adv, score)  # Σ_t A_{i,t} ∇log π(a_{i,t})
    per_group = per_row.reshape(-1, group_size, 2).mean(axis=1)
    return prob @ per_group

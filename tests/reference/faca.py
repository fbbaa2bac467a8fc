"""NumPy float64 loop reference for ``credax.faca_advantages``.

Written from its docstring's formulas, one entry and one explicit peer list at a time; values
outside the masks are never read. Nothing here imports credax or JAX. The normalisation is
``Normalization``'s defaults and its ``eps``, ``ddof`` and ``scale`` ("group" or "none"): a set of
one (or ``n - ddof <= 0``) gives ``0``, a set of equal values exactly ``0``, a set holding a
non-finite value NaN at every member, else ``(x - mean) / (std + eps)`` (or ``x - mean``).
"""

from __future__ import annotations

import math

import numpy as np


def _normalised(value: float, peers: list[float], *, eps: float, ddof: int, scale: str) -> float:
    if not all(math.isfinite(v) for v in peers):
        return math.nan
    n = len(peers)
    if n == 1 or n - ddof <= 0 or max(peers) == min(peers):
        return 0.0
    mean = math.fsum(peers) / n
    if scale == "none":
        return value - mean
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in peers) / (n - ddof))
    return (value - mean) / (std + eps)


def default_reaction_mask(turn_mask) -> np.ndarray:
    """Every valid turn of a row but its last valid one."""
    m = np.asarray(turn_mask, bool)
    out = np.zeros(m.shape, bool)
    for i in range(m.shape[0]):
        turns = [k for k in range(m.shape[1]) if m[i, k]]
        for k in turns[:-1]:
            out[i, k] = True
    return out


def faca(reactions, outcome_rewards, turn_mask, group_ids, *, reaction_mask=None,
         reaction_coef=1.0, eps=1e-6, ddof=1, scale="group") -> np.ndarray:
    x = np.asarray(reactions, np.float64)
    r = np.asarray(outcome_rewards, np.float64)
    m = np.asarray(turn_mask, bool)
    react = default_reaction_mask(m) if reaction_mask is None else np.asarray(reaction_mask, bool)
    ids = [int(v) for v in np.asarray(group_ids)]
    batch, num_turns = m.shape
    rows = [i for i in range(batch) if m[i].any()]  # rows with a valid turn: the trajectories
    opts = dict(eps=eps, ddof=ddof, scale=scale)
    out = np.zeros(m.shape)
    for i in rows:
        a_o = _normalised(float(r[i]), [float(r[j]) for j in rows if ids[j] == ids[i]], **opts)
        for k in range(num_turns):
            if not m[i, k]:
                continue
            if not react[i, k]:
                out[i, k] = a_o
                continue
            peers = [float(x[j, k]) for j in rows if ids[j] == ids[i] and react[j, k] and m[j, k]]
            a_r = _normalised(float(x[i, k]), peers, **opts)
            out[i, k] = a_o + reaction_coef * a_r
    return out

"""Slow NumPy float64 loop references for the foundation: group statistics, outcome advantages and
turn-space tools (SPEC §1-§3).

Written from SPEC.md, one entry and one peer set at a time, with plain Python loops. Values at
masked positions are never read (so NaN/inf there cannot leak in). Nothing here imports credax or
JAX. Inputs are converted to float64 first; callers compare float32 outputs with a tolerance.

Readings where SPEC is silent follow credax's documented choices (``group_normalize`` docstring):

* ``σ`` is the std of the whole peer set, also under ``leave_one_out`` (only ``μ`` changes).
* ``center=False`` with a zero-spread scaling set returns ``x`` unchanged (never divided by eps).
* ``scale="batch"``: the numerator is still centred on the *group* mean; ``σ`` is the std of every
  valid entry of the batch at the same trailing index around the batch mean (TRL's
  ``scale_rewards="batch"``); "zero spread" then refers to that batch set.
* The singleton rule (``n == 1`` or ``n - ddof <= 0``) takes precedence over every other rule;
  ``singleton="center"`` gives the centred, unscaled value (``0`` for ``n == 1``).
"""

from __future__ import annotations

import math

import numpy as np

# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _mask(mask, shape) -> np.ndarray:
    if mask is None:
        return np.ones(shape, dtype=bool)
    return np.asarray(mask, dtype=bool)


def _ids(group_ids) -> list:
    # Python ints: arbitrary width, no truncation, exact equality.
    return [int(v) for v in np.asarray(group_ids).reshape(-1)]


def _trailing(shape):
    """All trailing indices of an array shaped [B, ...] (one empty tuple for [B])."""
    return list(np.ndindex(*shape[1:])) if len(shape) > 1 else [()]


def _peers(ids, mask, i, t):
    """Rows j in the peer set of entry (i, t): same id, valid at the same trailing index."""
    return [j for j in range(len(ids)) if ids[j] == ids[i] and mask[(j, *t)]]


def _batch_set(mask, t):
    return [j for j in range(mask.shape[0]) if mask[(j, *t)]]


def _mean(vals) -> float:
    return math.fsum(vals) / len(vals)


def _std(vals, ddof: int) -> float:
    """Centred two-pass std with ``n - ddof`` in the denominator; 0 where ``n - ddof <= 0``."""
    n = len(vals)
    if n - ddof <= 0:
        return 0.0
    mu = _mean(vals)
    return math.sqrt(math.fsum((v - mu) ** 2 for v in vals) / (n - ddof))


# --------------------------------------------------------------------------------------------
# §1 group statistics
# --------------------------------------------------------------------------------------------


def group_normalize(
    x,
    group_ids,
    mask=None,
    *,
    center=True,
    scale=True,
    ddof=1,
    eps=1e-6,
    eps_mode="add",
    singleton="zero",
    leave_one_out=False,
) -> np.ndarray:
    x = _f64(x)
    mask = _mask(mask, x.shape)
    ids = _ids(group_ids)
    level = {True: "group", False: "none"}.get(scale, scale)
    out = np.zeros(x.shape, dtype=np.float64)
    for t in _trailing(x.shape):
        for i in range(x.shape[0]):
            if not mask[(i, *t)]:
                continue  # padded entries are 0
            xi = x[(i, *t)]
            peers = _peers(ids, mask, i, t)
            vals = [x[(j, *t)] for j in peers]
            n = len(vals)
            mu = _mean(vals)
            if leave_one_out:
                others = [x[(j, *t)] for j in peers if j != i]
                mu_used = _mean(others) if others else 0.0
            else:
                mu_used = mu
            if n == 1 or n - ddof <= 0:
                if singleton == "zero":
                    out[(i, *t)] = 0.0
                elif singleton == "raw":
                    out[(i, *t)] = xi
                else:  # "center": centred, unscaled; a set of one centres to 0
                    out[(i, *t)] = 0.0 if n == 1 else xi - mu_used
                continue
            group_constant = max(vals) == min(vals)
            num = xi - mu_used if center else xi
            if center and group_constant:
                out[(i, *t)] = 0.0  # exact, whatever eps
                continue
            if level == "none":
                out[(i, *t)] = num
                continue
            scale_vals = vals if level == "group" else [x[(j, *t)] for j in _batch_set(mask, t)]
            if max(scale_vals) == min(scale_vals):
                out[(i, *t)] = num  # zero-spread sets are never divided
                continue
            sigma = _std(scale_vals, ddof)
            if eps_mode == "add":
                den = sigma + eps
            else:
                den = math.sqrt(sigma * sigma + eps)
            out[(i, *t)] = num / den if den > 0 else 0.0
    return out


def group_mean(x, group_ids, mask=None) -> np.ndarray:
    x = _f64(x)
    mask = _mask(mask, x.shape)
    ids = _ids(group_ids)
    out = np.zeros(x.shape)
    for t in _trailing(x.shape):
        for i in range(x.shape[0]):
            if mask[(i, *t)]:
                out[(i, *t)] = _mean([x[(j, *t)] for j in _peers(ids, mask, i, t)])
    return out


def group_count(group_ids, mask=None) -> np.ndarray:
    ids = _ids(group_ids)
    mask = _mask(mask, (len(ids),))
    out = np.zeros(mask.shape, dtype=np.int64)
    for t in _trailing(mask.shape):
        for i in range(mask.shape[0]):
            if mask[(i, *t)]:
                out[(i, *t)] = len(_peers(ids, mask, i, t))
    return out


def peer_mean(x, group_ids, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """(leave-one-out mean of the other valid peers, their number); (0, 0) at masked entries."""
    x = _f64(x)
    mask = _mask(mask, x.shape)
    ids = _ids(group_ids)
    mean = np.zeros(x.shape)
    count = np.zeros(x.shape, dtype=np.int64)
    for t in _trailing(x.shape):
        for i in range(x.shape[0]):
            if not mask[(i, *t)]:
                continue
            others = [x[(j, *t)] for j in _peers(ids, mask, i, t) if j != i]
            count[(i, *t)] = len(others)
            mean[(i, *t)] = _mean(others) if others else 0.0
    return mean, count


# --------------------------------------------------------------------------------------------
# §2 outcome advantages
# --------------------------------------------------------------------------------------------


def grpo_advantages(rewards, group_ids, mask=None, **kwargs) -> np.ndarray:
    assert np.ndim(rewards) == 1
    return group_normalize(rewards, group_ids, mask, **kwargs)


def rloo_advantages(rewards, group_ids, mask=None, *, singleton="zero") -> np.ndarray:
    r = _f64(rewards)
    mask = _mask(mask, r.shape)
    ids = _ids(group_ids)
    out = np.zeros(r.shape)
    for i in range(r.shape[0]):
        if not mask[i]:
            continue
        others = [r[j] for j in _peers(ids, mask, i, ()) if j != i]
        if others:
            out[i] = r[i] - _mean(others)
        elif singleton == "raw":
            out[i] = r[i]
        else:  # "zero"; "center" of a set of one is also 0
            out[i] = 0.0
    return out


def gdpo_advantages(rewards, group_ids, mask=None, *, weights, **kwargs) -> np.ndarray:
    r = _f64(rewards)
    assert r.ndim == 2
    total = np.zeros(r.shape[0])
    for c in range(r.shape[1]):
        total += float(weights[c]) * group_normalize(r[:, c], group_ids, mask, **kwargs)
    if mask is not None:
        total[~np.asarray(mask, bool)] = 0.0
    return total


def degenerate_groups(rewards, group_ids, mask=None) -> np.ndarray:
    r = _f64(rewards)
    mask = _mask(mask, r.shape)
    ids = _ids(group_ids)
    out = np.zeros(r.shape, dtype=bool)
    for i in range(r.shape[0]):
        if mask[i]:
            vals = [r[j] for j in _peers(ids, mask, i, ())]
            out[i] = len(vals) == 1 or max(vals) == min(vals)
    return out


# --------------------------------------------------------------------------------------------
# §3 turn-space tools
# --------------------------------------------------------------------------------------------


def best_prior(scores, turn_mask, *, initial=0.0) -> np.ndarray:
    s = _f64(scores)
    m = np.asarray(turn_mask, bool)
    out = np.zeros(s.shape)
    for b in range(s.shape[0]):
        for k in range(s.shape[1]):
            if m[b, k]:
                out[b, k] = max([float(initial)] + [s[b, t] for t in range(k) if m[b, t]])
    return out


def future_best(scores, turn_mask) -> np.ndarray:
    s = _f64(scores)
    m = np.asarray(turn_mask, bool)
    out = np.zeros(s.shape)
    for b in range(s.shape[0]):
        for k in range(s.shape[1]):
            if m[b, k]:
                out[b, k] = max(s[b, t] for t in range(k, s.shape[1]) if m[b, t])
    return out


def discount_weights(num_turns: int, gamma: float) -> np.ndarray:
    return np.array([float(gamma) ** k for k in range(num_turns)], dtype=np.float64)


def discounted_returns(rewards, turn_mask, *, gamma) -> np.ndarray:
    r = _f64(rewards)
    m = np.asarray(turn_mask, bool)
    gamma = float(gamma)
    out = np.zeros(r.shape)
    for b in range(r.shape[0]):
        for k in range(r.shape[1]):
            if m[b, k]:
                out[b, k] = math.fsum(
                    gamma ** (t - k) * r[b, t] for t in range(k, r.shape[1]) if m[b, t]
                )
    return out


def broadcast_to_tokens(turn_values, token_turn) -> np.ndarray:
    v = _f64(turn_values)
    tt = np.asarray(token_turn)
    out = np.zeros(tt.shape)
    for b in range(tt.shape[0]):
        for t in range(tt.shape[1]):
            if tt[b, t] >= 0:
                out[b, t] = v[b, tt[b, t]]
    return out


def turn_surprisal(token_logprobs, token_turn, *, num_turns, reduce="mean") -> np.ndarray:
    lp = _f64(token_logprobs)
    tt = np.asarray(token_turn)
    out = np.zeros((tt.shape[0], num_turns))
    for b in range(tt.shape[0]):
        for k in range(num_turns):
            nll = [-lp[b, t] for t in range(tt.shape[1]) if tt[b, t] == k]
            if nll:
                out[b, k] = math.fsum(nll) / (len(nll) if reduce == "mean" else 1)
    return out

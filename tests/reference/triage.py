"""NumPy loop references for TRIAGE (role credit, fitting, judge windows) and GiGPO.

Plain Python loops over rows, turns, roles, prompts and anchors in float64; nothing here imports
credax. Degenerate sets follow SPEC §1: a set whose valid values are all identical (exact
comparison) or that has a single member gives 0.
"""

from __future__ import annotations

import math

import numpy as np

CONSTANTS = (1.0, 0.5, -0.1, -0.5)


def role_credit(roles, turn_mask, constants=CONSTANTS):
    roles, turn_mask = np.asarray(roles), np.asarray(turn_mask)
    out = np.zeros(roles.shape)
    for b in range(roles.shape[0]):
        for k in range(roles.shape[1]):
            if turn_mask[b, k] and 0 <= roles[b, k] < 4:
                out[b, k] = float(constants[int(roles[b, k])])
    return out


def _zscore(values, ddof, eps, scale=True):
    """Normalise one set of floats (list) with the degenerate rules of SPEC §1."""
    n = len(values)
    if n == 0:
        return []
    if n <= 1 or n - ddof <= 0:
        return [0.0] * n
    if max(values) == min(values):
        return [0.0] * n
    mean = sum(values) / n
    if scale in (False, "none"):
        return [v - mean for v in values]
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - ddof))
    return [(v - mean) / (std + eps) for v in values]


def triage_advantages(outcome_advantages, roles, turn_mask, lam=0.2, constants=CONSTANTS,
                      whiten=False, whiten_eps=1e-8):
    a = np.asarray(outcome_advantages, dtype=np.float64)
    roles, turn_mask = np.asarray(roles), np.asarray(turn_mask)
    batch, num_turns = roles.shape
    out = np.zeros((batch, num_turns))
    for b in range(batch):
        for k in range(num_turns):
            if not turn_mask[b, k]:
                continue
            c = float(constants[int(roles[b, k])]) if 0 <= roles[b, k] < 4 else 0.0
            out[b, k] = a[b] + lam * c
    if whiten:
        cells = [(b, k) for b in range(batch) for k in range(num_turns) if turn_mask[b, k]]
        z = _zscore([out[b, k] for b, k in cells], ddof=0, eps=whiten_eps)
        for (b, k), v in zip(cells, z, strict=True):
            out[b, k] = v
    return out


def fit_role_constants(residuals, roles, turn_mask):
    residuals = np.asarray(residuals, dtype=np.float64)
    roles, turn_mask = np.asarray(roles), np.asarray(turn_mask)
    sums, counts = [0.0] * 4, [0] * 4
    for b in range(roles.shape[0]):
        for k in range(roles.shape[1]):
            if turn_mask[b, k] and 0 <= roles[b, k] < 4:
                sums[int(roles[b, k])] += residuals[b, k]
                counts[int(roles[b, k])] += 1
    means = [s / c if c else 0.0 for s, c in zip(sums, counts, strict=True)]
    return np.array(means), np.array(counts)


def optimal_mixing_weight(residuals, roles, turn_mask, constants=CONSTANTS):
    residuals = np.asarray(residuals, dtype=np.float64)
    roles, turn_mask = np.asarray(roles), np.asarray(turn_mask)
    num = den = 0.0
    for b in range(roles.shape[0]):
        for k in range(roles.shape[1]):
            if turn_mask[b, k] and 0 <= roles[b, k] < 4:
                c = float(constants[int(roles[b, k])])
                num += c * residuals[b, k]
                den += c * c
    return num / den if den > 0 else 0.0


def judge_windows(turn_mask, before=5, after=5):
    turn_mask = np.asarray(turn_mask)
    batch, num_turns = turn_mask.shape
    width = before + 1 + after
    index = np.full((batch, num_turns, width), -1)
    valid = np.zeros((batch, num_turns, width), bool)
    for b in range(batch):
        real = [k for k in range(num_turns) if turn_mask[b, k]]
        for rank, k in enumerate(real):
            for slot in range(width):
                other = rank + slot - before
                if 0 <= other < len(real):
                    index[b, k, slot] = real[other]
                    valid[b, k, slot] = True
    return index, valid


def grpo(rewards, group_ids, row_mask=None, ddof=1, eps=1e-6, scale=True):
    """Per-prompt normalisation of one reward per row (rows with row_mask false are absent)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    group_ids = np.asarray(group_ids)
    row_mask = np.ones(len(rewards), bool) if row_mask is None else np.asarray(row_mask)
    out = np.zeros(len(rewards))
    for g in set(group_ids.tolist()):
        rows = [i for i in range(len(rewards)) if group_ids[i] == g and row_mask[i]]
        z = _zscore([rewards[i] for i in rows], ddof=ddof, eps=eps, scale=scale)
        for i, v in zip(rows, z, strict=True):
            out[i] = v
    return out


def discounted_returns(rewards, turn_mask, gamma):
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.zeros(rewards.shape)
    for b in range(rewards.shape[0]):
        for k in range(rewards.shape[1]):
            if turn_mask[b, k]:
                out[b, k] = sum(gamma ** (t - k) * rewards[b, t]
                                for t in range(k, rewards.shape[1]) if turn_mask[b, t])
    return out


def gigpo_advantages(outcome_rewards, step_rewards, anchor_ids, turn_mask, group_ids,
                     gamma=0.95, omega=1.0, scale=True, eps=1e-6):
    turn_mask = np.asarray(turn_mask)
    anchor_ids, group_ids = np.asarray(anchor_ids), np.asarray(group_ids)
    batch, num_turns = turn_mask.shape
    has_turn = turn_mask.any(axis=1)
    episode = grpo(outcome_rewards, group_ids, has_turn, ddof=1, eps=eps, scale=scale)
    returns = discounted_returns(step_rewards, turn_mask, gamma)
    anchor_groups = {}
    for b in range(batch):
        for k in range(num_turns):
            if turn_mask[b, k]:
                key = (int(group_ids[b]), int(anchor_ids[b, k]))
                anchor_groups.setdefault(key, []).append((b, k))
    step = np.zeros((batch, num_turns))
    for cells in anchor_groups.values():
        z = _zscore([returns[b, k] for b, k in cells], ddof=1, eps=eps, scale=scale)
        for (b, k), v in zip(cells, z, strict=True):
            step[b, k] = v
    out = np.zeros((batch, num_turns))
    for b in range(batch):
        for k in range(num_turns):
            if turn_mask[b, k]:
                out[b, k] = episode[b] + omega * step[b, k]
    return out

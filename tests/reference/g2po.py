"""NumPy restatement of G2PO's advantage (``Nala-YN/G2PO``, ``g2po/core_g2po.py``), written from
reading ``compute_group_aggregation_values`` and ``compute_g2po_outcome_advantage``, in the code's
own layout: one row per environment step, rows of a trajectory in step order, with ``uid``
(prompt), ``traj_uid``, the anchor observation, the episode reward and ``is_action_valid`` per
row. Plain loops over explicit member lists, float64. Nothing here imports credax, JAX or torch.

Where the code's corner cases are undefined (``torch.std`` of one value is NaN; a constant set
divided by ``std + eps`` keeps a float residue), this restatement follows the code: NaN for a
prompt of one step in component 2, and the plain float64 formula elsewhere.
"""

from __future__ import annotations

import math

import numpy as np


def _mean(v):
    return float(np.mean(np.asarray(v, np.float64)))


def _std(v):  # torch.std: unbiased; NaN for one value
    v = np.asarray(v, np.float64)
    return float(np.std(v, ddof=1)) if v.size > 1 else math.nan


def g2po_rows(uid, traj, anchor, episode_reward, action_valid, *, mode="mean_std_norm", gamma=0.95,
              success_reward=10.0, penalty=0.1, omega=1.0, eps=1e-6):
    """Per-row advantage: episode part + ω (next-node score within the node + score gain within
    the prompt); ``mode`` is ``"mean_std_norm"`` or ``"mean_norm"``."""
    n = len(uid)
    rows_of = {}
    for i in range(n):
        rows_of.setdefault(traj[i], []).append(i)
    # compute_group_aggregation_values: nodes per prompt by anchor, node value = mean of
    # γ^(L - step) R over its member rows; next node, or terminal (-1 success / -2 failure).
    node = [None] * n
    nxt = [None] * n
    value = {}
    for p in dict.fromkeys(uid):
        members = {}
        for i in range(n):
            if uid[i] == p:
                members.setdefault(anchor[i], []).append(i)
        for a, rows in members.items():
            total = 0.0
            for i in rows:
                node[i] = (p, a)
                seq = rows_of[traj[i]]
                total += gamma ** (len(seq) - seq.index(i)) * episode_reward[i]
            value[(p, a)] = total / len(rows)
    for seq in rows_of.values():
        for k, i in enumerate(seq):
            if k + 1 < len(seq):
                nxt[i] = node[seq[k + 1]]
            else:
                nxt[i] = "success" if episode_reward[i] == success_reward else "failure"
    value["success"], value["failure"] = success_reward, 0.0

    def norm(x, population):
        centred = x - _mean(population)
        return centred / (_std(population) + eps) if mode == "mean_std_norm" else centred

    out = np.zeros(n)
    for i in range(n):
        prompt_rows = [j for j in range(n) if uid[j] == uid[i]]
        # Episode level: every row of the prompt pooled (compute_mean_std_cross_steps=True);
        # a prompt of one row has mean 0 and std 1.
        rewards = [episode_reward[j] for j in prompt_rows]
        if len(rewards) == 1:
            e = episode_reward[i] if mode == "mean_norm" else episode_reward[i] / (1.0 + eps)
        else:
            e = norm(episode_reward[i], rewards)
        # Component 1: next-node scores (minus the invalid penalty) within the step's node.
        same = [j for j in prompt_rows if node[j] == node[i]]
        scored = [value[nxt[j]] - (0.0 if action_valid[j] else penalty) for j in same]
        c1 = norm(scored[same.index(i)], scored) if len(same) > 1 else 0.0
        # Component 2: score gains over every row of the prompt.
        gains = [value[nxt[j]] - value[node[j]] for j in prompt_rows]
        c2 = norm(gains[prompt_rows.index(i)], gains)
        out[i] = e + omega * (c1 + c2)
    return out


def rows_from_padded(outcome, anchors, mask, ids, action_valid=None):
    """credax's ``[B, K]`` layout as the code's rows (trajectory by trajectory, steps in order):
    the row lists and the ``(b, t)`` of each row."""
    outcome, anchors, mask = np.asarray(outcome), np.asarray(anchors), np.asarray(mask, bool)
    valid = np.ones(mask.shape, bool) if action_valid is None else np.asarray(action_valid, bool)
    uid, traj, anchor, reward, act, where = [], [], [], [], [], []
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if mask[b, t]:
                uid.append(int(ids[b]))
                traj.append(b)
                anchor.append(int(anchors[b, t]))
                reward.append(float(outcome[b]))
                act.append(bool(valid[b, t]))
                where.append((b, t))
    return (uid, traj, anchor, reward, act), where

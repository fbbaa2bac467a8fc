"""NumPy float64 loop reference for ``credax.pgpo_advantages``.

Written from its docstring's formulas with explicit member lists per step; values at masked turns
are never read. Nothing here imports credax or JAX.
"""

from __future__ import annotations

import math

import numpy as np


def pgpo(step_rewards, anchors, turn_mask, group_ids, *, gamma=1.0):
    s, a, m = np.asarray(step_rewards, np.float64), np.asarray(anchors), np.asarray(turn_mask, bool)
    ids = [int(i) for i in np.asarray(group_ids)]
    batch, num_turns = m.shape
    g = np.zeros(s.shape)
    for b in range(batch):
        running = 0.0
        for t in reversed(range(num_turns)):
            if m[b, t]:
                running = s[b, t] + gamma * running
                g[b, t] = running
    phi = np.zeros(s.shape)
    for b in range(batch):
        for t in range(num_turns):
            if m[b, t]:
                peers = [g[j, u] for j in range(batch) for u in range(num_turns)
                         if m[j, u] and ids[j] == ids[b] and a[j, u] == a[b, t]]
                phi[b, t] = math.fsum(peers) / len(peers)
    adv = np.zeros(s.shape)
    for b in range(batch):
        steps = [t for t in range(num_turns) if m[b, t]]
        if not steps:
            continue
        for here, nxt in zip(steps, steps[1:] + [None], strict=True):
            adv[b, here] = (phi[b, nxt] if nxt is not None else g[b, here]) - phi[b, here]
    return adv, phi

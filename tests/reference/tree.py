"""NumPy float64 references for ``credax.tree_advantages``, one per peer rule, written from the
peers' published rules as node objects and explicit loops (never from credax's doubling):

* :func:`treerpo` — TreeRPO (``omrisapir1/treerpo``): every leaf pushes its reward onto a list at
  each ancestor; an inner node's value is the mean of its list; each sibling set is centred
  (optionally divided by its std), a set of one gets the singleton rule.
* :func:`areal` — AReaL PR #1666's tree discount, recursively: ``V = r + γ · mean(V(children))``;
  the advantage compares siblings as above.
* :func:`tree_grpo` — Tree-GRPO (``AMAP-ML/Tree-GRPO``, ``adv_estimator=tree``): one trajectory
  per leaf (root to leaf), verl's GRPO over the prompt's trajectories plus verl's GRPO over the
  tree's; a node's advantage is the mean over the trajectories through it.

Values at padded nodes, and parents of padded nodes, are never read. Nothing here imports credax
or JAX. Malformed forests are not handled (the tests give them to credax only).
"""

from __future__ import annotations

import math

import numpy as np


def _children(parent, mask, row):
    kids = {n: [] for n in range(parent.shape[1]) if mask[row, n]}
    roots = []
    for n in kids:
        if parent[row, n] < 0:
            roots.append(n)
        else:
            kids[int(parent[row, n])].append(n)
    return kids, roots


def _norm(xs, *, scale="none", ddof=1, eps=1e-6, singleton="zero"):
    """A credax ``Normalization`` (centred; ``scale`` "none" or "group", ``eps_mode="add"``) of
    one set, as a list."""
    n = len(xs)
    if n <= 1 or n - ddof <= 0:
        return [0.0 if singleton == "zero" else x for x in xs]
    mu = math.fsum(xs) / n
    if max(xs) == min(xs):
        return [0.0] * n
    if scale == "none":
        return [x - mu for x in xs]
    sd = math.sqrt(math.fsum((x - mu) ** 2 for x in xs) / (n - ddof))
    return [(x - mu) / (sd + eps) for x in xs]


def _prompt_rows(group_ids, rows):
    ids = list(range(rows)) if group_ids is None else [int(g) for g in np.asarray(group_ids)]
    return {g: [p for p in range(rows) if ids[p] == g] for g in dict.fromkeys(ids)}


def _sibling_advantages(values, parent, mask, group_ids, **norm):
    rows = mask.shape[0]
    adv = np.zeros(mask.shape)
    for members in _prompt_rows(group_ids, rows).values():
        roots = []
        for p in members:
            kids, row_roots = _children(parent, mask, p)
            roots += [(p, n) for n in row_roots]
            for cs in kids.values():
                for c, a in zip(cs, _norm([values[p, c] for c in cs], **norm), strict=True):
                    adv[p, c] = a
        for (p, n), a in zip(roots, _norm([values[p, n] for p, n in roots], **norm), strict=True):
            adv[p, n] = a
    return adv


def treerpo(rewards, parent, mask, group_ids=None, **norm):
    """TreeRPO's values (mean of the descendant leaves) and sibling advantages."""
    r, parent, mask = np.asarray(rewards, np.float64), np.asarray(parent), np.asarray(mask, bool)
    values = np.zeros(r.shape)
    for p in range(r.shape[0]):
        kids, _ = _children(parent, mask, p)
        accumulated = {n: [] for n in kids}
        for n in kids:
            if not kids[n]:  # a leaf: its reward goes to itself and every ancestor
                node = n
                while True:
                    accumulated[node].append(r[p, n])
                    if parent[p, node] < 0:
                        break
                    node = int(parent[p, node])
        for n, rs in accumulated.items():
            values[p, n] = math.fsum(rs) / len(rs)
    return _sibling_advantages(values, parent, mask, group_ids, **norm), values


def areal(rewards, parent, mask, group_ids=None, *, gamma=1.0, **norm):
    """AReaL's tree-discounted values (recursive) and sibling advantages."""
    r, parent, mask = np.asarray(rewards, np.float64), np.asarray(parent), np.asarray(mask, bool)
    values = np.zeros(r.shape)
    for p in range(r.shape[0]):
        kids, roots = _children(parent, mask, p)

        def value(n, p=p, kids=kids):
            below = [value(c) for c in kids[n]]
            own = r[p, n]
            return own + gamma * math.fsum(below) / len(below) if below else own

        for n in kids:
            values[p, n] = value(n)
    return _sibling_advantages(values, parent, mask, group_ids, **norm), values


def tree_grpo(rewards, parent, mask, group_ids=None, **norm):
    """Tree-GRPO's trajectory advantages (prompt GRPO + tree GRPO), averaged per node."""
    r, parent, mask = np.asarray(rewards, np.float64), np.asarray(parent), np.asarray(mask, bool)
    rows = r.shape[0]
    trajectories = []  # (row, path from the root to the leaf, tree id, prompt)
    for prompt, members in _prompt_rows(group_ids, rows).items():
        for p in members:
            kids, _ = _children(parent, mask, p)
            for leaf in (n for n in kids if not kids[n]):
                path = [leaf]
                while parent[p, path[-1]] >= 0:
                    path.append(int(parent[p, path[-1]]))
                trajectories.append((p, path[::-1], (p, path[-1]), prompt))
    score = [r[p, path[-1]] for p, path, _, _ in trajectories]
    total = [0.0] * len(trajectories)
    for key in (3, 2):  # inter-tree (the prompt), then intra-tree (the tree)
        for k in dict.fromkeys(t[key] for t in trajectories):
            idx = [i for i, t in enumerate(trajectories) if t[key] == k]
            for i, a in zip(idx, _norm([score[i] for i in idx], **norm), strict=True):
                total[i] += a
    through: dict[tuple[int, int], list[float]] = {}
    for (p, path, _, _), a in zip(trajectories, total, strict=True):
        for n in path:
            through.setdefault((p, n), []).append(a)
    adv = np.zeros(r.shape)
    for (p, n), adv_list in through.items():
        adv[p, n] = math.fsum(adv_list) / len(adv_list)
    return adv, treerpo(r, parent, mask, group_ids)[1]

"""Tree credit: advantages over branching rollouts given by parent links (TreeRPO, Tree-GRPO, AReaL).

A forest is padded to ``[P, N]``: one row per prompt (or per tree, with ``group_ids`` naming the
prompt of each row), ``parent[p, n]`` the index in the same row of node ``n``'s parent, ``-1`` at
roots, node order arbitrary. The roots of one prompt (of a row, or of the rows sharing a
``group_ids`` value) are siblings: the prompt is their shared, implicit parent.

Every quantity below is a sum over the nodes below a node, ``Σ_k U^k x`` with ``U`` the
one-level "sum over children" operator. It is computed by pointer doubling: after round ``j``
the sums cover the ``2^j`` nearest levels, and the jump to the ``2^j``-th ancestor doubles with
one gather, so ``ceil(log2(N + 1))`` rounds (a static count) are exact for any forest of ``N``
nodes — no depth bound, no loop over values, ``O(N log N)`` work per row. A weighted edge
(AReaL's ``γ / #children``) doubles the same way: the weight of a ``2^(j+1)`` jump is the product
of two ``2^j`` jumps. After the last round a pointer that has not run off a root is on a cycle:
that is how the traced function finds one.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._checks import Unit
from ._group_ids import Groups
from ._group_stats import check_x_and_groups
from ._grouping import jit_grouped, normalization_or, normalize_with_groups
from ._normalization import Normalization

VALUES = ("leaf_mean", "discounted")
BASELINES = ("siblings", "tree_grpo")


class TreeCredit(NamedTuple):
    """Tree advantages and the node values they compare.

    Attributes:
      advantages: ``float[P, N]`` each node's advantage; ``0`` at padded nodes.
      values: ``float[P, N]`` each node's value (the mean leaf reward below it, or AReaL's
        discounted tree return); ``0`` at padded nodes.
    """

    advantages: Array
    values: Array


class _Forest(NamedTuple):
    """The structure of a forest, computed once: edges, leaves, jump tables, roots, flags."""

    up: jax.Array  # int[P, N] parent of a valid node with a valid parent, else -1
    children: jax.Array  # int[P, N] valid children of each node
    leaf: jax.Array  # bool[P, N] valid nodes without valid children
    jumps: tuple  # ((anc_j, int[P, N]) per round): the 2^j-th ancestor, -1 past a root
    root: jax.Array  # int[P, N] the root above each node (itself at a root)
    bad_row: jax.Array  # bool[P, 1] a row with a malformed forest


def _rounds(num_nodes: int) -> int:
    """Doubling rounds that cover every path of an acyclic forest of ``num_nodes`` nodes
    (``2**rounds > num_nodes``)."""
    return max(1, int(num_nodes).bit_length())


def _gather(table: jax.Array, index: jax.Array, fill) -> jax.Array:
    """``table[p, index[p, n]]`` per row, ``fill`` where ``index < 0``."""
    got = jnp.take_along_axis(table, jnp.maximum(index, 0), axis=1)
    return jnp.where(index >= 0, got, jnp.asarray(fill, table.dtype))


def _push_up(x: jax.Array, to: jax.Array) -> jax.Array:
    """``out[p, m] = Σ_{n: to[p, n] == m} x[p, n, ...]``; entries with ``to < 0`` are dropped."""
    rows, nodes = to.shape
    flat = jnp.arange(rows, dtype=to.dtype)[:, None] * nodes + to
    flat = jnp.where(to >= 0, flat, rows * nodes)  # out of range: dropped by segment_sum
    out = jax.ops.segment_sum(x.reshape((rows * nodes,) + x.shape[2:]), flat.reshape(-1),
                              rows * nodes)
    return out.reshape(x.shape)


def _forest(parent: jax.Array, valid: jax.Array) -> _Forest:
    """Edges, leaves, jump tables and roots of a padded forest, and which rows are malformed
    (a valid node whose parent is out of range or padding, or on a cycle or below one)."""
    rows, nodes = parent.shape
    in_range = (parent >= -1) & (parent < nodes)
    linked = valid & in_range & (parent >= 0)
    parent_valid = _gather(valid, jnp.where(linked, parent, -1), False)
    bad = valid & (~in_range | (linked & ~parent_valid))
    up = jnp.where(linked & parent_valid, parent, -1)
    children = _push_up(jnp.ones_like(up), up)
    leaf = valid & (children == 0)
    jumps = []
    anc = up
    top = jnp.where(up >= 0, up, jnp.broadcast_to(jnp.arange(nodes, dtype=up.dtype), up.shape))
    for _ in range(_rounds(nodes)):
        jumps.append(anc)
        anc = _gather(anc, anc, -1)
        top = jnp.take_along_axis(top, top, axis=1)
    # After 2^rounds > N steps a pointer still on a node has gone round a cycle.
    bad = bad | (valid & (anc >= 0))
    return _Forest(up, children, leaf, tuple(jumps), top, bad.any(axis=1, keepdims=True))


def _subtree_sums(x: jax.Array, forest: _Forest, weight: jax.Array | None = None) -> jax.Array:
    """``Σ_k U^k x``: each node's own ``x`` plus its descendants', each carried up its path with
    the product of the ``weight`` of the edges it crossed (``weight[c]`` is the edge from ``c`` to
    its parent; ``None``: 1). ``x`` is ``[P, N]`` or ``[P, N, C]``; its padded entries must be 0."""
    extra = (None,) * (x.ndim - 2)
    w = weight
    for anc in forest.jumps:
        moved = x if w is None else w[(...,) + extra] * x
        x = x + _push_up(moved, anc)
        if w is not None:
            w = w * _gather(w, anc, 0)
    return x


def _sibling_groups(forest: _Forest, prompt: jax.Array, num_prompts: int) -> Groups:
    """Sibling sets as groups of the flattened ``[P * N]`` nodes: the children of one node, or the
    roots of one prompt (``prompt[p]`` the dense prompt of row ``p``)."""
    rows, nodes = forest.up.shape
    own = num_prompts + jnp.arange(rows, dtype=forest.up.dtype)[:, None] * nodes + forest.up
    index = jnp.where(forest.up >= 0, own, prompt[:, None])
    return Groups(index.reshape(-1), num_prompts + rows * nodes)


@jit_grouped(static_argnames=("values", "baseline"))
def tree_advantages(
    leaf_rewards: Float[Array, "P N"],
    parent: Int[Array, "P N"],
    node_mask: Bool[Array, "P N"],
    *,
    group_ids: Int[Array, " P"] | Groups | None = None,
    values: str = "leaf_mean",
    baseline: str = "siblings",
    gamma: Unit = 1.0,
    normalization: Normalization | None = None,
) -> TreeCredit:
    """Advantages of the nodes of rollout trees: each node's value against its siblings' (TreeRPO).

    With ``ch(n)`` the valid children of node ``n``, ``leaves(n)`` the leaves at or below it,
    ``r`` the rewards and ``S(n)`` its sibling set (the children of its parent; for a root, the
    roots of its prompt)::

        values="leaf_mean"   V(n) = mean_{ℓ ∈ leaves(n)} r_ℓ                     (TreeRPO)
        values="discounted"  V(n) = r_n + γ · mean_{c ∈ ch(n)} V(c),  V(leaf) = r  (AReaL #1666)

        baseline="siblings"  A(n) = norm_{S(n)}(V)(n):  V(n) - mean_{S(n)} V    (TreeRPO's default)
        baseline="tree_grpo" A(ℓ) = norm_{tree(ℓ)}(r)(ℓ) + norm_{prompt(ℓ)}(r)(ℓ)  at a leaf ℓ,
                             A(n) = mean_{ℓ ∈ leaves(n)} A(ℓ)  above it            (Tree-GRPO)

    ``norm_X`` is ``normalization`` applied over the set ``X`` (a :class:`credax.Normalization`:
    centring, optional std scaling, singletons, exact-zero spread). With the default
    (``scale="none"``) a sibling set of one gives ``0`` and a row of ``G`` leaf roots gives Dr.
    GRPO's ``r - mean(r)``. ``tree(ℓ)`` is the leaves below ``ℓ``'s root (Tree-GRPO's intra-tree
    group), ``prompt(ℓ)`` every leaf of its prompt (inter-tree). Above a leaf, the Tree-GRPO
    advantage is the mean of the advantages of the trajectories through the node; for scaled
    normalisations it equals ``norm`` of ``V(n)`` with the leaves' mean and std.

    Tokens reach their node through the token map of turns: with training rows ``[P, T]`` and
    ``token_node[p, t]`` the node that generated token ``t`` (``-1``: prompt, observation,
    padding), ``credax.broadcast_to_tokens(out.advantages, token_node)``.

    Args:
      leaf_rewards: ``float[P, N]`` the reward of each node. ``values="leaf_mean"`` and
        ``baseline="tree_grpo"`` read it at leaves only (any value elsewhere, NaN included, never
        matters); ``values="discounted"`` reads every valid node (a node's own reward, ``0``
        where it has none, as AReaL's ``None``).
      parent: ``int[P, N]`` the index of each node's parent in the same row, ``-1`` at roots;
        padded values never matter.
      node_mask: ``bool[P, N]`` real nodes. A leaf is a real node without real children.
      group_ids: ``int[P]`` (or a :class:`credax.Groups`) the prompt of each row: the roots of
        rows with equal ids are siblings (one tree per row, Tree-GRPO's ``tree_uid`` rows).
        ``None``: each row is its own prompt.
      values: ``"leaf_mean"`` or ``"discounted"`` (static).
      baseline: ``"siblings"`` or ``"tree_grpo"`` (static; ``"tree_grpo"`` reads leaf rewards
        only and needs ``values="leaf_mean"``).
      gamma: AReaL's ``turn_discount`` in ``[0, 1]`` (``values="discounted"`` only); may be traced.
      normalization: a :class:`credax.Normalization`; ``None``: ``Normalization(scale="none")``
        for ``"siblings"`` (TreeRPO's ``r - mean``), ``Normalization()`` for ``"tree_grpo"``
        (``credax.presets.VERL`` is Tree-GRPO's own, singletons raw).

    Returns:
      :class:`TreeCredit` ``(advantages, values)``, ``float[P, N]`` each, ``0`` at padded nodes.
      Malformed rows — a valid node whose ``parent`` is out of ``[-1, N)``, points at a padded
      node, or lies on (or below) a cycle — are NaN at every valid node of the row (values and
      advantages; other rows are unaffected); :func:`credax.validate_tree` names the node eagerly.
      A non-finite reward that is read makes NaN of the values above it and of the advantages
      whose formula includes them.

    Raises:
      TypeError: non-integer ``parent``, non-boolean ``node_mask``, non-numeric rewards.
      ValueError: shapes disagree; an unknown ``values`` / ``baseline``; ``baseline="tree_grpo"``
        with ``values="discounted"``; a concrete ``gamma`` outside ``[0, 1]``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> # Root 0 has children 1 and 2; node 1 has leaves 3 (reward 1) and 4 (0); 2 is a leaf (1).
      >>> parent = jnp.array([[-1, 0, 0, 1, 1]])
      >>> r = jnp.array([[0.0, 0.0, 1.0, 1.0, 0.0]])
      >>> out = credax.tree_advantages(r, parent, jnp.ones((1, 5), bool))
      >>> out.values     # V(1) = mean(1, 0), V(0) = mean(1, 0, 1)
      Array([[0.6666667, 0.5      , 1.       , 1.       , 0.       ]], dtype=float32)
      >>> out.advantages.tolist()   # siblings (1, 2): ∓0.25; (3, 4): ±0.5; the lone root: 0
      [[0.0, -0.25, 0.25, 0.5, -0.5]]
      >>> token_node = jnp.array([[-1, 0, 1, 1, 3, -1, 2]])   # one row of tokens per prompt
      >>> credax.broadcast_to_tokens(out.advantages, token_node).tolist()
      [[0.0, 0.0, -0.25, -0.25, 0.5, 0.0, 0.25]]

    References:
      TreeRPO (Yang et al., arXiv 2506.05183; the rule as in ``omrisapir1/treerpo``: a node's
      reward is the mean of its descendant leaves, a sibling set's advantage ``r - mean(r)``, no
      std). That code trains only sibling sets of two or more and does not descend below a lone
      child; credax gives a lone child ``0`` and goes on below it (its tree builder never makes
      one). Tree-GRPO (Ji et al., arXiv 2509.21240; ``AMAP-ML/Tree-GRPO``, ``adv_estimator=tree``:
      verl's GRPO over the prompt's leaves plus verl's GRPO over the tree's, one advantage per
      root-to-leaf trajectory). AReaL PR #1666 (``discount_mode="tree"``: ``parent.reward =
      raw + turn_discount · mean(child.reward)``, equal to the linear discount on a chain); AReaL
      leaves the advantage to its trainer, credax compares siblings.
    """
    r = _checks.as_float_array(leaf_rewards, "leaf_rewards")
    _checks.check_ndim(r, "leaf_rewards", 2, "[P, N]")
    par = _checks.as_index_array(parent, "parent")
    _checks.check_shape(par, "parent", r.shape, "[P, N]")
    valid = _checks.as_mask(node_mask, "node_mask", r.shape)
    _checks.check_option(values, "values", VALUES)
    _checks.check_option(baseline, "baseline", BASELINES)
    if baseline == "tree_grpo" and values != "leaf_mean":
        raise ValueError("`baseline='tree_grpo'` compares leaf rewards (one outcome per "
                         "trajectory) and needs `values='leaf_mean'`; got "
                         f"`values={values!r}`.")
    rows, nodes = r.shape
    if group_ids is None:
        prompt, num_prompts = jnp.arange(rows, dtype=par.dtype), rows
    else:
        check_x_and_groups(r, group_ids, "leaf_rewards")
        prompt, num_prompts = group_ids.index.astype(par.dtype), group_ids.num_groups
    opts = normalization_or(normalization, Normalization(scale="none")
                            if baseline == "siblings" else Normalization())
    out_dtype = _numeric.output_dtype(r.dtype)
    dt = _numeric.compute_dtype(out_dtype)
    zero = jnp.zeros((), dt)
    r = r.astype(dt)
    f = _forest(par, valid)

    columns = []
    if baseline == "tree_grpo":
        # Each leaf's trajectory advantage first (it reads the leaves and their roots only), so
        # one pass of subtree sums carries the values and the advantages up together.
        leaf_flat = f.leaf.reshape(-1)
        r_leaf = jnp.where(f.leaf, r, zero).reshape(-1)
        tree = (jnp.arange(rows, dtype=par.dtype)[:, None] * nodes + f.root).reshape(-1)
        intra = normalize_with_groups(r_leaf, Groups(tree, rows * nodes), leaf_flat, opts)
        row_prompt = jnp.broadcast_to(prompt[:, None], r.shape).reshape(-1)
        inter = normalize_with_groups(r_leaf, Groups(row_prompt, num_prompts), leaf_flat, opts)
        columns = [jnp.where(leaf_flat, intra + inter, zero).reshape(r.shape)]
    if values == "leaf_mean":
        leaf_r, ones = jnp.where(f.leaf, r, zero), f.leaf.astype(dt)
        sums = _subtree_sums(jnp.stack([leaf_r, ones, *columns], -1), f)
        count = sums[..., 1]
        v = _numeric.safe_div(sums[..., 0], count, count > 0)
    else:
        g = _checks.scalar(gamma, dt, "gamma")
        fan = _gather(f.children, f.up, 0).astype(dt)  # children of each node's parent
        edge = _numeric.safe_div(jnp.broadcast_to(g, r.shape), fan, f.up >= 0)
        v = _subtree_sums(jnp.where(valid, r, zero), f, edge)
    v = jnp.where(valid, v, zero)

    if baseline == "siblings":
        adv = normalize_with_groups(v.reshape(-1), _sibling_groups(f, prompt, num_prompts),
                                    valid.reshape(-1), opts).reshape(r.shape)
    else:  # the mean advantage of the trajectories through the node
        adv = _numeric.safe_div(sums[..., 2], count, count > 0)

    nan = jnp.full((), jnp.nan, dt)
    adv = jnp.where(valid, jnp.where(f.bad_row, nan, adv), zero)
    v = jnp.where(valid, jnp.where(f.bad_row, nan, v), zero)
    return TreeCredit(adv.astype(out_dtype), v.astype(out_dtype))


def validate_tree(
    leaf_rewards,
    parent,
    node_mask=None,
    *,
    values: str = "leaf_mean",
    reward_range: tuple[float, float] | None = None,
) -> None:
    """Check a padded forest eagerly (outside ``jit``): what :func:`tree_advantages` turns into NaN.

    Checks, each raising with the argument's name and the first offending ``[row, node]``:

    * ``leaf_rewards`` is a real ``[P, N]`` array, ``parent`` an integer one of the same shape,
      ``node_mask`` (optional, default all real) a ``bool[P, N]``;
    * every valid node's ``parent`` is ``-1`` or a valid node of the same row (not out of
      ``[-1, N)``, not padding), and following parents from any valid node reaches a root (no
      cycle; the message lists the cycle);
    * the rewards that are read are finite and inside ``reward_range`` (``None``: no range
      check): at leaves for ``values="leaf_mean"``, at every valid node for ``"discounted"``;
    * with ``values="leaf_mean"``, a valid non-leaf node holds ``0`` or NaN: TreeRPO's values read
      leaves only, so a reward on an inner node would be ignored without a word (put it on a leaf,
      or use ``values="discounted"``, which adds every node's own reward).

    Raises:
      TypeError: wrong kind of array (float parents, float mask, traced input).
      ValueError: shapes, parents, cycles or rewards as above.

    Examples:
      >>> import numpy as np, credax
      >>> r, mask = np.array([[0.0, 1.0, 0.0]]), np.ones((1, 3), bool)
      >>> credax.validate_tree(r, np.array([[-1, 0, 0]]), mask)
      >>> credax.validate_tree(r, np.array([[2, 0, 1]]), mask)
      Traceback (most recent call last):
      ...
      ValueError: `parent` must not form a cycle; row 0 has the cycle 0 -> 2 -> 1 -> 0.
    """
    _checks.check_option(values, "values", VALUES)
    r = _checks.host_real(leaf_rewards, "leaf_rewards")
    _checks.check_ndim(r, "leaf_rewards", 2, "[P, N] (one row of nodes per prompt)")
    bounds = _checks.checked_range(reward_range, "reward_range")
    par = _checks.host_array(parent, "parent")
    _checks.check_int(par, "parent")
    _checks.check_shape(par, "parent", r.shape, "[P, N]")
    valid = _checks.host_mask(node_mask, "node_mask", r.shape, like="leaf_rewards")
    rows, nodes = r.shape
    par = par.astype(np.int64)
    out = valid & ((par < -1) | (par >= nodes))
    if out.any():
        p, n = _checks.first_index(out)
        raise ValueError(f"`parent` must be -1 (a root) or a node index in [0, {nodes}) of the "
                         f"same row; node [{p}, {n}] has parent {par[p, n]}.")
    linked = valid & (par >= 0)
    safe = np.where(linked, par, 0)
    to_padding = linked & ~np.take_along_axis(valid, safe, axis=1)
    if to_padding.any():
        p, n = _checks.first_index(to_padding)
        raise ValueError(f"`parent` must point at a real node; node [{p}, {n}] has parent "
                         f"{par[p, n]}, which `node_mask` marks as padding.")
    up = np.where(linked, par, -1)
    anc = up.copy()
    for _ in range(_rounds(nodes)):
        anc = np.where(anc >= 0, np.take_along_axis(anc, np.maximum(anc, 0), axis=1), -1)
    stuck = valid & (anc >= 0)
    if stuck.any():
        p, n = _checks.first_index(stuck)
        seen, node = [], n
        while node not in seen:  # walk until a node repeats: the cycle starts there
            seen.append(node)
            node = int(up[p, node])
        cycle = seen[seen.index(node):] + [node]
        raise ValueError(f"`parent` must not form a cycle; row {p} has the cycle "
                         f"{' -> '.join(map(str, cycle))}.")
    children = np.zeros(r.shape, np.int64)
    np.add.at(children, (np.broadcast_to(np.arange(rows)[:, None], r.shape)[linked], up[linked]), 1)
    leaf = valid & (children == 0)
    read = leaf if values == "leaf_mean" else valid
    what = "leaves" if values == "leaf_mean" else "valid nodes"
    _checks.check_finite_within(r, read, "leaf_rewards", bounds, "reward_range", what)
    if values == "leaf_mean":
        inner = valid & ~leaf & ~np.isnan(r) & (r != 0)
        if inner.any():
            p, n = _checks.first_index(inner)
            raise ValueError(
                f"`leaf_rewards` is read at leaves only with values='leaf_mean' (TreeRPO); node "
                f"[{p}, {n}] has children but holds {r[p, n]}, which would be ignored. Put 0 or "
                "NaN there, or use values='discounted' to add each node's own reward.")

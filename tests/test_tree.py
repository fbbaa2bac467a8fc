"""Tree credit (credax.tree_advantages): TreeRPO, AReaL's tree discount, Tree-GRPO.

Ground truth: hand-worked trees (the derivation beside each), the float64 references of
``tests/reference/tree.py`` (one per peer rule, written from the peers' published rules as node
loops), identities with the flat estimators (a row of G leaf roots is Dr. GRPO; AReaL's discount
on a chain is the linear discounted return), and properties drawn by hypothesis on one fixed
shape (node permutations, NaN padding, other rows, jit, vmap, gradients). Bad input: the eager
validator names each malformed forest; the traced function turns the row into NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import credax
from tests.probes import Probes, raises
from tests.reference import tree as ref

P, N = 3, 8  # the one shape of the random forests (one program per option set)
REWARDS = (0.0, 1.0, 0.35, 1 / 3)


def random_forest(rng, rows=P, nodes=N, *, inner_garbage=True):
    """A padded forest: each row a random forest of 0..nodes real nodes in random slots (parents
    before children in draw order, so acyclic), NaN rewards and wild parents at padding, NaN
    rewards at inner nodes (``inner_garbage``: read by no leaf-only rule)."""
    parent = rng.integers(-4, nodes + 4, size=(rows, nodes))
    mask = np.zeros((rows, nodes), bool)
    for p in range(rows):
        real = int(rng.integers(0 if p else 1, nodes + 1))
        order = rng.permutation(nodes)[:real]
        for i, slot in enumerate(order):
            mask[p, slot] = True
            root = i == 0 or rng.random() < 0.25
            parent[p, slot] = -1 if root else order[int(rng.integers(0, i))]
    rewards = rng.choice(REWARDS, size=(rows, nodes))
    rewards[~mask] = np.nan
    if inner_garbage:
        has_child = np.zeros_like(mask)
        for p in range(rows):
            for n in range(nodes):
                if mask[p, n] and parent[p, n] >= 0:
                    has_child[p, parent[p, n]] = True
        rewards[has_child] = np.nan
    return rewards.astype(np.float32), parent.astype(np.int32), mask


def close(got, want, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-4, atol=atol)


# --------------------------------------------------------------------------------------------
# Hand-worked trees.
# --------------------------------------------------------------------------------------------

# Slots in scrambled order (node order is arbitrary). The tree, by slot:
#   root 4 ── 0 ── 5 (leaf, 1)
#        │     └── 2 (leaf, 0)
#        └── 3 (leaf, 1)
#        └── 1 (leaf, 0)
#   root 6 (leaf, 0.35)            slot 7: padding
PARENT = np.array([[4, 4, 0, 4, -1, 0, -1, 3]], np.int32)
MASK = np.array([[True] * 7 + [False]])
R = np.array([[9.0, 0.0, 0.0, 1.0, 9.0, 1.0, 0.35, np.nan]], np.float32)  # 9s: inner, ignored


def test_golden_treerpo():
    out = credax.tree_advantages(R, PARENT, MASK)
    # Values: leaves keep their reward; V(0) = mean(1, 0) = .5; V(4) = mean(1, 0, 1, 0) = .5.
    close(out.values, [[0.5, 0.0, 0.0, 1.0, 0.5, 1.0, 0.35, 0.0]])
    # Siblings: {4, 6} (the roots): mean .425 -> (.075, -.075); {0, 3, 1} (children of 4):
    # V = (.5, 1, 0), mean .5 -> (0, .5, -.5); {5, 2}: mean .5 -> (.5, -.5). Padding: 0.
    close(out.advantages, [[0.0, -0.5, -0.5, 0.5, 0.075, 0.5, -0.075, 0.0]])


def test_golden_treerpo_scaled():
    out = credax.tree_advantages(R, PARENT, MASK, normalization=credax.Normalization(eps=0.0))
    # {0, 3, 1}: (0, .5, -.5) / std 0.5 (unbiased: sqrt(.5 / 2)) = (0, 1, -1);
    # pairs {a, b}: ±|a - b|/2 / (|a - b| / sqrt 2) = ±1/sqrt 2.
    h = 2 ** -0.5
    close(out.advantages, [[0.0, -1.0, -h, 1.0, h, h, -h, 0.0]])


def test_golden_discounted():
    # AReaL: V(n) = r(n) + γ · mean(V(children)), every node's own reward read (γ = .5).
    r = np.array([[0.0, 0.0, 0.0, 1.0, 0.2, 1.0, 0.35, np.nan]], np.float32)
    out = credax.tree_advantages(r, PARENT, MASK, values="discounted", gamma=0.5)
    # V(5) = 1, V(2) = 0, V(0) = 0 + .5 · .5 = .25; V(3) = 1, V(1) = 0;
    # V(4) = .2 + .5 · mean(.25, 1, 0) = .2 + .5 · 5/12 = 0.408333; V(6) = .35.
    v4 = 0.2 + 0.5 * (1.25 / 3)
    close(out.values, [[0.25, 0.0, 0.0, 1.0, v4, 1.0, 0.35, 0.0]])
    # {0, 3, 1}: mean 5/12 -> (.25 - 5/12, 1 - 5/12, -5/12); {5, 2}: ±.5; roots: ±(v4 - .35)/2.
    m = 1.25 / 3
    d = (v4 - 0.35) / 2
    close(out.advantages, [[0.25 - m, -m, -0.5, 1 - m, d, 0.5, -d, 0.0]])


def test_golden_tree_grpo():
    # Leaves 5, 2, 3, 1 (tree of root 4) and 6 (its own tree), one prompt, Normalization(eps=0):
    # prompt r = (1, 0, 1, 0, .35): mean .47, unbiased std s = sqrt(Σ (r - .47)² / 4).
    # tree 4: (1, 0, 1, 0): mean .5, std sqrt(1/3) -> ±.5 · sqrt 3; tree 6: a singleton -> 0.
    leaves = np.array([1.0, 0.0, 1.0, 0.0, 0.35])
    s = np.sqrt(((leaves - leaves.mean()) ** 2).sum() / 4)
    inter = (leaves - leaves.mean()) / s
    intra = np.array([0.5, -0.5, 0.5, -0.5, 0.0]) * np.sqrt(3)
    a5, a2, a3, a1, a6 = inter + intra
    # Above the leaves: the mean of the trajectories through the node.
    want = [[(a5 + a2) / 2, a1, a2, a3, (a5 + a2 + a3 + a1) / 4, a5, a6, 0.0]]
    out = credax.tree_advantages(R, PARENT, MASK, baseline="tree_grpo",
                                 normalization=credax.Normalization(eps=0.0))
    close(out.advantages, want)
    close(out.values, credax.tree_advantages(R, PARENT, MASK).values)


def test_the_docstring_tree_tokens_reach_their_nodes():
    out = credax.tree_advantages(jnp.array([[0.0, 0.0, 1.0, 1.0, 0.0]]),
                                 jnp.array([[-1, 0, 0, 1, 1]]), jnp.ones((1, 5), bool))
    tokens = credax.broadcast_to_tokens(out.advantages, jnp.array([[-1, 0, 1, 1, 3, -1, 2]]))
    close(tokens, [[0.0, 0.0, -0.25, -0.25, 0.5, 0.0, 0.25]])


# --------------------------------------------------------------------------------------------
# The references, one per peer rule.
# --------------------------------------------------------------------------------------------

CONFIGS = {
    "treerpo": (dict(), ref.treerpo, dict()),
    "treerpo_scaled": (dict(normalization=credax.Normalization()), ref.treerpo,
                       dict(scale="group")),
    "treerpo_verl": (dict(normalization=credax.presets.VERL), ref.treerpo,
                     dict(scale="group", singleton="raw")),
    "areal": (dict(values="discounted", gamma=0.9), ref.areal, dict(gamma=0.9)),
    "areal_gamma1_scaled": (dict(values="discounted", normalization=credax.Normalization()),
                            ref.areal, dict(gamma=1.0, scale="group")),
    "tree_grpo": (dict(baseline="tree_grpo"), ref.tree_grpo, dict(scale="group")),
    "tree_grpo_verl": (dict(baseline="tree_grpo", normalization=credax.presets.VERL),
                       ref.tree_grpo, dict(scale="group", singleton="raw")),
    "tree_grpo_dr": (dict(baseline="tree_grpo", normalization=credax.Normalization(scale="none")),
                     ref.tree_grpo, dict()),
}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("grouped", [False, True])
def test_matches_the_peer_reference(config, grouped):
    options, reference, ref_options = CONFIGS[config]
    rng = np.random.default_rng(7 + grouped)
    for _ in range(12):
        r, parent, mask = random_forest(rng, inner_garbage=options.get("values") != "discounted")
        ids = rng.choice([5, -2], size=P).astype(np.int32) if grouped else None
        got = credax.tree_advantages(r, parent, mask, group_ids=ids, **options)
        adv, values = reference(r, parent, mask, ids, **ref_options)
        close(got.values, values)
        close(got.advantages, adv)


# --------------------------------------------------------------------------------------------
# Identities with the flat estimators.
# --------------------------------------------------------------------------------------------

G_REWARDS = np.array([[1.0, 0.0, 0.35, 1 / 3, 1.0, np.nan]], np.float32)
G_MASK = np.array([[True] * 5 + [False]])
G_ROOTS = np.full((1, 6), -1, np.int32)


def test_a_row_of_leaf_roots_is_dr_grpo_and_grpo():
    flat, ids = G_REWARDS[0], np.zeros(6, np.int32)
    dr = credax.grpo_advantages(flat, ids, G_MASK[0], normalization=credax.Normalization(
        scale="none"))
    np.testing.assert_allclose(credax.tree_advantages(G_REWARDS, G_ROOTS, G_MASK).advantages[0],
                               dr, atol=1e-7)
    z = credax.tree_advantages(G_REWARDS, G_ROOTS, G_MASK, normalization=credax.Normalization())
    np.testing.assert_allclose(z.advantages[0], credax.grpo_advantages(flat, ids, G_MASK[0]),
                               atol=1e-7)
    # Tree-GRPO: each root its own one-leaf tree, an intra-tree singleton (0; raw with verl's
    # convention), plus the prompt's GRPO.
    grpo = credax.tree_advantages(G_REWARDS, G_ROOTS, G_MASK, baseline="tree_grpo")
    np.testing.assert_allclose(grpo.advantages[0], credax.grpo_advantages(flat, ids, G_MASK[0]),
                               atol=1e-6)
    verl = credax.tree_advantages(G_REWARDS, G_ROOTS, G_MASK, baseline="tree_grpo",
                                  normalization=credax.presets.VERL)
    want = credax.grpo_advantages(flat, ids, G_MASK[0], normalization=credax.presets.VERL)
    np.testing.assert_allclose(verl.advantages[0], np.where(G_MASK[0], want + flat, 0), atol=1e-6)


def test_rows_of_one_leaf_with_group_ids_are_grpo():
    # One tree per row, the rows' prompts in group_ids: the roots of one prompt are siblings.
    flat = np.array([1.0, 0.0, 0.35, 1.0, 0.0, 1 / 3], np.float32)
    ids = np.array([4, -1, 4, -1, 4, 9], np.int32)
    out = credax.tree_advantages(flat[:, None], np.full((6, 1), -1, np.int32), np.ones((6, 1), bool),
                                 group_ids=ids, normalization=credax.Normalization())
    np.testing.assert_allclose(out.advantages[:, 0], credax.grpo_advantages(flat, ids), atol=1e-7)


def test_areal_on_a_chain_is_the_linear_discount():
    # AReaL #1666: "exact mathematical equivalence with linear discounting on single-chain
    # conversations". A chain 0 <- 1 <- 2 <- 3 (slots reversed) against discounted_returns.
    turn_r = np.array([[0.5, 0.0, 0.25, 1.0]], np.float32)
    slots = turn_r[:, ::-1]  # slot 3 is turn 0 (the root), slot 0 the last turn (the leaf)
    parent = np.array([[1, 2, 3, -1]], np.int32)
    out = credax.tree_advantages(slots, parent, np.ones((1, 4), bool), values="discounted",
                                 gamma=0.8)
    want = credax.discounted_returns(turn_r, np.ones((1, 4), bool), gamma=0.8)
    np.testing.assert_allclose(np.asarray(out.values)[:, ::-1], want, rtol=1e-6)
    np.testing.assert_array_equal(out.advantages, 0.0)  # every sibling set is a singleton


# --------------------------------------------------------------------------------------------
# Properties (hypothesis draws the seed; one shape, so each option set compiles once).
# --------------------------------------------------------------------------------------------

OPTIONS = st.sampled_from([dict(), dict(values="discounted", gamma=0.9),
                           dict(baseline="tree_grpo"), dict(normalization=credax.Normalization())])


@given(seed=st.integers(0, 2**32 - 1), options=OPTIONS)
def test_node_permutations_permute_the_outputs(seed, options):
    rng = np.random.default_rng(seed)
    r, parent, mask = random_forest(rng, inner_garbage=options.get("values") != "discounted")
    sigma = rng.permutation(N)  # new slot i holds old node sigma[i]
    inverse = np.argsort(sigma)
    moved_parent = np.where(parent[:, sigma] >= 0,
                            inverse[np.clip(parent[:, sigma], 0, N - 1)], parent[:, sigma])
    moved_parent = np.where(mask[:, sigma], moved_parent, parent[:, sigma])
    base = credax.tree_advantages(r, parent, mask, **options)
    moved = credax.tree_advantages(r[:, sigma], moved_parent.astype(np.int32), mask[:, sigma],
                                   **options)
    for a, b in zip(moved, base, strict=True):
        np.testing.assert_allclose(a, np.asarray(b)[:, sigma], rtol=1e-5, atol=1e-6)


def _loss(options):
    def loss(r, parent, mask):
        out = credax.tree_advantages(r, parent, mask, **options)
        return jnp.sum(out.advantages ** 2) + jnp.sum(out.values)
    return jax.jit(jax.value_and_grad(loss))


LOSSES = {}


@given(seed=st.integers(0, 2**32 - 1), options=OPTIONS)
def test_padding_garbage_never_matters_nor_its_gradient(seed, options):
    key = repr(options)
    fn = LOSSES.setdefault(key, _loss(options))
    rng = np.random.default_rng(seed)
    r, parent, mask = random_forest(rng, inner_garbage=options.get("values") != "discounted")
    clean_r = np.where(mask, r, 0.0).astype(np.float32)
    if options.get("values") != "discounted":  # inner nodes are not read either
        clean_r = np.where(np.isnan(r), 0.0, r).astype(np.float32)
    junk_r = np.where(np.isnan(r), np.float32(rng.choice([np.inf, -1e30, 7.0])), r)
    junk_parent = np.where(mask, parent, rng.integers(-9, 20, size=parent.shape)).astype(np.int32)
    (v1, g1), (v2, g2) = fn(r, parent, mask), fn(junk_r, junk_parent, mask)
    v3, g3 = fn(clean_r, parent, mask)
    assert np.isfinite(v1) and v1 == v2 == v3
    for g in (g1, g2, g3):
        assert np.isfinite(g).all()
        assert (np.asarray(g)[np.isnan(r)] == 0).all()  # never-read entries get no gradient
    np.testing.assert_array_equal(g1, g3)
    out = credax.tree_advantages(r, parent, mask, **options)
    assert (np.asarray(out.advantages)[~mask] == 0).all() and (np.asarray(out.values)[~mask] == 0).all()


# Built once (a lambda made inside the test would compile again for every example).
JITTED = jax.jit(lambda *x: credax.tree_advantages(*x))
VMAPPED = jax.jit(jax.vmap(lambda *x: credax.tree_advantages(*x)))


@given(seed=st.integers(0, 2**32 - 1))
def test_rows_are_independent_jit_and_vmap(seed):
    rng = np.random.default_rng(seed)
    r, parent, mask = random_forest(rng)
    other_r, other_parent, other_mask = random_forest(rng)
    base = credax.tree_advantages(r, parent, mask)
    # Row 0 unchanged, the other rows replaced: row 0's outputs are bit for bit the same.
    mixed = credax.tree_advantages(np.concatenate([r[:1], other_r[1:]]),
                                   np.concatenate([parent[:1], other_parent[1:]]),
                                   np.concatenate([mask[:1], other_mask[1:]]))
    for a, b in zip(mixed, base, strict=True):
        np.testing.assert_array_equal(np.asarray(a)[0], np.asarray(b)[0])
    # jit inside the caller's jit, and vmap over a leading axis, agree with the plain call.
    jitted = JITTED(r, parent, mask)
    stacked = VMAPPED(
        np.stack([r, other_r]), np.stack([parent, other_parent]), np.stack([mask, other_mask]))
    other = credax.tree_advantages(other_r, other_parent, other_mask)
    for a, b in zip(jitted, base, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(stacked.advantages[0], base.advantages, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(stacked.advantages[1], other.advantages, rtol=1e-6, atol=1e-7)


def test_compiles_once_for_new_values_and_gamma(traced_once):
    fn = traced_once(credax.tree_advantages)
    rng = np.random.default_rng(0)
    for gamma in (0.9, 0.5, 1.0):
        r, parent, mask = random_forest(rng, inner_garbage=False)
        fn(r, parent, mask, values="discounted", gamma=gamma)


def test_deep_chains_are_exact():
    # A chain of N nodes (depth N - 1, the deepest an N-node forest can be): every node's value
    # is the one leaf's reward; the doubling rounds cover every depth.
    nodes = 33
    parent = np.arange(-1, nodes - 1, dtype=np.int32)[None]
    r = np.zeros((1, nodes), np.float32)
    r[0, -1] = 0.35
    out = credax.tree_advantages(r, parent, np.ones((1, nodes), bool))
    np.testing.assert_array_equal(out.values, np.float32(0.35))
    disc = credax.tree_advantages(r, parent, np.ones((1, nodes), bool), values="discounted",
                                  gamma=0.5)
    close(disc.values, [0.35 * 0.5 ** (nodes - 1 - np.arange(nodes))], atol=1e-12)


# --------------------------------------------------------------------------------------------
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# --------------------------------------------------------------------------------------------

probe = Probes()

# Row 0 of each case is malformed, row 1 a clean twin: the traced call gives NaN at row 0's valid
# nodes and row 1 its clean values; validate_tree names the node.
CLEAN = np.array([[-1, 0, 0, -1], [-1, 0, 0, -1]], np.int32)
BAD_PARENTS = {
    # (parent row 0, mask row 0, the validator's message)
    "out_of_range": ([-1, 0, 7, -1], [True] * 4, r"node \[0, 2\] has parent 7"),
    "below_minus_one": ([-1, 0, -3, -1], [True] * 4, r"node \[0, 2\] has parent -3"),
    "padding_parent": ([-1, 3, 0, -1], [True, True, True, False],
                       r"node \[0, 1\] has parent 3, which `node_mask` marks as padding"),
    "cycle": ([2, 0, 1, -1], [True] * 4, r"row 0 has the cycle 0 -> 2 -> 1 -> 0"),
    "self_loop": ([-1, 1, 0, -1], [True] * 4, r"row 0 has the cycle 1 -> 1"),
    "below_a_cycle": ([1, 0, 0, -1], [True] * 4, r"row 0 has the cycle 0 -> 1 -> 0"),
}
R4 = np.array([[0.0, 1.0, 0.0, 0.35], [0.0, 1.0, 0.0, 0.35]], np.float32)

for _label, (_row, _mask, _message) in BAD_PARENTS.items():

    def _p(row=_row, mask_row=_mask, message=_message):
        parent = CLEAN.copy()
        parent[0] = row
        mask = np.array([mask_row, [True] * 4])
        raises(ValueError, message, credax.validate_tree, R4, parent, mask)
        for options in (dict(), dict(values="discounted"), dict(baseline="tree_grpo")):
            out = credax.tree_advantages(R4, parent, mask, **options)
            clean = credax.tree_advantages(R4, CLEAN, np.ones((2, 4), bool), **options)
            for got, want in zip(out, clean, strict=True):
                got = np.asarray(got)
                assert np.isnan(got[0][mask[0]]).all() and (got[0][~mask[0]] == 0).all()
                np.testing.assert_array_equal(got[1], want[1])

    probe("named", f"malformed_{_label}")(_p)


@probe("contract", "validator_accepts_a_clean_forest")
def _p():
    credax.validate_tree(R4, CLEAN, np.ones((2, 4), bool))
    r = np.where(np.isnan(R), 0.0, R)
    r[0, [0, 4]] = np.nan  # inner nodes: NaN is the "no reward here" the validator accepts
    credax.validate_tree(r, PARENT, MASK)


@probe("named", "validator_inner_rewards_are_not_silently_ignored")
def _p():
    # R holds 9 at the inner nodes 0 and 4: TreeRPO's values would never read them.
    raises(ValueError, r"read at leaves only.*node \[0, 0\] has children but holds 9.0",
           credax.validate_tree, R, PARENT, MASK)
    # With values="discounted" they are each node's own reward (finite: accepted).
    credax.validate_tree(np.where(MASK, R, np.nan), PARENT, MASK, values="discounted")


@probe("nonfinite", "validator_and_traced")
def _p():
    r = R4.copy()
    r[0, 1] = np.nan  # leaf 1 of row 0
    raises(ValueError, r"finite at leaves; leaf_rewards\[0, 1\] = nan", credax.validate_tree, r,
           CLEAN, np.ones((2, 4), bool))
    out = credax.tree_advantages(r, CLEAN, np.ones((2, 4), bool))
    # NaN reaches the leaf's value and its ancestor 0's (leaf 2 keeps its 0), the advantages of
    # its sibling set {1, 2} and of the root set {0, 3}, which reads V(0). Row 1 is clean.
    assert np.isnan(np.asarray(out.values)[0, :2]).all()
    assert out.values[0, 2] == 0 and out.values[0, 3] == np.float32(0.35)
    assert np.isnan(np.asarray(out.advantages)[0]).all()
    assert np.isfinite(np.asarray(out.advantages)[1]).all()
    raises(ValueError, r"reward_range.*leaf_rewards\[0, 1\] = 1.0", credax.validate_tree, R4,
           CLEAN, np.ones((2, 4), bool), reward_range=(0.0, 0.5))
    # A NaN bound would switch the range check off (every comparison with NaN is false): refused,
    # as validate_rewards refuses it (one rule, _checks.checked_range).
    raises(ValueError, "`reward_range` must be \\(lo, hi\\)", credax.validate_tree, R4, CLEAN,
           np.ones((2, 4), bool), reward_range=(0.0, np.nan))


@probe("named", "arguments")
def _p():
    m = np.ones((2, 4), bool)
    raises(TypeError, "`parent`", credax.tree_advantages, R4, CLEAN.astype(np.float32), m)
    raises(TypeError, "`node_mask`", credax.tree_advantages, R4, CLEAN, m.astype(np.float32))
    raises(ValueError, "`parent`", credax.tree_advantages, R4, CLEAN[:, :3], m)
    raises(ValueError, "`node_mask`", credax.tree_advantages, R4, CLEAN, m[:1])
    raises(ValueError, "`values`", credax.tree_advantages, R4, CLEAN, m, values="mean")
    raises(ValueError, "`baseline`", credax.tree_advantages, R4, CLEAN, m, baseline="grpo")
    raises(ValueError, "needs `values='leaf_mean'`", credax.tree_advantages, R4, CLEAN, m,
           baseline="tree_grpo", values="discounted")
    raises(ValueError, "`gamma`", credax.tree_advantages, R4, CLEAN, m, values="discounted",
           gamma=1.5)
    raises(ValueError, "`group_ids`|`leaf_rewards`", credax.tree_advantages, R4, CLEAN, m,
           group_ids=np.zeros(3, np.int32))
    raises(TypeError, "`parent`", credax.validate_tree, R4, CLEAN.astype(float), m)
    raises(ValueError, "`leaf_rewards` must be \\[P, N\\]", credax.validate_tree, R4[0], CLEAN[0])


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

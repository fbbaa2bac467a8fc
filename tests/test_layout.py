"""The contiguous layout promise (``groups(ids, layout="contiguous", group_size=G)``): every fast
path against the general path (the doubling running maximum's test is in tests/test_turns.py).

Equality stated per quantity: counts, masks, maxima, selections and exact zeros of constant sets
are identical (``assert_array_equal``); sums, means and z-scores may differ by float32 rounding
only, because the reshape path sums a group in another order than the scatter (rtol 2e-6,
atol 1e-6 on values of order 1).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax._group_stats import _block_stats
from credax._grouping import normalize_with_groups

ROUND = dict(rtol=2e-6, atol=1e-6)


def _batch(seed: int, prompts: int = 6, size: int = 4, turns: int = 5):
    """Contiguous ids (sparse, negative), scores with ties, constant groups, a group with one valid
    row, a fully padded turn column, and NaN in padded entries."""
    rng = np.random.default_rng(seed)
    ids = np.repeat(rng.choice(10_000, prompts, replace=False) - 5000, size).astype(np.int32)
    lengths = rng.integers(1, turns + 1, size=prompts * size)
    mask = np.arange(turns)[None, :] < lengths[:, None]
    scores = rng.integers(0, 5, size=(prompts * size, turns)) / 4.0
    scores[:size] = 0.5  # prompt 0: a constant group at every turn
    mask[size : 2 * size] = False
    mask[size, :] = True  # prompt 1: one valid row per turn (singleton sets)
    scores = np.where(mask, scores, np.nan).astype(np.float32)
    return ids, scores, mask


def _pair(ids):
    size = int(np.flatnonzero(ids != ids[0])[0]) if np.any(ids != ids[0]) else ids.size
    return credax.groups(jnp.asarray(ids)), credax.groups(ids, layout="contiguous", group_size=size)


def test_contiguous_groups_hand_worked():
    c = credax.groups(np.array([7, 7, -3, -3, 40, 40]), layout="contiguous", group_size=2)
    assert (c.num_groups, c.group_size) == (3, 2)
    np.testing.assert_array_equal(c.index, [0, 0, 1, 1, 2, 2])
    leaves, treedef = jax.tree_util.tree_flatten(c)
    back = jax.tree_util.tree_unflatten(treedef, leaves)
    assert back.group_size == 2 and back.num_groups == 3
    # group_normalize by hand, eps 0: {1, 0} -> ±1/sqrt(.5) * .5 = ±.70711; {.25, .25} -> 0;
    # {2, 4} -> ∓.70711.
    x = jnp.array([1.0, 0.0, 0.25, 0.25, 2.0, 4.0])
    out = credax.group_normalize(x, c, normalization=credax.Normalization(eps=0.0))
    np.testing.assert_allclose(out, [0.70710677, -0.70710677, 0, 0, -0.70710677, 0.70710677],
                               rtol=1e-6)
    assert out[2] == 0 and out[3] == 0  # a constant set is exactly zero


@pytest.mark.parametrize(
    "ids, kwargs, match",
    [
        (np.array([1, 1, 2]), {"group_size": 2}, "not a multiple"),
        (np.array([1, 2, 2, 2]), {"group_size": 2}, "rows 0..1"),
        (np.array([1, 1, 2, 2, 1, 1]), {"group_size": 2}, "more than one block"),
        (np.array([1, 1]), {}, "needs `group_size`"),
        (np.array([1, 1]), {"group_size": 2, "num_groups": 2}, "disagrees"),
        (np.array([[1, 1]]), {"group_size": 2}, "ndim 1"),
    ],
)
def test_contiguous_layout_is_checked_on_host_ids(ids, kwargs, match):
    with pytest.raises(ValueError, match=match):
        credax.groups(ids, layout="contiguous", **kwargs)


def test_contiguous_layout_is_checked_on_device_ids_and_options():
    with pytest.raises(ValueError, match="breaks the contiguous layout"):
        credax.groups(jnp.array([3, 3, 4, 3]), layout="contiguous", group_size=2)
    with pytest.raises(ValueError, match="breaks the contiguous layout"):
        credax.groups(jnp.array([3, 3, 3, 3]), layout="contiguous", group_size=2)
    with pytest.raises(ValueError, match="layout"):
        credax.groups(np.array([1, 1]), layout="sorted", group_size=2)
    with pytest.raises(ValueError, match="only used with"):
        credax.groups(np.array([1, 1]), group_size=2)
    with pytest.raises(TypeError, match="integer"):
        credax.groups(np.array([1.0, 1.0]), layout="contiguous", group_size=2)
    ok = credax.groups(jnp.array([3, 3, 4, 4]), layout="contiguous", group_size=2)
    assert ok.group_size == 2

    # Under jit the promise cannot be checked (documented): the index comes from the layout alone.
    @jax.jit
    def traced(ids):
        return credax.groups(ids, layout="contiguous", group_size=2).index

    np.testing.assert_array_equal(traced(jnp.array([3, 3, 4, 4])), [0, 0, 1, 1])


OPTIONS = [
    dict(zip(("scale", "ddof", "eps_mode", "singleton", "leave_one_out"), combo, strict=True))
    for combo in itertools.product(("group", "none", "batch"), (0, 1), ("add", "sqrt"),
                                   ("zero", "raw"), (False, True))
]


@pytest.mark.parametrize("options", OPTIONS[::5] + [OPTIONS[-1]])
def test_group_normalize_fast_path_matches_general(options):
    ids, scores, mask = _batch(1)
    g, c = _pair(ids)
    norm = credax.Normalization(**options)
    general = credax.group_normalize(scores, g, mask, normalization=norm)
    fast = credax.group_normalize(scores, c, mask, normalization=norm)
    np.testing.assert_allclose(fast, general, **ROUND)
    np.testing.assert_array_equal(fast == 0, general == 0)  # exact zeros stay exact


def test_group_statistics_fast_path_matches_general():
    ids, scores, mask = _batch(2)
    g, c = _pair(ids)
    np.testing.assert_allclose(credax.group_mean(scores, c, mask), credax.group_mean(scores, g, mask),
                               **ROUND)
    np.testing.assert_array_equal(credax.group_count(c, mask), credax.group_count(g, mask))
    pc, pg = credax.peer_mean(scores, c, mask), credax.peer_mean(scores, g, mask)
    np.testing.assert_array_equal(pc.count, pg.count)
    np.testing.assert_allclose(pc.mean, pg.mean, **ROUND)
    r, m = scores[:, 0], mask[:, 0]
    for fn in (credax.grpo_advantages, credax.rloo_advantages):
        np.testing.assert_allclose(fn(r, c, m), fn(r, g, m), **ROUND)
    verl = credax.presets.VERL
    np.testing.assert_allclose(credax.grpo_advantages(r, c, m, normalization=verl),
                               credax.grpo_advantages(r, g, m, normalization=verl), **ROUND)


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_tcpo_fast_path_matches_general(seed):
    ids, scores, mask = _batch(seed, prompts=5, size=8, turns=7)
    g, c = _pair(ids)
    norm = credax.Normalization(ddof=0, eps_mode="sqrt", eps=1e-6, singleton="raw")
    for opts in ({}, dict(normalization=norm, gamma=0.9)):
        fast = credax.tcpo_advantages(scores, mask, c, **opts)
        general = credax.tcpo_advantages(scores, mask, g, **opts)
        for path, a in jax.tree_util.tree_leaves_with_path(fast):
            b = dict(jax.tree_util.tree_leaves_with_path(general))[path]
            if a.dtype in (jnp.bool_, jnp.int32):
                np.testing.assert_array_equal(a, b, err_msg=str(path))
            else:
                np.testing.assert_allclose(a, b, err_msg=str(path), **ROUND)
        # maxima and selections are identical, not merely close
        np.testing.assert_array_equal(fast.hindsight.future_best, general.hindsight.future_best)
        np.testing.assert_array_equal(fast.hindsight.eligible, general.hindsight.eligible)


def test_long_input_extremes_are_the_same_statistics():
    """``long_input`` (TCPO's credit) takes the extremes with two one-output maxima instead of one
    variadic reduction: a kernel choice, so every statistic must be bit-identical — with NaN and
    ±inf at valid entries, huge magnitudes, padded entries and a fully padded set."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((24, 5)).astype(np.float32) * np.float32(1e37)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    mask = rng.random((24, 5)) < 0.8
    mask[4:8, 3] = False  # one set with no valid entry
    x = jnp.asarray(x)
    a = _block_stats(x, 4, jnp.asarray(mask), sum_sq=True, long_input=True)
    b = _block_stats(x, 4, jnp.asarray(mask), sum_sq=True, long_input=False)
    for name, u, v in zip(a._fields, a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v), err_msg=name)
    c = credax.groups(np.repeat(np.arange(6), 4), layout="contiguous", group_size=4)
    opts = credax.Normalization()
    np.testing.assert_array_equal(
        normalize_with_groups(x, c, jnp.asarray(mask), opts, long_input=True),
        normalize_with_groups(x, c, jnp.asarray(mask), opts, long_input=False))


def test_contiguous_groups_pass_through_jit_and_vmap():
    ids, scores, mask = _batch(6)
    g, c = _pair(ids)

    @jax.jit
    def step(s, m, groups):
        return credax.tcpo_advantages(s, m, groups).advantages

    np.testing.assert_allclose(step(scores, mask, c), step(scores, mask, g), **ROUND)
    stacked = jnp.stack([jnp.asarray(scores[:, 0])] * 2)
    out = jax.vmap(lambda r: credax.grpo_advantages(r, c))(stacked)
    np.testing.assert_allclose(out[0], credax.grpo_advantages(scores[:, 0], g), **ROUND)

"""Tests of the grouping primitive: ``groups``/``Groups``, ``group_normalize``, ``group_mean``,
``group_count``, ``peer_mean`` (SPEC §1).

Ground truth: the NumPy float64 loops of ``tests/reference/groups.py`` (randomized comparison over
every option), hand-worked golden cases, and hypothesis properties. Shapes come from a few fixed
sizes so jit compiles a bounded number of programs.

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import credax
from credax import Normalization, presets
from tests.probes import NAN, Probes, deprecated, nan_exactly, raises
from tests.reference import groups as ref

NICE = (0.0, 0.35, 1.0 / 3.0, 0.95, 1.0, -2.5, 7.0)  # non-dyadic values on purpose
GARBAGE = (math.nan, math.inf, -math.inf, 1e30, -3.0)
ID_POOL = (-7, 0, 3, 5, 10**6, -(2**31), 2**31 - 1)

FUNCS = ("group_normalize", "group_mean", "group_count", "peer_mean")


def assert_close(actual, expected, rtol=1e-4, atol=1e-5, err_msg=""):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol, atol=atol,
                               err_msg=err_msg)


def random_case(rng, shape, *, p_valid=0.8, constant_groups=True, pool=ID_POOL):
    """x (float32, garbage at masked entries), ids (int, ragged, singletons), mask (bool).

    With ``constant_groups`` the last three rows form a fully valid group (id 424242) holding one
    non-dyadic value, and one more group is set constant (possibly partly masked).
    """
    b = shape[0] - 3 if constant_groups else shape[0]
    ids = rng.choice(pool[: rng.integers(1, len(pool) + 1)], size=b)
    x = rng.choice(NICE, size=shape)
    x = np.where(rng.random(shape) < 0.5, rng.normal(size=shape) * 3, x)
    if constant_groups:  # a whole group holds one non-dyadic value
        x[:b][ids == rng.choice(ids)] = rng.choice((0.35, 1.0 / 3.0, 0.95))
    mask = rng.random(shape) < p_valid
    if b > 2:
        mask[rng.integers(b)] = False  # an all-masked row
    if constant_groups:
        ids = np.concatenate([ids, np.full(3, 424242)])
        mask[b:] = True
        x[b:] = rng.choice((0.35, 1.0 / 3.0, 0.95))
        order = rng.permutation(shape[0])  # the block anywhere in the batch
        x, ids, mask = x[order], ids[order], mask[order]
    x = np.where(mask, x, rng.choice(GARBAGE)).astype(np.float32)
    return x, ids, mask


def constant_sets(x, ids, mask):
    """Valid entries whose peer set has >= 2 members, all of one value (exact)."""
    out = np.zeros(x.shape, bool)
    for t in np.ndindex(*x.shape[1:]):
        sel = (slice(None),) + t
        for gid in np.unique(ids):
            members = (ids == gid) & mask[sel]
            vals = x[sel][members]
            if members.sum() >= 2 and vals.max() == vals.min():
                out[sel] |= members
    return out


# Every option of SPEC §1.
ALL_OPTIONS = [
    dict(center=c, scale=s, ddof=d, eps_mode=em, singleton=sg, leave_one_out=lo)
    for c, s, d, em, sg, lo in itertools.product(
        (True, False), ("group", "batch", "none"), (0, 1, 2), ("add", "sqrt"),
        ("zero", "raw", "center"), (False, True),
    )
]


def _pairwise_cover(options):
    """A small subset of ``options`` that contains every pair of (option, value) settings."""
    keys = list(options[0])
    need = {
        (a, options[i][a], b, options[i][b])
        for i in range(len(options)) for a, b in itertools.combinations(keys, 2)
    }
    chosen = []
    while need:
        best = max(options, key=lambda o: sum(
            (a, o[a], b, o[b]) in need for a, b in itertools.combinations(keys, 2)))
        chosen.append(best)
        need -= {(a, best[a], b, best[b]) for a, b in itertools.combinations(keys, 2)}
    return chosen


COVER = _pairwise_cover(ALL_OPTIONS)

# Option sets the property tests draw from (each compiles once per shape).
PROP_OPTIONS = [
    {},
    presets.VERL.asdict(),
    presets.TRL_BATCH.asdict(),
    dict(scale="none", leave_one_out=True),
    dict(eps_mode="sqrt", ddof=0, singleton="center"),
    dict(center=False),
]


# --------------------------------------------------------------------------------------------
# Reference comparison
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options", ALL_OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_group_normalize_matches_reference_every_option(options):
    # Eager (op-by-op) so the 216 option combinations share compiled primitives; the jitted
    # programs are compared on a pairwise cover below and jit == eager is a property test.
    rng = np.random.default_rng(ALL_OPTIONS.index(options))
    x, ids, mask = random_case(rng, (15, 3))
    eps = float(rng.choice([0.0, 1e-6, 1e-2]))
    with jax.disable_jit():
        norm = Normalization(eps=eps, **options)
        got = np.asarray(credax.group_normalize(x, ids, mask, normalization=norm))
    assert_close(got, ref.group_normalize(x, ids, mask, eps=eps, **options))
    assert np.all(got[~mask] == 0.0)
    if options["center"]:
        # Zero-spread sets give exactly 0 (not approximately), whatever eps; only "raw" keeps x
        # for a set that ddof turns into a singleton set.
        const = constant_sets(x, ids, mask)
        if options["singleton"] == "raw" and options["ddof"] >= 2:
            const &= ref.group_count(ids, mask) > options["ddof"]
        assert const.sum() >= 9
        assert np.all(got[const] == 0.0), got[const]


@jax.jit
def _cover(x, g, mask):
    return [credax.group_normalize(x, g, mask, normalization=Normalization(eps=1e-3, **o)) for o in COVER]


def test_group_normalize_matches_reference_jit():
    # The compiled programs of the pairwise cover (one jit holding them all: XLA's per-program
    # overhead dominates at this size), [B] and [B, K].
    rng = np.random.default_rng(7)
    for shape in [(13,), (13,), (13, 4), (13, 4)]:
        x, ids, mask = random_case(rng, shape)
        for options, got in zip(COVER, _cover(x, credax.groups(ids), mask), strict=True):
            assert got.dtype == jnp.float32 and got.shape == shape
            assert_close(got, ref.group_normalize(x, ids, mask, eps=1e-3, **options),
                         err_msg=str(options))
    # and through the public wrapper (raw ids, its own jit) for two of them
    for options in COVER[:2]:
        got = credax.group_normalize(x, ids, mask, normalization=Normalization(eps=1e-3, **options))
        assert_close(got, ref.group_normalize(x, ids, mask, eps=1e-3, **options))


def test_cover_is_small_and_covers_every_value():
    assert len(COVER) <= 20
    for key in ALL_OPTIONS[0]:
        assert {str(o[key]) for o in COVER} == {str(o[key]) for o in ALL_OPTIONS}


@jax.jit
def _stats(x, g, mask):
    pm = credax.peer_mean(x, g, mask)
    return credax.group_mean(x, g, mask), credax.group_count(g, mask), pm.mean, pm.count


@pytest.mark.parametrize("shape", [(10,), (10, 3), (10, 2, 2)])
def test_mean_count_peer_mean_match_reference(shape):
    rng = np.random.default_rng(11)
    for _ in range(3):
        x, ids, mask = random_case(rng, shape)
        mean, count, pmean, pcount = _stats(x, credax.groups(ids), mask)
        assert_close(mean, ref.group_mean(x, ids, mask))
        assert count.dtype == jnp.int32 and pcount.dtype == jnp.int32
        np.testing.assert_array_equal(count, ref.group_count(ids, mask))
        ref_mean, ref_count = ref.peer_mean(x, ids, mask)
        assert_close(pmean, ref_mean)
        np.testing.assert_array_equal(pcount, ref_count)
    # through the public wrappers, and without a mask (every entry counts)
    xf = np.where(mask, x, 0.5).astype(np.float32)
    assert_close(credax.group_mean(xf, ids), ref.group_mean(xf, ids))
    assert_close(credax.peer_mean(xf, ids, mask).mean, ref.peer_mean(xf, ids, mask)[0])
    np.testing.assert_array_equal(credax.group_count(ids), ref.group_count(ids))


def test_many_groups_and_large_batch_match_reference():
    rng = np.random.default_rng(3)
    ids = rng.integers(-10**9, 10**9, size=40)[rng.integers(0, 40, size=300)]
    x = rng.normal(size=(300, 2)).astype(np.float32)
    mask = rng.random((300, 2)) < 0.9
    assert_close(credax.group_normalize(x, ids, mask), ref.group_normalize(x, ids, mask))
    np.testing.assert_array_equal(credax.group_count(ids, mask), ref.group_count(ids, mask))


# --------------------------------------------------------------------------------------------
# Golden cases (arithmetic in the comments)
# --------------------------------------------------------------------------------------------


def test_golden_pair_constant_pair_singleton():
    # ids 3: {1, 0}: μ = .5, σ = sqrt((.25 + .25) / 1) = sqrt(.5) -> ±.5/.70711 = ±.70711.
    # ids -1: {.35, .35}: zero spread -> exactly 0.   id 42: singleton -> 0 (default).
    x = jnp.array([1.0, 0.0, 0.35, 0.35, 5.0])
    ids = jnp.array([3, 3, -1, -1, 42])
    out = credax.group_normalize(x, ids, normalization=Normalization(eps=0.0))
    assert_close(out, [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5), 0.0, 0.0, 0.0], atol=1e-6)
    assert np.all(np.asarray(out[2:]) == 0.0)
    # With eps = 1e-6 on the std: ±.5 / (.70711 + 1e-6).
    assert_close(credax.group_normalize(x, ids)[:2],
                 [0.5 / (math.sqrt(0.5) + 1e-6), -0.5 / (math.sqrt(0.5) + 1e-6)], rtol=1e-6)


def test_golden_per_group_and_turn():
    # One group, K = 2. Column 0: {1, 3, 5}: μ = 3, σ = sqrt((4 + 0 + 4) / 2) = 2 -> -1, 0, 1.
    # Column 1: {2, 2} (row 2 masked, holding NaN): zero spread -> 0, 0; the masked entry -> 0.
    x = jnp.array([[1.0, 2.0], [3.0, 2.0], [5.0, jnp.nan]])
    mask = jnp.array([[True, True], [True, True], [True, False]])
    out = credax.group_normalize(x, jnp.array([4, 4, 4]), mask, normalization=Normalization(eps=0.0))
    np.testing.assert_allclose(out, [[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]], atol=1e-6)
    assert np.asarray(out)[:, 1].tolist() == [0.0, 0.0, 0.0]
    # group_count per (group, turn): column 0 has 3 peers, column 1 has 2; masked 0.
    np.testing.assert_array_equal(credax.group_count(jnp.array([4, 4, 4]), mask),
                                  [[3, 2], [3, 2], [3, 0]])


def test_golden_options():
    two = jnp.array([0.0, 2.0])
    ids = jnp.array([1, 1])
    # μ = 1, unbiased σ² = (1 + 1) / 1 = 2.
    # eps_mode="sqrt", eps=1: ±1 / sqrt(2 + 1) = ±.57735.
    assert_close(credax.group_normalize(two, ids, normalization=Normalization(eps=1.0, eps_mode="sqrt")),
                 [-1 / math.sqrt(3), 1 / math.sqrt(3)], atol=1e-6)
    # ddof=0: σ² = 2/2 = 1 -> ±1 / (1 + .5) with eps=.5.
    assert_close(credax.group_normalize(two, ids, normalization=Normalization(ddof=0, eps=0.5)),
                 [-2 / 3, 2 / 3], atol=1e-6)
    # scale="none" (Dr. GRPO): x - μ = ∓1.
    assert_close(credax.group_normalize(two, ids, normalization=Normalization(scale="none")),
                 [-1.0, 1.0], atol=0)
    # center=False, scale="none": unchanged.
    assert_close(credax.group_normalize(two, ids,
                                        normalization=Normalization(center=False, scale="none")),
                 [0.0, 2.0], atol=0)
    # center=False: x / σ = [0, 2 / sqrt(2)].
    assert_close(credax.group_normalize(two, ids, normalization=Normalization(center=False, eps=0.0)),
                 [0.0, math.sqrt(2)], atol=1e-6)
    # center=False on a zero-spread set keeps x (never divided by eps).
    assert_close(credax.group_normalize(jnp.array([0.35, 0.35]), ids,
                                        normalization=Normalization(center=False)),
                 [0.35, 0.35], rtol=1e-7)
    # leave_one_out on {1, 0, .5}: 1 - .25 = .75, 0 - .75 = -.75, .5 - .5 = 0; σ = .5 -> ×2.
    three = jnp.array([1.0, 0.0, 0.5])
    ids3 = jnp.array([8, 8, 8])
    assert_close(credax.group_normalize(
                     three, ids3, normalization=Normalization(scale="none", leave_one_out=True)),
                 [0.75, -0.75, 0.0], atol=1e-7)
    assert_close(credax.group_normalize(
                     three, ids3, normalization=Normalization(leave_one_out=True, eps=0.0)),
                 [1.5, -1.5, 0.0], atol=1e-6)


def test_golden_batch_scale():
    # ids 0: {0, 1} (μ = .5), ids 1: {2, 4} (μ = 3). Batch: mean 1.75, squared deviations
    # 3.0625 + .5625 + .0625 + 5.0625 = 8.75, / (4 - 1) = 2.91667, σ_b = 1.70783.
    # -> [-.5, .5, -1, 1] / 1.70783.
    x = jnp.array([0.0, 1.0, 2.0, 4.0])
    ids = jnp.array([0, 0, 1, 1])
    sigma = math.sqrt(8.75 / 3)
    assert_close(credax.group_normalize(x, ids, normalization=Normalization(scale="batch", eps=0.0)),
                 [-0.5 / sigma, 0.5 / sigma, -1 / sigma, 1 / sigma], atol=1e-6)


def test_golden_singletons():
    x = jnp.array([5.0, 1.0, 3.0])
    ids = jnp.array([9, 2, 2])
    # id 9 alone: "zero" -> 0, "raw" -> 5, "center" -> 5 - 5 = 0.
    assert float(credax.group_normalize(x, ids, normalization=Normalization(singleton="zero"))[0]) == 0.0
    assert float(credax.group_normalize(x, ids, normalization=Normalization(singleton="raw"))[0]) == 5.0
    assert float(credax.group_normalize(x, ids, normalization=Normalization(singleton="center"))[0]) == 0.0
    # ddof=2 makes the pair {1, 3} a singleton set too (n - ddof = 0):
    # raw -> [1, 3]; center -> x - μ = [-1, 1]; center + leave-one-out -> [1 - 3, 3 - 1].
    np.testing.assert_array_equal(
        credax.group_normalize(x, ids, normalization=Normalization(ddof=2, singleton="raw")),
                                  [5.0, 1.0, 3.0])
    np.testing.assert_array_equal(
        credax.group_normalize(x, ids, normalization=Normalization(ddof=2, singleton="center")),
                                  [0.0, -1.0, 1.0])
    np.testing.assert_array_equal(
        credax.group_normalize(
            x, ids, normalization=Normalization(ddof=2, singleton="center", leave_one_out=True)),
        [0.0, -2.0, 2.0])
    np.testing.assert_array_equal(
        credax.group_normalize(x, ids, normalization=Normalization(ddof=2)), [0.0, 0.0, 0.0])


def test_golden_mean_count_peer_mean():
    x = jnp.array([1.0, 0.0, 0.5, 4.0, jnp.nan])
    ids = jnp.array([5, 5, 5, 9, 5])
    mask = jnp.array([True, True, True, True, False])
    # group 5 valid {1, 0, .5}: mean .5; group 9: {4}. Masked row -> 0.
    np.testing.assert_allclose(credax.group_mean(x, ids, mask), [0.5, 0.5, 0.5, 4.0, 0.0])
    np.testing.assert_array_equal(credax.group_count(ids, mask), [3, 3, 3, 1, 0])
    np.testing.assert_array_equal(credax.group_count(ids), [4, 4, 4, 1, 4])
    # others: (0 + .5)/2 = .25, (1 + .5)/2 = .75, (1 + 0)/2 = .5; singleton: mean 0, count 0.
    pm = credax.peer_mean(x, ids, mask)
    np.testing.assert_allclose(pm.mean, [0.25, 0.75, 0.5, 0.0, 0.0])
    np.testing.assert_array_equal(pm.count, [2, 2, 2, 0, 0])
    assert isinstance(pm, credax.PeerMean) and pm[0] is pm.mean
    # A constant set returns its value exactly (1/3 is not dyadic).
    third = jnp.full((3,), 1 / 3, jnp.float32)
    assert np.all(np.asarray(credax.group_mean(third, jnp.array([2, 2, 2]))) == third[0])
    assert np.all(np.asarray(credax.peer_mean(third, jnp.array([2, 2, 2])).mean) == third[0])


# --------------------------------------------------------------------------------------------
# Exact zero for constant groups
# --------------------------------------------------------------------------------------------


@jax.jit
def _with_eps(x, g, mask, eps):
    return [credax.group_normalize(x, g, mask, normalization=Normalization(**dict(o, eps=eps)))
            for o in PROP_OPTIONS]


@given(
    value=st.sampled_from((0.35, 1 / 3, 0.95, 0.1, 1e6 + 0.35, -7.3)),
    size=st.integers(2, 7),
    eps=st.sampled_from((0.0, 1e-6, 1e-4)),
)
def test_constant_groups_are_exactly_zero(value, size, eps):
    # Padded to 8 rows with a varying group so one program serves every size; every option set
    # of PROP_OPTIONS, [B] and per (group, turn) with the other columns varying.
    x = np.concatenate([np.full(size, value), np.linspace(-1, 2, 8 - size)]).astype(np.float32)
    ids = credax.groups(np.array([17] * size + [-4] * (8 - size)))
    x3 = np.stack([x, x[::-1], x * 2], axis=1)
    outs = _with_eps(x, ids, np.ones(8, bool), eps)
    outs3 = _with_eps(x3, ids, np.ones((8, 3), bool), eps)
    for options, out, out3 in zip(PROP_OPTIONS, outs, outs3, strict=True):
        if options.get("center", True):
            assert np.all(np.asarray(out)[:size] == 0.0), (options, out)
            assert np.all(np.asarray(out3)[:size, 0] == 0.0), (options, out3)
            assert np.all(np.asarray(out3)[:size, 2] == 0.0), (options, out3)
        else:  # uncentred zero-spread sets keep x, never divided by eps
            np.testing.assert_array_equal(np.asarray(out)[:size], x[:size])
    assert np.all(np.asarray(credax.group_mean(x, ids))[:size] == np.float32(value))


# --------------------------------------------------------------------------------------------
# Hypothesis properties
#
# One jitted program per shape evaluates every function under every option set of PROP_OPTIONS
# (XLA's per-program overhead dominates at these sizes, so this keeps the suite fast while every
# property is checked for every option set on every example).
# --------------------------------------------------------------------------------------------


@st.composite
def cases(draw, two_d=None, sizes=(8,)):
    b = draw(st.sampled_from(sizes))
    k = draw(st.sampled_from((None, 3))) if two_d is None else (3 if two_d else None)
    shape = (b,) if k is None else (b, k)
    n = int(np.prod(shape))
    pool = draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=5, unique=True))
    ids = np.array(draw(st.lists(st.sampled_from(pool), min_size=b, max_size=b)))
    value = st.one_of(st.sampled_from(NICE), st.integers(-40, 40).map(lambda v: v / 8))
    x = np.array(draw(st.lists(value, min_size=n, max_size=n))).reshape(shape)
    if draw(st.booleans()):  # one constant group with a non-dyadic value
        x[ids == ids[0]] = draw(st.sampled_from((0.35, 1 / 3, 0.95)))
    mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))).reshape(shape)
    if draw(st.booleans()):
        mask[draw(st.integers(0, b - 1))] = False  # an all-masked row
    x = np.where(mask, x, draw(st.sampled_from(GARBAGE))).astype(np.float32)
    return x, ids, mask


OUTPUT_NAMES = [f"group_normalize{o}" for o in PROP_OPTIONS] + [
    "group_mean", "group_count", "peer_mean.mean", "peer_mean.count"]
NOT_BATCH = [i for i, o in enumerate(PROP_OPTIONS) if o.get("scale") != "batch"] + [
    len(PROP_OPTIONS) + j for j in range(4)]


@jax.jit
def _everything(x, g, mask):
    outs = [credax.group_normalize(x, g, mask, normalization=Normalization(**o)) for o in PROP_OPTIONS]
    pm = credax.peer_mean(x, g, mask)
    return outs + [credax.group_mean(x, g, mask), credax.group_count(g, mask), pm.mean, pm.count]


def call_all(x, ids, mask):
    """Every output of OUTPUT_NAMES as float64 NumPy arrays (ids raw or a Groups)."""
    g = ids if isinstance(ids, credax.Groups) else credax.groups(ids)
    return [np.asarray(o, np.float64) for o in _everything(x, g, mask)]


@jax.jit
def _grads(x, g, mask, w):
    """d/dx sum(w * f(x)) for every option set, and for group_mean and peer_mean."""
    fns = [functools.partial(credax.group_normalize, normalization=Normalization(**o))
           for o in PROP_OPTIONS]
    fns += [credax.group_mean, lambda *a: credax.peer_mean(*a).mean]
    return [jax.grad(lambda v, f=f: jnp.sum(w * f(v, g, mask)))(x) for f in fns]


@given(case=cases(), seed=st.integers(0, 2**16))
def test_permutation_equivariance(case, seed):
    x, ids, mask = case
    perm = np.random.default_rng(seed).permutation(x.shape[0])
    base = call_all(x, ids, mask)
    permuted = call_all(x[perm], ids[perm], mask[perm])
    for name, a, b in zip(OUTPUT_NAMES, base, permuted, strict=True):
        assert_close(b, a[perm], err_msg=name)


@given(case=cases(), shift=st.sampled_from((5.0, -0.35, 1e3)))
def test_group_isolation(case, shift):
    # Changing every value of the other groups changes nothing in this group; and the group
    # computed alone gives the same numbers (scale="batch" couples groups on purpose: excluded).
    x, ids, mask = case
    mine = ids == ids[0]
    other = np.where(mine[(...,) + (None,) * (x.ndim - 1)], x, x * 3 + shift).astype(np.float32)
    base = call_all(x, ids, mask)
    changed = call_all(other, ids, mask)
    n = int(mine.sum())
    pad = x.shape[0] - n  # pad the lone group back to B rows (masked) to reuse the program
    xs = np.concatenate([x[mine], np.full((pad,) + x.shape[1:], np.nan, np.float32)])
    ms = np.concatenate([mask[mine], np.zeros((pad,) + x.shape[1:], bool)])
    alone = call_all(xs, np.concatenate([ids[mine], np.full(pad, 99)]), ms)
    for i in NOT_BATCH:
        np.testing.assert_array_equal(changed[i][mine], base[i][mine], err_msg=OUTPUT_NAMES[i])
        assert_close(alone[i][:n], base[i][mine], err_msg=OUTPUT_NAMES[i])


@given(case=cases(), garbage=st.sampled_from(GARBAGE), pad_ids=st.sampled_from(("old", "new")))
def test_padding_invariance_rows(case, garbage, pad_ids):
    x, ids, mask = case
    b = x.shape[0]
    new_ids = ids[:3] if pad_ids == "old" else np.array([-1, 12345, -1])
    xp = np.concatenate([x, np.full((3,) + x.shape[1:], garbage, np.float32)])
    mp = np.concatenate([mask, np.zeros((3,) + x.shape[1:], bool)])
    base = call_all(x, ids, mask)
    padded = call_all(xp, np.concatenate([ids, new_ids]), mp)
    for name, a, p in zip(OUTPUT_NAMES, base, padded, strict=True):
        assert_close(p[:b], a, err_msg=name)
        assert np.all(p[b:] == 0.0), name


@given(case=cases(two_d=True), garbage=st.sampled_from(GARBAGE))
def test_padding_invariance_turns(case, garbage):
    x, ids, mask = case
    b, k = x.shape
    xp = np.concatenate([x, np.full((b, 2), garbage, np.float32)], axis=1)
    mp = np.concatenate([mask, np.zeros((b, 2), bool)], axis=1)
    base = call_all(x, ids, mask)
    padded = call_all(xp, ids, mp)
    for name, a, p in zip(OUTPUT_NAMES, base, padded, strict=True):
        assert_close(p[:, :k], a, err_msg=name)
        assert np.all(p[:, k:] == 0.0), name


@given(case=cases(), g1=st.sampled_from(GARBAGE), g2=st.sampled_from(GARBAGE))
def test_masked_values_change_neither_outputs_nor_gradients(case, g1, g2):
    x, ids, mask = case
    x1 = np.where(mask, x, g1).astype(np.float32)
    x2 = np.where(mask, x, g2).astype(np.float32)
    g = credax.groups(ids)
    for name, a, b in zip(OUTPUT_NAMES, call_all(x1, g, mask), call_all(x2, g, mask),
                          strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert np.all(a[~mask] == 0.0), name
    w = jnp.asarray(np.linspace(-1, 1, x.size).reshape(x.shape), jnp.float32)
    for grad1, grad2 in zip(_grads(x1, g, mask, w), _grads(x2, g, mask, w), strict=True):
        np.testing.assert_array_equal(grad1, grad2)
        assert np.all(np.isfinite(grad1))
        assert np.all(np.asarray(grad1)[~mask] == 0.0)


# Centred outputs sum to 0 over each peer set ("raw" singletons are not centred by contract).
ZERO_MEAN = [i for i, o in enumerate(PROP_OPTIONS)
             if o.get("center", True) and o.get("singleton") != "raw"]


@given(case=cases())
def test_zero_mean_per_group(case):
    x, ids, mask = case
    outs = call_all(x, ids, mask)
    for i in ZERO_MEAN:
        out = outs[i]
        for t in np.ndindex(*x.shape[1:]):
            sel = (slice(None),) + t
            for gid in np.unique(ids):
                members = (ids == gid) & mask[sel]
                assert abs(out[sel][members].sum()) < 1e-4 * max(1, members.sum()), OUTPUT_NAMES[i]


@given(case=cases(), a=st.sampled_from((0.5, 2.0, 3.7)), b=st.sampled_from((-3.0, 0.25, 10.0)))
def test_affine_invariance(case, a, b):
    # Normalised advantages are invariant under r -> a r + b (a > 0), eps = 0; the centred-only
    # ones are equivariant (a (x - μ)). Singletons under "raw" keep their (transformed) value.
    x, ids, mask = case
    y = np.where(mask, a * x.astype(np.float64) + b, np.nan).astype(np.float32)
    g = credax.groups(ids)
    base = [np.asarray(o, np.float64) for o in _affine(x, g, mask)]
    moved = [np.asarray(o, np.float64) for o in _affine(y, g, mask)]
    single = ref.group_count(ids, mask) == 1
    for o, b0, m0 in zip(AFFINE_OPTIONS, base, moved, strict=True):
        if o.get("scale") == "none":
            np.testing.assert_allclose(m0, a * b0, atol=2e-3 * a, rtol=2e-3, err_msg=str(o))
            continue
        if o.get("singleton") == "raw":
            b0 = np.where(single, a * x + b, b0)
        np.testing.assert_allclose(m0, b0, atol=2e-3, rtol=2e-3, err_msg=str(o))


AFFINE_OPTIONS = [
    dict(eps=0.0),
    dict(presets.VERL.asdict(), eps=0.0),
    dict(presets.TRL_BATCH.asdict(), eps=0.0),
    dict(leave_one_out=True, eps=0.0),
    dict(eps_mode="sqrt", ddof=0, eps=0.0),
    dict(scale="none"),
    dict(scale="none", leave_one_out=True),
]


@jax.jit
def _affine(x, g, mask):
    return [credax.group_normalize(x, g, mask, normalization=Normalization(**o)) for o in AFFINE_OPTIONS]


@given(case=cases(), which=st.integers(0, len(PROP_OPTIONS) + 2))
def test_jit_equals_eager(case, which):
    x, ids, mask = case
    jitted = call_all(x, ids, mask)
    with jax.disable_jit():
        if which < len(PROP_OPTIONS):
            eager = [credax.group_normalize(x, ids, mask, normalization=Normalization(**PROP_OPTIONS[which]))]
            jitted = jitted[which:which + 1]
        elif which == len(PROP_OPTIONS):
            eager = [credax.group_mean(x, ids, mask), credax.group_count(ids, mask)]
            jitted = jitted[-4:-2]
        else:
            eager = list(credax.peer_mean(x, ids, mask))
            jitted = jitted[-2:]
    for a, b in zip(jitted, eager, strict=True):
        np.testing.assert_allclose(a, np.asarray(b, np.float64), rtol=1e-5, atol=1e-6)


VMAP_OPTIONS = PROP_OPTIONS[:3]


@jax.jit
def _vmapped(xs, g, idss, ms):
    outs = []
    for o in VMAP_OPTIONS:
        # ids shared (a Groups, in_axes None) ...
        outs.append(jax.vmap(lambda v, m, o=o: credax.group_normalize(
            v, g, m, normalization=Normalization(**o)))(xs, ms))
        # ... and ids batched too (raw ids: densified inside the vmapped trace).
        outs.append(jax.vmap(lambda v, i, m, o=o: credax.group_normalize(
            v, i, m, normalization=Normalization(**o)))(
            xs, idss, ms))
    pm = jax.vmap(credax.peer_mean)(xs, idss, ms)
    return outs + [jax.vmap(credax.group_count)(idss, ms), pm.mean, pm.count]


@given(case=cases(), seed=st.integers(0, 99))
def test_vmap_over_extra_axis_equals_loop(case, seed):
    x, ids, mask = case
    rng = np.random.default_rng(seed)
    n = 3
    perms = [np.arange(x.shape[0])] + [rng.permutation(x.shape[0]) for _ in range(n - 1)]
    xs = np.stack([x[p] for p in perms])  # values move with their mask (garbage stays masked)
    ms = np.stack([mask[p] for p in perms])
    idss = np.stack([ids] + [rng.permutation(ids) for _ in range(n - 1)])
    g = credax.groups(ids)
    outs = [np.asarray(o, np.float64) for o in _vmapped(xs, g, idss, ms)]
    for i in range(n):
        shared = call_all(xs[i], g, ms[i])
        own = call_all(xs[i], idss[i], ms[i])
        for j in range(len(VMAP_OPTIONS)):
            assert_close(outs[2 * j][i], shared[j], rtol=1e-5, atol=1e-6)
            assert_close(outs[2 * j + 1][i], own[j], rtol=1e-5, atol=1e-6)
        for k in (1, 2, 3):  # count, peer mean, peer count
            assert_close(outs[-k][i], own[-k], rtol=1e-5, atol=1e-6)


@jax.jit
def _cover_grads(x, g, mask, w, eps):
    fns = [functools.partial(credax.group_normalize, normalization=Normalization(eps=eps, **o))
           for o in COVER]
    return [jax.grad(lambda v, f=f: jnp.sum(w * f(v, g, mask)))(x) for f in fns]


def test_gradients_finite_everywhere():
    # Singletons, constant groups, all-masked rows and columns, NaN/inf padding, eps = 0, for
    # every option set of the pairwise cover.
    x = np.array([[1.0, 0.35], [0.35, 0.35], [5.0, np.nan], [2.0, 1 / 3], [1 / 3, np.inf],
                  [1 / 3, 0.0]], np.float32)
    mask = np.array([[1, 1], [1, 1], [1, 0], [0, 1], [1, 0], [1, 0]], bool)
    g = credax.groups(np.array([0, 0, 1, 2, 3, 3]))
    w = jnp.arange(12, dtype=jnp.float32).reshape(6, 2) - 5
    for m, eps in [(mask, 0.0), (mask, 1e-6), (np.zeros_like(mask), 0.0)]:
        for options, grad in zip(COVER, _cover_grads(x, g, m, w, eps), strict=True):
            assert np.all(np.isfinite(grad)), (options, grad)
            assert np.all(np.asarray(grad)[~m] == 0.0), (options, grad)


@jax.jit
def _fd_grads(x, g, mask, w):
    return [jax.grad(lambda v, o=o: jnp.sum(w * credax.group_normalize(
                v, g, mask, normalization=Normalization(**o))))(x)
            for o in FD_OPTIONS]


FD_OPTIONS = [{}, dict(scale="batch"), dict(leave_one_out=True, eps_mode="sqrt"),
              dict(center=False, ddof=0)]


def test_gradient_matches_reference_finite_differences():
    # Directional derivatives of the float64 reference by central differences.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 2)).astype(np.float32)
    ids = np.array([4, 4, 4, -1, -1, 6, 6, 6])
    mask = np.array([[1, 1]] * 7 + [[1, 0]], bool)
    w = rng.normal(size=(8, 2)).astype(np.float32)
    grads = _fd_grads(x, credax.groups(ids), mask, w)
    for options, grad in zip(FD_OPTIONS, grads, strict=True):
        grad = np.asarray(grad, np.float64)
        f = lambda z, o=options: float(np.sum(w * ref.group_normalize(z, ids, mask, **o)))  # noqa: E731
        for _ in range(3):
            v = rng.normal(size=x.shape)
            fd = (f(x + 1e-6 * v) - f(x - 1e-6 * v)) / 2e-6
            np.testing.assert_allclose(np.sum(grad * v), fd, rtol=2e-4, atol=2e-4)


# --------------------------------------------------------------------------------------------
# Groups
# --------------------------------------------------------------------------------------------


def _same_partition(index, ids):
    """index[i] == index[j] exactly when ids[i] == ids[j]."""
    index = np.asarray(index)
    ids = [int(v) for v in np.asarray(ids)]
    first = {}
    for i, v in enumerate(ids):
        first.setdefault(v, index[i])
        if index[i] != first[v]:
            return False
    return len(set(first.values())) == len(first)


def test_groups_basic_and_pytree():
    ids = np.array([7, -3, 7, 10**6, -3, 2**31 - 1])
    g = credax.groups(ids)
    assert isinstance(g, credax.Groups)
    assert g.num_groups == 6 and g.index.dtype == jnp.int32 and g.index.shape == (6,)
    assert np.all((np.asarray(g.index) >= 0) & (np.asarray(g.index) < g.num_groups))
    assert _same_partition(g.index, ids)
    assert credax.groups(g) is g
    leaves, treedef = jax.tree_util.tree_flatten(g)
    assert len(leaves) == 1
    assert jax.tree_util.tree_unflatten(treedef, leaves).num_groups == 6
    # under jit (traced ids)
    index = jax.jit(lambda i: credax.groups(i).index)(ids)
    assert _same_partition(index, ids)
    assert "num_groups=6" in repr(g)


def test_groups_num_groups_fast_path():
    ids = np.array([2, 0, 2, 1, 4, 4, 0])
    g = credax.groups(ids, num_groups=5)
    assert g.num_groups == 5
    np.testing.assert_array_equal(g.index, ids)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 2)).astype(np.float32)
    mask = rng.random((7, 2)) < 0.8
    np.testing.assert_allclose(credax.group_normalize(x, g, mask),
                               credax.group_normalize(x, ids, mask), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(credax.group_count(g, mask), ref.group_count(ids, mask))
    np.testing.assert_allclose(credax.peer_mean(x, g, mask).mean, ref.peer_mean(x, ids, mask)[0],
                               rtol=1e-5, atol=1e-6)
    # traced ids with num_groups (promise not checkable, but the values are used as they are)
    out = jax.jit(lambda v, i: credax.group_normalize(v, credax.groups(i, num_groups=5)))(x, ids)
    assert_close(out, ref.group_normalize(x, ids))


@pytest.mark.parametrize(
    "ids, num_groups, error, match",
    [
        ([0, 3], 3, ValueError, "num_groups"),
        ([-1, 0], 3, ValueError, "num_groups"),
        ([0, 1], 0, ValueError, "num_groups"),
        ([0, 1], 2.0, TypeError, "num_groups"),
        ([0.0, 1.0], None, TypeError, "group_ids"),
        ([[0, 1]], None, ValueError, "group_ids"),
        ([True, False], None, TypeError, "group_ids"),
    ],
)
def test_groups_errors(ids, num_groups, error, match):
    with pytest.raises(error, match=match):
        credax.groups(np.asarray(ids), num_groups=num_groups)


def test_a_hand_built_groups_with_an_index_outside_its_range_is_refused():
    # Issue 44 item 3: Groups(np.array([0, 1, 5]), 2) was accepted and row 2 (index 5) silently
    # dropped out of every statistic; refused as groups(ids, num_groups=) refuses the same ids.
    x = jnp.array([1.0, 3.0, 100.0])
    for index in (np.array([0, 1, 5]), [0, -1, 1], np.array([0, 2, 1], np.int64)):
        with pytest.raises(ValueError, match=r"index.*\[0, num_groups=2\)"):
            credax.group_normalize(x, credax.Groups(index, 2))
        with pytest.raises(ValueError, match=r"\[0, num_groups=2\)"):
            credax.grpo_advantages(x, credax.Groups(index, 2))
        g = credax.groups(np.array([0, 1, 1]), num_groups=2)
        with pytest.raises(ValueError, match=r"\[0, num_groups=2\)"):  # one rebuilt from leaves
            jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(g), [np.asarray(index)])
        with pytest.raises(ValueError, match="num_groups"):
            credax.groups(np.asarray(index), num_groups=2)
    # in range: accepted, the same as the dense ids
    good = credax.Groups(np.array([0, 1, 1]), 2)
    np.testing.assert_allclose(credax.group_mean(x, good), credax.group_mean(x, np.array([0, 1, 1])))


def test_bad_group_ids_through_public_functions():
    x = jnp.ones(3)
    with pytest.raises(TypeError, match="group_ids"):
        credax.group_normalize(x, jnp.array([0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="group_ids"):
        credax.group_mean(x, jnp.zeros((3, 1), jnp.int32))
    with pytest.raises(TypeError, match="group_ids"):
        jax.jit(lambda v, i: credax.group_normalize(v, i))(x, jnp.array([0.0, 1.0, 1.0]))


def test_64_bit_ids_are_never_truncated():
    # 2**32 + 5 and 5 agree in their low 32 bits: truncation to int32 would merge them.
    ids = np.array([2**32 + 5, 5, 2**32 + 5, 5, -(2**40) + 5, 2**40 + 5, 2**63 - 1, -(2**63)],
                   np.int64)
    r = np.array([1.0, 0.0, 0.0, 1.0, 0.3, 0.6, 0.35, 0.95], np.float32)
    expected_count = [2, 2, 2, 2, 1, 1, 1, 1]
    expected = ref.group_normalize(r, ids)
    np.testing.assert_array_equal(credax.group_count(ids), expected_count)
    assert _same_partition(credax.groups(ids).index, ids)
    assert_close(credax.group_normalize(r, ids), expected)
    with jax.enable_x64(True):
        np.testing.assert_array_equal(credax.group_count(ids), expected_count)
        assert _same_partition(credax.groups(ids).index, ids)
        assert_close(credax.group_normalize(r, ids), expected)
        # traced 64-bit ids under the user's own jit are hashed at full width
        index = jax.jit(lambda i: credax.groups(i).index)(jnp.asarray(ids))
        assert _same_partition(index, ids)


def _np_fmix32(h):
    h = np.asarray(h, np.uint64) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def test_many_distinct_ids():
    rng = np.random.default_rng(2)
    ids = rng.choice(np.arange(-(2**31), 2**31 - 1, 7919, dtype=np.int64), 4096, replace=False)
    np.testing.assert_array_equal(credax.group_count(ids.astype(np.int32)), np.ones(4096))
    few = rng.integers(-(2**31), 2**31 - 1, size=300)[rng.integers(0, 300, size=4096)]
    _, inverse, counts = np.unique(few, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(credax.group_count(few.astype(np.int32)), counts[inverse])
    assert _same_partition(credax.groups(few.astype(np.int32)).index, few)


@pytest.mark.parametrize("kind", ["same_slot", "high_bits", "strided", "negatives", "folded64"])
def test_adversarial_ids(kind):
    b = 64
    if kind == "same_slot":
        # Ids that all land in one slot of a 128-slot table in the first hashing round of
        # credax's densifier (found by brute force; only the inputs depend on the hash).
        cand = np.arange(1, 2**22, dtype=np.uint64)
        slot = _np_fmix32(cand ^ np.uint64(0x9E3779B9)) >> np.uint64(32 - 7)
        hits = cand[slot == slot[0]][:32].astype(np.int64)
        ids = np.concatenate([hits, hits])
        x64 = False
    elif kind == "high_bits":
        ids = (np.arange(b, dtype=np.int64) % 32) << 25
        x64 = False
    elif kind == "strided":
        ids = (np.arange(b, dtype=np.int64) % 40) * 128
        x64 = False
    elif kind == "negatives":
        ids = -np.arange(b, dtype=np.int64) % 23 - 2**31
        x64 = False
    else:
        # 64-bit ids whose halves fold to the same 32-bit value (lo ^ f(hi)): under x64 they
        # hash alike in every round; only the full-key equality keeps them apart.
        his = np.arange(1, 33, dtype=np.uint64)
        mixed = _np_fmix32(his ^ np.uint64(0x9E3779B9))
        los = (np.uint64(12345) ^ mixed ^ mixed[0]) & np.uint64(0xFFFFFFFF)
        ids = ((his << np.uint64(32)) | los).astype(np.int64)
        ids = np.concatenate([ids, ids[::-1]])
        x64 = True
    ids = ids.astype(np.int64 if x64 else np.int32)
    rng = np.random.default_rng(0)
    ids = ids[rng.permutation(ids.shape[0])]
    _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    with jax.enable_x64(x64):
        np.testing.assert_array_equal(credax.group_count(ids), counts[inverse])
        assert _same_partition(credax.groups(ids).index, ids)
        r = rng.normal(size=ids.shape[0]).astype(np.float32)
        assert_close(credax.group_normalize(r, ids), ref.group_normalize(r, ids))


def test_groups_reused_across_functions_equal_raw_ids():
    rng = np.random.default_rng(9)
    x, ids, mask = random_case(rng, (14, 3))
    g = credax.groups(ids)
    loo = Normalization(leave_one_out=True)
    np.testing.assert_array_equal(credax.group_normalize(x, g, mask, normalization=loo),
                                  credax.group_normalize(x, ids, mask, normalization=loo))
    np.testing.assert_array_equal(credax.group_mean(x, g, mask), credax.group_mean(x, ids, mask))
    np.testing.assert_array_equal(credax.group_count(g, mask), credax.group_count(ids, mask))
    for a, b in zip(credax.peer_mean(x, g, mask), credax.peer_mean(x, ids, mask), strict=True):
        np.testing.assert_array_equal(a, b)
    # keyword form
    np.testing.assert_array_equal(credax.group_mean(x, group_ids=g, mask=mask),
                                  credax.group_mean(x, ids, mask))
    # inside the user's jit, a Groups built outside is a pytree argument
    out = jax.jit(lambda v, gg: credax.group_normalize(v, gg, mask))(x, g)
    assert_close(out, ref.group_normalize(x, ids, mask))


# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_computed_in_float32_and_cast_back(dtype):
    rng = np.random.default_rng(4)
    x, ids, mask = random_case(rng, (12, 3))
    x = np.where(mask, x, 0.0)
    xl = jnp.asarray(x, dtype)
    options = presets.TRL_BATCH.asdict()
    out = credax.group_normalize(xl, ids, mask, normalization=Normalization(**options))
    assert out.dtype == dtype
    # Same as computing in float32 from the rounded input, then casting.
    upcast = credax.group_normalize(xl.astype(jnp.float32), ids, mask,
                                    normalization=Normalization(**options))
    np.testing.assert_array_equal(np.asarray(out, np.float32),
                                  np.asarray(upcast.astype(dtype), np.float32))
    expected = ref.group_normalize(np.asarray(xl, np.float64), ids, mask, **options)
    np.testing.assert_allclose(np.asarray(out, np.float64), expected, rtol=2e-2, atol=2e-2)
    assert credax.group_mean(xl, ids, mask).dtype == dtype
    # A constant low-precision group of a non-dyadic value is still exactly 0.
    c = jnp.full((12, 3), 0.35, dtype)
    out = credax.group_normalize(c, ids, mask, normalization=Normalization(**options))
    assert np.all(np.asarray(out, np.float32) == 0)


def test_integer_and_bool_inputs_give_float32():
    ids = np.array([0, 0, 1, 1])
    assert credax.group_normalize(np.array([1, 0, 3, 3]), ids).dtype == jnp.float32
    out = credax.group_normalize(np.array([True, False, True, True]), ids,
                                 normalization=Normalization(eps=0.0))
    assert out.dtype == jnp.float32
    assert_close(out, [1 / math.sqrt(2), -1 / math.sqrt(2), 0.0, 0.0], atol=1e-6)
    assert credax.group_mean(np.array([1, 2, 3, 3]), ids).dtype == jnp.float32


def test_float64_under_x64():
    rng = np.random.default_rng(6)
    x, ids, mask = random_case(rng, (10, 2))
    x = x.astype(np.float64)
    with jax.enable_x64(True):
        outs = _cover(x, credax.groups(ids), mask)
        for options, out in zip(COVER, outs, strict=True):
            assert out.dtype == jnp.float64
            np.testing.assert_allclose(out, ref.group_normalize(x, ids, mask, eps=1e-3, **options),
                                       rtol=1e-10, atol=1e-12, err_msg=str(options))
        mean, count, pmean, _ = _stats(x, credax.groups(ids), mask)
        assert mean.dtype == jnp.float64 and pmean.dtype == jnp.float64
        np.testing.assert_allclose(pmean, ref.peer_mean(x, ids, mask)[0], rtol=1e-12, atol=1e-12)
        # the public wrapper; float32 input stays float32 even with x64 on
        assert credax.group_normalize(x, ids, mask).dtype == jnp.float64
        assert credax.group_normalize(x.astype(np.float32), ids, mask).dtype == jnp.float32


# --------------------------------------------------------------------------------------------
# Trace-time argument checks
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mask, error, match",
    [
        (np.ones(4, np.float32), TypeError, "mask"),
        (np.ones(3, bool), ValueError, "mask"),
    ],
)
def test_group_normalize_mask_errors(mask, error, match):
    x = np.ones(4, np.float32)
    ids = np.array([0, 0, 1, 1])
    with pytest.raises(error, match=match):
        credax.group_normalize(x, ids, mask)


@pytest.mark.parametrize(
    "fields, error, match",
    [
        (dict(eps_mode="mul"), ValueError, "eps_mode"),
        (dict(singleton="drop"), ValueError, "singleton"),
        (dict(scale="prompt"), ValueError, "scale"),
        (dict(ddof=-1), ValueError, "ddof"),
        (dict(ddof=1.0), TypeError, "ddof"),
        (dict(eps=np.ones(2)), ValueError, "eps"),
        (dict(eps=-1.0), ValueError, "eps"),
        (dict(eps=math.nan), ValueError, "eps"),
        (dict(eps=math.inf), ValueError, "eps"),
        (dict(center=1), TypeError, "center"),
    ],
)
def test_normalization_field_errors_at_construction(fields, error, match):
    # A bad option is refused when the Normalization is built, before any estimator sees it.
    with pytest.raises(error, match=match):
        Normalization(**fields)


@pytest.mark.parametrize("key, value", [
    ("center", True), ("scale", "none"), ("ddof", 0), ("eps", 0.0), ("eps_mode", "sqrt"),
    ("singleton", "raw"), ("leave_one_out", True),
])
def test_group_normalize_refuses_loose_normalization_keywords(key, value):
    # The options are one value: a loose keyword is a TypeError naming it and `normalization=`.
    x = np.ones(4, np.float32)
    ids = np.array([0, 0, 1, 1])
    with pytest.raises(TypeError, match=rf"'{key}'(.|\n)*normalization=credax\.Normalization"):
        credax.group_normalize(x, ids, **{key: value})


@pytest.mark.parametrize("bad", [{}, presets.VERL.asdict(), "verl", 1e-6, (presets.VERL,)])
def test_group_normalize_refuses_a_normalization_that_is_not_one(bad):
    x = np.ones(4, np.float32)
    ids = np.array([0, 0, 1, 1])
    with pytest.raises(TypeError, match="normalization"):
        credax.group_normalize(x, ids, normalization=bad)
    with pytest.raises(TypeError):  # a preset is not a mapping
        credax.group_normalize(x, ids, **presets.VERL)


def test_shape_errors_name_the_argument_also_under_jit():
    ids = np.array([0, 0, 1])
    with pytest.raises(ValueError, match="`x`"):
        credax.group_normalize(np.ones(4, np.float32), ids)
    with pytest.raises(ValueError, match="`x`"):
        credax.group_mean(np.ones(()), ids)
    with pytest.raises(TypeError, match="`x`"):
        credax.group_normalize(np.array([1j, 2j, 3j]), ids)
    with pytest.raises(ValueError, match="mask"):
        credax.group_count(ids, np.ones((4, 2), bool))
    with pytest.raises(TypeError, match="mask"):
        credax.peer_mean(np.ones(3), ids, np.ones(3, np.int32))
    with pytest.raises(TypeError, match="mask"):
        jax.jit(lambda v, m: credax.group_normalize(v, ids, m))(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="mask"):
        jax.jit(lambda v, m: credax.group_mean(v, ids, m))(np.ones((3, 2)), np.ones((3,), bool))


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


R4 = np.array([NAN, 1.0, 1.0, 0.0], np.float32)  # group 0 holds the NaN, group 1 is clean
IDS4 = np.array([0, 0, 1, 1])
GROUP0 = np.array([True, True, False, False])
R4_OK = np.array([1.0, 0.0, 0.5, 0.5], np.float32)  # no bad value
F32MAX = float(np.finfo(np.float32).max)


@probe("nonfinite", "uncentred_unscaled_only_itself")
def _():
    # center=False, scale="none" uses no statistic: x passes through, the NaN stays where it is.
    with pytest.warns(DeprecationWarning, match="`center=False` is deprecated"):
        out = credax.group_normalize(R4, IDS4,
                                     normalization=Normalization(center=False, scale="none"))
    nan_exactly(out, [True, False, False, False])


@probe("nonfinite", "singleton_nan")
def _():
    # A NaN singleton is its own set: NaN under every singleton mode (never the "0" that hides it).
    for mode in ("zero", "raw", "center"):
        with deprecated(dict(singleton=mode)):
            out = credax.group_normalize(np.array([NAN, 1.0, 0.0], np.float32), np.array([5, 6, 6]),
                                         normalization=Normalization(singleton=mode))
        nan_exactly(out, [True, False, False])


@probe("nonfinite", "turn_matrix_nan_per_column")
def _():
    x = np.array([[NAN, 1.0], [0.0, 2.0], [1.0, 3.0], [5.0, 5.0]], np.float32)
    out = credax.group_normalize(x, IDS4)
    # the NaN sits in group 0 at turn 0: only that (group, turn) set is NaN
    nan_exactly(out, [[True, False], [True, False], [False, False], [False, False]])


@probe("nonfinite", "group_mean")
def _():
    nan_exactly(credax.group_mean(R4, IDS4), GROUP0)


@probe("nonfinite", "peer_mean_leave_one_out")
def _():
    # Row 0's peers are [1, 2] (mean 1.5, finite: its own NaN is not among them); rows 1 and 2
    # have the NaN among their peers.
    pm = credax.peer_mean(np.array([NAN, 1.0, 2.0, 5.0], np.float32), np.array([0, 0, 0, 1]))
    nan_exactly(pm.mean, [False, True, True, False])
    assert float(pm.mean[0]) == 1.5 and pm.count.tolist() == [2, 2, 2, 0]


@probe("f32", "huge_pair_std_beyond_max")
def _():
    # [m, -m] with m = float32 max: σ = m·√2 is beyond float32, the z-scores ±1/√2 are not.
    out = credax.group_normalize(np.array([F32MAX, -F32MAX], np.float32), np.zeros(2, np.int32),
                                 normalization=Normalization(eps=0.0))
    np.testing.assert_allclose(out, [0.70710677, -0.70710677], rtol=1e-6)


@probe("f32", "tiny_spread")
def _():
    # [1, 2, 3]·1e-30: squares (1e-60) underflow float32; the z-scores are (-1, 0, 1) with eps=0.
    for scale in (1e-20, 1e-30, 1e-36):
        x = (np.array([1.0, 2.0, 3.0]) * scale).astype(np.float32)
        out = credax.group_normalize(x, np.zeros(3, np.int32), normalization=Normalization(eps=0.0))
        np.testing.assert_allclose(out, [-1.0, 0.0, 1.0], atol=1e-6)


@probe("f32", "tiny_spread_with_eps")
def _():
    # eps dominates a spread of 1e-20: the advantage is (x - μ)/(σ + eps) ≈ ±1e-20/1e-6 = ±1e-14,
    # not the ±1 of a std that underflowed and was mistaken for a constant set.
    x = np.array([0.0, 2e-20], np.float32)
    out = credax.group_normalize(x, np.zeros(2, np.int32), normalization=Normalization(eps=1e-6))
    np.testing.assert_allclose(out, [-1e-14, 1e-14], rtol=1e-4)


@probe("f32", "tiny_spread_around_large")
def _():
    # 1 and the next float32 above it: a real spread of one ulp, z = ±0.7071 with eps=0
    x = np.array([1.0, np.nextafter(np.float32(1), np.float32(2))], np.float32)
    out = credax.group_normalize(x, np.zeros(2, np.int32), normalization=Normalization(eps=0.0))
    np.testing.assert_allclose(out, [-0.70710677, 0.70710677], rtol=1e-6)


@probe("f32", "huge_mean_and_peer_mean")
def _():
    np.testing.assert_allclose(credax.group_mean(np.array([3e38, 3e38, 1e38], np.float32),
                                                 np.zeros(3, np.int32)), [7e38 / 3] * 3, rtol=1e-6)
    pm = credax.peer_mean(np.array([3e38, -3e38, 3e38], np.float32), np.zeros(3, np.int32))
    np.testing.assert_allclose(pm.mean, [0.0, 3e38, 0.0], atol=1e32)


@probe("named", "groups_float_index")
def _():
    bad = credax.Groups(jnp.array([0.0, 1.0]), 2)
    raises(TypeError, "`group_ids`: a Groups needs an integer `index`", credax.grpo_advantages,
           jnp.ones(2), bad)


@probe("named", "groups_num_groups_none")
def _():
    bad = credax.Groups(jnp.array([0, 1]), None)
    raises(TypeError, "`group_ids`: a Groups needs `num_groups` as a Python int",
           credax.group_normalize, jnp.ones(2), bad)


@probe("named", "groups_num_groups_zero")
def _():
    raises(ValueError, "`num_groups` >= 1", credax.group_mean, jnp.ones(2),
           credax.Groups(jnp.array([0, 0]), 0))


@probe("named", "groups_2d_index")
def _():
    raises(ValueError, "1-D `index`", credax.peer_mean, jnp.ones(2), credax.Groups(jnp.zeros((2, 1), int), 2))


BIG = [2 ** 40, 2 ** 40, 5, 5]  # two prompts whose ids do not fit in int32


@probe("named", "list_of_64bit_ids")
def _():
    adv = credax.grpo_advantages(np.array([1.0, 0.0, 1.0, 0.0], np.float32), BIG,
                                 normalization=Normalization(eps=0.0))
    np.testing.assert_allclose(adv, [0.70710677, -0.70710677, 0.70710677, -0.70710677], rtol=1e-6)
    t = credax.tcpo_advantages(np.zeros((4, 2), np.float32), np.ones((4, 2), bool), BIG)
    assert t.advantages.shape == (4, 2)
    sel = credax.select_top_surprisal(np.arange(8.0, dtype=np.float32).reshape(4, 2),
                                      np.ones((4, 2), bool), BIG, budget=1, scope="group")
    assert sel.tolist() == [[False, False], [False, True], [False, False], [False, True]]


@probe("ids", "truncated_ids_merge_documented")
def _():
    # The limitation of class 9, as documented: ids truncated before credax sees them merge;
    # the host path does not.
    ids64 = np.array([2 ** 32 + 5, 5, 7], np.int64)
    merged = credax.groups(jnp.asarray(ids64))
    assert int(merged.index[0]) == int(merged.index[1])
    exact = credax.groups(ids64)
    assert len(set(np.asarray(exact.index).tolist())) == 3
    raises(ValueError, "`group_ids` must fit in int32", credax.validate_rewards, np.zeros(3), ids64)


@probe("ids", "group_count_int8_ids_many_rows")
def _():
    # 300 rows of int8 id 0: a count of 300 (beyond int8) is exact.
    assert int(credax.group_count(np.zeros(300, np.int8))[0]) == 300


TUPLE_IDS = {
    "grpo": lambda: credax.grpo_advantages(R4_OK, (0, 0, 1, 1)),
    "group_normalize": lambda: credax.group_normalize(R4_OK, (0, 0, 1, 1)),
    "groups": lambda: credax.groups((0, 0, 1, 1)),
    "groups_num_groups": lambda: credax.groups((0, 0, 1, 1), num_groups=2),
    "groups_contiguous": lambda: credax.groups((0, 0, 1, 1), layout="contiguous", group_size=2),
    "dead_groups": lambda: credax.dead_groups(R4_OK, (0, 0, 1, 1)),
    "shrinkage": lambda: credax.shrinkage_baseline(R4_OK, (0, 0, 1, 1)),
    "validate_rewards": lambda: credax.validate_rewards(R4_OK, (0, 0, 1, 1)),
}


probe.raising("ids", "tuple_group_ids", TUPLE_IDS, TypeError, r"`group_ids`.*tuple")


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

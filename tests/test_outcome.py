"""Tests of the outcome advantages: GRPO, Dr. GRPO, RLOO, GDPO, degenerate_groups and the peer
presets (SPEC §2; credax.presets).

Ground truth: the NumPy loops of ``tests/reference/groups.py``, hand-worked verl and TRL numbers
(their formulas as described in research/peers.md §2.1 and §2.3, worked by hand below),
identities between the estimators, and hypothesis properties.

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import credax
from credax import Normalization, presets
from tests.probes import INF, NAN, Probes, deprecated, nan_exactly, raises, same_where
from tests.reference import groups as ref

NICE = (0.0, 0.35, 1.0 / 3.0, 0.95, 1.0, -2.5)
GARBAGE = (math.nan, math.inf, -math.inf, 1e30)
PRESETS = {
    "VERL": presets.VERL,
    "VERL_DR_GRPO": presets.VERL_DR_GRPO,
    "TRL": presets.TRL,
    "TRL_BATCH": presets.TRL_BATCH,
    "TRL_NONE": presets.TRL_NONE,
    "default": None,  # normalization=None: the estimator's default
}


def _norm(options):
    """The Normalization of a dict of its fields; {} is None (the default, as passing nothing)."""
    return credax.Normalization(**options) if options else None


def assert_close(actual, expected, rtol=1e-4, atol=1e-5, err_msg=""):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol, atol=atol,
                               err_msg=err_msg)


def random_batch(rng, b, c=None):
    ids = rng.choice([-9, 0, 4, 11, 2**31 - 1, 123456][: rng.integers(1, 7)], size=b)
    shape = (b,) if c is None else (b, c)
    r = np.where(rng.random(shape) < 0.5, rng.choice(NICE, size=shape), rng.normal(size=shape))
    r[ids == ids[0]] = 1 / 3  # a constant group (or a constant singleton)
    mask = rng.random(b) < 0.85
    full = mask if c is None else mask[:, None]
    r = np.where(full, r, rng.choice(GARBAGE)).astype(np.float32)
    return r, ids, mask


# --------------------------------------------------------------------------------------------
# Golden cases: verl and TRL worked by hand
# --------------------------------------------------------------------------------------------

# verl batch: uids a b a c b a, scores 1 .5 0 .7 .5 .5 (any hashable uid; credax: any int).
VERL_IDS = np.array([101, -7, 101, 55, -7, 101])
VERL_SCORES = np.array([1.0, 0.5, 0.0, 0.7, 0.5, 0.5], np.float32)


def test_verl_preset_golden():
    # verl compute_grpo_outcome_advantage, norm_adv_by_std_in_grpo=True, epsilon=1e-6:
    #   group a = {1, 0, .5}: mean .5, torch.std (unbiased) = sqrt((.25 + .25 + 0) / 2) = .5
    #     -> (1 - .5)/(.5 + 1e-6) = .999998, (0 - .5)/(.500001) = -.999998, (.5 - .5)/.. = 0
    #   group b = {.5, .5}: std 0 -> 0 / (0 + 1e-6) = 0
    #   group c = {.7}: singleton, verl sets mean 0 and std 1 -> .7 / (1 + 1e-6) = .6999993
    verl = [0.5 / 0.500001, 0.0, -0.5 / 0.500001, 0.7 / (1 + 1e-6), 0.0, 0.0]
    out = credax.grpo_advantages(VERL_SCORES, VERL_IDS, normalization=presets.VERL)
    # The preset keeps the singleton's raw score (.7): within 1e-6 relative of verl's .7/(1+1e-6).
    np.testing.assert_allclose(out, verl, rtol=2e-6, atol=1e-7)
    assert float(out[3]) == np.float32(0.7)
    assert float(out[1]) == 0.0 and float(out[4]) == 0.0


def test_verl_dr_grpo_preset_golden():
    # norm_adv_by_std_in_grpo=False: score - mean; the singleton's mean is 0 -> .7.
    #   a: 1 - .5 = .5, 0 - .5 = -.5, .5 - .5 = 0;   b: 0, 0;   c: .7 - 0 = .7
    out = credax.grpo_advantages(VERL_SCORES, VERL_IDS, normalization=presets.VERL_DR_GRPO)
    np.testing.assert_allclose(out, [0.5, 0.0, -0.5, 0.7, 0.0, 0.0], atol=1e-7)


# TRL batch: 2 prompts x G = 3 generations, contiguous as TRL requires (credax does not).
TRL_REWARDS = np.array([1.0, 0.0, 0.5, 0.2, 0.2, 0.8], np.float32)
TRL_IDS = np.array([0, 0, 0, 1, 1, 1])


def _trl_expected(scale_rewards):
    # mean_grouped: prompt 0 -> .5, prompt 1 -> .4
    centred = [0.5, -0.5, 0.0, -0.2, -0.2, 0.4]
    if scale_rewards == "group":
        # std_grouped (unbiased): prompt 0 sqrt((.25 + .25 + 0)/2) = .5;
        # prompt 1 sqrt((.04 + .04 + .16)/2) = sqrt(.12) = .34641
        std = [0.5] * 3 + [math.sqrt(0.12)] * 3
    elif scale_rewards == "batch":
        # rewards.std() over all 6: mean 2.7/6 = .45; squared deviations .3025 .2025 .0025
        # .0625 .0625 .1225 sum .755; / 5 = .151 -> .388587
        std = [math.sqrt(0.151)] * 6
    else:
        return centred
    return [c / (s + 1e-4) for c, s in zip(centred, std, strict=True)]


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_trl_presets_golden(scale_rewards):
    preset = presets.trl(scale_rewards)
    expected = _trl_expected(scale_rewards)
    out = credax.grpo_advantages(TRL_REWARDS, TRL_IDS, normalization=preset)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    # credax needs no contiguity: shuffled rows and arbitrary ids give the same per-row numbers.
    perm = np.array([4, 0, 5, 2, 1, 3])
    ids = np.where(TRL_IDS == 0, -123, 77)[perm]
    out = credax.grpo_advantages(TRL_REWARDS[perm], ids, normalization=preset)
    np.testing.assert_allclose(out, np.array(expected)[perm], rtol=1e-6, atol=1e-7)


def test_trl_preset_values_by_hand():
    # group: ±.5 / (.5 + 1e-4) = ±.99980; -.2 / (.34641 + 1e-4) = -.57718; .4 / .34651 = 1.15437
    out = credax.grpo_advantages(TRL_REWARDS, TRL_IDS, normalization=presets.TRL)
    np.testing.assert_allclose(out, [0.99980, -0.99980, 0.0, -0.57718, -0.57718, 1.15437],
                               atol=1e-5)
    # batch: ±.5 / (.388587 + 1e-4) = ±1.28638; -.2 / .388687 = -.51455; .4 / .388687 = 1.02911
    out = credax.grpo_advantages(TRL_REWARDS, TRL_IDS, normalization=presets.TRL_BATCH)
    np.testing.assert_allclose(out, [1.28638, -1.28638, 0.0, -0.51455, -0.51455, 1.02911],
                               atol=1e-5)


def test_presets_are_complete_and_immutable():
    keys = {"center", "scale", "ddof", "eps", "eps_mode", "singleton"}
    for name, preset in PRESETS.items():
        if name != "default":
            assert isinstance(preset, credax.Normalization), name
            assert keys <= set(preset.asdict()), name
            assert credax.Normalization(**preset.asdict()).asdict() == preset.asdict(), name
    assert presets.VERL.eps == 1e-6 and presets.VERL.singleton == "raw"
    assert presets.TRL.eps == 1e-4 and presets.TRL.ddof == 1
    assert presets.trl("batch") is presets.TRL_BATCH and presets.trl() is presets.TRL
    with pytest.raises(AttributeError, match="immutable"):
        presets.VERL.eps = 0.0  # a shared preset cannot be mutated by one caller
    with pytest.raises(TypeError):
        presets.VERL["eps"] = 0.0
    # asdict() is a new dict: changing it leaves the preset as it was
    fields = presets.VERL.asdict()
    fields["eps"] = 0.0
    assert presets.VERL.eps == 1e-6
    # not a mapping: dict(preset) and **preset are TypeErrors
    with pytest.raises(TypeError):
        dict(presets.VERL)
    with pytest.raises(TypeError):
        credax.Normalization(**presets.TRL)
    with pytest.raises(ValueError, match="scale_rewards"):
        presets.trl("std")


def test_constant_and_singleton_groups_under_every_preset():
    # {1/3, 1/3, 1/3} and {.95, .95}: exactly 0 under every preset (TRL's own float mean of
    # three 1/3 need not be exact; credax's is by construction). Singleton 0.35: raw under verl.
    r = np.array([1 / 3, 1 / 3, 1 / 3, 0.95, 0.95, 0.35], np.float32)
    ids = np.array([1, 1, 1, 2, 2, 3])
    for name, preset in PRESETS.items():
        out = np.asarray(credax.grpo_advantages(r, ids, normalization=preset))
        assert np.all(out[:5] == 0.0), name
        raw = preset is not None and preset.singleton == "raw"
        assert out[5] == (np.float32(0.35) if raw else 0.0), name


def test_rloo_golden():
    # {1, 0, .5}: 1 - (0 + .5)/2 = .75, 0 - (1 + .5)/2 = -.75, .5 - (1 + 0)/2 = 0.
    # {3}: no other member -> 0 ("zero"), 3 ("raw").  Masked row (NaN) -> 0.
    r = jnp.array([1.0, 0.0, 0.5, 3.0, jnp.nan])
    ids = jnp.array([4, 4, 4, 8, 4])
    mask = jnp.array([True, True, True, True, False])
    np.testing.assert_allclose(credax.rloo_advantages(r, ids, mask), [0.75, -0.75, 0, 0, 0])
    np.testing.assert_allclose(credax.rloo_advantages(r, ids, mask, singleton="raw"),
                               [0.75, -0.75, 0, 3, 0])


def test_gdpo_golden():
    # One group, rewards (0,2) (0,1) (1,0) (1,1).
    # column 0 {0,0,1,1}: μ .5, σ = sqrt(4 × .25 / 3) = .57735 -> -.86603 -.86603 .86603 .86603
    # column 1 {2,1,0,1}: μ 1,  σ = sqrt((1 + 0 + 1 + 0) / 3) = .81650 -> 1.22474 0 -1.22474 0
    # weights (1, 1): .35871 -.86603 -.35871 .86603 — (0,2) and (0,1) stay apart, and (0,1),
    # (1,0), whose sums are equal, get different advantages.
    r = jnp.array([[0.0, 2.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    ids = jnp.zeros(4, jnp.int32)
    c0 = [-0.5 / math.sqrt(1 / 3), -0.5 / math.sqrt(1 / 3), 0.5 / math.sqrt(1 / 3),
          0.5 / math.sqrt(1 / 3)]
    c1 = [1 / math.sqrt(2 / 3), 0.0, -1 / math.sqrt(2 / 3), 0.0]
    no_eps = credax.Normalization(eps=0.0)
    out = credax.gdpo_advantages(r, ids, weights=jnp.ones(2), normalization=no_eps)
    np.testing.assert_allclose(out, np.add(c0, c1), atol=1e-6)
    # weights (2, .5)
    out = credax.gdpo_advantages(r, ids, weights=jnp.array([2.0, 0.5]), normalization=no_eps)
    np.testing.assert_allclose(out, 2 * np.array(c0) + 0.5 * np.array(c1), atol=1e-6)
    # summing first (GRPO on r0 + r1 = 2 1 1 2) collapses (0,1) and (1,0): gdpo does not.
    summed = credax.grpo_advantages(r.sum(axis=1), ids, normalization=no_eps)
    assert float(summed[1]) == float(summed[2])
    assert abs(float(out[1]) - float(out[2])) > 0.5


def test_degenerate_groups_golden():
    # {1, 0}: spread; {.35, .35}: no spread; {2}: single; {5, NaN(masked)}: single valid member;
    # masked rows are False.
    r = jnp.array([1.0, 0.0, 0.35, 0.35, 2.0, 5.0, jnp.nan])
    ids = jnp.array([0, 0, 1, 1, 2, 3, 3])
    mask = jnp.array([True] * 6 + [False])
    np.testing.assert_array_equal(credax.degenerate_groups(r, ids, mask),
                                  [False, False, True, True, True, True, False])
    assert credax.degenerate_groups(r, ids, mask).dtype == jnp.bool_


# --------------------------------------------------------------------------------------------
# Reference comparison and identities
# --------------------------------------------------------------------------------------------


GRPO_OPTIONS = [{} if p is None else p.asdict() for p in PRESETS.values()] + [
    dict(eps_mode="sqrt", ddof=0, singleton="center"),
    dict(leave_one_out=True, scale="batch"),
    dict(center=False, eps=1e-3),
    dict(ddof=2, singleton="raw", leave_one_out=True),
]
GDPO_OPTIONS = [{}, presets.TRL.asdict(), dict(scale="none"), presets.VERL.asdict()]


def _estimators(w):
    """Every outcome estimator under several option sets: functions of (r, rc, g, mask)."""
    fns = [lambda r, rc, g, m, o=o: credax.grpo_advantages(r, g, m, normalization=_norm(o))
           for o in GRPO_OPTIONS]
    fns += [lambda r, rc, g, m, s=s: credax.rloo_advantages(r, g, m, singleton=s)
            for s in ("zero", "raw", "center")]
    fns += [lambda r, rc, g, m, o=o: credax.gdpo_advantages(rc, g, m, weights=w,
                                                                normalization=_norm(o))
            for o in GDPO_OPTIONS]
    fns.append(lambda r, rc, g, m: credax.degenerate_groups(r, g, m))
    return fns


@jax.jit
def _outcome_all(r, rc, g, mask, w):
    """All of them in one compiled program (XLA's per-program overhead dominates here)."""
    return [f(r, rc, g, mask) for f in _estimators(w)]


def _references(r, rc, ids, mask, w):
    exp = [ref.grpo_advantages(r, ids, mask, **o) for o in GRPO_OPTIONS]
    exp += [ref.rloo_advantages(r, ids, mask, singleton=s) for s in ("zero", "raw", "center")]
    exp += [ref.gdpo_advantages(rc, ids, mask, weights=w, **o) for o in GDPO_OPTIONS]
    exp.append(ref.degenerate_groups(r, ids, mask))
    return exp


NAMES = ([f"grpo{o}" for o in GRPO_OPTIONS] + ["rloo-zero", "rloo-raw", "rloo-center"]
         + [f"gdpo{o}" for o in GDPO_OPTIONS] + ["degenerate"])


def test_outcome_estimators_match_reference():
    rng = np.random.default_rng(0)
    for _ in range(5):
        r, ids, mask = random_batch(rng, 17)
        rc, _, _ = random_batch(rng, 17, 3)
        rc = np.where(mask[:, None], np.nan_to_num(rc, nan=0.5, posinf=0.5, neginf=0.5), np.nan)
        rc = rc.astype(np.float32)
        w = rng.normal(size=3).astype(np.float32)
        got = _outcome_all(r, rc, credax.groups(ids), mask, w)
        for name, a, e in zip(NAMES, got, _references(r, rc, ids, mask, w), strict=True):
            if name == "degenerate":
                np.testing.assert_array_equal(a, e)
            else:
                assert_close(a, e, err_msg=name)
                assert np.all(np.asarray(a)[~mask] == 0.0), name
    # and through the public wrappers with raw ids
    assert_close(credax.grpo_advantages(r, ids, mask), ref.grpo_advantages(r, ids, mask))
    assert_close(credax.rloo_advantages(r, ids, mask), ref.rloo_advantages(r, ids, mask))
    assert_close(credax.gdpo_advantages(rc, ids, mask, weights=w),
                 ref.gdpo_advantages(rc, ids, mask, weights=w))
    np.testing.assert_array_equal(credax.degenerate_groups(r, ids, mask),
                                  ref.degenerate_groups(r, ids, mask))


@jax.jit
def _identity_terms(r, rc, g, mask):
    t = {}
    t["grpo"] = [credax.grpo_advantages(r, g, mask, normalization=_norm(o))
                 for o in GRPO_OPTIONS[:3]]
    t["normalize"] = [credax.group_normalize(r, g, mask, normalization=_norm(o))
                      for o in GRPO_OPTIONS[:3]]
    t["rloo"] = credax.rloo_advantages(r, g, mask)
    t["loo"] = credax.grpo_advantages(
        r, g, mask, normalization=credax.Normalization(scale="none", leave_one_out=True))
    t["drgrpo"] = credax.grpo_advantages(r, g, mask,
                                         normalization=credax.Normalization(scale="none"))
    t["gdpo1"] = credax.gdpo_advantages(rc[:, :1], g, mask, weights=jnp.ones(1))
    t["grpo0"] = credax.grpo_advantages(rc[:, 0], g, mask)
    w1, w2 = jnp.array([0.3, -1.0]), jnp.array([2.0, 0.25])
    t["gdpo_sum"] = credax.gdpo_advantages(rc, g, mask, weights=w1 + w2)
    t["gdpo_parts"] = (credax.gdpo_advantages(rc, g, mask, weights=w1)
                       + credax.gdpo_advantages(rc, g, mask, weights=w2))
    t["degenerate"] = credax.degenerate_groups(r, g, mask)
    t["centred"] = [credax.grpo_advantages(r, g, mask, normalization=o)
                    for o in (presets.TRL, presets.TRL_BATCH, presets.TRL_NONE, None)]
    return t


def test_identities_between_estimators():
    rng = np.random.default_rng(1)
    r, ids, mask = random_batch(rng, 16)
    rc = np.where(mask[:, None], rng.normal(size=(16, 2)), np.nan).astype(np.float32)
    t = _identity_terms(r, rc, credax.groups(ids), mask)
    # GRPO is group_normalize of a [B] reward.
    for a, b in zip(t["grpo"], t["normalize"], strict=True):
        np.testing.assert_array_equal(a, b)
    # RLOO is leave-one-out centring without std, and n/(n-1) times Dr. GRPO.
    assert_close(t["rloo"], t["loo"], rtol=1e-6, atol=1e-7)
    n = ref.group_count(ids, mask).astype(np.float64)
    drgrpo = np.asarray(t["drgrpo"], np.float64)
    assert_close(t["rloo"], np.where(n > 1, drgrpo * n / np.maximum(n - 1, 1), 0.0), rtol=1e-5,
                 atol=1e-6)
    # GDPO with one component and weight 1 is GRPO; it is linear in the weights.
    np.testing.assert_allclose(t["gdpo1"], t["grpo0"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(t["gdpo_sum"], t["gdpo_parts"], rtol=1e-5, atol=1e-6)
    # Where degenerate_groups is true, centred GRPO is exactly 0.
    degenerate = np.asarray(t["degenerate"])
    assert degenerate.any()
    for out in t["centred"]:
        assert np.all(np.asarray(out)[degenerate] == 0.0)


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@st.composite
def outcome_cases(draw, b=8):
    pool = draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=4, unique=True))
    ids = np.array(draw(st.lists(st.sampled_from(pool), min_size=b, max_size=b)))
    value = st.one_of(st.sampled_from(NICE), st.integers(-16, 16).map(lambda v: v / 4))
    r = np.array(draw(st.lists(value, min_size=b, max_size=b)))
    rc = np.array(draw(st.lists(value, min_size=2 * b, max_size=2 * b))).reshape(b, 2)
    if draw(st.booleans()):
        r[ids == ids[-1]] = draw(st.sampled_from((0.35, 1 / 3, 0.95)))
        rc[ids == ids[-1], 1] = 0.95
    mask = np.array(draw(st.lists(st.booleans(), min_size=b, max_size=b)))
    garbage = draw(st.sampled_from(GARBAGE))
    r = np.where(mask, r, garbage).astype(np.float32)
    rc = np.where(mask[:, None], rc, garbage).astype(np.float32)
    return r, rc, ids, mask


W = np.array([1.0, 0.5], np.float32)


def _outs(r, rc, ids, mask):
    g = ids if isinstance(ids, credax.Groups) else credax.groups(ids)
    return [np.asarray(o, np.float64) for o in _outcome_all(r, rc, g, mask, W)]


@given(case=outcome_cases(), seed=st.integers(0, 999))
def test_permutation_equivariance(case, seed):
    r, rc, ids, mask = case
    perm = np.random.default_rng(seed).permutation(r.shape[0])
    base = _outs(r, rc, ids, mask)
    moved = _outs(r[perm], rc[perm], ids[perm], mask[perm])
    for name, a, b in zip(NAMES, base, moved, strict=True):
        assert_close(b, a[perm], err_msg=name)


@given(case=outcome_cases(), garbage=st.sampled_from(GARBAGE))
def test_padding_invariance(case, garbage):
    r, rc, ids, mask = case
    rp = np.concatenate([r, np.full(3, garbage, np.float32)])
    rcp = np.concatenate([rc, np.full((3, 2), garbage, np.float32)])
    idp = np.concatenate([ids, ids[:3]])
    mp = np.concatenate([mask, np.zeros(3, bool)])
    base = _outs(r, rc, ids, mask)
    padded = _outs(rp, rcp, idp, mp)
    for name, a, p in zip(NAMES, base, padded, strict=True):
        assert_close(p[:8], a, err_msg=name)
        assert np.all(p[8:] == 0), name


@jax.jit
def _outcome_grads(r, rc, g, mask, w):
    fns = [functools.partial(credax.grpo_advantages, normalization=_norm(o))
           for o in GRPO_OPTIONS]
    fns += [credax.rloo_advantages]
    grads = [jax.grad(lambda v, f=f: jnp.sum(jnp.arange(8.0) * f(v, g, mask)))(r) for f in fns]
    gd = [jax.grad(lambda v, o=o: jnp.sum(jnp.arange(8.0) * credax.gdpo_advantages(
        v, g, mask, weights=w, normalization=_norm(o))))(rc) for o in GDPO_OPTIONS]
    wg = jax.grad(lambda ww: jnp.sum(credax.gdpo_advantages(rc, g, mask, weights=ww)))(w)
    return grads + gd + [wg]


@given(case=outcome_cases(), garbage=st.sampled_from(GARBAGE))
def test_masked_values_change_neither_outputs_nor_gradients(case, garbage):
    r, rc, ids, mask = case
    g = credax.groups(ids)
    r2 = np.where(mask, r, garbage).astype(np.float32)
    rc2 = np.where(mask[:, None], rc, garbage).astype(np.float32)
    for name, a, b in zip(NAMES, _outs(r, rc, g, mask), _outs(r2, rc2, g, mask), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    grads = _outcome_grads(r, rc, g, mask, W)
    for a, b in zip(grads, _outcome_grads(r2, rc2, g, mask, W), strict=True):
        np.testing.assert_array_equal(a, b)
        assert np.all(np.isfinite(a))
    for a in grads[:-1]:
        assert np.all(np.asarray(a)[~mask] == 0.0)


@given(value=st.sampled_from((0.35, 1 / 3, 0.95, 1e4 + 0.35)), size=st.integers(2, 8),
       eps=st.sampled_from((0.0, 1e-6, 1e-4)))
def test_constant_groups_exactly_zero(value, size, eps):
    r = np.concatenate([np.full(size, value), np.linspace(0, 1, 8 - size)]).astype(np.float32)
    rc = np.stack([r, r[::-1]], axis=1)
    ids = np.array([5] * size + [6] * (8 - size))
    mask = np.ones(8, bool)
    outs = _outcome_all(r, rc, credax.groups(ids), mask, W)
    for name, o, opts in zip(NAMES, outs, GRPO_OPTIONS + [{}] * 3, strict=False):
        if opts.get("singleton") == "raw" and opts.get("ddof", 1) >= size:
            continue  # ddof turns the set into a singleton set; "raw" keeps x by contract
        if opts.get("center", True):
            assert np.all(np.asarray(o)[:size] == 0.0), name
    assert np.all(np.asarray(outs[-1])[:size])  # degenerate
    # eps traced through the public function too
    out = credax.grpo_advantages(r, ids, normalization=credax.Normalization(eps=eps))
    assert np.all(np.asarray(out)[:size] == 0.0)


@given(case=outcome_cases(), which=st.integers(0, len(NAMES) - 1))
def test_jit_equals_eager(case, which):
    r, rc, ids, mask = case
    jitted = _outs(r, rc, ids, mask)[which]
    with jax.disable_jit():
        eager = np.asarray(_estimators(W)[which](r, rc, ids, mask), np.float64)
    np.testing.assert_allclose(jitted, eager, rtol=1e-5, atol=1e-6)


@jax.jit
def _vmapped(rs, rcs, idss, ms):
    return [
        jax.vmap(credax.grpo_advantages)(rs, idss, ms),
        jax.vmap(lambda *a: credax.grpo_advantages(*a, normalization=presets.TRL_BATCH))(
            rs, idss, ms),
        jax.vmap(credax.rloo_advantages)(rs, idss, ms),
        jax.vmap(lambda a, i, m: credax.gdpo_advantages(a, i, m, weights=W))(rcs, idss, ms),
        jax.vmap(credax.degenerate_groups)(rs, idss, ms),
    ]


@given(cases=st.lists(outcome_cases(), min_size=3, max_size=3))
def test_vmap_over_extra_axis_equals_loop(cases):
    rs, rcs, idss, ms = (np.stack(a) for a in zip(*cases, strict=True))
    outs = _vmapped(rs, rcs, idss, ms)
    for i in range(3):
        loop = [credax.grpo_advantages(rs[i], idss[i], ms[i]),
                credax.grpo_advantages(rs[i], idss[i], ms[i], normalization=presets.TRL_BATCH),
                credax.rloo_advantages(rs[i], idss[i], ms[i]),
                credax.gdpo_advantages(rcs[i], idss[i], ms[i], weights=W),
                credax.degenerate_groups(rs[i], idss[i], ms[i])]
        for a, b in zip(outs, loop, strict=True):
            np.testing.assert_allclose(np.asarray(a[i], np.float64), np.asarray(b, np.float64),
                                       rtol=1e-5, atol=1e-6)


def test_gradients_finite_on_degenerate_batches():
    # All singletons, all constant, all masked, eps = 0.
    g = credax.groups(np.arange(8))
    for r, mask in [(np.arange(8, dtype=np.float32), np.ones(8, bool)),
                    (np.full(8, 0.35, np.float32), np.ones(8, bool)),
                    (np.full(8, np.nan, np.float32), np.zeros(8, bool))]:
        for gg in (g, credax.groups(np.zeros(8, np.int32))):
            rc = np.stack([r, r], axis=1)
            for grad in _outcome_grads(r, rc, gg, mask, W):
                assert np.all(np.isfinite(grad))


# --------------------------------------------------------------------------------------------
# dtypes and argument checks
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_rewards(dtype):
    r = jnp.asarray(TRL_REWARDS, dtype)
    out = credax.grpo_advantages(r, TRL_IDS, normalization=presets.TRL)
    assert out.dtype == dtype
    up = credax.grpo_advantages(r.astype(jnp.float32), TRL_IDS, normalization=presets.TRL)
    up = up.astype(dtype)
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(up, np.float32))
    np.testing.assert_allclose(np.asarray(out, np.float64), _trl_expected("group"), rtol=2e-2,
                               atol=2e-2)
    assert credax.rloo_advantages(r, TRL_IDS).dtype == dtype
    assert credax.gdpo_advantages(jnp.stack([r, r], 1), TRL_IDS,
                                  weights=jnp.ones(2, dtype)).dtype == dtype


def test_integer_rewards_and_float64():
    out = credax.grpo_advantages(np.array([1, 0, 1, 1]), np.array([0, 0, 1, 1]),
                                 normalization=credax.Normalization(eps=0.0))
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, [1 / math.sqrt(2), -1 / math.sqrt(2), 0, 0], atol=1e-6)
    with jax.enable_x64(True):
        r = np.array([1.0, 0.5, 0.0, 0.7, 0.5, 0.5])  # float64
        out = credax.grpo_advantages(r, VERL_IDS, normalization=presets.VERL)
        assert out.dtype == jnp.float64
        # singleton raw .7 vs verl's .7/(1 + 1e-6): the one documented 1e-6 relative difference
        np.testing.assert_allclose(out, [0.5 / 0.500001, 0, -0.5 / 0.500001, 0.7, 0, 0],
                                   rtol=1e-12, atol=1e-15)
        assert credax.rloo_advantages(r, VERL_IDS).dtype == jnp.float64
        rc = np.stack([r, r[::-1]], 1)
        np.testing.assert_allclose(credax.gdpo_advantages(rc, VERL_IDS, weights=np.ones(2)),
                                   ref.gdpo_advantages(rc, VERL_IDS, weights=np.ones(2)),
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: credax.grpo_advantages(np.ones((4, 2)), np.zeros(4, int)), ValueError, "rewards"),
        (lambda: credax.rloo_advantages(np.ones((4, 2)), np.zeros(4, int)), ValueError, "rewards"),
        (lambda: credax.degenerate_groups(np.ones((4, 2)), np.zeros(4, int)), ValueError,
         "rewards"),
        (lambda: credax.grpo_advantages(np.ones(4), np.zeros(3, int)), ValueError, "rewards"),
        (lambda: credax.grpo_advantages(np.ones(4), np.zeros(4, int), np.ones(4)), TypeError,
         "mask"),
        (lambda: credax.rloo_advantages(np.ones(4), np.zeros(4, int), np.ones(3, bool)),
         ValueError, "mask"),
        (lambda: credax.rloo_advantages(np.ones(4), np.zeros(4, int), singleton="drop"),
         ValueError, "singleton"),
        (lambda: credax.grpo_advantages(np.ones(4), np.zeros(4)), TypeError, "group_ids"),
        (lambda: credax.gdpo_advantages(np.ones(4), np.zeros(4, int), weights=np.ones(1)),
         ValueError, "rewards"),
        (lambda: credax.gdpo_advantages(np.ones((4, 2)), np.zeros(4, int), weights=np.ones(3)),
         ValueError, "weights"),
        (lambda: credax.gdpo_advantages(np.ones((4, 2)), np.zeros(4, int), np.ones((4, 2), bool),
                                        weights=np.ones(2)), ValueError, "mask"),
        # an unknown eps_mode is refused when the Normalization is built
        (lambda: credax.grpo_advantages(np.ones(4), np.zeros(4, int),
                                        normalization=credax.Normalization(eps_mode="x")),
         ValueError, "eps_mode"),
        # the removed loose keywords: a TypeError naming the keyword and `normalization=`
        (lambda: credax.grpo_advantages(np.ones(4), np.zeros(4, int), eps_mode="sqrt"),
         TypeError, r"'eps_mode'(.|\n)*normalization="),
        (lambda: credax.grpo_advantages(np.ones(4), np.zeros(4, int), scale="none"),
         TypeError, r"'scale'(.|\n)*normalization="),
        (lambda: credax.gdpo_advantages(np.ones((4, 2)), np.zeros(4, int), weights=np.ones(2),
                                        eps=0.0), TypeError, r"'eps'(.|\n)*normalization="),
        # a preset is not a mapping: **preset is a TypeError; only a Normalization (or None)
        (lambda: credax.grpo_advantages(np.ones(4), np.zeros(4, int), **presets.VERL),
         TypeError, "must be a mapping"),
        (lambda: credax.grpo_advantages(np.ones(4), np.zeros(4, int),
                                        normalization=presets.VERL.asdict()),
         TypeError, "normalization"),
        (lambda: credax.gdpo_advantages(np.ones((4, 2)), np.zeros(4, int), weights=np.ones(2),
                                        normalization="verl"), TypeError, "normalization"),
    ],
)
def test_argument_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_argument_errors_under_jit():
    with pytest.raises(ValueError, match="rewards"):
        jax.jit(lambda r: credax.grpo_advantages(r, jnp.zeros(4, jnp.int32)))(jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="weights"):
        jax.jit(lambda w: credax.gdpo_advantages(jnp.ones((4, 2)), jnp.zeros(4, jnp.int32),
                                                 weights=w))(jnp.ones(3))


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


R4 = np.array([NAN, 1.0, 1.0, 0.0], np.float32)  # group 0 holds the NaN, group 1 is clean
IDS4 = np.array([0, 0, 1, 1])
CLEAN4 = np.array([0.5, 1.0, 1.0, 0.0], np.float32)
GROUP0 = np.array([True, True, False, False])
R4_OK = np.array([1.0, 0.0, 0.5, 0.5], np.float32)  # no bad value


NORMALIZE_OPTIONS = {
    "default": {},
    "verl": presets.VERL.asdict(),
    "trl": presets.TRL.asdict(),
    "dr_grpo": presets.TRL_NONE.asdict(),
    "eps_sqrt": dict(eps_mode="sqrt"),
    "loo": dict(leave_one_out=True),
    "uncentred": dict(center=False),
    "center_single": dict(singleton="center"),
}


for _label, _options in NORMALIZE_OPTIONS.items():
    for _bad in (NAN, INF, -INF):

        def _p(options=_options, bad=_bad):
            # The NaN / inf group's statistics include it: both its rows are NaN; the clean group
            # [1, 0] is exactly what it is without the bad value (the bug: ±5000 there).
            r = R4.copy()
            r[0] = bad
            with deprecated(options):
                norm = Normalization(**options)
                out = credax.grpo_advantages(r, IDS4, normalization=norm)
                clean = credax.grpo_advantages(CLEAN4, IDS4, normalization=norm)
            nan_exactly(out, GROUP0)
            same_where(out, clean, ~GROUP0)

        probe("nonfinite", f"grpo_{_label}_{_bad}")(_p)


@probe("nonfinite", "grpo_batch_scale_poisons_batch")
def _():
    # scale="batch": the batch std includes the NaN, so every valid row's statistic includes it.
    nan_exactly(credax.grpo_advantages(R4, IDS4, normalization=presets.TRL_BATCH), [True] * 4)


@probe("nonfinite", "masked_nan_is_absent")
def _():
    out = credax.grpo_advantages(R4, IDS4, np.array([False, True, True, True]),
                                 normalization=Normalization(eps=0.0))
    # group 0 is the singleton [1] -> 0; group 1 = [1, 0] -> ±0.7071
    np.testing.assert_allclose(out, [0.0, 0.0, 0.70710677, -0.70710677], rtol=1e-6)


@probe("nonfinite", "rloo")
def _():
    nan_exactly(credax.rloo_advantages(R4, IDS4), GROUP0)


@probe("nonfinite", "gdpo_component")
def _():
    r = np.array([[1.0, NAN], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], np.float32)
    out = credax.gdpo_advantages(r, IDS4, weights=np.ones(2, np.float32))
    nan_exactly(out, GROUP0)


@probe("nonfinite", "degenerate_groups_nan_is_not_healthy")
def _():
    out = credax.degenerate_groups(np.array([NAN, 1.0, 1.0, 0.0, INF, 2.0], np.float32),
                                   np.array([0, 0, 1, 1, 2, 2]))
    assert out.tolist() == [True, True, False, False, True, True]


@probe("nonfinite", "gradients_of_clean_groups")
def _():
    w = jnp.array([0.0, 0.0, 2.0, -1.0, 0.5, 3.0])
    ids = np.array([0, 0, 1, 1, 1, 2])
    clean = jnp.array([0.5, 1.0, 0.0, 1.0, 4.0, 1.0])
    bad = clean.at[0].set(NAN)
    g_bad = jax.grad(lambda r: jnp.sum(w[2:] * credax.grpo_advantages(r, ids)[2:]))(bad)
    g_clean = jax.grad(lambda r: jnp.sum(w[2:] * credax.grpo_advantages(r, ids)[2:]))(clean)
    assert np.isfinite(np.asarray(g_bad)).all()
    np.testing.assert_array_equal(g_bad, g_clean)


F32MAX = float(np.finfo(np.float32).max)


@probe("f32", "huge_values")
def _():
    # [a, -a, 0]: mean 0, unbiased std a, so the advantages are (1, -1, 0) for any a: no overflow
    # of the sum of squares (the issue: zeros for a = 1e30).
    for a in (1e19, 1e30, 1e38, F32MAX):
        out = credax.grpo_advantages(np.array([a, -a, 0.0], np.float32), np.zeros(3, np.int32))
        np.testing.assert_allclose(out, [1.0, -1.0, 0.0], atol=2e-7)


@probe("f32", "huge_batch_scale")
def _():
    # TRL batch scaling with a batch std beyond float32 in one group and small values in another.
    r = np.array([3e38, -3e38, 1.0, 0.0], np.float32)
    out = credax.grpo_advantages(r, IDS4, normalization=presets.TRL_BATCH)
    assert np.isfinite(np.asarray(out)).all()
    # batch σ (ddof=1) of [3e38, -3e38, 1, 0] = 3e38·√(2/3); group 0: ±3e38 / σ = ±√1.5
    np.testing.assert_allclose(out[:2], [np.sqrt(1.5), -np.sqrt(1.5)], rtol=1e-5)
    np.testing.assert_allclose(out[2:], [0.0, 0.0], atol=1e-30)


@probe("f32", "float64_range")
def _():
    with jax.enable_x64(True):
        out = credax.grpo_advantages(np.array([1e300, -1e300, 0.0]), np.zeros(3, np.int64))
        np.testing.assert_allclose(out, [1.0, -1.0, 0.0], atol=1e-12)


# grpo_advantages(R4_OK, IDS4) under VERL: group [1, 0] has μ = .5, σ = .7071 (ddof 1):
# ±.5 / (.7071 + 1e-6) = ±.7071; group [.5, .5] is constant: exactly 0.
GRPO4 = np.array([0.70710576, -0.70710576, 0.0, 0.0], np.float32)


BIG = np.array([1e39, -1e39, 0.0, 0.5])


@probe("f32", "float64_beyond_float32_names_the_argument")
def _():
    raises(ValueError, r"`rewards` holds 1e\+39 at index 0.*float32", credax.grpo_advantages, BIG,
           IDS4)
    raises(ValueError, r"`x` holds -1e\+39 at index 1", credax.group_normalize,
           np.array([0.5, -1e39, 0.0, 0.5]), IDS4)


@probe("f32", "list_beyond_float32")
def _():
    raises(ValueError, r"`rewards` holds 1e\+39", credax.grpo_advantages, [1e39, 0.0, 1.0, 1.0],
           IDS4)


@probe("f32", "masked_beyond_float32_is_refused_too")
def _():
    # The host check cannot know which mask goes with which array: 1e39 is refused at a masked
    # entry too (documented); NaN / inf padding is not narrowed and passes.
    m = np.array([True, True, False, True])
    raises(ValueError, r"`rewards` holds 1e\+39 at index 2", credax.grpo_advantages,
           np.array([1.0, 0.0, 1e39, 0.5]), IDS4, m)
    out = credax.grpo_advantages(np.array([1.0, 0.0, INF, 0.5]), IDS4, m)
    np.testing.assert_allclose(out, [0.70710576, -0.70710576, 0.0, 0.0], rtol=1e-6)


@probe("f32", "float32_max_itself_is_fine")
def _():
    # ±float32 max is representable: the group [max, -max] is ±1/√2·√2 = ±0.7071 (set units).
    x = np.array([F32MAX, -F32MAX, 0.5, 0.5])
    np.testing.assert_allclose(credax.grpo_advantages(x, IDS4), GRPO4, rtol=1e-5)


@probe("f32", "nan_in_float64_follows_the_rule")
def _():
    # NaN / inf keep the documented rule (NaN at the outputs whose formula includes them).
    out = np.asarray(credax.grpo_advantages(np.array([NAN, 1.0, 0.5, 0.5]), IDS4))
    assert np.isnan(out[:2]).all() and (out[2:] == 0).all()


@probe("f32", "x64_on_keeps_float64")
def _():
    # With x64 on there is no float32 cast: 1e39 is an ordinary float64 (±0.7071 for [1e39, -1e39]).
    with jax.enable_x64(True):
        out = credax.grpo_advantages(BIG, IDS4)
    np.testing.assert_allclose(out[:2], [0.70710678, -0.70710678], rtol=1e-6)


@probe("ids", "list_group_ids_still_work")
def _():
    np.testing.assert_allclose(credax.grpo_advantages(R4_OK, [0, 0, 1, 1]), GRPO4, rtol=1e-6)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

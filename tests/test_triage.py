"""TRIAGE: role credit, triage/scalar-process advantages, role fitting, judge windows, labels.

Ground truth: the NumPy loops of ``tests/reference/triage.py`` (randomized comparison in float64),
hand-worked golden cases, identities (λ = 0 is GRPO broadcast; unlabeled turns get plain A_i; the
fits recover planted constants), and properties (masked turns never change, padding invariance,
jit/vmap/grad; compile once is tests/test_dogfood.py's).

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

import math
import pathlib
import runpy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import credax
from credax import Normalization
from tests.probes import NAN, Probes, nan_exactly, raises
from tests.reference import triage as ref

C = np.array([1.0, 0.5, -0.1, -0.5])
SHAPES = [(4, 3), (6, 5)]
VALUES = [0.0, 1.0, 0.35, 1 / 3, 0.95, -2.5, 0.7]
# 4 and -2 are out of range: every compiled function treats them as unlabeled.
ROLE_CODES = [-1, 0, 1, 2, 3, 4, -2]
LAMS = [0.0, 0.2, 0.4, 1 / 3, -0.35]


@st.composite
def turn_batches(draw, prefix=True):
    batch, num_turns = draw(st.sampled_from(SHAPES))
    if prefix:
        lengths = np.array(draw(st.lists(st.integers(0, num_turns), min_size=batch,
                                         max_size=batch)))
        mask = np.arange(num_turns)[None, :] < lengths[:, None]
    else:
        flat = draw(st.lists(st.booleans(), min_size=batch * num_turns,
                             max_size=batch * num_turns))
        mask = np.array(flat).reshape(batch, num_turns)
    roles = np.array(draw(st.lists(st.sampled_from(ROLE_CODES), min_size=batch * num_turns,
                                   max_size=batch * num_turns)), np.int32).reshape(batch, num_turns)
    a = np.array(draw(st.lists(st.sampled_from(VALUES), min_size=batch, max_size=batch)))
    a[~mask.any(axis=1)] = np.nan  # rows without a valid turn may hold anything
    values = np.array(draw(st.lists(st.sampled_from(VALUES), min_size=batch * num_turns,
                                    max_size=batch * num_turns))).reshape(batch, num_turns)
    values[~mask] = np.nan  # so do padded turns
    return a, roles, mask, values


# ------------------------------------------------------------------------------------------
# Golden cases.
# ------------------------------------------------------------------------------------------


def test_role_constants_and_enum():
    assert credax.TRIAGE_ROLE_CONSTANTS == (1.0, 0.5, -0.1, -0.5)
    assert [int(r) for r in credax.Role] == [0, 1, 2, 3]
    assert [r.name for r in credax.Role] == ["DECISIVE", "EXPLORATION", "NO_PROGRESS", "REGRESSION"]


def test_role_credit_golden():
    roles = jnp.array([[0, 1, 2, 3], [3, -1, 4, 0]], jnp.int32)
    mask = jnp.array([[True, True, True, True], [True, True, True, False]])
    out = credax.role_credit(roles, mask)
    # c[role] at labelled valid turns; -1 (unlabeled), 4 (out of range) and padding give 0.
    expected = np.array([[1.0, 0.5, -0.1, -0.5], [-0.5, 0.0, 0.0, 0.0]], np.float32)
    np.testing.assert_array_equal(np.asarray(out), expected)
    custom = credax.role_credit(roles, mask, constants=jnp.array([2.0, 0.0, 0.0, -1.0]))
    np.testing.assert_array_equal(np.asarray(custom)[0], [2.0, 0.0, 0.0, -1.0])


def test_triage_golden_two_successes_two_failures():
    # Rewards (1, 1, 0, 0) in one group: μ = 0.5, unbiased σ = sqrt(4 · 0.25 / 3) = sqrt(1/3),
    # so with eps = 0: A = ±0.5 / sqrt(1/3) = ±0.8660254. λ = 0.2:
    #   success D: 0.8660 + 0.2 = 1.0660;  success R: 0.8660 - 0.1 = 0.7660
    #   failure E: -0.8660 + 0.1 = -0.7660; failure N: -0.8660 - 0.02 = -0.8860
    #   unlabeled: A itself; padded: 0.
    a = credax.grpo_advantages(jnp.array([1.0, 1.0, 0.0, 0.0]), jnp.zeros(4, jnp.int32),
                               normalization=credax.Normalization(eps=0.0))
    roles = jnp.array([[0, 3], [-1, 0], [1, 2], [1, 3]], jnp.int32)
    mask = jnp.array([[True, True], [True, False], [True, True], [False, False]])
    out = np.asarray(credax.triage_advantages(a, roles, mask, lam=0.2))
    s = 0.5 / math.sqrt(1 / 3)
    expected = [[s + 0.2, s - 0.1], [s, 0.0], [-s + 0.1, -s - 0.02], [0.0, 0.0]]
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)


def test_triage_whiten_golden():
    # Valid values A + λc = (1, 3) and a padded turn: population mean 2, std 1, so the z-scores
    # are (-1, 1) / (1 + 1e-8); the padded turn stays 0. Without whitening they stay (1, 3).
    a = jnp.array([1.0, 3.0])
    roles = jnp.array([[-1, 0], [-1, 2]], jnp.int32)
    mask = jnp.array([[True, False], [True, False]])
    out = np.asarray(credax.triage_advantages(a, roles, mask, whiten=True))
    np.testing.assert_allclose(out, [[-1.0, 0.0], [1.0, 0.0]], rtol=1e-6)
    plain = np.asarray(credax.triage_advantages(a, roles, mask))
    np.testing.assert_array_equal(plain, [[1.0, 0.0], [3.0, 0.0]])
    # A batch whose valid values are all equal (0.35, non-dyadic) whitens to exactly 0.
    same = credax.triage_advantages(jnp.array([0.35, 0.35]), roles, mask, whiten=True)
    np.testing.assert_array_equal(np.asarray(same), 0.0)
    # The whitening's options are `normalization=` (default population std, eps 1e-8): eps 1
    # gives (-1, 1) / (1 + 1); the unbiased std (ddof=1) is sqrt(2) -> ∓1 / sqrt(2).
    wide = credax.triage_advantages(a, roles, mask, whiten=True,
                                    normalization=credax.Normalization(ddof=0, eps=1.0))
    np.testing.assert_allclose(np.asarray(wide), [[-0.5, 0.0], [0.5, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(wide),
                               ref.triage_advantages(a, roles, mask, whiten=True, whiten_eps=1.0),
                               rtol=1e-6)
    unbiased = credax.triage_advantages(a, roles, mask, whiten=True,
                                        normalization=credax.Normalization(eps=0.0))
    h = 1 / np.sqrt(2)
    np.testing.assert_allclose(np.asarray(unbiased), [[-h, 0.0], [h, 0.0]], rtol=1e-6)
    np.testing.assert_array_equal(
        out, credax.triage_advantages(a, roles, mask, whiten=True,
                                      normalization=credax.Normalization(ddof=0, eps=1e-8)))
    # ... read only with whiten=True
    np.testing.assert_array_equal(
        plain, credax.triage_advantages(a, roles, mask,
                                        normalization=credax.Normalization(ddof=0, eps=1.0)))


def test_scalar_process_golden():
    # A = (0.5, -1/3); λ = 0.25; p = (1, -1, NaN-pad) and (0.35, pad, pad):
    #   0.5 + 0.25 = 0.75, 0.5 - 0.25 = 0.25; -1/3 + 0.0875 = -0.245833...
    a = jnp.array([0.5, -1 / 3])
    p = jnp.array([[1.0, -1.0, jnp.nan], [0.35, jnp.inf, jnp.nan]])
    mask = jnp.array([[True, True, False], [True, False, False]])
    out = np.asarray(credax.scalar_process_advantages(a, p, mask, lam=0.25))
    np.testing.assert_allclose(out, [[0.75, 0.25, 0.0], [-1 / 3 + 0.0875, 0.0, 0.0]], rtol=1e-6)


def test_fit_role_constants_golden():
    # D: (0.3, 0.1) -> 0.2; R: (-0.2) -> -0.2; E, N: none -> 0. The unlabeled 9.0, the padded
    # NaN and the out-of-range code 7 are ignored.
    d = jnp.array([[0.3, 0.1, -0.2, 9.0], [5.0, jnp.nan, 0.0, 0.0]])
    roles = jnp.array([[0, 0, 3, -1], [7, 1, 0, 0]], jnp.int32)
    mask = jnp.array([[True, True, True, True], [True, False, False, False]])
    fit = credax.fit_role_constants(d, roles, mask)
    np.testing.assert_allclose(np.asarray(fit.constants), [0.2, 0.0, 0.0, -0.2], rtol=1e-6)
    assert fit.counts.dtype == jnp.int32
    assert fit.counts.tolist() == [2, 0, 0, 1]


def test_optimal_mixing_weight_golden():
    # δ = (0.35 on D, -0.2 on R, 0.1 on E, 4.0 unlabeled): Σcδ = 0.35 + 0.1 + 0.05 = 0.5,
    # Σc² = 1 + 0.25 + 0.25 = 1.5, so λ* = 1/3.
    d = jnp.array([[0.35, -0.2, 0.1, 4.0]])
    roles = jnp.array([[0, 3, 1, -1]], jnp.int32)
    lam = credax.optimal_mixing_weight(d, roles, jnp.ones((1, 4), bool))
    assert lam.shape == ()
    np.testing.assert_allclose(float(lam), 1 / 3, rtol=1e-6)
    # No labelled turn with a non-zero constant: 0, not NaN.
    none = credax.optimal_mixing_weight(d, jnp.full((1, 4), -1, jnp.int32), jnp.ones((1, 4), bool))
    assert float(none) == 0.0
    # Residuals anti-aligned with the roles: negative λ* (no positive λ helps).
    anti = credax.optimal_mixing_weight(-d, roles, jnp.ones((1, 4), bool))
    assert float(anti) < 0


def test_judge_windows_golden_prefix_and_gaps():
    mask = np.array([[True, True, True, False], [True, False, True, True]])
    w = credax.judge_windows(mask, before=1, after=1)
    assert w.index.dtype == jnp.int32 and w.valid.dtype == jnp.bool_
    assert w.index.shape == (2, 4, 3)
    # Row 0: prefix of 3 valid turns. Row 1: turn 1 is padding and is skipped.
    assert w.index.tolist() == [
        [[-1, 0, 1], [0, 1, 2], [1, 2, -1], [-1, -1, -1]],
        [[-1, 0, 2], [-1, -1, -1], [0, 2, 3], [2, 3, -1]],
    ]
    np.testing.assert_array_equal(np.asarray(w.valid), np.asarray(w.index) >= 0)
    # The paper's 5 + 5 default: a 3-turn row sees all of itself from every turn.
    w5 = credax.judge_windows(np.ones((1, 3), bool))
    assert w5.index.shape == (1, 3, 11)
    assert [[j for j in row if j >= 0] for row in w5.index[0].tolist()] == [[0, 1, 2]] * 3
    assert w5.index[0, 1, 5] == 1  # slot `before` is the turn itself


def test_parse_roles_golden():
    labels = [["D", " exploration", "No-Progress infrastructure"], ["regression", None], []]
    out = credax.parse_roles(labels)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [[0, 1, 2], [3, -1, -1], [-1, -1, -1]])
    np.testing.assert_array_equal(credax.parse_roles(labels, num_turns=5)[1], [3, -1, -1, -1, -1])


# ------------------------------------------------------------------------------------------
# Randomized comparison with the NumPy loops (float64, so near-ties cannot differ in rounding).
# ------------------------------------------------------------------------------------------


@given(turn_batches(), st.sampled_from(LAMS), st.booleans())
def test_triage_matches_reference(batch, lam, whiten):
    a, roles, mask, _ = batch
    with jax.enable_x64(True):
        out = credax.triage_advantages(jnp.asarray(a), roles, mask, lam=lam, whiten=whiten)
        assert out.dtype == jnp.float64
        expected = ref.triage_advantages(a, roles, mask, lam=lam, whiten=whiten)
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-9, atol=1e-9)
    # float32 agrees with the float64 reference to float32 precision (no whitening: whitening a
    # batch of near-equal values legitimately depends on the rounding).
    out32 = credax.triage_advantages(jnp.asarray(a, jnp.float32), roles, mask, lam=lam)
    assert out32.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out32), ref.triage_advantages(a, roles, mask, lam=lam),
                               rtol=1e-5, atol=1e-5)


@given(turn_batches())
def test_role_credit_and_scalar_process_match_reference(batch):
    a, roles, mask, values = batch
    with jax.enable_x64(True):
        credit = credax.role_credit(roles, mask, constants=jnp.asarray(C))
        np.testing.assert_array_equal(np.asarray(credit), ref.role_credit(roles, mask))
        out = credax.scalar_process_advantages(jnp.asarray(a), jnp.asarray(values), mask, lam=0.4)
        expected = np.where(mask, np.nan_to_num(a)[:, None] + 0.4 * np.nan_to_num(values), 0.0)
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-12, atol=1e-12)


@given(turn_batches())
def test_fits_match_reference(batch):
    _, roles, mask, values = batch
    with jax.enable_x64(True):
        fit = credax.fit_role_constants(jnp.asarray(values), roles, mask)
        means, counts = ref.fit_role_constants(values, roles, mask)
        np.testing.assert_allclose(np.asarray(fit.constants), means, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(np.asarray(fit.counts), counts)
        lam = credax.optimal_mixing_weight(jnp.asarray(values), roles, mask)
        np.testing.assert_allclose(float(lam), ref.optimal_mixing_weight(values, roles, mask),
                                   rtol=1e-12, atol=1e-12)


@given(turn_batches(prefix=False), st.sampled_from([(0, 0), (1, 2), (5, 5), (3, 0)]))
def test_judge_windows_match_reference(batch, sides):
    _, _, mask, _ = batch
    before, after = sides
    w = credax.judge_windows(mask, before=before, after=after)
    index, valid = ref.judge_windows(mask, before=before, after=after)
    np.testing.assert_array_equal(np.asarray(w.index), index)
    np.testing.assert_array_equal(np.asarray(w.valid), valid)


# ------------------------------------------------------------------------------------------
# Identities.
# ------------------------------------------------------------------------------------------


# Identities with other estimators (λ = 0, ω = 0, ...) live in tests/test_identities.py.


@given(turn_batches(), st.sampled_from(LAMS))
def test_unlabeled_turn_gets_plain_outcome_advantage(batch, lam):
    a, roles, mask, _ = batch
    out = np.asarray(credax.triage_advantages(jnp.asarray(a, jnp.float32), roles, mask, lam=lam))
    unlabeled = mask & ((roles < 0) | (roles > 3))
    a32 = np.broadcast_to(np.asarray(a, np.float32)[:, None], mask.shape)
    np.testing.assert_array_equal(out[unlabeled], a32[unlabeled])


@given(turn_batches(), st.sampled_from([C, np.array([0.35, 1 / 3, -0.95, 0.0])]))
def test_fit_recovers_planted_constants_exactly(batch, constants):
    _, roles, mask, values = batch
    labelled = mask & (roles >= 0) & (roles < 4)
    c32 = constants.astype(np.float32)
    # Residuals exactly c[role] on labelled turns; anything (NaN, large values) elsewhere.
    d = np.where(labelled, c32[np.clip(roles, 0, 3)], np.where(mask, 7.5, np.nan))
    fit = credax.fit_role_constants(jnp.asarray(d, jnp.float32), roles, mask)
    present = np.array([(labelled & (roles == r)).any() for r in range(4)])
    np.testing.assert_array_equal(np.asarray(fit.constants), np.where(present, c32, 0.0))
    np.testing.assert_array_equal(np.asarray(fit.counts),
                                  [(labelled & (roles == r)).sum() for r in range(4)])


@given(turn_batches(), st.sampled_from([0.2, 0.4, 1 / 3, -0.35, 2.5]))
def test_mixing_weight_recovers_planted_lambda(batch, lam0):
    _, roles, mask, _ = batch
    labelled = mask & (roles >= 0) & (roles < 4)
    d = np.where(labelled, lam0 * C[np.clip(roles, 0, 3)], np.where(mask, 3.0, np.nan))
    lam = float(credax.optimal_mixing_weight(jnp.asarray(d, jnp.float32), roles, mask))
    if labelled.any():
        np.testing.assert_allclose(lam, lam0, rtol=2e-6)
    else:
        assert lam == 0.0


def test_whitened_batch_has_zero_mean_unit_population_std():
    rng = np.random.default_rng(0)
    a = rng.normal(size=8)
    roles = rng.integers(-1, 4, size=(8, 6)).astype(np.int32)
    mask = np.arange(6)[None, :] < rng.integers(1, 7, size=8)[:, None]
    out = np.asarray(credax.triage_advantages(jnp.asarray(a, jnp.float32), roles, mask,
                                              whiten=True))
    np.testing.assert_allclose(out[mask].mean(), 0.0, atol=1e-6)
    np.testing.assert_allclose(out[mask].std(ddof=0), 1.0, rtol=1e-5)
    assert np.all(out[~mask] == 0)


# ------------------------------------------------------------------------------------------
# Properties: masking and padding.
# ------------------------------------------------------------------------------------------


@given(turn_batches(), st.sampled_from(LAMS), st.booleans())
def test_masked_turns_never_change(batch, lam, whiten):
    a, roles, mask, _ = batch
    rng = np.random.default_rng(1)
    out = np.asarray(credax.triage_advantages(jnp.asarray(a, jnp.float32), roles, mask, lam=lam,
                                              whiten=whiten))
    assert np.all(out[~mask] == 0)
    # Roles at padded turns, and λ / constants, never reach padded turns or other turns' values.
    other_roles = np.where(mask, roles, rng.integers(-5, 9, size=roles.shape)).astype(np.int32)
    out2 = credax.triage_advantages(jnp.asarray(a, jnp.float32), other_roles, mask, lam=lam,
                                    whiten=whiten)
    np.testing.assert_array_equal(np.asarray(out2), out)
    out3 = np.asarray(credax.triage_advantages(jnp.asarray(a, jnp.float32), roles, mask, lam=5.0,
                                               constants=jnp.array([9.0, -9.0, 3.0, 1.0]),
                                               whiten=whiten))
    assert np.all(out3[~mask] == 0)


def test_padding_invariance_bit_for_bit():
    rng = np.random.default_rng(2)
    a = rng.normal(size=5).astype(np.float32)
    roles = rng.integers(-1, 4, size=(5, 3)).astype(np.int32)
    mask = np.arange(3)[None, :] < np.array([3, 1, 2, 0, 3])[:, None]
    base = np.asarray(credax.triage_advantages(a, roles, mask, lam=0.4, whiten=True))
    # Append two padded turns and one padded row (NaN advantage, garbage roles).
    roles_p = np.pad(roles, ((0, 1), (0, 2)), constant_values=3)
    mask_p = np.pad(mask, ((0, 1), (0, 2)), constant_values=False)
    a_p = np.append(a, np.float32(np.nan))
    padded = np.asarray(credax.triage_advantages(a_p, roles_p, mask_p, lam=0.4, whiten=True))
    np.testing.assert_array_equal(padded[:5, :3], base)
    assert np.all(padded[5] == 0) and np.all(padded[:, 3:] == 0)


def test_out_of_range_codes_under_jit_are_unlabeled():
    a = jnp.array([0.5])
    mask = jnp.ones((1, 4), bool)
    out = credax.triage_advantages(a, jnp.array([[4, -2, 100, -1]], jnp.int32), mask)
    np.testing.assert_array_equal(np.asarray(out), 0.5)


# ------------------------------------------------------------------------------------------
# Host side: validate_roles and parse_roles.
# ------------------------------------------------------------------------------------------


def test_validate_roles_accepts_codes_and_ignores_padding():
    mask = np.array([[True, True, True, False], [True, False, False, False]])
    roles = np.array([[0, 3, -1, -100], [2, 99, 4, -7]], np.int64)
    assert credax.validate_roles(roles, mask) is None
    assert credax.validate_roles(credax.parse_roles([["D", "E"]]), np.ones((1, 2), bool)) is None


@pytest.mark.parametrize("bad", [4, -2, 100, np.iinfo(np.int32).max])
def test_validate_roles_rejects_out_of_range(bad):
    roles = np.array([[0, 1], [2, bad]], np.int64)
    with pytest.raises(ValueError, match=rf"roles\[1, 1\] = {bad}"):
        credax.validate_roles(roles, np.ones((2, 2), bool))


def test_validate_roles_rejects_bad_inputs():
    mask = np.ones((1, 2), bool)
    with pytest.raises(TypeError, match="`roles` must be an integer"):
        credax.validate_roles(np.array([[0.0, 1.0]]), mask)
    with pytest.raises(ValueError, match=r"`roles` must be \[B, K\] \(ndim 2\)"):
        credax.validate_roles(np.array([0, 1]), mask)
    with pytest.raises(TypeError, match="`turn_mask` must be a boolean"):
        credax.validate_roles(np.array([[0, 1]]), np.ones((1, 2)))
    with pytest.raises(ValueError, match="same as `roles`"):
        credax.validate_roles(np.array([[0, 1]]), np.ones((1, 3), bool))
    with pytest.raises(ValueError, match="prefix-contiguous"):
        credax.validate_roles(np.array([[0, 1]]), np.array([[False, True]]))
    with pytest.raises(ValueError, match="at least one valid turn"):
        credax.validate_roles(np.array([[0, 1]]), np.array([[False, False]]))
    with pytest.raises(TypeError, match="traced"):
        jax.jit(lambda r: credax.validate_roles(r, mask))(jnp.array([[0, 1]]))


# Every spelling the brief and SPEC name, plus the Role names; case and whitespace variants are
# generated below.
SPELLINGS = {
    0: ["D", "decisive", "Decisive progress", "decisive_progress", "decisive-progress",
        "DECISIVE"],
    1: ["E", "exploration", "useful exploration", "Useful_Exploration", "EXPLORATION"],
    2: ["N", "no_progress", "no-progress", "No progress", "no-progress infrastructure",
        "no_progress_infrastructure", "NO_PROGRESS"],
    3: ["R", "regression", "Regression", "REGRESSION"],
}


def _variants(label):
    return {label, label.lower(), label.upper(), label.title(), f"  {label}\t", f"\n{label} "}


@pytest.mark.parametrize("code", sorted(SPELLINGS))
def test_parse_roles_round_trips_every_spelling(code):
    labels = [v for s in SPELLINGS[code] for v in sorted(_variants(s))]
    out = credax.parse_roles([labels])
    np.testing.assert_array_equal(out, np.full((1, len(labels)), code, np.int32))
    role = credax.Role(code)
    # Role members, their ints and names (any case) all map back to the same code.
    for label in (role, int(role), np.int64(code), role.name, role.name.lower(),
                  role.name.replace("_", " ").title()):
        assert credax.parse_roles([[label]])[0, 0] == code, label
    # Round trip codes -> names -> codes.
    names = [credax.Role(c).name for c in (0, 1, 2, 3)]
    np.testing.assert_array_equal(credax.parse_roles([names])[0], [0, 1, 2, 3])


@pytest.mark.parametrize(
    "label", ["maybe?", "", "D.", "0", "decisive!", "progress", "dd", 1.0, float("nan"), True,
              4, -2, b"D"]
)
def test_parse_roles_unknown_label(label):
    labels = [["D", "E"], ["N", None, label]]
    with pytest.raises(ValueError, match=r"at row 1, turn 2") as info:
        credax.parse_roles(labels)
    assert repr(label) in str(info.value)
    out = credax.parse_roles(labels, on_unknown="unlabeled")
    np.testing.assert_array_equal(out, [[0, 1, -1], [2, -1, -1]])


def test_parse_roles_shapes_and_errors():
    assert credax.parse_roles([]).shape == (0, 0)
    assert credax.parse_roles([[], []], num_turns=2).tolist() == [[-1, -1], [-1, -1]]
    np.testing.assert_array_equal(
        credax.parse_roles(np.array([["D", None], ["r", "e"]], dtype=object)), [[0, -1], [3, 1]]
    )
    for codes in (np.array([[0, 3], [-1, 2]]), jnp.array([[0, 3], [-1, 2]])):
        np.testing.assert_array_equal(credax.parse_roles(codes), [[0, 3], [-1, 2]])
    np.testing.assert_array_equal(credax.parse_roles((("E",), ["R", "D"])), [[1, -1], [3, 0]])
    with pytest.raises(ValueError, match=r"row 1 has 3 labels, more than num_turns=2"):
        credax.parse_roles([["D"], ["D", "E", "R"]], num_turns=2)
    with pytest.raises(TypeError, match="row 0"):
        credax.parse_roles(["DER"])
    with pytest.raises(TypeError, match="sequence of rows"):
        credax.parse_roles("D")
    with pytest.raises(ValueError, match="on_unknown"):
        credax.parse_roles([["D"]], on_unknown="ignore")
    with pytest.raises(TypeError, match="num_turns"):
        credax.parse_roles([["D"]], num_turns=2.0)


# ------------------------------------------------------------------------------------------
# Trace-time checks, dtypes, jit / vmap / grad.
# ------------------------------------------------------------------------------------------


def test_trace_time_checks():
    a, roles, mask = jnp.zeros(2), jnp.zeros((2, 3), jnp.int32), jnp.ones((2, 3), bool)
    with pytest.raises(TypeError, match="`roles` must be an integer"):
        credax.triage_advantages(a, roles.astype(jnp.float32), mask)
    with pytest.raises(TypeError, match="`turn_mask` must be a boolean"):
        credax.triage_advantages(a, roles, mask.astype(jnp.float32))
    with pytest.raises(ValueError, match="`outcome_advantages` must have shape"):
        credax.triage_advantages(jnp.zeros(3), roles, mask)
    with pytest.raises(ValueError, match="`constants` must have shape"):
        credax.triage_advantages(a, roles, mask, constants=(1.0, 0.5, -0.1))
    with pytest.raises(ValueError, match="`lam` must be a scalar"):
        credax.triage_advantages(a, roles, mask, lam=jnp.ones(2))
    with pytest.raises(TypeError, match="`whiten` must be a Python bool"):
        credax.triage_advantages(a, roles, mask, whiten=1)
    # whiten_eps is gone: its TypeError names it and the `normalization=` that replaces it
    with pytest.raises(TypeError, match=r"'whiten_eps'(.|\n)*normalization=credax\.Normalization"):
        credax.triage_advantages(a, roles, mask, whiten=True, whiten_eps=1e-8)
    with pytest.raises(TypeError, match=r"'eps'(.|\n)*normalization=credax\.Normalization"):
        credax.triage_advantages(a, roles, mask, whiten=True, eps=1e-8)
    with pytest.raises(TypeError, match="normalization"):
        credax.triage_advantages(a, roles, mask, whiten=True, normalization={"eps": 1e-8})
    with pytest.raises(ValueError, match="`roles` must have shape"):
        credax.fit_role_constants(jnp.zeros((2, 3)), jnp.zeros((2, 2), jnp.int32), mask)
    with pytest.raises(ValueError, match="`before` must be >= 0"):
        credax.judge_windows(mask, before=-1)
    with pytest.raises(TypeError, match="`turn_mask` must be a boolean"):
        credax.judge_windows(jnp.ones((2, 3)))


def test_dtypes():
    roles, mask = jnp.array([[0, 3]], jnp.int32), jnp.ones((1, 2), bool)
    out = credax.triage_advantages(jnp.array([0.5], jnp.bfloat16), roles, mask)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), [[0.7, 0.4]], rtol=1e-2)
    assert credax.triage_advantages(jnp.array([1]), roles, mask).dtype == jnp.float32
    with jax.enable_x64(True):
        out64 = credax.triage_advantages(jnp.array([0.5], jnp.float64), roles, mask)
        assert out64.dtype == jnp.float64
        assert credax.fit_role_constants(jnp.ones((1, 2), jnp.float64), roles, mask).constants.dtype \
            == jnp.float64


def test_jit_and_traced_hyperparameters():
    rng = np.random.default_rng(3)
    a = jnp.asarray(rng.normal(size=4), jnp.float32)
    roles = jnp.asarray(rng.integers(-1, 4, size=(4, 3)), jnp.int32)
    mask = jnp.asarray(np.arange(3)[None, :] < np.array([3, 2, 1, 0])[:, None])

    @jax.jit
    def f(a, lam, c):
        return credax.triage_advantages(a, roles, mask, lam=lam, constants=c, whiten=True)

    eager = credax.triage_advantages(a, roles, mask, lam=0.3, constants=jnp.asarray(C, jnp.float32),
                                     whiten=True)
    np.testing.assert_allclose(np.asarray(f(a, 0.3, jnp.asarray(C, jnp.float32))),
                               np.asarray(eager), rtol=1e-6, atol=1e-7)


def test_vmap_equals_loop():
    rng = np.random.default_rng(4)
    a = jnp.asarray(rng.normal(size=(3, 4)), jnp.float32)
    roles = jnp.asarray(rng.integers(-1, 4, size=(3, 4, 5)), jnp.int32)
    mask = jnp.asarray(np.arange(5)[None, None, :] < rng.integers(0, 6, size=(3, 4, 1)))
    for whiten in (False, True):
        fn = lambda a, r, m, w=whiten: credax.triage_advantages(a, r, m, lam=0.4, whiten=w)
        batched = jax.vmap(fn)(a, roles, mask)
        for i in range(3):
            np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(fn(a[i], roles[i],
                                                                             mask[i])),
                                       rtol=1e-6, atol=1e-7)
    windows = jax.vmap(lambda m: credax.judge_windows(m, before=2, after=1))(mask)
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(windows.index[i]),
                                      ref.judge_windows(np.asarray(mask[i]), 2, 1)[0])
    fits = jax.vmap(credax.fit_role_constants)(a[:, :, None] * jnp.ones((1, 1, 5)), roles, mask)
    for i in range(3):
        single = credax.fit_role_constants(a[i][:, None] * jnp.ones((1, 5)), roles[i], mask[i])
        np.testing.assert_allclose(np.asarray(fits.constants[i]), np.asarray(single.constants),
                                   rtol=1e-6)


def test_grad_matches_hand_derivatives():
    # loss = Σ_valid A_i + λ c[ρ]:  d/dA_i = valid turns of row i; d/dλ = Σ c over labelled valid
    # turns; d/dc_r = λ · #(valid turns with role r). NaN advantages of empty rows get gradient 0.
    a = jnp.array([0.5, -0.25, jnp.nan])
    roles = jnp.array([[0, 3, -1], [1, 1, 0], [2, 2, 2]], jnp.int32)
    mask = jnp.array([[True, True, True], [True, True, False], [False, False, False]])

    def loss(a, lam, c):
        return jnp.sum(credax.triage_advantages(a, roles, mask, lam=lam, constants=c))

    ga, glam, gc = jax.grad(loss, argnums=(0, 1, 2))(a, 0.2, jnp.asarray(C, jnp.float32))
    np.testing.assert_array_equal(np.asarray(ga), [3.0, 2.0, 0.0])
    np.testing.assert_allclose(float(glam), 1.0 - 0.5 + 0.5 + 0.5, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gc), [0.2 * 1, 0.2 * 2, 0.0, 0.2 * 1], rtol=1e-6)
    # Whitening a zero-spread batch and fitting with NaN padding keep gradients finite.
    g_white = jax.grad(lambda a: jnp.sum(credax.triage_advantages(
        a, roles, mask, lam=0.0, whiten=True) ** 2))(jnp.array([0.35, 0.35, jnp.nan]))
    assert np.all(np.isfinite(np.asarray(g_white)))
    d = jnp.array([[0.1, 0.2, 0.3], [0.4, 0.5, jnp.nan], [jnp.nan] * 3])
    g_fit = jax.grad(lambda d: jnp.sum(credax.fit_role_constants(d, roles, mask).constants))(d)
    # Labelled valid turns: D = {(0,0)}, R = {(0,1)}, E = {(1,0), (1,1)}; each entry's gradient
    # is 1 / (count of its role); unlabeled, padded and NaN entries get 0.
    np.testing.assert_allclose(np.asarray(g_fit), [[1.0, 1.0, 0.0], [0.5, 0.5, 0.0], [0, 0, 0]],
                               rtol=1e-6)
    g_mix = jax.grad(lambda d: credax.optimal_mixing_weight(d, roles, mask))(d)
    assert np.all(np.isfinite(np.asarray(g_mix)))


# ------------------------------------------------------------------------------------------
# The README example.
# ------------------------------------------------------------------------------------------


def test_conflict_example(capsys):
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "triage_conflicts.py"
    ns = runpy.run_path(str(path))
    rows = ns["conflict_table"]()
    # Rewards (1, 1, 0, 0): A = ±0.5 / (sqrt(1/3) + 1e-6) (GRPO defaults); λ = 0.2.
    s = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    by_cell = {}
    for _, r, _, _, g, t, cell in rows:
        np.testing.assert_allclose(g, s if r > 0 else -s, rtol=1e-6)
        by_cell.setdefault(cell, []).append(t - g)
    np.testing.assert_allclose(by_cell["exploration in failure"], [0.1, 0.1], rtol=1e-5)
    np.testing.assert_allclose(by_cell["regression in success"], [-0.1], rtol=1e-5)
    np.testing.assert_allclose(by_cell["decisive in success"], [0.2, 0.2, 0.2], rtol=1e-5)
    np.testing.assert_allclose(by_cell["no-progress in failure"], [-0.02], rtol=1e-4)
    np.testing.assert_allclose(by_cell["regression in failure"], [-0.1, -0.1], rtol=1e-5)
    assert len(rows) == 12  # every valid turn, including the unlabeled one
    ns["main"]()
    printed = capsys.readouterr().out
    assert "exploration in failure" in printed and "+1.066" in printed
    # The TRIAGE guide shows this table verbatim: it must be what the script prints today.
    guide = pathlib.Path(__file__).resolve().parents[1] / "docs" / "guides" / "triage.md"
    assert printed in guide.read_text(), "docs/guides/triage.md's GRPO vs TRIAGE table is stale"


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("nonfinite", "triage")
def _():
    roles = np.zeros((2, 2), np.int32)
    mask = np.array([[True, False], [True, True]])
    a = np.array([NAN, 1.0], np.float32)
    nan_exactly(credax.triage_advantages(a, roles, mask), [[True, False], [False, False]])
    # whitening takes one statistic over every valid turn: all valid turns are NaN
    nan_exactly(credax.triage_advantages(a, roles, mask, whiten=True), [[True, False], [True, True]])
    c = np.array([NAN, 0.5, -0.1, -0.5], np.float32)
    nan_exactly(credax.role_credit(np.array([[0, 1, -1]]), np.ones((1, 3), bool), constants=c),
                [[True, False, False]])
    p = np.array([[NAN, 1.0], [0.0, NAN]], np.float32)
    nan_exactly(credax.scalar_process_advantages(np.ones(2, np.float32), p, mask, lam=0.5),
                [[True, False], [False, True]])


@probe("nonfinite", "role_fitting")
def _():
    d = np.array([[NAN, 1.0, 2.0, 7.0]], np.float32)
    roles = np.array([[0, 1, 1, -1]])
    fit = credax.fit_role_constants(d, roles, np.ones((1, 4), bool))
    nan_exactly(fit.constants, [True, False, False, False])
    assert fit.constants[1] == 1.5 and fit.counts.tolist() == [1, 2, 0, 0]
    assert np.isnan(credax.optimal_mixing_weight(d, roles, np.ones((1, 4), bool)))


@probe("narrow", "roles_int8")
def _():
    c = credax.role_credit(np.array([[0, 3, -1]], np.int8), np.ones((1, 3), bool))
    np.testing.assert_allclose(c, [[1.0, -0.5, 0.0]])


M22 = np.ones((2, 2), bool)
R2 = np.array([1.0, 0.0], np.float32)
KINDS = {"python": float, "numpy": np.float32, "jax": jnp.asarray}


def unchecked_normalization(eps, **fields):
    """A Normalization holding ``eps`` that no constructor checked: built by ``tree_unflatten``, as
    ``jax.tree.map`` or a transformation's output builds one. The estimators check such a value."""
    return jax.tree_util.tree_map(lambda _: eps, Normalization(**fields))


def _triage_whiten(**kw):
    return credax.triage_advantages(R2, np.zeros((2, 2), np.int32), M22, whiten=True, **kw)


for _kind in ("numpy", "jax"):

    def _p(make=KINDS[_kind]):
        # TRIAGE's whitening eps is the eps of its `normalization=` (whiten_eps was removed): a bad
        # one is refused when built, or by triage_advantages when it skipped the constructor.
        raises(ValueError, "`eps`", Normalization, ddof=0, eps=make(-1.0))
        raises(ValueError, "`eps`", _triage_whiten, normalization=unchecked_normalization(make(-1.0), ddof=0))
        raises(TypeError, r"unexpected keyword argument 'whiten_eps'.*normalization=credax\.Normalization",
               _triage_whiten, whiten_eps=make(-1.0))

    probe("hyper", f"whiten_eps_{_kind}")(_p)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

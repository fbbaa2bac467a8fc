"""TCPO (SPEC §4): golden cases, the NumPy loop reference, identities and properties.

Randomized comparisons run in float64 (``jax.enable_x64``): the z-score of step 4 amplifies a
float32 rounding difference between two credits that are equal in exact arithmetic by up to
``1/eps``, which is a property of normalisation, not a bug; in float64 both sides agree to 1e-9.
Float32 agreement is checked on the golden cases.

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

from __future__ import annotations

import math
import pathlib
import re
import runpy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import credax
from credax.testing import turn_batches
from tests.probes import IDS4, M43, ROWS01, S4, S4_CLEAN, Probes, nan_exactly, raises, same_where
from tests.reference import tcpo as ref

NAN, INF = float("nan"), float("inf")
# Ties matter (Δ == 0, preservation, constant sets): draw from a small set with non-dyadic values.
VALUES = (0.0, 0.35, 1 / 3, 0.5, 0.95, 1.0)
IDS = (-7, 0, 3, 10**6)
SIZES = ((1, 1), (3, 4), (6, 4))
PADS = (NAN, INF, -INF, 7.0)


def f32(x):
    return np.asarray(x, np.float32)


def rows(*lists, pad=NAN):
    """Ragged rows → (scores [B, K] padded with `pad`, prefix mask)."""
    k = max(len(r) for r in lists)
    scores = np.full((len(lists), k), pad, np.float32)
    mask = np.zeros((len(lists), k), bool)
    for b, r in enumerate(lists):
        scores[b, : len(r)] = r
        mask[b, : len(r)] = True
    return scores, mask


def batches(sizes=SIZES, allow_empty_rows=True):
    """(scores, prefix mask, ids) from ``credax.testing.turn_batches``: ragged rows, singleton and
    constant groups, ties and non-dyadic values, arbitrary int32 ids, NaN/inf/huge padding."""
    return turn_batches(shapes=sizes, min_turns=0 if allow_empty_rows else 1,
                        dtype=np.float64).map(lambda b: (b.scores, b.turn_mask, b.group_ids))


def x64(*arrays):
    return [jnp.asarray(np.asarray(a, np.float64)) for a in arrays]


# --------------------------------------------------------------------------------------------
# Golden cases, worked by hand.
# --------------------------------------------------------------------------------------------


def test_retrospective_golden_one_trajectory():
    # s = .35, .2, 1, 1, .95, 1 ; m = max(0, best before) = 0, .35, .35, 1, 1, 1
    # Δ = .35, 0, .65, 0, 0, 0 ; success (m >= 1) from turn 3 on
    # turn 1: a drop before success -> 0 ; turn 3: held -> preserved ; turn 4: regression .05 ;
    # turn 5: back to 1 = m -> preserved again (not an improvement: 1 is not a new best).
    s, mask = rows([0.35, 0.2, 1.0, 1.0, 0.95, 1.0])
    r = credax.retrospective_credit(s, mask)
    np.testing.assert_allclose(r.best_prior[0], [0, 0.35, 0.35, 1, 1, 1], atol=1e-7)
    np.testing.assert_allclose(r.improvement[0], [0.35, 0, 0.65, 0, 0, 0], atol=1e-7)
    assert r.preserved[0].tolist() == [False, False, False, True, False, True]
    np.testing.assert_allclose(r.regression[0], [0, 0, 0, 0, 0.05, 0], atol=1e-7)
    np.testing.assert_allclose(r.credit[0], [0.35, 0, 0.65, 0.1, -0.05, 0.1], atol=1e-7)
    # weights (2, .3, 4): 2Δ + .3 preserved - 4 regression
    r = credax.retrospective_credit(s, mask, progress_weight=2.0, preservation_weight=0.3,
                                    regression_weight=4.0)
    np.testing.assert_allclose(r.credit[0], [0.7, 0, 1.3, 0.3, -0.2, 0.3], atol=1e-6)
    # τ = .95: the 1 at turn 2 is still an improvement (m = .35); turn 4 (.95 < m = 1) regresses.
    r = credax.retrospective_credit(s, mask, success_threshold=0.95)
    np.testing.assert_allclose(r.credit[0], [0.35, 0, 0.65, 0.1, -0.05, 0.1], atol=1e-7)
    # τ = .3: success right after turn 0 (m_1 = .35): turn 1 (.2) regresses .15, turn 2 improves.
    r = credax.retrospective_credit(s, mask, success_threshold=0.3)
    np.testing.assert_allclose(r.credit[0], [0.35, -0.15, 0.65, 0.1, -0.05, 0.1], atol=1e-6)
    # initial = .5: turn 0 (.35 < .5) is no improvement and, before success, gets 0.
    r = credax.retrospective_credit(s, mask, initial=0.5)
    np.testing.assert_allclose(r.best_prior[0], [0.5, 0.5, 0.5, 1, 1, 1], atol=1e-7)
    np.testing.assert_allclose(r.credit[0], [0, 0, 0.5, 0.1, -0.05, 0.1], atol=1e-7)


def test_hindsight_golden_leave_one_out_eligible_and_ineligible_peers():
    # prompt -5:
    #   r0: 0, 0, 1     eligible at turns 0, 1 (stall before success); u = 1, 1, 1
    #   r1: 0, .5, .5   eligible at 0 (u = .5) and 2 (m = .5 < 1, no improvement; u = .5)
    #   r2: 1, 1, 1     never eligible (improves at 0, solved after) — not a peer anywhere
    #   r3: 0, .35      (2 turns, variable length) eligible at 0 (u = .35)
    # prompt 10**6: r4: 0, 0 alone (singleton prompt) -> no peers, credit 0.
    # turn 0 eligible set {r0 (1), r1 (.5), r3 (.35)}:
    #   H_r0 = 1 - (.5 + .35)/2 = .575 ; H_r1 = .5 - (1 + .35)/2 = -.175 ; H_r3 = .35 - .75 = -.4
    # turn 1: only r0 eligible -> 0 ; turn 2: only r1 (r0 improves to 1) -> 0.
    s, mask = rows([0, 0, 1], [0, 0.5, 0.5], [1, 1, 1], [0, 0.35], [0, 0])
    ids = np.array([-5, -5, -5, -5, 10**6])
    h = credax.hindsight_credit(s, mask, ids)
    assert h.eligible.tolist() == [
        [True, True, False], [True, False, True], [False, False, False], [True, False, False],
        [True, True, False],
    ]
    np.testing.assert_allclose(
        h.credit, [[0.575, 0, 0], [-0.175, 0, 0], [0, 0, 0], [-0.4, 0, 0], [0, 0, 0]], atol=1e-6
    )
    assert h.peer_count.tolist() == [[2, 0, 0], [2, 0, 0], [0, 0, 0], [2, 0, 0], [0, 0, 0]]
    np.testing.assert_allclose(h.baseline[:, 0], [0.425, 0.675, 0, 0.75, 0], atol=1e-6)
    np.testing.assert_allclose(h.future_best, [[1, 1, 1], [0.5, 0.5, 0.5], [1, 1, 1],
                                               [0.35, 0.35, 0], [0, 0, 0]], atol=1e-7)
    # The same through tcpo_advantages (normalize off): credit = R + H.
    out = credax.tcpo_advantages(s, mask, ids, normalize=False)
    np.testing.assert_allclose(
        out.credit, [[0.575, 0, 1], [-0.175, 0.5, 0], [1, 0.1, 0.1], [-0.4, 0.35, 0], [0, 0, 0]],
        atol=1e-6,
    )


def test_counterfactual_golden():
    # turn (0,0): s = 1 vs {0, .35, 1/3} -> mean = (0 + .35 + 1/3)/3 = .227778, credit .772222
    # turn (0,1): s = .5 vs {.5, .5} (third masked, NaN) -> all equal: credit 0, not informative
    # turn (0,2): no alternatives -> 0, not informative, whatever s holds
    # turn (1,0): s = 0 vs {1} -> credit -1, informative
    # turn (1,1): s = .95 vs {.95, .95, 1} -> credit (0 + 0 - .05)/3 = -.016667, informative
    s = f32([[1.0, 0.5, NAN], [0.0, 0.95, 0.3]])
    alt = f32([[[0, 0.35, 1 / 3], [0.5, 0.5, NAN], [1, 1, 1]],
               [[1, INF, 0], [0.95, 0.95, 1.0], [0, 0, 0]]])
    ok = np.array([[[1, 1, 1], [1, 1, 0], [0, 0, 0]], [[1, 0, 0], [1, 1, 1], [0, 0, 0]]], bool)
    c = credax.counterfactual_credit(s, alt, ok)
    np.testing.assert_allclose(c.credit, [[0.772222, 0, 0], [-1, -0.016667, 0]], atol=1e-6)
    np.testing.assert_allclose(c.alt_mean, [[0.227778, 0.5, 0], [1, 0.966667, 0]], atol=1e-6)
    assert c.alt_count.tolist() == [[3, 2, 0], [1, 3, 0]]
    assert c.informative.tolist() == [[True, False, False], [True, True, False]]
    assert float(c.credit[0, 1]) == 0.0  # exactly: differences, not a difference of means


def test_tcpo_counterfactual_replaces_hindsight_only_where_used():
    # One prompt: r0 = 0, 0, 1 ; r1 = 0, 0, 0 ; r2 = .5, .5.
    # eligible: r0 turns 0, 1 ; r1 turns 0, 1, 2 ; r2 turn 1 (m = .5, no improvement).
    # hindsight: turn 0 {r0 (u=1), r1 (u=0)} -> +1, -1 ; turn 1 {r0 1, r1 0, r2 .5}:
    #   r0: 1 - .25 = .75 ; r1: 0 - .75 = -.75 ; r2: .5 - .5 = 0 ; turn 2: r1 alone -> 0.
    # Alternatives (M = 2):
    #   r0 turn 0: {1, 1} vs s = 0 -> C = -1, informative, selected   -> replaces +1
    #   r1 turn 0: {0, 0} vs s = 0 -> not informative                  -> keeps H = -1
    #   r0 turn 1: {0, .5} vs s = 0 -> C = -.25, informative, NOT selected -> keeps .75
    #   r0 turn 2: {0, 0} vs s = 1 -> C = 1, selected but not eligible (improves) -> R = 1 only
    #   r2 turn 1: {1, NaN masked} vs .5 -> C = -.5, selected, eligible -> replaces 0
    s, mask = rows([0, 0, 1], [0, 0, 0], [0.5, 0.5])
    ids = np.zeros(3, np.int32)
    alt = np.zeros((3, 3, 2), np.float32)
    ok = np.zeros((3, 3, 2), bool)
    alt[0, 0], ok[0, 0] = [1, 1], True
    alt[1, 0], ok[1, 0] = [0, 0], True
    alt[0, 1], ok[0, 1] = [0, 0.5], True
    alt[0, 2], ok[0, 2] = [0, 0], True
    alt[2, 1], ok[2, 1] = [1, NAN], [True, False]
    alt[2, 2], ok[2, 2] = [0, 0], True  # a padded turn: its alternatives do not exist
    sel = np.array([[1, 0, 1], [1, 1, 1], [0, 1, 1]], bool)
    out = credax.tcpo_advantages(s, mask, ids, alt_scores=alt, alt_mask=ok, selected=sel,
                                 normalize=False, counterfactual_weight=1.0, hindsight_weight=1.0)
    expected = [[-1, 0.75, 1], [-1, -0.75, 0], [0.5, -0.5, 0]]
    np.testing.assert_allclose(out.credit, expected, atol=1e-6)
    np.testing.assert_allclose(out.advantages, expected, atol=1e-6)
    assert out.counterfactual.alt_count.tolist() == [[2, 2, 2], [2, 0, 0], [0, 1, 0]]
    # counterfactual_weight scales only the replaced turns: 3·C at (0,0) and (2,1).
    out3 = credax.tcpo_advantages(s, mask, ids, alt_scores=alt, alt_mask=ok, selected=sel,
                                  normalize=False, counterfactual_weight=3.0)
    np.testing.assert_allclose(out3.credit, [[-3, 0.75, 1], [-1, -0.75, 0], [0.5, -1.5, 0]],
                               atol=1e-6)
    # Without `selected` every turn may use its alternatives: (0,1) now becomes C = -.25.
    out_all = credax.tcpo_advantages(s, mask, ids, alt_scores=alt, alt_mask=ok, normalize=False)
    np.testing.assert_allclose(out_all.credit, [[-1, -0.25, 1], [-1, -0.75, 0], [0.5, -0.5, 0]],
                               atol=1e-6)


def test_select_top_surprisal_ties_scopes_and_fewer_candidates():
    surprisal = f32([[0.5, 2.0, 0.5, 9.0],
                     [0.5, 2.0, 1.0, 0.1],
                     [3.0, NAN, 0.2, 0.2]])
    cand = np.array([[1, 1, 1, 0],      # 9.0 is not a candidate
                     [1, 1, 1, 1],
                     [0, 1, 1, 1]], bool)  # 3.0 not a candidate; NaN ranks below numbers
    sel = lambda **kw: credax.select_top_surprisal(surprisal, cand, **kw).astype(int).tolist()
    # batch, L = 4: 2.0 (0,1), 2.0 (1,1), 1.0 (1,2), then the tie 0.5: (0,0) before (0,2), (1,0)
    assert sel(budget=4) == [[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]]
    # L = 6: + 0.5 at (0,2) (flat 2 < flat 4)
    assert sel(budget=6) == [[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]]
    # L larger than the 10 candidates: all of them, nothing else
    assert sel(budget=50) == cand.astype(int).tolist()
    assert sel(budget=2**31 - 1) == cand.astype(int).tolist()  # the largest static int: no overflow
    # beyond int32 the entry's one static rule refuses it by name (#43), as every static int
    with pytest.raises(ValueError, match="`budget`.*outside int32"):
        sel(budget=10**12)
    assert sel(budget=0) == [[0] * 4] * 3
    # trajectory, L = 1: row 2's best number is 0.2 at (2,2) (tie with (2,3): lower index)
    assert sel(budget=1, scope="trajectory") == [[0, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
    # ... L = 3: row 2 fills its budget with the NaN candidate last
    assert sel(budget=3, scope="trajectory") == [[1, 1, 1, 0], [1, 1, 1, 0], [0, 1, 1, 1]]
    # group: rows 0 and 2 share prompt -4, row 1 is alone (prompt 99); L = 2 per prompt
    ids = np.array([-4, 99, -4])
    assert sel(budget=2, scope="group", group_ids=ids) == [[1, 1, 0, 0], [0, 1, 1, 0],
                                                            [0, 0, 0, 0]]
    assert sel(budget=4, scope="group", group_ids=ids) == [[1, 1, 1, 0], [1, 1, 1, 1],
                                                            [0, 0, 1, 0]]


def test_raw_score_and_adjacent_delta_golden():
    s, mask = rows([0, 0.5, 1, 1], [1, 0.5, 1], [0.35])
    np.testing.assert_allclose(credax.raw_score_credit(s, mask),
                               [[0, 0.5, 1, 1], [1, 0.5, 1, 0], [0.35, 0, 0, 0]], atol=1e-7)
    # s_k - s_{k-1} with s_{-1} = initial
    np.testing.assert_allclose(credax.adjacent_delta_credit(s, mask),
                               [[0, 0.5, 0.5, 0], [1, -0.5, 0.5, 0], [0.35, 0, 0, 0]], atol=1e-7)
    np.testing.assert_allclose(credax.adjacent_delta_credit(s, mask, initial=0.25),
                               [[-0.25, 0.5, 0.5, 0], [0.75, -0.5, 0.5, 0], [0.1, 0, 0, 0]],
                               atol=1e-6)
    # A gap (not produced by validate_turns' prefix masks): the previous *valid* turn is used.
    gap = np.array([[True, False, True, False]])
    np.testing.assert_allclose(credax.adjacent_delta_credit(f32([[0.5, NAN, 1.0, 0]]), gap),
                               [[0.5, 0, 0.5, 0]], atol=1e-7)


def test_tcpo_normalized_and_discounted_golden():
    # Two prompts. Prompt 1: r0 = 0, 1 ; r1 = 1, 1. Prompt 2: r2 = .5 (alone).
    # credit: r0 = [H, 1] with H: turn 0 eligible only r0 -> 0, so [0, 1]; r1 = [1, .1]; r2 = [.5]
    # z per (prompt, turn), eps = 0, ddof = 1: turn 0 {0, 1}: μ = .5, σ = .7071 -> -.7071, .7071
    #   turn 1 {1, .1}: μ = .55, σ = .6364 -> .7071, -.7071 ; r2 singleton -> 0.
    # γ = .5: turn 1 is halved.
    s, mask = rows([0, 1], [1, 1], [0.5])
    out = credax.tcpo_advantages(s, mask, np.array([1, 1, 2]),
                                 normalization=credax.Normalization(eps=0.0), gamma=0.5)
    np.testing.assert_allclose(out.credit, [[0, 1], [1, 0.1], [0.5, 0]], atol=1e-6)
    h = 1 / math.sqrt(2)
    np.testing.assert_allclose(out.advantages, [[-h, h / 2], [h, -h / 2], [0, 0]], atol=1e-6)
    # verl-like singleton "raw" keeps r2's credit; eps inside the sqrt with population std:
    # turn 0 {0, 1}: σ² = .25 -> (x - .5)/sqrt(.25 + 1e-6)
    out = credax.tcpo_advantages(
        s, mask, np.array([1, 1, 2]),
        normalization=credax.Normalization(ddof=0, eps_mode="sqrt", singleton="raw"))
    z = 0.5 / math.sqrt(0.25 + 1e-6)
    np.testing.assert_allclose(out.advantages[:, 0], [-z, z, 0.5], atol=1e-6)


def test_ladder_on_the_readme_batch():
    # The TCPO guide's example: one prompt, four refinement trajectories (three of three turns).
    s, mask = rows([0, 0.5, 1, 1], [0, 0, 1], [1, 0.5, 1], [0, 0, 0])
    ids = np.zeros(4, np.int32)
    # adjacent delta rewards the 1 -> .5 -> 1 fluctuation at its last turn (+.5) ...
    assert float(credax.adjacent_delta_credit(s, mask)[2, 2]) == 0.5
    # ... retrospective credit does not: that turn only holds a solved state (+.1), and the drop
    # is penalised (-.5).
    retro = credax.tcpo_advantages(s, mask, ids, hindsight_weight=0.0, normalize=False).credit
    np.testing.assert_allclose(retro, [[0, 0.5, 0.5, 0.1], [0, 0, 1, 0], [1, -0.5, 0.1, 0],
                                       [0, 0, 0, 0]], atol=1e-6)
    # hindsight separates the stall that was later repaired (r1) from the dead end (r3).
    full = credax.tcpo_advantages(s, mask, ids, normalize=False).credit
    np.testing.assert_allclose(full, [[0.5, 0.5, 0.5, 0.1], [0.5, 1, 1, 0], [1, -0.5, 0.1, 0],
                                      [-1, -1, 0, 0]], atol=1e-6)


def test_ladder_example_script_prints_the_documented_numbers(capsys):
    root = pathlib.Path(__file__).resolve().parents[1]
    runpy.run_path(str(root / "examples" / "tcpo_ladder.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "['B1', 'D0']" in out
    # rung 5, turn 0 credits (A .5, B .5, C 1, D -1): μ = .25, σ = sqrt(2.25/3) = .866
    #   -> B: .25/.866 = +.29 ; turn 1 (A .5, B 1, C -.5, D -1): μ 0, σ = sqrt(2.5/3) -> B +1.10
    assert "  5 + hindsight        +0.50  +1.00  +1.00      ·    +0.29  +1.10  +1.32      ·" in out
    # rung 6, turn 0 credits (.5, .5, 1, -.625): μ = .34375, σ = .6875 -> D: -.96875/.6875 = -1.41
    assert "  6 + counterfactual   -0.62  -1.00  +0.00      ·    -1.41  -1.14  -0.88      ·" in out
    # The TCPO guide shows exactly this output.
    shown = re.findall(r"```text\n(counterfactual turns selected.*?)```",
                       (root / "docs" / "guides" / "tcpo.md").read_text(), flags=re.S)
    assert shown and all(block == out for block in shown)


# --------------------------------------------------------------------------------------------
# The NumPy loop reference, randomized (float64).
# --------------------------------------------------------------------------------------------


def _assert_fields(out, expected, fields, atol=1e-9):
    for name in fields:
        got = np.asarray(getattr(out, name))
        np.testing.assert_allclose(got, expected[name], atol=atol, rtol=0, err_msg=name)


hyper = st.fixed_dictionaries({
    "tau": st.sampled_from([1.0, 0.95, 0.5]),
    "initial": st.sampled_from([0.0, 0.35]),
    "w_progress": st.sampled_from([1.0, 0.5]),
    "w_preserve": st.sampled_from([0.1, 0.0, 1 / 3]),
    "w_regress": st.sampled_from([1.0, 2.5]),
})


@given(batches(), hyper)
def test_retrospective_and_hindsight_match_reference(batch, h):
    scores, mask, ids = batch
    with jax.enable_x64(True):
        (s,) = x64(scores)
        r = credax.retrospective_credit(
            s, mask, success_threshold=h["tau"], progress_weight=h["w_progress"],
            preservation_weight=h["w_preserve"], regression_weight=h["w_regress"],
            initial=h["initial"],
        )
        hs = credax.hindsight_credit(s, mask, ids, success_threshold=h["tau"],
                                     initial=h["initial"])
    assert r.credit.dtype == jnp.float64
    expected = ref.retrospective(scores, mask, **h)
    _assert_fields(r, expected, ("credit", "best_prior", "improvement", "regression"))
    assert (np.asarray(r.preserved) == expected["preserved"]).all()
    expected = ref.hindsight(scores, mask, ids, tau=h["tau"], initial=h["initial"])
    _assert_fields(hs, expected, ("credit", "future_best", "baseline"))
    assert (np.asarray(hs.eligible) == expected["eligible"]).all()
    assert (np.asarray(hs.peer_count) == expected["peer_count"]).all()


@st.composite
def alternatives(draw, shape, m=3):
    b, k = shape
    vals = draw(st.lists(st.sampled_from(VALUES), min_size=b * k * m, max_size=b * k * m))
    ok = draw(st.lists(st.booleans(), min_size=b * k * m, max_size=b * k * m))
    ok = np.array(ok).reshape(b, k, m)
    alt = np.where(ok, np.array(vals).reshape(b, k, m), draw(st.sampled_from(PADS)))
    return alt, ok


@given(st.data())
def test_counterfactual_matches_reference(data):
    scores, mask, _ = data.draw(batches())
    alt, ok = data.draw(alternatives(scores.shape))
    ok = ok & mask[:, :, None]  # padded turns have no alternatives: their NaN score is unread
    with jax.enable_x64(True):
        c = credax.counterfactual_credit(*x64(scores, alt), ok)
    expected = ref.counterfactual(np.where(mask, scores, 0), alt, ok)
    _assert_fields(c, expected, ("credit", "alt_mean"))
    assert (np.asarray(c.alt_count) == expected["alt_count"]).all()
    assert (np.asarray(c.informative) == expected["informative"]).all()


@given(st.data())
def test_select_top_surprisal_matches_reference(data):
    b, k = data.draw(st.sampled_from(SIZES))
    # -0.0 ties 0.0; ±1e-45 are float32 denormals (ordered, not flushed); ±inf rank above NaN.
    values = [0.0, -0.0, 0.35, 1 / 3, 2.0, -2.0, 1e-45, -1e-45, NAN, INF, -INF]
    surprisal = np.array(data.draw(st.lists(st.sampled_from(values),
                                            min_size=b * k, max_size=b * k))).reshape(b, k)
    cand = np.array(data.draw(st.lists(st.booleans(), min_size=b * k, max_size=b * k)))
    cand = cand.reshape(b, k)
    budget = data.draw(st.sampled_from([0, 2, 5]))
    scope = data.draw(st.sampled_from(["batch", "group", "trajectory"]))
    ids = np.array(data.draw(st.lists(st.sampled_from(IDS), min_size=b, max_size=b)))
    kw = dict(group_ids=ids) if scope == "group" else {}
    got = credax.select_top_surprisal(f32(surprisal), cand, budget=budget, scope=scope, **kw)
    expected = ref.select_top(f32(surprisal), cand, budget, scope, ids)
    assert (np.asarray(got) == expected).all()


@pytest.mark.parametrize("x64", [False, True])
def test_select_top_surprisal_large_batches_match_reference(x64):
    # Thousands of entries with heavy ties and every special value, each scope, budgets from 1 to
    # more than the candidates: the bisection over the float bits and the tie bound must pick
    # exactly the reference's sorted prefix. x64: float64 surprisal, 64-bit keys.
    rng = np.random.default_rng(7)
    b, k = 96, 16
    values = np.array([0.0, -0.0, 0.5, 0.5 + 2**-20, 1e-45, -3.0, 7.0, NAN, INF, -INF])
    surprisal = np.where(rng.random((b, k)) < 0.5, rng.choice(values, (b, k)),
                         rng.normal(size=(b, k)))
    cand = rng.random((b, k)) < 0.7
    ids = rng.choice(np.array([-7, 0, 3, 10**6, 11]), size=b)
    dtype = np.float64 if x64 else np.float32
    with jax.enable_x64(x64):
        for scope in ("batch", "group", "trajectory"):
            kw = dict(group_ids=ids) if scope == "group" else {}
            for budget in (1, 5, 17, 400, b * k + 1):
                got = credax.select_top_surprisal(surprisal.astype(dtype), cand, budget=budget,
                                                  scope=scope, **kw)
                expected = ref.select_top(surprisal.astype(dtype), cand, budget, scope, ids)
                assert (np.asarray(got) == expected).all(), (scope, budget)


@given(st.data())
def test_tcpo_advantages_match_reference(data):
    scores, mask, ids = data.draw(batches())
    h = data.draw(hyper)
    w_h = data.draw(st.sampled_from([1.0, 0.0, 0.5]))
    w_c = data.draw(st.sampled_from([1.0, 2.0]))
    gamma = data.draw(st.sampled_from([1.0, 0.9, 0.5]))
    mode = data.draw(st.sampled_from(["none", "alt", "alt+selected"]))
    kw, ref_kw = {}, {}
    if mode != "none":
        alt, ok = data.draw(alternatives(scores.shape))
        kw.update(alt_mask=ok)
        ref_kw.update(alt=alt, alt_mask=ok)
        if mode == "alt+selected":
            sel = np.array(data.draw(st.lists(st.booleans(), min_size=mask.size,
                                              max_size=mask.size))).reshape(mask.shape)
            kw.update(selected=sel)
            ref_kw.update(selected=sel)
    with jax.enable_x64(True):
        if mode != "none":
            kw["alt_scores"] = x64(alt)[0]
        out = credax.tcpo_advantages(
            x64(scores)[0], mask, ids, success_threshold=h["tau"],
            progress_weight=h["w_progress"], preservation_weight=h["w_preserve"],
            regression_weight=h["w_regress"], hindsight_weight=w_h, counterfactual_weight=w_c,
            initial=h["initial"], gamma=gamma, **kw,
        )
    expected = ref.tcpo(scores, mask, ids, **h, w_hindsight=w_h, w_counter=w_c, gamma=gamma,
                        **ref_kw)
    _assert_fields(out, expected, ("credit", "advantages"), atol=1e-7)


Z_OPTIONS = (
    {},
    dict(ddof=0, eps_mode="sqrt", singleton="raw"),  # the TCPO reimplementation's convention
    dict(scale="none", leave_one_out=True),
    dict(center=False, singleton="center", eps=1e-3),
)


@given(batches(sizes=((6, 4),)), st.sampled_from(range(len(Z_OPTIONS) + 1)))
def test_tcpo_normalisation_options_match_reference(batch, which):
    scores, mask, ids = batch
    opts = dict(normalize=False) if which == len(Z_OPTIONS) else Z_OPTIONS[which]
    kw = (dict(normalize=False) if which == len(Z_OPTIONS)
          else dict(normalization=credax.Normalization(**Z_OPTIONS[which])))
    with jax.enable_x64(True):
        out = credax.tcpo_advantages(x64(scores)[0], mask, ids, **kw)
    expected = ref.tcpo(scores, mask, ids, **opts)
    _assert_fields(out, expected, ("credit", "advantages"), atol=1e-7)


@given(batches(), st.sampled_from([0.0, 0.35]))
def test_raw_score_and_adjacent_delta_match_reference(batch, initial):
    scores, mask, _ = batch
    with jax.enable_x64(True):
        (s,) = x64(scores)
        raw = np.asarray(credax.raw_score_credit(s, mask))
        adj = np.asarray(credax.adjacent_delta_credit(s, mask, initial=initial))
    np.testing.assert_allclose(raw, ref.raw_score(scores, mask), atol=0)
    np.testing.assert_allclose(adj, ref.adjacent_delta(scores, mask, initial), atol=1e-12)


def test_float32_matches_reference_on_a_mixed_batch():
    s, mask = rows([0, 0.35, 1 / 3, 1, 0.95], [0.5, 0.5], [0, 0, 0, 1 / 3], [1, 1], [0.95])
    ids = np.array([4, 4, 4, -2, 4])
    out = credax.tcpo_advantages(s, mask, ids, gamma=0.9)
    assert out.advantages.dtype == jnp.float32
    expected = ref.tcpo(s, mask, ids, gamma=0.9)
    np.testing.assert_allclose(out.credit, expected["credit"], atol=1e-6)
    np.testing.assert_allclose(out.advantages, expected["advantages"], atol=1e-5)


# --------------------------------------------------------------------------------------------
# Properties.
# --------------------------------------------------------------------------------------------


@given(batches(allow_empty_rows=False), st.sampled_from([0.0, 0.35, 1 / 3]))
def test_improvements_telescope_to_best_minus_initial(batch, initial):
    scores, mask, _ = batch
    with jax.enable_x64(True):
        r = credax.retrospective_credit(x64(scores)[0], mask, initial=initial)
    total = np.asarray(r.improvement).sum(axis=1)
    best = np.where(mask, scores, -np.inf).max(axis=1)
    np.testing.assert_allclose(total, np.maximum(0.0, best - initial), atol=1e-12)


@given(batches(), st.sampled_from([1.0, 0.95, 0.5]))
def test_no_preservation_or_regression_before_first_success(batch, tau):
    scores, mask, _ = batch
    r = credax.retrospective_credit(f32(scores), mask, success_threshold=tau)
    t = np.float32(tau)
    for b in range(scores.shape[0]):
        for k in range(scores.shape[1]):
            solved_before = any(mask[b, j] and f32(scores[b, j]) >= t for j in range(k))
            if not solved_before:
                assert not bool(r.preserved[b, k]) and float(r.regression[b, k]) == 0.0
                # ... so the retrospective credit is exactly the weighted improvement
                assert float(r.credit[b, k]) == float(r.improvement[b, k])


@given(batches())
def test_hindsight_sums_to_zero_over_each_eligible_set(batch):
    scores, mask, ids = batch
    with jax.enable_x64(True):
        h = credax.hindsight_credit(x64(scores)[0], mask, ids)
    credit, eligible = np.asarray(h.credit), np.asarray(h.eligible)
    for g in set(ids.tolist()):
        for k in range(scores.shape[1]):
            members = (ids == g) & eligible[:, k]
            total = credit[members, k].sum()
            if members.sum() >= 2:
                assert abs(total) < 1e-12
            else:
                assert total == 0.0  # one eligible trajectory alone: no peer, no credit
    assert (credit[~eligible] == 0).all()


# Identities with other estimators (λ = 0, ω = 0, ...) live in tests/test_identities.py.


@jax.jit
def _tcpo_and_grad(s, mask, ids, alt, ok):
    fn = lambda s: credax.tcpo_advantages(s, mask, ids, alt_scores=alt, alt_mask=ok)
    weights = jnp.arange(1.0, s.shape[1] + 1, dtype=s.dtype)[None, :]
    return fn(s), jax.grad(lambda s: jnp.sum(fn(s).advantages * weights))(s)


@given(batches(sizes=((3, 4), (6, 4))), st.sampled_from(PADS), st.sampled_from(PADS))
def test_masked_values_never_matter(batch, pad1, pad2):
    scores, mask, ids = batch
    alt = np.full(scores.shape + (2,), 0.5, np.float32)
    ok = np.ones(alt.shape, bool)
    ok[..., 1] = False

    def run(pad):
        s = f32(np.where(mask, scores, pad))
        a = alt.copy()
        a[~mask] = pad        # alternatives of padded turns
        a[..., 1] = pad        # masked alternatives
        return _tcpo_and_grad(s, mask, ids, a, ok)

    (o1, g1), (o2, g2) = run(pad1), run(pad2)
    for a, b in zip(jax.tree.leaves(o1), jax.tree.leaves(o2), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(g1, g2)
    assert np.isfinite(g1).all()
    assert (np.asarray(g1)[~mask] == 0).all()
    for leaf in jax.tree.leaves(o1):
        assert not np.asarray(leaf)[~mask].any()


def test_padding_turns_and_rows_changes_nothing():
    s, mask = rows([0, 0.35, 1], [0, 0], [1 / 3, 0.95, 0.95])
    ids = np.array([5, 5, 5])
    base = credax.tcpo_advantages(s, mask, ids, gamma=0.9)
    # two more padded turns and one fully padded row of the same prompt
    s2 = np.full((4, 5), NAN, np.float32)
    s2[:3, :3] = s
    m2 = np.zeros((4, 5), bool)
    m2[:3, :3] = mask
    big = credax.tcpo_advantages(s2, m2, np.array([5, 5, 5, 5]), gamma=0.9)
    for a, b in zip(jax.tree.leaves(base), jax.tree.leaves(big), strict=True):
        np.testing.assert_array_equal(np.asarray(b)[:3, :3], a)


def test_jit_equals_eager():
    s, mask = rows([0, 0.35, 1, 1, 0.95], [0, 0, 0.5], [1 / 3], [0, 0, 0, 0])
    ids = np.array([1, 1, 2, 1])
    alt = np.tile(f32([0.0, 1.0])[None, None], (4, 5, 1))
    kw = dict(alt_scores=alt, selected=np.ones((4, 5), bool), gamma=0.9)
    jitted = credax.tcpo_advantages(s, mask, ids, **kw)
    with jax.disable_jit():
        eager = credax.tcpo_advantages(s, mask, ids, **kw)
    for a, b in zip(jax.tree.leaves(jitted), jax.tree.leaves(eager), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    sur = f32([[0.1, 0.2, 0.2, 0.0, 3], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [5, 4, 3, 2, 1]])
    fast = credax.select_top_surprisal(sur, mask, ids, budget=3, scope="group")
    with jax.disable_jit():
        slow = credax.select_top_surprisal(sur, mask, ids, budget=3, scope="group")
    np.testing.assert_array_equal(fast, slow)


def test_vmap_over_an_extra_axis_equals_loop():
    rng = np.random.default_rng(0)
    s = rng.choice(np.array(VALUES, np.float32), size=(3, 5, 4))
    lengths = rng.integers(1, 5, size=(3, 5))
    mask = np.arange(4)[None, None, :] < lengths[..., None]
    ids = rng.choice(np.array(IDS[:3], np.int32), size=(3, 5))
    fn = lambda s, m, i: credax.tcpo_advantages(s, m, i, gamma=0.9).advantages
    batched = jax.vmap(fn)(s, mask, ids)
    for n in range(3):
        np.testing.assert_allclose(batched[n], fn(s[n], mask[n], ids[n]), atol=1e-6)
    mt = jax.vmap(lambda s, m, i: credax.mt_grpo_advantages(s, s[:, 0], m, i))(s, mask, ids)
    for n in range(3):
        np.testing.assert_allclose(
            mt[n], credax.mt_grpo_advantages(s[n], s[n, :, 0], mask[n], ids[n]), atol=1e-6)


def test_gradients_finite_and_match_finite_differences():
    # float32 gradients with NaN padding are checked in test_masked_values_never_matter; here
    # float64, against central differences, for the scores and the traced hyperparameters.
    s, mask = rows([0.2, 0.35, 0.9, 0.6], [0.1, 0.05, 0.7], [0.3, 0.05], [0.25])
    ids = np.array([0, 0, 0, 0])
    w = np.random.default_rng(1).normal(size=s.shape)

    def loss(s, pw, rw, hw, gamma, eps):
        out = credax.tcpo_advantages(s, mask, ids, progress_weight=pw, regression_weight=rw,
                                     hindsight_weight=hw, gamma=gamma,
                                     normalization=credax.Normalization(eps=eps),
                                     success_threshold=0.8)
        return jnp.sum(out.advantages * jnp.asarray(w, out.advantages.dtype))

    with jax.enable_x64(True):
        args = [jnp.asarray(s, jnp.float64)] + [jnp.float64(v) for v in (1.0, 0.7, 1.3, 0.9, 1e-6)]
        grads = jax.jit(jax.grad(loss, argnums=tuple(range(6))))(*args)
        f = jax.jit(loss)
        for g in grads:
            assert np.isfinite(np.asarray(g)).all()
        assert (np.asarray(grads[0])[~mask] == 0).all()

        def central(i, e):
            up, down = list(args), list(args)
            up[i], down[i] = args[i] + e, args[i] - e
            return (float(f(*up)) - float(f(*down))) / (2 * 1e-6)

        # Away from kinks (no ties, no score at a threshold) the gradient is the derivative.
        for b, k in zip(*np.nonzero(mask), strict=True):
            e = np.zeros(s.shape)
            e[b, k] = 1e-6
            assert abs(central(0, e) - float(grads[0][b, k])) < 1e-4, (b, k)
        for i in (1, 2, 3, 4):  # progress, regression, hindsight weights and γ
            assert abs(central(i, 1e-6) - float(grads[i])) < 1e-4, i


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_in_float32_and_cast_back(dtype):
    s, mask = rows([0, 0.35, 1], [0, 0], [0.5])
    ids = np.zeros(3, np.int32)
    low = credax.tcpo_advantages(jnp.asarray(s, dtype), mask, ids)
    high = credax.tcpo_advantages(jnp.asarray(jnp.asarray(s, dtype), jnp.float32), mask, ids)
    assert low.advantages.dtype == dtype and low.retrospective.best_prior.dtype == dtype
    assert low.hindsight.peer_count.dtype == jnp.int32 and low.hindsight.eligible.dtype == bool
    np.testing.assert_array_equal(low.advantages, high.advantages.astype(dtype))


def test_integer_scores_give_float32():
    s = np.array([[0, 1, 1], [0, 0, 1]], np.int32)
    out = credax.tcpo_advantages(s, np.ones((2, 3), bool), np.zeros(2, np.int32))
    assert out.advantages.dtype == jnp.float32


# --------------------------------------------------------------------------------------------
# Errors name the argument.
# --------------------------------------------------------------------------------------------

S, M = f32([[0.0, 1.0]]), np.ones((1, 2), bool)


@pytest.mark.parametrize("call, error, match", [
    (lambda: credax.retrospective_credit(S[0], M[0]), ValueError, "scores"),
    (lambda: credax.retrospective_credit(S, M.astype(np.float32)), TypeError, "turn_mask"),
    (lambda: credax.retrospective_credit(S, M, success_threshold=np.ones(2)), ValueError,
     "success_threshold"),
    (lambda: credax.hindsight_credit(S, M, np.zeros(3, np.int32)), ValueError, "B=3"),
    (lambda: credax.hindsight_credit(S, M, np.zeros(1)), TypeError, "group_ids"),
    (lambda: credax.counterfactual_credit(S, np.zeros((1, 3, 2)), np.ones((1, 3, 2), bool)),
     ValueError, "alt_scores"),
    (lambda: credax.counterfactual_credit(S, np.zeros((1, 2, 2)), np.ones((1, 2, 3), bool)),
     ValueError, "alt_mask"),
    (lambda: credax.select_top_surprisal(S, M, budget=1, scope="prompt"), ValueError, "scope"),
    (lambda: credax.select_top_surprisal(S, M, budget=-1), ValueError, "budget"),
    (lambda: credax.select_top_surprisal(S, M, budget=1.0), TypeError, "budget"),
    (lambda: credax.select_top_surprisal(S, M, budget=1, scope="group"), ValueError, "group_ids"),
    (lambda: credax.select_top_surprisal(S, M, np.zeros(1, np.int32), budget=1), ValueError,
     "group_ids"),
    (lambda: credax.tcpo_advantages(S, M, np.zeros(1, np.int32), selected=M), ValueError,
     "alt_scores"),
    (lambda: credax.tcpo_advantages(S, M, np.zeros(1, np.int32), alt_scores=np.zeros((1, 2, 1)),
                                    selected=M[0]), ValueError, "selected"),
    (lambda: credax.tcpo_advantages(S, M, np.zeros(1, np.int32),
                                    normalization=credax.Normalization(singleton="drop")),
     ValueError, "singleton"),
    # the removed loose keywords name themselves and `normalization=`
    (lambda: credax.tcpo_advantages(S, M, np.zeros(1, np.int32), singleton="raw"), TypeError,
     r"'singleton'(.|\n)*normalization=credax\.Normalization"),
    (lambda: credax.tcpo_advantages(S, M, np.zeros(1, np.int32), eps=0.0), TypeError,
     r"'eps'(.|\n)*normalization=credax\.Normalization"),
    (lambda: credax.tcpo_advantages(S, M, np.zeros(1, np.int32), **credax.presets.VERL),
     TypeError, "must be a mapping"),
    (lambda: credax.tcpo_advantages(S, M, np.zeros(1, np.int32), normalization={"eps": 0.0}),
     TypeError, "normalization"),
    (lambda: credax.tcpo_advantages(S, M, np.zeros(1, np.int32), gamma=np.ones(2)), ValueError,
     "gamma"),
])
def test_errors_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("nonfinite", "tcpo")
def _():
    out = credax.tcpo_advantages(S4, M43, IDS4)
    assert np.isnan(out.advantages[0, 1]) and np.isnan(out.credit[0, 1])
    same_where(out.advantages, credax.tcpo_advantages(S4_CLEAN, M43, IDS4).advantages, ~ROWS01)


@probe("nonfinite", "retrospective")
def _():
    out = credax.retrospective_credit(S4, M43)
    # the NaN turn and every later turn of its row (their best prior includes it) are NaN
    nan_exactly(out.credit, [[False, True, True]] + [[False] * 3] * 3)


@probe("nonfinite", "hindsight")
def _():
    out = credax.hindsight_credit(S4, M43, IDS4)
    assert np.isnan(out.credit[0, 1])  # its own credit is NaN, not the 0 of an ineligible turn
    same_where(out.credit, credax.hindsight_credit(S4_CLEAN, M43, IDS4).credit, ~ROWS01)


@probe("nonfinite", "counterfactual_alternative")
def _():
    alt = np.array([[[0.0, NAN], [1.0, 0.0]]], np.float32)
    c = credax.counterfactual_credit(np.array([[1.0, 1.0]], np.float32), alt, np.ones((1, 2, 2), bool))
    nan_exactly(c.credit, [[True, False]])
    assert float(c.credit[0, 1]) == 0.5  # 1 - mean(1, 0)


@probe("nonfinite", "counterfactual_masked_alternative")
def _():
    alt = np.array([[[0.0, NAN]]], np.float32)
    c = credax.counterfactual_credit(np.array([[1.0]], np.float32), alt, np.array([[[True, False]]]))
    assert float(c.credit[0, 0]) == 1.0


@probe("nonfinite", "raw_and_adjacent")
def _():
    s = np.array([[0.0, NAN, 1.0, 0.5]], np.float32)
    m = np.ones((1, 4), bool)
    nan_exactly(credax.raw_score_credit(s, m), [[False, True, False, False]])
    # s_k - s_{k-1}: the NaN turn and the next one
    nan_exactly(credax.adjacent_delta_credit(s, m), [[False, True, True, False]])


@probe("contract", "select_nan_ranks_below_neg_inf")
def _():
    # NaN first in flat order, -inf second: with budget 1 the -inf is picked (NaN ranks last).
    out = credax.select_top_surprisal(np.array([[NAN, -INF, NAN]], np.float32), np.ones((1, 3), bool),
                                      budget=1)
    assert out.tolist() == [[False, True, False]]
    out = credax.select_top_surprisal(np.array([[NAN, -INF, 0.5]], np.float32), np.ones((1, 3), bool),
                                      budget=2)
    assert out.tolist() == [[False, True, True]]


R4 = np.array([1.0, 0.0, 0.5, 0.5], np.float32)
S22 = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 1.0]], np.float32)
TM22 = np.ones((4, 2), bool)


@probe("f32", "turn_scores_beyond_float32")
def _():
    s = S22.astype(np.float64)
    s[1, 1] = -2e38 * 2
    raises(ValueError, r"`scores` holds -4e\+38 at index \(1, 1\)", credax.tcpo_advantages, s,
           TM22, IDS4)
    raises(ValueError, r"`turn_rewards` holds -4e\+38", credax.mt_grpo_advantages, s, R4, TM22,
           IDS4)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

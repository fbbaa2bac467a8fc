"""The lab's verdict statistics on hand-worked cases: the Wilson interval of the share of seeds
solved, the paired difference over the seeds two methods share, and the seeds a tie would need."""

import math

import numpy as np

from benchmarks.lab import metrics as X
from benchmarks.lab import tables


def test_wilson_interval_hand_values():
    # k = 0, n = 20, z = 1.96: centre (0 + z²/40)/(1 + z²/20) = 0.09604/1.19208 = 0.080566,
    # half-width z·sqrt(0 + z²/1600)/(1.19208) = 1.96·0.049/1.19208 = 0.080566: [0, 0.1611].
    lo, hi = X.wilson_interval(0, 20)
    assert lo == 0.0 and math.isclose(hi, 2 * 0.0805659, rel_tol=1e-4)
    # k = 10, n = 20: p = .5, centre .5, half 1.96·sqrt(.25/20 + 3.8416/1600)/1.19208 = 0.20070.
    lo, hi = X.wilson_interval(10, 20)
    assert math.isclose(lo, 0.5 - 0.200704, rel_tol=1e-4) and math.isclose(hi, 0.5 + 0.200704, rel_tol=1e-4)
    assert X.wilson_interval(0, 0) == (None, None)


def test_solved_fraction_counts_seeds_at_or_above_the_threshold():
    f = X.solved_fraction([0.0, 0.5, 0.49, 1.0, float("nan")])
    assert (f["k"], f["n"], f["mean"]) == (2, 4, 0.5)
    assert f["interval"] == list(X.wilson_interval(2, 4))


def test_seeds_to_resolve_hand_case():
    # Differences (0.1, 0.3): mean 0.2, sd (ddof 1) = sqrt(0.02) = 0.141421; (1.96·0.141421/0.2)²
    # = 1.9208 -> 2 seeds. A zero mean never resolves; one seed has no sd.
    assert X.seeds_to_resolve([0.1, 0.3]) == 2.0
    assert X.seeds_to_resolve([-0.1, 0.1]) == float("inf")
    assert np.isnan(X.seeds_to_resolve([0.5]))


def test_paired_difference_uses_the_seeds_both_methods_have():
    a = [1.0, 0.0, 1.0, 1.0]  # 4 seeds (a headline method)
    b = [0.0, 0.0]  # 2 seeds: only seeds 0 and 1 pair
    d = X.paired_difference(a, b)
    assert d["n"] == 2 and d["per_seed"] == [1.0, 0.0] and d["mean"] == 0.5
    assert not d["resolved"]  # the bootstrap interval of (1, 0) reaches 0
    assert math.isclose(d["sd"], math.sqrt(0.5))
    assert d["seeds_needed"] == math.ceil((1.96 * math.sqrt(0.5) / 0.5) ** 2)
    clear = X.paired_difference([0.9, 0.8, 0.85, 0.95], [0.1, 0.0, 0.05, 0.1])
    assert clear["resolved"] and clear["interval"][0] > 0


def test_verdict_line_names_grpo_the_best_and_the_exact_tier():
    st = lambda v: X.summarize(v)
    task = {"methods": {"grpo": {"label": "GRPO", "success": st([0.1, 0.2, 0.1, 0.0])},
                        "tcpo": {"label": "TCPO", "success": st([0.9, 0.8, 0.9, 1.0])},
                        "mine": {"label": "yours: mine", "success": st([0.9, 0.85, 0.95, 0.9])},
                        "true_adv": {"label": "control", "success": st([1.0, 1.0, 1.0, 1.0])}},
            "kinds": {"true_adv": {"control": True}}}
    line, advice = tables.verdicts({"tasks": {"refine": task}}, ["mine"])
    # then the guide's advice for its pattern (better on refine, probe not run)
    assert advice.startswith("advice yours: mine: helps on refinement like the score-change")
    assert line.startswith("verdict [refine] yours: mine: success 0.900")
    assert "vs GRPO +0.800" in line and "resolved: better" in line
    # The control is not "the best"; TCPO ties (the mean difference is 0 up to rounding).
    assert "vs the best, TCPO," in line and "unresolved (seeds to resolve: > 10,000)" in line
    assert "exact tier:" in line

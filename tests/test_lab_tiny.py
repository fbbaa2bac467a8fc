"""The credit lab at CI size: both tasks train, every method and control runs, the lab measures,
and the controls check the lab (true advantage: correlation 1; shuffled credit: about 0).

One ``--preset smoke`` run of the CLI is shared by the tests of this module (module fixture).
"""

import json

import jax
import numpy as np
import pytest

from benchmarks.lab import __main__ as cli
from benchmarks.lab import env as E
from benchmarks.lab import judges, tables
from benchmarks.lab.methods import METHODS

USER = "benchmarks/lab/example_credit.py:progress_credit"  # scored like a built-in method


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("lab")
    assert cli.main(["--preset", "smoke", "--out", str(out), "--methods", ",".join(METHODS),
                     "--credit", USER]) == 0
    rec = json.loads((out / "lab.json").read_text())
    rec["_out"] = str(out)
    return rec


def test_every_method_and_control_on_both_tasks(record):
    seeds = cli.PRESETS["smoke"]["seeds"]
    assert set(record["tasks"]) == {"probe", "refine"}
    for task in record["tasks"].values():
        assert set(task["methods"]) == set(METHODS) | {"progress_credit"}
        assert task["methods"]["progress_credit"]["label"] == "example: GRPO + score change"
        for name, m in task["methods"].items():
            if name in METHODS:
                assert m["label"] == METHODS[name].label  # display names next to the keys
            assert len(m["success"]["per_seed"]) == seeds
            lo, hi = m["success"]["interval"]
            assert 0.0 <= lo <= m["success"]["mean"] <= hi <= 1.0  # bootstrap: never leaves [0, 1]
        assert set(task["lab"]["credit"]) == {"0", "20"}
    for suffix in ("probe", "refine", "credit", "predict"):
        assert (__import__("pathlib").Path(record["_out"]) / f"lab-{suffix}.png").stat().st_size > 0


def test_true_advantage_control_is_measured_on_the_credit_it_trains_on(record):
    # Its credit in the lab is its own 1-pair estimate with its own branch noise, against the
    # lab's independent 8-pair A*: positively correlated (both estimate A*), and not 1 — a
    # correlation of 1 would mean the lab read its own ground truth back.
    vals = [v for task in record["tasks"].values() for v in
            task["lab"]["credit"]["0"]["true_adv"]["pearson"]["per_seed"] if v is not None]
    assert len(vals) >= 3 and 0.1 < float(np.mean(vals)) < 0.99 and max(vals) < 0.999


def test_metric_vs_learning_and_bias_records(record):
    for task in record["tasks"].values():
        pred = task["lab"]["predictive"]
        assert "true_adv" not in pred["methods"] and "shuffled" not in pred["methods"]
        assert "progress_credit" in pred["methods"] and len(pred["methods"]) == len(METHODS) - 1
        for metric in ("pearson", "rank_acc", "grad_snr", "grad_t", "pearson_unchanged"):
            rho = pred["metrics"][metric]["success"]
            assert rho["mean"] is None or -1.0 <= rho["mean"] <= 1.0
        c = task["lab"]["credit"]["0"]
        # GRPO ties every turn of a rollout: its within-rollout ranking is chance, exactly.
        ranks = [v for v in c["grpo"]["rank_acc"]["per_seed"] if v is not None]
        assert ranks and all(v == 0.5 for v in ranks)
        for key in ("bias_exploration", "bias_stop", "bias_continue", "length_bonus"):
            assert key in c["triage"] and key in c["mt_grpo"]
        assert task["kinds"]["grpo"]["unbiased"] and task["kinds"]["true_adv"]["control"]


def test_shuffled_control_is_uncorrelated(record):
    # 32 pairs per seed, 3 seeds, 2 checkpoints, 2 tasks: each correlation has sd ~ 0.18 when
    # there is no relation. A batch whose GRPO credit is all zero (every prompt's returns equal,
    # common once the tiny policy has learnt) has no correlation (null); of the 12, at least 8
    # must exist: the sd of their mean is <= 0.18 / sqrt(8) ~ 0.064, so |mean| < 0.2 is 3 sd.
    vals = [v for task in record["tasks"].values() for credit in task["lab"]["credit"].values()
            for v in credit["shuffled"]["pearson"]["per_seed"] if v is not None]
    assert len(vals) >= 8 and abs(float(np.mean(vals))) < 0.2
    # ... while GRPO's own (unshuffled) credit does correlate on the same batches at step 0.
    # (A seed whose tiny step-0 batch has no return spread has no GRPO correlation: null.)
    grpo = [v for task in record["tasks"].values()
            for v in task["lab"]["credit"]["0"]["grpo"]["pearson"]["per_seed"] if v is not None]
    assert len(grpo) >= 2 and float(np.mean(grpo)) > 0.2


def test_ground_truth_and_triage_records(record):
    for task in record["tasks"].values():
        gt = task["lab"]["ground_truth"]["0"]
        assert gt["branches"] == 8 and gt["se"]["mean"] > 0 and gt["sd"]["mean"] > 0
        tri = task["lab"]["triage"]["0"]
        assert set(tri) == {"oracle", "p02", "p04", "blind"}
        for v in tri.values():  # credax's optimal_mixing_weight agrees with the lab's own
            ours, cx = v["lambda_star"]["per_seed"], v["lambda_star_credax"]["per_seed"]
            # A seed whose batch has no return spread has no scale for A*: null in both.
            assert [a is None for a in ours] == [b is None for b in cx]
            both = [(a, b) for a, b in zip(ours, cx, strict=True) if a is not None]
            assert both
            np.testing.assert_allclose(*zip(*both, strict=True), rtol=1e-3, atol=1e-4)


def test_tables_render_from_the_record(record):
    text = tables.render(record)
    assert "control: true advantage" in text and "TRIAGE" in text
    spliced = tables.splice(f"a\n{tables.START}\nold\n{tables.END}\nb", text)
    assert spliced.startswith(f"a\n{tables.START}\n{text}\n{tables.END}") and spliced.endswith("\nb")


def test_environment_dynamics():
    task = E.Task(length=2, alphabet=3, turns=3)
    s = E.reset(task, np.array([[2, 1]], np.int32))
    i32 = lambda *v: np.array(v, np.int32)
    s, a = E.step(task, s, i32(E.PROBE), i32(0), i32(0))  # reveal target[0] = 2
    assert int(s.revealed[0, 0]) == 2 and float(a.score[0]) == 0.0 and int(a.role[0]) == E.EXPLORATION
    s, b = E.step(task, s, i32(E.WRITE), i32(0), i32(2))  # correct: 0 -> 1/2
    assert float(b.score[0]) == 0.5 and int(b.role[0]) == E.DECISIVE
    s, c = E.step(task, s, i32(E.WRITE), i32(0), i32(1))  # overwrite with a wrong symbol
    assert float(c.score[0]) == 0.0 and int(c.role[0]) == E.REGRESSION
    assert bool(s.done[0])  # K = 3 turns used
    s, d = E.step(task, s, i32(E.WRITE), i32(0), i32(2))  # after the end: nothing happens
    assert not bool(d.valid[0]) and float(s.score[0]) == 0.0


def test_judges():
    roles = np.array([[0, 1, 2, 3, 3]], np.int32)
    mask = np.array([[True, True, True, True, False]])
    assert judges.oracle(roles, mask).tolist() == [[0, 1, 2, 3, -1]]
    assert judges.regression_blind(roles, mask).tolist() == [[0, 1, 2, 0, -1]]
    many = np.tile(np.array([[0, 1, 2, 3]], np.int32), (5000, 1))
    flipped = np.asarray(judges.noisy(0.4)(many, np.ones_like(many, bool), jax.random.key(0)))
    rate = float(np.mean(flipped != many))
    assert abs(rate - 0.4) < 0.02  # a flip always changes the label
    assert set(np.unique(flipped)) == {0, 1, 2, 3}


def test_tiny_is_a_first_answer_without_training():
    # Issue 47 item 5: --tiny trains nothing (the tiers that resolve in seconds) and says that
    # trained differences need the full run.
    from benchmarks.lab import first

    for cfg in cli.PRESETS["tiny"]["configs"].values():
        assert cfg.steps == 0 and cfg.checkpoints == (0,)
    # A hand-made step-0 record: MT-GRPO's Pearson is GRPO's + 0.1 on every seed (resolved), the
    # one-step Δ differs by +0.01 on every batch but one (+0.03): mean +0.0125, resolved.
    per = lambda v: {"per_seed": v, "mean": float(np.mean(v))}  # noqa: E731
    record = {"tasks": {"refine": {
        "methods": {"grpo": {"label": "GRPO"}, "mt_grpo": {"label": "MT-GRPO"}},
        "lab": {"credit": {"0": {"grpo": {"pearson": per([0.1, 0.2, 0.3, 0.4])},
                                 "mt_grpo": {"pearson": per([0.2, 0.3, 0.4, 0.5])}}}}}}}
    g = [0.0, 0.01, 0.02, 0.03, 0.0, 0.01, 0.02, 0.03]
    one = {"tasks": {"refine": {"alphas": [0.3], "checkpoints": {"0": {"methods": {
        "grpo": {"delta": [g]},
        "mt_grpo": {"delta": [[x + (0.03 if i == 0 else 0.01) for i, x in enumerate(g)]]}}}}}}}
    lines = first.answer(record, one, {"mt_grpo": {"delayed": (1.0, 0.75)}}, ["grpo", "mt_grpo"])
    assert "NOT measured here" in lines[0] and "make demo" in lines[0]
    assert lines[1].startswith("first answer [refine] MT-GRPO vs GRPO: step-0 Pearson with A* "
                               "minus GRPO's +0.10 [+0.10, +0.10] (resolved) over 4 seeds")
    assert "one-step Δ(α=0.3) minus GRPO's +0.0125" in lines[1] and "(resolved; 8 batches" in lines[1]
    assert lines[1].endswith("exact tier (uniform policy) cos / sign: delayed +1.00 / 0.75")

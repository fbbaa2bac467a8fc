"""The lab's one-step measure (benchmarks/lab/onestep.py) at CI size: common random numbers and the
unit-normalised step (a rescaled credit gives the same improvement, a zero credit takes no step),
the direction (GRPO's update helps more than its negation), the interval and the prediction
statistics on hand-made records, and the committed table rebuilt from the committed JSON."""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.lab import methods as M
from benchmarks.lab import onestep as O


def _scaled(c):
    return lambda ctx, s: c * M.grpo(ctx, s)


METHODS = (
    M.METHODS["grpo"],
    M.Method("grpo_x3", "3 x GRPO", _scaled(3.0)),
    M.Method("grpo_neg", "-GRPO", _scaled(-1.0)),
    M.Method("zero", "zero credit", lambda ctx, s: jnp.zeros_like(ctx.rollout.scores)),
)


@pytest.fixture(scope="module")
def record():
    setup = dataclasses.replace(O.presets()["tiny"]["probe"], checkpoints=(0, 10), batches=8,
                                alphas=(0.3, 1.0))
    return O.run({"probe": setup}, METHODS)


def test_a_rescaled_credit_takes_the_same_step_and_a_zero_credit_none(record):
    for ck in record["tasks"]["probe"]["checkpoints"].values():
        d = {n: np.asarray(m["delta"]) for n, m in ck["methods"].items()}
        # the same batches and evaluation keys for every method: only the direction matters
        np.testing.assert_allclose(d["grpo_x3"], d["grpo"], atol=1e-6)
        np.testing.assert_array_equal(d["zero"], 0.0)


def test_grpo_helps_more_than_its_negation_at_the_initial_policy(record):
    ck = record["tasks"]["probe"]["checkpoints"]["0"]["methods"]
    for i in range(2):
        assert np.mean(ck["grpo"]["delta"][i]) > np.mean(ck["grpo_neg"]["delta"][i])


def test_summary_pairs_each_method_with_grpo(record):
    s = O.summarize(record)["probe"]["0"]
    assert s["grpo"][0]["vs_grpo"] == (0.0, 0.0, 0.0)
    d = np.asarray(record["tasks"]["probe"]["checkpoints"]["0"]["methods"]["grpo_neg"]["delta"][0])
    g = np.asarray(record["tasks"]["probe"]["checkpoints"]["0"]["methods"]["grpo"]["delta"][0])
    assert s["grpo_neg"][0]["vs_grpo"][0] == pytest.approx(float(np.mean(d - g)))


def test_t_interval_by_hand():
    # x = (1, 2, 3): mean 2, sd 1, t_{0.975, 2} = 4.302653: half-width 4.302653 / √3 = 2.484138.
    m, lo, hi = O.t_interval([1.0, 2.0, 3.0])
    assert m == 2.0
    assert (lo, hi) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)


def _lab(metric, success):
    names = [f"m{i}" for i in range(len(metric))]
    per = lambda v: {"mean": float(np.mean(v)), "per_seed": list(v)}  # noqa: E731
    return {"tasks": {"probe": {
        "kinds": {n: {"control": False} for n in names},
        "methods": {n: {"success": per(s)} for n, s in zip(names, success, strict=True)},
        "lab": {"credit": {"0": {n: {"pearson": per(v)} for n, v in zip(names, metric,
                                                                         strict=True)}}}}}}


def _onestep(deltas):
    return {"tasks": {"probe": {"alphas": [0.3], "checkpoints": {"0": {"methods": {
        f"m{i}": {"delta": [list(d)]} for i, d in enumerate(deltas)}}}}}}


def test_predict_ranks_across_methods_with_a_bootstrap_interval():
    # The metric orders the four methods as their one-step improvement does (Spearman +1 on every
    # resample: each method's values are constant over seeds and batches), and the final success
    # in reverse (−1).
    lab = _lab([[0.1, 0.1], [0.2, 0.2], [0.3, 0.3], [0.4, 0.4]], [[0.9] * 3, [0.5] * 3, [0.3] * 3,
                                                                  [0.1] * 3])
    rec = _onestep([[0.01] * 4, [0.02] * 4, [0.05] * 4, [0.06] * 4])
    p = O.predict(rec, lab)["probe"]
    assert p["metric_vs_onestep"]["pearson"] == (1.0, 1.0, 1.0)
    assert p["onestep_vs_success"]["0"] == (-1.0, -1.0, -1.0)


def test_committed_table_is_what_the_code_makes_from_the_committed_json():
    record = json.loads((O.RESULTS / "onestep.json").read_text())
    lab = json.loads(O.LAB_JSON.read_text())
    assert (O.RESULTS / "onestep.md").read_text() == O.render(record, lab) + "\n"


def test_each_batch_has_its_own_evaluation_key(record):
    # Issue 47 item 5: one key for every batch left the evaluation's noise out of the interval.
    # Each batch's J_b(θ) is on its own key (4 episodes per target here: they differ), and the
    # record says so; the mean J is their mean.
    tr = record["tasks"]["probe"]
    assert tr["eval_keys"] == "per batch"
    for ck in tr["checkpoints"].values():
        jb = np.asarray(ck["J_per_batch"])
        assert jb.shape == (8,) and len(set(jb.tolist())) > 1
        assert ck["J"] == pytest.approx(float(jb.mean()), abs=1e-6)

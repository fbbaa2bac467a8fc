"""The credit-quality benchmark at CI size: the loop trains, and every credit method runs.

One program is compiled for all methods (``benchmarks.quality.train.Runner``), shared by the tests
of this module. The "trains" check uses an easy setting — a 2-symbol code over 6 letters in 6 turns
— on which GRPO lifts held-out success well above the untrained policy's within 80 steps; the
threshold is far below what the run reaches, so the check does not hang on one seed's luck.
"""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.quality import __main__ as cli
from benchmarks.quality import env as E
from benchmarks.quality import judges, report
from benchmarks.quality.methods import METHODS
from benchmarks.quality.train import get_runner

CFG = cli.PRESETS["tiny"]["config"]  # L=2, V=6, K=6, 80 steps
SEEDS = list(range(cli.PRESETS["tiny"]["seeds"]))  # one seed count everywhere: one compilation


@pytest.fixture(scope="module")
def runner():
    # The CLI test below asks for the same configuration and methods: one compilation in all.
    return get_runner(CFG, tuple(METHODS.values()))


def test_loop_trains_above_initial_policy(runner):
    final, curve, infos = runner.run("grpo", SEEDS, steps=CFG.steps)
    initial = float(np.mean(curve[0][1].success))
    trained = float(np.mean(final.success))
    assert initial < 0.05  # the untrained policy almost never solves it
    assert trained > initial + 0.1, (initial, trained)
    assert float(np.mean(final.final_score)) > float(np.mean(curve[0][1].final_score)) + 0.2
    assert np.all(np.isfinite(infos[-1]["loss"]))


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_runs_a_step(runner, name):
    cfg = runner.cfg
    keys = jax.vmap(jax.random.key)(jnp.asarray(SEEDS, dtype=jnp.uint32))
    before = runner.init_state(keys)
    index = [m.name for m in runner.methods].index(name)
    after, info = runner.chunk(before, keys, runner.train_pool, jnp.int32(index))
    assert np.all(np.isfinite(np.asarray(info["loss"])))
    # Credit reached the parameters: the policy changed.
    moved = jax.tree.map(lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))), before, after)
    assert max(jax.tree.leaves(moved)) > 0
    assert np.all(np.asarray(info["adv_abs"]) > 0), f"{name}: all-zero advantages"
    assert cfg.eval_every == np.asarray(info["loss"]).shape[1]


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


def test_summary_interval():
    s = report.summarize([0.2, 0.4, 0.6])
    # mean 0.4, sample sd 0.2, t_{0.975,2} = 4.303: half width 4.303 * 0.2 / sqrt(3)
    assert math.isclose(s["mean"], 0.4) and math.isclose(s["half_width"], 4.303 * 0.2 / math.sqrt(3))
    assert report.summarize([float("nan"), 1.0])["n"] == 1


def test_cli_tiny_writes_results(runner, tmp_path):
    assert cli.main(["--tiny", "--steps", "20", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "quality.json").read_text())
    assert record["seeds"] == SEEDS
    assert set(record["methods"]) == set(METHODS)
    stat = record["methods"]["grpo"]["success"]
    assert len(stat["per_seed"]) == len(SEEDS) and "interval" in stat and "mean" in stat
    assert (tmp_path / "quality.png").stat().st_size > 0

"""The lab's transformer tier (benchmarks/lab/lm.py) at its tiny size: the environment by hand,
the scripted refiner, every method's credit through public credax, and one vmapped run."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks.lab import lm

C = lm.PRESETS["tiny"]["config"]


def test_feedback_by_hand():
    # Answer (1, 2, 3); V = 4 letters 0..3, UNK 4, PASS 5, FAIL 6, FMT 7, STOP 8, PAD 10, S0 11.
    ans = jnp.array([[1, 2, 3]] * 3)
    act = jnp.array([[1, 0, 3], [1, 9, 3], [8, 1, 1]])
    env, score, fmt, stop = lm._feedback(C, act, ans)
    # row 0: PASS FAIL PASS, score 2 -> token S0 + 2 = 13, 2/3; row 1: a non-letter: FMT x3, S0,
    # score 0; row 2: STOP: no feedback (PAD), not a format error.
    np.testing.assert_array_equal(np.asarray(env), [[5, 6, 5, 13], [7, 7, 7, 11], [10, 10, 10, 10]])
    np.testing.assert_allclose(np.asarray(score), [2 / 3, 0.0, 0.0], atol=1e-7)  # row 2: none right
    assert fmt.tolist() == [False, True, False] and stop.tolist() == [False, False, True]


def test_training_and_evaluation_answers_are_every_answer_once():
    # The first version held out every 4th row of this grid: with V = 4 that is exactly the
    # answers whose last letter is V - 1, never seen in training (RL learned to avoid it).
    # Now both draw from all V ** L answers, each once.
    ans = np.asarray(lm.targets(C))
    assert ans.shape == (C.alphabet ** C.length, C.length)
    assert len({tuple(r) for r in ans}) == C.alphabet ** C.length
    for i in range(C.length):  # every letter at every position, equally often
        counts = np.bincount(ans[:, i], minlength=C.alphabet)
        assert counts.tolist() == [C.alphabet ** (C.length - 1)] * C.alphabet


def test_a_tuning_run_takes_a_method_subset_and_disjoint_seeds(tmp_path):
    import json

    import pytest

    assert lm.main(["--tiny", "--methods", "grpo,mt_grpo", "--first-seed", "1000",
                    "--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "lm-tiny.json").read_text())
    assert list(rec["methods"]) == ["grpo", "mt_grpo"] and list(rec["vs_grpo"]) == ["mt_grpo"]
    assert rec["first_seed"] == 1000
    assert "seeds 1000-1001 (tuning, not a verdict)" in (tmp_path / "lm-tiny.md").read_text()
    with pytest.raises(ValueError, match="must start with 'grpo'"):
        lm.run(C, 1, methods=("mt_grpo",))


def test_the_layout_and_the_scripted_refiner():
    train = lm.targets(C)
    pr, ans, groups = lm._batch_answers(C, jax.random.key(1), train)
    ep = lm.rollout(C, lm.scripted_policy(C, ans, pr), jax.random.key(2), pr, ans)
    # The scripted refiner never makes a format error and copies the hints.
    assert not bool(ep.fmt.any())
    first = ep.tokens[:, C.prompt_len:C.prompt_len + C.length]
    hinted = pr[:, 1:] != lm._ids(C)["UNK"]
    assert bool(jnp.all(jnp.where(hinted, first == ans, True)))
    # token_turn (credax.token_turn_from_layout): turn k's L action tokens, -1 elsewhere.
    tt = np.asarray(ep.token_turn[0])
    assert (tt[:C.prompt_len] == -1).all()
    assert tt[C.prompt_len:C.prompt_len + C.length].tolist() == [0] * C.length
    assert (tt[C.prompt_len + C.length:C.prompt_len + 2 * C.length + 1] == -1).all()
    # The return: held score minus the cost of the turns that were not a stop.
    n = np.asarray(jnp.sum(ep.turn_mask & ~ep.stop, axis=1))
    np.testing.assert_allclose(np.asarray(ep.ret), np.asarray(ep.held[:, -1]) - C.cost * n,
                               atol=1e-6)


def test_every_method_gives_per_turn_credit():
    train = lm.targets(C)
    model = lm.TinyLM(C, nnx.Rngs(params=jax.random.key(0)))
    pr, ans, groups = lm._batch_answers(C, jax.random.key(3), train)
    ep = lm.rollout(C, lm.model_policy(model), jax.random.key(4), pr, ans)
    adv = lm.credits(C, ep, groups, jax.random.key(5))
    assert adv.shape == (len(lm.METHODS),) + ep.turn_mask.shape
    assert bool(jnp.isfinite(adv).all())
    assert bool(jnp.all(jnp.where(ep.turn_mask[None], True, adv == 0)))


def test_a_tiny_run_trains_every_method_and_seed(tmp_path):
    assert lm.main(["--tiny", "--out", str(tmp_path)]) == 0
    import json

    rec = json.loads((tmp_path / "lm-tiny.json").read_text())
    assert set(rec["methods"]) == set(lm.METHODS) and rec["seeds"] == 2
    for r in rec["methods"].values():
        assert len(r["curve_mean_success"]["per_seed"]) == 2
        assert r["format_errors"]["mean"] is not None
    assert "environment" in rec and (tmp_path / "lm-tiny.md").read_text().startswith("### LM tier")

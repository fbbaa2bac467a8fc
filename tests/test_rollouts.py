"""credax._rollouts: ragged rollouts → padded, bucketed arrays and back (issue 16 §1).

Ground truth: a hand-laid-out batch (derivation in the comments), the unpadded batch for every
padding-invariance check (the same credax function on exact shapes), and trace counters for the
"compiles once per bucket" promise. ``Turn`` carries the sampler's log-probs and ``pad_rollouts``
returns them ``[B, T]`` at the tokens' positions; ``Turn(3, 0.5)`` names the field; a 0-d JAX score
is a number as NumPy's is; ``RolloutLayout.per_token`` refuses to guess when the padded K equals T.

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import Buckets, Rollout, Turn, pad_rollouts
from tests.probes import INF, NAN, Probes, raises


def _random_rollouts(rng: np.random.Generator, n: int, *, max_turns: int = 5, prompts: int = 3,
                     labels=("D", "E", "N", "R", None)) -> list[Rollout]:
    out = []
    for i in range(n):
        turns = []
        for _ in range(int(rng.integers(1, max_turns + 1))):
            turns.append(Turn(
                action=rng.integers(1, 50, int(rng.integers(1, 6))).tolist(),
                score=float(rng.choice([0.0, 0.25, 1 / 3, 0.5, 1.0])),
                observation=rng.integers(1, 50, int(rng.integers(0, 4))).tolist(),
                role=labels[int(rng.integers(len(labels)))],
                reward=float(rng.choice([0.0, 0.1, 1.0])),
                anchor=f"s{int(rng.integers(3))}",
            ))
        out.append(Rollout(f"p{i % prompts}", turns, prompt=rng.integers(1, 50, 3).tolist()))
    return out


# ------------------------------------------------------------------------------------------
# Layout.
# ------------------------------------------------------------------------------------------


def test_hand_laid_out_batch():
    rs = [
        Rollout("a", [Turn([5, 6], 0.5, observation=[9], role="E", reward=0.1, anchor="x"),
                      Turn([7], 1.0, role="decisive", anchor="y")], prompt=[1, 2]),
        Rollout(10**18, [Turn([8], 0.0, anchor="x")], prompt=[3], outcome=0.25),
    ]
    batch, layout = pad_rollouts(rs)
    # Row 0: prompt 1 2 | action 5 6 (turn 0) | observation 9 | action 7 (turn 1)  -> T = 6.
    # Row 1: prompt 3 | action 8 (turn 0) | padding.
    assert layout.shape == (2, 2, 6)
    np.testing.assert_array_equal(batch.tokens, [[1, 2, 5, 6, 9, 7], [3, 8, 0, 0, 0, 0]])
    np.testing.assert_array_equal(batch.token_turn, [[-1, -1, 0, 0, -1, 1], [-1, 0, -1, -1, -1, -1]])
    np.testing.assert_array_equal(batch.mask, np.asarray(batch.token_turn) >= 0)
    np.testing.assert_array_equal(batch.turn_mask, [[True, True], [True, False]])
    np.testing.assert_array_equal(batch.row_mask, [True, True])
    np.testing.assert_array_equal(batch.scores, [[0.5, 1.0], [0.0, 0.0]])
    np.testing.assert_array_equal(batch.roles, [[1, 0], [-1, -1]])
    np.testing.assert_allclose(batch.rewards, [[0.1, 0.0], [0.0, 0.0]])
    np.testing.assert_array_equal(batch.outcome, [1.0, 0.25])  # last score; explicit outcome
    np.testing.assert_array_equal(batch.group_ids, [0, 1])
    assert batch.groups.num_groups == 2
    # anchors: "x" -> 0 in both rows (exact, batch-wide), "y" -> 1; padding -1.
    np.testing.assert_array_equal(batch.anchor_ids, [[0, 1], [0, -1]])
    assert layout.prompt_keys == ["a", 10**18]
    np.testing.assert_array_equal(layout.num_turns, [2, 1])


def test_buckets_round_up_and_mask_padding():
    rs = _random_rollouts(np.random.default_rng(0), 5)
    exact, _ = pad_rollouts(rs)
    batch, layout = pad_rollouts(rs, buckets=Buckets())
    b, k, t = exact.tokens.shape[0], exact.turn_mask.shape[1], exact.tokens.shape[1]
    # Powers of two: 5 -> 8 rows, K -> next power of two, T -> next power of two.
    assert layout.shape == (8, 1 << (k - 1).bit_length(), 1 << (t - 1).bit_length())
    assert not np.asarray(batch.row_mask[b:]).any()
    assert not np.asarray(batch.turn_mask[b:]).any() and not np.asarray(batch.mask[b:]).any()
    assert (np.asarray(batch.token_turn[b:]) == -1).all()
    # Each padding row is a group of its own, disjoint from the real ones.
    ids = np.asarray(batch.group_ids)
    assert len(set(ids[b:])) == 8 - b and not set(ids[b:]) & set(ids[:b])
    assert ids.max() < batch.groups.num_groups == 8
    # The real block equals the exact batch.
    np.testing.assert_array_equal(np.asarray(batch.tokens)[:b, :t], exact.tokens)
    np.testing.assert_array_equal(np.asarray(batch.turn_mask)[:b, :k], exact.turn_mask)
    credax.validate_turns(np.asarray(batch.scores)[:b], np.asarray(batch.turn_mask)[:b],
                          ids[:b], token_turn=np.asarray(batch.token_turn)[:b])


def test_explicit_bucket_sizes_and_overflow():
    rs = _random_rollouts(np.random.default_rng(1), 3, max_turns=2)
    _, layout = pad_rollouts(rs, buckets=Buckets(batch=(2, 4, 16), turns=(4,), tokens=(64, 256)))
    assert layout.shape == (4, 4, 64)
    with pytest.raises(ValueError, match=r"buckets\.batch.*needs 3.*largest bucket 2"):
        pad_rollouts(rs, buckets=Buckets(batch=(2,)))
    with pytest.raises(ValueError, match=r"buckets\.tokens"):
        pad_rollouts(rs, buckets=Buckets(tokens=(0,)))
    with pytest.raises(TypeError, match=r"buckets\.turns"):
        pad_rollouts(rs, buckets=Buckets(turns=8))


# ------------------------------------------------------------------------------------------
# Exact group ids.
# ------------------------------------------------------------------------------------------


def test_prompt_ids_are_exact_never_merged():
    big = 2**40
    ids = [big + 1, 1, "1", 1.0, np.int64(1), (1, "a"), big + 1, True, -(2**63)]
    rs = [Rollout(p, [Turn([1], 0.5)]) for p in ids]
    batch, layout = pad_rollouts(rs)
    # 2**40 + 1 and 1 agree in their low 32 bits: a truncating hash would merge them.
    # "1", 1, 1.0, True are four ids (type and value); np.int64(1) is the int 1.
    np.testing.assert_array_equal(batch.group_ids, [0, 1, 2, 3, 1, 4, 0, 5, 6])
    assert layout.prompt_keys[0] == big + 1 and layout.prompt_keys[6] == -(2**63)


def test_nan_and_unhashable_ids_are_refused():
    with pytest.raises(ValueError, match=r"rollouts\[0\]\.prompt_id.*NaN"):
        pad_rollouts([Rollout(float("nan"), [Turn([1], 0.0)])])
    with pytest.raises(TypeError, match=r"rollouts\[1\]\.prompt_id.*hashable"):
        pad_rollouts([Rollout("a", [Turn([1], 0.0)]), Rollout(["a"], [Turn([1], 0.0)])])
    with pytest.raises(TypeError, match=r"rollouts\[0\]\.turns\[0\]\.anchor"):
        pad_rollouts([Rollout("a", [Turn([1], 0.0, anchor={"s": 1})])])


def test_missing_anchor_is_a_state_of_its_own():
    rs = [Rollout("a", [Turn([1], 0.0, anchor="s"), Turn([1], 0.0)]),
          Rollout("a", [Turn([1], 0.0, anchor="s"), Turn([1], 0.0)])]
    a = np.asarray(pad_rollouts(rs).batch.anchor_ids)
    assert a[0, 0] == a[1, 0] and len({a[0, 1], a[1, 1], a[0, 0]}) == 3


@pytest.mark.parametrize(
    "rollouts, match, exc",
    [
        ([], "empty", ValueError),
        ([Rollout("a", [])], r"rollouts\[0\]\.turns: a rollout needs at least one turn", ValueError),
        ([Rollout("a", [Turn([1], float("nan"))])], r"rollouts\[0\]\.turns\[0\]\.score.*finite",
         ValueError),
        ([Rollout("a", [Turn([1], 0.0), Turn([1], "high")])], r"rollouts\[0\]\.turns\[1\]\.score",
         TypeError),
        ([Rollout("a", [Turn([1], 0.0, reward=float("inf"))])], r"turns\[0\]\.reward", ValueError),
        ([Rollout("a", [Turn([1.5], 0.0)])], r"rollouts\[0\]\.turns\[0\]\.action.*integer",
         TypeError),
        ([Rollout("a", [Turn([1], 0.0, observation=[-3])])], r"turns\[0\]\.observation.*\[0, 2\*\*31\)",
         ValueError),
        ([Rollout("a", [Turn([1], 0.0)], prompt=[2**31])], r"rollouts\[0\]\.prompt", ValueError),
        ([Rollout("a", [Turn([1], 0.0)], outcome=float("nan"))], r"rollouts\[0\]\.outcome",
         ValueError),
        ([Rollout("a", [Turn([1], 0.0, role="maybe")])], r"role.*'maybe' at row 0, turn 0",
         ValueError),
        ([Rollout("a", [(1, 0.0)])], r"rollouts\[0\]\.turns\[0\]` must be a credax.Turn", TypeError),
        (["not a rollout"], r"rollouts\[0\]` must be a credax.Rollout", TypeError),
    ],
)
def test_bad_rollouts_name_the_field(rollouts, match, exc):
    with pytest.raises(exc, match=match):
        pad_rollouts(rollouts)


def test_unknown_role_can_be_unlabeled():
    batch, _ = pad_rollouts([Rollout("a", [Turn([1], 0.0, role="maybe"), Turn([1], 0.0, role="R")])],
                            on_unknown_role="unlabeled")
    np.testing.assert_array_equal(batch.roles, [[-1, 3]])


# ------------------------------------------------------------------------------------------
# Padded == unpadded for the credit methods and the loss.
# ------------------------------------------------------------------------------------------


def _credit(batch):
    grpo = credax.grpo_advantages(batch.outcome, batch.groups, batch.row_mask)
    tcpo = credax.tcpo_advantages(batch.scores, batch.turn_mask, batch.groups).advantages
    triage = credax.triage_advantages(grpo, batch.roles, batch.turn_mask)
    gigpo = credax.gigpo_advantages(batch.outcome, batch.rewards, batch.anchor_ids,
                                    batch.turn_mask, batch.groups)
    mt = credax.mt_grpo_advantages(batch.rewards, batch.outcome, batch.turn_mask, batch.groups)
    return grpo, tcpo, triage, gigpo, mt


def _fake_logp(batch, seed):
    """Deterministic per-token log-probs that depend on the token id and its turn only, so the
    padded and unpadded batches see the same values at the same real tokens."""
    tok = np.asarray(batch.tokens).astype(np.float32)
    turn = np.asarray(batch.token_turn).astype(np.float32)
    return (jnp.asarray(-0.05 * ((tok * (seed + 1) + 3 * turn) % 17) - 0.1),
            jnp.asarray(-0.05 * ((tok * (seed + 2) + turn) % 13) - 0.1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_padded_results_equal_unpadded(seed):
    rs = _random_rollouts(np.random.default_rng(seed), 7, prompts=3)
    exact, lay_e = pad_rollouts(rs)
    padded, lay_p = pad_rollouts(rs, buckets=Buckets(batch=(16,), turns=(8,), tokens=(64,)))
    assert lay_p.shape == (16, 8, 64) and lay_e.shape != lay_p.shape
    for name, e, p in zip(("grpo", "tcpo", "triage", "gigpo", "mt_grpo"), _credit(exact),
                          _credit(padded), strict=True):
        if e.ndim == 1:
            np.testing.assert_allclose(lay_p.per_rollout(p), lay_e.per_rollout(e), rtol=1e-6,
                                       atol=1e-7, err_msg=name)
        else:
            for a, b in zip(lay_p.per_turn(p), lay_e.per_turn(e), strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=name)
            # and exactly 0 on every padded turn and row
            real = np.asarray(padded.turn_mask)
            assert (np.asarray(p)[~real] == 0).all(), name
    # The policy loss: per-turn TCPO advantages and per-row GRPO advantages via token_turn.
    grpo_e, tcpo_e, *_ = _credit(exact)
    grpo_p, tcpo_p, *_ = _credit(padded)
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        for adv_e, adv_p in ((tcpo_e, tcpo_p), (grpo_e, grpo_p)):
            lp_e, old_e = _fake_logp(exact, seed)
            lp_p, old_p = _fake_logp(padded, seed)
            out_e = credax.policy_loss(lp_e, old_e, adv_e, exact.mask, token_turn=exact.token_turn,
                                       options=credax.LossOptions(agg=agg))
            out_p = credax.policy_loss(lp_p, old_p, adv_p, padded.mask,
                                       token_turn=padded.token_turn,
                                       options=credax.LossOptions(agg=agg))
            # Equal up to float32 summation order (the padded sums add more exact zeros, in a
            # different reduction tree): |diff| ~1e-8 on a loss that is itself ~1e-2.
            np.testing.assert_allclose(float(out_p.loss), float(out_e.loss), rtol=1e-6, atol=1e-7,
                                       err_msg=agg)
            for m_e, m_p in zip(out_e.metrics, out_p.metrics, strict=True):
                np.testing.assert_allclose(float(m_p), float(m_e), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------------------
# Recompiles.
# ------------------------------------------------------------------------------------------


def _train_step_and_counter():
    traces = []

    def step(batch, logp, old):
        traces.append(1)  # runs once per trace (compile), never at execution
        grpo = credax.grpo_advantages(batch.outcome, batch.groups, batch.row_mask)
        tcpo = credax.tcpo_advantages(batch.scores, batch.turn_mask, batch.groups).advantages
        adv = credax.triage_advantages(grpo, batch.roles, batch.turn_mask) + tcpo
        return credax.policy_loss(logp, old, adv, batch.mask, token_turn=batch.token_turn).loss

    return jax.jit(step), traces


def _twenty_batches():
    rng = np.random.default_rng(7)
    return [_random_rollouts(rng, int(rng.integers(3, 40)), max_turns=int(rng.integers(1, 9)))
            for _ in range(20)]


def test_buckets_compile_once_per_bucket():
    batches = _twenty_batches()
    step, traces = _train_step_and_counter()
    shapes = set()
    # Traces are counted with .trace (the jit call's own trace cache: a call on a traced shape does
    # not trace again): what XLA would compile for each bucket asserts nothing here, and bucketed
    # batches are executed in test_padded_results_equal_unpadded.
    for rs in batches:
        batch, layout = pad_rollouts(rs, buckets=Buckets())
        shapes.add(layout.shape)
        step.trace(batch, *_fake_logp(batch, 0))
    assert len(traces) == len(shapes) < 20
    # Replaying the same batches traces nothing more.
    for rs in batches:
        batch, _ = pad_rollouts(rs, buckets=Buckets())
        step.trace(batch, *_fake_logp(batch, 0))
    assert len(traces) == len(shapes)


def test_coarse_buckets_compile_at_most_once_per_size():
    # The same 20 batches (3..39 rollouts, 1..8 turns, rows up to 67 tokens) in two batch
    # buckets and one turn / token bucket: at most 2 compiles.
    step, traces = _train_step_and_counter()
    bk = Buckets(batch=(16, 64), turns=(8,), tokens=(128,))
    for rs in _twenty_batches():
        batch, _ = pad_rollouts(rs, buckets=bk)
        step.trace(batch, *_fake_logp(batch, 0))  # counted as above
    assert len(traces) == 2


def test_without_buckets_every_shape_compiles():
    batches = _twenty_batches()
    step, traces = _train_step_and_counter()
    shapes = set()
    for rs in batches:
        batch, layout = pad_rollouts(rs)
        shapes.add(layout.shape)
        # Tracing is what a new shape costs first (a jit call traces exactly when .trace does,
        # through the same cache); XLA's compile of 20 programs adds nothing this test asserts,
        # and exact-shape batches are executed in the padding-equivalence test above.
        step.trace(batch, *_fake_logp(batch, 0))
    assert len(traces) == len(shapes) == 20


# ------------------------------------------------------------------------------------------
# Back to the ragged structure.
# ------------------------------------------------------------------------------------------


def test_round_trip_to_ragged():
    rs = _random_rollouts(np.random.default_rng(3), 6)
    batch, layout = pad_rollouts(rs, buckets=Buckets())
    per_tok = layout.per_token(batch.tokens)  # [B, T] -> each turn's action tokens
    per_turn = layout.per_turn(batch.scores)
    assert len(per_tok) == len(per_turn) == len(rs)
    for r, toks, sc in zip(rs, per_tok, per_turn, strict=True):
        assert [t.tolist() for t in toks] == [list(t.action) for t in r.turns]
        np.testing.assert_array_equal(sc, np.float32([t.score for t in r.turns]))
    # [B, K] credit spread over each turn's action tokens equals broadcast_to_tokens.
    adv = credax.tcpo_advantages(batch.scores, batch.turn_mask, batch.groups).advantages
    via_tokens = layout.per_token(credax.broadcast_to_tokens(adv, batch.token_turn))
    via_turns = layout.per_token(adv)
    for a, b in zip(via_tokens, via_turns, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="values"):
        layout.per_turn(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="values"):
        layout.per_token(np.zeros((layout.shape[0], 5)))


# ------------------------------------------------------------------------------------------
# Turn fields: log-probs, bare numbers, 0-d scores; ids by type and value.
# ------------------------------------------------------------------------------------------


def test_turn_logprobs_come_back_as_old_logp_at_the_tokens_positions():
    # Row 0: prompt [1], action [5, 6] (-0.5, -1.5), observation [9], action [7] (-2.0).
    # Row 1: prompt [2, 2], action [8] (-0.25). Padded to T = 5 (row 0's length).
    rs = [Rollout("q", [Turn([5, 6], 1.0, observation=[9], logprobs=[-0.5, -1.5]),
                        Turn([7], 0.0, logprobs=np.array([-2.0], np.float32))], prompt=[1]),
          Rollout("q", [Turn([8], 0.5, logprobs=(-0.25,))], prompt=[2, 2])]
    batch, layout = credax.pad_rollouts(rs, buckets=Buckets(batch=(4,), tokens=(5,)))
    assert batch.tokens.tolist()[:2] == [[1, 5, 6, 9, 7], [2, 2, 8, 0, 0]]
    assert batch.old_logp.dtype == jnp.float32
    assert batch.old_logp.tolist() == [[0.0, -0.5, -1.5, 0.0, -2.0], [0.0, 0.0, -0.25, 0.0, 0.0],
                                       [0.0] * 5, [0.0] * 5]
    # Per action token back through the layout, and straight into the loss as old_logp.
    assert [t.tolist() for t in layout.per_token(batch.old_logp, axis="tokens")[0]] == [[-0.5, -1.5],
                                                                                         [-2.0]]
    adv = credax.grpo_advantages(batch.outcome, batch.groups, batch.row_mask)
    out = credax.policy_loss(batch.old_logp, batch.old_logp, adv, batch.mask,
                             token_turn=batch.token_turn)
    assert float(out.metrics.mean_ratio) == 1.0
    # The batch is still a pytree with or without log-probs (None has no leaves).
    assert jax.jit(lambda b: b.old_logp.sum())(batch) == pytest.approx(-4.25)
    assert credax.pad_rollouts([Rollout("q", [Turn([1], 1.0)])]).batch.old_logp is None


def test_turn_logprobs_are_checked_naming_the_turn():
    with pytest.raises(ValueError, match=r"rollouts\[0\].turns\[1\].logprobs: one log-prob per action"):
        credax.pad_rollouts([Rollout("q", [Turn([1], 0.0, logprobs=[-1.0]),
                                           Turn([2, 3], 1.0, logprobs=[-1.0])])])
    with pytest.raises(ValueError, match=r"`rollouts\[1\].turns\[0\].logprobs` is missing while "
                                         r"`rollouts\[0\].turns\[0\].logprobs` is given"):
        credax.pad_rollouts([Rollout("q", [Turn([1], 0.0, logprobs=[-1.0])]),
                             Rollout("q", [Turn([2], 1.0)])])
    with pytest.raises(ValueError, match=r"`rollouts\[0\].turns\[0\].logprobs` is missing"):
        credax.pad_rollouts([Rollout("q", [Turn([1], 0.0), Turn([2], 1.0, logprobs=[-1.0])])])
    with pytest.raises(ValueError, match=r"rollouts\[0\].turns\[1\].logprobs\[0\]: must be finite"):
        credax.pad_rollouts([Rollout("q", [Turn([1], 0.0, logprobs=[-1.0]),
                                           Turn([2], 1.0, logprobs=[float("nan")])])])
    with pytest.raises(TypeError, match=r"rollouts\[0\].turns\[0\].logprobs\[1\]: must be a number"):
        credax.pad_rollouts([Rollout("q", [Turn([1, 2], 0.0, logprobs=[-1.0, "x"])])])


@pytest.mark.parametrize("field, value", [("action", 3), ("action", np.int64(3)), ("action", "ab"),
                                          ("observation", 7), ("logprobs", -0.5),
                                          ("action", np.array(3))])
def test_turn_with_a_bare_number_names_the_field(field, value):
    # Before: `Turn(3, 0.5)` built, and pad_rollouts died with "object of type 'int' has no len()".
    kwargs = {"action": [1], "score": 0.5, field: value}
    with pytest.raises(TypeError, match=rf"`Turn.{field}` must be a sequence"):
        Turn(**kwargs)


def test_turn_3_says_how_to_write_one_token():
    with pytest.raises(TypeError, match=r"for one token write \[3\]"):
        Turn(3, 0.5)


@pytest.mark.parametrize("score", [jnp.float32(0.5), jnp.asarray(0.5), np.array(0.5), np.float32(0.5),
                                   jnp.asarray(1, jnp.int32)])
def test_zero_d_scores_are_numbers(score):
    # Before: a 0-d jax.Array (a score computed on the device) was refused as "not a number".
    batch, _ = credax.pad_rollouts([Rollout("p", [Turn([1], score, reward=score)], outcome=score)])
    assert batch.scores.tolist() == [[float(score)]]
    assert batch.outcome.tolist() == [float(score)] and batch.rewards.tolist() == [[float(score)]]


@pytest.mark.parametrize("score", [jnp.asarray(True), np.array(True), jnp.zeros(1), np.zeros((1, 1)),
                                   jnp.asarray(jnp.nan)])
def test_non_scalar_bool_or_nan_arrays_are_still_refused(score):
    with pytest.raises((TypeError, ValueError), match=r"rollouts\[0\].turns\[0\].score"):
        credax.pad_rollouts([Rollout("p", [Turn([1], score)])])


def test_traced_score_is_refused_clearly():
    @jax.jit
    def f(x):
        credax.pad_rollouts([Rollout("p", [Turn([1], x)])])
        return x

    with pytest.raises(TypeError, match="traced value"):
        f(jnp.float32(0.5))


def test_pad_rollouts_ids_compare_by_type_and_value_and_scores_fit_float32():
    # Reported by the reliability round (#27): pad_rollouts had its own id key, which split
    # np.str_("a") from "a", merged (1, "a"), (1.0, "a") and (True, "a"), and took a NaN inside a
    # tuple; a score of 1e39 became inf in the float32 batch.
    one = lambda pid, score=0.5: Rollout(pid, [Turn([1], score)])
    ids = lambda rs: credax.pad_rollouts(rs).batch.group_ids.tolist()
    assert ids([one(np.str_("a")), one("a")]) == [0, 0]
    assert ids([one((1, "a")), one((1.0, "a")), one((True, "a"))]) == [0, 1, 2]
    with pytest.raises(ValueError, match=r"prompt_id\[0\].*NaN"):
        credax.pad_rollouts([one((float("nan"), "a"))])
    with pytest.raises(ValueError, match=r"1e\+39.*float32"):
        credax.pad_rollouts([one("a", 1e39)])


# ------------------------------------------------------------------------------------------
# RolloutLayout.per_token refuses to guess when the padded K equals T.
# ------------------------------------------------------------------------------------------


def _square():
    # K = T = 4 with these buckets: a [B, K] array and a [B, T] array have the same shape.
    rs = [Rollout("p", [Turn([1], 0.1), Turn([2], 0.2), Turn([3, 4], 0.3)])]
    return credax.pad_rollouts(rs, buckets=Buckets(batch=(1,), turns=(4,), tokens=(4,)))


def test_per_token_refuses_to_guess_when_padded_k_equals_t():
    batch, layout = _square()
    assert layout.shape == (1, 4, 4)
    # Before: a [B, K] array was read as [B, T], silently: turn 2 got [scores[0, 2], scores[0, 3]]
    # = [0.3, 0.0] instead of [0.3, 0.3].
    with pytest.raises(ValueError, match="K = T = 4.*axis='tokens' or axis='turns'"):
        layout.per_token(batch.scores)
    by_turn = layout.per_token(batch.scores, axis="turns")
    np.testing.assert_allclose(np.concatenate(by_turn[0]), [0.1, 0.2, 0.3, 0.3], rtol=1e-6)
    assert [t.tolist() for t in layout.per_token(batch.tokens, axis="tokens")[0]] == [[1], [2], [3, 4]]


def test_per_token_axis_is_checked_against_the_shape():
    batch, layout = credax.pad_rollouts([Rollout("p", [Turn([1, 2, 3], 0.1)])])  # K = 1, T = 3
    assert [t.tolist() for t in layout.per_token(batch.tokens)[0]] == [[1, 2, 3]]
    assert [t.tolist() for t in layout.per_token(batch.scores)[0]] == [[pytest.approx(0.1)] * 3]
    with pytest.raises(ValueError, match=r"\[B, K\] = \(1, 1\) \(axis='turns'\)"):
        layout.per_token(batch.tokens, axis="turns")
    with pytest.raises(ValueError, match="`axis` must be"):
        layout.per_token(batch.tokens, axis="token")
    with pytest.raises(ValueError, match=r"\[B, T\] = \(1, 3\) or \[B, K\] = \(1, 1\)"):
        layout.per_token(np.zeros((1, 2)))


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


def _two_rollouts(**turn1):
    good = credax.Rollout("p", [credax.Turn([1, 2], 0.5), credax.Turn([3], 1.0)])
    return [good, credax.Rollout("q", [credax.Turn([4], **({"score": 0.2} | turn1))])]


for _bad in (NAN, INF, -INF, np.float32(NAN), np.float64(-INF)):
    for _field in ("score", "reward"):

        def _p(bad=_bad, field=_field):
            raises(ValueError, rf"rollouts\[1\]\.turns\[0\]\.{field}: must be finite",
                   credax.pad_rollouts, _two_rollouts(**{field: bad}))

        probe("nonfinite", f"pad_rollouts_{_field}_{_bad!r}")(_p)

    def _p(bad=_bad):
        rollouts = [credax.Rollout("p", [credax.Turn([1], 0.5)], outcome=bad)]
        raises(ValueError, r"rollouts\[0\]\.outcome: must be finite", credax.pad_rollouts, rollouts)

    probe("nonfinite", f"pad_rollouts_outcome_{_bad!r}")(_p)


@probe("nonfinite", "pad_rollouts_nan_ids")
def _():
    # NaN != NaN: as a prompt or anchor id it would make a group of its own per row.
    raises(ValueError, r"rollouts\[0\]\.prompt_id: NaN is not a usable id",
           credax.pad_rollouts, [credax.Rollout(NAN, [credax.Turn([1], 0.5)])])
    raises(ValueError, r"rollouts\[1\]\.turns\[0\]\.anchor: NaN is not a usable id",
           credax.pad_rollouts, _two_rollouts(anchor=NAN))


@probe("nonfinite", "layout_maps_back_exactly")
def _():
    # Rows: "p" (turns [1, 2] and [3]), "q" (turn [4]), then two padding rows (batch bucket 4).
    # Values at real turns/tokens come back as given, NaN/inf included; padding never does.
    padded = credax.pad_rollouts(_two_rollouts(), buckets=credax.Buckets(batch=(4,)))
    layout = padded.layout
    b, k, t = layout.shape
    assert (b, k) == (4, 2) and t >= 3
    turns = np.full((b, k), NAN)
    turns[0] = [0.25, INF]
    turns[1, 0] = -INF
    out = layout.per_turn(turns)
    np.testing.assert_array_equal(out[0], [0.25, INF])
    np.testing.assert_array_equal(out[1], [-INF])
    tokens = layout.per_token(turns)  # [B, K]: each action token gets its turn's value
    np.testing.assert_array_equal(np.concatenate(tokens[0]), [0.25, 0.25, INF])
    np.testing.assert_array_equal(np.concatenate(tokens[1]), [-INF])
    per_tok = np.full((b, t), NAN)
    per_tok[0, :3] = [1.0, NAN, 3.0]  # row "p": tokens 1, 2 | 3 (no prompt, no observation)
    per_tok[1, 0] = 4.0
    tokens = layout.per_token(per_tok)
    np.testing.assert_array_equal(tokens[0][0], [1.0, NAN])
    np.testing.assert_array_equal(tokens[0][1], [3.0])
    np.testing.assert_array_equal(tokens[1][0], [4.0])
    np.testing.assert_array_equal(layout.per_rollout(np.array([INF, 2.0, NAN, NAN])), [INF, 2.0])


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

"""Issue #29 item 1 and #27's RolloutLayout bullet: the tools agree with each other.

`validate_*` accept the padding rows `pad_rollouts` adds (`row_mask=` or the PaddedRollouts
itself); `Turn` carries the sampler's log-probs and `pad_rollouts` returns them `[B, T]` at the
tokens' positions; `Turn(3, 0.5)` names the field; a 0-d JAX score is a number as NumPy's is;
`RolloutLayout.per_token` refuses to guess when the padded K equals T.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import Buckets, Rollout, Turn


def _padded():
    # 3 rollouts -> Buckets() rounds B up to 4: row 3 is padding (no valid turn).
    rs = [Rollout("a", [Turn([1, 2], 0.5), Turn([3], 1.0)]), Rollout("a", [Turn([4], 0.0)]),
          Rollout("b", [Turn([5], 0.25)])]
    return credax.pad_rollouts(rs, buckets=Buckets())


def test_validate_turns_accepts_the_padding_rows_of_pad_rollouts():
    padded = _padded()
    b = padded.batch
    assert b.row_mask.tolist() == [True, True, True, False]
    # Before: the padding row failed "every row needs at least one valid turn", with no way out.
    with pytest.raises(ValueError, match="row 3 has none.*row_mask"):
        credax.validate_turns(b.scores, b.turn_mask, b.groups)
    assert credax.validate_turns(b.scores, b.turn_mask, b.groups, row_mask=b.row_mask) is None
    assert credax.validate_turns(b.scores, b.turn_mask, b.group_ids, row_mask=b.row_mask,
                                 token_turn=b.token_turn) is None
    assert credax.validate_turns(padded) is None
    assert credax.validate_turns(b) is None


def test_validate_turns_with_row_mask_still_checks_real_rows_and_padding():
    b = _padded().batch
    turn_mask = np.asarray(b.turn_mask).copy()
    turn_mask[1, 0] = False  # a real row without a valid turn
    with pytest.raises(ValueError, match="row 1 has none"):
        credax.validate_turns(b.scores, turn_mask, b.groups, row_mask=b.row_mask)
    turn_mask = np.asarray(b.turn_mask).copy()
    turn_mask[3, 0] = True  # a padding row claiming a valid turn
    with pytest.raises(ValueError, match="`turn_mask` must be all false on padding rows.*row 3"):
        credax.validate_turns(b.scores, turn_mask, b.groups, row_mask=b.row_mask)
    scores = np.asarray(b.scores).copy()
    scores[0, 1] = np.nan
    with pytest.raises(ValueError, match=r"scores\[0, 1\] = nan"):
        credax.validate_turns(scores, b.turn_mask, b.groups, row_mask=b.row_mask)
    with pytest.raises(TypeError, match="`row_mask` must be a boolean"):
        credax.validate_turns(b.scores, b.turn_mask, b.groups, row_mask=np.ones(4))
    with pytest.raises(ValueError, match="`row_mask` must have shape"):
        credax.validate_turns(b.scores, b.turn_mask, b.groups, row_mask=np.ones(3, bool))


def test_validators_refuse_a_batch_together_with_arrays_and_missing_arrays():
    padded = _padded()
    with pytest.raises(TypeError, match="already holds `turn_mask`"):
        credax.validate_turns(padded, padded.batch.turn_mask)
    with pytest.raises(TypeError, match="needs `turn_mask`"):
        credax.validate_turns(padded.batch.scores)
    with pytest.raises(TypeError, match="already holds `mask`"):
        credax.validate_rewards(padded, mask=padded.batch.row_mask)
    with pytest.raises(TypeError, match="needs `group_ids`"):
        credax.validate_rewards(padded.batch.outcome)
    with pytest.raises(TypeError, match="already holds `row_mask`"):
        credax.validate_alternatives(np.zeros((4, 2, 1)), None, padded, row_mask=np.ones(4, bool))


def test_validate_rewards_and_alternatives_take_the_padded_batch():
    padded = _padded()
    assert credax.validate_rewards(padded) is None
    # A NaN outcome on a real row is caught through the batch; on the padding row it is ignored.
    b = padded.batch
    assert credax.validate_rewards(b._replace(outcome=b.outcome.at[3].set(jnp.nan))) is None
    with pytest.raises(ValueError, match=r"rewards\[0\] = nan"):
        credax.validate_rewards(b._replace(outcome=b.outcome.at[0].set(jnp.nan)))
    # Alternatives: garbage on the padding row (3) and on padded turns is not checked ...
    alt = np.full((4, 2, 1), 0.5)
    alt[3] = np.inf            # padding row
    alt[1, 1] = np.nan         # row 1 has one turn: turn 1 is padding
    assert credax.validate_alternatives(alt, None, padded) is None
    assert credax.validate_alternatives(alt[:, :1], None, row_mask=padded.batch.row_mask,
                                        score_range=None) is None
    # ... a bad value at a real turn is, and the shape must match the batch's scores.
    alt[0, 1] = 2.0
    with pytest.raises(ValueError, match=r"alt_scores\[0, 1, 0\] = 2.0"):
        credax.validate_alternatives(alt, None, padded)
    with pytest.raises(ValueError, match=r"\[B, K\] = \(4, 2\)"):
        credax.validate_alternatives(np.zeros((4, 3, 1)), None, padded)


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


def test_logprobs_round_trip_through_the_rollouts_file(tmp_path):
    path = tmp_path / "r.jsonl"
    rs = [Rollout("q", [Turn([5, 6], 1.0, logprobs=[-0.5, -1.5]), Turn([7], 0.0, logprobs=[-2.0])]),
          Rollout("q", [Turn([8], 0.5, logprobs=[-0.25])])]
    credax.write_rollouts(path, rs)
    again = credax.read_rollouts(str(path))
    assert [[t.logprobs for t in r.turns] for r in again] == [[[-0.5, -1.5], [-2.0]], [[-0.25]]]
    assert credax.pad_rollouts(again).batch.old_logp.tolist() == [[-0.5, -1.5, -2.0], [-0.25, 0.0, 0.0]]
    credax.write_rollouts(path, [Rollout("q", [Turn([5], 1.0)])])  # none: the key is not written
    assert '"logprobs"' not in path.read_text()
    path.write_text('{"prompt_id": "q", "turns": [{"action": [1, 2], "score": 1, "logprobs": [-1]}]}\n')
    with pytest.raises(credax.RolloutFormatError, match=r"turns\[0\].logprobs.*2 numbers.*got 1 numbers"):
        credax.read_rollouts(str(path))
    path.write_text('{"prompt_id": "q", "turns": [{"action": [1], "score": 1, "logprobs": ["a"]}]}\n')
    with pytest.raises(credax.RolloutFormatError, match=r"turns\[0\].logprobs\[0\]"):
        credax.read_rollouts(str(path))
    with pytest.raises(ValueError, match=r"logprobs\[0\]` must be finite"):
        credax.write_rollouts(path, [Rollout("q", [Turn([5], 1.0, logprobs=[float("-inf")])])])


def test_validate_roles_accepts_the_padding_rows_of_pad_rollouts():
    b = _padded().batch
    roles = np.where(np.asarray(b.turn_mask), 0, -1)
    # Before: validate_roles had no row_mask, so pad_rollouts' padding row always failed.
    with pytest.raises(ValueError, match="row 3 has none"):
        credax.validate_roles(roles, b.turn_mask)
    assert credax.validate_roles(roles, b.turn_mask, row_mask=b.row_mask) is None
    stray = np.asarray(b.turn_mask).copy()
    stray[3, 0] = True
    with pytest.raises(ValueError, match="row 3 is padding"):
        credax.validate_roles(np.zeros_like(roles), stray, row_mask=b.row_mask)
    with pytest.raises(ValueError, match="row_mask"):
        credax.validate_roles(roles, b.turn_mask, row_mask=[True, False])


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

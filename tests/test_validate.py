"""Tests of ``validate_turns`` (SPEC §3): every bad input raises the documented error type, naming
the argument and saying what was expected and what was found; good input (including NaN or
out-of-range values at padded turns) passes and returns None."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax

SCORES = np.array([[0.0, 0.5, 1.0], [0.35, np.nan, 7.0]], np.float32)  # garbage at padding
MASK = np.array([[True, True, True], [True, False, False]])
IDS = np.array([3, -(2**31)])
TOKEN_TURN = np.array([[-1, 0, 1, 2, -1], [0, 0, -1, -1, -1]], np.int32)


def good(**overrides):
    kwargs = dict(scores=SCORES, turn_mask=MASK, group_ids=IDS, token_turn=TOKEN_TURN)
    kwargs.update(overrides)
    return kwargs


def validate(scores, turn_mask, group_ids, **kwargs):
    return credax.validate_turns(scores, turn_mask, group_ids, **kwargs)


def test_valid_batches_pass():
    assert validate(**good()) is None
    assert validate(**good(token_turn=None)) is None
    # jax arrays, int64 ids inside the int32 range, integer scores, a wider score range
    assert validate(jnp.asarray(SCORES), jnp.asarray(MASK), jnp.asarray(IDS)) is None
    assert validate(SCORES, MASK, IDS.astype(np.int64)) is None
    assert validate(np.array([[0, 1, 1]]), np.ones((1, 3), bool), np.array([0])) is None
    assert validate(SCORES * 5, MASK, IDS, score_range=(0.0, 5.0)) is None
    assert validate(np.array([[-3.0, 40.0]]), np.ones((1, 2), bool), np.array([1]),
                    score_range=None) is None
    # boundaries of the range are inside
    assert validate(np.array([[0.0, 1.0]]), np.ones((1, 2), bool), np.array([1])) is None


@pytest.mark.parametrize(
    "overrides, error, match",
    [
        # scores: kind and shape
        (dict(scores=np.array([["a", "b", "c"]] * 2)), TypeError, "`scores`"),
        (dict(scores=np.zeros(3, np.float32)), ValueError, r"`scores`.*\[B, K\]"),
        (dict(scores=np.zeros((2, 3, 1), np.float32)), ValueError, "`scores`"),
        # turn_mask: kind and shape
        (dict(turn_mask=MASK.astype(np.float32)), TypeError, "`turn_mask`.*bool"),
        (dict(turn_mask=MASK.astype(np.int32)), TypeError, "`turn_mask`"),
        (dict(turn_mask=np.ones((2, 4), bool)), ValueError, r"`turn_mask`.*\(2, 3\)"),
        (dict(turn_mask=np.ones((3,), bool)), ValueError, "`turn_mask`"),
        # group_ids: kind, shape, int32 width
        (dict(group_ids=IDS.astype(np.float32)), TypeError, "`group_ids`.*integer"),
        (dict(group_ids=np.array([True, False])), TypeError, "`group_ids`"),
        (dict(group_ids=np.array([1, 2, 3])), ValueError, "`group_ids`.*shape"),
        (dict(group_ids=np.array([[1, 2]])), ValueError, "`group_ids`"),
        (dict(group_ids=np.array([5, 2**32 + 5], np.int64)), ValueError,
         "`group_ids`.*int32.*4294967301"),
        (dict(group_ids=np.array([-(2**31) - 1, 0], np.int64)), ValueError, "`group_ids`.*int32"),
        (dict(group_ids=np.array([0, 2**40], np.uint64)), ValueError, "`group_ids`.*int32"),
        # score values at valid turns
        (dict(scores=np.where(MASK, SCORES, 0).astype(np.float32) * np.array([1, np.nan, 1],
                                                                            np.float32)),
         ValueError, r"`scores`.*finite.*scores\[0, 1\]"),
        (dict(scores=np.array([[0.0, np.inf, 1.0], [0.0, 0.0, 0.0]], np.float32)), ValueError,
         r"`scores`.*finite"),
        (dict(scores=np.array([[0.0, 1.5, 1.0], [0.0, 0.0, 0.0]], np.float32)), ValueError,
         r"`scores`.*\[0.0, 1.0\].*score_range.*scores\[0, 1\] = 1.5"),
        (dict(scores=np.array([[0.0, 0.5, 1.0], [-0.1, 0.0, 0.0]], np.float32)), ValueError,
         r"scores\[1, 0\]"),
        # prefix-contiguous masks, at least one valid turn per row
        (dict(turn_mask=np.array([[True, False, True], [True, False, False]]), token_turn=None),
         ValueError, "`turn_mask`.*prefix.*row 0"),
        (dict(turn_mask=np.array([[True, True, True], [False, True, False]]), token_turn=None,
              scores=np.full((2, 3), 0.5, np.float32)),
         ValueError, "`turn_mask`.*prefix.*row 1"),
        (dict(turn_mask=np.array([[True, True, True], [False, False, False]]), token_turn=None),
         ValueError, "`turn_mask`.*at least one valid turn.*row 1"),
        # token_turn: kind, shape, range, points at valid turns
        (dict(token_turn=TOKEN_TURN.astype(np.float32)), TypeError, "`token_turn`.*integer"),
        (dict(token_turn=np.zeros((3, 5), np.int32)), ValueError, "`token_turn`.*B=2"),
        (dict(token_turn=np.zeros(5, np.int32)), ValueError, "`token_turn`"),
        (dict(token_turn=np.array([[-2, 0], [0, 0]])), ValueError,
         r"`token_turn`.*\[-1, K=3\).*token_turn\[0, 0\] = -2"),
        (dict(token_turn=np.array([[0, 3], [0, 0]])), ValueError, r"`token_turn`.*\[-1, K=3\)"),
        (dict(token_turn=np.array([[0, 2], [0, 1]])), ValueError,
         r"`token_turn`.*valid turns.*token_turn\[1, 1\] = 1"),
    ],
)
def test_bad_inputs_raise_with_the_argument_name(overrides, error, match):
    with pytest.raises(error, match=match):
        validate(**good(**overrides))


def test_score_range_is_configurable():
    s = np.array([[0.0, 2.0]], np.float32)
    m = np.ones((1, 2), bool)
    with pytest.raises(ValueError, match="score_range"):
        validate(s, m, np.array([0]))
    assert validate(s, m, np.array([0]), score_range=(0.0, 2.0)) is None
    with pytest.raises(ValueError, match=r"\[-1.0, 1.5\]"):
        validate(s, m, np.array([0]), score_range=(-1.0, 1.5))
    # non-finite values are rejected even without a range
    with pytest.raises(ValueError, match="finite"):
        validate(np.array([[0.0, np.nan]]), m, np.array([0]), score_range=None)


def test_padded_values_are_not_checked():
    # NaN, inf and out-of-range values at padded turns are allowed: they are never read.
    s = np.array([[0.5, np.nan, np.inf, -7.0]], np.float32)
    assert validate(s, np.array([[True, False, False, False]]), np.array([9])) is None


def test_refuses_traced_values():
    with pytest.raises(TypeError, match="`scores`.*traced.*outside jit"):
        jax.jit(lambda s: validate(s, MASK, IDS))(SCORES)
    with pytest.raises(TypeError, match="`group_ids`.*traced"):
        jax.jit(lambda i: validate(SCORES, MASK, i))(IDS.astype(np.int32))


def test_int64_hashes_that_collide_in_int32_are_reported_not_merged():
    # The 64-bit hashes 5 and 2**32 + 5 wrap to the same int32: validate says so and names
    # the row; credax.groups (the alternative the message offers) keeps them apart.
    ids = np.array([5, 2**32 + 5], np.int64)
    with pytest.raises(ValueError, match=r"row 1 has 4294967301.*credax.groups"):
        validate(np.zeros((2, 1), np.float32), np.ones((2, 1), bool), ids)
    assert credax.group_count(ids).tolist() == [1, 1]


def _message(error, fn, *args, **kwargs) -> str:
    with pytest.raises(error) as info:
        fn(*args, **kwargs)
    return str(info.value)


F32_MASK = MASK.astype(np.float32)


@pytest.mark.parametrize("error, eager, compiled", [
    (TypeError, lambda: validate(SCORES, F32_MASK, IDS), lambda: credax.best_prior(SCORES, F32_MASK)),
    (ValueError, lambda: validate(SCORES[0], MASK, IDS), lambda: credax.best_prior(SCORES[0], MASK[0])),
    (ValueError, lambda: validate(SCORES, MASK, IDS, token_turn=TOKEN_TURN[:1]),
     lambda: credax.broadcast_to_tokens(SCORES, TOKEN_TURN[:1])),
    (TypeError, lambda: validate(SCORES, MASK, IDS, token_turn=TOKEN_TURN.astype(np.float32)),
     lambda: credax.broadcast_to_tokens(SCORES, TOKEN_TURN.astype(np.float32))),
    (TypeError, lambda: credax.validate_roles(np.zeros((2, 3), np.float32), MASK),
     lambda: credax.role_credit(np.zeros((2, 3), np.float32), MASK)),
    (ValueError, lambda: credax.validate_roles(np.zeros(3, np.int32), MASK),
     lambda: credax.role_credit(np.zeros(3, np.int32), MASK)),
    (ValueError, lambda: credax.validate_alternatives(np.zeros((2, 4, 2), np.float32), None, SCORES),
     lambda: credax.counterfactual_credit(SCORES, np.zeros((2, 4, 2), np.float32),
                                          np.ones((2, 4, 2), bool))),
    (ValueError, lambda: credax.validate_alternatives(np.zeros((2, 3), np.float32)),
     lambda: credax.counterfactual_credit(SCORES, np.zeros((2, 3), np.float32), np.ones((2, 3), bool))),
])
def test_eager_and_compiled_checks_are_one_rule(error, eager, compiled):
    # validate_* and the compiled functions check dtypes, shapes and masks with the same
    # functions (credax._checks): the same bad array is refused with the same words.
    assert _message(error, eager) == _message(error, compiled)


def test_bfloat16_values_pass_as_they_do_in_the_estimators():
    # The dtype rule is the estimators' own: bfloat16 is a real dtype (it was refused eagerly).
    r = jnp.array([1.0, 0.0, 0.5], jnp.bfloat16)
    assert credax.validate_rewards(r, np.array([0, 0, 1])) is None
    assert validate(jnp.asarray(SCORES, jnp.bfloat16), MASK, IDS) is None
    assert credax.validate_alternatives(jnp.zeros((2, 3, 2), jnp.bfloat16), None, SCORES) is None
    with pytest.raises(ValueError, match=r"`rewards` must be finite at valid rows; rewards\[1\]"):
        credax.validate_rewards(r.at[1].set(jnp.nan), np.array([0, 0, 1]))

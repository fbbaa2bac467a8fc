"""Tests of the eager validators: ``validate_turns`` (SPEC §3): every bad input raises the documented
error type, naming the argument and saying what was expected and what was found; good input
(including NaN or out-of-range values at padded turns) passes and returns None. ``validate_turns``,
``validate_rewards``, ``validate_alternatives`` and ``validate_roles`` accept the padding rows that
``pad_rollouts`` adds (``row_mask=`` or the PaddedRollouts itself).

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
from credax import Buckets, Rollout, Turn
from tests.probes import INF, NAN, Probes, raises

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


# ------------------------------------------------------------------------------------------
# The validators take the padding rows of pad_rollouts (the batch itself, or row_mask=).
# ------------------------------------------------------------------------------------------


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


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("nonfinite", "validate_rewards")
def _():
    raises(ValueError, r"`rewards` must be finite at valid rows; rewards\[2\]", credax.validate_rewards,
           np.array([1.0, 0.0, INF]), np.array([1, 1, 2]))
    raises(ValueError, r"`rewards` must lie in \[0.0, 1.0\].*reward_range", credax.validate_rewards,
           np.array([1.0, 2.0]), np.array([1, 1]), reward_range=(0, 1))
    raises(ValueError, "`reward_range`", credax.validate_rewards, np.array([1.0]), np.array([1]),
           reward_range=(0, NAN))
    raises(TypeError, "`mask` must be a boolean", credax.validate_rewards, np.array([1.0]),
           np.array([1]), np.array([1.0]))
    raises(ValueError, "`rewards` must be", credax.validate_rewards, np.ones((2, 2, 2)), np.array([1, 1]))
    raises(ValueError, r"rewards\[1, 0\]", credax.validate_rewards, np.array([[0.0, 1.0], [NAN, 1.0]]),
           np.array([1, 1]))
    raises(ValueError, "`group_ids` must have shape", credax.validate_rewards, np.ones(3), np.ones(2, int))
    raises(TypeError, "`group_ids` must be an integer", credax.validate_rewards, np.ones(2), np.ones(2))
    raises(TypeError, "traced", jax.jit(lambda r: credax.validate_rewards(r, np.array([0]))), jnp.ones(1))
    assert credax.validate_rewards(np.array([1.0, NAN]), np.array([4, 4]), np.array([True, False])) is None


@probe("nonfinite", "validate_alternatives")
def _():
    alt = np.array([[[0.0, 1.0], [0.5, NAN]]])
    raises(ValueError, r"`alt_scores` must be finite at valid alternatives; alt_scores\[0, 1, 1\]",
           credax.validate_alternatives, alt)
    assert credax.validate_alternatives(alt, np.array([[[True, True], [True, False]]])) is None
    raises(ValueError, r"`alt_scores` must lie in \[0.0, 1.0\]", credax.validate_alternatives,
           np.array([[[2.0]]]))
    raises(TypeError, "`alt_mask` must be a boolean", credax.validate_alternatives, alt, np.ones(alt.shape))
    raises(ValueError, "`alt_mask` must have shape", credax.validate_alternatives, alt,
           np.ones((1, 2, 3), bool))
    raises(ValueError, r"`alt_scores` must have shape \[B, K, M\] with \[B, K\] = \(1, 3\)",
           credax.validate_alternatives, alt, None, np.zeros((1, 3)))
    raises(ValueError, r"`alt_scores` must be \[B, K, M\] \(ndim 3\)", credax.validate_alternatives,
           np.zeros((2, 2)))


@probe("named", "validate_turns_accepts_groups")
def _():
    g = credax.groups(np.array([7, 7, 3]))
    assert credax.validate_turns(np.zeros((3, 2)), np.ones((3, 2), bool), g) is None
    raises(ValueError, "`group_ids`", credax.validate_turns, np.zeros((2, 2)), np.ones((2, 2), bool), g)


@probe("contract", "validate_turns_nan_range")
def _():
    for rng in ((0, NAN), (NAN, 1), (1, 0)):
        raises(ValueError, "`score_range`", credax.validate_turns, np.array([[5.0]]), np.ones((1, 1), bool),
               np.array([0]), score_range=rng)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()


def test_validate_roles_takes_the_padded_rollouts_as_its_hint_says():
    # Issue 44 item 9: the at-least-one-turn hint says "pass `row_mask=` or the PaddedRollouts",
    # but validate_roles(roles, padded) answered with NumPy's "inhomogeneous shape" (round 4's
    # class 19). The PaddedRollouts (or its RolloutBatch) stands for turn_mask and row_mask, after
    # roles or alone (its own roles).
    rs = [credax.Rollout("a", [credax.Turn([1, 2], 0.5, role=0), credax.Turn([3], 1.0, role=1)]),
          credax.Rollout("a", [credax.Turn([4], 0.0, role=0)])]
    padded = credax.pad_rollouts(rs, buckets=credax.Buckets(batch=(4,), turns=(2,), tokens=(8,)))
    batch = padded.batch
    with pytest.raises(ValueError, match="pass `row_mask=` or the PaddedRollouts"):
        credax.validate_roles(batch.roles, batch.turn_mask)  # the padding rows have no turn
    for args in ((batch.roles, padded), (batch.roles, batch), (padded,), (batch,)):
        credax.validate_roles(*args)
    bad = np.asarray(batch.roles).copy()
    bad[0, 1] = 7
    with pytest.raises(ValueError, match=r"roles\[0, 1\] = 7"):
        credax.validate_roles(bad, padded)
    with pytest.raises(TypeError, match="already holds `turn_mask`"):
        credax.validate_roles(padded, batch.turn_mask)
    with pytest.raises(TypeError, match="needs `turn_mask`"):
        credax.validate_roles(batch.roles)

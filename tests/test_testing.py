"""credax.testing: every checker catches a planted bug of its kind and passes a correct function.

Each buggy function below is a mistake peers actually made (user-issues numbers in the comments).
A test asserts that the checker raises an ``AssertionError`` naming its invariant; the matching
correct function must pass, so no checker is a test that cannot fail or cannot pass. The
strategies are tested for the structure they promise and for reaching each edge case.

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, find, given, settings

import credax
import credax.testing as ct
from tests.probes import Probes

# Small budgets: a planted bug is found within a few examples. Shrinking reruns the function
# hundreds of times, so detection tests pass shrink=False; the tests of the message shrink.
FEW = 15
SMALL = ((3, 2), (5, 3))
ONE = ((5, 3),)  # correct functions: one shape, fewer compilations


def _segment_mean(x, mask, ids, num_segments):
    """Masked per-(segment, column) mean gathered back to rows (ids already dense)."""
    x = jnp.where(mask, x, jnp.zeros_like(x))
    total = jax.ops.segment_sum(x, ids, num_segments)
    count = jax.ops.segment_sum(mask.astype(x.dtype), ids, num_segments)
    mean = jnp.where(count > 0, total / jnp.where(count > 0, count, 1.0), 0.0)
    return mean[ids]


def _dense(group_ids):
    return credax.groups(group_ids).index


# ---- correct user functions ------------------------------------------------------------------


def centred(scores, turn_mask, group_ids):
    """Per-(prompt, turn) centring done right: dense ids, masked sums, a final select."""
    idx = _dense(group_ids)
    mean = _segment_mean(scores, turn_mask, idx, scores.shape[0])
    return jnp.where(turn_mask, scores - mean, jnp.zeros_like(scores))


def row_centred(scores, turn_mask, group_ids):
    """Centre each row on the mean of its valid turns."""
    s = jnp.where(turn_mask, scores, jnp.zeros_like(scores))
    n = jnp.sum(turn_mask, axis=1, keepdims=True).astype(scores.dtype)
    mean = jnp.sum(s, axis=1, keepdims=True) / jnp.maximum(n, 1.0)
    return jnp.where(turn_mask, scores - mean, jnp.zeros_like(scores))


# ---- planted bugs ----------------------------------------------------------------------------


def mean_over_padded_width(scores, turn_mask, group_ids):
    # Divides by the padded width K instead of the number of valid turns (user-issues #15).
    s = jnp.where(turn_mask, scores, jnp.zeros_like(scores))
    mean = jnp.sum(s, axis=1, keepdims=True) / scores.shape[1]
    return jnp.where(turn_mask, scores - mean, jnp.zeros_like(scores))


def mask_multiplied(scores, turn_mask, group_ids):
    # Masks by multiplying: NaN * 0 is NaN, so NaN padding reaches the real turns (user-issues #16).
    m = turn_mask.astype(scores.dtype)
    mean = jnp.sum(scores * m, axis=1, keepdims=True) / jnp.sum(m, axis=1, keepdims=True)
    return jnp.where(turn_mask, scores - mean, jnp.zeros_like(scores))


def padded_rows_counted(scores, turn_mask, group_ids):
    # Counts every row of the group in the mean, valid at that turn or not (user-issues #12).
    idx = _dense(group_ids)
    total = jax.ops.segment_sum(jnp.where(turn_mask, scores, 0.0), idx, scores.shape[0])
    count = jax.ops.segment_sum(jnp.ones_like(scores), idx, scores.shape[0])
    return jnp.where(turn_mask, scores - (total / count)[idx], jnp.zeros_like(scores))


def positional_groups(scores, turn_mask, group_ids):
    # Groups inferred from position (rows 2i, 2i+1 form a group), not from the ids (user-issues #9).
    pos = jnp.arange(scores.shape[0]) // 2
    mean = _segment_mean(scores, turn_mask, pos, scores.shape[0])
    return jnp.where(turn_mask, scores - mean, jnp.zeros_like(scores))


def whole_batch_normalised(scores, turn_mask, group_ids):
    # Normalises over the whole batch instead of per group (user-issues #10).
    s = jnp.where(turn_mask, scores, 0.0)
    n = jnp.maximum(turn_mask.sum(axis=0, keepdims=True), 1).astype(scores.dtype)
    mean = s.sum(axis=0, keepdims=True) / n
    var = (jnp.where(turn_mask, s - mean, 0.0) ** 2).sum(axis=0, keepdims=True) / n
    return jnp.where(turn_mask, (s - mean) / (jnp.sqrt(var) + 1e-6), 0.0)


def whole_batch_centred(scores, turn_mask, group_ids):
    # The baseline is the mean over the whole batch, not over the prompt's group (the README case).
    n = jnp.maximum(turn_mask.sum(axis=0, keepdims=True), 1).astype(scores.dtype)
    mean = jnp.where(turn_mask, scores, 0.0).sum(axis=0, keepdims=True) / n
    return jnp.where(turn_mask, scores - mean, 0.0)


def ids_as_indices(scores, turn_mask, group_ids):
    # Uses raw ids as segment indices: negative or large ids are dropped or clamped, so distinct
    # prompts share statistics and the result depends on the ids' values.
    mean = _segment_mean(scores, turn_mask, group_ids, 8)
    return jnp.where(turn_mask, scores - mean, jnp.zeros_like(scores))


def no_final_select(scores, turn_mask, group_ids):
    # Forgets the final select: padded turns carry -mean (or NaN) into the loss.
    return scores - _segment_mean(scores, turn_mask, _dense(group_ids), scores.shape[0])


def single_where_zscore(scores, turn_mask, group_ids):
    # where(std > 0, x / std, 0) without the inner where: the untaken branch divides by zero and
    # its NaN gradient survives the select (user-issues #16).
    idx = _dense(group_ids)
    mean = _segment_mean(scores, turn_mask, idx, scores.shape[0])
    centred_ = jnp.where(turn_mask, scores - mean, 0.0)
    var = _segment_mean(centred_ * centred_, turn_mask, idx, scores.shape[0])
    std = jnp.sqrt(var)
    return jnp.where(turn_mask & (std > 0), centred_ / std, 0.0)


def exp_of_padding(scores, turn_mask, group_ids):
    # exp of every entry, then a select: exp(NaN padding) makes the masked gradient NaN.
    return jnp.where(turn_mask, jnp.exp(scores) - 1.0, 0.0)


def branches_on_values(scores, turn_mask, group_ids):
    # Python control flow on a value: works eagerly, cannot be traced.
    if float(jnp.max(jnp.where(turn_mask, scores, 0.0))) > 0.5:
        return jnp.where(turn_mask, scores, 0.0)
    return jnp.zeros_like(scores)


_calls = []


def trace_time_state(scores, turn_mask, group_ids):
    # A Python side effect: under jit it runs once per compilation, eagerly on every call.
    _calls.append(1)
    return jnp.where(turn_mask, scores * float(len(_calls)), 0.0)


def counts_masked_rows(scores, turn_mask, group_ids):
    # Centres on a mean that divides by all rows of the group at that turn, valid or not.
    idx = _dense(group_ids)
    total = jax.ops.segment_sum(jnp.where(turn_mask, scores, 0.0), idx, scores.shape[0])
    count = jax.ops.segment_sum(jnp.ones_like(scores), idx, scores.shape[0])
    return jnp.where(turn_mask, scores - (total / jnp.maximum(count, 1.0))[idx], 0.0)


# ---- each checker: planted bug caught, correct function passes -----------------------------


def _caught(check, fn, invariant, *, shrink=False, max_examples=FEW, **kw):
    with pytest.raises(AssertionError) as info:
        check(fn, max_examples=max_examples, shapes=SMALL, shrink=shrink, **kw)
    message = str(info.value)
    assert message.startswith(f"{invariant} violated:"), message
    header = ("minimal counterexample (hypothesis-shrunk):" if shrink
              else "counterexample (first found; shrink=False):")
    assert header in message, message
    assert "TurnBatch B=" in message
    return message


@pytest.mark.parametrize("bug", [mean_over_padded_width, padded_rows_counted])
def test_padding_invariance_catches(bug):
    _caught(ct.check_padding_invariance, bug, "padding invariance")


def test_padding_invariance_catches_multiplied_masks_eagerly():
    # Under jit, XLA's simplifier rewrites x * convert(mask) into a select and the NaN never
    # appears (measured on CPU, jax 0.10.2); eagerly it does. jit=False tests the code as written.
    msg = _caught(ct.check_padding_invariance, mask_multiplied, "padding invariance", jit=False,
                  shrink=True)
    assert "replaced the values at every masked entry" in msg and "before nan, after" in msg


def test_jit_matches_eager_sees_xla_hide_a_multiplied_mask():
    # The same bug, compiled: XLA turns x * convert(mask) into a select, so jit returns finite
    # values where eager returns NaN. The README states this; if XLA changes, this test says so.
    msg = _caught(ct.check_jit_matches_eager, mask_multiplied, "jit matches eager")
    assert "eager nan, jit" in msg


def test_padding_invariance_names_the_perturbation():
    msg = _caught(ct.check_padding_invariance, mean_over_padded_width, "padding invariance",
                  shrink=True)
    assert "appended 2 padded turns to every row" in msg


@pytest.mark.parametrize("fn", [centred, row_centred])
def test_padding_invariance_passes(fn):
    ct.check_padding_invariance(fn, max_examples=FEW, shapes=ONE)


def test_permutation_equivariance_catches():
    msg = _caught(ct.check_permutation_equivariance, positional_groups, "permutation equivariance")
    assert "perm=" in msg


def _position_groups(scores, ids, mask, size):
    """A deliberately buggy estimator: groups of ``size`` consecutive rows (``reshape(-1, G, K)``),
    the ids ignored; centred on each block's mean."""
    x = jnp.where(mask, scores, 0.0).reshape(-1, size, scores.shape[1])
    m = mask.reshape(x.shape)
    mean = x.sum(1, keepdims=True) / jnp.maximum(m.sum(1, keepdims=True), 1).astype(x.dtype)
    return jnp.where(mask, (x - mean).reshape(scores.shape), 0.0)


@pytest.mark.parametrize("size", [2, 4])
def test_permutation_equivariance_catches_a_reshape_at_its_default_shapes(size):
    # Issue 44 item 10: at the old default shapes (4, 3), (7, 4) a reshape by groups of 4 was one
    # block at B = 4 (equivariant) and failed inside the reshape at B = 7; the default now has
    # B = 8 and batches of two or more groups of unequal sizes: the violation is reported.
    with pytest.raises(AssertionError, match="permutation equivariance violated"):
        ct.check_permutation_equivariance(
            lambda s, i, m: _position_groups(s, i, m, size),
            adapter=lambda fn: lambda b: fn(b.scores, b.group_ids, b.turn_mask))


@settings(max_examples=60, deadline=None)
@given(ct.turn_batches())
def test_default_batches_hold_two_or_more_groups_of_unequal_sizes(b):
    _, sizes = np.unique(b.group_ids, return_counts=True)
    assert len(sizes) >= 2 and len(set(sizes.tolist())) >= 2


def test_permutation_equivariance_passes():
    ct.check_permutation_equivariance(centred, max_examples=FEW, shapes=ONE)


def test_group_isolation_catches_batch_normalisation():
    msg = _caught(ct.check_group_isolation, whole_batch_normalised, "group isolation")
    assert "changed other groups' outputs" in msg


def test_group_isolation_catches_ids_used_as_indices():
    # 2·FEW: with the batches of unequal groups (issue 44) and JAX's standard dtype promotion (set
    # by an earlier import of Tunix in the same process) the first 15 examples missed it
    _caught(ct.check_group_isolation, ids_as_indices, "group isolation", max_examples=2 * FEW)


def test_group_isolation_passes():
    ct.check_group_isolation(centred, max_examples=FEW, shapes=ONE)


def test_masked_zero_catches():
    msg = _caught(ct.check_masked_zero, no_final_select, "masked zero")
    assert "expected 0" in msg


def test_masked_zero_passes():
    ct.check_masked_zero(centred, max_examples=FEW, shapes=ONE)


@pytest.mark.parametrize("bug", [single_where_zscore, exp_of_padding])
def test_finite_gradients_catches(bug):
    msg = _caught(ct.check_finite_gradients, bug, "finite gradients")
    assert "grad_scores[" in msg


def straight_through(scores, turn_mask, group_ids):
    # A straight-through row term: 0 in value, yet every padded score of the row gets gradient.
    ghost = jnp.sum(scores - jax.lax.stop_gradient(scores), axis=1, keepdims=True)
    return jnp.where(turn_mask, scores + ghost, 0.0)


def test_finite_gradients_catches_gradient_into_padding():
    # Finite padding keeps the forward pass clean, so only the gradient check can see the leak.
    msg = _caught(ct.check_finite_gradients, straight_through, "finite gradients",
                  nonfinite_padding=False)
    assert "masked entries of scores receive gradient" in msg


def test_finite_gradients_needs_a_float_output():
    with pytest.raises(TypeError, match="floating output"):
        ct.check_finite_gradients(lambda s, m, g: m.astype(jnp.int32), max_examples=2, shapes=ONE)


def test_finite_gradients_passes():
    ct.check_finite_gradients(centred, max_examples=FEW, shapes=ONE)


def test_jit_matches_eager_catches_value_branches():
    with pytest.raises(AssertionError) as info:
        ct.check_jit_matches_eager(branches_on_values, max_examples=FEW, shapes=SMALL,
                                   shrink=False)
    assert str(info.value).startswith("jit matches eager violated: jax.jit(fn) fails")
    assert isinstance(info.value.__cause__, jax.errors.ConcretizationTypeError)


def test_jit_matches_eager_catches_trace_time_state():
    _calls.clear()
    _caught(ct.check_jit_matches_eager, trace_time_state, "jit matches eager")


def test_jit_matches_eager_passes():
    ct.check_jit_matches_eager(centred, max_examples=FEW, shapes=ONE)


def test_group_zero_mean_catches():
    msg = _caught(ct.check_group_zero_mean, counts_masked_rows, "group zero mean")
    assert "average to" in msg


def test_group_zero_mean_passes_and_is_opt_in():
    ct.check_group_zero_mean(centred, max_examples=FEW, shapes=ONE)
    # A row-wise centring has zero mean per row, not per (group, turn): the check must see it.
    with pytest.raises(AssertionError, match="^group zero mean violated"):
        ct.check_group_zero_mean(row_centred, max_examples=FEW, shapes=ONE, shrink=False)
    # ... yet its valid entries do average to zero over each whole group (rows sum to zero).
    ct.check_group_zero_mean(row_centred, level="group", max_examples=FEW, shapes=SMALL)


# ---- golden counterexample: the README example ---------------------------------------------


def test_counterexample_is_shrunk_and_readable():
    with pytest.raises(AssertionError) as info:
        ct.check_group_isolation(whole_batch_centred, max_examples=FEW, shapes=((2, 1),))
    msg = str(info.value)
    lines = msg.splitlines()
    assert re.fullmatch(r"group isolation violated: new values for group -?\d+ \(rows \[\d\]\) "
                        r"changed other groups' outputs\.", lines[0]), msg
    assert lines[1].startswith("  out[1, 0] (group ") and ": before " in lines[1], msg
    # Both batches printed, one line per row: the leak needs two rows in two groups.
    tables = [i for i, line in enumerate(lines) if line.startswith("TurnBatch B=2 K=1 T=5")]
    assert len(tables) == 2, msg
    rows = [line.split() for line in lines if line[:5].strip().isdigit()]
    assert len(rows) == 4 and rows[0][1] != rows[1][1], msg
    # The hypothesis note does not repeat the batch.
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "TurnBatch" not in notes and "counterexample printed" in notes


def _readme_section():
    # The guide docs/guides/testing.md (it was the README's section before the docs site).
    guide = pathlib.Path(__file__).resolve().parents[1] / "docs" / "guides" / "testing.md"
    text = guide.read_text() if guide.exists() else ""
    start = text.find("# Testing your own credit code")
    assert start >= 0, "docs/guides/testing.md has no credax.testing guide"
    end = text.find("\n# ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_readme_example_output_is_real(capsys):
    section = _readme_section()
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    shown = re.findall(r"```text\n(.*?)```", section, flags=re.S)[0]
    exec(compile(code[0], "README[credax.testing]", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    # Shrinking is derandomized, but where it lands depends on the hypothesis version and on what
    # else the process has imported (hypothesis also draws constants from loaded modules), so in
    # this test session it can settle on other ids, rows or values than a fresh interpreter does.
    # Compare the shape of the message: every number and bracketed list masked, repeated lines
    # (one per changed output) collapsed.
    def skeleton(text):
        lines = []
        for line in text.strip().splitlines():
            line = re.sub(r"\[[^\]]*\]", "[..]", " ".join(line.split()))
            line = re.sub(r"-?\d+(\.\d+)?", "<n>", line)
            if not lines or lines[-1] != line:
                lines.append(line)
        return lines

    assert skeleton(printed) == skeleton(shown), printed
    for block in code[1:]:
        exec(compile(block, "README[credax.testing]", "exec"), {"__name__": "readme"})


# ---- outputs of shape [B] and adapters -------------------------------------------------------


def _outcome(fn):
    return lambda b: fn(b.rewards, b.group_ids, b.row_mask)


def test_outcome_output_is_masked_by_row_mask():
    ct.check_masked_zero(credax.grpo_advantages, adapter=_outcome, max_examples=FEW, shapes=ONE)

    def unmasked(rewards, group_ids, mask):  # ignores the row mask entirely
        return rewards - jnp.mean(rewards)

    with pytest.raises(AssertionError, match="^masked zero violated"):
        ct.check_masked_zero(unmasked, adapter=_outcome, max_examples=FEW, shapes=ONE,
                             shrink=False)


def test_wrong_output_shape_is_a_value_error():
    with pytest.raises(ValueError, match=r"need \[B, K\] \(masked by turn_mask\) or \[B\]"):
        ct.check_masked_zero(lambda s, m, g: s[:, :1], max_examples=2, shapes=SMALL)


def test_adapter_must_return_a_function():
    with pytest.raises(TypeError, match="adapter"):
        ct.check_masked_zero(centred, adapter=lambda fn: 3, max_examples=2)


def test_jit_false_runs_untraceable_functions():
    def host(scores, turn_mask, group_ids):  # NumPy on the host: fine eagerly
        s = np.where(np.asarray(turn_mask), np.asarray(scores), 0.0)
        return jnp.asarray(s)

    ct.check_masked_zero(host, jit=False, max_examples=5, shapes=SMALL)
    with pytest.raises(jax.errors.TracerArrayConversionError):
        ct.check_masked_zero(host, max_examples=5, shapes=SMALL)


# ---- strategies ------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(ct.turn_batches(shapes=((4, 3), (7, 4, 20))))
def test_turn_batches_structure(b):
    B, K = b.turn_mask.shape
    assert (B, K, b.token_turn.shape[1]) in {(4, 3, 11), (7, 4, 20)}
    assert b.scores.dtype == np.float32 and b.rewards.dtype == np.float32
    assert b.group_ids.dtype == np.int32 and b.roles.dtype == np.int32
    assert b.token_turn.dtype == np.int32 and b.turn_mask.dtype == np.bool_
    # Prefix masks, a real turn per row, finite valid scores in [0, 1], a consistent token map:
    # exactly what credax's own eager validator demands.
    credax.validate_turns(b.scores, b.turn_mask, b.group_ids, token_turn=b.token_turn)
    assert np.all((b.rewards >= 0) & (b.rewards <= 1))
    assert np.all((b.roles >= -1) & (b.roles < 4))
    # Every valid turn owns at least one token, tokens are in turn order.
    for i in range(B):
        owned = b.token_turn[i][b.token_turn[i] >= 0]
        assert np.all(np.diff(owned) >= 0)
        assert set(owned.tolist()) == set(range(int(b.turn_mask[i].sum())))


def _group_sizes(b):
    _, counts = np.unique(b.group_ids, return_counts=True)
    return counts


EDGE_CASES = {
    "singleton group": lambda b: (_group_sizes(b) == 1).any(),
    "group of three or more": lambda b: (_group_sizes(b) >= 3).any(),
    "constant group": lambda b: any(
        (b.group_ids == g).sum() > 1 and b.turn_mask[b.group_ids == g][:, 0].all()
        and np.unique(b.scores[b.group_ids == g][:, 0]).size == 1
        and np.unique(b.rewards[b.group_ids == g]).size == 1
        for g in np.unique(b.group_ids)),
    "NaN padding": lambda b: np.isnan(b.scores[~b.turn_mask]).any(),
    "inf padding": lambda b: np.isinf(b.scores[~b.turn_mask]).any(),
    "finite garbage padding": lambda b: (np.abs(b.scores[~b.turn_mask]) == 1e30).any(),
    "negative id": lambda b: (b.group_ids < 0).any(),
    "int32 extreme id": lambda b: np.isin([-(2**31), 2**31 - 1], b.group_ids).any(),
    "unsorted ids": lambda b: (np.diff(b.group_ids.astype(np.int64)) < 0).any(),
    "non-dyadic 0.35": lambda b: (b.scores[b.turn_mask] == np.float32(0.35)).any(),
    "non-dyadic 1/3": lambda b: (b.scores[b.turn_mask] == np.float32(1 / 3)).any(),
    "non-dyadic 0.95": lambda b: (b.rewards == np.float32(0.95)).any(),
    "arbitrary float": lambda b: (~np.isin(b.scores[b.turn_mask], np.float32(
        [0, 1, 0.35, 1 / 3, 0.95, 0.5]))).any(),
    "unlabeled and labelled roles": lambda b: (b.roles[b.turn_mask] == -1).any()
    and (b.roles[b.turn_mask] >= 0).any(),
    "ragged rows": lambda b: np.unique(b.turn_mask.sum(1)).size > 1,
    "full row": lambda b: b.turn_mask.all(axis=1).any(),
    "prompt tokens": lambda b: (b.token_turn[:, 0] == -1).any(),
    "observation tokens between turns": lambda b: any(
        (np.diff(row[row >= 0]) > 0).any() and -1 in row[np.flatnonzero(row >= 0)[0]:
                                                          np.flatnonzero(row >= 0)[-1]]
        for row in b.token_turn),
}


def test_turn_batches_reach_every_edge_case():
    seen = set()

    @settings(max_examples=120, derandomize=True, database=None, deadline=None)
    @given(ct.turn_batches())
    def collect(b):
        seen.update(name for name, predicate in EDGE_CASES.items() if predicate(b))

    collect()
    assert seen == set(EDGE_CASES), set(EDGE_CASES) - seen


def _draw(strategy, n):
    """``n`` derandomized draws of ``strategy`` (no shrinking, unlike ``find``)."""
    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None)
    @given(strategy)
    def collect(b):
        out.append(b)

    collect()
    return out


def test_turn_batches_options():
    batches = _draw(ct.turn_batches(min_turns=0, shapes=((3, 2),)), 30)
    assert any((~b.row_mask).any() for b in batches)  # rows that are all padding occur
    for b in batches:
        credax.validate_turns(b.scores[b.row_mask], b.turn_mask[b.row_mask],
                              b.group_ids[b.row_mask])
    for b in _draw(ct.turn_batches(dense_ids=True, score_range=(-1.0, 2.0),
                                   nonfinite_padding=False, dtype=np.float64), 20):
        assert b.scores.dtype == np.float64 and np.isfinite(b.scores).all()
        assert (b.group_ids >= 0).all() and (b.group_ids < b.group_ids.shape[0]).all()
        assert ((b.scores[b.turn_mask] >= -1) & (b.scores[b.turn_mask] <= 2)).all()
    # The simplest batch (what shrinking aims at): two groups (of 2 rows and 1: every batch of
    # three rows or more holds groups of unequal sizes), one turn per row, zero scores, NaN
    # padding, unlabeled roles, the tightest token layout.
    # (hypothesis's "explain" phase changes what find returns, so it is left out here.)
    simplest = settings(phases=[Phase.generate, Phase.shrink], database=None)
    b = find(ct.turn_batches(shapes=((3, 2),)), lambda b: True, settings=simplest)
    np.testing.assert_array_equal(b.turn_mask, [[True, False]] * 3)
    assert (b.group_ids[:2] == b.group_ids[0]).all() and b.group_ids[2] != b.group_ids[0]
    assert (b.scores[:, 0] == 0).all()
    one_group = find(ct.turn_batches(shapes=((3, 2),), mixed_groups=False), lambda b: True,
                     settings=simplest)
    assert (one_group.group_ids == one_group.group_ids[0]).all()
    assert np.isnan(b.scores[:, 1]).all() and (b.roles == -1).all()
    np.testing.assert_array_equal(b.token_turn[:, :2], [[0, -1]] * 3)


def test_turn_batches_reject_bad_options():
    with pytest.raises(ValueError, match="shapes"):
        ct.turn_batches(shapes=((0, 3),))
    with pytest.raises(ValueError, match="min_turns"):
        ct.turn_batches(min_turns=4, shapes=((2, 3),))
    with pytest.raises(ValueError, match="score_range"):
        ct.turn_batches(score_range=(1.0, 0.0))
    with pytest.raises(TypeError, match="dtype"):
        ct.turn_batches(dtype=np.int32)


def test_token_layouts():
    mask = np.array([[True, True, True], [True, False, False]])
    tight = find(ct.token_layouts(mask, num_tokens=5), lambda tt: True)
    np.testing.assert_array_equal(tight, [[0, 1, 2, -1, -1], [0, -1, -1, -1, -1]])
    spread = find(ct.token_layouts(mask), lambda tt: (tt[0] == -1).sum() > 6)
    credax.validate_turns(np.zeros((2, 3), np.float32), mask, np.zeros(2, np.int32),
                          token_turn=spread)
    with pytest.raises(ValueError, match="cannot hold"):
        ct.token_layouts(mask, num_tokens=2)


def test_describe_batch_is_compact():
    b = _draw(ct.turn_batches(shapes=((2, 2),)), 1)[0]
    text = ct.describe_batch(b)
    assert text.splitlines()[0] == "TurnBatch B=2 K=2 T=8"
    assert repr(b) == text and len(text.splitlines()) == 4


def test_import_credax_does_not_import_testing():
    code = ("import sys, credax; "
            "assert 'credax.testing' not in sys.modules and 'hypothesis' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_checkers_validate_max_examples():
    with pytest.raises(ValueError, match="max_examples"):
        ct.check_masked_zero(centred, max_examples=0)


@pytest.mark.parametrize("name", ct.__all__)
def test_public_names_are_documented(name):
    obj = getattr(ct, name)
    if callable(obj):
        assert obj.__doc__ and obj.__doc__.strip()


def test_derandomized_runs_repeat():
    # Two runs of a failing check report the same counterexample: failures reproduce.
    messages = []
    for _ in range(2):
        with pytest.raises(AssertionError) as info:
            ct.check_masked_zero(no_final_select, max_examples=5, shapes=((2, 2),))
        messages.append(str(info.value))
    assert messages[0] == messages[1]


# --------------------------------------------------------------------------------------------
# The call table (credax.testing.calls): one canonical call per public function.
# --------------------------------------------------------------------------------------------


def test_call_table_imports_without_hypothesis():
    # credax.explain and credax.verl read the table at run time: no hypothesis needed for it,
    # while a checker still says what it needs.
    code = (
        "import sys\n"
        "sys.modules['hypothesis'] = None\n"
        "import credax.testing.calls as calls, credax.explain\n"
        "import credax.testing as ct\n"
        "print(len(calls.CALLS), 'credax.testing.strategies' in sys.modules)\n"
        "try:\n"
        "    ct.check_masked_zero\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    count, message = proc.stdout.splitlines()
    assert count.split() == [str(len(ct.calls.CALLS)), "False"]
    assert message.startswith("credax.testing.check_masked_zero needs hypothesis: pip install")


def test_call_table_has_every_public_estimator():
    functions = [n for n in credax.__all__ if callable(getattr(credax, n))
                 and not isinstance(getattr(credax, n), type)]
    estimators = {n for n in functions if ct.calls.is_estimator(n)}
    assert estimators == set(ct.calls.ESTIMATORS)
    assert len(estimators) >= 20  # every *_advantages and *_credit, group_normalize
    assert not set(ct.calls.ESTIMATORS) & set(ct.calls.TOOLS)
    for label, c in ct.calls.ALL.items():
        assert label.split(":")[0] == c.name and c.name in functions, label


def test_call_table_entry_names_the_missing_field():
    b = ct.calls.example_batch(4, 3, 6)._replace(logp=None)
    with pytest.raises(ValueError, match=r"kl_divergence needs TurnBatch\.logp"):
        ct.calls.CALLS["kl_divergence"](b)
    # the two optional fields with a default stand in for themselves
    b = b._replace(anchors=None, turn_rewards=None)
    np.testing.assert_array_equal(
        ct.calls.CALLS["gigpo_advantages"](b),
        credax.gigpo_advantages(b.rewards, b.scores, b.roles, b.turn_mask, b.group_ids))


def test_call_table_options_override_and_reach_the_inner_call():
    b = ct.calls.example_batch(6, 3, 6, seed=1)
    triage = ct.calls.CALLS["triage_advantages"]
    outcome = credax.grpo_advantages(b.rewards, b.group_ids, b.row_mask,
                                     normalization=credax.presets.VERL)
    np.testing.assert_array_equal(
        triage(b, lam=0.4, nested={"normalization": credax.presets.VERL}),
        credax.triage_advantages(outcome, b.roles, b.turn_mask, lam=0.4))


def test_turn_batch_optional_fields_survive_the_perturbations():
    b = ct.calls.example_batch(4, 3, 6)._replace(alt_scores=None, alt_mask=None)
    assert b.map(np.asarray).alt_scores is None
    np.testing.assert_array_equal(b.map(lambda f: np.asarray(f)[::-1]).anchors, b.anchors[::-1])
    assert "TurnBatch B=4 K=3 T=6" in repr(b)


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


@probe("named", "describe_batch_empty")
def _():
    from credax.testing import TurnBatch, describe_batch

    b = TurnBatch(np.zeros((0, 2), np.float32), np.zeros((0, 2), bool), np.zeros((0,), np.int32),
                  np.zeros((0,), np.float32), np.zeros((0, 2), np.int32), np.zeros((0, 3), np.int32))
    assert describe_batch(b).splitlines()[0] == "TurnBatch B=0 K=2 T=3"


@probe("contract", "token_layouts_gap_mask")
def _():
    hypothesis = pytest.importorskip("hypothesis")
    from credax.testing import token_layouts

    mask = np.array([[False, True, True], [True, False, True]])
    seen = []

    @hypothesis.settings(max_examples=20, database=None)
    @hypothesis.given(token_layouts(mask, num_tokens=9))
    def check(tt):
        seen.append(tt)
        for b in range(2):
            labels = set(tt[b][tt[b] >= 0].tolist())
            assert labels == set(np.flatnonzero(mask[b]).tolist())  # never a padded turn

    check()
    assert seen


def _float32_ids_grpo(rewards, group_ids, mask):
    """Dr. GRPO with ids compared in float32: ids that differ below float32's resolution merge."""
    ids = jnp.asarray(group_ids).astype(jnp.float32)
    same = (ids[:, None] == ids[None, :]) & mask[None, :] & mask[:, None]
    n = same.sum(axis=1).astype(rewards.dtype)
    total = jnp.where(same, rewards[None, :], jnp.zeros((), rewards.dtype)).sum(axis=1)
    mean = total / jnp.maximum(n, jnp.ones((), rewards.dtype))
    return jnp.where(mask, rewards - mean, jnp.zeros((), rewards.dtype))


def _adapter(fn):
    return lambda b: fn(b.rewards, b.group_ids, b.row_mask)


@probe("testing", "group_isolation_catches_float32_ids")
def _():
    import credax.testing as ctest

    with pytest.raises(AssertionError, match="group isolation violated"):
        ctest.check_group_isolation(_float32_ids_grpo, adapter=_adapter, max_examples=50,
                                    shrink=False)


@probe("testing", "group_isolation_passes_exact_ids")
def _():
    import credax.testing as ctest

    ctest.check_group_isolation(credax.grpo_advantages, adapter=_adapter, max_examples=30)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

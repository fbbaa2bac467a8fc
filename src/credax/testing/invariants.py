"""The invariant checkers: each one a complete property test of a user's function.

The first half is the harness they share (running ``fn`` on a batch, comparing, reporting a
shrunk counterexample); the second half the checkers themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from .batch import DEFAULT_MAX_EXAMPLES, DEFAULT_SHAPES, TurnBatch, describe_batch, fmt
from .strategies import ID_VALUES, padded_variant, take_rows, turn_batches, value_strategy

INT32_MAX = np.iinfo(np.int32).max

# --------------------------------------------------------------------------------------------
# Running fn and comparing.
# --------------------------------------------------------------------------------------------


def _caller(fn: Callable, adapter: Callable | None) -> Callable[[TurnBatch], Any]:
    """The function of a batch that the checkers run: ``fn`` itself or ``adapter(fn)``."""
    if not callable(fn):
        raise TypeError(f"`fn` must be callable; got {type(fn).__name__}.")
    if adapter is None:
        return lambda b: fn(b.scores, b.turn_mask, b.group_ids)
    call = adapter(fn)
    if not callable(call):
        raise TypeError("`adapter(fn)` must return a function of a TurnBatch.")
    return call


@functools.lru_cache(maxsize=64)
def _jitted(fn: Callable, adapter: Callable | None) -> Callable[[TurnBatch], Any]:
    # Cached on (fn, adapter) so that all checkers run on one function share its compilations.
    return jax.jit(_caller(fn, adapter))


def _compiled(fn: Callable, adapter: Callable | None, jit: bool) -> Callable[[TurnBatch], Any]:
    # jit by default: a checker calls fn hundreds of times (generation and shrinking), and op-by-op
    # dispatch costs far more than compiling once per shape. check_jit_matches_eager covers the
    # eager path; jit=False is for functions that cannot be traced.
    if not jit:
        return _caller(fn, adapter)
    try:
        return _jitted(fn, adapter)
    except TypeError:  # an unhashable callable: no cache
        return jax.jit(_caller(fn, adapter))


def _to_jax(b: TurnBatch) -> TurnBatch:
    return b.map(jnp.asarray)


def _out_mask(out_shape, b: TurnBatch, what: str = "fn"):
    """The validity mask of an output: ``turn_mask`` for ``[B, K]``, ``row_mask`` for ``[B]``."""
    B, K = b.turn_mask.shape
    if tuple(out_shape) == (B, K):
        return b.turn_mask
    if tuple(out_shape) == (B,):
        return b.row_mask
    raise ValueError(
        f"{what} returned shape {tuple(out_shape)} for a batch with B={B}, K={K}; the checkers "
        "need [B, K] (masked by turn_mask) or [B] (masked by row_mask). Use `adapter` to map "
        "other outputs to one of these."
    )


def _evaluate(call, b: TurnBatch, what: str = "fn") -> tuple[np.ndarray, np.ndarray]:
    out = call(_to_jax(b))
    out = np.asarray(out)
    return out, np.asarray(_out_mask(out.shape, b, what))


def _as_f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _mismatch(expected, got, where, atol, rtol) -> np.ndarray:
    e, g = _as_f64(expected), _as_f64(got)
    with np.errstate(invalid="ignore"):
        close = np.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    return where & ~close


def _entries(bad, expected, got, labels=("expected", "got"), *, ids=None, name: str = "out",
             limit: int = 6) -> str:
    """One line per offending entry (the first ``limit``); ``expected=None`` prints ``got`` only."""
    idx = np.argwhere(bad)
    lines = []
    for index in idx[:limit]:
        index = tuple(int(i) for i in index)
        group = f" (group {int(ids[index[0]])})" if ids is not None else ""
        value = f"{labels[1]} {fmt(np.asarray(got)[index])}"
        if expected is not None:
            value = f"{labels[0]} {fmt(np.asarray(expected)[index])}, {value}"
        lines.append(f"  {name}[{', '.join(map(str, index))}]{group}: {value}")
    if len(idx) > limit:
        lines.append(f"  ... and {len(idx) - limit} more")
    return "\n".join(lines)


_SHRUNK = "minimal counterexample (hypothesis-shrunk):"
_UNSHRUNK = "counterexample (first found; shrink=False):"


def _fail(invariant: str, what: str, details: str, batch: TurnBatch, fields, extra: str = ""):
    msg = (f"{invariant} violated: {what}\n{details}\n"
           f"{_SHRUNK}\n{describe_batch(batch, fields=fields)}")
    if extra:
        msg += "\n" + extra
    raise AssertionError(msg)


def _fields(adapter) -> tuple[str, ...]:
    # The canonical call reads scores only; an adapter may read anything.
    return ("scores",) if adapter is None else ("scores", "rewards", "roles", "token_turn")


class _Case:
    """A drawn case; its repr stays short because the AssertionError already prints it."""

    __slots__ = ("args",)

    def __init__(self, args):
        self.args = args

    def __repr__(self) -> str:
        return "<the counterexample printed in the AssertionError message>"


def _run(name: str, prop, strategy, *, max_examples: int, derandomize: bool, shrink: bool) -> None:
    """Run ``prop`` over ``strategy`` as a hypothesis test with the checker's settings."""
    max_examples = int(max_examples)
    if max_examples < 1:
        raise ValueError(f"`max_examples` must be >= 1; got {max_examples}.")

    def test(case):
        prop(*case.args)

    test.__name__ = test.__qualname__ = name
    # Wrapped inside a composite, not with .map: hypothesis prints mapped values as the call
    # that built them, which would repeat the whole batch in its note.
    test = given(case=st.composite(lambda draw: _Case(draw(strategy)))())(test)
    test = hypothesis.settings(
        max_examples=max_examples,
        derandomize=derandomize,
        database=None,
        deadline=None,
        report_multiple_bugs=False,
        print_blob=False,
        # No "explain" phase: it reruns failing examples under coverage, slow and noisy.
        phases=(hypothesis.Phase.explicit, hypothesis.Phase.reuse, hypothesis.Phase.generate,
                hypothesis.Phase.target) + ((hypothesis.Phase.shrink,) if shrink else ()),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.large_base_example],
    )(test)
    try:
        test()
    except AssertionError as err:
        if not shrink and err.args and isinstance(err.args[0], str):
            err.args = (err.args[0].replace(_SHRUNK, _UNSHRUNK, 1),) + err.args[1:]
        raise


def _batches(shapes, strategy_options):
    return turn_batches(shapes=shapes, **strategy_options)


# --------------------------------------------------------------------------------------------
# Checkers.
# --------------------------------------------------------------------------------------------


def check_padding_invariance(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that padding never changes a real output.

    Three perturbations, each compared with the original on the original's valid entries: new
    values at every masked entry (NaN, inf, huge, zero); ``2`` appended padded rows whose ids join
    existing groups or a new one (padding a batch to a divisible size must not pollute group
    statistics); ``2`` appended padded turns (a padded width must not enter any mean).

    Args:
      fn: ``fn(scores, turn_mask, group_ids) -> [B, K] or [B]``, or any signature with ``adapter``.
      adapter: ``adapter(fn)`` returns a function of a :class:`TurnBatch` (see the module doc).
      shapes: ``(B, K)`` or ``(B, K, T)`` sizes (see :func:`turn_batches`).
      max_examples: hypothesis examples to draw.
      atol, rtol: comparison tolerance (``0, 0`` demands bit-identical outputs).
      jit: run ``fn`` under ``jax.jit`` (fast: one compilation per shape); ``False`` for functions
        that cannot be traced.
      derandomize: a fixed example sequence (reproducible); ``False`` explores anew each run.
      shrink: shrink a failing example to a minimal one (default). Shrinking reruns ``fn``
        hundreds of times; ``False`` reports the first failing example, for fast CI runs.
      **strategy_options: passed to :func:`turn_batches` (``score_range``, ``min_turns``,
        ``nonfinite_padding``, ``dense_ids``, ``dtype``).

    Raises:
      AssertionError: ``padding invariance violated: ...`` with the shrunk counterexample.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_padding_invariance(credax.future_best, max_examples=5,
      ...                             adapter=lambda fn: lambda b: fn(b.scores, b.turn_mask))
    """
    call = _compiled(fn, adapter, jit)
    nonfinite = strategy_options.get("nonfinite_padding", True)
    strategy = padded_variant(_batches(shapes, strategy_options), nonfinite,
                               ("refill", "rows", "turns"))

    def prop(b, v, mode, what):
        out, valid = _evaluate(call, b)
        out_v, _ = _evaluate(call, v)
        B, K = b.turn_mask.shape
        got = out_v[:B, :K] if out.ndim == 2 else out_v[:B]
        bad = _mismatch(out, got, valid, atol, rtol)
        if bad.any():
            _fail("padding invariance", f"{what} changed real outputs.",
                  _entries(bad, out, got, ("before", "after"), ids=b.group_ids), b,
                  _fields(adapter), extra=f"padded batch:\n{describe_batch(v, fields=_fields(adapter))}")

    _run("check_padding_invariance", prop, strategy, max_examples=max_examples,
         derandomize=derandomize, shrink=shrink)


def check_permutation_equivariance(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that permuting the rows permutes the outputs: ``fn(b[perm]) == fn(b)[perm]``.

    Catches groups inferred from position or a reshape instead of the ids (``x.reshape(-1, G,
    K)`` with ``G`` 2 or 4 at the default shapes ``(4, 3)`` and ``(8, 4)``, whose batches hold two
    or more groups of unequal sizes; another ``G`` fails inside its own reshape), and baselines
    taken from "the first rollout of the group". Arguments as :func:`check_padding_invariance`.

    Raises:
      AssertionError: ``permutation equivariance violated: ...`` with the permutation and the
        shrunk counterexample.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_permutation_equivariance(
      ...     credax.group_normalize, max_examples=5,
      ...     adapter=lambda fn: lambda b: fn(b.scores, b.group_ids, b.turn_mask))
    """
    call = _compiled(fn, adapter, jit)

    @st.composite
    def cases(draw):
        b = draw(_batches(shapes, strategy_options))
        perm = np.array(draw(st.permutations(range(b.turn_mask.shape[0]))), dtype=np.int64)
        return b, perm

    def prop(b, perm):
        out, valid = _evaluate(call, b)
        out_p, _ = _evaluate(call, take_rows(b, perm))
        bad = _mismatch(out[perm], out_p, valid[perm], atol, rtol)
        if bad.any():
            _fail("permutation equivariance",
                  f"permuting the rows by perm={perm.tolist()} did not permute the outputs "
                  "(row i of the permuted batch is row perm[i] of the original).",
                  _entries(bad, out[perm], out_p, ("expected", "got"), ids=b.group_ids[perm],
                           name="out_permuted"),
                  b, _fields(adapter))

    _run("check_permutation_equivariance", prop, cases(), max_examples=max_examples,
         derandomize=derandomize, shrink=shrink)


def check_group_isolation(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that a row's output depends only on its own group, and on ids only through equality.

    Three perturbations: new values (scores, reward, roles) at every valid entry of one group, after
    which every *other* group's outputs must be unchanged (catches normalising over the batch
    instead of the group); a renaming of the ids onto other arbitrary int32 values, after which
    nothing may change (catches ids used as array indices, which breaks on negative or sparse ids);
    and a renaming onto consecutive large ids (``2**24 + j``, ``2**30 + j``, near the int32 limits),
    which float32 cannot tell apart (catches ids compared after a cast to float).
    Arguments as :func:`check_padding_invariance`; ``score_range`` bounds the new values too.

    Raises:
      AssertionError: ``group isolation violated: ...`` with the changed group and the shrunk
        counterexample.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_group_isolation(
      ...     credax.grpo_advantages, max_examples=5,
      ...     adapter=lambda fn: lambda b: fn(b.rewards, b.group_ids, b.row_mask))
    """
    call = _compiled(fn, adapter, jit)
    value = value_strategy(strategy_options.get("score_range", (0.0, 1.0)))

    @st.composite
    def cases(draw):
        b = draw(_batches(shapes, strategy_options))
        existing = sorted(set(b.group_ids.tolist()))
        kind = draw(st.sampled_from(("rename", "neighbours", "values")))
        if kind == "rename":
            renamed = draw(st.lists(ID_VALUES, min_size=len(existing), max_size=len(existing),
                                    unique=True))
            lookup = dict(zip(existing, renamed, strict=True))
            ids = np.array([lookup[i] for i in b.group_ids.tolist()], np.int32)
            return (b, b._replace(group_ids=ids), None,
                    f"renaming the group ids by {lookup} changed outputs: ids must act as "
                    "labels only.")
        if kind == "neighbours":
            # Consecutive large ids: distinct int32 values that one float32 cannot tell apart
            # (float32 is exact only up to 2**24), so ids compared after a float cast merge.
            n = len(existing)
            base = draw(st.sampled_from((2**24, 2**30, int(INT32_MAX) - n + 1, -(2**31))))
            order = draw(st.permutations(range(n)))
            lookup = {i: base + j for i, j in zip(existing, order, strict=True)}
            ids = np.array([lookup[i] for i in b.group_ids.tolist()], np.int32)
            return (b, b._replace(group_ids=ids), None,
                    f"renaming the group ids onto neighbouring large ids {lookup} changed outputs: "
                    "ids must be compared exactly (a float32 cast merges ids that differ by less "
                    "than its resolution, such as 2**30 and 2**30 + 1).")
        target = draw(st.sampled_from(existing))
        rows = b.group_ids == target
        scores, rewards, roles = b.scores.copy(), b.rewards.copy(), b.roles.copy()
        for i, k in zip(*np.nonzero(b.turn_mask & rows[:, None]), strict=True):
            scores[i, k] = draw(value)
            roles[i, k] = draw(st.integers(-1, 3))
        for i in np.nonzero(rows & b.row_mask)[0]:
            rewards[i] = draw(value)
        v = b._replace(scores=scores, rewards=rewards, roles=roles)
        return b, v, target, (f"new values for group {target} (rows "
                              f"{np.nonzero(rows)[0].tolist()}) changed other groups' outputs.")

    def prop(b, v, target, what):
        out, valid = _evaluate(call, b)
        out_v, _ = _evaluate(call, v)
        if target is None:
            where = valid
        else:
            other = b.group_ids != target
            where = valid & (other if out.ndim == 1 else other[:, None])
        bad = _mismatch(out, out_v, where, atol, rtol)
        if bad.any():
            _fail("group isolation", what,
                  _entries(bad, out, out_v, ("before", "after"), ids=b.group_ids), b,
                  _fields(adapter),
                  extra=f"perturbed batch:\n{describe_batch(v, fields=_fields(adapter))}")

    _run("check_group_isolation", prop, cases(), max_examples=max_examples,
         derandomize=derandomize, shrink=shrink)


def check_masked_zero(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that the output is exactly ``0`` at every masked entry (never NaN, never garbage).

    Checked on the drawn batch (ragged rows: padded turns) and with ``2`` appended padded rows, so
    a ``[B]`` output is checked on rows that are all padding. Arguments as
    :func:`check_padding_invariance` (no tolerance: the value must be exactly zero).

    Raises:
      AssertionError: ``masked zero violated: ...`` with the entries and the shrunk counterexample.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_masked_zero(credax.best_prior, max_examples=5,
      ...                      adapter=lambda fn: lambda b: fn(b.scores, b.turn_mask))
    """
    call = _compiled(fn, adapter, jit)
    nonfinite = strategy_options.get("nonfinite_padding", True)
    strategy = padded_variant(_batches(shapes, strategy_options), nonfinite,
                               ("none", "rows"))

    def prop(b, v, mode, what):
        out, valid = _evaluate(call, v)
        bad = ~valid & ~(_as_f64(out) == 0)
        if bad.any():
            shown = "." if mode == "none" else f" (the batch below: {what})."
            _fail("masked zero", f"the output is not exactly 0 at masked entries{shown}",
                  _entries(bad, np.zeros(out.shape), out, ("expected", "got"), ids=v.group_ids),
                  v, _fields(adapter))

    _run("check_masked_zero", prop, strategy, max_examples=max_examples,
         derandomize=derandomize, shrink=shrink)


def _cotangent(shape) -> np.ndarray:
    """Fixed, uneven weights in ``[0.5, 1.5)`` for the differentiated sum (one per output entry).

    A plain sum is blind where it is constant: the outputs of a group-centred function sum to
    exactly ``0`` in every group, so ``d sum / d x`` is ``0`` whatever the function does with
    padding (a std that counts padded rows passed). With uneven weights the gradient is a generic
    combination of the Jacobian's rows, zero at an input only when no output depends on it.
    """
    return np.random.default_rng(20261203).uniform(0.5, 1.5, tuple(shape)).astype(np.float32)


def _grads(call, jb: TurnBatch):
    """Gradients of an unevenly weighted sum of the valid outputs (:func:`_cotangent`) with
    respect to scores and rewards."""

    def total(scores, rewards):
        out = call(jb._replace(scores=scores, rewards=rewards))
        if not jnp.issubdtype(out.dtype, jnp.floating):
            raise TypeError(f"check_finite_gradients needs a floating output; got {out.dtype}.")
        out = out.astype(jnp.float32) * _cotangent(out.shape)
        valid = _out_mask(out.shape, jb)
        return jnp.sum(jnp.where(valid, out, jnp.zeros_like(out)))

    return jax.grad(total, argnums=(0, 1))(jb.scores, jb.rewards)


@functools.lru_cache(maxsize=64)
def _jitted_grads(fn: Callable, adapter: Callable | None):
    return jax.jit(functools.partial(_grads, _caller(fn, adapter)))


def check_finite_gradients(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that gradients are finite everywhere and exactly ``0`` at masked entries.

    Differentiates a weighted sum of the valid outputs (fixed uneven weights: a plain sum of
    group-centred outputs is identically ``0`` and would hide a padding leak) with respect to
    every float field of the batch (``scores`` and ``rewards``) on batches with singletons,
    constant groups, NaN/inf padding and appended padded rows. A NaN gradient from a zero-spread
    group (``where(std > 0, x / std, 0)`` without the inner ``where``) or from NaN padding (``exp``
    of a padded value) poisons the whole parameter update; a non-zero gradient at a masked entry
    means padding influences the result. Arguments as :func:`check_padding_invariance`.

    Raises:
      AssertionError: ``finite gradients violated: ...`` with the entries and the shrunk
        counterexample.
      TypeError: the output is not floating (nothing to differentiate).

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_finite_gradients(credax.discounted_returns, max_examples=3,
      ...                           adapter=lambda fn: lambda b: fn(b.scores, b.turn_mask, gamma=0.9))
    """
    call = _caller(fn, adapter)
    if jit:
        try:
            grads = _jitted_grads(fn, adapter)
        except TypeError:  # an unhashable callable: no cache
            grads = jax.jit(functools.partial(_grads, call))
    else:
        grads = functools.partial(_grads, call)
    nonfinite = strategy_options.get("nonfinite_padding", True)
    strategy = padded_variant(_batches(shapes, strategy_options), nonfinite,
                               ("none", "rows"))

    def prop(b, v, mode, what):
        g_scores, g_rewards = grads(_to_jax(v))
        shown = "" if mode == "none" else f" (the batch below: {what})"
        for name, grad, masked in (("scores", g_scores, ~v.turn_mask),
                                   ("rewards", g_rewards, ~v.row_mask)):
            grad = _as_f64(grad)
            nonfinite_at = ~np.isfinite(grad)
            if nonfinite_at.any():
                _fail("finite gradients", f"d sum(w · valid outputs) / d {name} is not finite{shown}.",
                      _entries(nonfinite_at, None, grad, ("", "got"), name=f"grad_{name}",
                               ids=v.group_ids),
                      v, _fields(adapter))
            leak = masked & (grad != 0)
            if leak.any():
                _fail("finite gradients",
                      f"masked entries of {name} receive gradient: padding influences the "
                      f"output{shown}.",
                      _entries(leak, np.zeros(grad.shape), grad, ("expected", "got"),
                               name=f"grad_{name}", ids=v.group_ids),
                      v, _fields(adapter))

    _run("check_finite_gradients", prop, strategy, max_examples=max_examples,
         derandomize=derandomize, shrink=shrink)


def check_jit_matches_eager(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check that ``jax.jit`` traces the function and agrees with eager execution.

    Eager means ``jax.disable_jit()``, which also runs any ``jit`` inside ``fn`` op by op. Catches
    Python control flow on values, host NumPy calls on traced arrays, and trace-time side
    effects. Every entry is compared (NaN matches NaN). Arguments as
    :func:`check_padding_invariance`.

    Raises:
      AssertionError: ``jit matches eager violated: ...``; a tracing error is chained as the cause.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_jit_matches_eager(credax.best_prior, max_examples=2,
      ...                            adapter=lambda fn: lambda b: fn(b.scores, b.turn_mask))
    """
    call = _caller(fn, adapter)
    jitted = _compiled(fn, adapter, jit=True)

    def prop(b):
        with jax.disable_jit():
            eager, _ = _evaluate(call, b)
        try:
            compiled = np.asarray(jitted(_to_jax(b)))
        except Exception as err:  # any tracing failure is the violation; chained below
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise AssertionError(
                f"jit matches eager violated: jax.jit(fn) fails where eager fn runs: "
                f"{type(err).__name__}: {first}\n"
                f"{_SHRUNK}\n{describe_batch(b, fields=_fields(adapter))}"
            ) from err
        if compiled.shape != eager.shape:
            _fail("jit matches eager", f"jit output shape {compiled.shape} != eager "
                  f"{eager.shape}.", "", b, _fields(adapter))
        bad = _mismatch(eager, compiled, np.ones(eager.shape, bool), atol, rtol)
        if bad.any():
            _fail("jit matches eager", "jax.jit(fn) and eager fn disagree.",
                  _entries(bad, eager, compiled, ("eager", "jit"), ids=b.group_ids), b,
                  _fields(adapter))

    _run("check_jit_matches_eager", prop, _batches(shapes, strategy_options).map(lambda b: (b,)),
         max_examples=max_examples, derandomize=derandomize, shrink=shrink)


def check_group_zero_mean(
    fn: Callable,
    *,
    adapter: Callable | None = None,
    level: str = "group_turn",
    min_size: int = 2,
    shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    jit: bool = True,
    derandomize: bool = True,
    shrink: bool = True,
    **strategy_options,
) -> None:
    """Check (opt-in) that outputs average to zero within each group: centred advantages.

    ``level="group_turn"`` averages a ``[B, K]`` output over each (group, turn index) set of valid
    entries — the peer set of a per-(prompt, turn) z-score; ``level="group"`` over all valid
    entries of a group. ``[B]`` outputs are averaged per group. Sets with fewer than ``min_size``
    valid entries are skipped (a singleton has no peer mean to remove: credax gives it ``0``, verl
    keeps its raw score). A set passes when ``|mean| <= atol + rtol * max |value|``.

    Only centred estimators satisfy this (GRPO, RLOO, per-(prompt, turn) normalisation); a sum of
    an outcome advantage and a role bonus (TRIAGE), or MT-GRPO's outcome term over ragged turns,
    need not. Other arguments as :func:`check_padding_invariance`.

    Raises:
      AssertionError: ``group zero mean violated: ...`` with the set, its values and the shrunk
        counterexample.
      ValueError: unknown ``level``.

    Examples:
      >>> import credax, credax.testing as ct
      >>> ct.check_group_zero_mean(
      ...     credax.group_normalize, max_examples=5,
      ...     adapter=lambda fn: lambda b: fn(b.scores, b.group_ids, b.turn_mask))
    """
    if level not in ("group_turn", "group"):
        raise ValueError(f"`level` must be 'group_turn' or 'group'; got {level!r}.")
    call = _compiled(fn, adapter, jit)

    def prop(b):
        out, valid = _evaluate(call, b)
        out = _as_f64(out)
        per_turn = out.ndim == 2 and level == "group_turn"
        for gid in sorted(set(b.group_ids.tolist())):
            rows = b.group_ids == gid
            if out.ndim == 1:
                sets = [(rows & valid, f"group {gid}")]
            elif per_turn:
                sets = [(rows[:, None] & valid & (np.arange(out.shape[1]) == k)[None, :],
                         f"group {gid}, turn {k}") for k in range(out.shape[1])]
            else:
                sets = [(rows[:, None] & valid, f"group {gid} (all valid turns)")]
            for sel, name in sets:
                values = out[sel]
                if values.size < max(int(min_size), 1):
                    continue
                mean = float(np.mean(values))
                if not abs(mean) <= atol + rtol * float(np.max(np.abs(values))):
                    entries = ", ".join(f"out[{', '.join(map(str, i))}]={fmt(out[tuple(i)])}"
                                        for i in np.argwhere(sel).tolist())
                    _fail("group zero mean", f"the outputs of {name} average to {fmt(mean)}, "
                          "not 0.", f"  {entries}", b, _fields(adapter))

    _run("check_group_zero_mean", prop, _batches(shapes, strategy_options).map(lambda b: (b,)),
         max_examples=max_examples, derandomize=derandomize, shrink=shrink)

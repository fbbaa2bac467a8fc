"""The shape contract: every public array function's jaxtyping annotations, checked at run time.

Each public function is rebuilt with its body wrapped in
``jaxtyping.jaxtyped(typechecker=beartype.beartype)``. Functions behind credax's public entry
(host conversion, static options, then ``jax.jit``) are rebuilt around the checked body with
``fn.with_body(...)``, so the contract sees exactly what the body receives — the arguments after
host conversion, traced — and the return value; functions without that entry are wrapped as they
are. Then:

* a well-formed call passes the contract (an annotation that rejects a valid call is wrong: fix
  the annotation, not this test);
* every shape-mismatched call (each array argument in turn gets one more row, one more entry on
  its last axis, or one more axis) is rejected — by the contract (``jaxtyping.TypeCheckError``)
  or by credax's own check, a ``ValueError``/``TypeError`` whose message names an argument of
  the function — unless the call table says the mutated shape is accepted, and why
  (``credax.testing.calls``: each entry's ``free`` shapes).

The calls themselves come from the call table: every canonical call, and its variants.

``credax.nnx.sequence_logprobs`` (the model-facing entry) gets the same two checks on a bigram
model. beartype is a test-only dependency (the ``dev`` extra); credax never imports it.
"""

from __future__ import annotations

import inspect
import re

import beartype
import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

import credax
from credax.testing import calls

B, K, T = 6, 4, 8
# Every field of the batch set, as JAX arrays: what the annotations promise (credax also converts
# NumPy arrays and lists on the host).
BATCH = calls.example_batch(B, K, T, seed=0).map(jnp.asarray)
S, TM = BATCH.scores, BATCH.turn_mask

# name -> (args, kwargs) of one well-formed call: the call table's canonical call of each public
# array function (credax.testing.calls), on BATCH.
CALLS: dict[str, tuple[tuple, dict]] = {name: c.args(BATCH) for name, c in calls.CALLS.items()}
# Second calls: the table's variants, the other annotated forms of a union (advantages [B, K]
# with token_turn, ...).
EXTRA_CALLS: dict[str, tuple[str, tuple, dict]] = {
    label: (c.name, *c.args(BATCH)) for label, c in calls.VARIANTS.items()}

# (function, argument, mutation) -> why the mutated shape is a valid call, from the table
# (Call.free). Mutations: "row" one more row (axis 0), "last" one more entry on the last axis
# (2-D and up), "axis" one more trailing axis. Each entry is a shape the annotation leaves free
# and credax accepts.
ACCEPTED = {(name, arg, how): why for name, c in calls.CALLS.items()
            for arg, hows, why in c.free for how in hows}


def _annotated(fn) -> bool:
    return any("Array" in str(a) for a in getattr(fn, "__annotations__", {}).values())


def public_array_functions() -> list[str]:
    names = []
    for name in credax.__all__:
        fn = getattr(credax, name)
        if inspect.isroutine(fn) and _annotated(getattr(fn, "body", fn)):
            names.append(name)
    return names


def checked(fn):
    """``fn`` with its annotations enforced by jaxtyping + beartype (the same public entry)."""
    contract = jaxtyping.jaxtyped(typechecker=beartype.beartype)
    if hasattr(fn, "with_body"):  # a public entry: the same entry around the checked body
        return fn.with_body(contract(fn.body))
    return contract(fn)


def test_catalogue_covers_every_public_array_function():
    assert sorted(CALLS) == public_array_functions()
    assert {name for name, _, _ in ACCEPTED} <= set(CALLS)
    assert len(ACCEPTED) == 14  # the free shapes of 11 functions (Call.free): none lost
    assert set(ACCEPTED) <= {(_function(label), arg, how) for label, arg, how in MUTATIONS}
    # every public estimator is in the table's estimators, every other function in its tools
    assert {n for n in public_array_functions() if calls.is_estimator(n)} == set(calls.ESTIMATORS)


def test_the_contract_is_enforced():
    # The harness itself can fail: an int array where the annotation says Float, a mask of the
    # wrong length, and a [B] reward with a [B, K] mask are contract errors, raised before the body.
    f = checked(credax.best_prior)
    with pytest.raises(jaxtyping.TypeCheckError, match="scores"):
        f(jnp.zeros((B, K), jnp.int32), TM)
    with pytest.raises(jaxtyping.TypeCheckError):
        f(S, TM[:-1])
    with pytest.raises(jaxtyping.TypeCheckError):
        checked(credax.grpo_advantages)(BATCH.rewards, BATCH.group_ids, TM)


def _call(label):
    if label in CALLS:
        return label, *CALLS[label]
    return EXTRA_CALLS[label]


@pytest.mark.parametrize("label", sorted(CALLS) + sorted(EXTRA_CALLS))
def test_well_formed_calls_pass_the_contract(label):
    name, args, kwargs = _call(label)
    fn = getattr(credax, name)
    # The contract is checked when the body is traced, which lowering does. The contract changes
    # nothing it lets through: the same program as the public function (so the same values on
    # every input), and the same output structure. Comparing the lowered programs instead of
    # running both compiles neither; a checked body that computed anything else would differ.
    if not hasattr(fn, "lower"):  # not a jitted entry (host-side NumPy): compare values
        out, ref = checked(fn)(*args, **kwargs), fn(*args, **kwargs)
        for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        return
    got, want = checked(fn).lower(*args, **kwargs), fn.lower(*args, **kwargs)
    assert got.out_tree == want.out_tree
    assert got.as_text(debug_info=False) == want.as_text(debug_info=False)


def _mutate(x, how):
    x = jnp.asarray(x)
    if how == "row":
        return jnp.concatenate([x, x[:1]], axis=0)
    if how == "last":
        return jnp.concatenate([x, x[..., :1]], axis=-1)
    return x[..., None]


# The calls whose array arguments are mutated: every canonical call, and the variants that pass
# an argument the canonical call leaves out.
MUTATED = {**CALLS, **{label: EXTRA_CALLS[label][1:] for label in ("g2po_advantages:action_valid",)}}


def _function(label):
    return label.split(":")[0]


def _mutations():
    out = []
    for label, (args, kwargs) in sorted(MUTATED.items()):
        name = _function(label)
        params = list(inspect.signature(getattr(credax, name)).parameters)
        named = dict(zip(params, args, strict=False)) | kwargs
        for arg, value in named.items():
            if not isinstance(value, jax.Array) or value.ndim == 0:
                continue
            for how in ("row", "last", "axis"):
                if how == "last" and value.ndim < 2:  # on a 1-D array "last" is "row"
                    continue
                out.append((label, arg, how))
    return out


MUTATIONS = _mutations()


@pytest.mark.parametrize(("label", "arg", "how"), MUTATIONS)
def test_shape_mismatch_is_rejected(label, arg, how):
    args, kwargs = MUTATED[label]
    name = _function(label)
    fn = getattr(credax, name)
    params = list(inspect.signature(fn).parameters)
    args = list(args)
    if arg in kwargs:
        kwargs = kwargs | {arg: _mutate(kwargs[arg], how)}
    else:
        i = params.index(arg)
        args[i] = _mutate(args[i], how)
    if (name, arg, how) in ACCEPTED:
        checked(fn)(*args, **kwargs)  # documented as valid: the contract must let it through
        return
    with pytest.raises((TypeError, ValueError)) as info:
        checked(fn)(*args, **kwargs)
    if info.type is jaxtyping.TypeCheckError:
        return
    names = "|".join(re.escape(p) for p in params)
    assert re.search(rf"`({names})`", str(info.value)), (info.type, str(info.value))


# credax.nnx: the model-facing entry (a Flax NNX model; flax is in the dev extra).
V, TOK, TOKM = BATCH.logits.shape[-1], BATCH.tokens, jnp.ones((B, T), bool)
NNX_MUTATIONS = [(arg, how) for arg in ("tokens", "mask") for how in ("row", "last", "axis")]


@pytest.fixture(scope="module")
def bigram():
    nnx = pytest.importorskip("flax.nnx")
    return nnx.Embed(V, V, rngs=nnx.Rngs(0))  # logits at t: the embedding row of tokens[t]


def test_sequence_logprobs_contract(bigram):
    f = checked(credax.nnx.sequence_logprobs)
    for kwargs in ({}, {"mask": TOKM}, {"mask": TOKM, "temperature": 0.7}):
        np.testing.assert_array_equal(f(bigram, TOK, **kwargs),
                                      credax.nnx.sequence_logprobs(bigram, TOK, **kwargs))


@pytest.mark.parametrize(("arg", "how"), NNX_MUTATIONS)
def test_sequence_logprobs_shape_mismatch_is_rejected(bigram, arg, how):
    inputs = {"tokens": TOK, "mask": TOKM}
    inputs[arg] = _mutate(inputs[arg], how)
    with pytest.raises((TypeError, ValueError)) as info:
        checked(credax.nnx.sequence_logprobs)(bigram, inputs["tokens"], inputs["mask"])
    if info.type is not jaxtyping.TypeCheckError:
        assert re.search(r"`(tokens|mask|model)`", str(info.value)), (info.type, str(info.value))

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
  the function — unless the table below says the mutated shape is accepted, and why.

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

B, K, T, M, V, D, C = 6, 4, 8, 3, 7, 5, 2
_rng = np.random.default_rng(0)
IDS = jnp.asarray([0, 0, 0, 1, 1, 1], jnp.int32)
R = jnp.asarray(_rng.random(B), jnp.float32)
S = jnp.asarray(_rng.random((B, K)), jnp.float32)
TM = jnp.asarray(np.arange(K)[None] < np.array([[4], [3], [2], [1], [4], [2]]))
TT = jnp.asarray(np.minimum(np.arange(T)[None] // 2, K - 1).repeat(B, 0), jnp.int32)
LP = jnp.asarray(-_rng.random((B, T)), jnp.float32)
TOKM = jnp.ones((B, T), bool)
ROLES = jnp.asarray(_rng.integers(-1, 4, (B, K)), jnp.int32)
ALT = jnp.asarray(_rng.random((B, K, M)), jnp.float32)
ALTM = jnp.ones((B, K, M), bool)
LOGITS = jnp.asarray(_rng.normal(size=(B, T, V)), jnp.float32)
TOK = jnp.asarray(_rng.integers(0, V, (B, T)), jnp.int32)
HID = jnp.asarray(_rng.normal(size=(B, T, D)), jnp.float32)
W = jnp.asarray(_rng.normal(size=(D, V)), jnp.float32)
ANCHORS = jnp.asarray(_rng.integers(0, 3, (B, K)), jnp.int32)
VALS = jnp.asarray(_rng.normal(size=(B, T)), jnp.float32)
RC = jnp.asarray(_rng.random((B, C)), jnp.float32)

# name -> (args, kwargs) of one well-formed call. Array arguments are JAX arrays: what the
# annotations promise (credax also converts NumPy arrays and lists on the host).
CALLS: dict[str, tuple[tuple, dict]] = {
    "adjacent_delta_credit": ((S, TM), {}),
    "aggregate": ((LP, TOKM), {"mode": "seq-mean-token-mean"}),
    "anchor_hit_ratio": ((ANCHORS, TM, IDS), {}),
    "best_prior": ((S, TM), {}),
    "broadcast_to_tokens": ((S, TT), {}),
    "counterfactual_credit": ((S, ALT, ALTM), {}),
    "credit_by_role": ((S, ROLES, TM), {}),
    "credit_by_turn": ((S, TM), {}),
    "dead_groups": ((R, IDS), {}),
    "degenerate_groups": ((R, IDS), {}),
    "discount_weights": ((K, 0.9), {}),
    "discounted_returns": ((S, TM), {"gamma": 0.9}),
    "fit_role_constants": ((S, ROLES, TM), {}),
    "future_best": ((S, TM), {}),
    "g2po_advantages": ((R, ANCHORS, TM, IDS), {"action_valid": TM}),
    "gae_advantages": ((LP, VALS, TOKM), {"gamma": 0.9, "lam": R, "bootstrap": R}),
    "gdpo_advantages": ((RC, IDS), {"weights": jnp.ones(C)}),
    "gigpo_advantages": ((R, S, ANCHORS, TM, IDS), {}),
    "group_count": ((IDS, TM), {}),
    "group_mean": ((S, IDS, TM), {}),
    "group_normalize": ((S, IDS, TM), {}),
    "gpg_advantages": ((R, IDS), {"mask": R > 0.1}),
    "grpo_advantages": ((R, IDS), {"mask": R > 0.1}),
    "hgpo_advantages": ((R, S, ANCHORS, TM, IDS), {}),
    "hindsight_credit": ((S, TM, IDS), {}),
    "judge_windows": ((TM,), {"before": 2, "after": 1}),
    "kl_divergence": ((LP, LP * 0.5), {"mask": TOKM}),
    "mt_grpo_advantages": ((S, R, TM, IDS), {}),
    "optimal_mixing_weight": ((S, ROLES, TM), {}),
    "peer_mean": ((S, IDS, TM), {}),
    "policy_loss": ((LP, LP * 0.9, R, TOKM), {"ref_logp": LP, "kl_coef": 0.1}),
    "raw_score_credit": ((S, TM), {}),
    "reinforce_pp_advantages": ((LP, TOKM), {"gamma": 0.9}),
    "reinforce_pp_baseline_advantages": ((R, IDS, TOKM), {}),
    "retrospective_credit": ((S, TM), {}),
    "rloo_advantages": ((R, IDS), {}),
    "role_credit": ((ROLES, TM), {}),
    "scalar_process_advantages": ((R, S, TM), {"lam": 0.5}),
    "select_top_surprisal": ((S, TM, IDS), {"budget": 2, "scope": "group"}),
    "shrinkage_advantages": ((R, IDS), {}),
    "shrinkage_baseline": ((R, IDS), {}),
    "tcpo_advantages": ((S, TM, IDS), {"alt_scores": ALT, "alt_mask": ALTM}),
    "token_entropy": ((LOGITS,), {"mask": TOKM}),
    "token_logprobs": ((LOGITS, TOK), {"mask": TOKM}),
    "token_logprobs_from_hidden": ((HID, W, TOK), {"chunk_size": 3, "mask": TOKM}),
    "triage_advantages": ((R, ROLES, TM), {"whiten": True}),
    "turn_gae_advantages": ((S, VALS, TT, TM), {}),
    "turn_surprisal": ((LP, TT), {"num_turns": K}),
    "turn_values": ((VALS, TT), {"num_turns": K}),
    "unbiased_turn_advantages": ((S, TM, IDS), {"gamma": 0.9}),
    "value_loss": ((VALS, VALS * 0.9, LP, TOKM), {}),
    "vapo_lambda": ((TOKM,), {}),
}
# Second calls: the other annotated forms of a union (advantages [B, K] with token_turn, ...).
EXTRA_CALLS: dict[str, tuple[str, tuple, dict]] = {
    "policy_loss_turns": ("policy_loss", (LP, LP, S, TOKM), {"token_turn": TT, "ratio": "sequence"}),
    "policy_loss_tokens": ("policy_loss", (LP, LP * 0.9, LP, TOKM), {"dual_clip": 3.0}),
    "from_hidden_entropy": ("token_logprobs_from_hidden", (HID, W, TOK), {"with_entropy": True}),
    "select_top_batch": ("select_top_surprisal", (S, TM), {"budget": 3}),
    "group_normalize_rows": ("group_normalize", (R, IDS), {}),
    "group_ids_groups": ("grpo_advantages", (R, credax.groups(IDS)), {}),
    "kl_scalar": ("kl_divergence", (LP[0, 0], LP[0, 1]), {}),
    "gae_turns": ("gae_advantages", (S, S, TM), {}),
    "role_constants_list": ("role_credit", (ROLES, TM), {"constants": [1.0, 0.5, -0.5, -1.0]}),
}

# (function, argument, mutation) -> why the mutated shape is a valid call. Mutations: "row" one
# more row (axis 0), "last" one more entry on the last axis (2-D and up), "axis" one more
# trailing axis. Each entry is a shape the annotation leaves free and credax accepts.
ACCEPTED = {
    ("broadcast_to_tokens", "turn_values", "last"): "K is free: token_turn indexes into it",
    ("broadcast_to_tokens", "token_turn", "last"): "T is free: it sets the output length",
    ("group_count", "mask", "last"): "mask is `B *rest`: any trailing shape",
    ("group_count", "mask", "axis"): "mask is `B *rest`: any trailing shape",
    ("judge_windows", "turn_mask", "row"): "its only array: any [B, K]",
    ("judge_windows", "turn_mask", "last"): "its only array: any [B, K]",
    ("reinforce_pp_baseline_advantages", "response_mask", "last"): "T is free: it sets the output length",
    ("token_entropy", "logits", "last"): "V is free",
    ("token_logprobs", "logits", "last"): "V is free (the tokens stay below it)",
    ("token_logprobs_from_hidden", "unembedding", "last"): "V is free (the tokens stay below it)",
    ("vapo_lambda", "mask", "row"): "its only array: any [B, N]",
    ("vapo_lambda", "mask", "last"): "its only array: any [B, N]",
}


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
    assert set(ACCEPTED) <= set(MUTATIONS)  # no stale exemption


def test_the_contract_is_enforced():
    # The harness itself can fail: an int array where the annotation says Float, a mask of the
    # wrong length, and a [B] reward with a [B, K] mask are contract errors, raised before the body.
    f = checked(credax.best_prior)
    with pytest.raises(jaxtyping.TypeCheckError, match="scores"):
        f(jnp.zeros((B, K), jnp.int32), TM)
    with pytest.raises(jaxtyping.TypeCheckError):
        f(S, TM[:-1])
    with pytest.raises(jaxtyping.TypeCheckError):
        checked(credax.grpo_advantages)(R, IDS, TM)


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


def _mutations():
    out = []
    for name, (args, kwargs) in sorted(CALLS.items()):
        params = list(inspect.signature(getattr(credax, name)).parameters)
        named = dict(zip(params, args, strict=False)) | kwargs
        for arg, value in named.items():
            if not isinstance(value, jax.Array) or value.ndim == 0:
                continue
            for how in ("row", "last", "axis"):
                if how == "last" and value.ndim < 2:  # on a 1-D array "last" is "row"
                    continue
                out.append((name, arg, how))
    return out


MUTATIONS = _mutations()


@pytest.mark.parametrize(("name", "arg", "how"), MUTATIONS)
def test_shape_mismatch_is_rejected(name, arg, how):
    args, kwargs = CALLS[name]
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

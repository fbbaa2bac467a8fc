"""The sweep over every public entry: the other forms of a call, a batch with every field set,
and the one hyperparameter schedule.

The core registry (``credax._registry``) holds one canonical call per public function, what the
bridges and explain read. What only the sweeps read lives here: :data:`FORMS` (a second
annotated form of a union, another option worth a call of its own, each a
:class:`credax._registry.Call` labelled ``"name:form"``), :func:`example_batch` and
:data:`SCHEDULE` (three valid values of every numeric hyperparameter, so an entry of the
registry needs no values of its own). Their readers are the bench sweep (``credax.bench.cases``),
``benchmarks/reproducibility.py`` and the tests (``credax.testing.calls`` adds the tests'
metadata; tests/test_dogfood.py's compile-once sweep): production code may import the bench,
not ``credax.testing``.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

import credax
from credax import _registry, presets
from credax._batch import TurnBatch
from credax._loss_options import LossOptions
from credax._normalization import Normalization

_call, _field = _registry._call, _registry._field
FORMS: dict[str, _registry.Call] = {
    # [B, K] advantages with token_turn, and a sequence ratio.
    "policy_loss:turns": _call(
        "policy_loss", "other", old_logp=_field("logp"), advantages=_field("scores"),
        reads=("token_turn",), options=credax.LossOptions(ratio="sequence"), group_local=False),
    "policy_loss:tokens": _call("policy_loss", "other", advantages=_field("logp"),
                                options=credax.LossOptions(dual_clip=3.0), group_local=False),
    "token_logprobs_from_hidden:entropy": _call(
        "token_logprobs_from_hidden", "other", chunk_size=4, with_entropy=True, group_local=True),
    "select_top_surprisal:batch": _call("select_top_surprisal", "turn", budget=3,
                                        group_local=False),
    "group_normalize:rows": _call("group_normalize", "row", x=_field("rewards"), group_local=True),
    "grpo_advantages:groups": _registry.Call(
        "grpo_advantages", lambda b, ns: _registry._args(b.rewards, ns.groups(b.group_ids)), "row",
        group_local=True),
    # TRL's scale_rewards="batch": the batch std (not group-isolated, by design).
    "grpo_advantages:batch_scale": _call("grpo_advantages", "row",
                                         normalization=presets.TRL_BATCH, group_local=False),
    "kl_divergence:scalar": _call(
        "kl_divergence", "other", logp=lambda b: jnp.max(b.logp),
        ref_logp=lambda b: jnp.min(b.logp), needs=("logp",), group_local=False),
    # Scores as per-turn rewards, half of them as values: a row-wise recursion over turns.
    "gae_advantages:turns": _call(
        "gae_advantages", "turn", rewards=_field("scores"), values=lambda b: 0.5 * b.scores,
        gamma=0.9, lam=0.95, output=_registry._advantages, group_local=True),
    "gae_advantages:scalar_lam": _call("gae_advantages", "other", rewards=_field("logp"),
                                       gamma=1.0, lam=0.95, group_local=True),
    "kl_divergence:turns": _call(
        "kl_divergence", "turn", logp=_field("scores"), ref_logp=lambda b: 0.5 * b.scores,
        reads=("mask",), group_local=True),
    "role_credit:list": _call("role_credit", "turn", constants=[1.0, 0.5, -0.5, -1.0],
                              group_local=True),
    # action_valid by keyword (read from the batch after the required ones, it would go by
    # position).
    "g2po_advantages:action_valid": _registry.Call(
        "g2po_advantages", lambda b, ns: _registry._args(b.rewards, b.anchors, b.turn_mask, b.group_ids,
                                               action_valid=b.turn_mask), "other",
        needs=("anchors",), group_local=True),
    "triage_advantages:whiten": _call("triage_advantages", "turn",
                                      outcome_advantages=_field("rewards"), whiten=True,
                                      group_local=False),
}


def example_batch(batch: int = 6, turns: int = 4, tokens: int = 8, *, seed: int = 0,
                  num_groups: int | None = None, alternatives: int = 3, vocab: int = 7,
                  hidden: int = 5) -> TurnBatch:
    """A random :class:`TurnBatch` with every field set (NumPy), for calls of every entry.

    Rows have 1 to ``turns`` real turns; tokens run over a row's turns in order, every third
    token off the turns (``-1``, an observation token); ``num_groups`` prompt ids (default
    ``batch // 3``); alternatives, log-probs, values, logits, tokens and hidden states random.

    Examples:
      >>> b = example_batch(6, 4, 8)
      >>> b.scores.shape, b.alt_scores.shape, b.logits.shape, b.unembedding.shape
      ((6, 4), (6, 4, 3), (6, 8, 7), (5, 7))
    """
    rng = np.random.default_rng(seed)
    B, K, T = batch, turns, tokens
    n_turns = rng.integers(1, K + 1, B)
    turn_mask = np.arange(K)[None] < n_turns[:, None]
    position = np.arange(T)[None] * n_turns[:, None] // T  # tokens spread over the row's turns
    token_turn = np.where(np.arange(T)[None] % 3 == 2, -1, position).astype(np.int32)
    groups = max(1, B // 3) if num_groups is None else num_groups
    f32 = np.float32
    return TurnBatch(
        scores=rng.random((B, K)).astype(f32),
        turn_mask=turn_mask,
        group_ids=rng.integers(0, groups, B).astype(np.int32),
        rewards=rng.random(B).astype(f32),
        roles=rng.integers(-1, 4, (B, K)).astype(np.int32),
        token_turn=token_turn,
        anchors=rng.integers(0, 3, (B, K)).astype(np.int32),
        turn_rewards=rng.random((B, K)).astype(f32),
        alt_scores=rng.random((B, K, alternatives)).astype(f32),
        alt_mask=rng.random((B, K, alternatives)) < 0.8,
        logp=-rng.random((B, T)).astype(f32),
        values=rng.normal(size=(B, T)).astype(f32),
        logits=rng.normal(size=(B, T, vocab)).astype(f32),
        tokens=rng.integers(0, vocab, (B, T)).astype(np.int32),
        hidden=rng.normal(size=(B, T, hidden)).astype(f32),
        unembedding=(rng.normal(size=(hidden, vocab)) / np.sqrt(hidden)).astype(f32),
    )


# --------------------------------------------------------------------------------------------
# The hyperparameter schedule: three valid values of every numeric hyperparameter.
# --------------------------------------------------------------------------------------------

# Read by the bench sweep (``credax.bench.cases``: values 0 and 1, a traced option that must not
# recompile) and by the compile-once test (tests/test_dogfood.py: all three, one trace). Keyed by
# the hyperparameter's name in any public signature; a float hyperparameter not named here gets
# :func:`default_schedule` of its default, so a new estimator needs no line here unless halving
# its default would leave its valid range.
SCHEDULE: dict[str, tuple] = {
    "gamma": (0.9, 0.5, 1.0), "lam": (0.95, 0.5, 1.0), "token_gamma": (1.0, 0.9, 0.5),
    "token_lam": (1.0, 0.8, 0.5), "omega": (1.0, 0.5, 2.0), "alpha": (0.05, 0.5, 1.0),
    "turn_coef": (1.0, 0.5, 2.0), "success_threshold": (1.0, 0.9, 0.5),
    "progress_weight": (1.0, 0.5, 2.0), "preservation_weight": (0.1, 0.0, 0.5),
    "regression_weight": (1.0, 0.5, 2.0), "hindsight_weight": (1.0, 0.5, 0.25),
    "counterfactual_weight": (1.0, 2.0, 0.5), "initial": (0.0, 0.1, 0.5),
    "invalid_penalty": (0.1, 0.2, 0.5), "success_reward": (10.0, 5.0, 1.0),
    "step_discount": (1.0, 0.9, 0.5), "f_norm": (1.0, 0.5, 2.0), "clip": (0.5, 0.2, 1.0),
    "clamp": (20.0, 10.0, 5.0), "temperature": (1.0, 0.7, 1.3), "reaction_coef": (1.0, 0.5, 2.0),
    "constants": ((1.0, 0.5, -0.1, -0.5), (2.0, 1.0, 0.0, -1.0), (0.5, 0.25, -0.05, -0.25)),
}
SCALED = {"weights": (1.0, 0.5, 2.0)}  # array hyperparameters (GDPO's [C], redistribution's [B, K])
EPS = (1e-6, 1e-4, 0.0)  # a Normalization's eps (a leaf: same static fields, same program)
# LossOptions' (clip_low, clip_high, dual_clip): leaves of the options value, same program.
CLIPS = ((0.2, 0.2, 3.0), (0.1, 0.3, 2.0), (0.3, 0.28, 2.5))


def default_schedule(default: Any) -> tuple | None:
    """Three values of a hyperparameter that is not in :data:`SCHEDULE`, from its default: the
    default, half and a quarter of it (0.0: 0.0, 0.1, 0.2); ``None`` for a non-float default
    (ints are static options: history, before, num_roles)."""
    if type(default) is float:
        return (default, default / 2, default / 4) if default else (0.0, 0.1, 0.2)
    if type(default) is tuple and default and all(type(v) is float for v in default):
        return tuple(tuple(v * f for v in default) for f in (1.0, 0.5, 0.25))
    return None


def scheduled_options(signature, args: tuple, kwargs: dict, i: int) -> dict:
    """The keywords of :func:`scheduled`'s call that the schedule set (those the call does not
    give positionally): ``fn(*args, **{**kwargs, **scheduled_options(...)})`` is the ``i``-th
    call of the schedule with the call's own positional arguments (what the bench times)."""
    bound = signature.bind(*args, **kwargs)
    positional = list(signature.parameters)[:len(args)]
    new_args, new_kwargs = scheduled(signature, args, kwargs, i)
    new = signature.bind(*new_args, **new_kwargs).arguments
    return {name: value for name, value in new.items()
            if name not in positional and value is not bound.arguments.get(name)}


def scheduled(signature, args: tuple, kwargs: dict, i: int) -> tuple[tuple, dict]:
    """The call ``(args, kwargs)`` of a function of ``signature`` with the ``i``-th value
    (``0 <= i < 3``) of every numeric hyperparameter it has: :data:`SCHEDULE` (or
    :func:`default_schedule`; an array the call gives, e.g. a per-row ``lam``, stays),
    :data:`SCALED` arrays, a ``normalization``'s ``eps``
    (:data:`EPS`) and a loss ``options``' clips (:data:`CLIPS`)."""
    bound = signature.bind(*args, **kwargs)
    for name, p in signature.parameters.items():
        values = SCHEDULE.get(name) or default_schedule(p.default)
        given = bound.arguments.get(name)
        if values is not None and getattr(given, "ndim", 0) == 0:  # an array given stays (traced)
            bound.arguments[name] = values[i]
        elif name in SCALED:
            bound.arguments[name] = np.asarray(bound.arguments[name], np.float32) * SCALED[name][i]
        elif name == "normalization":
            base = bound.arguments.get(name) or Normalization()
            bound.arguments[name] = base.replace(eps=EPS[i])
        elif name == "options":
            low, high, dual = CLIPS[i]
            base = bound.arguments.get(name) or LossOptions()
            bound.arguments[name] = base.replace(clip_low=low, clip_high=high, dual_clip=dual)
    return bound.args, bound.kwargs

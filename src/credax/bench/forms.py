"""The other forms of a call: a second annotated form of a union, another option worth a call of
its own, each a :class:`credax._registry.Call` labelled ``"name:form"``.

The core registry (``credax._registry``) holds one canonical call per public function, what the
bridges and explain read. These forms are read only by the bench sweep (``credax.bench.cases``
times each), ``benchmarks/reproducibility.py`` and the tests (``credax.testing.calls.VARIANTS``
adds their metadata), so they live with the bench, which production code may import and
``credax.testing`` reads.
"""

from __future__ import annotations

import jax.numpy as jnp

import credax
from credax import _registry, presets
from credax._registry import token_mask

FORMS: dict[str, _registry.Call] = {
    # [B, K] advantages with token_turn, and a sequence ratio.
    "policy_loss:turns": _registry.Call(
        "policy_loss", lambda b, ns: _registry._args(b.logp, b.logp, b.scores, token_mask(b),
                                           token_turn=b.token_turn,
                                           options=credax.LossOptions(ratio="sequence")),
        "other", needs=("logp",), group_local=False),
    "policy_loss:tokens": _registry.Call(
        "policy_loss", lambda b, ns: _registry._args(b.logp, _registry._old_logp(b), b.logp, token_mask(b),
                                           options=credax.LossOptions(dual_clip=3.0)),
        "other", needs=("logp",), group_local=False),
    "token_logprobs_from_hidden:entropy": _registry.Call(
        "token_logprobs_from_hidden",
        lambda b, ns: _registry._args(b.hidden, b.unembedding, b.tokens, chunk_size=4, with_entropy=True),
        "other", needs=("hidden", "unembedding", "tokens"), group_local=True),
    "select_top_surprisal:batch": _registry.Call(
        "select_top_surprisal", lambda b, ns: _registry._args(b.scores, b.turn_mask, budget=3), "turn",
        group_local=False),
    "group_normalize:rows": _registry.Call(
        "group_normalize", lambda b, ns: _registry._args(b.rewards, b.group_ids), "row", group_local=True),
    "grpo_advantages:groups": _registry.Call(
        "grpo_advantages", lambda b, ns: _registry._args(b.rewards, ns.groups(b.group_ids)), "row",
        group_local=True),
    # TRL's scale_rewards="batch": the batch std (not group-isolated, by design).
    "grpo_advantages:batch_scale": _registry.Call(
        "grpo_advantages",
        lambda b, ns: _registry._args(b.rewards, b.group_ids, normalization=presets.TRL_BATCH), "row",
        group_local=False),
    "kl_divergence:scalar": _registry.Call(
        "kl_divergence", lambda b, ns: _registry._args(jnp.max(b.logp), jnp.min(b.logp)), "other",
        needs=("logp",), group_local=False),
    # Scores as per-turn rewards, half of them as values: a row-wise recursion over turns.
    "gae_advantages:turns": _registry.Call(
        "gae_advantages", lambda b, ns: _registry._args(b.scores, 0.5 * b.scores, b.turn_mask, gamma=0.9,
                                              lam=0.95),
        "turn", output=_registry._advantages, group_local=True),
    "gae_advantages:scalar_lam": _registry.Call(
        "gae_advantages", lambda b, ns: _registry._args(b.logp, b.values, token_mask(b), gamma=1.0,
                                              lam=0.95),
        "other", needs=("logp", "values"), group_local=True),
    "kl_divergence:turns": _registry.Call(
        "kl_divergence", lambda b, ns: _registry._args(b.scores, 0.5 * b.scores, mask=b.turn_mask), "turn",
        group_local=True),
    "role_credit:list": _registry.Call(
        "role_credit", lambda b, ns: _registry._args(b.roles, b.turn_mask,
                                           constants=[1.0, 0.5, -0.5, -1.0]), "turn", group_local=True),
    "g2po_advantages:action_valid": _registry.Call(
        "g2po_advantages", lambda b, ns: _registry._args(b.rewards, b.anchors, b.turn_mask, b.group_ids,
                                               action_valid=b.turn_mask), "other",
        needs=("anchors",), group_local=True),
    "triage_advantages:whiten": _registry.Call(
        "triage_advantages", lambda b, ns: _registry._args(b.rewards, b.roles, b.turn_mask, whiten=True),
        "turn", group_local=False),
}

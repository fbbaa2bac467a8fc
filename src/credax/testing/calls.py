"""One call table: how to call each public credax function on a :class:`TurnBatch`.

Every test and tool that needs "call estimator X on a batch" reads it from here: the shape
contract, the multi-device sweep, the bench sweep, the invariant checks credax runs on itself,
``credax.explain``, ``credax.verl`` and the lab. An entry says *how to call*, never *what the
answer is* (golden values stay in the tests, computed independently)::

    from credax.testing.calls import CALLS
    CALLS["grpo_advantages"](batch)                      # credax.grpo_advantages(rewards, ids, mask)
    CALLS["tcpo_advantages"](batch, gamma=0.9)           # options are added to the call
    CALLS["grpo_advantages"](batch, ns=credax.torch)     # the same call through another namespace

Three tables, each ``{label: Call}``:

* :data:`ESTIMATORS` — every public function that returns advantages or credit (``*_advantages``,
  ``*_credit``, ``group_normalize``), keyed by its name: its canonical call;
* :data:`TOOLS` — every other public array function (turn tools, diagnostics, log-probs, losses),
  keyed by its name, kept apart so that "every estimator has an entry" is a test of its own;
* :data:`VARIANTS` — other forms of a call (a second annotated form of a union, another option),
  labelled ``"name:form"``.

:data:`CALLS` is the first two together (one entry per public array function), :data:`ALL` all
three. A call reads the batch's first six fields, and an optional field where one is set
(``tcpo_advantages`` adds the alternatives when ``alt_scores`` is set); the two optional fields
with a default stand in for themselves (``anchors``: ``roles``, ``turn_rewards``: ``scores``, as
the invariant checks use them); the token-level and log-prob fields have none, and an entry that
needs one says so (:attr:`Call.needs`, and a ``ValueError`` naming it). :func:`example_batch`
fills every field with random values (the shape contract, multi-device and bench sweeps).

This module needs no hypothesis (``credax.explain`` and ``credax.verl`` import it at run time).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np

import credax
from credax import presets

from .batch import TurnBatch

# What an entry's output is, for a consumer that reshapes it: one value per row ``[B]``, per turn
# ``[B, K]``, per token ``[B, T]``, or anything else (scalars, fits, NamedTuples of several).
LEVELS = ("row", "turn", "token", "other")
# The invariant checks of credax.testing that an entry's output satisfies (tests/test_dogfood.py).
COMMON = ("padding_invariance", "permutation_equivariance", "group_isolation", "masked_zero",
          "finite_gradients", "jit_matches_eager")
CENTRED = COMMON + ("group_zero_mean",)  # centred, group-normalised outputs
NO_GRAD = tuple(c for c in COMMON if c != "finite_gradients")  # boolean outputs
# Shrinkage pulls every group toward the across-prompt mean: not group-isolated, by design.
POOLED = tuple(c for c in COMMON if c != "group_isolation")
OPTIONAL = ("alt_scores", "alt_mask", "logp", "values", "logits", "tokens", "hidden",
            "unembedding")  # fields without a default: an entry that reads one needs it


def _identity(x):
    return x


@dataclass(frozen=True)
class Call:
    """One canonical call of a public function on a :class:`TurnBatch`.

    Attributes:
      name: the function's name in ``credax`` (and ``credax.torch``, where it exists there).
      arguments: ``arguments(batch, ns, **nested) -> (args, kwargs)``: the call's arguments, read
        from the batch; ``ns`` is the namespace of any function the arguments need themselves
        (TRIAGE's outcome advantages); ``nested`` holds options for that inner call.
      level: ``"row"``, ``"turn"``, ``"token"`` or ``"other"``: the shape of :attr:`output`'s value.
      output: picks the main output from the result (``.advantages`` of a NamedTuple, ...).
      needs: the batch fields beyond the turn-level ones (scores, turn_mask, group_ids, rewards,
        roles) that the call reads: ``token_turn`` (every batch has it) and the optional fields
        without a default (a ``ValueError`` names the first one that is ``None``).
      checks: the ``credax.testing`` invariants the output satisfies (``check_<name>``).
      explain: the method's short name in ``credax.explain`` (``None``: not shown there).
      note: what ``credax.explain``'s page says about that method.
      tuning: ``(options, changed)``: a numeric option of the bench sweep and a second value of
        it (traced: changing it must not recompile); ``None`` where there is none.
      free: ``((argument, mutations, why), ...)``: shapes the annotation leaves free, which the
        shape contract must accept (``"row"`` one more row, ``"last"`` one more entry on the last
        axis, ``"axis"`` one more trailing axis).
    """

    name: str
    arguments: Callable[..., tuple[tuple, dict]]
    level: str
    output: Callable[[Any], Any] = _identity
    needs: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    explain: str | None = None
    note: str | None = None
    tuning: tuple[dict, dict] | None = None
    free: tuple[tuple[str, tuple[str, ...], str], ...] = ()
    adapter: Callable = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"`level` must be one of {LEVELS}; got {self.level!r}.")
        # One adapter object per entry, so the checkers of credax.testing (which cache their jit
        # on (fn, adapter)) share one compilation per function across checks.
        object.__setattr__(self, "adapter", lambda fn: lambda b: self(b, fn=fn))

    def args(self, batch: TurnBatch, *, ns=None, nested: Mapping | None = None
             ) -> tuple[tuple, dict]:
        """The positional and keyword arguments of the call on ``batch``."""
        missing = [f for f in self.needs if getattr(batch, f) is None]
        if missing:
            raise ValueError(f"`batch`: the call of {self.name} needs TurnBatch.{missing[0]}, "
                             "which is None (credax.testing.calls.example_batch fills it).")
        return self.arguments(batch, credax if ns is None else ns, **(nested or {}))

    def __call__(self, batch: TurnBatch, *, fn=None, ns=None, nested: Mapping | None = None,
                 **options):
        """``output(fn(*args, **kwargs, **options))``; ``fn`` defaults to ``ns.<name>``, ``ns``
        to ``credax``; ``options`` override the entry's own keywords."""
        args, kwargs = self.args(batch, ns=ns, nested=nested)
        if fn is None:
            fn = getattr(credax if ns is None else ns, self.name)
        return self.output(fn(*args, **{**kwargs, **options}))


def anchors(b: TurnBatch):
    """``b.anchors``, or ``b.roles`` (small categorical codes: many shared anchor states)."""
    return b.roles if b.anchors is None else b.anchors


def turn_rewards(b: TurnBatch):
    """``b.turn_rewards``, or ``b.scores`` as per-turn rewards."""
    return b.scores if b.turn_rewards is None else b.turn_rewards


def token_mask(b: TurnBatch):
    """``bool[B, T]``: the tokens of a turn (``token_turn >= 0``)."""
    return b.token_turn >= 0


def _call(name, arguments, level, **meta) -> Call:
    return Call(name, arguments, level, **meta)


def _args(*args, **kwargs) -> tuple[tuple, dict]:
    return args, kwargs


def _outcome_advantages(b, ns, **options):
    """GRPO's outcome advantages (TRIAGE and the scalar process baseline add to them)."""
    return ns.grpo_advantages(b.rewards, b.group_ids, b.row_mask, **options)


def _reward_components(b):
    # Two components: the outcome and its square (both constant within a group). The square is
    # taken on valid rows only (a product with padding garbage would put NaN into the gradient);
    # padded rows keep their garbage in both columns.
    valid = jnp.where(b.row_mask, b.rewards, 0.0)
    square = jnp.where(b.row_mask, valid * valid, b.rewards)
    return jnp.stack([b.rewards, square], axis=1)


def _tcpo(b, ns):
    alternatives = ({} if b.alt_scores is None
                    else {"alt_scores": b.alt_scores, "alt_mask": b.alt_mask})
    return _args(b.scores, b.turn_mask, b.group_ids, **alternatives)


_advantages = lambda out: out.advantages  # noqa: E731
_credit = lambda out: out.credit  # noqa: E731

_NOTES = {
    "grpo": "GRPO: the rollout's outcome minus the mean outcome of its prompt group, divided by "
            "the group's standard deviation; the same value on every turn of the rollout.",
    "rloo": "RLOO: the rollout's outcome minus the mean outcome of the other rollouts of its "
            "prompt (no division); the same value on every turn.",
    "tcpo": "TCPO: each turn's credit from its verifier score (progress over the best score "
            "before it, plus hindsight on turns that made none), z-scored over the same turn index "
            "of the prompt group's rollouts.",
    "triage": "TRIAGE: the GRPO value of the rollout plus 0.2 × a constant of the turn's judge "
              "role (decisive +1, exploration +0.5, neutral -0.1, regression -0.5; unlabeled 0).",
    "gigpo": "GiGPO: the rollout's GRPO value plus a step value: the turn's discounted return "
             "z-scored over the turns of the prompt group that acted in the same anchor state.",
    "mt_grpo": "MT-GRPO: the rollout's GRPO value plus the turn's reward z-scored over the same "
               "turn index of the prompt group's rollouts.",
    "unbiased_turn": "Turn baseline (verl #7244): the turn's return to go (its reward and the "
                     "later ones) minus the mean return to go of the prompt group's other "
                     "rollouts that reached the same turn; unbiased under variable turn counts.",
    "hgpo": "HGPO: the turn's discounted return z-scored within the prompt group's turns that "
            "share its last k anchor states (k = 1, 2, 3), the levels averaged with weights "
            "(k + 1); a level where the turn's group is a singleton or has no spread abstains.",
    "g2po": "G2PO: the rollout's normalised outcome plus the turn's edge in the prompt's graph "
            "of anchor states: the value of the state it reached, normalised among the turns "
            "that left the same state, plus its gain over the state it left (normalised).",
    "redistribute": "Redistribution (DRACO, VICT, IAPO, TASPO, FACTOR): the rollout's GRPO value "
                    "spread over its turns by per-turn weights (here |score|), mean-preserving: "
                    "the turns' mean is the GRPO value, each turn keeps its sign.",
    "pgpo": "PGPO: the change of potential a turn caused, Φ(next state) - Φ(state), where Φ is the "
            "mean discounted return of the prompt group's turns in that anchor state (the last "
            "turn: its own return minus Φ).",
    "gpg": "GPG: the rollout's outcome minus its prompt group's mean, scaled by the batch's "
           "inverse share of nonzero outcomes; the same value on every turn.",
}

# --------------------------------------------------------------------------------------------
# Estimators: advantages and credit.
# --------------------------------------------------------------------------------------------

_ESTIMATORS = [
    _call("group_normalize", lambda b, ns: _args(b.scores, b.group_ids, b.turn_mask), "turn",
          checks=CENTRED, tuning=({"normalization": credax.Normalization(eps=1e-6)},
                                  {"normalization": credax.Normalization(eps=1e-4)})),
    _call("grpo_advantages", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          checks=CENTRED, explain="grpo", note=_NOTES["grpo"],
          tuning=({"normalization": credax.Normalization(eps=1e-6)},
                  {"normalization": credax.Normalization(eps=1e-4)})),
    _call("rloo_advantages", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          checks=CENTRED, explain="rloo", note=_NOTES["rloo"]),
    _call("gdpo_advantages", lambda b, ns: _args(_reward_components(b), b.group_ids, b.row_mask,
                                                 weights=jnp.array([1.0, 0.5])),
          "row", checks=CENTRED, tuning=({"weights": np.array([1.0, 0.5], np.float32)},
                                         {"weights": np.array([0.2, 0.8], np.float32)})),
    _call("shrinkage_advantages", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          checks=POOLED),
    # verl's batch-statistic estimators: a batch whitening or α counts the batch's nonzero
    # rewards, so they are not group-isolated by design (no invariant checks).
    _call("gpg_advantages", lambda b, ns: _args(b.rewards, b.group_ids, mask=b.row_mask), "row",
          explain="gpg", note=_NOTES["gpg"], tuning=({"f_norm": 1.0}, {"f_norm": 0.5})),
    _call("reinforce_pp_advantages", lambda b, ns: _args(b.logp, token_mask(b), gamma=0.9),
          "token", needs=("logp",), tuning=({"gamma": 1.0}, {"gamma": 0.9})),
    _call("reinforce_pp_baseline_advantages",
          lambda b, ns: _args(b.rewards, b.group_ids, token_mask(b)), "token",
          needs=("token_turn",),
          free=(("response_mask", ("last",), "T is free: it sets the output length"),)),
    _call("tcpo_advantages", _tcpo, "turn", output=_advantages, checks=CENTRED, explain="tcpo",
          note=_NOTES["tcpo"], tuning=({"gamma": 0.9, "hindsight_weight": 1.0},
                                       {"gamma": 0.8, "hindsight_weight": 0.5})),
    _call("retrospective_credit", lambda b, ns: _args(b.scores, b.turn_mask), "turn",
          output=_credit, checks=COMMON,
          tuning=({"progress_weight": 1.0}, {"progress_weight": 0.5})),
    _call("hindsight_credit", lambda b, ns: _args(b.scores, b.turn_mask, b.group_ids), "turn",
          output=_credit, checks=COMMON,
          tuning=({"success_threshold": 1.0}, {"success_threshold": 0.9})),
    _call("counterfactual_credit", lambda b, ns: _args(b.scores, b.alt_scores, b.alt_mask),
          "other", needs=("alt_scores", "alt_mask")),
    _call("raw_score_credit", lambda b, ns: _args(b.scores, b.turn_mask), "turn", checks=COMMON),
    _call("adjacent_delta_credit", lambda b, ns: _args(b.scores, b.turn_mask), "turn",
          checks=COMMON, tuning=({"initial": 0.0}, {"initial": 0.1})),
    _call("role_credit", lambda b, ns: _args(b.roles, b.turn_mask), "turn", checks=COMMON,
          tuning=({"constants": np.array(credax.TRIAGE_ROLE_CONSTANTS, np.float32)},
                  {"constants": np.array([0.9, 0.4, 0.0, -0.4], np.float32)})),
    # GRPO outcome advantages plus role credit (roles include -1, unlabeled).
    _call("triage_advantages",
          lambda b, ns, **outcome: _args(_outcome_advantages(b, ns, **outcome), b.roles,
                                         b.turn_mask),
          "turn", checks=COMMON, explain="triage", note=_NOTES["triage"],
          tuning=({"lam": 0.2}, {"lam": 0.4})),
    # The scores double as per-turn judge scores.
    _call("scalar_process_advantages",
          lambda b, ns, **outcome: _args(_outcome_advantages(b, ns, **outcome), b.scores,
                                         b.turn_mask, lam=0.5),
          "turn", checks=COMMON, tuning=({"lam": 0.2}, {"lam": 0.4})),
    _call("mt_grpo_advantages",
          lambda b, ns: _args(turn_rewards(b), b.rewards, b.turn_mask, b.group_ids), "turn",
          checks=COMMON, explain="mt_grpo", note=_NOTES["mt_grpo"],
          tuning=({"turn_coef": 1.0}, {"turn_coef": 0.5})),
    _call("gigpo_advantages",
          lambda b, ns: _args(b.rewards, turn_rewards(b), anchors(b), b.turn_mask, b.group_ids),
          "turn", checks=COMMON, explain="gigpo", note=_NOTES["gigpo"],
          tuning=({"omega": 1.0}, {"omega": 0.5})),
    _call("hgpo_advantages",
          lambda b, ns: _args(b.rewards, turn_rewards(b), anchors(b), b.turn_mask, b.group_ids),
          "turn", output=_advantages, checks=COMMON, explain="hgpo", note=_NOTES["hgpo"],
          tuning=({"history": 2, "alpha": 1.0}, {"history": 2, "alpha": 0.5})),
    _call("pgpo_advantages",
          lambda b, ns: _args(turn_rewards(b), anchors(b), b.turn_mask, b.group_ids), "turn",
          output=_advantages, checks=COMMON, explain="pgpo", note=_NOTES["pgpo"],
          tuning=({"gamma": 1.0}, {"gamma": 0.9})),
    _call("g2po_advantages",
          lambda b, ns: _args(b.rewards, anchors(b), b.turn_mask, b.group_ids), "turn",
          output=_advantages, checks=COMMON, explain="g2po", note=_NOTES["g2po"],
          tuning=({"omega": 1.0}, {"omega": 0.5})),
    # GRPO's outcome advantages spread over the turns by |score| weights (any non-negative signal).
    _call("redistribute_advantages",
          lambda b, ns, **outcome: _args(_outcome_advantages(b, ns, **outcome),
                                         jnp.abs(turn_rewards(b)), b.turn_mask),
          "turn", checks=COMMON, explain="redistribute", note=_NOTES["redistribute"]),
    # Per-turn rewards (the scores by default) and their returns to go.
    _call("unbiased_turn_advantages",
          lambda b, ns: _args(turn_rewards(b), b.turn_mask, b.group_ids), "turn", checks=CENTRED,
          explain="unbiased_turn", note=_NOTES["unbiased_turn"],
          tuning=({"gamma": 1.0}, {"gamma": 0.9})),
    # Token rewards (the log-probs) and values; lam and bootstrap one per row.
    _call("gae_advantages",
          lambda b, ns: _args(b.logp, b.values, token_mask(b), gamma=0.9, lam=b.rewards,
                              bootstrap=b.rewards),
          "other", needs=("logp", "values")),
    _call("turn_gae_advantages",
          lambda b, ns: _args(b.scores, b.values, b.token_turn, b.turn_mask), "other",
          needs=("values",), tuning=({"gamma": 1.0, "lam": 0.95}, {"gamma": 0.99, "lam": 0.9})),
    # VETTA's two heads: the values stand in for both (turn head and token head), the log-probs
    # for the token rewards. Not on the explain page: its example rollouts have no critic values.
    _call("vetta_advantages",
          lambda b, ns: _args(b.scores, b.values, b.logp, b.values, b.token_turn, b.turn_mask),
          "token", output=_advantages, needs=("values", "logp"),
          tuning=({"lam": 1.0, "token_lam": 0.95}, {"lam": 0.9, "token_lam": 0.8})),
]

# --------------------------------------------------------------------------------------------
# Tools: every other public array function.
# --------------------------------------------------------------------------------------------


def _old_logp(b):
    return 0.9 * b.logp


def _uniform_logp(b):
    """Old log-probs of a uniform sampler over the unembedding's vocabulary, ``[B, T]``."""
    return jnp.full(b.tokens.shape, -np.log(b.unembedding.shape[1]), jnp.float32)


_TOOLS = [
    _call("group_mean", lambda b, ns: _args(b.scores, b.group_ids, b.turn_mask), "turn",
          checks=COMMON),
    _call("group_count", lambda b, ns: _args(b.group_ids, b.turn_mask), "turn",
          free=(("mask", ("last", "axis"), "mask is `B *rest`: any trailing shape"),)),
    _call("peer_mean", lambda b, ns: _args(b.scores, b.group_ids, b.turn_mask), "turn",
          output=lambda out: out.mean, checks=COMMON),
    _call("degenerate_groups", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          checks=NO_GRAD),
    _call("shrinkage_baseline", lambda b, ns: _args(b.rewards, b.group_ids), "other"),
    _call("best_prior", lambda b, ns: _args(b.scores, b.turn_mask), "turn", checks=COMMON,
          tuning=({"initial": 0.0}, {"initial": 0.1})),
    _call("future_best", lambda b, ns: _args(b.scores, b.turn_mask), "turn", checks=COMMON),
    _call("discount_weights", lambda b, ns: _args(b.turn_mask.shape[1], gamma=0.9), "other",
          tuning=({"gamma": 0.9}, {"gamma": 0.8})),
    _call("discounted_returns", lambda b, ns: _args(b.scores, b.turn_mask, gamma=0.9), "turn",
          checks=COMMON, tuning=({"gamma": 0.9}, {"gamma": 0.8})),
    _call("broadcast_to_tokens", lambda b, ns: _args(b.scores, b.token_turn), "token",
          needs=("token_turn",),
          free=(("turn_values", ("last",), "K is free: token_turn indexes into it"),
                ("token_turn", ("last",), "T is free: it sets the output length"))),
    _call("turn_surprisal",
          lambda b, ns: _args(b.logp, b.token_turn, num_turns=b.turn_mask.shape[1]), "turn",
          needs=("logp",)),
    _call("select_top_surprisal",
          lambda b, ns: _args(b.scores, b.turn_mask, b.group_ids, budget=2, scope="group"),
          "turn"),
    _call("fit_role_constants", lambda b, ns: _args(b.scores, b.roles, b.turn_mask), "other"),
    _call("optimal_mixing_weight", lambda b, ns: _args(b.scores, b.roles, b.turn_mask), "other"),
    _call("judge_windows", lambda b, ns: _args(b.turn_mask, before=2, after=1), "other",
          free=(("turn_mask", ("row", "last"), "its only array: any [B, K]"),)),
    _call("anchor_hit_ratio", lambda b, ns: _args(anchors(b), b.turn_mask, b.group_ids), "other"),
    _call("credit_by_role", lambda b, ns: _args(b.scores, b.roles, b.turn_mask), "other"),
    _call("credit_by_turn", lambda b, ns: _args(b.scores, b.turn_mask), "other"),
    _call("dead_groups", lambda b, ns: _args(b.rewards, b.group_ids), "other"),
    _call("turn_values",
          lambda b, ns: _args(b.values, b.token_turn, num_turns=b.turn_mask.shape[1]), "turn",
          needs=("values",)),
    _call("vapo_lambda", lambda b, ns: _args(token_mask(b)), "row", needs=("token_turn",),
          tuning=({"alpha": 0.05}, {"alpha": 0.1}),
          free=(("mask", ("row", "last"), "its only array: any [B, N]"),)),
    _call("value_loss",
          lambda b, ns: _args(b.values, 0.9 * b.values, b.logp, token_mask(b)), "other",
          needs=("values", "logp"), tuning=({"clip": 0.5}, {"clip": 0.2})),
    _call("token_logprobs", lambda b, ns: _args(b.logits, b.tokens, mask=token_mask(b)), "token",
          needs=("logits", "tokens"),
          free=(("logits", ("last",), "V is free (the tokens stay below it)"),)),
    _call("token_entropy", lambda b, ns: _args(b.logits, mask=token_mask(b)), "token",
          needs=("logits",), tuning=({"temperature": 1.0}, {"temperature": 0.7}),
          free=(("logits", ("last",), "V is free"),)),
    _call("token_logprobs_from_hidden",
          lambda b, ns: _args(b.hidden, b.unembedding, b.tokens, chunk_size=3,
                              mask=token_mask(b)),
          "token", needs=("hidden", "unembedding", "tokens"),
          free=(("unembedding", ("last",), "V is free (the tokens stay below it)"),)),
    _call("policy_loss_from_hidden",
          lambda b, ns: _args(b.hidden, b.unembedding, b.tokens, _uniform_logp(b), b.rewards,
                              token_mask(b), chunk_size=3),
          "other", needs=("hidden", "unembedding", "tokens"),
          tuning=({"clip_low": 0.2}, {"clip_low": 0.1}),
          free=(("unembedding", ("last",), "V is free (the tokens stay below it)"),)),
    _call("kl_divergence", lambda b, ns: _args(b.logp, _old_logp(b), mask=token_mask(b)),
          "token", needs=("logp",)),
    _call("aggregate", lambda b, ns: _args(b.logp, token_mask(b), mode="seq-mean-token-mean"),
          "other", needs=("logp",)),
    _call("policy_loss",
          lambda b, ns: _args(b.logp, _old_logp(b), b.rewards, token_mask(b), ref_logp=b.logp,
                              kl_coef=0.1),
          "other", needs=("logp",), tuning=({"clip_low": 0.2}, {"clip_low": 0.1})),
]

# --------------------------------------------------------------------------------------------
# Variants: the other annotated forms of a union, and other options worth a call of their own.
# --------------------------------------------------------------------------------------------

_VARIANTS = {
    # [B, K] advantages with token_turn, and a sequence ratio.
    "policy_loss:turns": _call(
        "policy_loss", lambda b, ns: _args(b.logp, b.logp, b.scores, token_mask(b),
                                           token_turn=b.token_turn, ratio="sequence"),
        "other", needs=("logp",), tuning=({"clip_low": 0.2}, {"clip_low": 0.1})),
    "policy_loss:tokens": _call(
        "policy_loss", lambda b, ns: _args(b.logp, _old_logp(b), b.logp, token_mask(b),
                                           dual_clip=3.0),
        "other", needs=("logp",), tuning=({"clip_low": 0.2}, {"clip_low": 0.1})),
    "token_logprobs_from_hidden:entropy": _call(
        "token_logprobs_from_hidden",
        lambda b, ns: _args(b.hidden, b.unembedding, b.tokens, chunk_size=4, with_entropy=True),
        "other", needs=("hidden", "unembedding", "tokens")),
    "select_top_surprisal:batch": _call(
        "select_top_surprisal", lambda b, ns: _args(b.scores, b.turn_mask, budget=3), "turn"),
    "group_normalize:rows": _call(
        "group_normalize", lambda b, ns: _args(b.rewards, b.group_ids), "row"),
    "grpo_advantages:groups": _call(
        "grpo_advantages", lambda b, ns: _args(b.rewards, ns.groups(b.group_ids)), "row"),
    # TRL's scale_rewards="batch": the batch std (not group-isolated, by design).
    "grpo_advantages:batch_scale": _call(
        "grpo_advantages",
        lambda b, ns: _args(b.rewards, b.group_ids, normalization=presets.TRL_BATCH), "row"),
    "kl_divergence:scalar": _call(
        "kl_divergence", lambda b, ns: _args(jnp.max(b.logp), jnp.min(b.logp)), "other",
        needs=("logp",)),
    # Scores as per-turn rewards, half of them as values: a row-wise recursion over turns.
    "gae_advantages:turns": _call(
        "gae_advantages", lambda b, ns: _args(b.scores, 0.5 * b.scores, b.turn_mask, gamma=0.9,
                                              lam=0.95),
        "turn", output=_advantages, checks=COMMON),
    "gae_advantages:scalar_lam": _call(
        "gae_advantages", lambda b, ns: _args(b.logp, b.values, token_mask(b), gamma=1.0,
                                              lam=0.95),
        "other", needs=("logp", "values"), tuning=({"gamma": 1.0, "lam": 0.95},
                                                   {"gamma": 0.99, "lam": 0.9})),
    "kl_divergence:turns": _call(
        "kl_divergence", lambda b, ns: _args(b.scores, 0.5 * b.scores, mask=b.turn_mask), "turn",
        checks=COMMON),
    "role_credit:list": _call(
        "role_credit", lambda b, ns: _args(b.roles, b.turn_mask,
                                           constants=[1.0, 0.5, -0.5, -1.0]), "turn"),
    "g2po_advantages:action_valid": _call(
        "g2po_advantages", lambda b, ns: _args(b.rewards, anchors(b), b.turn_mask, b.group_ids,
                                               action_valid=b.turn_mask), "other"),
    "triage_advantages:whiten": _call(
        "triage_advantages", lambda b, ns: _args(b.rewards, b.roles, b.turn_mask, whiten=True),
        "turn"),
}

ESTIMATORS: dict[str, Call] = {c.name: c for c in _ESTIMATORS}
TOOLS: dict[str, Call] = {c.name: c for c in _TOOLS}
VARIANTS: dict[str, Call] = _VARIANTS
CALLS: dict[str, Call] = {**ESTIMATORS, **TOOLS}
ALL: dict[str, Call] = {**CALLS, **VARIANTS}
# credax.explain's methods, in the table's order: {short name: entry}.
EXPLAINED: dict[str, Call] = {c.explain: c for c in ALL.values() if c.explain is not None}


def is_estimator(name: str) -> bool:
    """Whether public function ``name`` returns advantages or credit (it belongs in ESTIMATORS)."""
    return name.endswith(("_advantages", "_credit")) or name == "group_normalize"


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

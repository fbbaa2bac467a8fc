"""The method registry: how to call each public credax function on a :class:`TurnBatch`.

Everything in credax that needs "call estimator X on a batch" reads it from here:
``credax.explain`` (its methods and their notes), ``credax.verl`` (the estimators it registers),
``credax.bench`` (the sweep of every public entry point) and the project's lab
(``benchmarks/lab``). ``credax.testing.calls`` builds its call table on it, adding only what the
tests need (the invariants each output satisfies, the shapes an annotation leaves free, the
stand-ins for missing optional fields). An entry says *how to call*, never *what the answer is*::

    from credax._registry import CALLS
    CALLS["grpo_advantages"](batch)                      # credax.grpo_advantages(rewards, ids, mask)
    CALLS["tcpo_advantages"](batch, gamma=0.9)           # options are added to the call
    CALLS["grpo_advantages"](batch, ns=credax.torch)     # the same call through another namespace

Why a module of the core, not of ``credax.testing``: a bridge's numbers must not depend on a test
fixture. Each entry reads exactly the batch fields it names; an optional field that is ``None``
is a ``ValueError`` naming it (:attr:`Call.needs`), never a silent stand-in (GiGPO's step rewards
are ``turn_rewards``, set by the bridge, not the scores by default).

Three tables, each ``{label: Call}``:

* :data:`ESTIMATORS` — every public function that returns advantages or credit (``*_advantages``,
  ``*_credit``, ``group_normalize``), keyed by its name: its canonical call;
* :data:`TOOLS` — every other public array function (turn tools, diagnostics, log-probs, losses),
  keyed by its name;
* :data:`FORMS` — other forms of a call (a second annotated form of a union, another option),
  labelled ``"name:form"``.

:data:`CALLS` is the first two together (one entry per public array function), :data:`ALL` all
three, :data:`EXPLAINED` the entries ``credax.explain`` shows, by their short name.

Adding an entry: one ``_call(name, arguments, level, ...)`` line in the right table, with the
fields it reads in ``needs`` (beyond the six every batch has) and whether it is ``group_local`` —
see docs/layout.md, "Adding an estimator".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

import credax
from credax import presets

from ._batch import TurnBatch

# What an entry's output is, for a consumer that reshapes it: one value per row ``[B]``, per turn
# ``[B, K]``, per token ``[B, T]``, or anything else (scalars, fits, NamedTuples of several).
LEVELS = ("row", "turn", "token", "other")
# The batch fields every entry may read without declaring them (every TurnBatch has them).
REQUIRED = ("scores", "turn_mask", "group_ids", "rewards", "roles", "token_turn")
# The optional fields: an entry that reads one declares it in `needs`.
OPTIONAL = ("anchors", "turn_rewards", "alt_scores", "alt_mask", "logp", "values", "logits",
            "tokens", "hidden", "unembedding")


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
      needs: the optional batch fields the call reads (:data:`OPTIONAL`), and ``token_turn`` where
        it is read; a ``ValueError`` names the first one that is ``None``.
      explain: the method's short name in ``credax.explain`` (``None``: not shown there).
      note: what ``credax.explain``'s page says about that method.
      tuning: ``(options, changed)``: a numeric option of the bench sweep and a second value of
        it (traced: changing it must not recompile); ``None`` where there is none.
      group_local: ``True``: each prompt group's outputs depend on that group's rows only, so the
        call on one group's rows alone gives those rows of the whole batch's call (per-group
        streaming; row-local work is group-local too); ``False``: a batch statistic (a whitening,
        a count or a fit over the batch, a scalar over the batch), where it does not.
        Every entry declares it; docs/guides/reproducibility.md tabulates it, and
        tests/test_streaming.py checks it both ways.
    """

    name: str
    arguments: Callable[..., tuple[tuple, dict]]
    level: str
    output: Callable[[Any], Any] = _identity
    needs: tuple[str, ...] = ()
    explain: str | None = None
    note: str | None = None
    tuning: tuple[dict, dict] | None = None
    group_local: bool | None = None

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"`level` must be one of {LEVELS}; got {self.level!r}.")
        unknown = set(self.needs) - set(OPTIONAL) - {"token_turn"}
        if unknown:
            raise ValueError(f"`needs` of {self.name}: {sorted(unknown)} are not optional "
                             f"TurnBatch fields {OPTIONAL}.")

    def args(self, batch: TurnBatch, *, ns=None, nested: Mapping | None = None
             ) -> tuple[tuple, dict]:
        """The positional and keyword arguments of the call on ``batch``."""
        missing = [f for f in self.needs if getattr(batch, f) is None]
        if missing:
            raise ValueError(f"`batch`: the call of {self.name} needs TurnBatch.{missing[0]}, "
                             "which is None.")
        return self.arguments(batch, credax if ns is None else ns, **(nested or {}))

    def __call__(self, batch: TurnBatch, *, fn=None, ns=None, nested: Mapping | None = None,
                 **options):
        """``output(fn(*args, **kwargs, **options))``; ``fn`` defaults to ``ns.<name>``, ``ns``
        to ``credax``; ``options`` override the entry's own keywords."""
        args, kwargs = self.args(batch, ns=ns, nested=nested)
        if fn is None:
            fn = getattr(credax if ns is None else ns, self.name)
        return self.output(fn(*args, **{**kwargs, **options}))


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
    "faca": "FACA: the rollout's GRPO value plus the user's reaction to the turn (here its step "
            "reward) z-scored over the same turn index of the prompt group's rollouts; the last "
            "turn has no next user turn, no reaction: the GRPO value alone.",
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
                    "spread over its turns by per-turn weights (here |step reward|), "
                    "mean-preserving: the turns' mean is the GRPO value, each turn keeps its sign.",
    "pgpo": "PGPO: the change of potential a turn caused, Φ(next state) - Φ(state), where Φ is the "
            "mean discounted return of the prompt group's turns in that anchor state (the last "
            "turn: its own return minus Φ).",
    "gpg": "GPG: the rollout's outcome minus its prompt group's mean, scaled by the batch's "
           "inverse share of nonzero outcomes; the same value on every turn.",
}

# --------------------------------------------------------------------------------------------
# Estimators: advantages and credit.
# --------------------------------------------------------------------------------------------

_NORM_TUNING = ({"normalization": credax.Normalization(eps=1e-6)},
                {"normalization": credax.Normalization(eps=1e-4)})

_ESTIMATORS = [
    _call("group_normalize", lambda b, ns: _args(b.scores, b.group_ids, b.turn_mask), "turn",
          tuning=_NORM_TUNING, group_local=True),
    _call("grpo_advantages", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          explain="grpo", note=_NOTES["grpo"], tuning=_NORM_TUNING, group_local=True),
    _call("rloo_advantages", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          explain="rloo", note=_NOTES["rloo"], group_local=True),
    _call("gdpo_advantages", lambda b, ns: _args(_reward_components(b), b.group_ids, b.row_mask,
                                                 weights=jnp.array([1.0, 0.5])),
          "row", tuning=({"weights": np.array([1.0, 0.5], np.float32)},
                         {"weights": np.array([0.2, 0.8], np.float32)}), group_local=True),
    _call("shrinkage_advantages", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          group_local=False),
    # verl's batch-statistic estimators: a batch whitening or α counts the batch's nonzero
    # rewards, so they are not group-isolated by design.
    _call("gpg_advantages", lambda b, ns: _args(b.rewards, b.group_ids, mask=b.row_mask), "row",
          explain="gpg", note=_NOTES["gpg"], tuning=({"f_norm": 1.0}, {"f_norm": 0.5}), group_local=False),
    _call("reinforce_pp_advantages", lambda b, ns: _args(b.logp, token_mask(b), gamma=0.9),
          "token", needs=("logp",), tuning=({"gamma": 1.0}, {"gamma": 0.9}), group_local=False),
    _call("reinforce_pp_baseline_advantages",
          lambda b, ns: _args(b.rewards, b.group_ids, token_mask(b)), "token",
          needs=("token_turn",), group_local=False),
    _call("tcpo_advantages", _tcpo, "turn", output=_advantages, explain="tcpo",
          note=_NOTES["tcpo"], tuning=({"gamma": 0.9, "hindsight_weight": 1.0},
                                       {"gamma": 0.8, "hindsight_weight": 0.5}), group_local=True),
    _call("retrospective_credit", lambda b, ns: _args(b.scores, b.turn_mask), "turn",
          output=_credit, tuning=({"progress_weight": 1.0}, {"progress_weight": 0.5}), group_local=True),
    _call("hindsight_credit", lambda b, ns: _args(b.scores, b.turn_mask, b.group_ids), "turn",
          output=_credit, tuning=({"success_threshold": 1.0}, {"success_threshold": 0.9}), group_local=True),
    _call("counterfactual_credit", lambda b, ns: _args(b.scores, b.alt_scores, b.alt_mask),
          "other", needs=("alt_scores", "alt_mask"), group_local=True),
    _call("raw_score_credit", lambda b, ns: _args(b.scores, b.turn_mask), "turn", group_local=True),
    _call("adjacent_delta_credit", lambda b, ns: _args(b.scores, b.turn_mask), "turn",
          tuning=({"initial": 0.0}, {"initial": 0.1}), group_local=True),
    _call("role_credit", lambda b, ns: _args(b.roles, b.turn_mask), "turn",
          tuning=({"constants": np.array(credax.TRIAGE_ROLE_CONSTANTS, np.float32)},
                  {"constants": np.array([0.9, 0.4, 0.0, -0.4], np.float32)}), group_local=True),
    # GRPO outcome advantages plus role credit (roles include -1, unlabeled).
    _call("triage_advantages",
          lambda b, ns, **outcome: _args(_outcome_advantages(b, ns, **outcome), b.roles,
                                         b.turn_mask),
          "turn", explain="triage", note=_NOTES["triage"], tuning=({"lam": 0.2}, {"lam": 0.4}),
          group_local=True),
    # The scores double as per-turn judge scores.
    _call("scalar_process_advantages",
          lambda b, ns, **outcome: _args(_outcome_advantages(b, ns, **outcome), b.scores,
                                         b.turn_mask, lam=0.5),
          "turn", tuning=({"lam": 0.2}, {"lam": 0.4}), group_local=True),
    # The step-level methods read per-turn rewards and anchor states the caller provides
    # (explain: the environment's step rewards; verl: its turn scores; the lab: score changes).
    _call("mt_grpo_advantages",
          lambda b, ns: _args(b.turn_rewards, b.rewards, b.turn_mask, b.group_ids), "turn",
          needs=("turn_rewards",), explain="mt_grpo", note=_NOTES["mt_grpo"],
          tuning=({"turn_coef": 1.0}, {"turn_coef": 0.5}), group_local=True),
    # FACA's reactions: the per-turn rewards stand for the score of the next user turn's reaction
    # (the last turn of each row has none: the default reaction_mask).
    _call("faca_advantages",
          lambda b, ns: _args(b.turn_rewards, b.rewards, b.turn_mask, b.group_ids), "turn",
          needs=("turn_rewards",), explain="faca", note=_NOTES["faca"],
          tuning=({"reaction_coef": 1.0}, {"reaction_coef": 0.5}), group_local=True),
    _call("gigpo_advantages",
          lambda b, ns: _args(b.rewards, b.turn_rewards, b.anchors, b.turn_mask, b.group_ids),
          "turn", needs=("turn_rewards", "anchors"), explain="gigpo", note=_NOTES["gigpo"],
          tuning=({"omega": 1.0}, {"omega": 0.5}), group_local=True),
    _call("hgpo_advantages",
          lambda b, ns: _args(b.rewards, b.turn_rewards, b.anchors, b.turn_mask, b.group_ids),
          "turn", output=_advantages, needs=("turn_rewards", "anchors"), explain="hgpo",
          note=_NOTES["hgpo"], tuning=({"history": 2, "alpha": 1.0}, {"history": 2, "alpha": 0.5}),
          group_local=True),
    _call("pgpo_advantages",
          lambda b, ns: _args(b.turn_rewards, b.anchors, b.turn_mask, b.group_ids), "turn",
          output=_advantages, needs=("turn_rewards", "anchors"), explain="pgpo",
          note=_NOTES["pgpo"], tuning=({"gamma": 1.0}, {"gamma": 0.9}), group_local=True),
    _call("g2po_advantages",
          lambda b, ns: _args(b.rewards, b.anchors, b.turn_mask, b.group_ids), "turn",
          output=_advantages, needs=("anchors",), explain="g2po", note=_NOTES["g2po"],
          tuning=({"omega": 1.0}, {"omega": 0.5}), group_local=True),
    # GRPO's outcome advantages spread over the turns by |step reward| weights (any non-negative
    # per-turn signal would do: judge attributions, proof edges, likelihood shifts).
    _call("redistribute_advantages",
          lambda b, ns, **outcome: _args(_outcome_advantages(b, ns, **outcome),
                                         jnp.abs(b.turn_rewards), b.turn_mask),
          "turn", needs=("turn_rewards",), explain="redistribute", note=_NOTES["redistribute"],
          group_local=True),
    # Per-turn rewards and their returns to go.
    _call("unbiased_turn_advantages",
          lambda b, ns: _args(b.turn_rewards, b.turn_mask, b.group_ids), "turn",
          needs=("turn_rewards",), explain="unbiased_turn", note=_NOTES["unbiased_turn"],
          tuning=({"gamma": 1.0}, {"gamma": 0.9}), group_local=True),
    # Token rewards (the log-probs) and values; lam and bootstrap one per row.
    _call("gae_advantages",
          lambda b, ns: _args(b.logp, b.values, token_mask(b), gamma=0.9, lam=b.rewards,
                              bootstrap=b.rewards),
          "other", needs=("logp", "values"), group_local=True),
    _call("turn_gae_advantages",
          lambda b, ns: _args(b.scores, b.values, b.token_turn, b.turn_mask), "other",
          needs=("values",), tuning=({"gamma": 1.0, "lam": 0.95}, {"gamma": 0.99, "lam": 0.9}),
          group_local=True),
    # VETTA's two heads: the values stand in for both (turn head and token head), the log-probs
    # for the token rewards. Not on the explain page: its example rollouts have no critic values.
    _call("vetta_advantages",
          lambda b, ns: _args(b.scores, b.values, b.logp, b.values, b.token_turn, b.turn_mask),
          "token", output=_advantages, needs=("values", "logp", "token_turn"),
          tuning=({"lam": 1.0, "token_lam": 0.95}, {"lam": 0.9, "token_lam": 0.8}), group_local=True),
]

# --------------------------------------------------------------------------------------------
# Tools: every other public array function.
# --------------------------------------------------------------------------------------------


def _old_logp(b):
    return 0.9 * b.logp


def _loss_tuning(**fields) -> tuple[dict, dict]:
    """The bench's two values of the loss's ``clip_low`` (a leaf of its options: no recompile)."""
    return ({"options": credax.LossOptions(clip_low=0.2, **fields)},
            {"options": credax.LossOptions(clip_low=0.1, **fields)})


def _uniform_logp(b):
    """Old log-probs of a uniform sampler over the unembedding's vocabulary, ``[B, T]``."""
    return jnp.full(b.tokens.shape, -np.log(b.unembedding.shape[1]), jnp.float32)


_TOOLS = [
    _call("group_mean", lambda b, ns: _args(b.scores, b.group_ids, b.turn_mask), "turn", group_local=True),
    _call("group_count", lambda b, ns: _args(b.group_ids, b.turn_mask), "turn", group_local=True),
    _call("peer_mean", lambda b, ns: _args(b.scores, b.group_ids, b.turn_mask), "turn",
          output=lambda out: out.mean, group_local=True),
    _call("degenerate_groups", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          group_local=True),
    _call("shrinkage_baseline", lambda b, ns: _args(b.rewards, b.group_ids), "other", group_local=False),
    _call("best_prior", lambda b, ns: _args(b.scores, b.turn_mask), "turn",
          tuning=({"initial": 0.0}, {"initial": 0.1}), group_local=True),
    _call("future_best", lambda b, ns: _args(b.scores, b.turn_mask), "turn", group_local=True),
    _call("discount_weights", lambda b, ns: _args(b.turn_mask.shape[1], gamma=0.9), "other",
          tuning=({"gamma": 0.9}, {"gamma": 0.8}), group_local=True),
    _call("discounted_returns", lambda b, ns: _args(b.scores, b.turn_mask, gamma=0.9), "turn",
          tuning=({"gamma": 0.9}, {"gamma": 0.8}), group_local=True),
    _call("broadcast_to_tokens", lambda b, ns: _args(b.scores, b.token_turn), "token",
          needs=("token_turn",), group_local=True),
    _call("broadcast_to_turns", lambda b, ns: _args(b.rewards, b.turn_mask), "turn",
          group_local=True),
    # A layout of one prompt token and, per real turn, one action and one environment token.
    _call("token_turn_from_layout",
          lambda b, ns: _args(jnp.ones(b.turn_mask.shape[:1], jnp.int32),
                              b.turn_mask.astype(jnp.int32), b.turn_mask.astype(jnp.int32),
                              num_tokens=b.token_turn.shape[1]),
          "token", needs=("token_turn",), group_local=True),
    _call("turn_surprisal",
          lambda b, ns: _args(b.logp, b.token_turn, num_turns=b.turn_mask.shape[1]), "turn",
          needs=("logp",), group_local=True),
    _call("select_top_surprisal",
          lambda b, ns: _args(b.scores, b.turn_mask, b.group_ids, budget=2, scope="group"),
          "turn", group_local=True),
    _call("fit_role_constants", lambda b, ns: _args(b.scores, b.roles, b.turn_mask), "other",
          group_local=False),
    _call("optimal_mixing_weight", lambda b, ns: _args(b.scores, b.roles, b.turn_mask), "other",
          group_local=False),
    _call("judge_windows", lambda b, ns: _args(b.turn_mask, before=2, after=1), "other", group_local=True),
    _call("anchor_hit_ratio", lambda b, ns: _args(b.anchors, b.turn_mask, b.group_ids), "other",
          needs=("anchors",), group_local=False),
    _call("credit_by_role", lambda b, ns: _args(b.scores, b.roles, b.turn_mask), "other", group_local=False),
    _call("credit_by_turn", lambda b, ns: _args(b.scores, b.turn_mask), "other", group_local=False),
    _call("dead_groups", lambda b, ns: _args(b.rewards, b.group_ids), "other", group_local=False),
    _call("turn_values",
          lambda b, ns: _args(b.values, b.token_turn, num_turns=b.turn_mask.shape[1]), "turn",
          needs=("values",), group_local=True),
    _call("vapo_lambda", lambda b, ns: _args(token_mask(b)), "row", needs=("token_turn",),
          tuning=({"alpha": 0.05}, {"alpha": 0.1}), group_local=True),
    _call("value_loss",
          lambda b, ns: _args(b.values, 0.9 * b.values, b.logp, token_mask(b)), "other",
          needs=("values", "logp"), tuning=({"clip": 0.5}, {"clip": 0.2}), group_local=False),
    _call("token_logprobs", lambda b, ns: _args(b.logits, b.tokens, mask=token_mask(b)), "token",
          needs=("logits", "tokens"), group_local=True),
    _call("token_entropy", lambda b, ns: _args(b.logits, mask=token_mask(b)), "token",
          needs=("logits",), tuning=({"temperature": 1.0}, {"temperature": 0.7}), group_local=True),
    _call("token_logprobs_from_hidden",
          lambda b, ns: _args(b.hidden, b.unembedding, b.tokens, chunk_size=3,
                              mask=token_mask(b)),
          "token", needs=("hidden", "unembedding", "tokens"), group_local=True),
    _call("policy_loss_from_hidden",
          lambda b, ns: _args(b.hidden, b.unembedding, b.tokens, _uniform_logp(b), b.rewards,
                              token_mask(b), chunk_size=3),
          "other", needs=("hidden", "unembedding", "tokens"), tuning=_loss_tuning(), group_local=False),
    _call("kl_divergence", lambda b, ns: _args(b.logp, _old_logp(b), mask=token_mask(b)),
          "token", needs=("logp",), group_local=True),
    _call("aggregate", lambda b, ns: _args(b.logp, token_mask(b), mode="seq-mean-token-mean"),
          "other", needs=("logp",), group_local=False),
    _call("policy_loss",
          lambda b, ns: _args(b.logp, _old_logp(b), b.rewards, token_mask(b), ref_logp=b.logp,
                              options=credax.LossOptions(kl_coef=0.1)),
          "other", needs=("logp",), tuning=_loss_tuning(kl_coef=0.1), group_local=False),
]

# --------------------------------------------------------------------------------------------
# Forms: the other annotated forms of a union, and other options worth a call of their own.
# --------------------------------------------------------------------------------------------

_FORMS = {
    # [B, K] advantages with token_turn, and a sequence ratio.
    "policy_loss:turns": _call(
        "policy_loss", lambda b, ns: _args(b.logp, b.logp, b.scores, token_mask(b),
                                           token_turn=b.token_turn,
                                           options=credax.LossOptions(ratio="sequence")),
        "other", needs=("logp",), tuning=_loss_tuning(ratio="sequence"), group_local=False),
    "policy_loss:tokens": _call(
        "policy_loss", lambda b, ns: _args(b.logp, _old_logp(b), b.logp, token_mask(b),
                                           options=credax.LossOptions(dual_clip=3.0)),
        "other", needs=("logp",), tuning=_loss_tuning(dual_clip=3.0), group_local=False),
    "token_logprobs_from_hidden:entropy": _call(
        "token_logprobs_from_hidden",
        lambda b, ns: _args(b.hidden, b.unembedding, b.tokens, chunk_size=4, with_entropy=True),
        "other", needs=("hidden", "unembedding", "tokens"), group_local=True),
    "select_top_surprisal:batch": _call(
        "select_top_surprisal", lambda b, ns: _args(b.scores, b.turn_mask, budget=3), "turn",
        group_local=False),
    "group_normalize:rows": _call(
        "group_normalize", lambda b, ns: _args(b.rewards, b.group_ids), "row", group_local=True),
    "grpo_advantages:groups": _call(
        "grpo_advantages", lambda b, ns: _args(b.rewards, ns.groups(b.group_ids)), "row", group_local=True),
    # TRL's scale_rewards="batch": the batch std (not group-isolated, by design).
    "grpo_advantages:batch_scale": _call(
        "grpo_advantages",
        lambda b, ns: _args(b.rewards, b.group_ids, normalization=presets.TRL_BATCH), "row",
        group_local=False),
    "kl_divergence:scalar": _call(
        "kl_divergence", lambda b, ns: _args(jnp.max(b.logp), jnp.min(b.logp)), "other",
        needs=("logp",), group_local=False),
    # Scores as per-turn rewards, half of them as values: a row-wise recursion over turns.
    "gae_advantages:turns": _call(
        "gae_advantages", lambda b, ns: _args(b.scores, 0.5 * b.scores, b.turn_mask, gamma=0.9,
                                              lam=0.95),
        "turn", output=_advantages, group_local=True),
    "gae_advantages:scalar_lam": _call(
        "gae_advantages", lambda b, ns: _args(b.logp, b.values, token_mask(b), gamma=1.0,
                                              lam=0.95),
        "other", needs=("logp", "values"), tuning=({"gamma": 1.0, "lam": 0.95},
                                                   {"gamma": 0.99, "lam": 0.9}), group_local=True),
    "kl_divergence:turns": _call(
        "kl_divergence", lambda b, ns: _args(b.scores, 0.5 * b.scores, mask=b.turn_mask), "turn",
        group_local=True),
    "role_credit:list": _call(
        "role_credit", lambda b, ns: _args(b.roles, b.turn_mask,
                                           constants=[1.0, 0.5, -0.5, -1.0]), "turn", group_local=True),
    "g2po_advantages:action_valid": _call(
        "g2po_advantages", lambda b, ns: _args(b.rewards, b.anchors, b.turn_mask, b.group_ids,
                                               action_valid=b.turn_mask), "other",
        needs=("anchors",), group_local=True),
    "triage_advantages:whiten": _call(
        "triage_advantages", lambda b, ns: _args(b.rewards, b.roles, b.turn_mask, whiten=True),
        "turn", group_local=False),
}

ESTIMATORS: dict[str, Call] = {c.name: c for c in _ESTIMATORS}
TOOLS: dict[str, Call] = {c.name: c for c in _TOOLS}
FORMS: dict[str, Call] = _FORMS
CALLS: dict[str, Call] = {**ESTIMATORS, **TOOLS}
ALL: dict[str, Call] = {**CALLS, **FORMS}
# credax.explain's methods, in the table's order: {short name: entry}.
EXPLAINED: dict[str, Call] = {c.explain: c for c in ALL.values() if c.explain is not None}



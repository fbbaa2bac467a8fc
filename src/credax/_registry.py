"""The method registry: how to call each public credax function on a :class:`TurnBatch`.

Everything in credax that needs "call estimator X on a batch" reads it from here:
``credax.explain`` (the methods it shows), ``credax.verl`` (the estimators it registers),
``credax.bench`` (the sweep of every public entry point) and the project's lab
(``benchmarks/lab``). ``credax.testing.calls`` builds its call table on it, adding only what
the tests need (the invariants each output satisfies, the shapes an annotation leaves free, the
stand-ins for missing optional fields). An entry says *how to call* (arguments, output, level,
the optional fields it needs, whether it is group-local), never *what the answer is*, nor what
explain's page says about a method (``credax.explain``), nor the values a sweep gives its
hyperparameters (``credax.bench.sweep.SCHEDULE``, shared by the bench and the compile-once test)::

    from credax._registry import CALLS
    CALLS["grpo_advantages"](batch)                      # credax.grpo_advantages(rewards, ids, mask)
    CALLS["tcpo_advantages"](batch, gamma=0.9)           # options are added to the call
    CALLS["grpo_advantages"](batch, ns=credax.torch)     # the same call through another namespace

Why a module of the core, not of ``credax.testing``: a bridge's numbers must not depend on a test
fixture. Each entry reads exactly the batch fields it names; an optional field that is ``None``
is a ``ValueError`` naming it (:attr:`Call.needs`), never a silent stand-in (GiGPO's step rewards
are ``turn_rewards``, set by the bridge, not the scores by default).

Two tables, each ``{name: Call}``:

* :data:`ESTIMATORS` — every public function that returns advantages or credit (``*_advantages``,
  ``*_credit``, ``group_normalize``), keyed by its name: its canonical call;
* :data:`TOOLS` — every other public array function (turn tools, diagnostics, log-probs, losses),
  keyed by its name;
:data:`CALLS` is both together (one entry per public array function). Other forms of a call (a
second annotated form of a union, another option) are the tests' and the bench's only, so they
live with the bench (``credax.bench.sweep.FORMS``).

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
    group_local: bool | None = None

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


def _chains(b, ns):
    """``tree_advantages`` on a flat batch: each row a chain of its turns (turn ``k``'s parent is
    ``k - 1``), the outcome on its last turn, the prompt in ``group_ids`` (a prompt's first turns
    are siblings). A TurnBatch has no parent links, so the rows share nothing but the prompt:
    TreeRPO then credits the first turn with Dr. GRPO's ``r - mean(r)`` and the rest, lone
    children, with 0."""
    mask = b.turn_mask & b.row_mask[:, None]
    last = mask & ~jnp.concatenate([mask[:, 1:], jnp.zeros_like(mask[:, :1])], axis=1)
    parent = jnp.broadcast_to(jnp.arange(-1, mask.shape[1] - 1, dtype=jnp.int32), mask.shape)
    return _args(jnp.where(last, b.rewards[:, None], 0.0), parent, mask, group_ids=b.group_ids)


_advantages = lambda out: out.advantages  # noqa: E731
_credit = lambda out: out.credit  # noqa: E731

# --------------------------------------------------------------------------------------------
# Estimators: advantages and credit.
# --------------------------------------------------------------------------------------------

_ESTIMATORS = [
    _call("group_normalize", lambda b, ns: _args(b.scores, b.group_ids, b.turn_mask), "turn",
          group_local=True),
    _call("grpo_advantages", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          group_local=True),
    _call("rloo_advantages", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          group_local=True),
    _call("gdpo_advantages", lambda b, ns: _args(_reward_components(b), b.group_ids, b.row_mask,
                                                 weights=jnp.array([1.0, 0.5])),
          "row", group_local=True),
    _call("shrinkage_advantages", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          group_local=False),
    # verl's batch-statistic estimators: a batch whitening or α counts the batch's nonzero
    # rewards, so they are not group-isolated by design.
    _call("gpg_advantages", lambda b, ns: _args(b.rewards, b.group_ids, mask=b.row_mask), "row",
          group_local=False),
    _call("reinforce_pp_advantages", lambda b, ns: _args(b.logp, token_mask(b), gamma=0.9),
          "token", needs=("logp",), group_local=False),
    _call("reinforce_pp_baseline_advantages",
          lambda b, ns: _args(b.rewards, b.group_ids, token_mask(b)), "token",
          needs=("token_turn",), group_local=False),
    _call("tcpo_advantages", _tcpo, "turn", output=_advantages, group_local=True),
    _call("retrospective_credit", lambda b, ns: _args(b.scores, b.turn_mask), "turn",
          output=_credit, group_local=True),
    _call("hindsight_credit", lambda b, ns: _args(b.scores, b.turn_mask, b.group_ids), "turn",
          output=_credit, group_local=True),
    _call("counterfactual_credit", lambda b, ns: _args(b.scores, b.alt_scores, b.alt_mask),
          "other", needs=("alt_scores", "alt_mask"), group_local=True),
    _call("raw_score_credit", lambda b, ns: _args(b.scores, b.turn_mask), "turn", group_local=True),
    _call("adjacent_delta_credit", lambda b, ns: _args(b.scores, b.turn_mask), "turn",
          group_local=True),
    _call("role_credit", lambda b, ns: _args(b.roles, b.turn_mask), "turn",
          group_local=True),
    # GRPO outcome advantages plus role credit (roles include -1, unlabeled).
    _call("triage_advantages",
          lambda b, ns, **outcome: _args(_outcome_advantages(b, ns, **outcome), b.roles,
                                         b.turn_mask),
          "turn", group_local=True),
    # The scores double as per-turn judge scores.
    _call("scalar_process_advantages",
          lambda b, ns, **outcome: _args(_outcome_advantages(b, ns, **outcome), b.scores,
                                         b.turn_mask, lam=0.5),
          "turn", group_local=True),
    # The step-level methods read per-turn rewards and anchor states the caller provides
    # (explain: the environment's step rewards; verl: its turn scores; the lab: score changes).
    _call("mt_grpo_advantages",
          lambda b, ns: _args(b.turn_rewards, b.rewards, b.turn_mask, b.group_ids), "turn",
          needs=("turn_rewards",), group_local=True),
    # FACA's reactions: the per-turn rewards stand for the score of the next user turn's reaction
    # (the last turn of each row has none: the default reaction_mask).
    _call("faca_advantages",
          lambda b, ns: _args(b.turn_rewards, b.rewards, b.turn_mask, b.group_ids), "turn",
          needs=("turn_rewards",), group_local=True),
    _call("gigpo_advantages",
          lambda b, ns: _args(b.rewards, b.turn_rewards, b.anchors, b.turn_mask, b.group_ids),
          "turn", needs=("turn_rewards", "anchors"), group_local=True),
    _call("hgpo_advantages",
          lambda b, ns: _args(b.rewards, b.turn_rewards, b.anchors, b.turn_mask, b.group_ids),
          "turn", output=_advantages, needs=("turn_rewards", "anchors"), group_local=True),
    _call("pgpo_advantages",
          lambda b, ns: _args(b.turn_rewards, b.anchors, b.turn_mask, b.group_ids), "turn",
          output=_advantages, needs=("turn_rewards", "anchors"), group_local=True),
    _call("g2po_advantages",
          lambda b, ns: _args(b.rewards, b.anchors, b.turn_mask, b.group_ids), "turn",
          output=_advantages, needs=("anchors",), group_local=True),
    # GRPO's outcome advantages spread over the turns by |step reward| weights (any non-negative
    # per-turn signal would do: judge attributions, proof edges, likelihood shifts).
    _call("redistribute_advantages",
          lambda b, ns, **outcome: _args(_outcome_advantages(b, ns, **outcome),
                                         jnp.abs(b.turn_rewards), b.turn_mask),
          "turn", needs=("turn_rewards",), group_local=True),
    _call("tree_advantages", _chains, "turn", output=_advantages, group_local=True),
    # Per-turn rewards and their returns to go.
    _call("unbiased_turn_advantages",
          lambda b, ns: _args(b.turn_rewards, b.turn_mask, b.group_ids), "turn",
          needs=("turn_rewards",), group_local=True),
    # Token rewards (the log-probs) and values; lam and bootstrap one per row.
    _call("gae_advantages",
          lambda b, ns: _args(b.logp, b.values, token_mask(b), gamma=0.9, lam=b.rewards,
                              bootstrap=b.rewards),
          "other", needs=("logp", "values"), group_local=True),
    _call("turn_gae_advantages",
          lambda b, ns: _args(b.scores, b.values, b.token_turn, b.turn_mask), "other",
          needs=("values",), group_local=True),
    # VETTA's two heads: the values stand in for both (turn head and token head), the log-probs
    # for the token rewards. Not on the explain page: its example rollouts have no critic values.
    _call("vetta_advantages",
          lambda b, ns: _args(b.scores, b.values, b.logp, b.values, b.token_turn, b.turn_mask),
          "token", output=_advantages, needs=("values", "logp", "token_turn"),
          group_local=True),
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
    _call("group_mean", lambda b, ns: _args(b.scores, b.group_ids, b.turn_mask), "turn", group_local=True),
    _call("group_count", lambda b, ns: _args(b.group_ids, b.turn_mask), "turn", group_local=True),
    _call("peer_mean", lambda b, ns: _args(b.scores, b.group_ids, b.turn_mask), "turn",
          output=lambda out: out.mean, group_local=True),
    _call("degenerate_groups", lambda b, ns: _args(b.rewards, b.group_ids, b.row_mask), "row",
          group_local=True),
    _call("shrinkage_baseline", lambda b, ns: _args(b.rewards, b.group_ids), "other", group_local=False),
    _call("best_prior", lambda b, ns: _args(b.scores, b.turn_mask), "turn",
          group_local=True),
    _call("future_best", lambda b, ns: _args(b.scores, b.turn_mask), "turn", group_local=True),
    _call("discount_weights", lambda b, ns: _args(b.turn_mask.shape[1], gamma=0.9), "other",
          group_local=True),
    _call("discounted_returns", lambda b, ns: _args(b.scores, b.turn_mask, gamma=0.9), "turn",
          group_local=True),
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
          group_local=True),
    _call("value_loss",
          lambda b, ns: _args(b.values, 0.9 * b.values, b.logp, token_mask(b)), "other",
          needs=("values", "logp"), group_local=False),
    _call("token_logprobs", lambda b, ns: _args(b.logits, b.tokens, mask=token_mask(b)), "token",
          needs=("logits", "tokens"), group_local=True),
    _call("token_entropy", lambda b, ns: _args(b.logits, mask=token_mask(b)), "token",
          needs=("logits",), group_local=True),
    _call("token_logprobs_from_hidden",
          lambda b, ns: _args(b.hidden, b.unembedding, b.tokens, chunk_size=3,
                              mask=token_mask(b)),
          "token", needs=("hidden", "unembedding", "tokens"), group_local=True),
    _call("policy_loss_from_hidden",
          lambda b, ns: _args(b.hidden, b.unembedding, b.tokens, _uniform_logp(b), b.rewards,
                              token_mask(b), chunk_size=3),
          "other", needs=("hidden", "unembedding", "tokens"), group_local=False),
    _call("kl_divergence", lambda b, ns: _args(b.logp, _old_logp(b), mask=token_mask(b)),
          "token", needs=("logp",), group_local=True),
    _call("aggregate", lambda b, ns: _args(b.logp, token_mask(b), mode="seq-mean-token-mean"),
          "other", needs=("logp",), group_local=False),
    _call("policy_loss",
          lambda b, ns: _args(b.logp, _old_logp(b), b.rewards, token_mask(b), ref_logp=b.logp,
                              options=credax.LossOptions(kl_coef=0.1)),
          "other", needs=("logp",), group_local=False),
]

ESTIMATORS: dict[str, Call] = {c.name: c for c in _ESTIMATORS}
TOOLS: dict[str, Call] = {c.name: c for c in _TOOLS}
CALLS: dict[str, Call] = {**ESTIMATORS, **TOOLS}

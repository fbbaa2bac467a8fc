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

An entry's arguments are the function's own signature read through one table: each parameter
name says which batch field it is (:data:`ARGUMENTS`: ``rewards`` the rewards, ``anchor_ids`` the
anchors, ``mask`` the mask of the output's level, ...), and the fields an entry needs follow from
what it reads. Adding an entry: one ``_call(name, level, group_local=...)`` line in the right
table, with what the signature cannot say: a defaulted parameter the call passes too
(``reads=("mask",)``), an argument read otherwise or a keyword option (``rewards=_field("logp")``,
``gamma=0.9``) — see docs/layout.md, "Adding an estimator".
"""

from __future__ import annotations

import inspect
import itertools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

# The entries read the public signatures when this module is imported: credax/__init__.py
# never imports it (its readers import it after credax, or late, as credax._credit does).
import credax

from ._batch import TurnBatch

# What an entry's output is, for a consumer that reshapes it: one value per row ``[B]``, per turn
# ``[B, K]``, per token ``[B, T]``, or anything else (scalars, fits, NamedTuples of several).
LEVELS = ("row", "turn", "token", "other")
# The batch fields every entry may read without declaring them (every TurnBatch has them).
REQUIRED = ("scores", "turn_mask", "group_ids", "rewards", "roles", "token_turn")
# The optional fields: an entry that reads one needs it (`Call.needs`).
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


def _args(*args, **kwargs) -> tuple[tuple, dict]:
    return args, kwargs


def _old_logp(b):
    return 0.9 * b.logp


@dataclass(frozen=True)
class _Read:
    """An argument read from the batch: ``fn(batch)``, reading the TurnBatch ``fields``; with
    ``nested``, ``fn(batch, ns, **nested)``, an inner call through the caller's namespace."""

    fields: tuple[str, ...]
    fn: Callable
    nested: bool = False


def _field(name: str) -> _Read:
    """The read of TurnBatch field ``name``."""
    return _Read((name,), operator.attrgetter(name))


# How a call reads each parameter from the batch, by the parameter's name: the one place where a
# public function's parameters meet the TurnBatch fields. A parameter named as a field reads it;
# the others read the field they mean (the outcome, step rewards and reactions, anchor ids, token
# log-probs and rewards, value heads) or, where a batch has no such field, its stand-in: the
# scores for any other per-turn value, the rewards for per-row advantages, ``0.9 * logp`` for the
# old policy's log-probs.
ARGUMENTS: dict[str, _Read] = {
    **{f: _field(f) for f in TurnBatch._fields},
    "outcome_rewards": _field("rewards"), "advantages": _field("rewards"),
    "step_rewards": _field("turn_rewards"), "reactions": _field("turn_rewards"),
    "anchor_ids": _field("anchors"), "candidates": _field("turn_mask"),
    "token_logprobs": _field("logp"), "token_rewards": _field("logp"),
    "turn_values": _field("values"), "token_values": _field("values"),
    **dict.fromkeys(("x", "credit", "residuals", "surprisal", "process_rewards"), _field("scores")),
    "response_mask": _Read(("token_turn",), token_mask),
    "old_logp": _Read(("logp",), _old_logp),
    "num_turns": _Read(("turn_mask",), lambda b: b.turn_mask.shape[1]),
}
# ``mask`` is the mask of the output's level: the row mask of one value per row, the turn mask of
# one per turn, the token mask otherwise (token arrays, losses and fits over tokens).
_MASK = {"row": _Read(("rows", "turn_mask"), lambda b: b.row_mask), "turn": _field("turn_mask"),
         "token": ARGUMENTS["response_mask"], "other": ARGUMENTS["response_mask"]}


def _value(v, b, ns, nested):
    if not isinstance(v, _Read):
        return v
    return v.fn(b, ns, **nested) if v.nested else v.fn(b)


def _call(name: str, level: str, *, reads: tuple[str, ...] = (), output=_identity,
          needs: tuple[str, ...] = (), group_local: bool | None = None, **given) -> Call:
    """The entry of public function ``name``, its call read from its signature.

    Every positional parameter without a default, and each one named in ``reads``, is read from
    the batch by its name (:data:`ARGUMENTS`; ``mask`` by ``level``); ``given`` sets a parameter
    otherwise: a :class:`_Read`, a function of the batch, or a constant (``None``: not passed).
    The arguments read from the batch go by position while every one before them does; the
    others by keyword. :attr:`Call.needs` are the optional fields (and ``token_turn``) the reads
    read, then ``needs``: those a function of the entry reads (the registry cannot see them).
    A call the signature cannot say is a :class:`Call` with its own ``arguments``.
    """
    params = list(inspect.signature(getattr(credax, name)).parameters.values())
    unknown = sorted({*given, *reads} - {p.name for p in params})
    if unknown:
        raise TypeError(f"credax._registry: {name} has no parameter {unknown[0]!r}.")
    given = {k: _Read((), v) if callable(v) and not isinstance(v, _Read) else v
             for k, v in given.items() if v is not None}
    table = {**ARGUMENTS, "mask": _MASK[level], **given}
    # A KeyError here names an argument no batch field reads: give it (`name=...`).
    passed = {p.name: table[p.name] for p in params if p.name in {*given, *reads}
              or (p.default is p.empty and p.kind is not p.KEYWORD_ONLY)}
    first = itertools.takewhile(lambda p: p.kind <= p.POSITIONAL_OR_KEYWORD
                                and isinstance(passed.get(p.name), _Read), params)
    positional = [passed.pop(p.name) for p in list(first)]
    values = [v for v in [*positional, *passed.values()] if isinstance(v, _Read)]
    read = [f for v in values for f in v.fields if f in (*OPTIONAL, "token_turn")]
    needs = tuple(dict.fromkeys([*read, *needs]))

    def build(b, ns, nested):
        return (tuple(_value(v, b, ns, nested) for v in positional),
                {k: _value(v, b, ns, nested) for k, v in passed.items()})

    if any(v.nested for v in values):
        return Call(name, lambda b, ns, **nested: build(b, ns, nested), level, output, needs,
                    group_local)
    return Call(name, lambda b, ns: build(b, ns, {}), level, output, needs, group_local)


# GRPO's canonical call through the caller's namespace, with the caller's nested options: the
# outcome advantages TRIAGE, the scalar process baseline and the redistribution add to.
_OUTCOME = _Read(("rewards", "group_ids", "rows", "turn_mask"),
                 lambda b, ns, **options: ESTIMATORS["grpo_advantages"](b, ns=ns, **options),
                 nested=True)


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
    _call("group_normalize", "turn", reads=("mask",), group_local=True),
    _call("grpo_advantages", "row", reads=("mask",), group_local=True),
    _call("rloo_advantages", "row", reads=("mask",), group_local=True),
    _call("gdpo_advantages", "row", reads=("mask",), rewards=_reward_components,
          weights=lambda b: jnp.array([1.0, 0.5]), group_local=True),
    _call("shrinkage_advantages", "row", reads=("mask",), group_local=False),
    # verl's batch-statistic estimators: a batch whitening or α counts the batch's nonzero
    # rewards, so they are not group-isolated by design.
    _call("gpg_advantages", "row", reads=("mask",), group_local=False),
    _call("reinforce_pp_advantages", "token", gamma=0.9, group_local=False),
    _call("reinforce_pp_baseline_advantages", "token", group_local=False),
    Call("tcpo_advantages", _tcpo, "turn", _advantages, group_local=True),
    _call("retrospective_credit", "turn", output=_credit, group_local=True),
    _call("hindsight_credit", "turn", output=_credit, group_local=True),
    _call("counterfactual_credit", "other", group_local=True),
    _call("raw_score_credit", "turn", group_local=True),
    _call("adjacent_delta_credit", "turn", group_local=True),
    _call("role_credit", "turn", group_local=True),
    # GRPO outcome advantages plus role credit (roles include -1, unlabeled).
    _call("triage_advantages", "turn", outcome_advantages=_OUTCOME, group_local=True),
    # The scores double as per-turn judge scores.
    _call("scalar_process_advantages", "turn", outcome_advantages=_OUTCOME, lam=0.5,
          group_local=True),
    # The step-level methods read per-turn rewards and anchor states the caller provides
    # (explain: the environment's step rewards; verl: its turn scores; the lab: score changes).
    _call("mt_grpo_advantages", "turn", group_local=True),
    # FACA's reactions: the per-turn rewards stand for the score of the next user turn's reaction
    # (the last turn of each row has none: the default reaction_mask).
    _call("faca_advantages", "turn", group_local=True),
    _call("gigpo_advantages", "turn", group_local=True),
    _call("hgpo_advantages", "turn", output=_advantages, group_local=True),
    _call("pgpo_advantages", "turn", output=_advantages, group_local=True),
    _call("g2po_advantages", "turn", output=_advantages, group_local=True),
    # GRPO's outcome advantages spread over the turns by |step reward| weights (any non-negative
    # per-turn signal would do: judge attributions, proof edges, likelihood shifts).
    _call("redistribute_advantages", "turn", advantages=_OUTCOME,
          weights=lambda b: jnp.abs(b.turn_rewards), needs=("turn_rewards",), group_local=True),
    Call("tree_advantages", _chains, "turn", _advantages, group_local=True),
    # Per-turn rewards and their returns to go.
    _call("unbiased_turn_advantages", "turn", group_local=True),
    # Token rewards (the log-probs) and values; lam and bootstrap one per row.
    _call("gae_advantages", "other", rewards=_field("logp"), gamma=0.9, lam=_field("rewards"),
          bootstrap=_field("rewards"), group_local=True),
    _call("turn_gae_advantages", "other", turn_rewards=_field("scores"), group_local=True),
    # VETTA's two heads: the values stand in for both (turn head and token head), the log-probs
    # for the token rewards. Not on the explain page: its example rollouts have no critic values.
    _call("vetta_advantages", "token", turn_rewards=_field("scores"), output=_advantages,
          group_local=True),
]

# --------------------------------------------------------------------------------------------
# Tools: every other public array function.
# --------------------------------------------------------------------------------------------


def _uniform_logp(b):
    """Old log-probs of a uniform sampler over the unembedding's vocabulary, ``[B, T]``."""
    return jnp.full(b.tokens.shape, -np.log(b.unembedding.shape[1]), jnp.float32)


_TOOLS = [
    _call("group_mean", "turn", reads=("mask",), group_local=True),
    _call("group_count", "turn", reads=("mask",), group_local=True),
    _call("peer_mean", "turn", reads=("mask",), output=lambda out: out.mean, group_local=True),
    _call("degenerate_groups", "row", reads=("mask",), group_local=True),
    _call("shrinkage_baseline", "other", group_local=False),
    _call("best_prior", "turn", group_local=True),
    _call("future_best", "turn", group_local=True),
    _call("discount_weights", "other", gamma=0.9, group_local=True),
    _call("discounted_returns", "turn", rewards=_field("scores"), gamma=0.9, group_local=True),
    _call("broadcast_to_tokens", "token", turn_values=_field("scores"), group_local=True),
    _call("broadcast_to_turns", "turn", values=_field("rewards"), group_local=True),
    # A layout of one prompt token and, per real turn, one action and one environment token.
    _call("token_turn_from_layout", "token",
          prompt_lengths=lambda b: jnp.ones(b.turn_mask.shape[:1], jnp.int32),
          action_lengths=lambda b: b.turn_mask.astype(jnp.int32),
          env_lengths=lambda b: b.turn_mask.astype(jnp.int32),
          num_tokens=lambda b: b.token_turn.shape[1], needs=("token_turn",), group_local=True),
    _call("turn_surprisal", "turn", reads=("num_turns",), group_local=True),
    _call("select_top_surprisal", "turn", reads=("group_ids",), budget=2, scope="group",
          group_local=True),
    _call("fit_role_constants", "other", group_local=False),
    _call("optimal_mixing_weight", "other", group_local=False),
    _call("judge_windows", "other", before=2, after=1, group_local=True),
    _call("anchor_hit_ratio", "other", group_local=False),
    _call("credit_by_role", "other", group_local=False),
    _call("credit_by_turn", "other", group_local=False),
    _call("dead_groups", "other", group_local=False),
    _call("turn_values", "turn", reads=("num_turns",), group_local=True),
    _call("vapo_lambda", "row", mask=ARGUMENTS["response_mask"], group_local=True),
    _call("value_loss", "other", old_values=lambda b: 0.9 * b.values, returns=_field("logp"),
          group_local=False),
    _call("token_logprobs", "token", reads=("mask",), group_local=True),
    _call("token_entropy", "token", reads=("mask",), group_local=True),
    _call("token_logprobs_from_hidden", "token", reads=("mask",), chunk_size=3, group_local=True),
    _call("policy_loss_from_hidden", "other", old_logp=_uniform_logp, chunk_size=3,
          group_local=False),
    _call("kl_divergence", "token", reads=("mask",), ref_logp=_old_logp, group_local=True),
    _call("aggregate", "other", values=_field("logp"), mode="seq-mean-token-mean",
          group_local=False),
    _call("policy_loss", "other", ref_logp=_field("logp"),
          options=credax.LossOptions(kl_coef=0.1), group_local=False),
]

ESTIMATORS: dict[str, Call] = {c.name: c for c in _ESTIMATORS}
TOOLS: dict[str, Call] = {c.name: c for c in _TOOLS}
CALLS: dict[str, Call] = {**ESTIMATORS, **TOOLS}

"""The call table of the tests: the method registry plus what only the tests need.

How to call each public credax function on a :class:`TurnBatch` is the package's own method
registry (``credax._registry``: ``credax.explain``, ``credax.verl``, ``credax.bench`` and the lab
read it there). This module adds the test metadata and nothing else: the invariants each output
satisfies (:attr:`Call.checks`, run by tests/test_dogfood.py), the shapes an annotation leaves
free (:attr:`Call.free`, accepted by the shape contract), stand-ins for the two optional fields
with an obvious default (a drawn batch has neither: ``anchors`` ← ``roles``, ``turn_rewards`` ←
``scores``), and :func:`example_batch`, a batch with every field set::

    from credax.testing.calls import CALLS
    CALLS["grpo_advantages"](batch)                      # credax.grpo_advantages(rewards, ids, mask)
    CALLS["tcpo_advantages"](batch, gamma=0.9)           # options are added to the call
    CALLS["grpo_advantages"](batch, ns=credax.torch)     # the same call through another namespace

The tables mirror the registry's, one test :class:`Call` per registry entry: :data:`ESTIMATORS`,
:data:`TOOLS`, :data:`VARIANTS` (:data:`FORMS`, the other forms of a call, with their
metadata), :data:`CALLS` (the first two) and
:data:`ALL` (all three). A call reads the batch's first six fields and the optional fields its
entry names (:attr:`Call.needs`; a ``ValueError`` names a missing one).

This module needs no hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

from .. import _registry
from .._batch import TurnBatch
from .._registry import LEVELS as LEVELS
from .._registry import OPTIONAL as OPTIONAL
from .._registry import token_mask as token_mask
from ..bench.sweep import FORMS as FORMS
from ..bench.sweep import example_batch as example_batch

# The invariant checks of credax.testing that an entry's output satisfies (tests/test_dogfood.py).
COMMON = ("padding_invariance", "permutation_equivariance", "group_isolation", "masked_zero",
          "finite_gradients", "jit_matches_eager")
CENTRED = COMMON + ("group_zero_mean",)  # centred, group-normalised outputs
NO_GRAD = tuple(c for c in COMMON if c != "finite_gradients")  # boolean outputs
# Shrinkage pulls every group toward the across-prompt mean: not group-isolated, by design.
POOLED = tuple(c for c in COMMON if c != "group_isolation")
# verl's batch-statistic estimators (GPG, REINFORCE++) count or whiten over the whole batch: not
# group-isolated by design, so they have no invariant checks here.


def anchors(b: TurnBatch):
    """``b.anchors``, or ``b.roles`` (small categorical codes: many shared anchor states)."""
    return b.roles if b.anchors is None else b.anchors


def turn_rewards(b: TurnBatch):
    """``b.turn_rewards``, or ``b.scores`` as per-turn rewards."""
    return b.scores if b.turn_rewards is None else b.turn_rewards


def with_stand_ins(b: TurnBatch) -> TurnBatch:
    """``b`` with the two optional fields that have a stand-in filled (:func:`anchors`,
    :func:`turn_rewards`): what every call of this table reads (the registry never fills them)."""
    if b.anchors is not None and b.turn_rewards is not None:
        return b
    return b._replace(anchors=anchors(b), turn_rewards=turn_rewards(b))


@dataclass(frozen=True)
class Call(_registry.Call):
    """A registry entry (:class:`credax._registry.Call`) with the tests' metadata.

    Attributes:
      checks: the ``credax.testing`` invariants the output satisfies (``check_<name>``).
      free: ``((argument, mutations, why), ...)``: shapes the annotation leaves free, which the
        shape contract must accept (``"row"`` one more row, ``"last"`` one more entry on the last
        axis, ``"axis"`` one more trailing axis).
      adapter: ``adapter(fn)(batch)``, the entry's call of ``fn`` as a checker's adapter.
    """

    checks: tuple[str, ...] = ()
    free: tuple[tuple[str, tuple[str, ...], str], ...] = ()
    adapter: Callable = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # One adapter object per entry, so the checkers of credax.testing (which cache their jit
        # on (fn, adapter)) share one compilation per function across checks.
        object.__setattr__(self, "adapter", lambda fn: lambda b: self(b, fn=fn))

    def args(self, batch: TurnBatch, *, ns=None, nested: Mapping | None = None
             ) -> tuple[tuple, dict]:
        """The registry's arguments on ``batch``, the stand-ins filled first."""
        return super().args(with_stand_ins(batch), ns=ns, nested=nested)

    @classmethod
    def of(cls, entry: _registry.Call, **meta) -> Call:
        """The test entry of registry ``entry`` with ``meta`` (``checks``, ``free``)."""
        core = {f.name: getattr(entry, f.name) for f in fields(_registry.Call)}
        return cls(**core, **meta)


# --------------------------------------------------------------------------------------------
# The tests' metadata of each registry entry, by label. What the registry says is derived: an
# estimator (is_estimator) with one value per row or turn (level "row" or "turn") that is
# group-local gets the COMMON invariants; META states the rest (a stronger claim, CENTRED; an
# estimator the rule misjudges; the tools' checks; the shapes an annotation leaves free).
# --------------------------------------------------------------------------------------------

_V_FREE = (("unembedding", ("last",), "V is free (the tokens stay below it)"),)
META: dict[str, dict] = {
    # Estimators.
    "group_normalize": dict(checks=CENTRED),
    "grpo_advantages": dict(checks=CENTRED),
    "rloo_advantages": dict(checks=CENTRED),
    "gdpo_advantages": dict(checks=CENTRED),
    "shrinkage_advantages": dict(checks=POOLED),
    "reinforce_pp_baseline_advantages": dict(
        free=(("response_mask", ("last",), "T is free: it sets the output length"),)),
    "tcpo_advantages": dict(checks=CENTRED),
    "unbiased_turn_advantages": dict(checks=CENTRED),
    "tree_advantages": dict(checks=CENTRED),
    # Tools.
    "group_mean": dict(checks=COMMON),
    "group_count": dict(free=(("mask", ("last", "axis"), "mask is `B *rest`: any trailing shape"),)),
    "peer_mean": dict(checks=COMMON),
    "degenerate_groups": dict(checks=NO_GRAD),
    "best_prior": dict(checks=COMMON),
    "future_best": dict(checks=COMMON),
    "discounted_returns": dict(checks=COMMON),
    "broadcast_to_tokens": dict(
        free=(("turn_values", ("last",), "K is free: token_turn indexes into it"),
              ("token_turn", ("last",), "T is free: it sets the output length"))),
    "broadcast_to_turns": dict(free=(("turn_mask", ("last",), "K is free: it sets the output's"),)),
    "judge_windows": dict(free=(("turn_mask", ("row", "last"), "its only array: any [B, K]"),)),
    "vapo_lambda": dict(free=(("mask", ("row", "last"), "its only array: any [B, N]"),)),
    "token_logprobs": dict(free=(("logits", ("last",), "V is free (the tokens stay below it)"),)),
    "token_entropy": dict(free=(("logits", ("last",), "V is free"),)),
    "token_logprobs_from_hidden": dict(free=_V_FREE),
    "policy_loss_from_hidden": dict(free=_V_FREE),
    # Variants (the registry's forms).
    "gae_advantages:turns": dict(checks=COMMON),
    "kl_divergence:turns": dict(checks=COMMON),
}


_UNKNOWN = set(META) - set(_registry.CALLS) - set(FORMS)
if _UNKNOWN:  # a label that names no registry entry would drop its checks silently
    raise ValueError(f"credax.testing.calls.META: {sorted(_UNKNOWN)} are not registry labels.")


def is_estimator(name: str) -> bool:
    """Whether public function ``name`` returns advantages or credit (it belongs in ESTIMATORS)."""
    return name.endswith(("_advantages", "_credit")) or name == "group_normalize"


def derived_checks(label: str, entry: _registry.Call) -> tuple[str, ...]:
    """The invariants the registry's facts imply for ``entry``: :data:`COMMON` for a group-local
    estimator of one value per row or turn, none otherwise (batch statistics, token or other
    shapes the checkers cannot state)."""
    local_shape = entry.level in ("row", "turn") and entry.group_local is True
    return COMMON if ":" not in label and is_estimator(entry.name) and local_shape else ()


def _table(entries: Mapping[str, _registry.Call]) -> dict[str, Call]:
    return {label: Call.of(entry, **{"checks": derived_checks(label, entry),
                                     **META.get(label, {})})
            for label, entry in entries.items()}


ESTIMATORS: dict[str, Call] = _table(_registry.ESTIMATORS)
TOOLS: dict[str, Call] = _table(_registry.TOOLS)
VARIANTS: dict[str, Call] = _table(FORMS)
CALLS: dict[str, Call] = {**ESTIMATORS, **TOOLS}
ALL: dict[str, Call] = {**CALLS, **VARIANTS}
# The registry's calls and the forms, without the tests' metadata.
REGISTRY: dict[str, _registry.Call] = {**_registry.CALLS, **FORMS}

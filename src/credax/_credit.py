"""One call for every credit method: ``credax.credit(batch, method, **options)``.

Each estimator has its own argument order, mask and return type (a NamedTuple here, one value per
rollout there; TRIAGE needs GRPO's advantages first). :func:`credit` is the method registry's
canonical call (``credax._registry``: what ``credax.explain``, the bridges, the bench and the lab
use) made public, with one output convention: per-turn credit ``[B, K]``.
"""

from __future__ import annotations

from ._batch import TurnBatch
from ._turns import broadcast_to_turns


def _explained():
    from .explain import EXPLAINED  # imported late: explain and the registry import credax itself

    return EXPLAINED


# The registry's estimator entries whose call reads each batch field as what it means. The other
# estimator entries are canonical calls for the tests and the bench, with stand-ins a user would
# not want (GDPO's second component is the reward squared, GAE's lambda the rewards, VETTA's two
# heads one field, REINFORCE++'s token rewards the log-probs): call those functions directly.
_EXTRA = ("shrinkage_advantages", "retrospective_credit", "hindsight_credit", "role_credit")


def credit_methods() -> dict[str, str]:
    """``{method: function name}`` for every name :func:`credit` accepts: ``credax.explain``'s
    short names (``"grpo"``, ``"tcpo"``, ...) and the functions' own names."""
    explained = _explained()
    short = {name: call.name for name, call in explained.items()}
    full = {call.name: call.name for call in explained.values()}
    return {**short, **full, **{name: name for name in _EXTRA}}


def credit(batch: TurnBatch, method: str, **options):
    """Any credit method on one padded turn batch, with one output convention.

    ``credit(batch, "grpo")`` calls ``credax.grpo_advantages(batch.rewards, batch.group_ids,
    batch.row_mask)`` and broadcasts the per-rollout value to the rollout's real turns::

        out[b, k] = A_b  where turn_mask[b, k], else 0      (row-level methods)
        out[b, k] = the method's own per-turn credit        (turn-level methods)

    Each method reads the batch fields its registry entry names (``credax.explain`` prints what
    each method reads: TCPO the verifier ``scores``, MT-GRPO and the turn baseline
    ``turn_rewards``, GiGPO and HGPO ``anchors``, TRIAGE ``rewards`` and ``roles``); a field it
    needs that is ``None`` is a ``ValueError`` naming it. Works under ``jit``/``vmap`` (the method
    name and options are Python values: close over them).

    Args:
      batch: a :class:`credax.TurnBatch` (NumPy or JAX fields; ``scores`` ``float[B, K]``,
        ``turn_mask`` ``bool[B, K]``, ``group_ids`` ``int[B]``, ``rewards`` ``float[B]``,
        ``roles`` ``int[B, K]``, ``token_turn`` ``int[B, T]``, and the optional fields a method
        reads).
      method: a method's short name as ``credax.explain`` shows it (``"grpo"``, ``"tcpo"``, ...)
        or its function's name (``"tcpo_advantages"``); :func:`credit_methods` lists every name
        accepted (read from the registry, never listed here). Dr. GRPO is ``"grpo"`` with
        ``normalization=credax.Normalization(scale="none")``.
      **options: the function's own keyword options (``hindsight_weight=0.0``, ``lam=0.2``, ...),
        overriding the registry call's.

    Returns:
      ``float[B, K]``, ``0`` at masked turns (every accepted method is row- or turn-level).

    Raises:
      TypeError: ``batch`` not a ``TurnBatch``; ``method`` not a string.
      ValueError: an unknown ``method`` (the message lists them); a field the method reads is
        ``None``; and whatever the method itself refuses.

    Examples:
      >>> import credax, numpy as np
      >>> batch = credax.TurnBatch(
      ...     scores=np.array([[0.2, 1.0], [0.5, 0.0]], np.float32),
      ...     turn_mask=np.array([[True, True], [True, False]]),
      ...     group_ids=np.array([0, 0]), rewards=np.array([1.0, 0.0], np.float32),
      ...     roles=np.array([[0, 0], [2, -1]]), token_turn=np.array([[0, 1], [0, -1]]))
      >>> credax.credit(batch, "rloo")  # 1 - 0 and 0 - 1, on each rollout's real turns
      Array([[ 1.,  1.],
             [-1.,  0.]], dtype=float32)
      >>> credax.credit(batch, "triage", lam=0.5).shape  # GRPO's value + 0.5 x role constant
      (2, 2)

    References:
      The registry's entries (``credax._registry``) are the calls the bridges (verl, Tunix) and
      the lab use; outcome methods broadcast as :func:`credax.broadcast_to_turns` does.
    """
    if not isinstance(batch, TurnBatch):
        raise TypeError(f"`batch` must be a credax.TurnBatch; got {type(batch).__name__}.")
    if not isinstance(method, str):
        raise TypeError(f"`method` must be a method name (a string); got {type(method).__name__}.")
    name = credit_methods().get(method)
    if name is None:
        raise ValueError(f"`method`: unknown credit method {method!r}; choose from "
                         + ", ".join(sorted(credit_methods())) + ".")
    from . import _registry  # imported late: the registry imports credax itself

    call = _registry.ESTIMATORS[name]
    out = call(batch, **options)
    if call.level == "row":
        return broadcast_to_turns(out, batch.turn_mask)
    return out  # "turn": every other accepted entry (credit_methods)

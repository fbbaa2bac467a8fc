"""credax's estimators inside verl, registered in verl's own advantage-estimator registry.

``import credax.verl`` registers, through ``verl.trainer.ppo.core_algos.register_adv_est``:

=====================  ==========================================================================
name                   computes
=====================  ==========================================================================
``credax_grpo``        :func:`credax.grpo_advantages` under ``credax.presets.VERL`` (or
                       ``VERL_DR_GRPO`` when the config says ``norm_adv_by_std_in_grpo=False``):
                       verl's own ``grpo`` numbers, with credax's exact zero for zero-spread groups
``credax_dr_grpo``     Dr. GRPO: ``r - mean`` per prompt (``VERL_DR_GRPO``)
``credax_rloo``        :func:`credax.rloo_advantages` (leave-one-out baseline)
``credax_tcpo``        :func:`credax.tcpo_advantages` on per-turn verifier scores
``credax_triage``      :func:`credax.triage_advantages`: GRPO outcome advantage (verl preset) plus
                       ``λ·c[role]`` per turn, from per-turn role labels
``credax_mt_grpo``     :func:`credax.mt_grpo_advantages`: turn rewards and the outcome
``credax_gigpo``       :func:`credax.gigpo_advantages`: outcome plus anchor-state step advantage
=====================  ==========================================================================

so a verl run selects one with ``algorithm.adv_estimator=credax_tcpo``, provided the trainer
process has imported ``credax.verl`` (verl resolves the name with ``get_adv_estimator_fn`` when it
computes advantages). :func:`register` adds a variant with other options under a name of yours.

The adapter (:func:`from_verl`) reads verl's batch fields:

* ``uid`` (``non_tensor_batch``, the ``index`` argument verl passes) → group ids, densified exactly
  on the host by type and value (uids are strings, integers of any width or tuples; ``1``,
  ``1.0``, ``True`` and ``"1"`` are four prompts, NumPy scalars count as the Python values they
  hold; a NaN uid raises ``ValueError``: NaN != NaN);
* ``response_mask`` ``[B, L]`` → turns: in a multi-turn verl rollout the response holds the
  model's tokens (mask 1) interleaved with tool or environment tokens (mask 0), so each maximal run
  of 1s is one turn. ``token_turn[b, t]`` is that run's index, ``-1`` on masked tokens;
* ``token_level_rewards`` ``[B, L]`` → the outcome ``r_b = Σ_t token_level_rewards[b, t]``
  (verl's definition of a response's score) and, unless given separately, the per-turn scores
  ``s_{b,k} = Σ_{t in turn k} token_level_rewards[b, t]`` (a reward written on a turn's last
  token, as multi-turn reward functions do). A non-zero reward on a token outside every turn
  raises ``ValueError`` rather than being dropped;
* ``non_tensor_batch`` entries, one sequence per row with one value per turn:
  ``turn_scores`` (per-turn scores; overrides the token-level ones), ``turn_roles`` (TRIAGE
  labels, parsed by :func:`credax.parse_roles`) and ``anchor_ids`` (GiGPO's anchor states: any
  hashable values, densified exactly as uids are). A row whose sequence length differs from its
  number of turns raises ``ValueError`` naming the row; a row that is a string (``"DE"`` for
  two labels) or a scalar raises ``TypeError``; a turn score that is not a finite number within
  float32's range raises naming the row and the turn. ``num_turns`` must be an int ``>= 1``;
  meta-device tensors are refused by name.

verl 0.9.1's ``compute_advantage`` (``ray_trainer.py``) forwards ``non_tensor_batch`` only to its
GDPO estimator. Estimators that need nothing from it (GRPO, Dr. GRPO, RLOO, and TCPO / MT-GRPO
with scores on the turns' tokens) run from verl's pipeline as they are; TRIAGE (labels) and GiGPO
(anchors) need the non-tensor fields, so call :func:`compute_advantage` — the same dispatch, with
``non_tensor_batch`` passed — in its place (one line in a trainer subclass).

Token advantages are the per-row (GRPO family) or per-turn values broadcast to the tokens of the
row / turn, exactly ``0`` where ``response_mask`` is 0 (selected, not multiplied). ``returns`` are
the advantages, as for verl's critic-free estimators. The number of turns ``K`` is the longest row
rounded up to a power of two (so a new batch rarely recompiles), or the ``num_turns`` of
:func:`register`.

Requires verl (``pip install --no-deps verl==0.9.1`` plus the ``verl`` extra of credax; see the
Makefile), which requires torch.

Examples:
  >>> import numpy as np, torch
  >>> import credax.verl
  >>> from verl.trainer.ppo.core_algos import get_adv_estimator_fn
  >>> rewards = torch.zeros(4, 3)
  >>> rewards[:, -1] = torch.tensor([1.0, 0.0, 0.5, 0.5])  # the score on the last token
  >>> uid = np.array(["a", "a", "b", "b"], dtype=object)
  >>> adv, _ = get_adv_estimator_fn("credax_grpo")(
  ...     token_level_rewards=rewards, response_mask=torch.ones(4, 3), index=uid)
  >>> adv[:, 0]
  tensor([ 0.7071, -0.7071,  0.0000,  0.0000])
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from verl.trainer.ppo import core_algos

import credax
import credax.torch as ct
from credax import _registry
from credax._batch import TurnBatch
from credax._group_ids import exact_id
from credax._rollouts import pad_rows, score_rows

__all__ = ["ESTIMATORS", "VerlTurns", "compute_advantage", "from_verl", "make_estimator",
           "register", "turn_batch", "turns_from_response_mask", "uid_to_group_ids"]

METHODS = ("grpo", "dr_grpo", "rloo", "tcpo", "triage", "mt_grpo", "gigpo")


class VerlTurns(NamedTuple):
    """verl's batch fields in credax's data model (all torch, on the batch's device)."""

    group_ids: torch.Tensor  # int32[B], dense prompt ids from uid
    outcome: torch.Tensor  # float[B], Σ token_level_rewards
    turn_scores: torch.Tensor  # float[B, K]
    turn_mask: torch.Tensor  # bool[B, K]
    token_turn: torch.Tensor  # int64[B, L], -1 off the turns
    roles: torch.Tensor | None  # int32[B, K] from non_tensor_batch["turn_roles"]
    anchor_ids: torch.Tensor | None  # int32[B, K] from non_tensor_batch["anchor_ids"]


def _dense_codes(values, where) -> np.ndarray:
    """Any hashable values → dense int32 codes, equal exactly where the values are equal by type
    and value (:func:`credax._group_ids.exact_id`: ``1``, ``1.0``, ``True`` and ``"1"`` are four
    ids; a NaN raises). ``where(i)`` names value ``i`` in an error."""
    codes: dict = {}
    return np.fromiter((codes.setdefault(exact_id(v, where(i)), len(codes))
                        for i, v in enumerate(values)), dtype=np.int32, count=len(values))


def uid_to_group_ids(index, device=None) -> torch.Tensor:
    """verl's ``uid`` array (strings, or integers of any width, or tuples; a NumPy array, a list or
    a 1-D torch tensor) → dense ``int32[B]`` group ids, exact by type and value (``1`` and ``1.0``
    are two prompts; a NaN uid is refused).

    Raises:
      TypeError: ``index`` is a string (not a sequence of uids), or a uid is unhashable.
      ValueError: ``index`` is not 1-D, or a uid is (or holds) NaN.
    """
    if isinstance(index, str | bytes):
        raise TypeError(f"`index` (verl's uid) must be a sequence of uids, one per row; got a "
                        f"string {index!r}.")
    if isinstance(index, torch.Tensor):
        # Iterating a tensor gives 0-d tensors, hashed by identity: every row its own prompt.
        # Its values are the uids (meta tensors refused by name, as everywhere in the bridge).
        ct.check_tensor(index, "index")
        index = index.detach().cpu().numpy()
    if isinstance(index, np.ndarray):
        if index.ndim != 1:
            raise ValueError(f"`index` (verl's uid) must be 1-D, one uid per row; got shape "
                             f"{index.shape}.")
        values = index.tolist()
    else:
        values = list(index)  # a list of tuples stays one uid per row
    return torch.from_numpy(_dense_codes(values, lambda i: f"`index` row {i}")).to(device)


def _check_num_turns(num_turns) -> int | None:
    if num_turns is None:
        return None
    if isinstance(num_turns, bool) or not isinstance(num_turns, int | np.integer):
        raise TypeError(f"`num_turns` must be a Python int or None; got "
                        f"{type(num_turns).__name__} {num_turns!r}.")
    if num_turns < 1:
        raise ValueError(f"`num_turns` must be >= 1; got {num_turns}.")
    return int(num_turns)


def _bucket(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def turns_from_response_mask(response_mask: torch.Tensor, *, num_turns: int | None = None):
    """Turns of a multi-turn response: maximal runs of ``response_mask == 1``.

    Returns ``(token_turn int64[B, L], turn_mask bool[B, K])``; ``K`` is ``num_turns`` or the
    longest row rounded up to a power of two.

    Examples:
      >>> import torch, credax.verl
      >>> tt, tm = credax.verl.turns_from_response_mask(torch.tensor([[1, 1, 0, 0, 1, 0]]))
      >>> tt.tolist(), tm.tolist()
      ([[0, 0, -1, -1, 1, -1]], [[True, True]])
    """
    ct.check_tensor(response_mask, "response_mask")
    num_turns = _check_num_turns(num_turns)
    if response_mask.ndim != 2:
        raise ValueError(f"`response_mask` must be [B, L]; got shape {tuple(response_mask.shape)}.")
    m = response_mask.detach() != 0
    before = torch.nn.functional.pad(m[:, :-1], (1, 0), value=False)
    starts = m & ~before
    count = starts.sum(dim=1)
    longest = int(count.max()) if count.numel() else 0
    if num_turns is None:
        num_turns = _bucket(max(longest, 1))
    elif longest > num_turns:
        row = int(torch.argmax((count > num_turns).to(torch.int8)))
        raise ValueError(f"`response_mask` row {row} has {int(count[row])} turns, more than "
                         f"num_turns={num_turns}.")
    token_turn = torch.where(m, starts.cumsum(dim=1) - 1, -1)
    turn_mask = torch.arange(num_turns, device=m.device)[None, :] < count[:, None]
    return token_turn, turn_mask


def _turn_sums(values: torch.Tensor, token_turn: torch.Tensor, num_turns: int) -> torch.Tensor:
    stray = (token_turn < 0) & (values != 0)
    if bool(stray.any()):
        b, t = (int(i) for i in torch.nonzero(stray)[0])
        raise ValueError(
            f"`token_level_rewards` has a non-zero reward at row {b}, token {t}, where "
            "`response_mask` is 0 (outside every turn): it would be dropped from the per-turn "
            "scores. Put each turn's score on one of its tokens, or pass "
            "non_tensor_batch['turn_scores']."
        )
    slot = torch.where(token_turn >= 0, token_turn, num_turns)
    out = torch.zeros(values.shape[0], num_turns + 1, dtype=values.dtype, device=values.device)
    return out.scatter_add_(1, slot, values)[:, :num_turns]


def _per_turn(rows, field: str, turn_mask: torch.Tensor) -> list:
    name = f"non_tensor_batch['{field}']"
    if isinstance(rows, str | bytes) or not hasattr(rows, "__len__") or getattr(rows, "ndim", 1) == 0:
        raise TypeError(f"{name} must be one sequence per row (one value per turn); got "
                        f"{type(rows).__name__} {rows!r}.")
    rows = list(rows)
    counts = turn_mask.sum(dim=1).tolist()
    if len(rows) != len(counts):
        raise ValueError(f"{name} has {len(rows)} rows; the batch has {len(counts)}.")
    out = []
    for b, (row, n) in enumerate(zip(rows, counts, strict=True)):
        if isinstance(row, str | bytes):
            # A string is a sequence of characters: "DE" would read as two labels.
            raise TypeError(f"{name} row {b} is a string ({row!r}); it must be a sequence with one "
                            f"value per turn (e.g. {list(row)!r} for one label per character).")
        if row is not None and (not hasattr(row, "__len__") or getattr(row, "ndim", 1) == 0):
            raise TypeError(f"{name} row {b} must be a sequence with one value per turn; got "
                            f"{type(row).__name__} {row!r}.")
        row = list(row) if row is not None else []
        if len(row) != n:
            raise ValueError(f"non_tensor_batch['{field}'] row {b} has {len(row)} values; the "
                             f"response of that row has {n} turns (runs of response_mask == 1).")
        out.append(row)
    return out




def from_verl(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    non_tensor_batch=None,
    *,
    num_turns: int | None = None,
) -> VerlTurns:
    """verl's batch fields → :class:`VerlTurns` (see the module docstring for the rules)."""
    ct.check_tensor(token_level_rewards, "token_level_rewards")
    ct.check_tensor(response_mask, "response_mask")
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.ndim != 2:
        raise ValueError(
            f"`token_level_rewards` and `response_mask` must both be [B, L]; got "
            f"{tuple(token_level_rewards.shape)} and {tuple(response_mask.shape)}."
        )
    if index is None:
        raise ValueError("`index` (verl's non_tensor_batch['uid']) is required: credax's estimators "
                         "group rows by prompt.")
    device = token_level_rewards.device
    group_ids = uid_to_group_ids(index, device)
    if group_ids.shape[0] != token_level_rewards.shape[0]:
        raise ValueError(f"`index` has {group_ids.shape[0]} uids; the batch has "
                         f"{token_level_rewards.shape[0]} rows.")
    rewards = token_level_rewards.detach()
    token_turn, turn_mask = turns_from_response_mask(response_mask, num_turns=num_turns)
    width = turn_mask.shape[1]
    extra = non_tensor_batch if non_tensor_batch is not None else {}
    if "turn_scores" in extra:
        rows = score_rows(_per_turn(extra["turn_scores"], "turn_scores", turn_mask),
                          "non_tensor_batch['turn_scores']")
        scores = torch.from_numpy(pad_rows(rows, width, 0.0, np.float32)).to(device, rewards.dtype)
    else:
        scores = _turn_sums(rewards, token_turn, width)
    roles = anchors = None
    if "turn_roles" in extra:
        rows = _per_turn(extra["turn_roles"], "turn_roles", turn_mask)
        roles = torch.from_numpy(credax.parse_roles(rows, num_turns=width)).to(device)
    if "anchor_ids" in extra:
        rows = _per_turn(extra["anchor_ids"], "anchor_ids", turn_mask)
        where = [f"non_tensor_batch['anchor_ids'] row {b}, turn {k}"
                 for b, row in enumerate(rows) for k in range(len(row))]
        dense = _dense_codes([a for row in rows for a in row], where.__getitem__)
        splits = np.cumsum([len(r) for r in rows])[:-1]
        anchors = torch.from_numpy(pad_rows(np.split(dense, splits), width, -1, np.int32)).to(device)
    return VerlTurns(group_ids, rewards.sum(dim=-1), scores, turn_mask, token_turn, roles, anchors)


def _require(value, field: str, method: str):
    if value is None:
        raise ValueError(
            f"credax_{method} needs non_tensor_batch['{field}'] (one value per turn and row). "
            "verl 0.9.1's compute_advantage passes non_tensor_batch only to GDPO: call "
            "credax.verl.compute_advantage(data, ...) in its place."
        )
    return value


def _config_get(config, key: str, default):
    if config is None:
        return default
    getter = getattr(config, "get", None)
    return getter(key, default) if getter is not None else getattr(config, key, default)


# verl method -> the method registry's entry (credax._registry) that computes it.
_ENTRY = {"grpo": "grpo_advantages", "dr_grpo": "grpo_advantages", "rloo": "rloo_advantages",
          "tcpo": "tcpo_advantages", "triage": "triage_advantages",
          "mt_grpo": "mt_grpo_advantages", "gigpo": "gigpo_advantages"}


def turn_batch(v: VerlTurns) -> TurnBatch:
    """The :class:`credax.testing.TurnBatch` of verl's fields (torch), the method registry's
    input: every row real (verl's estimators count a row without turns in its group too); the turn
    scores are also the per-turn rewards (MT-GRPO's turn rewards, GiGPO's step rewards)."""
    rows = torch.ones(v.outcome.shape[0], dtype=torch.bool, device=v.outcome.device)
    return TurnBatch(scores=v.turn_scores, turn_mask=v.turn_mask, group_ids=v.group_ids,
                     rewards=v.outcome, roles=v.roles, token_turn=v.token_turn, rows=rows,
                     anchors=v.anchor_ids, turn_rewards=v.turn_scores)


def _advantages(method: str, options: dict, num_turns: int | None, token_level_rewards,
                response_mask, index, config, non_tensor_batch):
    v = from_verl(token_level_rewards, response_mask, index, non_tensor_batch, num_turns=num_turns)
    if method == "triage":
        _require(v.roles, "turn_roles", method)
    elif method == "gigpo":
        _require(v.anchor_ids, "anchor_ids", method)
    nested = None
    if method in ("grpo", "dr_grpo"):
        scale = method == "grpo" and bool(_config_get(config, "norm_adv_by_std_in_grpo", True))
        preset = credax.presets.VERL if scale else credax.presets.VERL_DR_GRPO
        options = {"normalization": preset, **options}
    elif method == "triage":  # the outcome advantage under the verl preset
        nested = {"normalization": credax.presets.VERL, **options.pop("outcome_options", {})}
    call = _registry.ESTIMATORS[_ENTRY[method]]
    out = call(turn_batch(v), ns=ct, nested=nested, **options)
    if call.level == "row":
        return torch.where(response_mask != 0, out[:, None], torch.zeros((), dtype=out.dtype))
    return ct.broadcast_to_tokens(out, v.token_turn)


def make_estimator(method: str, *, num_turns: int | None = None, **options):
    """A verl advantage-estimator function for credax ``method`` with credax keyword ``options``.

    The function takes verl's keyword arguments (``token_level_rewards``, ``response_mask``,
    ``index``, ``config``; ``non_tensor_batch`` when given; others verl may pass are ignored) and
    returns ``(advantages, returns)``, both ``[B, L]``.

    Raises:
      ValueError: an unknown ``method``.
    """
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {list(METHODS)}; got {method!r}.")
    num_turns = _check_num_turns(num_turns)

    def estimator(token_level_rewards, response_mask, index=None, config=None,
                  non_tensor_batch=None, **_verl_extras):
        with torch.no_grad():
            adv = _advantages(method, dict(options), num_turns, token_level_rewards,
                              response_mask, index, config, non_tensor_batch)
        return adv, adv

    estimator.__name__ = estimator.__qualname__ = f"credax_{method}"
    estimator.credax_method = method
    estimator.__doc__ = f"credax {method} as a verl advantage estimator (see credax.verl)."
    return estimator


def register(name: str, method: str, *, num_turns: int | None = None, **options):
    """Register credax ``method`` with ``options`` in verl's registry under ``name``.

    verl refuses a name already registered to another function (``ValueError``).

    Examples:
      >>> import credax.verl
      >>> from verl.trainer.ppo.core_algos import get_adv_estimator_fn
      >>> fn = credax.verl.register("credax_tcpo_gamma_0.9", "tcpo", gamma=0.9)
      >>> get_adv_estimator_fn("credax_tcpo_gamma_0.9") is fn
      True
    """
    return core_algos.register_adv_est(name)(make_estimator(method, num_turns=num_turns, **options))


ESTIMATORS = {f"credax_{m}": register(f"credax_{m}", m) for m in METHODS}


def compute_advantage(data, adv_estimator: str, config=None):
    """verl's ``compute_advantage`` dispatch for a registered estimator, with ``non_tensor_batch``.

    Calls ``get_adv_estimator_fn(adv_estimator)`` with the keyword arguments verl 0.9.1 passes
    (``token_level_rewards``, ``response_mask``, ``config``, ``index`` from ``uid``), plus
    ``non_tensor_batch`` when the estimator is one of credax's, and stores ``advantages`` and ``returns`` in
    ``data.batch``; returns ``data`` (a ``verl.DataProto``).
    """
    fn = core_algos.get_adv_estimator_fn(adv_estimator)
    kwargs = dict(token_level_rewards=data.batch["token_level_rewards"],
                  response_mask=data.batch["response_mask"], config=config)
    if "uid" in data.non_tensor_batch:
        kwargs["index"] = data.non_tensor_batch["uid"]
    if hasattr(fn, "credax_method"):
        kwargs["non_tensor_batch"] = data.non_tensor_batch
    advantages, returns = fn(**kwargs)
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    return data

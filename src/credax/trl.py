"""credax's turn credit inside TRL: a ``GRPOTrainer`` whose loss gets per-token advantages.

TRL 1.16's ``GRPOTrainer`` computes one advantage per completion (the GRPO z-score of its reward
within the prompt's ``num_generations``) and its loss takes ``(B, T)`` advantages from a subclass
as they are. :class:`CreditGRPOTrainer` is that subclass: after TRL has generated and scored a
batch, it replaces ``advantages`` with the per-token advantages of a credax method — TCPO,
MT-GRPO, TRIAGE, GiGPO, the turn baseline, or any other method ``credax.explain`` shows (read
from credax's method registry) — and TRL's own loss (every ``loss_type``) consumes them.

Turns (``token_turn[b, t]``, ``-1`` off the turns) come from one of two places:

* **TRL's tool-calling turns** (the default): TRL marks the tokens of a completion with
  ``tool_mask`` — 1 on the model's tokens, 0 on the tool results its tool-calling loop inserted
  (``tools=`` / ``environment_factory=``), or the ``env_mask`` a ``rollout_func`` returns — so a
  multi-turn completion reads ``model, tool, model, tool, ...``. Each maximal run of tokens where
  ``completion_mask * tool_mask`` is 1 is one turn; without tools every completion is one turn.
  A model turn TRL cut to zero tokens (``max_completion_length``) has no run, so it is not a turn.
* **A turn map of yours** (``turn_map=``): a callable that TRL's batch is handed to, as to a
  reward function (``prompts``, ``completions``, ``completion_ids``, the dataset's and
  ``rollout_func``'s columns, ``environments`` where TRL has them) plus ``completion_mask``
  (``[B, T]``) and ``token_turn`` (the tool-calling turns above, ``[B, T]``), and returns a
  :class:`TurnMap`: your ``token_turn`` (or ``None`` to keep the tool-calling turns) and the
  per-turn fields. Tokens where ``completion_mask`` is 0 (padding, masked truncations) are off
  the turns whatever the map says.

The per-turn fields, one sequence per completion with one value per turn, in order:
``turn_scores`` (TCPO's verifier scores; also the per-turn rewards of MT-GRPO, GiGPO and the turn
baseline, as in ``credax.verl``), ``turn_roles`` (TRIAGE's labels, parsed by
:func:`credax.parse_roles`) and ``anchor_ids`` (GiGPO's anchor states: any hashable values,
equal exactly by type and value). Without a turn map they are read from the batch's columns of
those names (a ``rollout_func`` returns them as extra fields, which TRL merges into the batch).
With tool-calling turns each row must hold as many values as the completion has turns; with your
``token_turn`` the rows set the turn count (each row's ``token_turn`` must lie below it).

The outcome of a completion is TRL's reward: the weighted sum of the reward functions
(``reward_weights``; ``None`` rewards skipped); a completion whose every reward function
returned ``None`` is left out of its group's statistics and gets advantage 0, as in TRL. Groups
are TRL's: each prompt's ``num_generations`` consecutive completions. TRL's ``scale_rewards``
sets the normalization of GRPO's outcome advantage (``credit="grpo"`` — which then gives TRL's
own advantages on every token — and the outcome part of TRIAGE and the
redistribution: ``credax.presets.trl(scale_rewards)``); every other method keeps its own
defaults, and ``credit_options`` overrides any of them (``outcome_options`` for the outcome part).

Per-token advantages: a per-turn method's value on each token of its turn, a per-row method's on
every token of the row's turns, 0 off the turns (selected, not multiplied). The loss that
consumes them is TRL's own by default (``loss="trl"``: every ``loss_type`` TRL has, clipping
and KL as TRL computes them), or credax's (``loss="credax"``): :func:`credax.policy_loss` with
the options :func:`trl_loss_options` reads from TRL's config — ``loss_type`` among
``credax.presets.TRL_LOSS_TYPES`` (the table :func:`credax.presets.trl_loss` covers; a loss type
added there flows through), ``epsilon``, ``epsilon_high``, ``delta``,
``importance_sampling_level``, ``beta``, ``use_bias_correction_kl`` — computed in JAX, its
gradient handed back to torch through DLPack.

Limits: one training process (``accelerator.num_processes == 1``; credax's group statistics need
every completion of a group, which TRL spreads over processes), and
``multi_objective_aggregation="sum_then_normalize"`` (TRL's default; the other normalises each
reward function before summing — credax's :func:`credax.gdpo_advantages`). Both are refused at
construction, naming the setting. Requires ``trl==1.16.0`` (the ``trl`` extra), which requires
torch; tensors cross to JAX and back through DLPack (``credax.torch``).

Examples:
  >>> import torch, credax.trl
  >>> completion_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])  # one prompt, two completions
  >>> tool_mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1]])  # row 0: a tool result at token 2
  >>> credax.trl.token_advantages(  # TCPO: turn 0 z-scored over both rows, turn 1 alone (0)
  ...     "tcpo", torch.tensor([1.0, 0.0]), completion_mask, num_generations=2,
  ...     tool_mask=tool_mask, turn_scores=[[0.5, 1.0], [0.0]])
  tensor([[ 0.7071,  0.7071,  0.0000,  0.0000],
          [-0.7071, -0.7071, -0.7071,  0.0000]])
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np
import torch
from trl import GRPOTrainer

import credax
import credax.torch as ct
from credax import _registry
from credax._batch import TurnBatch
from credax._group_ids import exact_id
from credax._rollouts import pad_rows, score_rows

__all__ = ["LOSSES", "CreditGRPOTrainer", "TurnMap", "credit_methods", "token_advantages",
           "trl_loss_options"]

# Per-turn field of a TurnMap (and batch column) -> the TurnBatch fields it fills.
_SOURCES = {"turn_scores": ("scores", "turn_rewards"), "turn_roles": ("roles",),
            "anchor_ids": ("anchors",)}
# TurnBatch fields the bridge always fills from TRL's batch.
_ALWAYS = frozenset({"turn_mask", "group_ids", "rewards", "token_turn", "rows"})
_LEVELS = ("row", "turn", "token")  # registry levels that map onto tokens
# Where the loss is computed: TRL's own code, or credax.policy_loss (see CreditGRPOTrainer).
LOSSES = ("trl", "credax")
# TRL 1.16's loss types normalised by the accumulation window's token count (`num_items_in_batch`,
# grpo_trainer.py `_compute_loss`); TRL divides every other type by the accumulation steps.
_WINDOW_NORMALISED = frozenset({"dapo", "cispo", "vespo"})


class TurnMap(NamedTuple):
    """What a ``turn_map`` returns: the turns of TRL's completions and their per-turn fields.

    Attributes:
      token_turn: ``int[B, T]`` (a tensor or an array; ``T`` = TRL's padded completion width):
        each completion token's turn, ``-1`` off the turns; ``None``: TRL's tool-calling turns.
      turn_scores: ``B`` sequences of numbers, one per turn (finite, within float32).
      turn_roles: ``B`` sequences of TRIAGE labels, one per turn.
      anchor_ids: ``B`` sequences of hashable anchor-state ids, one per turn.
    """

    token_turn: Any = None
    turn_scores: Any = None
    turn_roles: Any = None
    anchor_ids: Any = None


def _methods() -> dict[str, _registry.Call]:
    """The methods of credax's registry (those ``credax.explain`` shows), by short and full name:
    the registry's other entries are tools or calls with stand-in inputs, not methods to train
    with."""
    methods = {}
    from credax.explain import EXPLAINED  # explain imports matplotlib only when it draws

    for short, call in EXPLAINED.items():
        if call.name in _registry.ESTIMATORS:
            methods[short] = methods[call.name] = call
    return methods


def _entry(credit) -> _registry.Call:
    """The registry entry of ``credit`` (a method's short name or its credax function name)."""
    methods = _methods()
    if isinstance(credit, str) and credit in methods:
        return methods[credit]
    raise ValueError(f"`credit` must name a credax method of credax.trl.credit_methods() (e.g. "
                     f"'tcpo', 'mt_grpo', 'triage', 'gigpo', 'unbiased_turn', 'grpo'); got {credit!r}.")


def _probe_batch(needs) -> TurnBatch:
    """A small batch with every required field, and the optional ones in ``needs`` only."""
    z, i = np.zeros((2, 2), np.float32), np.zeros((2, 2), np.int32)
    optional = dict(anchors=i, turn_rewards=z, alt_scores=np.zeros((2, 2, 1), np.float32),
                    alt_mask=np.ones((2, 2, 1), bool), logp=z, values=z,
                    logits=np.zeros((2, 2, 3), np.float32), tokens=i,
                    hidden=np.zeros((2, 2, 2), np.float32), unembedding=np.zeros((2, 3), np.float32))
    return TurnBatch(scores=z, turn_mask=np.ones((2, 2), bool), group_ids=np.zeros(2, np.int32),
                     rewards=np.zeros(2, np.float32), roles=i, token_turn=i, rows=np.ones(2, bool),
                     **{k: v for k, v in optional.items() if k in needs})


def _fields_needed(call: _registry.Call) -> frozenset:
    """The TurnBatch fields the entry's call needs: its declared optional ``needs`` and the
    required fields its arguments read (recorded on a small batch: the registry states how to
    call, so what a method needs is read from it, never listed here). An optional field read but
    not declared (TCPO's alternatives) is one the call does without."""
    seen: set = set()

    class Probe(TurnBatch):
        __slots__ = ()

        def __getattribute__(self, name):
            if name in TurnBatch._fields:
                seen.add(name)
            return super().__getattribute__(name)

    call.args(Probe(*_probe_batch(call.needs)), ns=credax)
    return frozenset(call.needs) | (seen & set(_registry.REQUIRED))


def _unavailable(call: _registry.Call) -> str | None:
    """Why the bridge cannot run ``call`` (``None``: it can)."""
    if call.level not in _LEVELS:
        return (f"its output is not one value per row, turn or token (registry level "
                f"{call.level!r})")
    fillable = _ALWAYS | {f for fields in _SOURCES.values() for f in fields}
    missing = sorted(_fields_needed(call) - fillable)
    if missing:
        return (f"it reads TurnBatch.{missing[0]}, which TRL's batch cannot give (the bridge "
                f"fills {sorted(fillable)})")
    return None


def credit_methods() -> list[str]:
    """The names ``credit=`` accepts: the methods of credax's registry (``credax.explain``'s,
    by short name and by function name) that run on what TRL's batch gives.

    Examples:
      >>> import credax.trl
      >>> {"tcpo", "mt_grpo", "triage", "gigpo", "unbiased_turn"} <= set(credax.trl.credit_methods())
      True
    """
    return sorted(n for n, call in _methods().items() if _unavailable(call) is None)


def _check_credit(credit, options) -> tuple[_registry.Call, dict, dict]:
    """The entry, the call's options and the nested outcome options; raises on what cannot run."""
    call = _entry(credit)
    why = _unavailable(call)
    if why is not None:
        raise ValueError(f"`credit`={credit!r} cannot run on TRL's batch: {why}.")
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise TypeError(f"`credit_options` must be a mapping of keyword options of "
                        f"credax.{call.name}; got {type(options).__name__}.")
    options = dict(options)
    nested_ok = any(p.kind is inspect.Parameter.VAR_KEYWORD
                    for p in inspect.signature(call.arguments).parameters.values())
    outcome = options.pop("outcome_options", None)
    if outcome is not None and not nested_ok:
        raise ValueError(f"`credit_options['outcome_options']`: credax.{call.name} has no outcome "
                         "part (only TRIAGE and the redistribution do).")
    if outcome is not None and not isinstance(outcome, Mapping):
        raise TypeError("`credit_options['outcome_options']` must be a mapping of options of "
                        f"credax.grpo_advantages; got {type(outcome).__name__}.")
    params = inspect.signature(getattr(credax, call.name)).parameters
    keywords = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    unknown = sorted(set(options) - keywords)
    if unknown:
        raise ValueError(f"`credit_options`: {unknown[0]!r} is not an option of "
                         f"credax.{call.name} (its options: {sorted(keywords)}).")
    return call, options, (dict(outcome or {}) if nested_ok else None)


def _turns_from_mask(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Maximal runs of ``mask != 0``: ``(token_turn int64[B, T], runs int64[B])``."""
    m = mask != 0
    before = torch.nn.functional.pad(m[:, :-1], (1, 0), value=False)
    starts = m & ~before
    return torch.where(m, starts.cumsum(dim=1) - 1, -1), starts.sum(dim=1)


def _rows(rows, name: str, batch: int) -> list:
    """``batch`` per-turn sequences (one per completion), else an error naming ``name``."""
    if isinstance(rows, str | bytes) or not hasattr(rows, "__len__") or getattr(rows, "ndim", 1) == 0:
        raise TypeError(f"{name} must be one sequence per completion (one value per turn); got "
                        f"{type(rows).__name__} {rows!r}.")
    rows = list(rows)
    if len(rows) != batch:
        raise ValueError(f"{name} has {len(rows)} rows; TRL's batch has {batch} completions.")
    out = []
    for b, row in enumerate(rows):
        if isinstance(row, str | bytes) or not hasattr(row, "__len__") or getattr(row, "ndim", 1) == 0:
            raise TypeError(f"{name} row {b} must be a sequence with one value per turn; got "
                            f"{type(row).__name__} {row!r}.")
        out.append(list(row))
    return out


def _bucket(n: int) -> int:
    """Turn slots: the longest row rounded up to a power of two (a new batch rarely recompiles)."""
    return 1 << max(0, int(n) - 1).bit_length()


def _user_token_turn(token_turn, completion_mask: torch.Tensor) -> torch.Tensor:
    name = "`turn_map`'s token_turn"
    if not isinstance(token_turn, torch.Tensor):
        try:
            token_turn = torch.as_tensor(np.asarray(token_turn))
        except (ValueError, TypeError) as error:  # ragged rows, objects
            raise ValueError(f"{name} must be a [B, T] integer tensor or array over TRL's padded "
                             f"completions; got {type(token_turn).__name__} ({error}).") from None
    ct.check_tensor(token_turn, name)
    if token_turn.dtype.is_floating_point or token_turn.dtype.is_complex or token_turn.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers; got dtype {token_turn.dtype}.")
    if tuple(token_turn.shape) != tuple(completion_mask.shape):
        raise ValueError(f"{name} has shape {tuple(token_turn.shape)}; TRL's completions are "
                         f"{tuple(completion_mask.shape)} (completions, padded tokens).")
    token_turn = token_turn.to(completion_mask.device, torch.int64)
    if token_turn.numel() and int(token_turn.min()) < -1:
        b, t = (int(i) for i in torch.nonzero(token_turn < -1)[0])
        raise ValueError(f"{name} holds {int(token_turn[b, t])} at row {b}, token {t}: turns are "
                         ">= 0, and -1 marks a token off the turns.")
    return torch.where(completion_mask != 0, token_turn, -1)


def token_advantages(
    credit: str,
    rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    num_generations: int,
    tool_mask: torch.Tensor | None = None,
    token_turn=None,
    turn_scores=None,
    turn_roles=None,
    anchor_ids=None,
    scale_rewards: str = "group",
    credit_options: Mapping | None = None,
) -> torch.Tensor:
    """Per-token advantages ``float32[B, T]`` of credax method ``credit`` on TRL's batch fields.

    What :class:`CreditGRPOTrainer` computes each batch (see the module docstring for the rules),
    usable on its own in a trainer of yours.

    Args:
      credit: a name of :func:`credit_methods` (``"tcpo"`` or ``"tcpo_advantages"``, ...).
      rewards: ``float[B]`` TRL's reward of each completion; NaN: unscorable (advantage 0, left
        out of its group's statistics).
      completion_mask: ``[B, T]`` TRL's ``completion_mask`` (0/1).
      num_generations: completions per prompt; rows ``g·G .. g·G + G - 1`` are prompt ``g``'s.
      tool_mask: ``[B, T]`` TRL's ``tool_mask`` (1 model tokens, 0 tool results) or ``None``.
      token_turn: ``int[B, T]`` your turns (``-1`` off them); ``None``: the runs of
        ``completion_mask * tool_mask``.
      turn_scores, turn_roles, anchor_ids: ``B`` sequences, one value per turn (``None``: not
        given; a method that reads one raises).
      scale_rewards: TRL's ``scale_rewards`` (``"group"``, ``"batch"``, ``"none"``): the
        normalization of GRPO's outcome advantage.
      credit_options: keyword options of the credax function (``outcome_options``: options of
        the outcome part's :func:`credax.grpo_advantages`).

    Returns:
      ``float32[B, T]`` on ``completion_mask``'s device, 0 off the turns and on unscorable rows.

    Raises:
      ValueError: an unknown or unrunnable ``credit``; an unknown option; shapes that disagree
        with ``completion_mask`` (naming the argument); a per-turn row whose length is not its
        completion's turn count; a non-finite turn score; a field the method reads not given;
        ``num_generations`` that does not divide ``B``.
      TypeError: per-turn fields that are not one sequence per row, a non-number score, a
        float ``token_turn``.
    """
    call, options, nested = _check_credit(credit, credit_options)
    ct.check_tensor(completion_mask, "completion_mask")
    ct.check_tensor(rewards, "rewards")
    if completion_mask.ndim != 2:
        raise ValueError(f"`completion_mask` must be [B, T]; got shape {tuple(completion_mask.shape)}.")
    batch, width = completion_mask.shape
    if tuple(rewards.shape) != (batch,):
        raise ValueError(f"`rewards` must be [B] = [{batch}] (one per completion); got shape "
                         f"{tuple(rewards.shape)}.")
    if isinstance(num_generations, bool) or not isinstance(num_generations, int | np.integer) or \
            num_generations < 1 or batch % num_generations:
        raise ValueError(f"`num_generations` must be a positive int dividing the batch ({batch} "
                         f"completions); got {num_generations!r}.")
    device = completion_mask.device
    loss_mask = completion_mask != 0
    if tool_mask is not None:
        ct.check_tensor(tool_mask, "tool_mask")
        if tuple(tool_mask.shape) != (batch, width):
            raise ValueError(f"`tool_mask` has shape {tuple(tool_mask.shape)}; `completion_mask` "
                             f"has {(batch, width)}.")
        loss_mask = loss_mask & (tool_mask.to(device) != 0)
    runs_turn, runs = _turns_from_mask(loss_mask)
    given = {"turn_scores": turn_scores, "turn_roles": turn_roles, "anchor_ids": anchor_ids}
    rows = {k: _rows(v, f"`{k}`", batch) for k, v in given.items() if v is not None}
    if token_turn is None:
        token_turn = runs_turn
        counts = runs.tolist()
        for key, value in rows.items():
            for b, (row, n) in enumerate(zip(value, counts, strict=True)):
                if len(row) != n:
                    raise ValueError(
                        f"`{key}` row {b} has {len(row)} values; completion {b} has {n} turns "
                        "(runs of model tokens between tool results: completion_mask * tool_mask "
                        "== 1). Give one value per turn, or your own token_turn in a TurnMap.")
    else:
        token_turn = _user_token_turn(token_turn, completion_mask)
        highest = (token_turn.max(dim=1).values + 1).tolist() if width else [0] * batch
        lengths = {k: [len(r) for r in v] for k, v in rows.items()}
        if lengths:
            (first, counts), *others = lengths.items()
            for key, other in others:
                b = next((b for b in range(batch) if other[b] != counts[b]), None)
                if b is not None:
                    raise ValueError(f"`{key}` row {b} has {other[b]} values and `{first}` row {b} "
                                     f"has {counts[b]}: one value per turn in each.")
            b = next((b for b in range(batch) if highest[b] > counts[b]), None)
            if b is not None:
                raise ValueError(f"`turn_map`'s token_turn reaches turn {highest[b] - 1} in row {b}, "
                                 f"but `{first}` row {b} has {counts[b]} values (one per turn).")
        else:
            counts = highest
    num_turns = _bucket(max([*counts, 1]))
    turn_mask = np.arange(num_turns)[None, :] < np.asarray(counts, np.int64)[:, None]
    unscorable = torch.isnan(rewards.detach().to(device, torch.float32))
    row_ok = ~unscorable
    fields = {"scores": None, "turn_rewards": None, "roles": None, "anchors": None}
    if "turn_scores" in rows:
        s = torch.from_numpy(pad_rows(score_rows(rows["turn_scores"], "`turn_scores`"), num_turns, 0.0,
                                  np.float32)).to(device)
        fields["scores"] = fields["turn_rewards"] = s
    if "turn_roles" in rows:
        fields["roles"] = torch.from_numpy(credax.parse_roles(rows["turn_roles"],
                                                              num_turns=num_turns)).to(device)
    if "anchor_ids" in rows:
        codes: dict = {}
        dense = [[codes.setdefault(exact_id(a, f"`anchor_ids` row {b}, turn {k}"), len(codes))
                  for k, a in enumerate(row)] for b, row in enumerate(rows["anchor_ids"])]
        fields["anchors"] = torch.from_numpy(pad_rows(dense, num_turns, -1, np.int32)).to(device)
    read = _fields_needed(call)
    for source, targets in _SOURCES.items():
        needed = [f for f in targets if f in read]
        if needed and fields[needed[0]] is None:
            raise ValueError(
                f"`credit`={credit!r} reads per-turn `{source}` (TurnBatch.{needed[0]}): return "
                f"them in the TurnMap of `turn_map`, or give a `{source}` column (a rollout_func "
                "extra field), one value per turn.")
    turn_mask_t = torch.from_numpy(turn_mask).to(device) & row_ok[:, None]
    group_ids = torch.arange(batch, device=device, dtype=torch.int32) // int(num_generations)
    outcome = torch.where(unscorable, 0.0, rewards.detach().to(device, torch.float32))
    tb = TurnBatch(scores=fields["scores"], turn_mask=turn_mask_t, group_ids=group_ids,
                   rewards=outcome, roles=fields["roles"], token_turn=token_turn, rows=row_ok,
                   anchors=fields["anchors"], turn_rewards=fields["turn_rewards"])
    preset = credax.presets.trl(scale_rewards)
    if call.name == "grpo_advantages":
        options = {"normalization": preset, **options}
    if nested is not None:
        nested = {"normalization": preset, **nested}
    # The registry's calls run on JAX arrays (some build inputs with jax.numpy): the batch goes
    # over through DLPack on its device, and the result comes back the same way.
    tb = TurnBatch(*(None if v is None else ct.to_jax(v, f"TurnBatch.{name}")
                     for name, v in zip(TurnBatch._fields, tb, strict=True)))
    out = call(tb, nested=nested, **options)
    if call.level == "turn":
        out = credax.broadcast_to_tokens(out, tb.token_turn)
    out = ct.to_torch(jax.block_until_ready(out)).to(device, torch.float32)
    if call.level == "row":
        out = out[:, None]
    on_turn = (token_turn >= 0) & row_ok[:, None]
    return torch.where(on_turn, out, torch.zeros((), dtype=torch.float32, device=device))


def trl_loss_options(args, *, num_rows: int, num_items_in_batch: float | None = None,
                     num_processes: int = 1, loss_type: str | None = None) -> credax.LossOptions:
    """The :class:`credax.LossOptions` of a TRL ``GRPOConfig``: :func:`credax.presets.trl_loss`
    with every keyword it takes read from the config by name (``epsilon``, ``epsilon_high``,
    ``delta``, ``importance_sampling_level``, ``use_bias_correction_kl``,
    ``max_completion_length``, and any a later credax adds), and ``kl_coef = beta``.

    Args:
      args: a ``trl.GRPOConfig`` (or any object with its attributes).
      num_rows: the micro-batch's completions (TRL's ``grpo`` and ``dr_grpo`` divide by them).
      num_items_in_batch: the token count ``dapo`` divides by (already rescaled to one
        accumulation window, as TRL does); ``None``: the local token mean.
      num_processes: training processes.
      loss_type: overrides ``args.loss_type``.

    Raises:
      ValueError: a ``loss_type`` credax does not compute (the list is
        ``credax.presets.TRL_LOSS_TYPES``), or what ``trl_loss`` refuses.

    Examples:
      >>> from trl import GRPOConfig
      >>> import credax.trl
      >>> cfg = GRPOConfig(output_dir="/tmp/x", loss_type="grpo", epsilon_high=0.28, beta=0.04,
      ...                  report_to="none", use_cpu=True)
      >>> o = credax.trl.trl_loss_options(cfg, num_rows=8)
      >>> o.agg, o.normalizer, o.clip_high, o.kl_coef
      ('seq-mean-token-mean', 8, 0.28, 0.04)
    """
    loss_type = args.loss_type if loss_type is None else loss_type
    if loss_type not in credax.presets.TRL_LOSS_TYPES:
        raise ValueError(f"`loss_type`={loss_type!r}: credax computes TRL's "
                         f"{list(credax.presets.TRL_LOSS_TYPES)} (credax.presets.TRL_LOSS_TYPES); "
                         "use loss='trl' for the others.")
    given = {"num_rows": num_rows, "num_items_in_batch": num_items_in_batch,
             "num_processes": num_processes}
    kwargs = {}
    for name in inspect.signature(credax.presets.trl_loss).parameters:
        if name in given:
            kwargs[name] = given[name]
        elif name != "loss_type" and hasattr(args, name):
            kwargs[name] = getattr(args, name)
    return credax.presets.trl_loss(loss_type, **kwargs).replace(kl_coef=float(args.beta))


def _loss_value(logp, old_logp, advantages, mask, ref_logp, options):
    return credax.policy_loss(logp, old_logp, advantages, mask, options=options,
                              ref_logp=ref_logp).loss


_loss_and_grad = jax.jit(jax.value_and_grad(_loss_value))


class _PolicyLoss(torch.autograd.Function):
    """:func:`credax.policy_loss` as a torch op: the value and its gradient w.r.t. ``logp`` are
    computed by JAX in the forward pass (through DLPack, no copies); backward scales it."""

    @staticmethod
    def forward(ctx, logp, old_logp, advantages, mask, ref_logp, options):
        arrays = [None if t is None else ct.to_jax(t.detach().to(torch.float32), name)
                  for t, name in ((logp, "logp"), (old_logp, "old_logp"),
                                  (advantages, "advantages"), (ref_logp, "ref_logp"))]
        lp, old, adv, ref = arrays
        value, grad = jax.block_until_ready(
            _loss_and_grad(lp, old, adv, ct.to_jax(mask != 0, "mask"), ref, options))
        ctx.save_for_backward(ct.to_torch(grad).to(logp.dtype).clone())
        return ct.to_torch(value).to(logp.dtype).clone()

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = ctx.saved_tensors
        return grad_output * grad, None, None, None, None, None


class CreditGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with credax's per-token turn credit as the loss's advantages.

    Takes every argument of ``trl.GRPOTrainer`` (1.16), plus:

    Args:
      credit: the credax method, a name of :func:`credit_methods` (default ``"tcpo"``).
      credit_options: keyword options of that credax function (``gamma``, ``normalization``,
        ...; ``outcome_options`` for the outcome part of TRIAGE and the redistribution).
      turn_map: ``None`` (turns from TRL's tool calls, per-turn fields from the batch's columns
        ``turn_scores`` / ``turn_roles`` / ``anchor_ids``) or a callable returning a
        :class:`TurnMap` (see the module docstring for its arguments).
      loss: ``"trl"`` (default): TRL's own loss code consumes the advantages, for every
        ``loss_type``; ``"credax"``: :func:`credax.policy_loss` computes it (in JAX, its gradient
        handed back to torch), with the options of :func:`trl_loss_options` — TRL's
        ``loss_type`` among ``credax.presets.TRL_LOSS_TYPES``, its ``epsilon``/``epsilon_high``/
        ``delta``, ``importance_sampling_level``, ``beta`` and ``use_bias_correction_kl`` — and
        TRL's division by the accumulation steps. The two agree to float32 rounding (value and
        gradient) at token level, and at sequence level with one advantage per completion; at
        ``importance_sampling_level="sequence"`` credax uses GSPO's token form
        (``credax.policy_loss``), whose gradient differs from TRL's sequence form when the
        advantages vary within a completion (as turn credit does).

    Each batch, ``credit_advantages`` holds the last per-token advantages (``[B, T]``) handed to
    TRL's loss (TRL's completions table still logs its own one-per-completion advantages).

    Raises:
      ValueError: ``credit`` unknown or needing a field TRL cannot give, an unknown option,
        ``loss`` not in :data:`LOSSES` (at construction); ``multi_objective_aggregation`` other
        than ``"sum_then_normalize"``; more than one process; with ``loss="credax"``, a
        ``loss_type`` credax does not compute or a TRL loss feature it does not reproduce
        (``top_entropy_quantile``, ``off_policy_mask_threshold``, the entropy bonus, vLLM
        importance sampling, a router auxiliary loss), each named; per batch, a turn map or
        per-turn columns that disagree with the completions (see :func:`token_advantages`).
      TypeError: ``turn_map`` not callable, or returning something other than a ``TurnMap``.
    """

    def __init__(self, *args, credit: str = "tcpo", credit_options: Mapping | None = None,
                 turn_map: Callable[..., TurnMap] | None = None, loss: str = "trl", **kwargs):
        _check_credit(credit, credit_options)  # before the model loads: fail fast
        if loss not in LOSSES:
            raise ValueError(f"`loss` must be one of {list(LOSSES)}; got {loss!r}.")
        if turn_map is not None and not callable(turn_map):
            raise TypeError(f"`turn_map` must be a callable returning a credax.trl.TurnMap, or "
                            f"None; got {type(turn_map).__name__}.")
        self.credit, self.credit_options, self.turn_map = credit, credit_options, turn_map
        self.loss = loss
        self.credit_advantages = None
        self._credax_rewards = None
        super().__init__(*args, **kwargs)
        aggregation = self.args.multi_objective_aggregation
        if aggregation != "sum_then_normalize":
            raise ValueError(
                "`multi_objective_aggregation` must be 'sum_then_normalize' with credax.trl (the "
                f"outcome is the weighted sum of the rewards); got {aggregation!r}. To normalise "
                "each reward first, use credax.gdpo_advantages in a turn_map-free method of yours.")
        if self.accelerator.num_processes != 1:
            raise ValueError(
                f"credax.trl runs on one process; `accelerator.num_processes` is "
                f"{self.accelerator.num_processes}: credax's group statistics need every "
                "completion of a prompt group, which TRL spreads over processes.")
        if loss == "credax":
            trl_loss_options(self.args, num_rows=1, loss_type=self.loss_type)  # loss_type known
            unsupported = {
                "top_entropy_quantile": self.top_entropy_quantile < 1.0,
                "off_policy_mask_threshold": self.off_policy_mask_threshold is not None,
                "entropy_coef (the entropy bonus)": self._entropy_bonus_enabled,
                "vllm_importance_sampling_correction": bool(
                    self.use_vllm and self.vllm_importance_sampling_correction),
                "router_aux_loss_coef": self.aux_loss_enabled,
            }
            for setting, on in unsupported.items():
                if on:
                    raise ValueError(f"loss='credax' does not reproduce TRL's `{setting}`; "
                                     "turn it off or use loss='trl'.")

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions,
                                                      completion_ids_list)
        self._credax_rewards = (rewards_per_func, prompts, completions, completion_ids_list)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func, prompts, completions, completion_ids_list = self._credax_rewards
        self._credax_rewards = None
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards = torch.where(torch.isnan(rewards_per_func).all(dim=1), torch.nan, rewards)
        completion_mask, tool_mask = output["completion_mask"], output.get("tool_mask")
        columns = {k: [x[k] for x in inputs] for k in inputs[0]
                   if k not in ("prompt", "completion", "completion_ids")}
        fields = {k: columns.get(k) for k in _SOURCES}
        token_turn = None
        if self.turn_map is not None:
            mask = completion_mask if tool_mask is None else completion_mask * tool_mask
            extra = {"environments": self.environments} if self.environments is not None else {}
            mapped = self.turn_map(prompts=prompts, completions=completions,
                                   completion_ids=completion_ids_list,
                                   completion_mask=completion_mask,
                                   token_turn=_turns_from_mask(mask)[0], **extra, **columns)
            if not isinstance(mapped, TurnMap):
                raise TypeError(f"`turn_map` must return a credax.trl.TurnMap; got "
                                f"{type(mapped).__name__}.")
            token_turn = mapped.token_turn
            fields = {k: getattr(mapped, k) for k in _SOURCES}
        mode = "train" if self.model.training else "eval"
        generations = self.num_generations if mode == "train" else self.num_generations_eval
        adv = token_advantages(self.credit, rewards, completion_mask, num_generations=generations,
                               tool_mask=tool_mask, token_turn=token_turn,
                               scale_rewards=self.scale_rewards, credit_options=self.credit_options,
                               **fields)
        self.credit_advantages = adv
        output["advantages"] = adv
        return output

    def _compute_loss(self, model, inputs):
        if self.loss == "trl":
            return super()._compute_loss(model, inputs)
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        logp, _, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1),
            **{k: inputs.get(k) for k in (
                "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask",
                "spatial_shapes", "num_tiles", "image_sizes", "token_type_ids",
                "mm_token_type_ids", "image_position_ids")})
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old
        ref = inputs["ref_per_token_logps"] if self.beta != 0.0 else None
        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages[:, None].expand_as(logp)
        train = self.model.training
        items = None
        if self.loss_type in _WINDOW_NORMALISED:
            items = float(inputs["num_items_in_batch"])
            if train:  # TRL rescales the generation batch's count to one accumulation window
                items *= self.current_gradient_accumulation_steps / self.args.steps_per_generation
        options = trl_loss_options(self.args, num_rows=completion_ids.size(0),
                                   num_items_in_batch=items,
                                   num_processes=self.accelerator.num_processes,
                                   loss_type=self.loss_type)
        loss = _PolicyLoss.apply(logp, old, advantages, mask, ref, options)
        if train and self.loss_type not in _WINDOW_NORMALISED:
            loss = loss / self.current_gradient_accumulation_steps
        return loss

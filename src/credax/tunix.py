"""credax inside Tunix: credax's estimators and policy losses in ``tunix.rl.function_registry``.

``import credax.tunix`` registers, under the names below, in Tunix's default function registry
(``google-tunix`` 0.1.7; the ``tunix`` extra of a clone). Pick them by name in Tunix's own config,
``GRPOConfig(advantage_estimator="credax_rloo", policy_loss_fn="credax")``; nothing else changes.

**Advantage estimators.** Tunix calls ``estimator(rewards=[N], num_generations=G)``, rewards of
``N / G`` prompts with ``G`` consecutive generations each, and wants ``[N]`` advantages back:

=========================  =============================================================
name                       credax function (grouped by the ``N / G`` prompts)
=========================  =============================================================
``credax_grpo``            :func:`credax.grpo_advantages` (defaults: unbiased std, ``+1e-6``)
``credax_drgrpo``          Dr. GRPO: :func:`credax.grpo_advantages` with ``scale="none"``
``credax_rloo``            :func:`credax.rloo_advantages`
``credax_shrinkage``       :func:`credax.shrinkage_advantages` (James–Stein across prompts)
``credax_shrinkage_loo``   the same with ``leave_one_out=True``
=========================  =============================================================

A constant group gets exactly ``0`` (Tunix's own ``grpo`` divides ``0`` by ``std + 1e-6``: also
``0``). The shrinkage baseline pools the prompts of one call: with Tunix's ``GRPOLearner`` that
is the whole batch; Tunix's agentic learner calls the estimator once per group, where it reduces
to the group's own mean (Dr. GRPO). Nothing per token or per turn fits this signature: it holds
no token axis and no turns (see "Turn-level credit" below).

**Policy losses.** Tunix calls ``loss_fn(model, train_example, algo_config, pad_id, eos_id)``
and wants ``(loss, aux)``. Each credax loss computes the log-probs with Tunix's own
``tunix.rl.common.compute_per_token_logps`` (so the model plumbing is Tunix's) and the loss with
:func:`credax.policy_loss`:

=========================  =============================================================
name                       options
=========================  =============================================================
``credax``                 read from ``algo_config`` as Tunix's ``grpo`` loss reads them:
                           ``epsilon``/``epsilon_high``, ``epsilon_c`` (dual clip),
                           ``loss_agg_mode``, ``loss_algo`` (``gspo-token`` = sequence
                           ratio), ``beta``, ``kl_loss_mode``, ``kl_clamp_value``: the same
                           loss and gradients as Tunix's ``grpo`` (tested)
``credax_verl``            :data:`credax.presets.VERL_LOSS`
``credax_verl_gspo``       :data:`credax.presets.VERL_GSPO_LOSS`
``credax_trl_<type>``      :func:`credax.presets.trl_loss` for ``grpo``, ``bnpo``, ``dr_grpo``
                           (``B × L`` of the micro-batch), ``dapo``
=========================  =============================================================

For the presets, the clip bounds (``epsilon``, ``epsilon_high``) and the KL coefficient
(``beta``, with the reference log-probs Tunix computes when ``beta != 0``) come from
``algo_config``; aggregation, dual clip, ratio level, clamps and KL estimator from the preset.
``aux`` holds Tunix's metric names (``kl``, ``kl_loss``, ``pg_loss``, ``pg_clipfrac``,
``pg_clipfrac_lower``, ``ppo_kl``, ``is_ratio/mean``). Advantages may be ``[B]`` or per token
``[B, L]``, as Tunix's own loss allows. Tunix's precomputed ``sampler_is_weights`` are refused
(credax's correction takes the sampler's log-probs: ``policy_loss(..., rollout_logp=)``).

**Turn-level credit.** Tunix's estimator sees only rewards, so TCPO, GiGPO, MT-GRPO and the
other per-turn methods cannot be registered; they reach Tunix through its per-token
``TrainExample.advantages`` instead. :func:`turns_from_mask` (a completion mask with holes: each
run of model tokens is a turn) and :func:`turns_from_steps` (Tunix's per-step rewards and
token counts) build a :class:`TurnLayout`; :func:`turn_advantages` gives the ``[B, L]``
advantages of a method of :data:`TURN_METHODS`. :class:`TurnCreditGRPOLearner` does it inside
Tunix's ``GRPOLearner`` (``turn_rewards=`` or ``turns=``), :class:`AgenticTurnCreditGRPOLearner`
inside its agentic (multi-turn) learner, from the per-step rewards Tunix's trajectory engine
records. :func:`tiny_cluster` (Tunix's toy transformer on the default mesh) runs
``docs/guides/tunix.md`` on a CPU; what Tunix's orchestrator would need is there too.

The registry is Tunix's global one: importing this module twice registers the same functions
again (Tunix logs an overwrite warning); :func:`register` does it explicitly and returns the names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from numbers import Real
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import presets
from ._checks import first_index, host_array
from ._group_ids import Groups, exact_id
from ._loss_options import LossOptions
from ._losses import kl_divergence, policy_loss
from ._normalization import Normalization
from ._outcome import grpo_advantages, rloo_advantages
from ._shrinkage import shrinkage_advantages
from ._stepwise import gigpo_advantages, mt_grpo_advantages
from ._tcpo import tcpo_advantages
from ._turn_baseline import unbiased_turn_advantages
from ._turns import broadcast_to_tokens

try:
    from tunix.rl import common as _tunix_common
    from tunix.rl import function_registry as _registry
    from tunix.rl.agentic import agentic_grpo_learner as _agentic
    from tunix.rl.agentic.trajectory import trajectory_collect_engine as _engine
    from tunix.rl.grpo import grpo_learner as _grpo_learner
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("credax.tunix needs google-tunix (0.1.7): install the `tunix` extra of a credax "
                      "clone, `pip install '/path/to/credax[tunix]'`.") from err

# --------------------------------------------------------------------------------------------
# Advantage estimators: (rewards [N], num_generations G) -> [N].
# --------------------------------------------------------------------------------------------


def _groups(rewards, num_generations) -> tuple[jax.Array, Groups]:
    """Tunix's rewards as float32 and the ``N / G`` groups of ``G`` consecutive generations."""
    r = _host(rewards, "rewards")
    if r.ndim != 1 or r.dtype == np.bool_ or not (np.issubdtype(r.dtype, np.floating)
                                                  or np.issubdtype(r.dtype, np.integer)):
        raise ValueError(f"`rewards` must be a 1-D real array [N] (Tunix's rewards of N / G prompts); "
                         f"got {r.dtype} of shape {r.shape}.")
    _real(r, "rewards", ndim=1)  # before the float32 cast: NaN, inf and beyond float32 named
    if isinstance(num_generations, bool) or not isinstance(num_generations, int | np.integer) \
            or num_generations < 1 or r.shape[0] % int(num_generations):
        raise ValueError(f"`num_generations` must be a positive int dividing N = {r.shape[0]}; got "
                         f"{num_generations!r}.")
    n, g = r.shape[0], int(num_generations)
    return jnp.asarray(r, jnp.float32), Groups(jnp.arange(n, dtype=jnp.int32) // g, max(n // g, 1))


def grpo(rewards, num_generations: int) -> np.ndarray:
    """Tunix estimator ``credax_grpo``: :func:`credax.grpo_advantages` per prompt, ``float32[N]``."""
    r, g = _groups(rewards, num_generations)
    return np.asarray(grpo_advantages(r, g))


def drgrpo(rewards, num_generations: int) -> np.ndarray:
    """Tunix estimator ``credax_drgrpo``: Dr. GRPO, ``r - mean`` per prompt, ``float32[N]``."""
    r, g = _groups(rewards, num_generations)
    return np.asarray(grpo_advantages(r, g, normalization=Normalization(scale="none")))


def rloo(rewards, num_generations: int) -> np.ndarray:
    """Tunix estimator ``credax_rloo``: :func:`credax.rloo_advantages`, ``float32[N]``."""
    r, g = _groups(rewards, num_generations)
    return np.asarray(rloo_advantages(r, g))


def shrinkage(rewards, num_generations: int) -> np.ndarray:
    """Tunix estimator ``credax_shrinkage``: :func:`credax.shrinkage_advantages`, ``float32[N]``."""
    r, g = _groups(rewards, num_generations)
    return np.asarray(shrinkage_advantages(r, g))


def shrinkage_loo(rewards, num_generations: int) -> np.ndarray:
    """Tunix estimator ``credax_shrinkage_loo``: leave-one-out shrinkage, ``float32[N]``."""
    r, g = _groups(rewards, num_generations)
    return np.asarray(shrinkage_advantages(r, g, leave_one_out=True))


ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {
    "credax_grpo": grpo,
    "credax_drgrpo": drgrpo,
    "credax_rloo": rloo,
    "credax_shrinkage": shrinkage,
    "credax_shrinkage_loo": shrinkage_loo,
}

# --------------------------------------------------------------------------------------------
# Policy losses: (model, train_example, algo_config, pad_id, eos_id) -> (loss, aux).
# --------------------------------------------------------------------------------------------

# Tunix's names -> credax's.
_KL = {"kl": "k1", "mse_kl": "k2", "low_var_kl": "k3"}
_AGG = {"token-mean": "token-mean", "sequence-mean-token-mean": "seq-mean-token-mean",
        "seq-mean-token-sum": "seq-mean-token-sum",
        "sequence-mean-token-sum-norm": "seq-mean-token-sum-norm",
        "sequence-mean-token-scale": "seq-mean-token-sum-norm"}


def _from_algo_config(cfg, mask: jax.Array) -> LossOptions:
    """The ``policy_loss`` options that reproduce Tunix's ``grpo`` loss under ``algo_config``."""
    mode = cfg.loss_agg_mode
    if mode not in _AGG:
        raise ValueError(f"`algo_config.loss_agg_mode` {mode!r} has no credax equivalent; use one of "
                         f"{sorted(_AGG)}.")
    if cfg.kl_loss_mode not in _KL:
        raise ValueError(f"`algo_config.kl_loss_mode` must be one of {sorted(_KL)}; got "
                         f"{cfg.kl_loss_mode!r}.")
    options: dict[str, Any] = dict(agg=_AGG[mode], kl_estimator=_KL[cfg.kl_loss_mode],
                                   kl_clamp=getattr(cfg, "kl_clamp_value", None),
                                   dual_clip=getattr(cfg, "epsilon_c", None))
    # Tunix's sum-norm default divides by the non-empty rows; token-scale by them times L.
    rows = jnp.maximum((mask.sum(axis=-1) > 0).sum(), 1).astype(jnp.float32)
    if mode == "sequence-mean-token-sum-norm":
        options["normalizer"] = rows
    elif mode == "sequence-mean-token-scale":
        options["normalizer"] = rows * mask.shape[-1]
    if cfg.loss_algo == "gspo-token":
        options.update(ratio="sequence", log_ratio_clamp=(-float("inf"), 10.0))
    return LossOptions(**options)


def _preset_loss(preset: LossOptions | Callable[[jax.Array], LossOptions]):
    def options(cfg, mask):
        return preset(mask) if callable(preset) else preset

    return options


def _masked_mean(x, mask):
    return jnp.where(mask, x, 0.0).sum() / jnp.maximum(mask.sum(), 1)


def _aux(out, logp, old, ref, mask, kl_estimator, kl_clamp) -> dict[str, jax.Array]:
    """Tunix's metric names with Tunix's meanings (``kl``: token mean of the KL estimator;
    ``kl_loss``: the aggregated KL before ``beta``; ``ppo_kl``: token mean of ``old - logp``)."""
    m = out.metrics
    kl = (jnp.float32(0.0) if ref is None
          else _masked_mean(kl_divergence(logp, ref, estimator=kl_estimator, clamp=kl_clamp), mask))
    return {"pg_loss": m.policy_loss, "kl": jax.lax.stop_gradient(kl), "kl_loss": m.kl,
            "pg_clipfrac": m.clip_frac_low + m.clip_frac_high, "pg_clipfrac_lower": m.dual_clip_frac,
            "ppo_kl": jax.lax.stop_gradient(_masked_mean(old - logp, mask)),
            "is_ratio/mean": m.mean_ratio}


def _make_loss(options_fn: Callable[[Any, jax.Array], LossOptions], name: str):
    def loss_fn(model, train_example, algo_config, pad_id, eos_id, **kwargs):
        if getattr(train_example, "sampler_is_weights", None) is not None:
            raise ValueError(f"`{name}`: Tunix's precomputed `sampler_is_weights` are not supported; "
                             "credax corrects with the sampler's log-probs (policy_loss(..., "
                             "rollout_logp=)).")
        from flax import nnx

        graphdef, state = nnx.split(model)
        logp = _tunix_common.compute_per_token_logps(
            graphdef, state, prompt_tokens=train_example.prompt_ids,
            completion_tokens=train_example.completion_ids, pad_id=pad_id, eos_id=eos_id,
            stop_gradient=False, segment_ids=getattr(train_example, "segment_ids", None),
            segment_positions=getattr(train_example, "segment_positions", None),
            temperature=getattr(algo_config, "temperature", 1.0))
        logp = logp.astype(jnp.float32)
        old = (jax.lax.stop_gradient(logp) if train_example.old_per_token_logps is None
               else train_example.old_per_token_logps.astype(jnp.float32))
        mask = train_example.completion_mask.astype(bool)
        epsilon = algo_config.epsilon
        epsilon_high = getattr(algo_config, "epsilon_high", None)
        beta = getattr(algo_config, "beta", 0.0) or 0.0
        ref = train_example.ref_per_token_logps
        ref = None if ref is None else ref.astype(jnp.float32)
        options = options_fn(algo_config, mask).replace(
            clip_low=epsilon, clip_high=epsilon if epsilon_high is None else epsilon_high,
            kl_coef=beta if ref is not None else 0.0)
        out = policy_loss(logp, old, train_example.advantages.astype(jnp.float32), mask,
                          options=options, ref_logp=ref)
        return out.loss, _aux(out, logp, old, ref, mask, options.kl_estimator, options.kl_clamp)

    loss_fn.__name__ = loss_fn.__qualname__ = name.replace("-", "_")
    loss_fn.__doc__ = f"Tunix policy loss ``{name}`` (see :mod:`credax.tunix`)."
    return loss_fn


def _trl(loss_type: str):
    def options(mask):
        if loss_type == "dr_grpo":
            return presets.trl_loss("dr_grpo", num_rows=mask.shape[0], max_completion_length=mask.shape[1])
        if loss_type == "grpo":
            return presets.trl_loss("grpo", num_rows=mask.shape[0])
        return presets.trl_loss(loss_type)

    return options


POLICY_LOSSES: dict[str, Callable[..., Any]] = {
    "credax": _make_loss(_from_algo_config, "credax"),
    "credax_verl": _make_loss(_preset_loss(presets.VERL_LOSS), "credax_verl"),
    "credax_verl_gspo": _make_loss(_preset_loss(presets.VERL_GSPO_LOSS), "credax_verl_gspo"),
    **{f"credax_trl_{t}": _make_loss(_preset_loss(_trl(t)), f"credax_trl_{t}")
       for t in presets.TRL_LOSS_TYPES},
}


def register() -> list[str]:
    """Register every estimator and loss above in Tunix's default registry; returns the names.

    Called once by ``import credax.tunix``; calling it again re-registers the same functions.
    """
    for name, fn in ESTIMATORS.items():
        _registry.register_advantage_estimator(name)(fn)
    for name, fn in POLICY_LOSSES.items():
        _registry.register_policy_loss_fn(name)(fn)
    return [*ESTIMATORS, *POLICY_LOSSES]


# --------------------------------------------------------------------------------------------
# Host-side checks: what credax.tunix receives is checked before credax converts it.
# --------------------------------------------------------------------------------------------

_F32_MAX = float(np.finfo(np.float32).max)
_I32 = np.iinfo(np.int32)


def _host(x, name: str) -> np.ndarray:
    return host_array(x, name, "credax.tunix works on the host (outside jit)")


def _real(x, name: str, *, ndim: int, where: np.ndarray | None = None) -> np.ndarray:
    """``x`` as a real NumPy array of ``ndim`` dimensions whose entries (those ``where`` selects)
    are finite and representable in float32; checked before the float32 conversion, which would
    turn ``1e39`` into ``inf`` and a bool or a string into a number."""
    a = _host(x, name)
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"`{name}` must be a real (float or int) array; got dtype {a.dtype}.")
    if a.ndim != ndim:
        raise ValueError(f"`{name}` must be {ndim}-D; got shape {a.shape}.")
    wide = a.astype(np.float64)
    bad = ~(np.abs(wide) <= _F32_MAX)  # NaN, ±inf and beyond float32
    if where is not None:
        bad &= where
    if bad.any():
        at = first_index(bad)
        raise ValueError(f"`{name}` must be finite and within float32 (|x| <= {_F32_MAX:.4g}); "
                         f"{name}[{', '.join(map(str, at))}] = {a[at].item()!r}.")
    return a


def _bool_mask(x, name: str) -> np.ndarray:
    """A ``[B, L]`` mask as bool: booleans, or integers that are all 0 or 1 (Tunix's int masks)."""
    a = _host(x, name)
    if a.ndim != 2:
        raise ValueError(f"`{name}` must be 2-D [B, L]; got shape {a.shape}.")
    if a.dtype == np.bool_:
        return a
    if not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"`{name}` must be a boolean or 0/1 integer array; got dtype {a.dtype}.")
    bad = (a != 0) & (a != 1)
    if bad.any():
        at = first_index(bad)
        raise ValueError(f"`{name}` must hold only 0 and 1; {name}[{at[0]}, {at[1]}] = {a[at]}.")
    return a.astype(bool)


def _int_index(x, name: str) -> np.ndarray:
    """An integer index array as int32, refusing values int32 cannot hold (they would wrap)."""
    a = _host(x, name)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"`{name}` must be an integer array; got dtype {a.dtype}.")
    bad = (a < _I32.min) | (a > _I32.max)
    if bad.any():
        at = first_index(bad)
        raise ValueError(f"`{name}` must fit in int32; {name}[{', '.join(map(str, at))}] = {a[at]} "
                         "would wrap.")
    return a.astype(np.int32)


# --------------------------------------------------------------------------------------------
# Turns from Tunix's own data.
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TurnLayout:
    """The turns of a Tunix batch on the host: what the turn-level methods take.

    ``B`` rows in Tunix's order, ``K`` turns (padded), ``L`` completion tokens. Built by
    :func:`turns_from_mask` or :func:`turns_from_steps`; passed to :func:`turn_advantages` and
    returned by the ``turns`` function of :class:`TurnCreditGRPOLearner`.

    Attributes:
      scores: ``float32[B, K]`` the score of the state after each turn, TCPO's input. From
        per-step rewards it is their running total ``s_k = Σ_{j<=k} r_j`` (the progress so far);
        ``0`` on padded turns.
      turn_mask: ``bool[B, K]`` real turns, a prefix of each row. A row with none (Tunix's
        overlong filter or degenerate-group masking emptied its mask) enters no statistic and
        gets advantage ``0``.
      token_turn: ``int32[B, L]`` the turn of each completion token; ``-1`` on environment
        tokens, padding and tokens outside every turn (they leave the loss).
      rewards: ``float32[B, K]`` Tunix's per-step ``reward`` (MT-GRPO's turn reward, GiGPO's step
        reward, the turn baseline's reward); ``None`` when only scores are known.
      outcome: ``float32[B]`` the trajectory reward ``Σ_k r_k`` (Tunix's ``trajectory_reward``);
        ``None`` when only scores are known.
      anchors: ``int32[B, K]`` dense ids of the state each turn acted on (GiGPO's anchor
        states), ``-1`` on padded turns; ``None`` when not given.
    """

    scores: np.ndarray
    turn_mask: np.ndarray
    token_turn: np.ndarray
    rewards: np.ndarray | None = None
    outcome: np.ndarray | None = None
    anchors: np.ndarray | None = None


def _from_rewards(rewards: list[list[float]], token_turn: np.ndarray, name: str,
                  anchors: np.ndarray | None = None) -> TurnLayout:
    b = len(rewards)
    k = max([len(r) for r in rewards] + [1])
    mask = np.arange(k)[None, :] < np.array([len(r) for r in rewards], np.int64).reshape(b, 1)
    r = np.zeros((b, k), np.float64)
    for i, row in enumerate(rewards):
        r[i, :len(row)] = row
    r = _real(r, name, ndim=2, where=mask)
    scores = np.where(mask, np.cumsum(np.where(mask, r, 0.0), axis=1), 0.0)
    return TurnLayout(scores=scores.astype(np.float32), turn_mask=mask, token_turn=token_turn,
                      rewards=np.where(mask, r, 0.0).astype(np.float32),
                      outcome=np.where(mask, r, 0.0).sum(axis=1).astype(np.float32), anchors=anchors)


def _rows(values, name: str, count: int) -> list:
    if isinstance(values, str | bytes) or not hasattr(values, "__len__"):
        raise TypeError(f"`{name}` must be a sequence of {count} rows; got {type(values).__name__}.")
    if len(values) != count:
        raise ValueError(f"`{name}` must have one entry per row, {count}; got {len(values)}.")
    return list(values)


def _numbers(row, name: str) -> list[float]:
    a = _host(row, name)
    if a.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-D sequence of numbers; got shape {a.shape}.")
    return _real(a, name, ndim=1).astype(np.float64).tolist()


def turns_from_mask(completion_mask, turn_rewards) -> TurnLayout:
    """Turns from a completion mask with holes: each run of true tokens is one turn.

    Tunix's agentic learner marks the model's tokens ``1`` and the environment's ``0`` in one
    completion (``assistant, env, assistant, env, ...``), so a row such as ``[1, 1, 0, 0, 1, 0]``
    holds two turns: tokens 0-1 are turn 0, token 4 is turn 1, the rest is ``-1``. A hole at the
    start is fine (``[0, 0, 0, 1, 0, 0]`` is one turn, token 3). ``turn_rewards[b]`` gives the
    reward of each turn of row ``b``, one per run, in order.

    Two model turns with no environment token between them form one run, so they count as one
    turn here: when that can happen, lay the turns out from Tunix's steps
    (:func:`turns_from_steps`), which knows each step's token counts.

    Args:
      completion_mask: ``[B, L]`` booleans or 0/1 integers (``TrainExample.completion_mask``).
      turn_rewards: ``B`` sequences of per-turn rewards (ragged). A row the mask empties
        (Tunix's overlong filter) has no turn; its rewards are not used.

    Returns:
      A :class:`TurnLayout` with ``rewards``, ``outcome`` (their sum) and ``scores`` (their
      running total).

    Raises:
      ValueError: a mask value other than 0/1, a row whose reward count is not its run count
        (naming both), a non-finite reward.
      TypeError: a non-integer, non-boolean mask; rewards that are not a sequence of rows.

    Examples:
      >>> import numpy as np
      >>> from credax.tunix import turns_from_mask
      >>> t = turns_from_mask(np.array([[0, 0, 0, 1, 0, 0], [1, 1, 0, 0, 1, 0]]), [[1.0], [0.0, 1.0]])
      >>> t.token_turn.tolist()
      [[-1, -1, -1, 0, -1, -1], [0, 0, -1, -1, 1, -1]]
      >>> t.turn_mask.tolist(), t.scores.tolist(), t.outcome.tolist()
      ([[True, False], [True, True]], [[1.0, 0.0], [0.0, 1.0]], [1.0, 1.0])
    """
    m = _bool_mask(completion_mask, "completion_mask")
    starts = m & ~np.pad(m, ((0, 0), (1, 0)))[:, :-1]
    runs = starts.sum(axis=1)
    token_turn = np.where(m, np.cumsum(starts, axis=1) - 1, -1).astype(np.int32)
    rows = _rows(turn_rewards, "turn_rewards", m.shape[0])
    rewards = []
    for b, row in enumerate(rows):
        values = _numbers(row, f"turn_rewards[{b}]")
        if runs[b] == 0:
            values = []
        elif len(values) != runs[b]:
            raise ValueError(
                f"`turn_rewards[{b}]` has {len(values)} rewards but row {b} of `completion_mask` has "
                f"{runs[b]} turns (runs of true tokens); give one reward per turn, in order, or lay "
                "the turns out from Tunix's steps with turns_from_steps.")
        rewards.append(values)
    return _from_rewards(rewards, token_turn, "turn_rewards")


def _get(step, key: str, default=None):
    return step.get(key, default) if isinstance(step, Mapping) else getattr(step, key, default)


def _count(tokens, name: str) -> int:
    if tokens is None:
        return 0
    a = _host(tokens, name)
    if a.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-D token sequence; got shape {a.shape}.")
    return int(a.shape[0])


def turns_from_steps(steps, *, length: int, anchors=None, completion_mask=None) -> TurnLayout:
    """Turns from Tunix's per-step data: one turn per step, laid out as Tunix's completion.

    ``steps[b]`` is trajectory ``b``'s list of steps, each a Tunix ``Step``
    (``Trajectory.steps``) or the dict of the trajectory engine's ``"Steps"`` mode: its
    ``assistant_tokens``, ``env_tokens`` and ``reward`` are read. Tunix's ``"Token"`` mode
    concatenates ``assistant_0, env_0, assistant_1, env_1, ...`` into the completion and cuts it
    at ``length`` (``max_response_length``); the assistant tokens of step ``k`` get
    ``token_turn = k``, the environment tokens ``-1``. A step whose tokens were cut off is still
    a turn (its reward stays in the returns), it just has no token to train.

    Args:
      steps: ``B`` sequences of steps (Tunix's row order).
      length: ``L``, the completion length of the ``TrainExample`` (static).
      anchors: optional ``B`` sequences of hashable state keys, one per step (the state the step
        acted on, e.g. the observation text): densified exactly into ``anchors`` (GiGPO).
      completion_mask: optional ``[B, L]`` mask to check the layout against: on every row it
        does not empty, its true tokens must be exactly the assistant tokens.

    Returns:
      A :class:`TurnLayout` with ``rewards`` (each step's ``reward``), ``outcome`` and ``scores``.

    Raises:
      ValueError: a step without a ``reward``, a non-finite reward, anchors of the wrong counts,
        a layout that disagrees with ``completion_mask`` (naming the row and token).

    Examples:
      >>> from credax.tunix import turns_from_steps
      >>> steps = [[{"assistant_tokens": [5, 6], "env_tokens": [7], "reward": 0.0},
      ...           {"assistant_tokens": [8], "env_tokens": [], "reward": 1.0}]]
      >>> t = turns_from_steps(steps, length=5)
      >>> t.token_turn.tolist(), t.rewards.tolist(), t.scores.tolist()
      ([[0, 0, -1, 1, -1]], [[0.0, 1.0]], [[0.0, 1.0]])
    """
    if isinstance(length, bool) or not isinstance(length, int | np.integer) or length < 0:
        raise ValueError(f"`length` must be a non-negative int (the completion length L); got {length!r}.")
    rows = _rows(steps, "steps", len(steps) if hasattr(steps, "__len__") else -1)
    token_turn = np.full((len(rows), int(length)), -1, np.int32)
    rewards = []
    for b, row in enumerate(rows):
        row = _rows(row, f"steps[{b}]", len(row) if hasattr(row, "__len__") else -1)
        pos, values = 0, []
        for k, step in enumerate(row):
            reward = _get(step, "reward")
            if reward is None:
                raise ValueError(f"`steps[{b}][{k}]` has no `reward`.")
            if isinstance(reward, bool | np.bool_ | str | bytes) or not isinstance(reward, Real):
                raise TypeError(f"`steps[{b}][{k}].reward` must be a real number; got {reward!r}.")
            values.append(float(reward))
            n = _count(_get(step, "assistant_tokens"), f"steps[{b}][{k}].assistant_tokens")
            token_turn[b, min(pos, length):min(pos + n, length)] = k
            pos += n + _count(_get(step, "env_tokens"), f"steps[{b}][{k}].env_tokens")
        rewards.append(_numbers(np.asarray(values, np.float64), f"steps[{b}] rewards"))
    dense = None
    if anchors is not None:
        keys = _rows(anchors, "anchors", len(rows))
        ids: dict[Any, int] = {}
        width = max([len(r) for r in rewards] + [1])
        dense = np.full((len(rows), width), -1, np.int32)
        for b, row in enumerate(keys):
            if len(row) != len(rewards[b]):
                raise ValueError(f"`anchors[{b}]` must have one key per step, {len(rewards[b])}; "
                                 f"got {len(row)}.")
            for k, key in enumerate(row):
                dense[b, k] = ids.setdefault(exact_id(key, f"anchors[{b}][{k}]"), len(ids))
    if completion_mask is not None:
        m = _bool_mask(completion_mask, "completion_mask")
        if m.shape != token_turn.shape:
            raise ValueError(f"`completion_mask` must have shape [B, L] = {token_turn.shape}; "
                             f"got {m.shape}.")
        off = (m != (token_turn >= 0)) & m.any(axis=1, keepdims=True)
        if off.any():
            b, t = first_index(off)
            put = "no assistant token" if m[b, t] else "an assistant token"
            raise ValueError(
                f"the steps do not lay out as the completion: completion_mask[{b}, {t}] = "
                f"{int(m[b, t])} but the steps put {put} there (are the steps in Tunix's row order, "
                "and `length` the completion length?).")
    return _from_rewards(rewards, token_turn, "steps' rewards", dense)


# --------------------------------------------------------------------------------------------
# Turn-level credit: named methods, the conversion, and the learners.
# --------------------------------------------------------------------------------------------


def _needs(layout: TurnLayout, name: str, *fields: str) -> None:
    missing = [f for f in fields if getattr(layout, f) is None]
    if missing:
        how = ("give anchors= to turns_from_steps (the state each step acted on)" if missing == ["anchors"]
               else "build the turns with turns_from_mask or turns_from_steps")
        raise ValueError(f"method {name!r} needs the turns' {' and '.join(missing)}: {how}.")


def _tcpo_layout(t: TurnLayout, groups: Groups) -> jax.Array:
    return tcpo_advantages(jnp.asarray(t.scores), jnp.asarray(t.turn_mask), groups).advantages


def _mt_grpo_layout(t: TurnLayout, groups: Groups) -> jax.Array:
    _needs(t, "mt_grpo", "rewards", "outcome")
    return mt_grpo_advantages(jnp.asarray(t.rewards), jnp.asarray(t.outcome), jnp.asarray(t.turn_mask),
                              groups)


def _gigpo_layout(t: TurnLayout, groups: Groups) -> jax.Array:
    _needs(t, "gigpo", "rewards", "outcome", "anchors")
    return gigpo_advantages(jnp.asarray(t.outcome), jnp.asarray(t.rewards), t.anchors,
                            jnp.asarray(t.turn_mask), groups)


def _turn_baseline_layout(t: TurnLayout, groups: Groups) -> jax.Array:
    _needs(t, "turn_baseline", "rewards")
    return unbiased_turn_advantages(jnp.asarray(t.rewards), jnp.asarray(t.turn_mask), groups)


TURN_METHODS: dict[str, Callable[[TurnLayout, Groups], jax.Array]] = {
    "tcpo": _tcpo_layout,
    "mt_grpo": _mt_grpo_layout,
    "gigpo": _gigpo_layout,
    "turn_baseline": _turn_baseline_layout,
}


def _as_layout(turns, turn_mask, token_turn) -> TurnLayout:
    if isinstance(turns, TurnLayout):
        if turn_mask is not None or token_turn is not None:
            raise TypeError("`turn_advantages`: give a TurnLayout alone, or scores, turn_mask and "
                            "token_turn; not both.")
        return turns
    if turn_mask is None or token_turn is None:
        raise TypeError("`turn_advantages` needs `turn_mask` and `token_turn` with `scores` (or a "
                        "TurnLayout as the only positional argument).")
    return TurnLayout(scores=turns, turn_mask=turn_mask, token_turn=token_turn)


def _check_method_output(out, name: str, shape: tuple[int, int], turn_mask: np.ndarray) -> np.ndarray:
    a = np.asarray(out) if not isinstance(out, jax.core.Tracer) else out
    if not hasattr(a, "shape") or tuple(a.shape) != shape:
        raise ValueError(f"`method` {name} must return [B, K] = {shape} advantages; got "
                         f"{getattr(a, 'shape', type(out).__name__)}.")
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"`method` {name} must return floating advantages; got dtype {a.dtype}.")
    bad = turn_mask & ~np.isfinite(a)
    if bad.any():
        b, k = first_index(bad)
        raise ValueError(f"`method` {name} returned a non-finite advantage on a valid turn: "
                         f"[{b}, {k}] = {a[b, k]}.")
    return a


def turn_advantages(turns, turn_mask=None, token_turn=None, *, completion_mask, num_generations: int,
                    method: str | Callable[[jax.Array, jax.Array, Groups], jax.Array] = "tcpo"):
    """Per-token advantages ``[B, L]`` and the narrowed completion mask, for a Tunix batch.

    ::

        groups   = row // num_generations                       (Tunix's row order)
        A_{b,k}  = method(turns, groups)                        per turn, [B, K]
        a_{b,t}  = A_{b, token_turn[b, t]}    where token_turn >= 0, else 0
        mask'    = completion_mask ∧ (token_turn >= 0)

    What :class:`TurnCreditGRPOLearner` and :class:`AgenticTurnCreditGRPOLearner` do after Tunix
    built its ``TrainExample``. Every host array is checked before it is converted (a float32
    cast would turn ``1e39`` into ``inf``; an int64 ``token_turn`` could wrap), and what ``method``
    returns is checked (shape ``[B, K]``, floating, finite on valid turns).

    Args:
      turns: a :class:`TurnLayout` (:func:`turns_from_mask`, :func:`turns_from_steps`), or the
        ``scores`` ``[B, K]`` with ``turn_mask`` and ``token_turn`` after it.
      turn_mask: ``bool[B, K]`` with ``scores``; ``None`` with a layout.
      token_turn: ``int[B, L]`` with ``scores``; ``None`` with a layout.
      completion_mask: ``[B, L]`` booleans or 0/1 integers (``TrainExample.completion_mask``).
      num_generations: ``G``, consecutive rows per prompt.
      method: a name of :data:`TURN_METHODS` (``"tcpo"``, ``"mt_grpo"``, ``"gigpo"``,
        ``"turn_baseline"``), or a function ``(scores, turn_mask, groups) -> [B, K]``.

    Returns:
      ``(advantages float32[B, L], completion_mask)``, the mask in JAX's dtype for the one given
      (Tunix's int mask stays int, bool stays bool).

    Raises:
      ValueError: shapes that disagree, ``num_generations`` not dividing ``B``, non-finite
        scores on valid turns, an index beyond int32, a ``method`` output of the wrong shape or
        non-finite on a valid turn, an unknown method name, a method whose inputs are missing.
      TypeError: a mask that is neither boolean nor 0/1 integers, a float ``token_turn``, a
        ``method`` output that is not floating.

    Examples:
      >>> import numpy as np
      >>> from credax.tunix import turn_advantages, turns_from_mask
      >>> mask = np.array([[1, 1, 0, 1], [1, 0, 0, 1]])
      >>> t = turns_from_mask(mask, [[0.0, 1.0], [1.0, 1.0]])
      >>> adv, m = turn_advantages(t, completion_mask=mask, num_generations=2, method="turn_baseline")
      >>> adv.tolist()           # return to go minus the other row's, per turn index
      [[-1.0, -1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    """
    from ._validate import validate_turns

    layout = _as_layout(turns, turn_mask, token_turn)
    cm = _host(completion_mask, "completion_mask")
    cm_bool = _bool_mask(cm, "completion_mask")
    tt = _int_index(layout.token_turn, "token_turn")
    if tt.shape != cm.shape:
        raise ValueError(f"`token_turn` must have the completion's shape [B, L] = "
                         f"{tuple(cm.shape)}; got {tuple(tt.shape)}.")
    tm = _host(layout.turn_mask, "turn_mask")
    if tm.dtype != np.bool_:
        raise TypeError(f"`turn_mask` must be a boolean array (true = real turn); got dtype {tm.dtype}.")
    s = _real(layout.scores, "scores", ndim=2, where=tm if tm.shape == np.shape(layout.scores) else None)
    _, groups = _groups(np.zeros(s.shape[0]), num_generations)
    validate_turns(s, tm, groups, token_turn=tt, score_range=None, row_mask=tm.any(axis=1))
    if isinstance(method, str):
        if method not in TURN_METHODS:
            raise ValueError(f"`method` must be one of {sorted(TURN_METHODS)} or a function; got {method!r}.")
        clean = dataclasses.replace(layout, scores=s.astype(np.float32), turn_mask=tm, token_turn=tt)
        per_turn, name = TURN_METHODS[method](clean, groups), repr(method)
    elif callable(method):
        per_turn = method(jnp.asarray(s, jnp.float32), jnp.asarray(tm), groups)
        name = getattr(method, "__name__", type(method).__name__)
    else:
        raise TypeError(f"`method` must be a name of TURN_METHODS or a function; got "
                        f"{type(method).__name__}.")
    per_turn = _check_method_output(per_turn, name, tuple(s.shape), tm)
    tokens = broadcast_to_tokens(jnp.asarray(per_turn, jnp.float32), jnp.asarray(tt))
    narrowed = cm_bool & (tt >= 0)
    return tokens, jnp.asarray(narrowed.astype(cm.dtype))


def _layout_from(result) -> TurnLayout:
    if isinstance(result, TurnLayout):
        return result
    if isinstance(result, tuple) and len(result) == 3:
        return TurnLayout(*result)
    raise TypeError(f"`turns` must return a TurnLayout or (scores, turn_mask, token_turn); got "
                    f"{type(result).__name__}.")


class TurnCreditGRPOLearner(_grpo_learner.GRPOLearner):
    """Tunix's ``GRPOLearner`` with per-turn credit: advantages ``[B, L]`` per completion token.

    Tunix generates, scores and builds its ``TrainExample`` as usual; then the turns of each
    completion are laid out, ``method`` gives per-turn advantages grouped by prompt, each
    completion token gets its turn's advantage (:func:`credax.broadcast_to_tokens`), and tokens
    outside every turn leave the loss (the completion mask is narrowed to ``token_turn >= 0``).
    Both Tunix's own ``grpo`` loss and the credax losses take the ``[B, L]`` advantages.

    Give one of:

    * ``turn_rewards(train_example, training_input)``: ``B`` sequences of per-turn rewards; the
      turns are the runs of true tokens of ``train_example.completion_mask``
      (:func:`turns_from_mask`, holes handled: ``[0, 0, 0, 1, 0, 0]`` is one turn).
    * ``turns(train_example, training_input)``: a :class:`TurnLayout`, or ``(scores [B, K],
      turn_mask [B, K], token_turn [B, L])`` over the completion tokens (``B`` = prompts ×
      ``num_generations`` in Tunix's order, ``L`` the padded completion length).

    Every other argument is ``tunix.rl.grpo.grpo_learner.GRPOLearner``'s.

    Args:
      turns: ``(train_example, training_input) -> TurnLayout | (scores, turn_mask, token_turn)``.
      turn_rewards: ``(train_example, training_input) -> B`` sequences of per-turn rewards.
      method: a name of :data:`TURN_METHODS` (default ``"tcpo"``), or ``(scores, turn_mask,
        groups) -> [B, K]``.

    Raises:
      TypeError: neither or both of ``turns`` and ``turn_rewards``, or one that is not callable.
    """

    def __init__(self, *args, turns: Callable[[Any, Any], Any] | None = None,
                 turn_rewards: Callable[[Any, Any], Any] | None = None,
                 method: str | Callable[[jax.Array, jax.Array, Groups], jax.Array] = "tcpo", **kwargs):
        if (turns is None) == (turn_rewards is None):
            raise TypeError("give exactly one of `turns` (the layout) and `turn_rewards` (per-turn "
                            "rewards, turns from the completion mask).")
        given, label = (turns, "turns") if turns is not None else (turn_rewards, "turn_rewards")
        if not callable(given):
            raise TypeError(f"`{label}` must be a function (train_example, training_input) -> ...; "
                            f"got {type(given).__name__}.")
        super().__init__(*args, **kwargs)
        self._turns, self._turn_rewards, self._method = turns, turn_rewards, method

    def _generate_and_compute_advantage(self, training_input, mode=None):
        kwargs = {} if mode is None else {"mode": mode}
        example = super()._generate_and_compute_advantage(training_input, **kwargs)
        if self._turns is not None:
            layout = _layout_from(self._turns(example, training_input))
        else:
            layout = turns_from_mask(example.completion_mask, self._turn_rewards(example, training_input))
        advantages, mask = turn_advantages(layout, completion_mask=example.completion_mask,
                                           num_generations=self.algo_config.num_generations,
                                           method=self._method)
        return dataclasses.replace(example, advantages=advantages, completion_mask=mask)


# --------------------------------------------------------------------------------------------
# Tunix's agentic (multi-turn) learner with per-step rewards.
# --------------------------------------------------------------------------------------------


class _StepRecordingEngine(_engine.TrajectoryCollectEngine):
    """Tunix's trajectory engine; its ``"Token"`` output also keeps what it drops: each step's
    token counts and reward (``credax_steps``) and the state each step acted on
    (``credax_states``: the reset observation, then each step's observation)."""

    async def collect(self, mode: str = "Conversation"):
        out = await super().collect(mode)
        if mode == "Token" and isinstance(out, dict):
            steps = self.agent.trajectory.steps
            out["credax_steps"] = [dict(assistant_tokens=np.asarray(s.assistant_tokens if s.assistant_tokens
                                                                    is not None else [], np.int64),
                                        env_tokens=np.asarray(s.env_tokens if s.env_tokens is not None
                                                              else [], np.int64),
                                        reward=float(s.reward)) for s in steps]
            states = [self.agent.trajectory.task] + [s.observation for s in steps[:-1]]
            out["credax_states"] = [repr(state) for state in states[:len(steps)]]
        return out


class AgenticTurnCreditGRPOLearner(_agentic.GRPOLearner):
    """Tunix's agentic (multi-turn) ``GRPOLearner`` with credax's turn-level credit.

    Tunix's agentic learner collects each trajectory step by step (a reward per step, the
    model's and the environment's tokens per step), then flattens it into one completion and one
    ``trajectory_reward`` before its estimator runs. This learner keeps the steps (its trajectory
    engine records them), lays them out over the completion (:func:`turns_from_steps`: step
    ``k``'s model tokens are turn ``k``, environment tokens ``-1``) and replaces the group's
    advantages by per-token ones from ``method``, over the ``G`` trajectories of the group:

    ====================  ==================================================================
    ``method``            per turn ``k`` of trajectory ``i``
    ====================  ==================================================================
    ``"tcpo"``            :func:`credax.tcpo_advantages` of the running total of step rewards
    ``"mt_grpo"``         :func:`credax.mt_grpo_advantages` (step rewards, trajectory reward)
    ``"gigpo"``           :func:`credax.gigpo_advantages`, anchors = the observation each
                          step acted on (the reset observation, then the previous step's)
    ``"turn_baseline"``   :func:`credax.unbiased_turn_advantages` of the step rewards
    ====================  ==================================================================

    The trajectory reward used is Tunix's: the sum of the step rewards, the environment's final
    reward included. A trajectory whose mask Tunix emptied (its overlong filter, or
    ``degenerate_group_masking``, which looks at Tunix's outcome advantages) is not trained on;
    its steps still enter the group's statistics, as its reward enters Tunix's own estimator.
    Tunix's own estimator still runs (its advantages are logged as before);
    what is trained on is the per-token advantage. Every other argument is
    ``tunix.rl.agentic.agentic_grpo_learner.GRPOLearner``'s.

    Args:
      method: a name of :data:`TURN_METHODS` (default ``"tcpo"``) or ``(scores, turn_mask,
        groups) -> [B, K]``.
    """

    def __init__(self, *args, method: str | Callable[[jax.Array, jax.Array, Groups], jax.Array] = "tcpo",
                 **kwargs):
        if not (callable(method) or method in TURN_METHODS):
            raise ValueError(f"`method` must be one of {sorted(TURN_METHODS)} or a function; got {method!r}.")
        super().__init__(*args, **kwargs)
        self._method = method

    def _build_orchestrator(self):
        orchestrator = super()._build_orchestrator()
        orchestrator.engine_cls = _StepRecordingEngine
        return orchestrator

    def _process_results(self, trajectories, *args, **kwargs):
        examples = super()._process_results(trajectories, *args, **kwargs)
        steps = [item.traj["credax_steps"] for item in trajectories]
        states = [item.traj["credax_states"] for item in trajectories]
        out = []
        for example in examples:
            mask = np.asarray(example.completion_mask)
            layout = turns_from_steps(steps, length=mask.shape[1], anchors=states, completion_mask=mask)
            advantages, narrowed = turn_advantages(layout, completion_mask=mask,
                                                   num_generations=len(trajectories), method=self._method)
            out.append(dataclasses.replace(example, advantages=advantages, completion_mask=narrowed))
        return out


register()

from ._tunix_tiny import TinyChatParser, TinyTurnsEnv, tiny_cluster, tiny_dataset  # noqa: E402

__all__ = ["ESTIMATORS", "POLICY_LOSSES", "TURN_METHODS", "AgenticTurnCreditGRPOLearner", "TinyChatParser",
           "TinyTurnsEnv", "TurnCreditGRPOLearner", "TurnLayout", "drgrpo", "grpo", "register", "rloo",
           "shrinkage", "shrinkage_loo", "tiny_cluster", "tiny_dataset", "turn_advantages",
           "turns_from_mask", "turns_from_steps"]

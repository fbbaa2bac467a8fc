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

**Turn-level credit.** Tunix's estimator sees only rewards, so TCPO, TRIAGE, GiGPO and the other
per-turn methods cannot be registered. :class:`TurnCreditGRPOLearner` is the smallest working
path: a ``GRPOLearner`` whose advantages are per token ``[B, L]``, from a function of yours that
says where each turn of a completion is and what its score is. What Tunix itself would need is in
``docs/guides/tunix.md``.

The registry is Tunix's global one: importing this module twice registers the same functions
again (Tunix logs an overwrite warning); :func:`register` does it explicitly and returns the names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import presets
from ._group_ids import Groups
from ._loss_options import LossOptions
from ._losses import kl_divergence, policy_loss
from ._normalization import Normalization
from ._outcome import grpo_advantages, rloo_advantages
from ._shrinkage import shrinkage_advantages
from ._tcpo import tcpo_advantages
from ._turns import broadcast_to_tokens

try:
    from tunix.rl import common as _tunix_common
    from tunix.rl import function_registry as _registry
    from tunix.rl.grpo import grpo_learner as _grpo_learner
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("credax.tunix needs google-tunix (0.1.7): install the `tunix` extra of a credax "
                      "clone, `pip install '/path/to/credax[tunix]'`.") from err

# --------------------------------------------------------------------------------------------
# Advantage estimators: (rewards [N], num_generations G) -> [N].
# --------------------------------------------------------------------------------------------


def _groups(rewards, num_generations) -> tuple[jax.Array, Groups]:
    """Tunix's rewards as float32 and the ``N / G`` groups of ``G`` consecutive generations."""
    r = np.asarray(rewards)
    if r.ndim != 1 or not (np.issubdtype(r.dtype, np.floating) or np.issubdtype(r.dtype, np.integer)):
        raise ValueError(f"`rewards` must be a 1-D real array [N] (Tunix's rewards of N / G prompts); "
                         f"got {r.dtype} of shape {r.shape}.")
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
# Turn-level credit: a GRPOLearner with per-token advantages.
# --------------------------------------------------------------------------------------------


def _tcpo(scores, turn_mask, groups):
    return tcpo_advantages(scores, turn_mask, groups).advantages


class TurnCreditGRPOLearner(_grpo_learner.GRPOLearner):
    """Tunix's ``GRPOLearner`` with per-turn credit: advantages ``[B, L]`` per completion token.

    Tunix generates, scores and builds its ``TrainExample`` as usual; then
    ``turns(train_example, training_input)`` (yours) says where each turn of each completion is:
    it returns ``(scores [B, K], turn_mask [B, K], token_turn [B, L])`` over the completion tokens
    (``B`` = prompts × ``num_generations``, rows in Tunix's order, ``L`` the padded completion
    length; ``token_turn`` ``-1`` outside any turn). ``method(scores, turn_mask, groups)`` (default
    :func:`credax.tcpo_advantages`) gives ``[B, K]`` advantages, grouped by prompt; each completion
    token gets its turn's advantage (:func:`credax.broadcast_to_tokens`), and tokens outside every
    turn leave the loss (the completion mask is narrowed to ``token_turn >= 0``). Both Tunix's own
    ``grpo`` loss and the credax losses take the ``[B, L]`` advantages.

    Every other argument is ``tunix.rl.grpo.grpo_learner.GRPOLearner``'s.

    Args:
      turns: ``(train_example, training_input) -> (scores, turn_mask, token_turn)``, host side.
      method: ``(scores, turn_mask, groups) -> [B, K]`` advantages; default TCPO.
    """

    def __init__(self, *args, turns: Callable[[Any, Any], tuple[Any, Any, Any]],
                 method: Callable[[jax.Array, jax.Array, Groups], jax.Array] = _tcpo, **kwargs):
        if not callable(turns):
            raise TypeError(f"`turns` must be a function (train_example, training_input) -> "
                            f"(scores, turn_mask, token_turn); got {type(turns).__name__}.")
        super().__init__(*args, **kwargs)
        self._turns, self._method = turns, method

    def _generate_and_compute_advantage(self, training_input, mode=None):
        kwargs = {} if mode is None else {"mode": mode}
        example = super()._generate_and_compute_advantage(training_input, **kwargs)
        advantages, mask = turn_advantages(
            *self._turns(example, training_input), completion_mask=example.completion_mask,
            num_generations=self.algo_config.num_generations, method=self._method)
        return dataclasses.replace(example, advantages=advantages, completion_mask=mask)


def turn_advantages(scores, turn_mask, token_turn, *, completion_mask, num_generations: int,
                    method: Callable[[jax.Array, jax.Array, Groups], jax.Array] = _tcpo):
    """Per-token advantages ``[B, L]`` and the narrowed completion mask, for a Tunix batch.

    What :class:`TurnCreditGRPOLearner` does after Tunix built its ``TrainExample``: rows are
    grouped by prompt (``num_generations`` consecutive rows each), ``method`` gives per-turn
    advantages, each token gets its turn's, and ``completion_mask & (token_turn >= 0)`` is the
    mask trained on.

    Raises:
      ValueError: shapes that disagree (``scores``/``turn_mask`` ``[B, K]``, ``token_turn`` and
        ``completion_mask`` ``[B, L]``), or ``num_generations`` not dividing ``B``.
    """
    from ._validate import validate_turns

    scores = jnp.asarray(scores, jnp.float32)
    turn_mask = jnp.asarray(turn_mask)
    token_turn = jnp.asarray(token_turn)
    completion_mask = jnp.asarray(completion_mask)
    if token_turn.shape != completion_mask.shape:
        raise ValueError(f"`token_turn` must have the completion's shape [B, L] = "
                         f"{tuple(completion_mask.shape)}; got {tuple(token_turn.shape)}.")
    _, groups = _groups(np.zeros(scores.shape[0] if scores.ndim else 0), num_generations)
    validate_turns(scores, turn_mask, groups, token_turn=token_turn, score_range=None)
    per_turn = method(scores, turn_mask, groups)
    tokens = broadcast_to_tokens(per_turn, token_turn.astype(jnp.int32))
    return tokens, completion_mask & (token_turn >= 0).astype(completion_mask.dtype)


register()

__all__ = ["ESTIMATORS", "POLICY_LOSSES", "TurnCreditGRPOLearner", "drgrpo", "grpo", "register", "rloo",
           "shrinkage", "shrinkage_loo", "turn_advantages"]

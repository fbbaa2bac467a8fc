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

The package: this module holds the adapters Tunix's registry calls; ``credax.tunix.turns`` the
turns from Tunix's data and :func:`turn_advantages` (its host checks are ``credax._checks``');
``credax.tunix.learners`` the two learners; ``credax.tunix._tiny`` the toy set-up. Every public
name is importable from ``credax.tunix``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import presets
from .._loss_options import LossOptions
from .._losses import kl_divergence, policy_loss
from .._normalization import Normalization
from .._outcome import grpo_advantages, rloo_advantages
from .._shrinkage import shrinkage_advantages

try:
    from tunix.rl import common as _tunix_common
    from tunix.rl import function_registry as _registry
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("credax.tunix needs google-tunix (0.1.7): install the `tunix` extra of a credax "
                      "clone, `pip install '/path/to/credax[tunix]'`.") from err

from ._tiny import TinyChatParser, TinyTurnsEnv, tiny_cluster, tiny_dataset
from .learners import AgenticTurnCreditGRPOLearner, TurnCreditGRPOLearner
from .turns import TURN_METHODS, TurnLayout, _groups, turn_advantages, turns_from_mask, turns_from_steps

# --------------------------------------------------------------------------------------------
# Advantage estimators: (rewards [N], num_generations G) -> [N].
# --------------------------------------------------------------------------------------------


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


register()

__all__ = ["ESTIMATORS", "POLICY_LOSSES", "TURN_METHODS", "AgenticTurnCreditGRPOLearner", "TinyChatParser",
           "TinyTurnsEnv", "TurnCreditGRPOLearner", "TurnLayout", "drgrpo", "grpo", "register", "rloo",
           "shrinkage", "shrinkage_loo", "tiny_cluster", "tiny_dataset", "turn_advantages",
           "turns_from_mask", "turns_from_steps"]

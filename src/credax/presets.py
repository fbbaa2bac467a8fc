"""Parity presets: keyword arguments that make credax reproduce a peer framework's numbers.

The normalisation presets are :class:`credax.Normalization` values, the complete set of
normalisation options, so nothing falls back silently to a credax default. Pass one as a value,
``credax.grpo_advantages(rewards, ids, normalization=credax.presets.VERL)``, or as keywords,
``credax.grpo_advantages(rewards, ids, **credax.presets.VERL)`` (a ``Normalization`` is a read-only
mapping of its fields); either works with every estimator that normalises within groups. Change
one field with ``presets.VERL.replace(eps=1e-4)``. ``HGPO_VERL_AGENT`` is a read-only mapping of
``hgpo_advantages`` keywords. The tests check each preset against a hand-worked example of the
peer's formula.

===============  ===========================================================================
preset           reproduces
===============  ===========================================================================
``VERL``         verl ``compute_grpo_outcome_advantage``: unbiased std, ``(r - μ)/(σ + 1e-6)``,
                 a singleton keeps its raw score (verl sets its mean 0 and std 1).
``VERL_DR_GRPO`` verl with ``norm_adv_by_std_in_grpo=False``: ``r - μ``, singleton raw.
``TRL``          TRL ``GRPOTrainer`` with ``scale_rewards="group"`` (default): unbiased std,
                 ``(r - μ)/(σ + 1e-4)``.
``TRL_BATCH``    TRL ``scale_rewards="batch"``: group mean, std of the whole batch, ``+1e-4``.
``TRL_NONE``     TRL ``scale_rewards="none"`` (Dr. GRPO): ``r - μ``.
``HGPO_VERL_AGENT`` (for ``hgpo_advantages``) verl-agent's shipped HGPO run: history 2, γ 0.95,
                 ``mean_std_norm`` with population std, ``L^1`` level weights, no base group.
===============  ===========================================================================

TRL requires at least two generations per prompt (it raises otherwise), so its presets keep
credax's singleton default (``0``); verl's do not.
"""

from __future__ import annotations

from types import MappingProxyType

from ._groups import Normalization

VERL = Normalization(scale="group", ddof=1, eps=1e-6, eps_mode="add", singleton="raw")
VERL_DR_GRPO = Normalization(scale="none", ddof=1, eps=1e-6, eps_mode="add", singleton="raw")
TRL = Normalization(scale="group", ddof=1, eps=1e-4, eps_mode="add", singleton="zero")
TRL_BATCH = Normalization(scale="batch", ddof=1, eps=1e-4, eps_mode="add", singleton="zero")
TRL_NONE = Normalization(scale="none", ddof=1, eps=1e-4, eps_mode="add", singleton="zero")

# verl-agent recipe/hgpo run scripts: history_length=2, mode="mean_std_norm", length_weight_alpha=1,
# base_group=False, algorithm.gamma=0.95, epsilon 1e-6 (core_hgpo.py default).
HGPO_VERL_AGENT = MappingProxyType(
    dict(history=2, gamma=0.95, alpha=1.0, episode_group=False, episode_pooling="step",
         episode_singleton="raw", scale="group", ddof=0, eps=1e-6)
)


def trl(scale_rewards: str = "group") -> Normalization:
    """The TRL preset for a ``scale_rewards`` setting: ``"group"``, ``"batch"`` or ``"none"``."""
    try:
        return {"group": TRL, "batch": TRL_BATCH, "none": TRL_NONE}[scale_rewards]
    except KeyError:
        raise ValueError(
            f"`scale_rewards` must be one of ['group', 'batch', 'none']; got {scale_rewards!r}."
        ) from None


__all__ = ["HGPO_VERL_AGENT", "TRL", "TRL_BATCH", "TRL_NONE", "VERL", "VERL_DR_GRPO", "trl"]

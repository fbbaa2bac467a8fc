"""Parity presets: the options values that make credax reproduce a peer framework's numbers.

The normalisation presets are :class:`credax.Normalization` values, the complete set of
normalisation options, so nothing falls back silently to a credax default. Pass one as the
``normalization=`` value of any estimator that normalises within groups,
``credax.grpo_advantages(rewards, ids, normalization=credax.presets.VERL)``; that is the only
way (a ``Normalization`` is not a mapping: ``**credax.presets.VERL`` is a ``TypeError``). Change
one field with ``presets.VERL.replace(eps=1e-4)``. A preset that sets more than the
normalisation is a variant of the function, a ``functools.partial`` with its own docstring (as
optax writes its aliases): ``presets.hgpo_verl_agent(rewards, ...)`` is ``hgpo_advantages`` with
verl-agent's options (``presets.hgpo_verl_agent.keywords`` lists them). The tests check each preset
against a hand-worked example of the peer's formula.

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
``hgpo_verl_agent`` (a variant of ``hgpo_advantages``) verl-agent's shipped HGPO run: history 2,
                 γ 0.95, ``mean_std_norm`` with population std, ``L^1`` level weights, no base group.
``TUNIX``        Tunix's core ``grpo`` estimator (``algo_core.compute_advantages``): unbiased
                 std, ``(r - μ)/(σ + 1e-6)`` (Tunix requires ``G >= 2``; a lone row gets ``0``).
``TUNIX_ORCHESTRATOR`` Tunix's experimental orchestrator ``GRPOAdapter.compute_advantages``:
                 population std (``jnp.std``), ``(r - μ)/(σ + 1e-6)``. Newer than the pinned
                 0.1.7: tested against a restatement of its formula.
``VPR``          VPR's state-group advantage (``thu-nics/VPR``, ``compute_vpr_turn_level_advantage``,
                 ``group_whiten``): population std, ``(r - μ)/(σ + 1e-8)``, singleton 0. With
                 the state group as the group: ``grpo_advantages(r, state_ids,
                 normalization=VPR)``, or GiGPO's step level (``docs/guides/stepwise.md``).
===============  ===========================================================================

TRL requires at least two generations per prompt (it raises otherwise), so its presets keep
credax's singleton default (``0``); verl's do not.

Loss presets are :class:`credax.LossOptions` values, passed whole as the ``options=`` value of the
policy loss, ``credax.policy_loss(logp, old_logp, advantages, mask,
options=credax.presets.VERL_LOSS)`` (the same loss and gradients as the peer's, ties on the clip
bounds included); like the normalisation presets they are not mappings (``**preset`` is a
``TypeError`` saying so), and ``preset.replace(kl_coef=0.001)`` changes a field:

====================  ======================================================================
preset                reproduces
====================  ======================================================================
``VERL_LOSS``         verl ``compute_policy_loss_vanilla`` with its defaults: clip 0.2 both
                      sides, dual clip ``clip_ratio_c = 3``, ``token-mean``, log-ratio clamped
                      at ±20; KL loss ``low_var_kl`` (k3) with its value clamped at ±10.
``VERL_GSPO_LOSS``    verl ``compute_policy_loss_gspo``: sequence ratio (GSPO-token form), log
                      ratio clamped at ``+10`` only, no dual clip, ``seq-mean-token-mean``.
                      Set ``clip_low``/``clip_high`` as your config does (GSPO uses ~3e-4/4e-4).
``trl_loss(...)``     TRL ``GRPOTrainer._compute_loss`` for each of its eight ``loss_type``
                      values (grpo, dr_grpo, dapo, bnpo, cispo, sapo, luspo, vespo): see
                      :func:`trl_loss`.
====================  ======================================================================

``kl_coef`` (verl ``kl_loss_coef``, TRL ``beta``: ``preset.replace(kl_coef=...)``) and
``ref_logp`` are yours to pass.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._hgpo import hgpo_advantages
from ._loss_options import LossOptions
from ._normalization import Normalization

VERL = Normalization(scale="group", ddof=1, eps=1e-6, eps_mode="add", singleton="raw")
VERL_DR_GRPO = Normalization(scale="none", ddof=1, eps=1e-6, eps_mode="add", singleton="raw")
TRL = Normalization(scale="group", ddof=1, eps=1e-4, eps_mode="add", singleton="zero")
TRL_BATCH = Normalization(scale="batch", ddof=1, eps=1e-4, eps_mode="add", singleton="zero")
TRL_NONE = Normalization(scale="none", ddof=1, eps=1e-4, eps_mode="add", singleton="zero")
# thu-nics/VPR gigpo/core_gigpo.py compute_vpr_turn_level_advantage, state groups, "group_whiten":
# np.std (population), + eps 1e-8; groups of one (or of equal rewards) get 0 and leave the loss.
VPR = Normalization(scale="group", ddof=0, eps=1e-8, eps_mode="add", singleton="zero")

# verl-agent recipe/hgpo run scripts: history_length=2, mode="mean_std_norm", length_weight_alpha=1,
# base_group=False, algorithm.gamma=0.95, epsilon 1e-6 (core_hgpo.py default).
hgpo_verl_agent = functools.partial(
    hgpo_advantages, history=2, gamma=0.95, alpha=1.0, episode_group=False, episode_pooling="step",
    episode_singleton="raw", normalization=Normalization(scale="group", ddof=0, eps=1e-6))
hgpo_verl_agent.__doc__ = """:func:`credax.hgpo_advantages` with verl-agent's shipped HGPO run.

verl-agent's ``recipe/hgpo`` scripts: ``history_length=2``, ``algorithm.gamma=0.95``,
``mode="mean_std_norm"`` (population std, ``+1e-6``), ``length_weight_alpha=1``,
``base_group=False``; ``episode_group=True`` turns on its ``base_group`` with verl-agent's episode
statistics (``episode_pooling="step"``, ``episode_singleton="raw"``). Any keyword given overrides
the preset's (``hgpo_verl_agent(..., gamma=0.5)``); ``hgpo_verl_agent.keywords`` holds them.

Examples:
  >>> import credax, jax.numpy as jnp
  >>> from credax import presets
  >>> r, steps = jnp.array([1.0, 0.0]), jnp.array([[0.0, 1.0], [0.0, 0.0]])
  >>> anchors, mask, ids = jnp.array([[0, 1], [0, 1]]), jnp.ones((2, 2), bool), jnp.zeros(2, int)
  >>> out = presets.hgpo_verl_agent(r, steps, anchors, mask, ids)
  >>> same = credax.hgpo_advantages(r, steps, anchors, mask, ids, **presets.hgpo_verl_agent.keywords)
  >>> bool((out.advantages == same.advantages).all()), presets.hgpo_verl_agent.keywords["history"]
  (True, 2)
"""


def __getattr__(name: str):
    if name == "HGPO_VERL_AGENT":  # the mapping of 0.1.x's presets
        raise AttributeError(
            "credax.presets.HGPO_VERL_AGENT is now credax.presets.hgpo_verl_agent, "
            "hgpo_advantages with verl-agent's options (a functools.partial): call "
            "presets.hgpo_verl_agent(rewards, step_rewards, anchor_ids, turn_mask, group_ids); its "
            "options are presets.hgpo_verl_agent.keywords.")
    raise AttributeError(f"module 'credax.presets' has no attribute {name!r}")


# Tunix's two GRPO conventions (google-tunix 0.1.7, the `tunix` extra). The core estimator,
# tunix/rl/algo_core.py compute_advantages: (r - mean) / (std(ddof=1) + 1e-6) per reshape(-1, G).
# The experimental orchestrator's GRPOAdapter.compute_advantages (tunix/experimental/orchestrator/
# algorithm_adapter.py, newer than 0.1.7, not in the pinned wheel): jnp.std, population (ddof=0),
# + 1e-6. Tunix refuses G = 1 (GRPOConfig); a lone row gets 0 here.
TUNIX = Normalization(scale="group", ddof=1, eps=1e-6, eps_mode="add", singleton="zero")
TUNIX_ORCHESTRATOR = Normalization(scale="group", ddof=0, eps=1e-6, eps_mode="add", singleton="zero")


def trl(scale_rewards: str = "group") -> Normalization:
    """The TRL preset for a ``scale_rewards`` setting: ``"group"``, ``"batch"`` or ``"none"``."""
    try:
        return {"group": TRL, "batch": TRL_BATCH, "none": TRL_NONE}[scale_rewards]
    except KeyError:
        raise ValueError(
            f"`scale_rewards` must be one of ['group', 'batch', 'none']; got {scale_rewards!r}."
        ) from None


# --------------------------------------------------------------------------------------------
# Loss parity presets.
# --------------------------------------------------------------------------------------------

VERL_LOSS = LossOptions(clip_low=0.2, clip_high=0.2, dual_clip=3.0, agg="token-mean",
                        ratio="token", log_ratio_clamp=20.0, kl_estimator="k3", kl_clamp=10.0,
                        kl_ratio_weight=False)
VERL_GSPO_LOSS = LossOptions(clip_low=0.2, clip_high=0.2, dual_clip=None,
                             agg="seq-mean-token-mean", ratio="sequence",
                             log_ratio_clamp=(-float("inf"), 10.0), kl_estimator="k3",
                             kl_clamp=10.0, kl_ratio_weight=False)

TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
# TRL's and Liger's floor of VESPO's rates (``lambda_seq.clamp(min=1e-4)``).
_VESPO_LAMBDA_FLOOR = 1e-4


def trl_loss(
    loss_type: str = "dapo",
    *,
    num_rows: int | None = None,
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
    num_processes: int = 1,
    importance_sampling_level: str = "token",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    use_bias_correction_kl: bool = True,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
) -> LossOptions:
    """The ``policy_loss`` options that reproduce TRL ``GRPOTrainer`` for one ``loss_type``.

    The keywords are TRL 1.16's ``GRPOConfig`` fields, with its defaults. TRL's per-token loss and
    denominator for each ``loss_type``, and the credax options that reproduce them (``n_b``
    valid tokens of row ``b``, ``S`` rows with ``n_b > 0``, ``B`` all rows of the micro-batch,
    ``N`` = ``num_items_in_batch / num_processes``)::

        loss_type  per-token loss                  TRL denominator          credax
        grpo       clip                            Σ_b (Σ_t ℓ / n_b) / B    seq-mean-token-mean, B
        bnpo       clip                            Σ ℓ / max(Σ n_b, 1)      token-mean
        dr_grpo    clip                            Σ ℓ / (B · L_max)        seq-mean-token-sum-norm
        dapo       clip                            Σ ℓ / N                  token-mean, normalizer N
        cispo      -sg(min(r, ε_high))·A·logp      Σ ℓ / N                  surrogate="cispo"
        sapo       -(4/τ)·σ(τ(r - 1))·A            as grpo                  surrogate="sapo"
        luspo      clip                            Σ_b Σ_t ℓ / B            seq-mean-token-sum, B
        vespo      -φ(W_b)·A·logp                  Σ ℓ / N                  surrogate="vespo"

    ``grpo``, ``sapo`` and ``luspo`` divide by every row, empty ones included, where credax's
    sequence modes divide by the non-empty rows ``S``: pass ``num_rows=B`` (the micro-batch's row
    count) to get TRL's number. ``dapo``/``cispo``/``vespo``'s ``num_items_in_batch`` is the token
    count of the whole gradient accumulation batch over all processes; without it the local token
    mean is used (TRL's value on one process with one micro-batch). TRL additionally divides
    ``grpo``/``bnpo``/``dr_grpo``/``sapo``/``luspo`` losses by the gradient-accumulation steps, a
    constant factor left to the caller. The formulas of each surrogate, their papers and where
    TRL and Liger differ from them are in :func:`credax.policy_loss`.

    * ``epsilon``, ``epsilon_high``: the clip range ``[1 - ε, 1 + ε_high]`` (``ε_high`` defaults
      to ``ε``). For ``cispo`` TRL reads ``epsilon_high`` (else ``epsilon``) as the absolute cap of
      the ratio weight, ``cispo_max`` (ScaleRL recommends 5.0; TRL's fallback 0.2 caps every
      weight at 0.2, and this function follows TRL there too).
    * ``delta``: TRL's two-sided clipping, ``ratio_cap=delta`` (not ``dual_clip=delta``, which
      differs from it exactly at ``r = δ``, see :func:`credax.policy_loss`). TRL applies it to the
      clipped losses only (grpo, bnpo, dr_grpo, dapo, luspo) and ignores it for cispo, sapo and
      vespo; so does this function.
    * ``importance_sampling_level``: ``ratio``. ``luspo`` is meant for ``"sequence"`` (TRL warns
      otherwise; at ``"token"`` its loss is the per-token sums' mean over rows). ``vespo``
      computes its own sequence weight; the level only changes the ratio of the KL's bias
      correction. TRL warns for ``"sequence"`` with bnpo, dr_grpo, dapo and cispo, and runs it.
    * ``sapo_temperature_pos``/``_neg``: ``sapo_tau_pos``/``_neg``; ``vespo_k_*``,
      ``vespo_lambda_*``: the VESPO fields; a ``vespo_lambda_*`` below ``1e-4`` acts as ``1e-4``
      (TRL's and Liger's clamp, applied here).

    The KL term is ``k3`` without a value clamp; ``use_bias_correction_kl`` multiplies it by the
    ratio (``kl_ratio_weight``; at sequence level by the row's sequence ratio, as TRL does). TRL
    1.16's ``GRPOConfig`` default is ``use_bias_correction_kl=True`` (Liger's
    ``LigerFusedLinearGRPOLoss`` defaults to ``False``), and so is this function's; the KL term
    only acts with ``kl_coef`` (TRL's ``beta``, default 0) and ``ref_logp``. TRL does not clamp the
    log-ratio before ``exp``; credax keeps its ±20 clamp, so the two agree for
    ``|logp - old_logp| <= 20`` (beyond it TRL's ratio is ``e^20``-large or ``inf``). TRL 1.16
    also rescales ``num_items_in_batch`` by ``gradient_accumulation_steps /
    steps_per_generation`` (1 with its defaults): fold that factor into ``num_items_in_batch`` if
    you change either.

    Returns:
      A :class:`credax.LossOptions` (pass it as ``options=``).

    Raises:
      ValueError: unknown ``loss_type`` or ``importance_sampling_level``; ``dr_grpo`` without
        ``num_rows`` and ``max_completion_length``; a count that is not a positive whole number
        (``num_rows``, ``max_completion_length``, ``num_processes``: zero, negative, fractional,
        NaN), a ``num_items_in_batch`` that is negative or not finite; ``epsilon`` outside
        ``(0, 1)``, ``epsilon_high <= 0``, ``delta <= 1``, a SAPO temperature ``<= 0``, a VESPO
        ``k < 0`` (each named by its TRL name).
      TypeError: a count or a number given as a bool, a string or ``None`` where a number is
        needed; ``use_bias_correction_kl`` not a bool (``"false"`` would read as true).

    Examples:
      >>> import credax
      >>> opts = credax.presets.trl_loss("grpo", num_rows=8)
      >>> opts.agg, opts.normalizer
      ('seq-mean-token-mean', 8)
      >>> opts = credax.presets.trl_loss("cispo", epsilon_high=5.0)
      >>> opts.surrogate, opts.cispo_max, opts.agg
      ('cispo', 5.0, 'token-mean')
    """
    if loss_type not in TRL_LOSS_TYPES:
        raise ValueError(f"`loss_type` must be one of {list(TRL_LOSS_TYPES)} (TRL 1.16's "
                         f"GRPOConfig.loss_type); got {loss_type!r}.")
    if importance_sampling_level not in ("token", "sequence"):
        raise ValueError("`importance_sampling_level` must be 'token' or 'sequence'; got "
                         f"{importance_sampling_level!r}.")
    num_rows = None if num_rows is None else _count(num_rows, "num_rows")
    if max_completion_length is not None:
        max_completion_length = _count(max_completion_length, "max_completion_length")
    num_processes = _count(num_processes, "num_processes")
    if num_items_in_batch is not None:
        items = _real(num_items_in_batch, "num_items_in_batch")
        if not (math.isfinite(items) and items >= 0):
            raise ValueError("`num_items_in_batch` must be a finite token count >= 0; got "
                             f"{items}.")
    eps = _real(epsilon, "epsilon")
    if not 0 < eps < 1:
        raise ValueError(f"`epsilon` must lie in (0, 1) (the ratio's lower bound is 1 - epsilon); "
                         f"got {eps}.")
    if epsilon_high is not None and not _real(epsilon_high, "epsilon_high") > 0:
        raise ValueError(f"`epsilon_high` must be > 0; got {epsilon_high}.")
    if delta is not None and not _real(delta, "delta") > 1:
        raise ValueError(f"`delta` must be > 1 (TRL's two-sided clipping bound); got {delta}.")
    if not isinstance(use_bias_correction_kl, bool | np.bool_):
        raise TypeError("`use_bias_correction_kl` must be a bool; got "
                        f"{use_bias_correction_kl!r}.")
    for name, value in (("sapo_temperature_pos", sapo_temperature_pos),
                        ("sapo_temperature_neg", sapo_temperature_neg)):
        if not _real(value, name) > 0:
            raise ValueError(f"`{name}` must be > 0 (SAPO divides by it); got {value}.")
    for name, value in (("vespo_k_pos", vespo_k_pos), ("vespo_k_neg", vespo_k_neg)):
        if not _real(value, name) >= 0:
            raise ValueError(f"`{name}` must be >= 0 (VESPO's gamma shape); got {value}.")
    lambdas = {name: max(_real(value, name), _VESPO_LAMBDA_FLOOR) for name, value in
               (("vespo_lambda_pos", vespo_lambda_pos), ("vespo_lambda_neg", vespo_lambda_neg))}
    high = epsilon if epsilon_high is None else epsilon_high
    clipped = loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
    options = dict(
        clip_low=epsilon, clip_high=high, dual_clip=None, ratio_cap=delta if clipped else None,
        ratio=importance_sampling_level, log_ratio_clamp=20.0, kl_estimator="k3", kl_clamp=None,
        kl_ratio_weight=bool(use_bias_correction_kl),
        surrogate="clip" if clipped else loss_type,
    )
    if loss_type == "cispo":
        options.update(cispo_max=high)
    elif loss_type == "sapo":
        options.update(sapo_tau_pos=sapo_temperature_pos, sapo_tau_neg=sapo_temperature_neg)
    elif loss_type == "vespo":
        options.update(vespo_k_pos=vespo_k_pos, vespo_k_neg=vespo_k_neg, **lambdas)
    if loss_type in ("grpo", "sapo"):
        options.update(agg="seq-mean-token-mean", normalizer=num_rows)
    elif loss_type == "luspo":
        options.update(agg="seq-mean-token-sum", normalizer=num_rows)
    elif loss_type == "bnpo":
        options.update(agg="token-mean", normalizer=None)
    elif loss_type == "dr_grpo":
        if num_rows is None or max_completion_length is None:
            raise ValueError("`loss_type='dr_grpo'` divides by num_rows × max_completion_length: "
                             "pass both `num_rows` and `max_completion_length`.")
        options.update(agg="seq-mean-token-sum-norm", normalizer=num_rows * max_completion_length)
    else:  # dapo, cispo, vespo
        normalizer = None
        if num_items_in_batch is not None:
            normalizer = max(float(num_items_in_batch), 1.0) / num_processes
        options.update(agg="token-mean", normalizer=normalizer)
    return LossOptions(**options)


def _real(value, name: str) -> float:
    """``value`` as a float: a Python or NumPy real number (not a bool, a string or ``None``)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer
                                                               | np.floating):
        raise TypeError(f"`{name}` must be a real number; got {type(value).__name__} {value!r}.")
    return float(value)


def _count(value, name: str) -> int:
    """``value`` as a positive whole number (``8``, ``8.0``, ``np.int64(8)``), named otherwise."""
    v = _real(value, name)
    if not (math.isfinite(v) and v >= 1 and v == int(v)):
        raise ValueError(f"`{name}` must be a positive whole number (a count); got {value!r}.")
    return int(v)


TRL_LOSS = trl_loss("dapo")  # TRL 1.16's defaults: loss_type dapo, bias-corrected KL; one process

__all__ = ["TRL", "TRL_BATCH", "TRL_LOSS", "TRL_NONE", "TUNIX",
           "TUNIX_ORCHESTRATOR", "VERL", "VERL_DR_GRPO", "VERL_GSPO_LOSS", "VERL_LOSS", "VPR", "trl",
           "hgpo_verl_agent", "trl_loss"]

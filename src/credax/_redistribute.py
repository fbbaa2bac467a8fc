"""Redistribution: a trajectory advantage spread over its turns by per-turn weights.

Five methods of Aug–Oct 2026 (DRACO, VICT, IAPO, TASPO, FACTOR) share this step: take the
group-relative trajectory advantage ``A_i``, produce non-negative per-turn weights ``w_{i,k}``
from some signal (judge attributions, verifier proof edges, influence graphs, privileged-information
likelihood shifts, TD residuals), and redistribute ``A_i`` over the turns, either keeping the mean
(``mean_preserving``) or the sum (``telescoping``). credax owns the redistribution, not the signal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from . import _checks
from ._api import concrete_array, jit_public

REDISTRIBUTION_MODES = ("mean_preserving", "telescoping")


def _check_weights(arguments) -> None:
    """Concrete weights: every valid one ``>= 0`` and finite (a ``ValueError`` naming it)."""
    w, m = concrete_array(arguments.get("weights")), concrete_array(arguments.get("turn_mask"))
    if w is None or m is None or w.shape != m.shape or m.dtype != bool or w.dtype.kind not in "fiu":
        return  # shapes and dtypes are checked (and named) in the body
    bad = m & ~(np.isfinite(w) & (w >= 0))
    if bad.any():
        b, k = _checks.first_index(bad)
        raise ValueError(f"`weights` must be >= 0 and finite on valid turns; got {w[b, k]} at "
                         f"row {b}, turn {k} ({int(bad.sum())} such turns).")


@jit_public(static_argnames=("mode",), check=_check_weights)
def redistribute_advantages(
    advantages: Float[Array, " B"],
    weights: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    mode: str = "mean_preserving",
) -> Float[Array, "B K"]:
    """Per-turn advantages: each trajectory's advantage redistributed over its valid turns.

    With ``n_i`` the valid turns of row ``i`` and ``S_i = Σ_{k valid} w_{i,k}``::

        mean_preserving:  A_{i,k} = w̃_{i,k} · A_i,   w̃_{i,k} = n_i · w_{i,k} / S_i   (mean_k w̃ = 1)
        telescoping:      A_{i,k} = A_i · w_{i,k} / S_i                              (Σ_k A_{i,k} = A_i)

    So ``mean_k A_{i,k} = A_i`` (mean-preserving) or ``Σ_k A_{i,k} = A_i`` (telescoping) on every
    row with a valid turn, uniform weights give ``A_i`` on every turn (mean-preserving; ``A_i / n_i``
    telescoping), and every turn keeps the sign of ``A_i`` (or is ``0`` where its weight is ``0``).

    Degenerate rows, defined: weights all ``0`` on the valid turns carry no signal, so the row is
    redistributed uniformly (``A_i`` on each turn, or ``A_i / n_i``: the invariants still hold);
    one valid turn gets ``A_i`` in either mode (a zero weight included); a row without valid turns
    is ``0``. Padded turns are ``0`` and their weights never matter (NaN included). The weights
    are divided by the row's largest valid weight first (the same value), so any finite weights
    give a finite result. Negative or non-finite weights on valid turns are refused when concrete
    (``ValueError``); traced ones make that row NaN (they would break the sign and the invariant).

    Args:
      advantages: ``float[B]`` the trajectory advantage ``A_i`` (e.g. GRPO's).
      weights: ``float[B, K]`` non-negative per-turn weights (any scale: only their ratios within a
        row matter).
      turn_mask: ``bool[B, K]`` real turns.
      mode: static; ``"mean_preserving"`` or ``"telescoping"``.

    Returns:
      ``float[B, K]`` per-turn advantages in the promoted dtype of the float inputs; ``0`` on padded
      turns.

    Raises:
      TypeError: non-boolean ``turn_mask``, non-numeric inputs.
      ValueError: shapes disagree; unknown ``mode``; a concrete negative or non-finite weight on a
        valid turn.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> adv = jnp.array([1.0, -2.0])
      >>> w = jnp.array([[1.0, 3.0, 0.0], [2.0, 2.0, 9.0]])
      >>> mask = jnp.array([[True, True, True], [True, True, False]])
      >>> # row 0: mean w = 4/3 -> w~ = (0.75, 2.25, 0); row 1: uniform over its two turns
      >>> credax.redistribute_advantages(adv, w, mask).tolist()
      [[0.75, 2.25, 0.0], [-2.0, -2.0, 0.0]]
      >>> credax.redistribute_advantages(adv, w, mask, mode="telescoping").tolist()
      [[0.25, 0.75, 0.0], [-1.0, -1.0, 0.0]]

    References:
      The shared step of DRACO (arXiv 2609.04094, judge attributions), VICT (2608.28128, verifier
      proof edges), IAPO (2608.24588, influence graphs), TASPO (2608.31077, mean-preserving
      privileged-information weights) and FACTOR (2608.07118, telescoping TD residuals); see the
      redistribution guide for how each produces its weights. No method's code is public.
    """
    _checks.check_option(mode, "mode", REDISTRIBUTION_MODES)
    a = _checks.as_float_array(advantages, "advantages")
    w = _checks.as_float_array(weights, "weights")
    if a.ndim != 1:
        raise ValueError(f"`advantages` must be 1-D, shape [B]; got shape {a.shape}.")
    if w.ndim != 2 or w.shape[0] != a.shape[0]:
        raise ValueError(f"`weights` must have shape [B, K] with B={a.shape[0]} (the length of "
                         f"`advantages`); got shape {w.shape}.")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", w.shape)
    out_dtype = _checks.output_dtype(jnp.result_type(a.dtype, w.dtype))
    dt = _checks.compute_dtype(out_dtype)
    a, w = a.astype(dt), w.astype(dt)
    zero = jnp.zeros((), dt)

    bad = jnp.any(turn_mask & ~(jnp.isfinite(w) & (w >= 0)), axis=1)
    w = jnp.where(turn_mask & ~bad[:, None], w, zero)
    count = jnp.sum(turn_mask, axis=1, dtype=dt)
    # Divide by the row's largest weight first: u in [0, 1], the sum in [1, K] (no overflow).
    top = jax.lax.stop_gradient(jnp.max(w, axis=1, initial=0.0))
    signal = top > 0
    u = jnp.where(turn_mask, _checks.safe_div(w, top[:, None], signal[:, None]), zero)
    total = jnp.sum(u, axis=1)
    # No signal (all weights 0): uniform, so the mean / sum invariant still holds.
    u = jnp.where(signal[:, None], u, jnp.where(turn_mask, jnp.ones((), dt), zero))
    total = jnp.where(signal, total, count)
    share = _checks.safe_div(u, total[:, None], (total > 0)[:, None])  # Σ_k share = 1
    if mode == "mean_preserving":
        share = share * count[:, None]
    out = jnp.where(turn_mask, share * a[:, None], zero)
    out = jnp.where(bad[:, None] & turn_mask, jnp.full((), jnp.nan, dt), out)
    return out.astype(out_dtype)

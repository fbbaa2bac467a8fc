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

from . import _checks, _numeric
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


def _unit_weights(w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``w / 2**E`` per row, ``2**E`` the power of two just above the row's largest weight, exact,
    read from the floats' bits: ``u`` in ``[0, 1)``, and whether the row has a nonzero weight.

    Not ``w / max(w)``: XLA divides by multiplying with ``1 / max(w)``, which is subnormal for a
    maximum of ``2**126`` or more and flushes to ``0`` on CPU (the whole row became ``0``), and it
    reads a subnormal weight as ``0``. From the bits, every finite weight is its significand
    (an integer below ``2**(mantissa + 1)``, exact in the float) times ``2**exponent``, and the
    scaling subtracts exponents. A weight below ``2**-126`` of the row's largest flushes to ``0``
    (its share would be subnormal anyway). The gradient is that of ``w / 2**E`` with ``E`` fixed.
    """
    info = jnp.finfo(w.dtype)
    ints = jnp.dtype(f"int{8 * w.dtype.itemsize}")
    nmant = int(info.nmant)
    sg = jax.lax.stop_gradient
    bits = jax.lax.bitcast_convert_type(sg(w), ints)  # w >= 0: the sign bit is clear
    field = jax.lax.shift_right_logical(bits, ints.type(nmant))
    frac = bits & ints.type((1 << nmant) - 1)
    normal = field > 0
    significand = jnp.where(normal, frac | ints.type(1 << nmant), frac)
    exponent = jnp.where(normal, field, ints.type(1))  # value = significand · 2**(exponent - bias)
    nonzero = significand > 0
    top = jnp.max(jnp.where(nonzero, exponent, ints.type(0)), axis=1, keepdims=True)
    # u = significand · 2**(exponent - top - nmant - 1) < 1: two normal powers of two
    shift = exponent - top - (nmant + 1)  # in [-(2·bias + nmant), -(nmant + 1)]
    first = jnp.maximum(shift, ints.type(int(info.minexp)))
    second = shift - first
    u = (significand.astype(w.dtype) * _pow2(first, w.dtype)) * _pow2(
        jnp.maximum(second, ints.type(int(info.minexp))), w.dtype)
    u = jnp.where(nonzero & (second >= int(info.minexp)), u, jnp.zeros_like(u))
    # value u, gradient d(w · 2**-E)/dw: the scale 2**-E as two normal factors (E up to 2**128)
    e_top = top - (int(info.maxexp) - 1) + 1  # 2**e_top > max(w)
    half = e_top // 2
    grad = (w - sg(w)) * _pow2(-half, w.dtype) * _pow2(half - e_top, w.dtype)
    return u + grad, jnp.any(nonzero, axis=1)


def _pow2(e: jax.Array, dtype) -> jax.Array:
    """``2**e`` for integer ``e`` in the normal range, built from the bits (exact)."""
    info = jnp.finfo(dtype)
    ints = jnp.dtype(f"int{8 * jnp.dtype(dtype).itemsize}")
    biased = e.astype(ints) + (int(info.maxexp) - 1)
    return jax.lax.bitcast_convert_type(jax.lax.shift_left(biased, ints.type(info.nmant)), dtype)


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
    are scaled exactly by the power of two above the row's largest valid weight first (the same
    value), so any finite weights, subnormal to the float's largest, give this result (a share
    below the float's normal range, ``2**-126`` in float32, is ``0``). Negative or non-finite
    weights on valid turns are refused when concrete (``ValueError``); traced ones make that row
    NaN (they would break the sign and the invariant).

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
    out_dtype = _numeric.output_dtype(jnp.result_type(a.dtype, w.dtype))
    dt = _numeric.compute_dtype(out_dtype)
    a, w = a.astype(dt), w.astype(dt)
    zero = jnp.zeros((), dt)

    bad = jnp.any(turn_mask & ~(jnp.isfinite(w) & (w >= 0)), axis=1)
    w = jnp.where(turn_mask & ~bad[:, None], w, zero)
    count = jnp.sum(turn_mask, axis=1, dtype=dt)
    u, signal = _unit_weights(w)
    u = jnp.where(turn_mask, u, zero)
    total = jnp.sum(u, axis=1)
    # No signal (all weights 0): uniform, so the mean / sum invariant still holds.
    u = jnp.where(signal[:, None], u, jnp.where(turn_mask, jnp.ones((), dt), zero))
    total = jnp.where(signal, total, count)
    share = _numeric.safe_div(u, total[:, None], (total > 0)[:, None])  # Σ_k share = 1
    if mode == "mean_preserving":
        share = share * count[:, None]
    out = jnp.where(turn_mask, share * a[:, None], zero)
    out = jnp.where(bad[:, None] & turn_mask, jnp.full((), jnp.nan, dt), out)
    return out.astype(out_dtype)

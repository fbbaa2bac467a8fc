"""Numeric helpers of the math modules: the dtype rules, masked selects and the safe divisions.

Not checks (``_checks`` holds those): arithmetic every estimator shares, each written once. Masks
select (``jnp.where``), never multiply; a division that can meet zero is a double ``where``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def compute_dtype(dtype) -> jnp.dtype:
    """The dtype statistics are computed in: float64 stays, everything else is float32.

    bfloat16 / float16 inputs are promoted (credax's dtype convention: statistics in at least
    float32); integer and bool inputs (e.g. 0/1 rewards) are computed in float32.
    """
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float64:
        return jnp.dtype(jnp.float64)
    return jnp.dtype(jnp.float32)


def output_dtype(dtype) -> jnp.dtype:
    """Floating inputs keep their dtype; integer or bool inputs give float32."""
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return dtype
    return jnp.dtype(jnp.float32)


def select(mask: jax.Array, x: jax.Array) -> jax.Array:
    """``x`` where ``mask``, exactly ``0`` elsewhere (a select, never a product: NaN stays out)."""
    return jnp.where(mask, x, jnp.zeros_like(x))


def safe_div(num: jax.Array, den: jax.Array, ok: jax.Array) -> jax.Array:
    """``num / den`` where ``ok``, else 0 — the double-``where`` so gradients stay finite.

    The inner ``where`` replaces the denominator before dividing: a plain
    ``where(ok, num / den, 0)`` still differentiates ``num / 0`` on the untaken branch, and
    ``0 * inf`` in the backward pass is NaN (rlax ``_clip_by_l2_norm`` explains the pattern).
    """
    den = jnp.where(ok, den, jnp.ones_like(den))
    return jnp.where(ok, num / den, jnp.zeros_like(num))


def safe_sqrt(x: jax.Array) -> jax.Array:
    """``sqrt(x)`` with a finite gradient at 0 (defined as 0 there); NaN stays NaN.

    Only ``x > 0`` and ``x == 0`` are special-cased: a NaN (or negative) argument gives NaN, never
    ``0`` — a NaN variance must not pass for a zero spread (that turned a NaN group into ``±x/eps``).
    """
    positive = x > 0
    root = jnp.sqrt(jnp.where(positive, x, jnp.ones_like(x)))
    return jnp.where(positive, root, jnp.where(x == 0, jnp.zeros_like(x), jnp.full_like(x, jnp.nan)))


def clip_closed(x: jax.Array, lo, hi) -> jax.Array:
    """``clip(x, lo, hi)`` whose gradient is 1 on the *closed* interval ``[lo, hi]``, 0 outside.

    ``jnp.clip`` is ``min(max(x, lo), hi)`` and splits the gradient of a value exactly on a bound
    (0.5, the tie rule of ``max``); ``torch.clamp``, which verl and TRL clip with, passes it whole.
    A ratio exactly on a clip bound is common (``logp == old_logp`` with a bound of 1, clipped values
    fed back), and at ``r = 1 + ε`` with ``A < 0`` the loss is smooth: the full gradient is right.
    """
    inside = (x >= lo) & (x <= hi)
    return jnp.where(inside, x, jax.lax.stop_gradient(jnp.clip(x, lo, hi)))


def widen_index(x: jax.Array) -> jax.Array:
    """An integer index array widened to at least int32 (64-bit indices stay 64-bit).

    Narrow dtypes wrap: an int16 token id compared with a vocabulary of 32768, or an int8 turn map
    offset by ``b * K``, overflows silently (and the backward one-hot iota would wrap too). Every
    index is widened before any arithmetic.
    """
    wide = jnp.int64 if x.dtype.itemsize == 8 else jnp.int32
    return x if x.dtype == wide else x.astype(wide)


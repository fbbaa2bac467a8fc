"""The statistics engine: masked statistics per (group, trailing index), gathered back to rows.

Every estimator in credax that compares a trajectory with its peers goes through this module
(through ``_grouping`` or directly): GRPO, RLOO, GDPO, the hindsight baseline and the
per-(prompt, turn) z-score of TCPO, MT-GRPO, the episode and anchor groups of GiGPO, HGPO's history
levels, the shrinkage baselines and the diagnostics. Nothing else in the package computes a group
statistic.

Assumptions, stated once:

* ``x`` has shape ``[B, ...]``; statistics are taken over the rows of one group *at the same
  trailing index*. For ``x[B]`` that is per prompt; for ``x[B, K]`` it is per (prompt, turn).
* Only entries whose mask is true count, and only they receive a value; masked entries are ``0``
  whatever they hold (NaN and inf included) — masks select, they never multiply.
* Statistics are computed on values shifted by the group maximum (a member of the set), so a set
  whose valid values are all identical has shifted values exactly ``0``: its centred output is
  exactly ``0`` whatever ``eps`` is and no float residue is ever amplified (the ``std ≈ 1e-7``
  failure of one-pass variances, NVIDIA-NeMo/RL#1518). The variance is a centred two-pass sum of
  squares of the shifted values.
* A valid non-finite value takes no part in the statistics (which stay finite); its set is
  flagged, and every caller turns the outputs whose formula includes it into NaN.

Two paths compute the same statistics: the segment (scatter) path for arbitrary ids and the block
(reshape) path for ``groups(ids, layout="contiguous", group_size=G)``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from . import _checks, _numeric
from ._group_ids import Groups


class _Stats(NamedTuple):
    """Per-entry statistics of each entry's peer set, gathered back to ``[B, ...]``.

    Everything but ``count``, ``shift``, ``unit`` and the flags is in *set units*: the set's values
    divided by ``unit``, an exact power of two close to the set's largest magnitude. In set units
    every value lies in ``[-1, 1]``, shifted values in ``[-2, 0]`` and squares are at most 4, so
    neither the shift nor the sum of squares can overflow for any finite input (``|x|`` up to the
    dtype's maximum) nor underflow for tiny spreads; dividing by a power of two is exact, so for
    ordinary values every statistic is bit-identical to the unscaled computation.
    """

    count: jax.Array  # valid members of the set (float, compute dtype)
    shift: jax.Array  # the set's maximum (a member), stop-gradient; 0 for empty sets
    unit: jax.Array  # 2**e, the set's scale (stop-gradient, a normal power of two)
    inv_unit: jax.Array  # 2**-e
    shifted: jax.Array  # (x - shift) / unit at valid finite entries, 0 elsewhere
    total: jax.Array  # sum of the shifted values (set units)
    mean: jax.Array  # mean of the shifted values (set units)
    sum_sq: jax.Array  # centred sum of squares (set units squared)
    constant: jax.Array  # every valid value identical (exact)
    bad_count: jax.Array  # valid non-finite values (NaN, ±inf) in the set (float)
    own_nonfinite: jax.Array  # this entry is valid and non-finite

    @property
    def nonfinite(self) -> jax.Array:
        """The set holds a non-finite value at a valid entry."""
        return self.bad_count > 0

    def value(self, v: jax.Array) -> jax.Array:
        """A set-units quantity back in the units of ``x``."""
        return v * self.unit

    def mean_value(self) -> jax.Array:
        """The set's mean in the units of ``x`` (its shift plus the mean of the shifted values)."""
        return self.shift + self.mean * self.unit


def check_x_and_groups(x, g: Groups, name: str) -> None:
    idx = g.index
    if x.ndim < 1 or x.shape[0] != idx.shape[0]:
        raise ValueError(
            f"`{name}` must have a leading batch axis of size B={idx.shape[0]} (the length of "
            f"`group_ids`); got shape {x.shape}."
        )


def _unit_exponent(absmax: jax.Array) -> jax.Array:
    """The exponent ``e`` with ``absmax ≈ 2**e`` (``frexp``), clipped so ``2**±e`` stay normal."""
    info = jnp.finfo(absmax.dtype)
    _, e = jnp.frexp(absmax)
    limit = -int(info.minexp) - 1  # 126 for float32: 2**-126 and 2**126 are both normal
    return jnp.clip(e, -limit, limit)


def _pow2(e: jax.Array, dtype) -> jax.Array:
    """``2**e`` in ``dtype`` for integers ``e`` that :func:`_unit_exponent` clipped (so ``2**e`` is
    normal), exact: the float's bits built directly. (``jnp.ldexp`` goes through ``power``, which
    XLA counts as expensive and so materialises in a kernel of its own instead of recomputing it
    in each kernel that reads it.)"""
    info = jnp.finfo(dtype)
    ints = jnp.dtype(f"int{8 * jnp.dtype(dtype).itemsize}")
    biased = e.astype(ints) + (int(info.maxexp) - 1)
    return jax.lax.bitcast_convert_type(jax.lax.shift_left(biased, ints.type(info.nmant)), dtype)


def segment_stats(x: jax.Array, index: jax.Array, num_groups: int, mask: jax.Array) -> _Stats:
    """Masked statistics of ``x[B, ...]`` per (segment, trailing index), gathered to ``[B, ...]``.

    Non-finite valid values take no part in the statistics (which stay finite); the sets holding
    one are flagged ``nonfinite``, and every caller turns its outputs there into NaN (the rule of
    the module docstring).
    """
    sg = jax.lax.stop_gradient
    # Both masks straight from the inputs and no cleaned copy of x (fewer shared values, fewer
    # kernels: see _block_stats); every use of x is a select on `ok`.
    finite = jnp.isfinite(x)
    own_nonfinite = mask & ~finite
    ok = mask & finite
    neg_inf = jnp.array(-jnp.inf, dtype=x.dtype)
    # One scatter for the maximum (the shift, a member) and minus the minimum (for the scale).
    extremes = jax.ops.segment_max(
        jnp.stack([jnp.where(ok, x, neg_inf), jnp.where(ok, -x, neg_inf)], axis=-1),
        index, num_groups,
    )
    extremes = sg(jnp.where(jnp.isfinite(extremes), extremes, jnp.zeros_like(extremes)))
    hi_g, neg_lo_g = extremes[..., 0], extremes[..., 1]
    e = _unit_exponent(jnp.maximum(jnp.abs(hi_g), jnp.abs(neg_lo_g)))
    unit_g, inv_g = _pow2(e, x.dtype), _pow2(-e, x.dtype)
    shift, unit, inv_unit = hi_g[index], unit_g[index], inv_g[index]
    # Scale first, then shift: both scaled values lie in [-1, 1], their difference cannot overflow.
    shifted = jnp.where(ok, x * inv_unit - shift * inv_unit, jnp.zeros_like(x))
    # One scatter for count, sum and the non-finite count: XLA's CPU scatter is a loop, three
    # columns cost about one.
    cols = jnp.stack([mask.astype(x.dtype), shifted, own_nonfinite.astype(x.dtype)], axis=-1)
    count_g, sum_g, bad_g = jnp.moveaxis(jax.ops.segment_sum(cols, index, num_groups), -1, 0)
    finite_count = count_g - bad_g
    mean_g = _numeric.safe_div(sum_g, finite_count, finite_count > 0)
    mean = mean_g[index]
    centred = jnp.where(ok, shifted - mean, jnp.zeros_like(x))
    sum_sq = jax.ops.segment_sum(centred * centred, index, num_groups)[index]
    # Shifted values are <= 0, so their sum is 0 exactly when every one of them is 0.
    constant = sum_g[index] == 0
    return _Stats(count_g[index], shift, unit, inv_unit, shifted, sum_g[index], mean, sum_sq,
                  constant, bad_g[index], own_nonfinite)


def _block_reduce(ops, inits, combine):
    """One variadic reduction of ``[B / G, G, ...]`` blocks over the ``G`` axis.

    On CPU (jax 0.10) a variadic ``lax.reduce`` whose outputs are all used is an ordinary loop
    fusion that reads its producers in place; a single-operand reduction (``jnp.max``,
    ``jnp.sum``, and a ``lax.reduce`` that XLA narrows to one live output) becomes a library
    kernel whose input is first materialised by a kernel of its own. So every reduction below
    pairs statistics that its callers all read."""
    return jax.lax.reduce(tuple(ops), tuple(inits), combine, (1,))


def _add_pair(p, q):
    return p[0] + q[0], p[1] + q[1]


@jax.custom_jvp
def _block_sum_pair(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Sums of two ``[B / G, G, ...]`` blocks over the ``G`` axis (one fusion); the derivative is
    the sum of the tangents."""
    zero = jnp.zeros((), a.dtype)
    return _block_reduce((a, b), (zero, zero), _add_pair)


@_block_sum_pair.defjvp
def _block_sum_pair_jvp(primals, tangents):
    return _block_sum_pair(*primals), tuple(jnp.sum(t, axis=1) for t in tangents)


def _block_stats(x: jax.Array, group_size: int, mask: jax.Array, sum_sq: bool = True,
                 long_input: bool = False) -> _Stats:
    """:func:`segment_stats` for the contiguous layout: a reshape to ``[B / G, G, ...]`` and
    reductions over the ``G`` axis (no scatter, no gather). The same non-finite rule, the same
    power-of-two set unit, shift and two-pass variance; the sums differ from the scatter's only by
    float rounding (another summation order).

    Three variadic reductions, each one kernel with its producers fused in: the extremes (and the
    count when ``sum_sq`` is not needed); the sum of the shifted values with the finite count; the
    sum of squares of the centred values with the count (``sum_sq=True``). The count moves to
    where it keeps every reduction at two or more live outputs (see :func:`_block_reduce`); it
    is the same exact integer count wherever it is taken. ``sum_sq=False`` leaves
    ``_Stats.sum_sq`` ``None`` (the peer mean and the group mean do not read it).

    ``long_input=True`` (with ``sum_sq``): ``x`` is a long elementwise expression of the caller's
    inputs, such as TCPO's credit. The extremes are then two one-output maxima instead of one
    variadic reduction. On the CPU a variadic reduction evaluates its fused producers inside its
    scalar reduction loop, while a one-output reduction is a library kernel whose operand is first
    written by a vectorised elementwise kernel; for a long producer that is faster, for a short
    one (GRPO's rewards) slower. Measured, interleaved A/B in one process on the 2-core CPU
    (loaded), median wall per call: TCPO in a jitted step at B=4096, K=16, contiguous,
    1.275 -> 1.008 ms; GRPO's normalisation of 65536 rewards, contiguous, 0.595 -> 0.663 ms.
    Results are bit-identical (maxima are exact)."""
    sg = jax.lax.stop_gradient
    dt = x.dtype
    batch = x.shape[0]
    blocks = (batch // group_size, group_size)
    xb = x.reshape(blocks + x.shape[1:])
    mb = mask.reshape(xb.shape)
    # Both masks straight from the inputs, and no cleaned copy of x: each value that two
    # reductions read is materialised by a kernel of its own, so fewer shared values, fewer
    # kernels. Every use of x below is a select on `ok` whose derivative never reads x's value.
    finite = jnp.isfinite(xb)
    own_nonfinite = mb & ~finite
    ok = mb & finite
    neg_inf, zero = jnp.array(-jnp.inf, dtype=dt), jnp.zeros((), dt)
    # No gradient through the extremes (the shift and the unit are stop-gradient) nor the counts.
    extremes = (sg(jnp.where(ok, xb, neg_inf)), sg(jnp.where(ok, -xb, neg_inf)))
    if sum_sq and long_input:
        hi, neg_lo = jnp.max(extremes[0], axis=1), jnp.max(extremes[1], axis=1)
    elif sum_sq:
        hi, neg_lo = _block_reduce(
            extremes, (neg_inf, neg_inf),
            lambda p, q: (jnp.maximum(p[0], q[0]), jnp.maximum(p[1], q[1])))
    else:
        hi, neg_lo, count = _block_reduce(
            extremes + (mb.astype(dt),), (neg_inf, neg_inf, zero),
            lambda p, q: (jnp.maximum(p[0], q[0]), jnp.maximum(p[1], q[1]), p[2] + q[2]))
    hi = sg(jnp.where(jnp.isfinite(hi), hi, jnp.zeros_like(hi)))[:, None]
    neg_lo = sg(jnp.where(jnp.isfinite(neg_lo), neg_lo, jnp.zeros_like(neg_lo)))[:, None]
    e = _unit_exponent(jnp.maximum(jnp.abs(hi), jnp.abs(neg_lo)))
    unit, inv_unit = _pow2(e, dt), _pow2(-e, dt)
    shifted = jnp.where(ok, xb * inv_unit - hi * inv_unit, jnp.zeros_like(xb))
    total, finite_count = (v[:, None] for v in _block_sum_pair(shifted, sg(ok.astype(dt))))
    mean = _numeric.safe_div(total, finite_count, finite_count > 0)
    squares = None
    if sum_sq:
        centred = jnp.where(ok, shifted - mean, jnp.zeros_like(xb))
        squares, count = _block_sum_pair(centred * centred, sg(mb.astype(dt)))
        squares = squares[:, None]
    count = count[:, None]

    def rows(v):  # [B / G, 1, ...] -> [B, ...]
        return None if v is None else jnp.broadcast_to(v, xb.shape).reshape(x.shape)

    return _Stats(rows(count), rows(hi), rows(unit), rows(inv_unit), shifted.reshape(x.shape),
                  rows(total), rows(mean), rows(squares), rows(total == 0),
                  rows(count - finite_count), own_nonfinite.reshape(x.shape))


def group_stats(x: jax.Array, g: Groups, mask: jax.Array, *, sum_sq: bool = True,
                long_input: bool = False) -> _Stats:
    """Statistics of ``x[B, ...]`` per (group, trailing index): the reshape path when ``g``
    promises the contiguous layout, the segment (scatter) path otherwise. ``sum_sq=False``: the
    caller does not read ``sum_sq`` (the reshape path then skips that reduction).
    ``long_input``: see :func:`_block_stats` (a kernel choice; the values do not change)."""
    if g.group_size is not None and x.shape[0] == g.group_size * g.num_groups:
        return _block_stats(x, g.group_size, mask, sum_sq, long_input)
    return segment_stats(x, g.index, g.num_groups, mask)


def prepare(x, g: Groups, mask, name: str = "x"):
    x = _checks.as_float_array(x, name)
    check_x_and_groups(x, g, name)
    mask = _checks.as_mask(mask, "mask", x.shape)
    out_dtype = _numeric.output_dtype(x.dtype)
    xc = x.astype(_numeric.compute_dtype(x.dtype))
    return xc, mask, out_dtype


class AtMean(NamedTuple):
    """Where a member equals its set's mean exactly (:func:`exact_at_mean`)."""

    at_mean: jax.Array  # bool[B, ...]: valid, finite, and equal to the exact mean of its set
    decided: jax.Array  # bool[B, ...]: the set's values lie on the exact grid (see exact_at_mean)
    count: jax.Array  # int[B, ...]: the set's valid finite members


def _limb_plan(num_rows: int, dtype, parts: int = 1) -> tuple[jnp.dtype, int, int]:
    """The integer dtype, bits per limb and number of limbs of :func:`exact_at_mean`.

    A limb holds ``bits`` bits of a value in set units (``|v| < 4``); a value given as ``parts``
    floats (a two-float ``hi + lo``) adds their limbs. The sum of up to ``num_rows`` limbs and
    ``n`` times one limb, and their difference, must fit the integer:
    ``2 · num_rows · 4 · parts · 2**bits < 2**(width - 1)``. The limbs together cover ``parts + 1``
    mantissas plus 8 bits, so every value within ``2**-(mantissa + 8)`` of the set's scale is
    represented exactly, with its low part (float32: values down to ``2**-32`` of the set's
    largest magnitude, and a two-float value's low part down to ``2**-56`` of its high part)."""
    info = jnp.finfo(dtype)
    ints = jnp.dtype(jnp.int64 if jnp.dtype(dtype).itemsize == 8 else jnp.int32)
    width = 8 * ints.itemsize
    bits = max(1, width - 5 - (parts - 1).bit_length() - max(1, int(num_rows - 1).bit_length()))
    cover = (parts + 1) * (int(info.nmant) + 1) + 8
    return ints, bits, -(-cover // bits)


def exact_at_mean(x: jax.Array, g: Groups, mask: jax.Array, inv_unit: jax.Array,
                  lo: jax.Array | None = None) -> AtMean:
    """Whether each valid member of ``x[B, ...]`` equals the mean of its (group, trailing index)
    set *exactly*: ``n · x_i == Σ_j x_j`` in real arithmetic on the values as given, decided with
    integers, so no float residue (the mean of 0.7f, 0.85f, 1.0f misses 0.85f by 2e-8, which is
    real; a rounded mean of values whose exact mean is a member can miss it, which is not).
    ``lo`` (optional, same shape): each value is the two-float ``x + lo`` (``|lo|`` at most half an
    ulp of ``x``), decided as that real sum (HGPO's double-float returns).

    Each value, in set units (``x · inv_unit``, exact: ``inv_unit`` is a power of two), is cut
    into integer limbs of ``bits`` bits (``y = v · 2**bits``, limb ``trunc(y)``, remainder
    ``y - trunc(y)``: every step is exact in floating point). The limbs are summed per set in
    integers (exact), ``D_l = Σ_j m_{j,l} - n · m_{i,l}``, and ``Σ_l D_l 2**(-bits·(l+1)) == 0`` is
    decided from the lowest limb up with exact carries. A set with a value that is not a whole
    number of the last limb's unit (a nonzero remainder, or a value so small its set units
    underflow) is not ``decided``: the caller falls back to its float value. Non-finite values and
    the sets holding one are never at the mean and never decided.
    """
    ints, bits, limbs = _limb_plan(x.shape[0], x.dtype, 1 if lo is None else 2)
    sg = jax.lax.stop_gradient
    x = sg(x)
    ok = mask & jnp.isfinite(x)
    scale = jnp.asarray(2.0 ** bits, x.dtype)
    cols = None
    off = jnp.zeros(x.shape, bool)
    for part in (x,) if lo is None else (x, sg(lo)):
        part = jnp.where(ok, part, jnp.zeros_like(part))
        v = part * inv_unit
        off = off | (ok & (part != 0) & (v == 0))  # underflowed in set units
        limb_cols = []
        for _ in range(limbs):
            y = v * scale
            whole = jnp.trunc(y)
            limb_cols.append(whole.astype(ints))
            v = y - whole
        off = off | (ok & (v != 0))
        cols = limb_cols if cols is None else [a + b for a, b in zip(cols, limb_cols, strict=True)]
    cols += [ok.astype(ints), off.astype(ints), (mask & ~jnp.isfinite(x)).astype(ints)]
    own = jnp.stack(cols, axis=-1)
    sums = jax.ops.segment_sum(own, g.index, g.num_groups)[g.index]
    count, off_count, bad_count = sums[..., limbs], sums[..., limbs + 1], sums[..., limbs + 2]
    low = ints.type((1 << bits) - 1)
    carry = jnp.zeros(x.shape, ints)
    nonzero = jnp.zeros(x.shape, bool)
    for limb in range(limbs - 1, -1, -1):
        t = sums[..., limb] - count * own[..., limb] + carry
        if limb:
            nonzero = nonzero | ((t & low) != 0)
            carry = jax.lax.shift_right_arithmetic(t, ints.type(bits))
        else:
            nonzero = nonzero | (t != 0)
    decided = (off_count == 0) & (bad_count == 0)
    return AtMean(ok & decided & ~nonzero, decided, count)

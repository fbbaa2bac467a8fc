"""The public grouping functions: group normalisation, group mean and count, the peer mean.

These are the functions a user calls with raw ids (or a precomputed :class:`credax.Groups`), and
the bodies the estimators share (:func:`normalize_with_groups`, :func:`peer_mean_with_groups`), so
that a normalisation is applied in exactly one place. :func:`jit_grouped` is the public-entry
decorator of every function that takes ``group_ids``. The statistics themselves are computed in
``_group_stats``; ids become groups in ``_group_ids``.
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _api, _checks, _numeric
from ._group_ids import Groups, groups, host_ids, host_state_ids
from ._group_stats import group_stats, prepare, segment_stats
from ._normalization import MOVED_TO_NORMALIZATION, Normalization, as_normalization


def jit_grouped(*, static_argnames: tuple[str, ...] = (), check=None, anchors: bool = False):
    """:func:`credax._api.jit_public` for functions taking ``group_ids``: the body gets a ``Groups``.

    :func:`groups` makes it inside the compiled program: JAX ids are densified there (one
    dispatch, a program of their own), a precomputed ``Groups`` is checked there. Host ids
    (NumPy, lists) are converted by :func:`groups` on the host first (:func:`host_ids`: 64-bit
    ids exactly), so they share the program of a ``Groups``. ``None`` passes through (an optional
    grouping, as in ``select_top_surprisal``). ``anchors=True``: ``anchor_ids`` too are densified
    exactly on the host (:func:`host_state_ids`). A ``normalization`` argument is checked on the
    host (:func:`as_normalization`: a :class:`Normalization` or ``None``, anything else a
    ``TypeError`` naming it); the body turns ``None`` into its own default (:func:`normalization_or`).
    """
    convert = {"group_ids": host_ids, "normalization": as_normalization}
    if anchors:
        convert["anchor_ids"] = host_state_ids

    def decorate(body):
        parameters = inspect.signature(body).parameters
        declared = {k: v for k, v in convert.items() if k in parameters}
        traced = {"group_ids": groups} if "group_ids" in parameters else None
        return _api.jit_public(static_argnames=static_argnames, convert=declared, check=check,
                               hints=MOVED_TO_NORMALIZATION, traced=traced)(body)

    return decorate


def normalization_or(given: Normalization | None, default: Normalization | None = None
                     ) -> Normalization:
    """The ``normalization`` an estimator body applies: the caller's, else ``default`` (else
    ``Normalization()``). Inside the trace a given value has been unflattened, so it goes through
    :func:`as_normalization` again (fields only; a traced ``eps`` is left to the NaN guard of the
    normalisation)."""
    return as_normalization(given, default=Normalization() if default is None else default)


def normalize_with_groups(x: jax.Array, g: Groups, mask: jax.Array, opts: Normalization, *,
                          long_input: bool = False) -> jax.Array:
    """The body of :func:`group_normalize` on prepared inputs (compute dtype, boolean mask).

    Shared by the other modules (TCPO, MT-GRPO, GiGPO, TRIAGE's whitening) so that options are
    validated (by :class:`Normalization`) and applied in exactly one place. ``long_input``: ``x``
    is a long expression of the caller's inputs (TCPO's credit), a kernel choice of
    :func:`_block_stats` that leaves every value unchanged.
    """
    center, scale_level, ddof = opts.center, opts.scale, opts.ddof
    eps_mode, singleton, leave_one_out = opts.eps_mode, opts.singleton, opts.leave_one_out
    dt = x.dtype
    eps = _checks.scalar(opts.eps, dt, "eps")
    # A traced eps is not checked before tracing; a negative, NaN or infinite one would give
    # finite garbage (den <= 0 is read as a zero spread): NaN at every scaled output instead.
    bad_eps = ~((eps >= 0) & jnp.isfinite(eps))

    st = group_stats(x, g, mask, sum_sq=scale_level == "group", long_input=long_input)
    singleton_set = (st.count <= 1) | (st.count - ddof <= 0)
    # Every quantity below is in set units (x / st.unit, see _Stats); ratios need no conversion.
    centred = st.shifted - st.mean
    if leave_one_out:
        # x_i - mean_{j != i} x_j = n / (n - 1) * (x_i - mean); n >= 2 off the singleton branch.
        centred = centred * _numeric.safe_div(st.count, st.count - 1, st.count > 1)
    if center:
        num = centred
    else:
        # Select, not just mask the output: garbage at a padded entry would otherwise reach the
        # shared std through the gradient of num / den (0 * NaN in the backward pass).
        num = jnp.where(mask & ~st.own_nonfinite, x, jnp.zeros_like(x)) * st.inv_unit

    # A non-finite valid value makes NaN of exactly the outputs whose formula includes it.
    bad = st.own_nonfinite | st.nonfinite if (center or scale_level == "group") else st.own_nonfinite
    if scale_level == "none":
        out = st.value(num)
    else:
        if scale_level == "group":
            sum_sq, count, constant = st.sum_sq, st.count, st.constant
            ratio = jnp.ones_like(x)  # set units of the std per set unit of num
            inv = st.inv_unit
        else:  # "batch": one set per trailing index (TRL's scale_rewards="batch")
            bst = segment_stats(x, jnp.zeros_like(g.index), 1, mask)
            sum_sq, count, constant = bst.sum_sq, bst.count, bst.constant
            ratio = bst.unit * st.inv_unit  # >= 1; inf only when num is negligible anyway
            inv = st.inv_unit
            bad = bad | bst.nonfinite
        bad = bad | bad_eps
        dof = count - ddof
        var = _numeric.safe_div(sum_sq, dof, dof > 0)
        if eps_mode == "add":
            den = _numeric.safe_sqrt(var) * ratio + eps * inv
        else:
            den = _numeric.safe_sqrt(var * ratio * ratio + eps * inv * inv)
        # Zero-spread sets are never divided: centred they are exactly 0 already, and uncentred
        # (center=False) dividing a constant by eps would blow it up by 1/eps.
        out = _numeric.safe_div(num, den, (den > 0) & ~constant)
        out = jnp.where(constant, st.value(num), out)

    if singleton == "zero":
        single = jnp.zeros_like(x)
    elif singleton == "raw":
        single = x
    else:  # deprecated "center": the centred, unscaled value (0 for a set of one)
        single = st.value(centred)
    out = jnp.where(singleton_set, single, out)
    out = jnp.where(bad, jnp.full_like(out, jnp.nan), out)
    return jnp.where(mask, out, jnp.zeros_like(out))


@jit_grouped()
def group_normalize(
    x: Float[Array, "B *rest"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, "B *rest"] | None = None,
    *,
    normalization: Normalization | None = None,
) -> Float[Array, "B *rest"]:
    """Normalise ``x`` within each group (per group and trailing index).

    For the peer set ``P`` of an entry (valid entries of the same group at the same trailing
    index), with ``n = |P|``, mean ``μ`` and ``σ = sqrt(Σ (x - μ)² / (n - ddof))``, and the
    fields of ``normalization`` (a :class:`Normalization`)::

        scale="group"            (x - μ) / (σ + eps)          eps_mode="add"  (verl, TRL)
                                 (x - μ) / sqrt(σ² + eps)     eps_mode="sqrt"
        scale="none"             x - μ                        (Dr. GRPO)
        leave_one_out=True       μ is the mean of the *other* entries: x - μ_{-i} = n/(n-1)(x - μ)
        scale="batch"            (x - μ) / (σ_batch + eps)    σ over every valid entry of the batch
                                                              at that trailing index (TRL "batch")
        center=False             x / (σ + eps), or x unchanged with scale="none" (deprecated)

    Degenerate sets, all defined: a set whose valid values are all identical (exact comparison)
    gives exactly ``0`` when centred, whatever ``eps`` (zero-spread sets are never divided, so
    uncentred they keep ``x``); a singleton set (``n == 1`` or ``n - ddof <= 0``) gives ``0``
    (``singleton="zero"``) or ``x`` (``"raw"``, verl's mean 0 / std 1 convention); masked entries
    are ``0`` and do not count.

    Args:
      x: ``float[B, ...]`` values (rewards ``[B]``, per-turn credit ``[B, K]``, ...). Integer and
        bool inputs are computed in float32; bfloat16/float16 in float32 and cast back.
      group_ids: ``int[B]`` any integer ids, or a :class:`Groups` from :func:`groups`.
      mask: ``bool`` of ``x.shape``; true = real entry. ``None``: all entries real.
      normalization: the options (centre, scale, ddof, eps, eps mode, singletons, leave-one-out)
        as one :class:`Normalization`, e.g. a preset of ``credax.presets``; ``None`` is
        ``Normalization()``. Its ``eps`` may be traced; the other fields are static.

    Returns:
      Array shaped and typed like ``x`` (float32 for integer input); ``0`` at masked entries.

    Raises:
      TypeError: non-boolean ``mask``, non-integer ``group_ids``, non-numeric ``x``, a
        ``normalization`` that is not a :class:`Normalization`.
      ValueError: shapes disagree.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> r = jnp.array([1.0, 0.0, 0.35, 0.35, 5.0])
      >>> ids = jnp.array([3, 3, -1, -1, 42])   # a pair, a constant pair, a singleton
      >>> credax.group_normalize(r, ids, normalization=credax.Normalization(eps=0.0))
      Array([ 0.70710677, -0.70710677,  0.        ,  0.        ,  0.        ], dtype=float32)

    References:
      Shao et al. 2024 (GRPO, arXiv 2402.03300); Liu et al. 2025 (Dr. GRPO, arXiv 2503.20783).
      Defaults match verl's GRPO (unbiased std, ``+1e-6`` on the std) except singletons, which
      get ``0`` (verl keeps the raw score: ``credax.presets.VERL``).
    """
    xc, mask, out_dtype = prepare(x, group_ids, mask)
    opts = normalization_or(normalization)
    return normalize_with_groups(xc, group_ids, mask, opts).astype(out_dtype)


@jit_grouped()
def group_mean(
    x: Float[Array, "B *rest"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, "B *rest"] | None = None,
) -> Float[Array, "B *rest"]:
    """Mean of each entry's peer set (valid entries of its group at its trailing index).

    ``out[i] = mean_{j in P(i)} x[j]``, including ``i`` itself; ``0`` at masked entries. A
    constant set returns its value exactly.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.group_mean(jnp.array([1.0, 0.0, 4.0]), jnp.array([5, 5, 9]))
      Array([0.5, 0.5, 4. ], dtype=float32)
    """
    xc, mask, out_dtype = prepare(x, group_ids, mask)
    st = group_stats(xc, group_ids, mask, sum_sq=False)
    out = jnp.where(st.nonfinite, jnp.full_like(xc, jnp.nan), st.mean_value())
    out = jnp.where(mask, out, jnp.zeros_like(xc))
    return out.astype(out_dtype)


@jit_grouped()
def group_count(
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, "B *rest"] | None = None,
) -> Int[Array, "B *rest"]:
    """Number of valid entries in each entry's peer set (itself included); ``0`` at masked entries.

    Shape ``[B]`` without a mask, else the mask's shape (``[B, K]`` counts per (group, turn)).

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.group_count(jnp.array([5, 5, 9]))
      Array([2, 2, 1], dtype=int32)
    """
    idx = group_ids.index
    shape = idx.shape if mask is None else jnp.shape(mask)
    if len(shape) < 1 or shape[0] != idx.shape[0]:
        raise ValueError(f"`mask` must have leading axis B={idx.shape[0]}; got shape {shape}.")
    mask = _checks.as_mask(mask, "mask", shape)
    count = jax.ops.segment_sum(mask.astype(jnp.int32), idx, group_ids.num_groups)[idx]
    return jnp.where(mask, count, 0)


class PeerMean(NamedTuple):
    """Leave-one-out mean of the other valid entries of each entry's peer set."""

    mean: jax.Array
    count: jax.Array


@jit_grouped()
def peer_mean(
    x: Float[Array, "B *rest"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, "B *rest"] | None = None,
) -> PeerMean:
    """Mean of the *other* valid entries of each entry's peer set, and how many there are.

    ``mean[i] = mean_{j in P(i), j != i} x[j]`` and ``count[i] = |P(i)| - 1`` at valid entries;
    ``mean = 0`` where ``count == 0`` (no peer) and ``mean = count = 0`` at masked entries.
    This is the hindsight baseline of TCPO and the RLOO baseline.

    Returns:
      ``PeerMean(mean: float like x, count: int32 like x)``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> pm = credax.peer_mean(jnp.array([1.0, 0.0, 0.5, 4.0]), jnp.array([5, 5, 5, 9]))
      >>> pm.mean, pm.count
      (Array([0.25, 0.75, 0.5 , 0.  ], dtype=float32), Array([2, 2, 2, 0], dtype=int32))
    """
    xc, mask, out_dtype = prepare(x, group_ids, mask)
    pm = peer_mean_with_groups(xc, group_ids, mask)
    return PeerMean(pm.mean.astype(out_dtype), pm.count)


def peer_mean_with_groups(x: jax.Array, g: Groups, mask: jax.Array) -> PeerMean:
    """The body of :func:`peer_mean` on prepared inputs (compute dtype, boolean mask)."""
    st = group_stats(x, g, mask, sum_sq=False)
    others = st.count - 1
    has_peer = mask & (others > 0)
    # Sum of the others in the shifted domain: the set's sum minus the entry's own value.
    loo = _numeric.safe_div(st.total - st.shifted, others, has_peer)
    mean = jnp.where(has_peer, st.shift + st.value(loo), jnp.zeros_like(x))
    # The others hold a non-finite value: every non-finite member of the set but this entry.
    others_bad = st.nonfinite & ~(st.own_nonfinite & (st.bad_count <= 1))
    mean = jnp.where(has_peer & others_bad, jnp.full_like(mean, jnp.nan), mean)
    count = jnp.where(mask, others, 0).astype(jnp.int32)
    return PeerMean(mean, count)

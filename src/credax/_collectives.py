"""Mesh axes inside ``jax.shard_map``: varying types, named-axis reductions, the vocabulary-parallel
log-sum-exp.

Inside ``jax.shard_map`` every value has a type that says over which manual mesh axes it varies
(JAX's "varying manual axes"). Three things credax needs from it, written once here:

* a loop's carry must vary over the axes its body makes it vary over (:func:`vary_like`: the
  group-id hashing loop, the fused head's gradient accumulators);
* a batch statistic over rows spread across a named axis is a ``psum`` of the per-shard partial
  sums (:func:`axis_sum`; ``axis_name=None`` is the local sum, bit for bit what the function
  computed before it had an axis);
* the log-sum-exp of logits whose vocabulary is split over a named axis combines a ``pmax`` and a
  ``psum`` of ``[N]`` per-position values (:func:`vocab_parallel_chunk`), never the ``[N, V]``
  logits or the ``[D, V]`` unembedding (Megatron's vocabulary-parallel cross entropy).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

AxisName = str | tuple[str, ...] | None


def check_axis_name(axis_name, name: str = "axis_name") -> None:
    """``TypeError`` unless ``axis_name`` is ``None``, a string or a tuple of strings (a mesh axis
    name, static); ``ValueError`` when it names no axis bound here (the call is not inside a
    ``jax.shard_map`` over it)."""
    if axis_name is None:
        return
    ok = isinstance(axis_name, str) or (
        isinstance(axis_name, tuple) and axis_name and all(isinstance(a, str) for a in axis_name))
    if not ok:
        raise TypeError(f"`{name}` must be a mesh axis name (a string or a tuple of strings) or "
                        f"None; got {axis_name!r}.")
    try:
        jax.lax.axis_size(axis_name)
    except NameError:
        raise ValueError(
            f"`{name}={axis_name!r}` names no mesh axis bound here: it is for calls inside "
            f"`jax.shard_map` over that axis (outside, pass global arrays and no `{name}`)."
        ) from None


def varying_axes(x) -> frozenset:
    """The mesh axes over which ``x`` varies inside ``jax.shard_map`` (empty outside)."""
    aval = jax.typeof(x)
    mat = getattr(aval, "manual_axis_type", None)  # JAX 0.10; `vma` before
    return frozenset(mat.varying if mat is not None else getattr(aval, "vma", ()))


def _ordered(axes) -> tuple:
    return tuple(sorted(axes, key=str))


def vary_like(tree, *refs, exclude: AxisName = None):
    """``tree``'s arrays cast to vary over every mesh axis that any of ``refs``' arrays varies
    over, but ``exclude`` (a no-op outside ``shard_map``): the initial carry of a loop whose body
    mixes them in (``exclude``: axes the body reduces over before the carry sees them)."""
    axes = frozenset().union(*(varying_axes(r) for r in jax.tree_util.tree_leaves(refs)))
    axes = axes - frozenset((exclude,) if isinstance(exclude, str) else exclude or ())
    if not axes:
        return tree

    def cast(x):
        missing = _ordered(axes - varying_axes(x))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return jax.tree_util.tree_map(cast, tree)


def sum_to_like(ct, primal):
    """``ct`` summed (``psum``) over the mesh axes it varies over and ``primal`` does not: the
    cotangent of ``primal`` in a custom VJP, as autodiff's transpose of the implicit broadcast
    gives it (a replicated parameter's gradient is the sum of every shard's)."""
    if ct is None:
        return None
    extra = _ordered(varying_axes(ct) - varying_axes(primal))
    return jax.lax.psum(ct, extra) if extra else ct


def axis_sum(x, axis_name: AxisName, **kwargs):
    """``jnp.sum(x, **kwargs)``, then ``psum`` over ``axis_name`` (``None``: the local sum only)."""
    total = jnp.sum(x, **kwargs)
    return total if axis_name is None else jax.lax.psum(total, axis_name)


def axis_max(x, axis_name: AxisName, **kwargs):
    """``jnp.max(x, **kwargs)``, then ``pmax`` over ``axis_name``."""
    top = jnp.max(x, **kwargs)
    return top if axis_name is None else jax.lax.pmax(top, axis_name)


def axis_min(x, axis_name: AxisName, **kwargs):
    """``jnp.min(x, **kwargs)``, then ``pmin`` over ``axis_name``."""
    low = jnp.min(x, **kwargs)
    return low if axis_name is None else jax.lax.pmin(low, axis_name)


# --------------------------------------------------------------------------------------------
# The vocabulary-parallel log-sum-exp.
# --------------------------------------------------------------------------------------------


class VocabChunk(NamedTuple):
    """One chunk of vocabulary-parallel logits and what is combined across the vocabulary axis.

    ``logits`` and ``here``/``local`` are this device's ``[..., V/n]`` share; every other field is
    ``[...]`` (one value per position), identical on every device of the axis."""

    logits: jax.Array  # [..., Vl] this device's logits, in the compute dtype
    local: jax.Array  # [...] the token's index in this device's shard (0 where not here)
    here: jax.Array  # [...] the token lies in this device's shard
    in_range: jax.Array  # [...] the token lies in [0, V)
    top: jax.Array  # [...] the global max logit (stop_gradient; 0 where not finite)
    log_total: jax.Array  # [...] log Σ_v exp((z_v - top) / T) over the whole vocabulary
    lse: jax.Array  # [...] log Σ_v exp(z_v / T)
    picked: jax.Array  # [...] the taken token's raw logit z[token] (0 out of range)


def vocab_parallel_chunk(h, w, tok, dtype, inv_temp, axis_name) -> VocabChunk:
    """The logits ``h @ w`` of this device's vocabulary shard (``w`` is ``[D, V/n]``, shard ``i``
    holding ids ``[i·V/n, (i+1)·V/n)`` of the axis ``axis_name``), their global log-sum-exp and
    the taken token's logit, combined with one ``pmax`` and two ``psum`` of ``[...]`` values."""
    logits = jnp.einsum("...d,dv->...v", h, w, preferred_element_type=dtype)
    shard = logits.shape[-1]
    size = jax.lax.axis_size(axis_name)
    offset = jax.lax.axis_index(axis_name).astype(tok.dtype) * jnp.asarray(shard, tok.dtype)
    in_range = (tok >= 0) & (tok < shard * size)
    local = tok - offset
    here = (local >= 0) & (local < shard)
    local = jnp.where(here, local, jnp.zeros_like(local))
    z = logits.astype(dtype)
    top = jax.lax.pmax(jax.lax.stop_gradient(jnp.max(z, axis=-1)), axis_name)
    top = jnp.where(jnp.isfinite(top), top, jnp.zeros_like(top))
    scaled = z - top[..., None]
    scaled = scaled if inv_temp is None else scaled * inv_temp
    total = jax.lax.psum(jnp.sum(jnp.exp(scaled), axis=-1), axis_name)
    log_total = jnp.log(total)
    lse = (top if inv_temp is None else top * inv_temp) + log_total
    own = jnp.take_along_axis(z, local[..., None], axis=-1)[..., 0]
    picked = jax.lax.psum(jnp.where(here, own, jnp.zeros_like(own)), axis_name)
    return VocabChunk(logits, local, here, in_range, top, log_total, lse, picked)


def vocab_parallel_logprobs(c: VocabChunk, inv_temp) -> jax.Array:
    """``z[token] / T - lse``; NaN where the token is outside ``[0, V)``."""
    picked = c.picked if inv_temp is None else c.picked * inv_temp
    return jnp.where(c.in_range, picked - c.lse, jnp.full_like(c.lse, jnp.nan))


def vocab_parallel_entropy(c: VocabChunk, inv_temp, axis_name) -> jax.Array:
    """The entropy of ``softmax(z / T)`` over the whole vocabulary, as ``_entropy_values`` writes it
    on the shifted logits (``log S - Σ e^{s - log S} s``), the second sum a ``psum``."""
    z = c.logits
    s = z + (-c.top)[..., None]
    s = s if inv_temp is None else s * inv_temp
    s = jnp.maximum(s, jnp.asarray(-1e30, s.dtype))
    weighted = jax.lax.psum(jnp.sum(jnp.exp(s - c.log_total[..., None]) * s, axis=-1), axis_name)
    h = jnp.maximum(c.log_total - weighted, jnp.zeros_like(c.log_total))
    return jnp.where(c.log_total > -jnp.inf, h, jnp.full_like(h, jnp.nan))  # a row of -inf: NaN


def vocab_parallel_softmax_mean(c: VocabChunk, inv_temp, axis_name) -> jax.Array:
    """``Σ_v softmax(z / T)_v z_v`` over the whole vocabulary (the temperature's gradient)."""
    z = c.logits
    scaled = z if inv_temp is None else z * inv_temp
    p = jnp.exp(scaled - c.lse[..., None])
    return jax.lax.psum(jnp.sum(p * z, axis=-1), axis_name)


def explicit_sharding(x):
    """``(mesh, spec)`` when ``x``'s type carries a sharding over *Explicit* mesh axes
    (``jax.make_mesh``'s default) on at least one dimension, else ``None`` (host values,
    single-device and Auto-axis arrays). Read off the traced type, so it works in a trace too."""
    if not isinstance(x, jax.Array) or isinstance(
            getattr(x, "sharding", None), jax.sharding.SingleDeviceSharding):
        return None
    try:
        sharding = jax.typeof(x).sharding
    except TypeError:  # pragma: no cover - exotic array types
        return None
    mesh = getattr(sharding, "mesh", None)
    spec = tuple(getattr(sharding, "spec", ()) or ())
    if (mesh is None or mesh.empty or jax.sharding.AxisType.Explicit not in mesh.axis_types
            or all(axis is None for axis in spec)):
        return None
    return mesh, spec


def explicit_vocab_split(unembedding):
    """``(mesh, axis)`` where ``unembedding [D, V]`` is sharded over its vocabulary (and not over
    ``D``) on *Explicit* mesh axes (``jax.make_mesh``'s default), else ``None``: the fused head
    then runs vocabulary-parallel inside a ``jax.shard_map`` of its own, so the ``[D, V]``
    unembedding is never gathered (the other inputs, ``[B, T]``-sized and ``hidden``, are
    replicated as before)."""
    found = explicit_sharding(unembedding)
    if found is None:
        return None
    mesh, spec = found
    if len(spec) < 2 or spec[1] is None or spec[0] is not None:
        return None
    axis = spec[1]
    names = (axis,) if isinstance(axis, str) else tuple(axis)
    types = dict(zip(mesh.axis_names, mesh.axis_types, strict=True))
    if any(types.get(n) != jax.sharding.AxisType.Explicit for n in names):
        return None
    return mesh, axis

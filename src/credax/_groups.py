"""The one grouping primitive: statistics per group, and per (group, trailing index).

Every estimator in credax that compares a trajectory with its peers goes through this module:
GRPO, RLOO, GDPO, the hindsight baseline and the per-(prompt, turn) z-score of TCPO, MT-GRPO, and the
episode and anchor groups of GiGPO. Nothing else in the package computes a group statistic.

Assumptions, stated once:

* Groups come from explicit integer ids, never from position or a reshape. Ids may be negative,
  sparse, unsorted, and groups may have any size, including 1.
* ``x`` has shape ``[B, ...]``; statistics are taken over the rows of one group *at the same
  trailing index*. For ``x[B]`` that is per prompt; for ``x[B, K]`` it is per (prompt, turn).
* Only entries whose mask is true count, and only they receive a value; masked entries are ``0``
  whatever they hold (NaN and inf included) — masks select, they never multiply.
* Statistics are computed on values shifted by the group maximum (a member of the set), so a set
  whose valid values are all identical has shifted values exactly ``0``: its centred output is
  exactly ``0`` whatever ``eps`` is and no float residue is ever amplified (the ``std ≈ 1e-7``
  failure of one-pass variances, NVIDIA-NeMo/RL#1518). The variance is a centred two-pass sum of
  squares of the shifted values.

Grouping is computed once (:func:`groups`) and reused: the expensive part is turning arbitrary ids
into dense segment indices, and a training step that computes GRPO, hindsight baselines and a
per-(prompt, turn) z-score should pay for it once. Arbitrary ids are densified by hashing, not by
sorting (XLA's CPU sort is slow): each row finds a *representative* row with the same id through
a few rounds of scatter-min into a hash table; the representative's row number is the segment index.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from . import _api, _checks
from ._api import NON_NEGATIVE

_INT32_MIN, _INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max



# --------------------------------------------------------------------------------------------
# Groups: the reusable grouping.
# --------------------------------------------------------------------------------------------


@jax.tree_util.register_pytree_node_class
class Groups:
    """Dense segment indices for a batch of group ids, computed once and reused.

    Attributes:
      index: ``int32[B]``, the segment of each row, in ``[0, num_groups)``. Rows with equal ids
        share a segment and rows with different ids never do. The numbering itself carries no
        meaning (for hashed ids it is the row number of a representative row).
      num_groups: static Python int, the number of segments allocated. ``B`` when the ids were
        arbitrary (an upper bound that keeps shapes static, so a new batch does not recompile),
        or the ``num_groups`` promised by the caller.
      group_size: static Python int or ``None``. Set by ``groups(ids, layout="contiguous",
        group_size=G)``: rows ``[jG, (j + 1)G)`` form group ``j`` and every group has exactly
        ``G`` rows, so each grouped statistic is a reshape to ``[B / G, G, ...]`` and a reduction
        instead of a scatter. ``index`` is then ``arange(B) // G``, so code that ignores the
        layout computes the same groups.

    A ``Groups`` is a pytree (``index`` is the only leaf, ``num_groups`` and ``group_size`` are
    static), so it passes through ``jit``, ``vmap`` and ``shard_map``, and every function that takes
    ``group_ids`` accepts it in their place.
    """

    __slots__ = ("index", "num_groups", "group_size")

    def __init__(self, index, num_groups, group_size=None):
        self.index = index
        self.num_groups = num_groups
        self.group_size = group_size

    def tree_flatten(self):
        return (self.index,), (self.num_groups, self.group_size)

    @classmethod
    def tree_unflatten(cls, aux, children):
        num_groups, group_size = aux
        return cls(children[0], num_groups, group_size)

    def __repr__(self) -> str:
        layout = "" if self.group_size is None else f", group_size={self.group_size}"
        return f"Groups(index={self.index!r}, num_groups={self.num_groups}{layout})"


def _fmix32(h: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finaliser: a bijection of uint32 with good avalanche."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def _fold_to_uint32(key: jax.Array) -> jax.Array:
    """Hash input for an integer key of any width (64-bit keys fold both halves: no truncation)."""
    if key.dtype.itemsize <= 4:
        return key.astype(jnp.uint32)
    lo = (key & 0xFFFFFFFF).astype(jnp.uint32)
    hi = (key >> 32).astype(jnp.uint32)
    return lo ^ _fmix32(hi ^ jnp.uint32(0x9E3779B9))


def _representatives(keys: tuple[jax.Array, ...], valid: jax.Array | None = None) -> jax.Array:
    """For each row, the lowest-numbered row with the same key tuple: ``int32[N]``.

    Each round hashes the unresolved rows into a table of at least ``2N`` slots and writes the
    smallest row number per slot (scatter-min). A row whose slot winner carries the same key is
    resolved with that winner as representative. All rows of one key hash to the same slot in
    every round and so resolve together, on the same representative; every non-empty slot
    resolves at least its winner's key, so the loop ends (in 2-4 rounds for ordinary batches).
    Equality is checked on the full keys, so hash collisions never merge groups. The winner is
    the smallest unresolved row of its slot, and a key's rows are all unresolved until they
    resolve together, so the representative is always the key's lowest valid row, whatever the
    hash (HGPO's nested history levels rely on it: ``tests/test_hgpo.py``).

    ``valid`` (optional) marks rows that take part; the others are their own representatives, so
    they never join a real group.
    """
    n = keys[0].shape[0]
    rows = jnp.arange(n, dtype=jnp.int32)
    if n == 0:
        return rows
    bits = max(1, int(np.ceil(np.log2(2 * n))))
    size = 1 << bits
    mixed = _fold_to_uint32(keys[0])
    for key in keys[1:]:
        mixed = _fmix32(mixed ^ jnp.uint32(0x27D4EB2F)) ^ _fold_to_uint32(key)

    def same_key(winner):
        eq = jnp.ones((n,), dtype=bool)
        for key in keys:
            eq = eq & (key[winner] == key)
        return eq

    def round_(state):
        seed, rep = state
        unresolved = rep < 0
        slot = (_fmix32(mixed ^ (seed * jnp.uint32(0x9E3779B9))) >> (32 - bits)).astype(jnp.int32)
        slot = jnp.where(unresolved, slot, size)  # resolved rows write to a spare slot
        table = jnp.full((size + 1,), n, dtype=jnp.int32).at[slot].min(rows)
        winner = jnp.minimum(table[slot], n - 1)
        rep = jnp.where(unresolved & same_key(winner), winner, rep)
        return seed + jnp.uint32(1), rep

    init = jnp.full((n,), -1, dtype=jnp.int32)
    if valid is not None:
        init = jnp.where(valid, init, rows)
    _, rep = jax.lax.while_loop(lambda s: jnp.any(s[1] < 0), round_, (jnp.uint32(1), init))
    return rep


_representatives_jit = jax.jit(_representatives)


LAYOUTS = ("any", "contiguous")


def groups(
    group_ids, *, num_groups: int | None = None, layout: str = "any", group_size: int | None = None
) -> Groups:
    """Densify group ids once, for reuse by every grouped function of a training step.

    ``groups(ids)`` accepts any integer ids — negative, sparse, unsorted, any group size — and
    returns a :class:`Groups` with ``num_groups = B``. ``groups(ids, num_groups=G)`` is the fast
    path for ids already dense in ``[0, G)``: they are used as they are, with no hashing.

    64-bit ids are never truncated: under ``jax_enable_x64`` they are hashed at full width; without
    it, a concrete NumPy ``int64`` array whose values do not fit in int32 is densified exactly on
    the host (``np.unique``). Inside ``jit`` with x64 off, JAX has already cast such ids to int32
    before credax sees them — call ``groups`` (or ``validate_turns``) on the raw ids outside
    ``jit``, as a data pipeline does anyway.

    ``groups(ids, layout="contiguous", group_size=G)`` is a promise about the batch layout that
    every trainer already keeps: each prompt's ``G`` rollouts are consecutive rows and every prompt
    has exactly ``G`` of them (rows ``[jG, (j + 1)G)`` are prompt ``j``). Every grouped statistic is
    then a reshape to ``[B / G, G, ...]`` and a reduction over the ``G`` axis, with no hashing and no
    scatter. The promise is checked eagerly for NumPy / list ids and for JAX arrays outside ``jit``
    (one scalar comes back to the host); under ``jit`` it cannot be checked, and a broken promise
    gives the statistics of the wrong rows. Results equal the general path up to float32 rounding
    of the sums (the summation order differs); counts, maxima and masks are identical.

    Args:
      group_ids: ``int[B]`` prompt id of each row, or a ``Groups`` (returned unchanged).
      num_groups: static; a promise that ids are dense in ``[0, num_groups)``. Checked when the
        ids are host values (NumPy, lists); JAX arrays stay on their device unchecked, and under
        ``jit`` an id outside the range is not detected (its row would receive statistics of the
        wrong set), so promise only what your pipeline guarantees.
      layout: static, ``"any"`` (default: arbitrary ids) or ``"contiguous"`` (needs
        ``group_size``; see above).
      group_size: static ``G >= 1`` with ``layout="contiguous"``: rows per prompt; ``B`` must be a
        multiple of ``G``.

    Returns:
      ``Groups(index: int32[B], num_groups: int, group_size: int | None)``.

    Raises:
      TypeError: ``group_ids`` is not an integer array.
      ValueError: ``group_ids`` is not 1-D, breaks the ``num_groups`` promise or the contiguous
        layout (a block of ``G`` rows with two ids, one id in two blocks, ``B`` not a multiple of
        ``G``), or ``layout`` / ``group_size`` are unknown or inconsistent.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> g = credax.groups(jnp.array([7, -3, 7, 10**6]))
      >>> g.num_groups
      4
      >>> bool(g.index[0] == g.index[2]), bool(g.index[0] == g.index[1])
      (True, False)
      >>> c = credax.groups(jnp.array([7, 7, 7, -3, -3, -3]), layout="contiguous", group_size=3)
      >>> c.num_groups, c.group_size, c.index.tolist()
      (2, 3, [0, 0, 0, 1, 1, 1])
    """
    if isinstance(group_ids, Groups):
        return _check_groups(group_ids)
    _checks.reject_torch(group_ids, "group_ids", "groups")
    if isinstance(group_ids, tuple):
        # To JAX a tuple is a pytree of separate arguments, not an array: refuse it by name
        # rather than guess (a tuple of key arrays is what groups_from_keys takes).
        raise TypeError("`group_ids` must be an integer array (NumPy, JAX, or a list of ints) or "
                        f"a credax.Groups; got a tuple of {len(group_ids)} elements. Pass "
                        "`np.asarray(ids)`.")
    _checks.check_option(layout, "layout", LAYOUTS)
    if layout == "contiguous":
        return _contiguous_groups(group_ids, group_size, num_groups)
    if group_size is not None:
        raise ValueError('`group_size` is only used with layout="contiguous"; got layout="any".')
    group_ids = _api.replicate_explicit(group_ids)
    host = _api.concrete_numpy(group_ids)
    if host is not None:
        if host.dtype == object or not np.issubdtype(host.dtype, np.integer):
            raise TypeError(f"`group_ids` must be an integer array; got dtype {host.dtype}.")
        if host.ndim != 1:
            raise ValueError(f"`group_ids` must be 1-D, shape [B]; got shape {host.shape}.")
        if num_groups is not None:
            num_groups = _checks.check_static_int(num_groups, "num_groups", minimum=1)
            if host.size and (host.min() < 0 or host.max() >= num_groups):
                raise ValueError(
                    f"`group_ids` must lie in [0, num_groups={num_groups}) when `num_groups` is "
                    f"given; found values in [{host.min()}, {host.max()}]. Drop `num_groups` to "
                    "group arbitrary ids."
                )
            return Groups(jnp.asarray(host, dtype=jnp.int32), num_groups)
        too_wide = host.dtype.itemsize > 4 and host.size and (
            host.min() < _INT32_MIN or host.max() > _INT32_MAX
        )
        if too_wide and not jax.config.jax_enable_x64:
            # JAX would silently wrap these to int32 and could merge two groups: densify exactly.
            _, inverse = np.unique(host, return_inverse=True)
            return Groups(jnp.asarray(inverse.reshape(-1), dtype=jnp.int32), host.shape[0])
        ids = jnp.asarray(host)
    else:
        ids = _checks.as_int_array(group_ids, "group_ids")
        _checks.check_ndim(ids, "group_ids", 1, "[B]")
        if num_groups is not None:
            num_groups = _checks.check_static_int(num_groups, "num_groups", minimum=1)
            return Groups(ids.astype(jnp.int32), num_groups)
    return Groups(_representatives_jit((ids,)), ids.shape[0])


def _check_groups(g: Groups) -> Groups:
    """A hand-built ``Groups`` must hold what :func:`groups` would: int indices, a static count."""
    n = g.num_groups
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise TypeError(f"`group_ids`: a Groups needs `num_groups` as a Python int (static, it sets "
                        f"a shape); got {n!r}. Build it with `credax.groups(ids)`.")
    index = jnp.asarray(g.index) if not isinstance(g.index, jax.Array) else g.index
    if not jnp.issubdtype(index.dtype, jnp.integer):
        raise TypeError(f"`group_ids`: a Groups needs an integer `index`; got dtype {index.dtype}. "
                        "Build it with `credax.groups(ids)`.")
    if index.ndim != 1:
        raise ValueError(f"`group_ids`: a Groups needs a 1-D `index` of shape [B]; got shape "
                         f"{index.shape}.")
    if n < (1 if index.shape[0] else 0):
        raise ValueError(f"`group_ids`: a Groups needs `num_groups` >= 1; got {n}.")
    if index is g.index and isinstance(n, int):
        return g
    return Groups(index, int(n), g.group_size)


def _contiguous_groups(group_ids, group_size, num_groups) -> Groups:
    """The ``layout="contiguous"`` branch of :func:`groups`: check the promise, build the index."""
    if group_size is None:
        raise ValueError('layout="contiguous" needs `group_size` (the rollouts per prompt).')
    size = _checks.check_static_int(group_size, "group_size", minimum=1)
    host = _api.concrete_numpy(group_ids)
    ids = _checks.as_int_array(group_ids if host is None else host, "group_ids")
    _checks.check_ndim(ids, "group_ids", 1, "[B]")
    batch = ids.shape[0]
    if batch % size:
        raise ValueError(f"`group_ids` has B={batch} rows, not a multiple of group_size={size}: "
                         'layout="contiguous" needs every prompt to have exactly group_size rows.')
    blocks = batch // size
    if num_groups is not None and num_groups != blocks:
        raise ValueError(f"`num_groups`={num_groups} disagrees with B / group_size = {blocks}.")
    if host is not None:
        block = host.reshape(blocks, size)
        mixed = np.flatnonzero(np.any(block != block[:, :1], axis=1))
        if mixed.size:
            j = int(mixed[0])
            raise ValueError(
                f"`group_ids` breaks the contiguous layout: rows {j * size}..{(j + 1) * size - 1} "
                f"(one block of group_size={size}) hold different ids {np.unique(block[j]).tolist()}.")
        if np.unique(block[:, 0]).size != blocks:
            raise ValueError("`group_ids` breaks the contiguous layout: one id fills more than one "
                             f"block of group_size={size} rows (a prompt must be one block).")
    elif not isinstance(ids, jax.core.Tracer):
        if not bool(_contiguous_ok(ids.reshape(blocks, size))):
            raise ValueError("`group_ids` breaks the contiguous layout (a block of group_size="
                             f"{size} rows holds two ids, or one id fills two blocks).")
    index = jnp.arange(batch, dtype=jnp.int32) // size
    return Groups(index, blocks, size)


@jax.jit
def _contiguous_ok(block: jax.Array) -> jax.Array:
    """On-device check of the contiguous layout: one id per block, distinct across blocks."""
    uniform = jnp.all(block == block[:, :1])
    first = block[:, 0]
    if first.shape[0] < 2:
        return uniform
    ordered = jnp.sort(first)
    return uniform & jnp.all(ordered[1:] != ordered[:-1])


def groups_from_keys(*keys: jax.Array, valid: jax.Array | None = None) -> Groups:
    """Groups of rows whose key tuples are equal, e.g. (prompt, anchor state) for GiGPO.

    Shared helper for modules that group by more than one id. Rows with ``valid`` false form
    singleton groups of their own (they never join a real group).
    """
    return Groups(_representatives(tuple(keys), valid), keys[0].shape[0])


def host_state_ids(ids):
    """Anchor / state ids as given, except host 64-bit ids beyond int32 without x64: densified.

    Only equality of ids matters, so ``np.unique``'s inverse (exact on the host) keeps every
    distinction JAX's int32 cast would lose (and a Python list of such ids no longer overflows).
    """
    host = _api.concrete_numpy(ids)
    if host is None or host.dtype == object or not np.issubdtype(host.dtype, np.integer):
        return ids
    if (host.dtype.itemsize > 4 and host.size and not jax.config.jax_enable_x64
            and (host.min() < _INT32_MIN or host.max() > _INT32_MAX)):
        _, inverse = np.unique(host, return_inverse=True)
        return inverse.reshape(host.shape).astype(np.int32)
    return host


def exact_id(value, where: str):
    """A dict key for an id of any hashable kind, equal exactly when the ids are equal by type
    and value: ``1``, ``1.0``, ``True`` and ``"1"`` are four ids (Python's ``==`` merges the
    first three), NumPy scalars count as the Python values they hold (``np.int64(1)`` is ``1``,
    ``np.str_("a")`` is ``"a"``), tuples compare element by element the same way.

    Raises:
      ValueError: a NaN anywhere in the id (NaN != NaN: each row would be a group of its own, or
        rows sharing one NaN object would merge). ``where`` names it.
      TypeError: an unhashable id.
    """
    if isinstance(value, bool | np.bool_):
        return ("bool", bool(value))
    if isinstance(value, int | np.integer):
        return ("int", int(value))
    if isinstance(value, float | np.floating):
        if value != value:
            raise ValueError(f"{where}: NaN is not a usable id (NaN != NaN).")
        return ("float", float(value))
    if isinstance(value, str):
        return ("str", str(value))
    if isinstance(value, bytes):
        return ("bytes", bytes(value))
    if isinstance(value, tuple):
        return ("tuple", tuple(exact_id(v, f"{where}[{j}]") for j, v in enumerate(value)))
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"{where}: ids must be hashable; got {type(value).__name__} "
                        f"{value!r}.") from None
    return (type(value), value)


def jit_grouped(*, static_argnames: tuple[str, ...] = (), check=None, anchors: bool = False,
                prepare=None):
    """:func:`credax._api.jit_public` for functions taking ``group_ids``: ids → ``Groups`` first.

    The ids are converted by :func:`groups` outside the compiled function, so raw ids and a
    precomputed ``Groups`` hit the same compiled program, and concrete 64-bit ids are checked on
    the host. ``None`` passes through (an optional grouping, as in ``select_top_surprisal``).
    ``anchors=True``: ``anchor_ids`` too are densified exactly on the host (:func:`host_state_ids`).
    """
    convert = {"group_ids": groups}
    if anchors:
        convert["anchor_ids"] = host_state_ids
    return _api.jit_public(static_argnames=static_argnames, convert=convert, check=check,
                           prepare=prepare)


# --------------------------------------------------------------------------------------------
# Normalization: the options of every group normalisation, as one value.
# --------------------------------------------------------------------------------------------

SINGLETON_MODES = ("zero", "raw")
EPS_MODES = ("add", "sqrt")
SCALE_MODES = ("group", "batch", "none")
# The fields of Normalization, also accepted one by one as keywords by the normalising estimators.
NORMALIZE_KEYS = ("center", "scale", "ddof", "eps", "eps_mode", "singleton", "leave_one_out")
_DEPRECATED_SCALE = {True: "group", False: "none"}


def _warn_deprecated(message: str) -> None:
    """A ``DeprecationWarning`` attributed to the first caller outside credax (so it is shown)."""
    frame, level = sys._getframe(1), 2  # level 2 is the frame that called _warn_deprecated
    while frame is not None and frame.f_globals.get("__name__", "").startswith("credax"):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


@jax.tree_util.register_pytree_node_class
class Normalization(Mapping):
    """How a group normalisation centres and scales: one immutable value for every estimator.

    For the peer set ``P`` of an entry (valid entries of the same group at the same trailing
    index), with ``n = |P|``, mean ``μ`` and ``σ = sqrt(Σ (x - μ)² / (n - ddof))``::

        scale="group"   (x - μ) / (σ + eps)          eps_mode="add"  (verl, TRL)
                        (x - μ) / sqrt(σ² + eps)     eps_mode="sqrt"
        scale="batch"   (x - μ) / (σ_batch + eps)    σ over every valid entry of the batch at that
                                                     trailing index (TRL scale_rewards="batch")
        scale="none"    x - μ                        (Dr. GRPO)
        leave_one_out   μ is the mean of the *other* entries: x - μ_{-i} = n/(n-1) (x - μ)  (RLOO)

    A set whose valid values are all identical gives exactly ``0`` whatever ``eps``; a singleton
    set (``n == 1`` or ``n - ddof <= 0``) gives ``0`` (``singleton="zero"``) or ``x``
    (``"raw"``, verl's mean 0 / std 1 convention).

    Every estimator that normalises within groups takes one as ``normalization=`` (and still takes
    the fields one by one as keywords, which override it); the presets of ``credax.presets`` are
    instances. It is a pytree: ``eps`` is its only leaf (it may be traced, so a schedule does not
    recompile), the other fields are static. It is also a read-only mapping of its fields, so
    ``f(..., **credax.presets.VERL)`` passes them as keywords.

    Attributes:
      center: subtract the peer mean. ``False`` is deprecated (see below).
      scale: ``"group"`` (the set's std), ``"batch"`` (the batch std) or ``"none"``.
      ddof: delta degrees of freedom of the std (1 = unbiased, as torch ``std``).
      eps: added to the std (``"add"``) or to the variance (``"sqrt"``); a float or a traced scalar.
      eps_mode: ``"add"`` or ``"sqrt"``.
      singleton: ``"zero"`` or ``"raw"``.
      leave_one_out: centre on the mean of the other entries.

    Deprecated spellings (each warns with a ``DeprecationWarning`` naming the replacement, and
    still computes what it did): ``scale=True`` is ``"group"``, ``scale=False`` is ``"none"``;
    ``singleton="center"`` (equal to ``"zero"`` for ``ddof <= 1``, the centred unscaled value for
    larger ``ddof``); ``center=False`` (no estimator or preset uses it).

    Raises:
      ValueError: an unknown ``scale``, ``eps_mode`` or ``singleton``; a negative ``ddof``; a
        concrete ``eps`` that is negative or not finite.
      TypeError: ``center`` / ``leave_one_out`` not bools, ``ddof`` not an int.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> dr_grpo = credax.Normalization(scale="none")
      >>> dr_grpo.scale, dr_grpo.eps, dr_grpo.singleton
      ('none', 1e-06, 'zero')
      >>> r, ids = jnp.array([1.0, 0.0, 0.5, 0.5]), jnp.array([0, 0, 1, 1])
      >>> credax.grpo_advantages(r, ids, normalization=dr_grpo)
      Array([ 0.5, -0.5,  0. ,  0. ], dtype=float32)
      >>> credax.presets.VERL.replace(eps=1e-4).eps
      0.0001
      >>> sorted(credax.presets.TRL)   # a mapping: **credax.presets.TRL passes these keywords
      ['center', 'ddof', 'eps', 'eps_mode', 'leave_one_out', 'scale', 'singleton']
    """

    __slots__ = NORMALIZE_KEYS

    def __init__(
        self,
        *,
        center: bool = True,
        scale: str = "group",
        ddof: int = 1,
        eps: float | Float[Array, ""] = 1e-6,
        eps_mode: str = "add",
        singleton: str = "zero",
        leave_one_out: bool = False,
    ):
        if isinstance(scale, bool | np.bool_):
            replacement = _DEPRECATED_SCALE[bool(scale)]
            _warn_deprecated(f"`scale={bool(scale)}` is deprecated; use `scale={replacement!r}` "
                             "(the same normalisation).")
            scale = replacement
        values = _checked_fields((center, scale, ddof, eps, eps_mode, singleton, leave_one_out))
        if singleton == "center":
            _warn_deprecated("`singleton='center'` is deprecated; use `singleton='zero'` (the same "
                             "result for ddof <= 1: a set of one centred is 0).")
        if not center:
            _warn_deprecated(
                "`center=False` is deprecated (no credax estimator or preset uses it) and will be "
                "removed. Replacement: with scale='none' it returns x unchanged, use "
                "`jnp.where(mask, x, 0)`; an uncentred std division has no replacement."
            )
        for key, value in zip(NORMALIZE_KEYS, values, strict=True):
            object.__setattr__(self, key, value)

    def __reduce__(self):
        # copy, deepcopy and pickle rebuild through the checks (no second deprecation warning);
        # the default protocol would set the slots through the refusing __setattr__.
        return (_rebuild_normalization, (tuple(getattr(self, k) for k in NORMALIZE_KEYS),))

    def __setattr__(self, name, value):
        raise AttributeError(f"Normalization is immutable; use `.replace({name}=...)`.")

    def replace(self, **changes) -> Normalization:
        """A copy with some fields changed (checked, and warned about, as in the constructor)."""
        unknown = set(changes) - set(NORMALIZE_KEYS)
        if unknown:
            raise TypeError(f"Normalization has no field(s) {sorted(unknown)}; fields: "
                            f"{list(NORMALIZE_KEYS)}.")
        return Normalization(**{**dict(self.items()), **changes})

    # A read-only mapping of the fields: **normalization passes them as keywords.
    def __getitem__(self, key):
        if key not in NORMALIZE_KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(NORMALIZE_KEYS)

    def __len__(self) -> int:
        return len(NORMALIZE_KEYS)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in NORMALIZE_KEYS)
        return f"Normalization({fields})"

    # A pytree: eps is the leaf, the rest is static (hashable aux data).
    def tree_flatten(self):
        static = tuple(getattr(self, k) for k in NORMALIZE_KEYS if k != "eps")
        return (self.eps,), static

    @classmethod
    def tree_unflatten(cls, static, children):
        # No check here (and no second warning): under a transformation `eps` may be a tracer or
        # a sentinel. A rebuilt value (tree_map, hand-made aux data) is checked where it is used:
        # every estimator passes its `normalization` through check_normalization first.
        out = object.__new__(cls)
        keys = [k for k in NORMALIZE_KEYS if k != "eps"]
        for key, value in zip(keys, static, strict=True):
            object.__setattr__(out, key, value)
        object.__setattr__(out, "eps", children[0])
        return out


def _check_eps(eps) -> None:
    """``eps`` is a non-negative finite real scalar (concrete) or a traced real scalar."""
    if isinstance(eps, jax.core.Tracer):
        kind = eps.dtype
    elif type(eps) is float or type(eps) is int:
        kind = None
    elif isinstance(eps, np.ndarray | np.generic | jax.Array) and not isinstance(eps, np.bool_):
        kind = eps.dtype
        real = jnp.issubdtype(kind, jnp.floating) or jnp.issubdtype(kind, jnp.integer)
        if real and np.ndim(eps) != 0:
            raise ValueError(f"`eps` must be a scalar; got shape {np.shape(eps)}.")
    else:
        kind = False
    if kind is False or (kind is not None and not (jnp.issubdtype(kind, jnp.floating)
                                                  or jnp.issubdtype(kind, jnp.integer))):
        shape = f" of shape {np.shape(eps)}" if hasattr(eps, "shape") else ""
        raise TypeError(f"`eps` must be a real number (a Python float or a 0-d real array, which "
                        f"may be traced); got {type(eps).__name__}{shape} {eps!r}.")
    _api.check_concrete(eps, "eps", *NON_NEGATIVE)  # a traced eps is checked by no one


def _checked_fields(values: tuple) -> tuple:
    """The fields of a Normalization, checked as the constructor checks them (no warnings:
    deprecated spellings are allowed here and warned about by the constructor only)."""
    center, scale, ddof, eps, eps_mode, singleton, leave_one_out = values
    _checks.check_option(scale, "scale", SCALE_MODES)
    _checks.check_option(eps_mode, "eps_mode", EPS_MODES)
    _checks.check_option(singleton, "singleton", (*SINGLETON_MODES, "center"))
    if not isinstance(center, bool) or not isinstance(leave_one_out, bool):
        raise TypeError("`center` and `leave_one_out` must be Python bools (they change the "
                        f"program); got center={center!r}, leave_one_out={leave_one_out!r}.")
    ddof = _checks.check_static_int(ddof, "ddof", minimum=0)
    _check_eps(eps)
    return center, scale, ddof, eps, eps_mode, singleton, leave_one_out


def _rebuild_normalization(values: tuple) -> Normalization:
    """A Normalization from its field values, checked (copy, deepcopy and pickle use it)."""
    out = object.__new__(Normalization)
    for key, value in zip(NORMALIZE_KEYS, _checked_fields(values), strict=True):
        object.__setattr__(out, key, value)
    return out


def check_normalization(norm: Normalization) -> Normalization:
    """``norm`` checked as the constructor checks it, for a value that may not come from the
    constructor: ``tree_unflatten`` (``tree_map``, a transformation's output) sets the fields
    without any check, since JAX unflattens with tracers and sentinels. Every estimator checks
    its ``normalization`` here before use; a traced ``eps`` is left as it is."""
    _checked_fields(tuple(getattr(norm, k) for k in NORMALIZE_KEYS))
    return norm


_DEFAULT_FIELDS = dict(Normalization().items())


def as_normalization(value, name: str = "normalization") -> Normalization:
    """``value`` as a checked :class:`Normalization`: ``None`` is the default, a mapping is its
    fields."""
    if value is None:
        return Normalization()
    if isinstance(value, Normalization):
        return check_normalization(value)
    if isinstance(value, Mapping):
        return Normalization(**value)
    raise TypeError(f"`{name}` must be a credax.Normalization (or a mapping of its fields); got "
                    f"{type(value).__name__}.")


def _resolve(given, changes: dict) -> Normalization:
    """``given`` (``None``, a Normalization or a mapping) with the keywords ``changes`` applied,
    checked: the keywords override the object's fields before anything is checked, so a keyword
    may repair a field (as a cached call does)."""
    if not changes:
        return as_normalization(given)
    unknown = set(changes) - set(NORMALIZE_KEYS)
    if unknown:
        raise TypeError(f"Normalization has no field(s) {sorted(unknown)}; fields: "
                        f"{list(NORMALIZE_KEYS)}.")
    if given is None:
        return Normalization(**changes)
    if isinstance(given, Normalization):
        return Normalization(**{**{k: getattr(given, k) for k in NORMALIZE_KEYS}, **changes})
    if isinstance(given, Mapping):
        return Normalization(**{**given, **changes})
    return as_normalization(given)  # raises the TypeError naming `normalization`


def resolve_normalization(keys: tuple[str, ...] = NORMALIZE_KEYS):
    """A ``prepare`` hook for :func:`jit_grouped`: fold the keywords ``keys`` into ``normalization``.

    Runs on the host before tracing: explicitly passed keywords override the fields of
    ``normalization`` (default :class:`Normalization`), deprecated spellings warn on every call,
    and the compiled body receives one ``Normalization``. The keywords themselves are dropped from
    the call (the body sees its unused defaults, which its annotations accept), so raw keywords
    and an equal ``Normalization`` share a compiled program.
    """

    def prepare(arguments, passed) -> None:
        given = arguments.get("normalization")
        changes = {k: arguments[k] for k in keys if k in passed}
        key = _resolved_key(given, changes)
        resolved = _RESOLVED.get(key) if key is not None else None
        if resolved is None:
            resolved = _resolve(given, changes)
            if key is not None:
                if len(_RESOLVED) >= 256:  # a schedule of eps values must not grow it forever
                    _RESOLVED.clear()
                _RESOLVED[key] = resolved
        arguments["normalization"] = resolved
        for k in keys:
            arguments.pop(k, None)

    return prepare


# Resolved options of earlier calls, so that an ordinary call does not build and re-validate a
# Normalization (two constructions, ~30 µs) every time. Only plain Python option values are
# keys, and no deprecated spelling (those warn on every call, so they are always rebuilt).
_RESOLVED: dict[tuple, Normalization] = {}
_OPTION_TYPES = (bool, int, float, str)


def _resolved_key(given, changes) -> tuple | None:
    """The cache key of (``normalization``, keywords): every field's type and exact value."""
    if given is None:
        fields = dict(_DEFAULT_FIELDS)
    elif type(given) is Normalization:
        fields = {k: getattr(given, k) for k in NORMALIZE_KEYS}
    else:
        return None
    fields.update(changes)
    if fields.keys() != _DEFAULT_FIELDS.keys():
        return None  # an unknown field: Normalization.replace raises
    key = []
    for k in NORMALIZE_KEYS:
        v = fields[k]
        if type(v) not in _OPTION_TYPES:
            return None
        key.append((type(v), v.hex() if type(v) is float else v))  # hex: -0.0 is not 0.0
    if type(fields["scale"]) is not str or fields["singleton"] == "center" or fields["center"] is not True:
        return None  # deprecated spellings warn on every call
    return tuple(key)


# --------------------------------------------------------------------------------------------
# Segment statistics.
# --------------------------------------------------------------------------------------------


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
    if idx.ndim != 1:
        raise ValueError(f"`group_ids` must be 1-D, shape [B]; got shape {idx.shape}.")
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
    mean_g = _checks.safe_div(sum_g, finite_count, finite_count > 0)
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
    mean = _checks.safe_div(total, finite_count, finite_count > 0)
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
    out_dtype = _checks.output_dtype(x.dtype)
    xc = x.astype(_checks.compute_dtype(x.dtype))
    return xc, mask, out_dtype


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
        centred = centred * _checks.safe_div(st.count, st.count - 1, st.count > 1)
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
        var = _checks.safe_div(sum_sq, dof, dof > 0)
        if eps_mode == "add":
            den = _checks.safe_sqrt(var) * ratio + eps * inv
        else:
            den = _checks.safe_sqrt(var * ratio * ratio + eps * inv * inv)
        # Zero-spread sets are never divided: centred they are exactly 0 already, and uncentred
        # (center=False) dividing a constant by eps would blow it up by 1/eps.
        out = _checks.safe_div(num, den, (den > 0) & ~constant)
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


@jit_grouped(prepare=resolve_normalization())
def group_normalize(
    x: Float[Array, "B *rest"],
    group_ids: Int[Array, " B"] | Groups,
    mask: Bool[Array, "B *rest"] | None = None,
    *,
    normalization: Normalization | None = None,
    center: bool = True,
    scale: str = "group",
    ddof: int = 1,
    eps: float | Float[Array, ""] = 1e-6,
    eps_mode: str = "add",
    singleton: str = "zero",
    leave_one_out: bool = False,
) -> Float[Array, "B *rest"]:
    """Normalise ``x`` within each group (per group and trailing index).

    For the peer set ``P`` of an entry (valid entries of the same group at the same trailing
    index), with ``n = |P|``, mean ``μ`` and ``σ = sqrt(Σ (x - μ)² / (n - ddof))``::

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
      normalization: all the options below as one :class:`Normalization` (e.g. a preset);
        ``None`` is ``Normalization()``. A keyword given explicitly overrides its field.
      center: subtract the peer mean (static). ``False`` is deprecated.
      scale: ``"group"`` divide by the set's std, ``"batch"`` by the batch std, ``"none"`` do not
        divide (static). ``True``/``False`` are deprecated spellings of ``"group"``/``"none"``.
      ddof: delta degrees of freedom of the std (1 = unbiased, as torch ``std``) (static).
      eps: added to the std (``"add"``) or to the variance (``"sqrt"``); may be a traced scalar.
      eps_mode: ``"add"`` or ``"sqrt"`` (static).
      singleton: ``"zero"`` or ``"raw"`` (static); ``"center"`` is deprecated.
      leave_one_out: centre on the mean of the other entries (RLOO) (static).

    Returns:
      Array shaped and typed like ``x`` (float32 for integer input); ``0`` at masked entries.

    Raises:
      TypeError: non-boolean ``mask``, non-integer ``group_ids``, non-numeric ``x``.
      ValueError: shapes disagree, or an option is unknown.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> r = jnp.array([1.0, 0.0, 0.35, 0.35, 5.0])
      >>> ids = jnp.array([3, 3, -1, -1, 42])   # a pair, a constant pair, a singleton
      >>> credax.group_normalize(r, ids, eps=0.0)
      Array([ 0.70710677, -0.70710677,  0.        ,  0.        ,  0.        ], dtype=float32)

    References:
      Shao et al. 2024 (GRPO, arXiv 2402.03300); Liu et al. 2025 (Dr. GRPO, arXiv 2503.20783).
      Defaults match verl's GRPO (unbiased std, ``+1e-6`` on the std) except singletons, which
      get ``0`` (verl keeps the raw score: ``credax.presets.VERL``).
    """
    xc, mask, out_dtype = prepare(x, group_ids, mask)
    return normalize_with_groups(xc, group_ids, mask, normalization).astype(out_dtype)


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
    loo = _checks.safe_div(st.total - st.shifted, others, has_peer)
    mean = jnp.where(has_peer, st.shift + st.value(loo), jnp.zeros_like(x))
    # The others hold a non-finite value: every non-finite member of the set but this entry.
    others_bad = st.nonfinite & ~(st.own_nonfinite & (st.bad_count <= 1))
    mean = jnp.where(has_peer & others_bad, jnp.full_like(mean, jnp.nan), mean)
    count = jnp.where(mask, others, 0).astype(jnp.int32)
    return PeerMean(mean, count)

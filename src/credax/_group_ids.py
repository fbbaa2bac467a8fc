"""Group ids: turning arbitrary ids into the dense segment indices every grouped statistic uses.

Groups come from explicit integer ids, never from position or a reshape. Ids may be negative,
sparse, unsorted, and groups may have any size, including 1.

Grouping is computed once (:func:`groups`) and reused: the expensive part is turning arbitrary ids
into dense segment indices, and a training step that computes GRPO, hindsight baselines and a
per-(prompt, turn) z-score should pay for it once. Arbitrary ids are densified by hashing, not by
sorting (XLA's CPU sort is slow): each row finds a *representative* row with the same id through
a few rounds of scatter-min into a hash table; the representative's row number is the segment index.

Also here: :func:`groups_from_keys` (rows grouped by a tuple of keys, GiGPO's (prompt, anchor)),
:func:`host_state_ids` (64-bit state ids densified exactly on the host) and :func:`exact_id`
(the one rule for ids of any Python type, used by the rollout readers and ``credax.verl``).
The statistics over these groups are in ``_group_stats``; the public grouping functions in
``_grouping``; the options of a normalisation in ``_normalization``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import _api, _checks
from ._collectives import vary_like

_INT32_MIN, _INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max


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
    ``group_ids`` accepts it in their place. Built by hand from a host ``index`` (NumPy, a list),
    an index outside ``[0, num_groups)`` is a ``ValueError`` (as ``groups(ids, num_groups=)``);
    a JAX ``index`` is not read back from its device to check.
    """

    __slots__ = ("index", "num_groups", "group_size")

    def __init__(self, index, num_groups, group_size=None):
        _check_host_index(index, num_groups)
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



def _check_host_index(index, num_groups) -> None:
    """A host ``index`` (NumPy, a list) of integers must lie in ``[0, num_groups)``, the rule of
    ``groups(ids, num_groups=)``: outside it a row drops out of every statistic (segment sums
    ignore it) without a word. JAX indices (traced or on a device) are not read back, as there;
    anything else (a pytree placeholder) is left to the checks that use it."""
    if isinstance(index, jax.Array) or isinstance(num_groups, bool) or not isinstance(
            num_groups, int | np.integer):
        return
    host = _api.concrete_numpy(index)
    if host is None or host.ndim != 1 or not host.size or not np.issubdtype(host.dtype, np.integer):
        return
    if host.min() < 0 or host.max() >= num_groups:
        raise ValueError(
            f"`group_ids`: a Groups' `index` must lie in [0, num_groups={num_groups}); found "
            f"values in [{host.min()}, {host.max()}]. Build it with `credax.groups(ids)` (any ids) "
            "or `credax.groups(ids, num_groups=G)` (ids dense in [0, G)).")


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
    # Inside jax.shard_map the keys vary over the mesh axes, and so does everything a round
    # computes from them: the loop's carry must vary over the same axes from the start, or JAX
    # refuses the loop ("carry input and carry output must have equal types").
    state = vary_like((jnp.uint32(1), init), mixed)
    _, rep = jax.lax.while_loop(lambda s: jnp.any(s[1] < 0), round_, state)
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
    check_not_tuple(group_ids)
    _checks.check_option(layout, "layout", LAYOUTS)
    if layout == "contiguous":
        return _contiguous_groups(group_ids, group_size, num_groups)
    if group_size is not None:
        raise ValueError('`group_size` is only used with layout="contiguous"; got layout="any".')
    group_ids = _api.replicate_explicit(group_ids)
    host = _api.concrete_numpy(group_ids)
    ids = _checks.as_array(group_ids, "group_ids") if host is None else host
    _checks.check_int(ids, "group_ids")
    _checks.check_ndim(ids, "group_ids", 1, "[B]")
    if num_groups is not None:
        num_groups = _checks.check_static_int(num_groups, "num_groups", minimum=1)
    if host is not None:
        if num_groups is not None:
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
        # Otherwise `ids` (the host array) is handed to the compiled hashing as it is: jit moves
        # it (no Python-side copy).
    elif num_groups is not None:
        return Groups(ids.astype(jnp.int32), num_groups)
    return Groups(_representatives_jit((ids,)), ids.shape[0])



# The compiled program behind groups(ids) for arbitrary ids, as a public entry keeps its `jitted`:
# what credax.bench's sweep measures the compilation of (no reach into this private module).
groups.jitted = _representatives_jit


def check_not_tuple(group_ids) -> None:
    """To JAX a tuple is a pytree of separate arguments, not an array: refused by name rather than
    guessed (a tuple of key arrays is what ``groups_from_keys`` takes)."""
    if isinstance(group_ids, tuple):
        raise TypeError("`group_ids` must be an integer array (NumPy, JAX, or a list of ints) or "
                        f"a credax.Groups; got a tuple of {len(group_ids)} elements. Pass "
                        "`np.asarray(ids)`.")


def host_ids(group_ids):
    """``group_ids`` as a public entry hands host ids to its compiled program: a :class:`Groups`.

    Host ids (NumPy, lists) are converted by :func:`groups` (64-bit ids exactly, on the host) and
    a ``Groups`` is checked; JAX ids are returned as given, for the program to densify with
    :func:`groups` in the same trace (no second dispatch).
    """
    if isinstance(group_ids, jax.Array):
        return group_ids
    return groups(group_ids)


def _check_groups(g: Groups) -> Groups:
    """A hand-built ``Groups`` must hold what :func:`groups` would: int indices, a static count,
    and (host indices: NumPy, lists) every index in ``[0, num_groups)``, as ``groups(ids,
    num_groups=)`` checks; a JAX index stays on its device unchecked, as there."""
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
    _check_host_index(g.index, n)
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

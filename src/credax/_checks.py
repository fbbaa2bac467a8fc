"""The argument checks of every module: one vocabulary for trace time and for the eager checks.

The dtype, shape and mask rules (:func:`check_real`, :func:`check_int`, :func:`check_mask`,
:func:`check_ndim`, :func:`check_shape`) read only ``.dtype`` and ``.shape``, so one function
serves a traced array inside a compiled body and a concrete NumPy array in the eager
``validate_*`` functions: a rule is written once and says the same thing on both paths. At trace
time they are free under ``jit`` (they run once per compilation). Value checks need concrete
arrays; they are the host section at the end (:func:`host_array`, :func:`check_prefix_mask`,
...), used by ``_validate`` (``validate_turns``, ...), ``_roles`` (``validate_roles``) and the
host-side bridges (``credax.tunix``). Every check raises ``ValueError`` or ``TypeError`` naming
the argument, what was expected and what was found (optax's ``utils.py`` style).
"""

from __future__ import annotations

import math
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Annotated, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import _numeric


def reject_torch(x, name: str, function: str | None = None) -> None:
    """``TypeError`` pointing to ``credax.torch`` when ``x`` is a torch tensor.

    JAX's own error for a tensor ("error interpreting argument ... as an abstract array") does not
    say what to do, and a CPU tensor that slipped through ``np.asarray`` would hide a device copy.
    torch is looked up in ``sys.modules`` only: if it was never imported no tensor can exist, and
    credax never imports it.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        call = f"credax.torch.{function}" if function else "the same function in credax.torch"
        raise TypeError(
            f"`{name}` is a torch.Tensor; credax's functions take JAX or NumPy arrays. Use "
            f"{call} (`import credax.torch`): it takes and returns torch tensors on their device, "
            "through DLPack without a copy."
        )


# --------------------------------------------------------------------------------------------
# The host rules: the float32/int32 range rule and the concrete-value reader, each written once
# (the table of what is checked where: docs/guides/conventions.md).
# --------------------------------------------------------------------------------------------

F32_MAX = float(np.finfo(np.float32).max)  # the float32 limit: every module reads it from here
I32 = np.iinfo(np.int32)  # the int32 limits, likewise
# NumPy kinds that are no real number: refused by name before JAX's generic error.
_NOT_REAL = {"U": "a string", "S": "a bytes", "O": "an object", "c": "a complex",
             "M": "a datetime", "m": "a timedelta"}


def real_dtype(dtype) -> bool:
    """Floating (bfloat16 and float16 included) or integer; bool is neither."""
    return bool(jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer))


def concrete_float(value) -> float | None:
    """``value`` as a Python float when it is a concrete real scalar, else ``None``.

    Concrete real scalars: Python ints and floats and their subclasses (not bools), NumPy scalars
    and 0-d arrays of every real dtype (bfloat16 and float16 included), and 0-d committed JAX
    arrays (read back: one scalar, a hyperparameter, not data). ``None`` for tracers, non-scalars,
    bools, strings, ``None`` and an int beyond a double.
    """
    if isinstance(value, float | int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return None
    if isinstance(value, jax.Array):  # tracers included
        if isinstance(value, jax.core.Tracer) or value.ndim or not value.is_fully_addressable:
            return None
    elif not isinstance(value, np.ndarray | np.generic):
        return None
    if np.ndim(value) or not real_dtype(value.dtype):
        return None
    return float(np.asarray(value))


def check_host_range(x, name: str) -> None:
    """The range rule: ``ValueError`` for a host value JAX would narrow silently (x64 off).

    JAX makes host floats float32 and host ints 32-bit: a finite ``1e39`` becomes ``inf`` and a
    turn index ``2**32`` becomes ``0`` (a real turn). Python numbers (subclasses too), NumPy
    arrays and scalars of every dtype, and lists or tuples of them (JAX arrays inside are left
    where they are) are checked anywhere in the value, masked entries included; NaN and ±inf are
    not narrowed and follow each argument's own rule. JAX arrays were narrowed when they were
    made; traced values cannot be seen.
    """
    if jax.config.jax_enable_x64:
        return
    if type(x) is float:  # the common case: one comparison
        if abs(x) <= F32_MAX or not math.isfinite(x):
            return
        arr = np.asarray(x)
    elif isinstance(x, np.ndarray | np.generic):
        arr = np.asarray(x)
    elif type(x) in (list, tuple):
        arr = host_sequence(x, name)
        if arr is None:
            return
    elif isinstance(x, bool) or not isinstance(x, float | int):
        return
    elif isinstance(x, int):
        if not I32.min <= x <= I32.max:
            raise ValueError(f"`{name}` = {x} is outside int32: without `jax_enable_x64` JAX cannot "
                             "hold it (nor a shape that large).")
        return
    else:
        arr = np.asarray(float(x))
    if arr.size == 0 or arr.dtype.itemsize <= 4:
        return
    kind = arr.dtype.kind
    if kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            bad = np.isfinite(arr) & ~(np.abs(arr) <= F32_MAX)
        if bad.any():
            flat = int(np.flatnonzero(bad)[0])
            what = (f"= {float(arr):g} is" if arr.ndim == 0
                    else f"holds {float(arr.flat[flat]):g}{_at(arr, flat)}:")
            raise ValueError(
                f"`{name}` {what} finite in float64 but beyond float32's range (±{F32_MAX:.4g}); "
                "without `jax_enable_x64` JAX computes in float32 and would make it inf. Rescale "
                "the values, or enable x64.")
    elif kind in "iu" and (arr.min() < I32.min or arr.max() > I32.max):
        flat = int(np.flatnonzero((arr < I32.min) | (arr > I32.max))[0])
        raise ValueError(
            f"`{name}` holds {int(arr.flat[flat])}{_at(arr, flat)}, outside int32: without "
            "`jax_enable_x64` JAX would wrap it to 32 bits silently. Ids belong in `group_ids` / "
            "`anchor_ids` (densified exactly); other integer inputs (turn indices, role codes, "
            "token ids) must fit in int32.")


def host_sequence(x, name: str) -> np.ndarray | None:
    """A list or tuple as one NumPy array, for the checks (0-d JAX arrays in it read as 0, never
    pulled back; ``None`` when ragged or holding larger JAX arrays). A bool beside other numbers
    is refused by name (``[0, True]`` is not ``[0, 1]``)."""
    leaves, treedef = jax.tree_util.tree_flatten(x)
    kinds = {type(v) for v in leaves}
    if kinds & {bool, np.bool_} and not kinds <= {bool, np.bool_}:
        raise TypeError(f"`{name}` mixes bools with numbers ({_first_bool(leaves)}); a bool is not "
                        "the number 1 here. Pass numbers only (or a boolean mask of bools only).")
    if any(isinstance(v, jax.Array) and v.ndim for v in leaves):
        return None
    try:
        held = [0 if isinstance(v, jax.Array) else v for v in leaves]
        return np.asarray(jax.tree_util.tree_unflatten(treedef, held))
    except (TypeError, ValueError, OverflowError):
        return None  # ragged or exotic: left to the trace-time type checks


def _first_bool(leaves) -> str:
    i = next(i for i, v in enumerate(leaves) if isinstance(v, bool | np.bool_))
    return f"{leaves[i]!r} at position {i}"


def host_value(x, name: str, exact: bool = False):
    """The one host step for an argument's value (the public entry's normalisation): NumPy
    arrays and scalars in native byte order; string, bytes, object and complex NumPy values (and
    lists of them) refused by name, as are bools mixed with numbers; the range rule
    (:func:`check_host_range`) unless ``exact`` (ids, densified exactly on the host). Python
    number subclasses become the number they hold. Anything else (JAX arrays, tracers, options
    values) is returned as it is."""
    t = type(x)
    if t is float or t is int:
        check_host_range(x, name)
        return x
    if t is list or t is tuple:
        arr = host_sequence(x, name)
        if arr is not None:
            _refuse_kind(arr.dtype, name)
            if not exact:
                check_host_range(arr, name)
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        _refuse_kind(x.dtype, name)
        if not x.dtype.isnative:  # '>f4' read as '<f4' would be byte-swapped garbage
            x = x.astype(x.dtype.newbyteorder("="))
        if not exact:
            check_host_range(x, name)
        return x
    if isinstance(x, (float, int)) and not isinstance(x, bool):
        x = float(x) if isinstance(x, float) else int(x)
        check_host_range(x, name)
    return x


def _refuse_kind(dtype, name: str) -> None:
    if dtype.kind in _NOT_REAL:
        raise TypeError(f"`{name}` is {_NOT_REAL[dtype.kind]} array (dtype {dtype}); credax takes "
                        "real numbers (float, int) or bools.")


class Rule(NamedTuple):
    """A hyperparameter's value rule: ``ok(value)`` on its concrete value (a double), and the
    requirement the ``ValueError`` states. NaN fails every comparison."""

    ok: Callable[[float], bool]
    requirement: str


FINITE = Rule(math.isfinite, "be finite")
NON_NEGATIVE = Rule(lambda v: v >= 0 and math.isfinite(v), "be >= 0 and finite")
POSITIVE = Rule(lambda v: v > 0 and math.isfinite(v), "be > 0 and finite")
UNIT = Rule(lambda v: 0 <= v <= 1, "lie in [0, 1]")

# A hyperparameter declares its rule once, in its annotation (``gamma: Unit = 1.0``): a float or
# a 0-d array (it may be traced), and the rule the public entry reads from the signature
# (:func:`annotated_rules`) and applies to a concrete value on the host. An options value's field
# does the same (:func:`annotated_fields`), where a ``Literal`` names its modes and ``bool`` a flag.
Scalar = float | Float[Array, ""]
Finite = Annotated[Scalar, FINITE]
NonNegative = Annotated[Scalar, NON_NEGATIVE]
Positive = Annotated[Scalar, POSITIVE]
Unit = Annotated[Scalar, UNIT]


def annotated_fields(fn: Callable) -> dict[str, tuple]:
    """``{argument: (rule, optional)}`` of the arguments of ``fn`` whose annotation declares a
    rule: a :class:`Rule` (``Unit``, ``Annotated[Scalar, Rule(...)]``), the modes of a
    ``Literal`` (a tuple) or ``bool`` (a Python bool); ``optional`` when the annotation admits
    ``None`` (``Positive | None``: ``None`` switches it off)."""
    fields = {}
    for name, hint in typing.get_type_hints(fn, include_extras=True).items():
        optional = type(None) in typing.get_args(hint)
        for part in (hint, *typing.get_args(hint)):  # the hint, or a member of its union
            rules = [m for m in getattr(part, "__metadata__", ()) if isinstance(m, Rule)]
            rules += [typing.get_args(part)] if typing.get_origin(part) is typing.Literal else []
            rules += [bool] if part is bool else []
            fields.update((name, (rule, optional)) for rule in rules)
    return fields


def annotated_rules(fn: Callable) -> dict[str, Rule]:
    """``{argument: Rule}`` of the arguments of ``fn`` whose annotation carries a :class:`Rule`
    (``Unit``, ``Positive | None``, ``Annotated[Scalar, Rule(...)]``)."""
    return {name: rule for name, (rule, _) in annotated_fields(fn).items() if isinstance(rule, Rule)}


def check_concrete(value, name: str, ok, requirement: str) -> float | None:
    """The concrete-value rule: ``ValueError`` when ``value`` is a concrete scalar
    (:func:`concrete_float`) and ``ok(value)`` is false; returns the value (``None`` if traced)."""
    v = concrete_float(value)
    if v is not None and not ok(v):
        raise ValueError(f"`{name}` must {requirement}; got {v}.")
    return v


def option_number(value, name: str):
    """A numeric field of an options value (``Normalization``, ``LossOptions``) as it is stored,
    with its concrete value: ``(value, float)``, or ``(value, None)`` when traced.

    A real scalar: a Python number (a subclass becomes the number it holds), a NumPy scalar or
    0-d array of a real dtype (bfloat16 included; an array is copied, so a later write to the
    caller's array changes nothing), a 0-d JAX array or a tracer of a real dtype. ``None``, bools,
    strings and arrays of another shape are refused by name; so is a concrete value beyond
    float32 (the range rule).
    """
    if value is None:
        raise TypeError(f"`{name}` must be a real number; got None (a null in a config?). Leave "
                        "it out for its default.")
    dtype = getattr(value, "dtype", None)
    if isinstance(value, bool | np.bool_) or dtype == np.bool_:
        raise TypeError(f"`{name}` must be a real number, not a bool; got {value!r}.")
    if isinstance(value, float | int):
        value = float(value) if isinstance(value, float) else int(value)
    elif not (isinstance(value, np.ndarray | np.generic | jax.Array) and real_dtype(dtype)):
        raise TypeError(f"`{name}` must be a real number (a Python float or a 0-d real array, "
                        f"which may be traced); got {type(value).__name__} {value!r}.")
    elif np.ndim(value) != 0:
        raise ValueError(f"`{name}` must be a scalar; got shape {np.shape(value)}.")
    elif isinstance(value, np.ndarray):
        value = value.copy()
    v = concrete_float(value)
    if v is None and type(value) is int:
        raise ValueError(f"`{name}` = {value} is beyond float32's range (±{F32_MAX:.4g}).")
    check_host_range(value, name)
    return value, v


def reads(*names: str):
    """Declare the arguments a ``check`` reads: a call giving none of them skips it (the entry
    runs it once on the defaults when it is built)."""

    def declare(check):
        check.reads = tuple(names)
        return check

    return declare


def static_value(value, name: str, boolean: bool = False):
    """The static rule: a static option as the Python value ``jit`` hashes. A concrete 0-d integer
    or bool array becomes the Python number; a traced one is a ``TypeError``; a bool option takes
    only a bool (``"false"`` would be truthy); an int must fit int32 (the range rule)."""
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"`{name}` is static (it changes the program or sets a shape) and must be "
                        "a concrete Python value; got a traced array.")
    if isinstance(value, jax.Array | np.ndarray | np.generic):
        if np.ndim(value) or value.dtype.kind not in "biu":
            raise TypeError(f"`{name}` is static (it changes the program or sets a shape) and must "
                            f"be a Python value; got an array of shape {np.shape(value)}.")
        value = np.asarray(value).item()
    if boolean and type(value) is not bool:
        raise TypeError(f"`{name}` must be a Python bool (True or False); got {type(value).__name__} "
                        f"{value!r} (an option is never read by truthiness: 'false' is truthy).")
    if type(value) is int:
        check_host_range(value, name)
    return value


def concrete_numpy(x) -> np.ndarray | None:
    """``x`` as a NumPy array when it is a host value, ``None`` for JAX arrays (left on their
    device) and tracers."""
    if isinstance(x, jax.Array):
        return None
    try:
        return np.asarray(x)
    except Exception:  # pragma: no cover - exotic array types
        return None


def concrete_array(x) -> np.ndarray | None:
    """``x`` as a NumPy array when concrete (host values and fully addressable JAX arrays, read
    back), ``None`` when traced or unreadable: for the value checks of small ``[B, K]`` arguments."""
    if isinstance(x, jax.core.Tracer) or (isinstance(x, jax.Array) and not x.is_fully_addressable):
        return None
    try:
        return np.asarray(x)
    except (TypeError, ValueError):  # pragma: no cover - exotic array types
        return None


def _where(arr: np.ndarray, flat: int) -> str:
    index = np.unravel_index(flat, arr.shape)
    return str(index[0]) if len(index) == 1 else str(tuple(int(i) for i in index))


def _at(arr: np.ndarray, flat: int) -> str:
    return "" if arr.ndim == 0 else f" at index {_where(arr, flat)}"



def check_real(x, name: str, *, bool_ok: bool = True) -> None:
    """``TypeError`` unless ``x`` (NumPy or JAX, concrete or traced) has a real numeric dtype:
    floating (bfloat16 included), integer, or bool when ``bool_ok``."""
    dtype = x.dtype
    if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)
            or (bool_ok and dtype == jnp.bool_)):
        raise TypeError(f"`{name}` must be a real numeric array; got dtype {dtype}.")


def check_int(x, name: str, what: str = "an integer array") -> None:
    """``TypeError`` unless ``x`` (NumPy or JAX, concrete or traced) has an integer dtype (bool
    is not an integer here)."""
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"`{name}` must be {what}; got dtype {x.dtype}.")


def check_mask(mask, name: str, shape: Sequence[int] | None = None, like: str | None = None
               ) -> None:
    """``mask`` (NumPy or JAX, concrete or traced) is boolean and, when ``shape`` is given, of
    exactly that shape (``like``: the argument whose shape it must share, named in the message).

    Masks must be boolean: a float 0/1 "mask" multiplied into values is how NaN leaks through
    padding (NaN * 0 is NaN), so credax refuses it rather than guessing.
    """
    if mask.dtype != jnp.bool_:
        raise TypeError(
            f"`{name}` must be a boolean array (true = real entry); got dtype {mask.dtype}. "
            f"Convert with `{name}.astype(bool)`."
        )
    if shape is not None and mask.shape != tuple(shape):
        same = f" (same as `{like}`)" if like else ""
        raise ValueError(f"`{name}` must have shape {tuple(shape)}{same}; got {mask.shape}.")


def as_array(x, name: str) -> jax.Array:
    """``x`` as a JAX array (an Array as it is); a torch tensor is refused by name."""
    reject_torch(x, name)
    return x if isinstance(x, jax.Array) else jnp.asarray(x)


def as_float_array(x, name: str) -> jax.Array:
    """``x`` as an array of a real numeric dtype (float, int or bool), else ``TypeError``."""
    x = as_array(x, name)
    check_real(x, name)
    return x


def as_mask(mask, name: str, shape: Sequence[int]) -> jax.Array:
    """A boolean mask of exactly ``shape`` (:func:`check_mask`); ``None`` means all true."""
    if mask is None:
        return jnp.ones(tuple(shape), dtype=bool)
    mask = as_array(mask, name)
    check_mask(mask, name, shape)
    return mask


def as_int_array(x, name: str, what: str = "an integer array") -> jax.Array:
    x = as_array(x, name)
    check_int(x, name, what)
    return x


def check_ndim(x: jax.Array, name: str, ndim: int | Sequence[int], layout: str) -> None:
    ndims = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if x.ndim not in ndims:
        raise ValueError(f"`{name}` must be {layout} (ndim {' or '.join(map(str, ndims))}); "
                         f"got shape {x.shape}.")


def check_shape(x: jax.Array, name: str, shape: Sequence[int], layout: str) -> None:
    if x.shape != tuple(shape):
        raise ValueError(f"`{name}` must have shape {layout} = {tuple(shape)}; got {x.shape}.")


def check_leading(x, name: str, leading: Sequence[int], layout: str, what: str) -> None:
    """``x.shape`` starts with ``leading`` (``what`` says which axes, e.g. ``"B=4"``)."""
    if x.shape[:len(leading)] != tuple(leading):
        raise ValueError(f"`{name}` must have shape {layout} with {what}; got {x.shape}.")


def check_option(value, name: str, allowed: Sequence) -> None:
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {list(allowed)}; got {value!r}.")


def check_static_int(value, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be a Python int (it sets a shape); got {type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}; got {value}.")
    return int(value)


def scalar(value, dtype, name: str) -> jax.Array:
    """A numeric hyperparameter as a 0-d array of ``dtype``: Python floats and traced arrays both
    work, so schedules do not recompile."""
    value = jnp.asarray(value)
    if value.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar; got shape {value.shape}.")
    if not (jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.integer)):
        raise TypeError(f"`{name}` must be a real number; got dtype {value.dtype}.")
    return value.astype(dtype)


def as_index_array(x, name: str, what: str = "an integer array") -> jax.Array:
    """An integer index array (tokens, turn maps, role codes) widened to at least int32
    (:func:`credax._numeric.widen_index`)."""
    return _numeric.widen_index(as_int_array(x, name, what))


# --------------------------------------------------------------------------------------------
# Host side: value checks on concrete arrays (the eager validate_* functions, not under jit).
# --------------------------------------------------------------------------------------------

EAGER = ("validate_* functions check concrete values and must be called outside jit (in the data "
         "pipeline)")


def host_array(x, name: str, why: str = EAGER) -> np.ndarray:
    """``x`` as a NumPy array; a traced value is refused (``why``: what needs concrete values)."""
    if isinstance(x, jax.core.Tracer):
        raise TypeError(f"`{name}` is a traced value: {why}.")
    return np.asarray(x)


def first_index(where: np.ndarray) -> tuple[int, ...]:
    """The index of the first true entry of ``where`` (row-major), as Python ints."""
    return tuple(int(i) for i in np.argwhere(where)[0])


def check_prefix_mask(turn_mask: np.ndarray, name: str = "turn_mask",
                      row_mask: np.ndarray | None = None) -> None:
    """Valid turns must form a prefix of each row, and every real row needs at least one.

    With ``row_mask`` (``bool[B]``, true = real row), padding rows must have no valid turn (the
    layout :func:`credax.pad_rollouts` writes) and are exempt from the at-least-one rule.
    """
    if row_mask is not None:
        stray = ~row_mask[:, None] & turn_mask
        if stray.any():
            b, k = first_index(stray)
            raise ValueError(f"`{name}` must be all false on padding rows (`row_mask` false); row "
                             f"{b} is padding but has a valid turn at index {k}.")
    gap = turn_mask[:, 1:] & ~turn_mask[:, :-1]
    if gap.any():
        b, k = first_index(gap)
        raise ValueError(
            f"`{name}` must be prefix-contiguous (valid turns first, then padding); row {b} has a "
            f"valid turn at index {k + 1} after a padded turn at index {k}."
        )
    empty = ~turn_mask.any(axis=1)
    if row_mask is not None:
        empty &= row_mask
    if empty.any():
        hint = "" if row_mask is not None else (
            " (padding rows from `credax.pad_rollouts`? pass `row_mask=` or the PaddedRollouts)")
        raise ValueError(f"`{name}`: every row needs at least one valid turn; row "
                         f"{int(np.argmax(empty))} has none{hint}.")


def row_mask_array(row_mask, batch: int, like: str) -> np.ndarray | None:
    """``row_mask`` as a checked ``bool[B]`` host array (:func:`host_mask`), or None."""
    return None if row_mask is None else host_mask(row_mask, "row_mask", (batch,), like=like)


def host_real(x, name: str) -> np.ndarray:
    """``x`` as a host array of a real dtype, after the range rule (finite in float64 but inf in
    float32 is refused, as the compiled functions' entry does)."""
    check_host_range(x, name)
    a = host_array(x, name)
    check_real(a, name)
    return a


def host_mask(mask, name: str, shape: Sequence[int], like: str) -> np.ndarray:
    """``mask`` as a checked ``bool`` host array of ``shape``; ``None`` means all true."""
    if mask is None:
        return np.ones(tuple(shape), bool)
    m = host_array(mask, name)
    check_mask(m, name, shape, like=like)
    return m


def checked_range(value_range, name: str) -> tuple[float, float] | None:
    """``value_range`` as ``(lo, hi)`` with real, non-NaN bounds and ``lo <= hi``, or ``None``."""
    if value_range is None:
        return None
    try:
        lo, hi = (float(v) for v in value_range)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a pair (lo, hi) of numbers or None; got "
                        f"{value_range!r}.") from None
    if np.isnan(lo) or np.isnan(hi) or lo > hi:
        raise ValueError(f"`{name}` must be (lo, hi) with lo <= hi and no NaN (NaN would switch "
                         f"the check off); got {value_range!r}.")
    return lo, hi


def check_finite_within(v: np.ndarray, where: np.ndarray, name: str, bounds, range_name: str,
                        entries: str) -> None:
    """The values of ``v`` at ``where`` (``entries`` names them) are finite and inside ``bounds``
    (a :func:`checked_range`, the argument ``range_name``; ``None``: no range)."""
    vf = v.astype(np.float64)
    bad = where & ~np.isfinite(vf)
    if bad.any():
        pos = first_index(bad)
        raise ValueError(f"`{name}` must be finite at {entries}; {name}[{', '.join(map(str, pos))}] "
                         f"= {v[pos]}.")
    if bounds is not None:
        lo, hi = bounds
        out = where & ((vf < lo) | (vf > hi))
        if out.any():
            pos = first_index(out)
            raise ValueError(f"`{name}` must lie in [{lo}, {hi}] at {entries} (`{range_name}`); "
                             f"{name}[{', '.join(map(str, pos))}] = {v[pos]}.")

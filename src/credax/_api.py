"""Public-entry plumbing: how a call reaches a compiled body, and what is checked before tracing.

Every public array function of credax is a plain Python body made into a :class:`PublicFunction`
by :func:`jit_public` (``_grouping.jit_grouped`` is the same with the group-id conversion declared)::

    @jit_public(static_argnames=("budget",), convert={"group_ids": groups},
                check=check_values(eps=NON_NEGATIVE), replicate=True)
    def estimator(scores, turn_mask, group_ids, *, budget=1, eps=1e-6): ...

The decorator's options are declarations about arguments. At decoration they become the entry's
``plan``: one :class:`ArgumentPlan` per parameter, saying whether it is static, converted,
range-checked and replicated. A call then runs four steps, in this order:

1. **screen** each argument as given: an unknown keyword is refused by name (with the entry's
   ``hints``, e.g. where a removed normalisation keyword went), a torch tensor is refused (the error points to
   ``credax.torch``), and a host array that JAX would narrow silently without ``jax_enable_x64``
   is refused by name (:func:`credax._checks.check_host_range`): a NumPy ``float64`` value finite
   but beyond float32 (``1e39`` would become ``inf``), an ``int64`` / ``uint64`` index beyond
   int32 (``2**32`` would wrap to ``0``), a Python or NumPy number beyond float32 (``eps=1e39``).
   Converted ids and static options are exempt: ids are densified exactly on the host, static
   options never reach JAX as arrays. ``None`` for a numeric hyperparameter (a config null) and
   an options value given for another argument (``f(x, ids, presets.VERL)`` lands on ``mask``)
   are refused naming the argument.
2. **check** the bound arguments (defaults applied): the only place where the *value* of a traced
   hyperparameter can be seen. Concrete values (Python numbers, NumPy scalars, committed JAX
   arrays — every ordinary call, including calls with Python floats from inside the caller's own
   ``jit``) are checked; a value traced by the caller's ``jit`` cannot be, and is used as given
   (:func:`concrete_float` returns ``None`` for it).
3. **rewrite** each argument by its plan: a static option given as a concrete 0-d array becomes
   the Python value ``jit`` hashes (a static bool option accepts only a bool: ``"false"`` is a
   ``TypeError``, never read by truthiness); an array sharded over *Explicit* mesh axes is replicated
   (:func:`replicate_explicit`); a converted argument (group ids → :class:`credax.Groups`) is
   converted on the host, so raw ids and a precomputed ``Groups`` hit the same compiled program
   and concrete 64-bit ids are checked exactly.
4. **run** ``jitted``, ``jax.jit(body, static_argnames=...)``: compiled once per (shapes, dtypes,
   static options); numeric hyperparameters stay traced, so a schedule (a new ``eps``,
   ``clip_low``, ``lam`` ...) never recompiles.

The entry object keeps ``body`` (the plain function), ``jitted``, ``signature``, ``plan``,
``lower(*args, **kwargs)`` (``jitted.lower`` after steps 1–3: XLA's view of exactly what the call
compiles) and ``with_body(other)`` (the same entry around another body, e.g. one wrapped in
``chex.assert_max_traces`` to count traces). It carries ``__wrapped__``, ``__name__``, ``__doc__``,
``__module__`` and ``__qualname__`` as ``functools.wraps`` would, so ``inspect.signature``,
``help()`` and the API pages read the body's, and it binds, copies and pickles like a function.

Called inside a user's ``jit``, the whole entry simply traces inline. Private bodies call private
bodies (never a public entry), so no compiled program nests another one.
"""

from __future__ import annotations

import functools
import inspect
import math
import types
from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import numpy as np

from . import _checks


def concrete_numpy(x) -> np.ndarray | None:
    """``x`` as a NumPy array when it is a host value, ``None`` when it is traced or a JAX array.

    JAX arrays are left on their device: copying them to the host on every call would be a host
    round trip per step on an accelerator, and they cannot hold truncated 64-bit ids (JAX made them
    int32 already, or x64 is on and they are hashed at full width).
    """
    if isinstance(x, jax.Array):  # tracers included
        return None
    try:
        return np.asarray(x)
    except Exception:  # pragma: no cover - exotic array types
        return None


def concrete_array(x) -> np.ndarray | None:
    """``x`` as a NumPy array when it is concrete (a host value or a fully addressable JAX array,
    read back), ``None`` when it is traced or cannot be read.

    For the value checks of small ``[B, K]`` arguments (weights, masks) that a committed JAX array
    must pass too; ids and large arrays use :func:`concrete_numpy` (no host round trip).
    """
    if isinstance(x, jax.core.Tracer):
        return None
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return None
    try:
        return np.asarray(x)
    except (TypeError, ValueError):  # pragma: no cover - exotic array types
        return None


def concrete_float(value) -> float | None:
    """``value`` as a Python float when it is a concrete scalar, else ``None``.

    Concrete means not traced: Python and NumPy numbers, 0-d NumPy arrays and 0-d committed JAX
    arrays (read back to the host: one scalar, a hyperparameter, not data). ``None`` for tracers,
    non-scalars, non-numbers and ``None`` itself.
    """
    if type(value) is float or type(value) is int:  # the common case first (bool is excluded)
        try:
            return float(value)
        except OverflowError:  # an int beyond float range: as NumPy's object array, not concrete
            return None
    if value is None or isinstance(value, jax.core.Tracer):
        return None
    if isinstance(value, jax.Array):
        if value.ndim != 0 or not value.is_fully_addressable:
            return None
        host = np.asarray(value)
    else:
        host = concrete_numpy(value)
        if host is None or host.ndim != 0 or not np.issubdtype(host.dtype, np.number):
            return None  # strings and objects are left to the trace-time type check
    try:
        return float(host)
    except (TypeError, ValueError):
        return None


def check_concrete(value, name: str, ok: Callable[[float], bool], requirement: str) -> float | None:
    """Raise ``ValueError`` when ``value`` is concrete and ``ok(value)`` is false.

    The message is ``"`name` must <requirement>; got <value>."``. Returns the concrete value (or
    ``None`` when traced), for checks that combine several arguments.
    """
    v = concrete_float(value)
    if v is not None and not ok(v):
        raise ValueError(f"`{name}` must {requirement}; got {v}.")
    return v


def _finite(v: float) -> bool:
    return math.isfinite(v)


# Rules for check_values: (ok, requirement). NaN fails every comparison, so every rule rejects it.
FINITE = (_finite, "be finite")
NON_NEGATIVE = (lambda v: v >= 0 and _finite(v), "be >= 0 and finite")
POSITIVE = (lambda v: v > 0 and _finite(v), "be > 0 and finite")
UNIT = (lambda v: 0 <= v <= 1, "lie in [0, 1]")


def _null(name: str) -> TypeError:
    return TypeError(f"`{name}` must be a number; got None (a null in a config?). Leave it out "
                     "for its default.")


def check_values(**rules) -> Callable[[Mapping], None]:
    """A ``check`` for :func:`jit_public`: each named argument, when concrete, obeys its rule.

    ``rules`` maps an argument name to ``(ok, requirement)`` (``FINITE``, ``NON_NEGATIVE``,
    ``POSITIVE``, ``UNIT``); ``None`` values (an optional hyperparameter left out) are skipped.
    """

    def check(arguments: Mapping) -> None:
        for name, (ok, requirement) in rules.items():
            if arguments.get(name) is not None:
                check_concrete(arguments[name], name, ok, requirement)

    check.names = tuple(rules)  # the entry refuses None for a required one of these by name
    return check


def replicate_explicit(x):
    """Replicate an array sharded over *Explicit* mesh axes (``jax.make_mesh``'s default).

    With explicit sharding the shardings are part of the types, and the scatters of the segment
    statistics (rows of one group on several shards, a table indexed by group) cannot resolve
    theirs: JAX raises ``ShardingTypeError``. Gathering the rows first is what a group statistic
    needs anyway; ``[B]`` and ``[B, K]`` arrays are small. Auto-axis (GSPMD) shardings and
    unsharded values pass through unchanged.
    """
    if not isinstance(x, jax.Array):  # host values (lists of 64-bit ids, options) pass as given
        return x
    if isinstance(getattr(x, "sharding", None), jax.sharding.SingleDeviceSharding):
        return x  # one device: nothing to replicate (the common case, checked without typeof)
    try:
        sharding = jax.typeof(x).sharding
    except TypeError:  # pragma: no cover - exotic array types
        return x
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or mesh.empty or jax.sharding.AxisType.Explicit not in mesh.axis_types:
        return x
    if all(axis is None for axis in sharding.spec):
        return x
    return jax.sharding.reshard(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


_PASS_THROUGH = (type(None), bool, int, float, str)  # never arrays: nothing to replicate


def _replicate_tree(value):
    """:func:`replicate_explicit` on every array leaf of one argument (options pass as given).

    A pytree argument (``Groups``, ``Normalization``, a list of ids) whose leaves all stay as they
    are is returned itself, not rebuilt."""
    if type(value) in _PASS_THROUGH:
        return value
    if isinstance(value, jax.Array):
        return replicate_explicit(value)
    leaves, treedef = jax.tree_util.tree_flatten(value)
    new = [replicate_explicit(leaf) for leaf in leaves]
    if all(a is b for a, b in zip(new, leaves, strict=True)):
        return value
    return jax.tree_util.tree_unflatten(treedef, new)


def _binder(signature: inspect.Signature):
    """``signature.bind(*args, **kwargs)`` followed by ``apply_defaults()``, and the names passed.

    The public call binds on every call, and ``Signature.bind`` costs ~50 µs for a signature of
    twenty parameters (measured, 2-CPU machine, loaded). An ordinary call — positional arrays, then known
    keywords, nothing given twice, every required argument present — is bound by dict updates
    into a :class:`_Bound` holding what ``BoundArguments`` would; anything else (an unknown
    keyword, a missing or duplicated argument) goes through ``Signature.bind``, so its
    ``TypeError`` is Python's own.
    """
    parameters = signature.parameters
    kinds = {p.kind for p in parameters.values()}
    simple = not kinds & {inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL,
                          inspect.Parameter.VAR_KEYWORD}
    positional = [n for n, p in parameters.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    names = frozenset(parameters)
    defaults = {n: p.default for n, p in parameters.items() if p.default is not p.empty}
    required = frozenset(names - defaults.keys())

    def bind(args, kwargs):
        if simple and len(args) <= len(positional):
            given = dict(zip(positional, args, strict=False))
            if kwargs.keys() <= names and not kwargs.keys() & given.keys():
                given.update(kwargs)
                if required <= given.keys():
                    full = {n: given[n] if n in given else defaults[n] for n in parameters}
                    return _Bound(full, positional), frozenset(given)
        bound = signature.bind(*args, **kwargs)
        passed = frozenset(bound.arguments)
        bound.apply_defaults()
        return _Bound(bound.arguments, positional if simple else None, bound), passed

    return bind


class _Bound:
    """The bound arguments of a call (``.arguments``, a dict ``check`` reads) and
    the ``(args, kwargs)`` they make: the positional parameters in order while present, the rest
    as keywords — ``inspect.BoundArguments.args`` / ``.kwargs`` without their per-call walk over
    the whole signature (``positional=None``: an unusual signature, left to ``inspect``)."""

    __slots__ = ("arguments", "_positional", "_inspect")

    def __init__(self, arguments, positional, bound=None):
        self.arguments, self._positional, self._inspect = arguments, positional, bound

    @property
    def args(self):
        if self._positional is None:
            return self._inspect.args
        out = []
        for name in self._positional:
            if name not in self.arguments:
                break
            out.append(self.arguments[name])
        return tuple(out)

    @property
    def kwargs(self):
        if self._positional is None:
            return self._inspect.kwargs
        taken = self._positional[:len(self.args)]
        return {k: v for k, v in self.arguments.items() if k not in taken}




def unexpected_keyword(function: str, name: str, hints: Mapping[str, str]) -> TypeError:
    """The ``TypeError`` of an unknown keyword, with the entry's hint for it (where the removed
    keyword went); ``credax.torch`` raises the same one."""
    hint = f" {hints[name]}" if name in hints else ""
    return TypeError(f"{function}() got an unexpected keyword argument {name!r}.{hint}")


def _misplaced_option(value, name: str, names: frozenset) -> None:
    """``TypeError`` naming both arguments when an options value (a :class:`credax.Normalization`,
    which declares its keyword as ``_credax_option``) is given for another argument: a preset passed
    positionally lands on ``mask``, which JAX would otherwise report from inside the trace."""
    option = getattr(type(value), "_credax_option", None)
    if option is not None and option != name:
        where = (f"pass it by keyword, `{option}=`" if option in names
                 else f"this function takes no `{option}=`")
        raise TypeError(f"`{name}` got a credax.{type(value).__name__}, an options value: {where} "
                        f"(a preset given positionally lands on `{name}`).")


def static_bool(name: str, value) -> bool:
    """A static bool option as the Python bool ``jit`` hashes: ``True`` / ``False``, a NumPy bool
    or a concrete 0-d bool array. Anything else (``"false"``, ``0``, ``None``) is a ``TypeError``:
    read by truthiness, the string ``"false"`` would switch the option on."""
    value = static_python(name, value)
    if type(value) is not bool:
        raise TypeError(f"`{name}` must be a Python bool (True or False); got {type(value).__name__} "
                        f"{value!r} (an option is never read by truthiness: 'false' is truthy).")
    return value


def static_python(name: str, value):
    """A static option as the Python value ``jit`` hashes (step 3 for a static argument).

    A concrete 0-d integer or bool array (``budget=jnp.asarray(3)``, a NumPy scalar) is read back
    as the Python number it holds; a traced one cannot set a shape, and the error names the
    argument instead of JAX's "Non-hashable static arguments".
    """
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"`{name}` is static (it changes the program or sets a shape) and must "
                        "be a concrete Python value; got a traced array.")
    if isinstance(value, jax.Array | np.ndarray | np.generic):
        host = np.asarray(value)
        if host.ndim == 0 and (np.issubdtype(host.dtype, np.integer) or host.dtype == np.bool_):
            return host.item()
        raise TypeError(f"`{name}` is static and must be a Python value; got an array of "
                        f"shape {host.shape} and dtype {host.dtype}.")
    return value


class ArgumentPlan(NamedTuple):
    """What a public call does to one argument before the compiled body sees it.

    Computed once, when the function is decorated, from the decorator's declarations.
    """

    name: str
    static: bool = False  # a jit static option (step 3: a concrete 0-d array → its Python value)
    boolean: bool = False  # a static option whose default is a bool: only a bool is accepted
    numeric: bool = False  # a hyperparameter whose default is a number: `None` is refused
    convert: Callable | None = None  # host conversion before tracing (``None`` passes through)
    replicated: bool = False  # Explicit-mesh shardings gathered first, on every array leaf
    range_checked: bool = True  # step 1: host float64 / int64 values JAX would narrow, refused

    @property
    def rewrites(self) -> bool:
        """Whether step 3 can change this argument."""
        return self.static or self.replicated or self.convert is not None

    def rewriter(self) -> Callable | None:
        """Step 3 for this argument as one function (``None``: passed as given): static → its
        Python value; otherwise replicate, then convert."""
        if self.static:
            return functools.partial(static_bool if self.boolean else static_python, self.name)
        convert, replicated = self.convert, self.replicated
        if convert is None:
            return _replicate_tree if replicated else None

        def rewrite(value):
            if replicated:
                value = _replicate_tree(value)
            return None if value is None else convert(value)

        return rewrite


def argument_plans(signature: inspect.Signature, *, static_argnames=(), convert=None,
                   replicate: bool = False, numeric=()) -> dict[str, ArgumentPlan]:
    """Each parameter's :class:`ArgumentPlan` from :func:`jit_public`'s declarations.

    A static option with a bool default accepts only a bool; a hyperparameter with a number as
    its default, or a required one that ``check`` range-checks (``numeric``: its rule names), refuses
    ``None`` by name (a config null would otherwise reach ``jnp.asarray`` inside the trace),
    unless its annotation admits ``None`` (``value_loss(clip=None)``: no clipping).

    Converted ids and static options are exempt from the range check (ids are densified exactly
    on the host; static options never reach JAX as arrays). ``convert`` implies ``replicate``:
    functions that scatter rows into per-group tables need their rows gathered anyway.
    """
    convert = dict(convert or {})
    unknown = (set(static_argnames) | set(convert)) - set(signature.parameters)
    if unknown:
        raise ValueError(f"jit_public: {sorted(unknown)} not among the parameters "
                         f"{list(signature.parameters)}.")
    both = set(static_argnames) & set(convert)
    if both:
        raise ValueError(f"jit_public: {sorted(both)} cannot be both static and converted.")
    replicate = replicate or bool(convert)
    defaults = {name: p.default for name, p in signature.parameters.items()}
    annotations = {name: p.annotation for name, p in signature.parameters.items()}
    return {
        name: ArgumentPlan(
            name,
            static=name in static_argnames,
            boolean=name in static_argnames and type(defaults[name]) is bool,
            numeric=name not in static_argnames and "None" not in str(annotations[name]) and (
                type(defaults[name]) in (int, float)
                or (defaults[name] is inspect.Parameter.empty and name in numeric)),
            convert=convert.get(name),
            replicated=replicate and name not in static_argnames,
            range_checked=name not in static_argnames and name not in convert,
        )
        for name in signature.parameters
    }


class PublicFunction:
    """A public credax function: a plain Python body, compiled with ``jax.jit``, behind the host
    steps of the module docstring (screen, check, rewrite, run).

    Attributes:
      body: the plain Python function (its docstring, signature and annotations are the entry's).
      jitted: ``jax.jit(body, static_argnames=...)``, the compiled program the call runs.
      signature: ``inspect.signature(body)``.
      plan: ``{parameter name: ArgumentPlan}``, what steps 1 and 3 do to each argument.

    Build one with :func:`jit_public`; :meth:`with_body` builds the same entry around another body.
    """

    def __init__(self, body: Callable, *, static_argnames: tuple[str, ...] = (),
                 convert: Mapping[str, Callable] | None = None,
                 check: Callable[[Mapping], None] | None = None, replicate: bool = False,
                 hints: Mapping[str, str] | None = None):
        functools.update_wrapper(self, body)  # __wrapped__, __name__, __doc__, __module__, ...
        self._declared = dict(static_argnames=tuple(static_argnames), convert=dict(convert or {}),
                              check=check, replicate=replicate, hints=dict(hints or {}))
        self.body = body
        self.signature = inspect.signature(body)
        self.plan = types.MappingProxyType(argument_plans(
            self.signature, static_argnames=static_argnames, convert=convert, replicate=replicate,
            numeric=getattr(check, "names", ())))
        self.jitted = jax.jit(body, static_argnames=static_argnames)
        # The per-call forms of the plan (plain tuples, sets and dicts: read on every call).
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        positional = [a for a in self.plan.values() if self.signature.parameters[a.name].kind in kinds]
        self._screen_at = tuple((a.name, a.range_checked) for a in positional)
        self._unchecked = frozenset(a.name for a in self.plan.values() if not a.range_checked)
        self._numeric = frozenset(a.name for a in self.plan.values() if a.numeric)
        self._rewrite_at = tuple(a.rewriter() for a in positional)
        self._rewrite_named = {a.name: a.rewriter() for a in self.plan.values() if a.rewrites}
        self._check, self._hints = check, dict(hints or {})
        self._names = frozenset(self.signature.parameters)
        self._bind = _binder(self.signature) if check is not None else None

    # --------------------------------------------------------------------------------------------
    # The call: steps 1-3 give what `jitted` is called with (module docstring)
    # --------------------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        args, kwargs = self._arguments(args, kwargs)
        return self.jitted(*args, **kwargs)

    def lower(self, *args, **kwargs):
        """``jitted.lower`` on the arguments as the call checks and rewrites them."""
        args, kwargs = self._arguments(args, kwargs)
        return self.jitted.lower(*args, **kwargs)

    def _arguments(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        self._screen(args, kwargs)
        if self._bind is not None:
            args, kwargs = self._check_bound(args, kwargs)
        if self._rewrite_named:
            args, kwargs = self._rewrite(args, kwargs)
        return args, kwargs

    def _screen(self, args, kwargs) -> None:
        """Step 1, before ``jit``'s generic errors: unknown keywords, torch tensors and narrowed
        host values."""
        function = self.__name__
        if not kwargs.keys() <= self._names:
            name = sorted(kwargs.keys() - self._names)[0]
            raise unexpected_keyword(function, name, self._hints)
        for (name, range_checked), value in zip(self._screen_at, args, strict=False):
            _checks.reject_torch(value, name, function)  # extra arguments: left to jit's error
            _misplaced_option(value, name, self._names)
            if range_checked:
                _checks.check_host_range(value, name)
            if value is None and name in self._numeric:
                raise _null(name)
        for name, value in kwargs.items():
            _checks.reject_torch(value, name, function)
            _misplaced_option(value, name, self._names)
            if name not in self._unchecked:
                _checks.check_host_range(value, name)
            if value is None and name in self._numeric:
                raise _null(name)

    def _check_bound(self, args, kwargs):
        """Step 2: ``check`` on the bound arguments (defaults applied)."""
        bound, _ = self._bind(args, kwargs)
        self._check(bound.arguments)
        return args, kwargs

    def _rewrite(self, args, kwargs):
        """Step 3: each argument by its plan (static → Python value, replicate, convert)."""
        out = [v if f is None else f(v) for f, v in zip(self._rewrite_at, args, strict=False)]
        out.extend(args[len(out):])  # extra positional arguments: as given, for jit's error
        named = self._rewrite_named
        return out, {k: named[k](v) if k in named else v for k, v in kwargs.items()}

    # --------------------------------------------------------------------------------------------
    # The same entry around another body; a function's manners (binding, copies, pickling)
    # --------------------------------------------------------------------------------------------

    def with_body(self, body: Callable) -> PublicFunction:
        """The same entry (static options, conversions, checks, replication) around ``body``.

        ``body`` must take the same arguments; e.g. an instrumented copy of :attr:`body`,
        ``entry.with_body(chex.assert_max_traces(entry.body, n=1))`` counts the traces of the
        real call path.
        """
        return PublicFunction(body, **self._declared)

    def __get__(self, instance, owner=None):
        # As a function: an attribute of a class binds to the instance (and inspect and pydoc
        # treat the entry as a routine: help() shows its signature and docstring).
        return self if instance is None else types.MethodType(self, instance)

    def __reduce__(self):
        # Pickled and copied as a function is: by its qualified name in its module.
        return self.__qualname__

    def __repr__(self) -> str:
        return f"<credax public function {self.__module__}.{self.__qualname__}>"


def jit_public(
    *,
    static_argnames: tuple[str, ...] = (),
    convert: Mapping[str, Callable] | None = None,
    check: Callable[[Mapping], None] | None = None,
    replicate: bool = False,
    hints: Mapping[str, str] | None = None,
) -> Callable[[Callable], PublicFunction]:
    """Decorator for public functions: the body becomes a :class:`PublicFunction`.

    Args:
      static_argnames: options that change the program (strings, bools, shapes).
      convert: ``{argument name: converter}`` applied on the host before tracing (``None``
        arguments pass through: optional groupings). When given, every array argument sharded over
        Explicit mesh axes is replicated first — only functions that scatter rows into per-group
        tables need it; row-wise functions (turn scans, losses) keep their batch sharding.
      check: called with the bound arguments (defaults applied) before tracing; raises on a
        concrete value out of range (see :func:`concrete_float`).
      replicate: replicate Explicit-mesh-sharded array arguments even without ``convert``: for
        functions whose gathers, scatters or scan carries cannot resolve an explicit sharding
        (turn scans, role tables, judge windows, per-turn token reductions). Their inputs are
        ``[B, K]`` turn tensors or one ``[B, T]`` reduction, small next to the loss's.
      hints: ``{keyword: sentence}`` added to the ``TypeError`` of an unknown keyword (e.g. the
        normalisation fields, which are passed as one ``normalization=`` value).
    """

    def decorate(body: Callable) -> PublicFunction:
        return PublicFunction(body, static_argnames=static_argnames, convert=convert, check=check,
                              replicate=replicate, hints=hints)

    return decorate

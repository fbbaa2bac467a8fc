"""The public entry: a public function is ``jax.jit`` of its body plus one host step.

Every public array function is a body made a :class:`PublicFunction` by :func:`jit_public`
(``_grouping.jit_grouped`` declares the group ids too), e.g. ``@jit_public(static_argnames=
("budget",), replicate=True)``; a hyperparameter's value rule is its annotation (``eps:
NonNegative = 1e-6``, the rules of ``_checks``), read from the signature when the entry is built.

**The call** is one host step, then ``jitted`` (``jax.jit`` of the body, static names given):

1. each given argument: a static option obeys the static rule (:func:`_checks.static_value`), a
   ``convert``-ed one (host ids, ``normalization``) is converted on the host, any other is
   normalised by :func:`_checks.host_value` (NumPy values in native byte order; string, object
   and complex arrays and bools among numbers refused by name; the float32/int32 range rule);
2. the concrete-value rule on hyperparameters: the rule of each given one's annotation
   (:func:`_checks.annotated_rules`), and a custom ``check`` relating several arguments when an
   argument it :func:`reads` is given (both ran on the defaults when the entry was built). A value
   traced by the caller cannot be seen and is used as given.

Nothing else runs on a correct call. A failed call is diagnosed (:meth:`PublicFunction._diagnose`:
an unknown keyword with its hint, a torch tensor, an options value given for another argument,
``None`` for a number, a malformed ``Groups``) before JAX's error is let through. No table of
types is built: the first call of a process may be inside ``jit``, ``vmap``, ``grad``, ``scan``
or ``shard_map``. In the program Explicit-mesh shardings are gathered where the body scatters rows
(:func:`replicate_explicit`) and ``traced`` conversions run (JAX ids → ``Groups``). Hyperparameters
stay traced: a schedule never recompiles. ``benchmarks/entry_overhead.py`` measures the step.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping

import jax
import numpy as np

from . import _checks, _collectives

# The check vocabulary the math modules import from here (written once, in _checks).
check_concrete, reads = _checks.check_concrete, _checks.reads
concrete_array, concrete_float, concrete_numpy = (_checks.concrete_array, _checks.concrete_float,
                                                  _checks.concrete_numpy)


def replicate_explicit(x):
    """Replicate an array sharded over *Explicit* mesh axes: the scatters of the segment
    statistics cannot resolve such shardings (``ShardingTypeError``), and gathering the small
    ``[B]`` / ``[B, K]`` rows is what a group statistic needs anyway. Others pass unchanged."""
    found = _collectives.explicit_sharding(x)
    if found is None:
        return x
    return jax.sharding.reshard(x, jax.sharding.NamedSharding(found[0], jax.sharding.PartitionSpec()))


def _replicate_tree(value):
    """:func:`replicate_explicit` on every array leaf of one argument (itself when none moves)."""
    if isinstance(value, jax.Array):
        return replicate_explicit(value)
    leaves, treedef = jax.tree_util.tree_flatten(value)
    new = [replicate_explicit(leaf) for leaf in leaves]
    if all(a is b for a, b in zip(new, leaves, strict=True)):
        return value
    return jax.tree_util.tree_unflatten(treedef, new)


def unexpected_keyword(function: str, name: str, hints: Mapping[str, str]) -> TypeError:
    """The ``TypeError`` of an unknown keyword, with the entry's hint for it (where a removed
    keyword went); ``credax.torch`` raises the same one."""
    hint = f" {hints[name]}" if name in hints else ""
    return TypeError(f"{function}() got an unexpected keyword argument {name!r}.{hint}")


def program_body(body: Callable, signature: inspect.Signature, replicated: frozenset,
                 traced: Mapping[str, Callable]) -> Callable:
    """The function ``jitted`` traces: ``body`` after replicating ``replicated`` arguments and
    running the ``traced`` conversions (once per compilation). ``body`` itself when neither."""
    if not replicated and not traced:
        return body

    @functools.wraps(body)  # jit reads the signature (static_argnames) through __wrapped__
    def program(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        for name in arguments.keys() & (replicated | traced.keys()):
            value = _replicate_tree(arguments[name]) if name in replicated else arguments[name]
            arguments[name] = traced[name](value) if name in traced and value is not None else value
        return body(*bound.args, **bound.kwargs)

    return program


class PublicFunction:
    """A public credax function: ``jitted`` behind one host step (the module docstring).

    Attributes: ``body`` (the plain function: its docstring, signature and annotations are the
    entry's), ``jitted`` (the compiled program the call runs), ``signature``. Build one with
    :func:`jit_public`; :meth:`with_body` builds the same entry around another body (e.g.
    ``chex.assert_max_traces(entry.body, n=1)``, to count the traces of the real call path), with
    the value rules read from the first body's annotations.
    """

    def __init__(self, body: Callable, *, static_argnames: tuple[str, ...] = (),
                 convert: Mapping[str, Callable] | None = None, check: Callable | None = None,
                 replicate: bool = False, hints: Mapping[str, str] | None = None,
                 traced: Mapping[str, Callable] | None = None, rules: Mapping | None = None):
        functools.update_wrapper(self, body)  # __wrapped__, __name__, __doc__, __module__, ...
        convert, traced = dict(convert or {}), dict(traced or {})
        rules = _checks.annotated_rules(body) if rules is None else dict(rules)
        self._declared = dict(static_argnames=tuple(static_argnames), convert=convert, check=check,
                              replicate=replicate, hints=dict(hints or {}), traced=traced, rules=rules)
        self.body, self.signature = body, inspect.signature(body)
        params = self.signature.parameters
        unknown = (set(static_argnames) | convert.keys() | traced.keys()) - params.keys()
        if unknown:
            raise ValueError(f"jit_public: {sorted(unknown)} not among the parameters {list(params)}.")
        if set(static_argnames) & (convert.keys() | traced.keys()):
            raise ValueError("jit_public: an argument cannot be both static and converted.")
        self._static = frozenset(static_argnames)
        self._bools = frozenset(n for n in self._static if type(params[n].default) is bool)
        replicated = frozenset(params.keys() - self._static) if replicate or convert else frozenset()
        self.jitted = jax.jit(program_body(body, self.signature, replicated, traced),
                              static_argnames=static_argnames)
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self._positional = tuple(n for n, p in params.items() if p.kind in kinds)
        self._defaults = {n: p.default for n, p in params.items() if p.default is not p.empty}
        self._required = frozenset(params.keys() - self._defaults.keys())
        self._convert, self._traced, self._hints = convert, traced, dict(hints or {})
        self._check, self._rules = check, rules
        for name, rule in self._rules.items():  # the defaults obey their rules
            if self._defaults.get(name) is not None:
                _checks.check_concrete(self._defaults[name], name, *rule)
        declared = frozenset(getattr(check, "reads", None) or ())
        # A check reading defaulted arguments only: proved on them here, then run when one is given.
        self._reads = declared if declared and declared <= self._defaults.keys() else None
        if self._reads is not None:
            check({n: self._defaults[n] for n in declared})

    def __call__(self, *args, **kwargs):
        return self._run(self.jitted, args, kwargs)

    def lower(self, *args, **kwargs):  # jitted.lower on the arguments as the host step leaves them
        return self._run(self.jitted.lower, args, kwargs)

    def _run(self, program: Callable, args: tuple, kwargs: dict):
        try:
            new_args, new_kwargs = self._host(args, kwargs)
            return program(*new_args, **new_kwargs)
        except Exception:
            self._diagnose(args, kwargs)  # the error path only: a correct call never pays for it
            raise

    def _host(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The host step (module docstring): the arguments as ``jitted`` gets them."""
        one = self._one
        if args:
            args = (*map(one, self._positional, args), *args[len(self._positional):])
        if kwargs:
            kwargs = {name: one(name, value) for name, value in kwargs.items()}
        rules, check = self._rules, self._check
        if rules:  # the annotations' rules: only a given value can break its rule
            for name, value in (*zip(self._positional, args, strict=False), *kwargs.items()):
                if value is not None and name in rules:
                    _checks.check_concrete(value, name, *rules[name])
        if check is not None and (self._reads is None or not self._reads.isdisjoint(kwargs)
                                  or not self._reads.isdisjoint(self._positional[:len(args)])):
            arguments = {**self._defaults, **dict(zip(self._positional, args, strict=False)),
                         **kwargs}
            if self._required <= arguments.keys():  # else jit's own TypeError names the missing
                check(arguments)
        return args, kwargs

    def _one(self, name: str, value):
        """One argument through step 1 of the host step."""
        if name in self._static:
            return _checks.static_value(value, name, name in self._bools)
        if isinstance(value, jax.Array):  # narrowed when it was made, or traced: nothing to do
            return value
        convert = self._convert.get(name)
        if convert is None:
            return _checks.host_value(value, name)
        if value is None or (name in self._traced and type(value) not in (list, tuple)
                             and not isinstance(value, (np.ndarray, np.generic))):
            return value  # the program converts a Groups (and JAX ids: no second dispatch)
        return convert(_checks.host_value(value, name, exact=True))

    def _diagnose(self, args: tuple, kwargs: dict) -> None:
        """After a failed call: the error a user can act on, where there is one."""
        params, function = self.signature.parameters, self.__name__
        for name in kwargs.keys() - params.keys():
            raise unexpected_keyword(function, name, self._hints)
        for name, value in [*zip(self._positional, args, strict=False), *kwargs.items()]:
            _checks.reject_torch(value, name, function)
            option = getattr(type(value), "_credax_option", None)
            if option is not None and option != name:
                where = (f"pass it by keyword, `{option}=`" if option in params
                         else f"this function takes no `{option}=`")
                raise TypeError(f"`{name}` got a credax.{type(value).__name__}, an options value: "
                                f"{where} (a preset given positionally lands on `{name}`).")
            note = str(params[name].annotation)  # None is a mistake for a number (not Optional)
            if value is None and name not in self._static and "None" not in note and (
                    type(params[name].default) in (int, float) or note.startswith(("float", "int"))
                    or name in self._rules):
                raise TypeError(f"`{name}` must be a number; got None (a null in a config?). Leave "
                                "it out for its default.")
            for convert in {self._convert.get(name), self._traced.get(name)} - {None}:
                try:  # a malformed Groups or normalization, named
                    _ = value is None or convert(value)
                except Exception as error:
                    if f"`{name}`" in str(error):
                        raise error from None

    def with_body(self, body: Callable) -> PublicFunction:
        """The same entry (static options, conversions, checks, replication) around ``body``,
        which takes the same arguments."""
        return PublicFunction(body, **self._declared)

    def __get__(self, instance, owner=None):
        # As a function: binds as a method; inspect and pydoc treat the entry as a routine.
        return self if instance is None else types.MethodType(self, instance)

    def __reduce__(self):
        return self.__qualname__  # pickled and copied as a function is: by its qualified name

    def __repr__(self) -> str:
        return f"<credax public function {self.__module__}.{self.__qualname__}>"


def jit_public(*, static_argnames: tuple[str, ...] = (), convert: Mapping[str, Callable] | None = None,
               check: Callable | None = None, replicate: bool = False,
               hints: Mapping[str, str] | None = None, traced: Mapping[str, Callable] | None = None
               ) -> Callable[[Callable], PublicFunction]:
    """Decorator for public functions: the body becomes a :class:`PublicFunction`.

    Args:
      static_argnames: options that change the program (strings, bools, shapes).
      convert: ``{argument: converter}`` run on the host before the program (``None`` passes;
        so do JAX arrays of an argument that is also ``traced``); implies ``replicate``.
      check: called with the arguments before the program, for a rule relating several
        arguments (a hyperparameter's own rule is its annotation); raises on concrete values that
        break it. It declares what it :func:`credax._checks.reads`; without the declaration it
        runs on every call.
      replicate: replicate Explicit-mesh-sharded array arguments in the trace (turn scans, role
        tables, per-group scatters); row-wise functions keep their batch sharding.
      hints: ``{keyword: sentence}`` added to the ``TypeError`` of an unknown keyword.
      traced: ``{argument: converter}`` run inside the program (group ids → ``Groups``).
    """
    return functools.partial(PublicFunction, static_argnames=static_argnames, convert=convert,
                             check=check, replicate=replicate, hints=hints, traced=traced)

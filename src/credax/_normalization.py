"""Normalization: the options of every group normalisation, as one immutable value.

Every estimator that normalises within groups takes exactly one of these as ``normalization=``
(the presets of ``credax.presets`` are instances); nothing else passes normalisation options. The
arithmetic that applies it is ``_grouping.normalize_with_groups``.
"""

from __future__ import annotations

import sys
import warnings
from typing import Literal, get_args

import numpy as np

from . import _checks
from ._checks import NonNegative
from ._loss_options import OptionsValue, check_fields

# The static choices: each field's annotation is its Literal, the tuple constant its modes.
Singleton = Literal["zero", "raw"]
SINGLETON_MODES = get_args(Singleton)
EpsMode = Literal["add", "sqrt"]
EPS_MODES = get_args(EpsMode)
ScaleMode = Literal["group", "batch", "none"]
SCALE_MODES = get_args(ScaleMode)
_DDOF_MAX = int(_checks.I32.max)
_DEPRECATED_SCALE = {True: "group", False: "none"}


def _warn_deprecated(message: str) -> None:
    """A ``DeprecationWarning`` attributed to the first caller outside credax (so it is shown)."""
    frame, level = sys._getframe(1), 2  # level 2 is the frame that called _warn_deprecated
    while frame is not None and frame.f_globals.get("__name__", "").startswith("credax"):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


class Normalization(OptionsValue):
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

    Every estimator that normalises within groups takes one as ``normalization=``, the only way
    to pass these options (no estimator takes them as loose keywords); the presets of
    ``credax.presets`` are instances. It is a pytree: ``eps`` is its only leaf (it may be traced,
    so a schedule does not recompile), the other fields are static. It is not a mapping:
    ``f(**credax.presets.VERL)`` is a ``TypeError``; write ``f(normalization=credax.presets.VERL)``.

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
      ValueError: an unknown ``scale``, ``eps_mode`` or ``singleton``; a negative ``ddof`` or one
        beyond int32; a concrete ``eps`` that is negative, not finite, or (x64 off) beyond
        float32's range.
      TypeError: ``center`` / ``leave_one_out`` not bools, ``ddof`` not an int; a subclass
        (``Normalization`` is final).
      AttributeError: setting or deleting a field (it is immutable: use ``replace``).

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
      >>> credax.presets.TRL.replace(scale="batch").scale
      'batch'
    """

    # The keyword an options value belongs to: given for another argument (a preset passed
    # positionally lands on `mask`), the public entry's diagnosis names both.
    _credax_option = "normalization"
    _EXAMPLE = "credax.presets.VERL"
    _check = staticmethod(lambda values: _checked_fields(values))  # read at each call (tests count it)

    def __init__(
        self,
        *,
        center: bool = True,
        scale: ScaleMode = "group",  # the deprecated True / False become a mode before the check
        ddof: int = 1,  # static: its rule (an int, 0 to int32's max) is _checked_fields'
        eps: NonNegative = 1e-6,
        eps_mode: EpsMode = "add",
        singleton: Literal[Singleton, "center"] = "zero",  # "center": deprecated
        leave_one_out: bool = False,
    ):
        values = dict(locals())  # the fields, as given (one spelling: the signature)
        del values["self"]
        if isinstance(scale, bool | np.bool_):
            values["scale"] = _DEPRECATED_SCALE[bool(scale)]
            _warn_deprecated(f"`scale={bool(scale)}` is deprecated; use `scale={values['scale']!r}` "
                             "(the same normalisation).")
        values = _checked_fields(values)
        if singleton == "center":
            _warn_deprecated("`singleton='center'` is deprecated; use `singleton='zero'` (the same "
                             "result for ddof <= 1: a set of one centred is 0).")
        if not center:
            _warn_deprecated(
                "`center=False` is deprecated (no credax estimator or preset uses it) and will be "
                "removed. Replacement: with scale='none' it returns x unchanged, use "
                "`jnp.where(mask, x, 0)`; an uncentred std division has no replacement."
            )
        self._fill(values, checked=True)

    # The fields: the keywords above. `_checked`: built by the constructor (or a copy), so its
    # fields need no check on use; tree_unflatten builds unchecked values (see as_normalization).
    __slots__ = (*__init__.__annotations__, "_checked")


# The fields of Normalization (an estimator takes them only inside one `normalization=` value).
NORMALIZE_KEYS = Normalization._FIELDS
# The TypeError of a removed loose keyword (`scale=...` on an estimator) says where it went.
MOVED_TO_NORMALIZATION = {
    key: (f"Normalisation options are one value: `normalization=credax.Normalization({key}=...)` "
          "(or a preset such as credax.presets.VERL), on the estimators that normalise.")
    for key in NORMALIZE_KEYS
}


def _checked_fields(values: dict) -> dict:
    """The fields of a Normalization checked: the rules its constructor's annotations declare
    (:func:`check_fields`) and ``ddof``'s (a static int within int32). Every way to
    get a Normalization goes through it: the constructor (``replace`` too), copies and pickles
    when they are built, an unflattened value (``tree_map``, a transformation's output) when
    :func:`as_normalization` meets it at a call. No warnings here: deprecated spellings are
    allowed and warned about by the constructor only.

    ``eps`` is a non-negative finite real scalar when concrete; a traced ``eps`` only needs a real
    dtype (its value is checked by no one: the normalisation's NaN guard covers it).
    """
    out = check_fields(values, Normalization._FIELD_RULES)
    out["ddof"] = _checks.check_static_int(values["ddof"], "ddof", minimum=0)
    if out["ddof"] > _DDOF_MAX:  # counts are int32: a larger ddof overflows inside the trace
        raise ValueError(f"`ddof` must be <= {_DDOF_MAX} (counts are int32; any ddof >= the "
                         f"set size already makes every set a singleton); got {out['ddof']}.")
    return out


def as_normalization(value, name: str = "normalization", *, default: Normalization | None = None
                     ) -> Normalization | None:
    """``value`` checked as the ``normalization=`` argument of an estimator: a
    :class:`Normalization`, or ``None`` (``default``: the estimator's own). The public entry
    converts the argument with it on the host before tracing; the bodies call it again inside the
    trace (``_grouping.normalization_or``), where the value has been unflattened.

    A value the constructor built (or ``replace``, a copy, a pickle) was checked then and is
    returned as it is, so an ordinary call pays one attribute read; one that ``tree_unflatten``
    built (``tree_map``, a transformation's output, hand-made aux data) is checked by
    :func:`_checked_fields` here, at every call.

    Raises:
      TypeError: anything else, naming ``name`` (a dict of fields, a preset's name, a loss preset).
      ValueError: an unflattened value whose fields break the constructor's rules.
    """
    return Normalization.take(value, name, default)

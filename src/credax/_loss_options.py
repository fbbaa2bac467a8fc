"""LossOptions: the options of the clipped policy loss, as one immutable value.

:func:`credax.policy_loss`, :func:`credax.policy_loss_from_hidden` and
``credax.nnx.policy_loss_fn`` take exactly one of these as ``options=`` (the loss presets of
``credax.presets`` are instances); the per-token arrays of a batch (``ref_logp``, ``token_turn``,
``rollout_logp``, ``entropy``) stay arguments of their own. The arithmetic that applies it is
``_losses._policy_loss_body``. It is built like :class:`credax.Normalization`: static choices are
the pytree's aux data (they change the program), numeric fields its leaves (they may be traced,
so a schedule never recompiles), every concrete value checked when the value is built.
"""

from __future__ import annotations

import math
import typing
from typing import Annotated, Literal

import jax
import numpy as np

from . import _checks
from ._checks import Finite, NonNegative, Positive, Rule, Scalar

# The static choices: each field's annotation is its Literal, the tuple constant its modes.
AggMode = Literal[
    "token-mean",
    "token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
]
AGG_MODES = typing.get_args(AggMode)
KlEstimator = Literal["k1", "k2", "k3", "abs"]
KL_ESTIMATORS = typing.get_args(KlEstimator)
Level = Literal["token", "sequence"]  # where the ratio, or the rollout correction, is computed
RATIO_LEVELS = ROLLOUT_IS_LEVELS = typing.get_args(Level)
# The per-token objective (``_losses._surrogate``): PPO's clipped ratio, or one of the 2025-26
# alternatives TRL 1.16 and Liger 0.8.5 ship (LUSPO is "clip" with a sequence ratio and the
# length-weighted `seq-mean-token-sum` aggregation: ``presets.trl_loss("luspo")``).
Surrogate = Literal["clip", "cispo", "sapo", "vespo"]
SURROGATES = typing.get_args(Surrogate)
# verl's clamp of the log-ratio before exp (core_algos ``compute_policy_loss_vanilla``, ``kl_penalty``).
LOG_RATIO_CLAMP = 20.0
# VESPO's bounds of the sequence log-weight: [log 1e-8, 20] (the paper's code, TRL, Liger).
VESPO_LOG_WEIGHT_MIN = math.log(1e-8)

# Each surrogate's own numeric fields, with their defaults (TRL 1.16's; CISPO's cap is ScaleRL's
# ε_max, TRL falls back to `epsilon`). They are None (no leaf) unless their surrogate is chosen.
SURROGATE_FIELDS = {
    "clip": {},
    "cispo": {"cispo_max": 5.0},
    "sapo": {"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05},
    "vespo": {"vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0,
              "vespo_lambda_neg": 2.0},
}
NOT_A_MAPPING = ("argument after ** must be a mapping, not {kind}: a preset is one value, passed "
                 "whole as `{keyword}=` (e.g. `{keyword}={example}`); `.replace(field=...)` changes a field "
                 "and `.asdict()` gives the fields.")


class OptionsValue:
    """What both options values (:class:`credax.Normalization`, :class:`LossOptions`) share: an
    immutable, final pytree with equality by fields, not a mapping (``**preset`` explains the
    keyword instead), whose fields :meth:`_check` checks.

    A class declares each field once, as a keyword of its ``__init__`` (``__slots__`` lists
    them): its annotation is the field's rule (``Positive``, ``Literal[...]``, ``bool``; ``| None``
    where ``None`` switches it off), read by :func:`_checks.annotated_fields` into
    ``_FIELD_RULES`` for :func:`check_fields`, and its place in the pytree: a ``bool``, ``int`` or
    ``Literal`` field is aux data (``_STATIC``: a Python value, it changes the program), every
    other a leaf (``_LEAVES``: it may be traced). It sets ``_credax_option`` (the keyword it is
    passed as: the public entry's diagnosis reads it too) and ``_EXAMPLE`` (a preset) for the
    messages, and ``_check(values) -> values``. Values the constructor, ``replace``, a copy or a
    pickle built are checked then (``_checked``); one ``tree_unflatten`` built (under a
    transformation the leaves may be tracers) is checked at its next use (:meth:`take`)."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs):
        if OptionsValue not in cls.__bases__:
            raise TypeError(f"credax.{cls.__mro__[1].__name__} cannot be subclassed (it is a "
                            "registered pytree of checked fields); build one with "
                            f"`credax.{cls.__mro__[1].__name__}(...)` or `preset.replace(...)`.")
        super().__init_subclass__(**kwargs)
        hints = typing.get_type_hints(cls.__init__)  # the fields, in constructor order
        cls._FIELDS, cls._FIELD_RULES = tuple(hints), _checks.annotated_fields(cls.__init__)
        cls._STATIC = tuple(k for k, hint in hints.items()
                            if hint in (bool, int) or typing.get_origin(hint) is Literal)
        cls._LEAVES = tuple(k for k in hints if k not in cls._STATIC)
        jax.tree_util.register_pytree_node_class(cls)

    def _fill(self, values: dict, *, checked: bool):
        """Write the fields (``checked``: they passed :meth:`_check`); returns ``self``."""
        for key in self._FIELDS:
            object.__setattr__(self, key, values[key])
        object.__setattr__(self, "_checked", checked)
        return self

    @classmethod
    def _build(cls, values: dict, *, checked: bool):
        return object.__new__(cls)._fill(values, checked=checked)

    @classmethod
    def take(cls, value, name: str, default=None):
        """``value`` as the argument ``name``: an instance (checked unless its constructor built
        it), or ``None`` (``default``); anything else is a ``TypeError`` naming ``name``."""
        if value is None:
            return default
        if isinstance(value, cls):
            if not value._checked:  # rebuilt by tree_unflatten (tree_map, a transformation's output)
                cls._check(value.asdict())
            return value
        if isinstance(value, OptionsValue):
            hint = (f" (a {type(value).__name__} is the `{value._credax_option}=` value; `{name}` takes a "
                    f"credax.{cls.__name__})")
        else:
            hint = (f" (a mapping is not accepted: build `credax.{cls.__name__}(**fields)`)"
                    if hasattr(value, "items") else "")
        raise TypeError(f"`{name}` must be a credax.{cls.__name__} (e.g. {cls._EXAMPLE}) "
                        f"or None; got {type(value).__name__}{hint}.")

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable; use `.replace({name}=...)`.")

    def __delattr__(self, name):
        # Without this, `del presets.VERL.eps` would empty a slot of a preset every caller shares.
        raise AttributeError(f"{type(self).__name__} is immutable: `{name}` cannot be deleted; use "
                             "`.replace(...)` for a changed copy.")

    def replace(self, **changes):
        """A copy with some fields changed (checked, and warned about, as in the constructor)."""
        unknown = set(changes) - set(self._FIELDS)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(unknown)}; fields: "
                            f"{list(self._FIELDS)}.")
        return type(self)(**{**self.asdict(), **changes})

    def asdict(self) -> dict:
        """The fields as a new dict (``type(v)(**v.asdict())`` rebuilds ``v``)."""
        return {k: getattr(self, k) for k in self._FIELDS}

    def keys(self):
        # Defined only to explain `**preset`: Python calls keys() for `f(**x)` and dict(x).
        raise TypeError(NOT_A_MAPPING.format(kind=type(self).__name__, keyword=self._credax_option,
                                             example=self._EXAMPLE))

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.asdict() == other.asdict()

    __hash__ = None  # equal fields, equal options; unhashable, like a dict

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._FIELDS)
        return f"{type(self).__name__}({fields})"

    def __reduce__(self):
        # copy, deepcopy and pickle rebuild through the checks (no deprecation warning again);
        # the default protocol would set the slots through the refusing __setattr__.
        return (_rebuild, (type(self), self.asdict()))

    def tree_flatten(self):
        return (tuple(getattr(self, k) for k in self._LEAVES),
                tuple(getattr(self, k) for k in self._STATIC))

    @classmethod
    def tree_unflatten(cls, static, children):
        # No check here: under a transformation the leaves may be tracers or sentinels. Hand-made
        # aux data of the wrong length is named (zip's "argument 2 is shorter" would name nothing).
        if len(tuple(static)) != len(cls._STATIC) or len(tuple(children)) != len(cls._LEAVES):
            raise ValueError(f"{cls.__name__}.tree_unflatten: the aux data must hold the "
                             f"{len(cls._STATIC)} static fields {list(cls._STATIC)} and the "
                             f"children the leaves {list(cls._LEAVES)}; got {len(tuple(static))} "
                             f"fields and {len(tuple(children))} children.")
        values = dict(zip(cls._STATIC + cls._LEAVES, (*static, *children), strict=True))
        return cls._build(values, checked=False)


def _rebuild(cls, values: dict) -> OptionsValue:
    return cls._build(cls._check(values), checked=True)


def check_fields(values: dict, rules: dict) -> dict:
    """The field check of an options value by the ``rules`` its ``__init__`` annotations declare
    (``_FIELD_RULES``, :func:`_checks.annotated_fields`): each ``Literal`` field among its modes,
    the ``bool`` ones Python bools (they change the program), each field of a :class:`_checks.Rule`
    a real scalar (:func:`_checks.option_number`) whose concrete value obeys it as a double and in
    float32 (JAX's dtype without x64); ``None`` passes where the annotation admits it. Returns the
    values as stored."""
    for key, (rule, _) in rules.items():
        if type(rule) is tuple:  # a Literal's modes
            _checks.check_option(values[key], key, rule)
    bools = [key for key, (rule, _) in rules.items() if rule is bool]
    if any(not isinstance(values[key], bool) for key in bools):
        names, got = " and ".join(f"`{k}`" for k in bools), ", ".join(f"{k}={values[k]!r}" for k in bools)
        what = "a Python bool (it changes" if len(bools) == 1 else "Python bools (they change"
        raise TypeError(f"{names} must be {what} the program); got {got}.")
    out = dict(values)
    for key, (rule, optional) in rules.items():
        if not isinstance(rule, Rule) or (out[key] is None and optional):
            continue
        out[key], v = _checks.option_number(out[key], key)
        if v is not None and not rule.ok(v):
            raise ValueError(f"`{key}` must {rule.requirement}; got {v}.")
        if v is not None and not jax.config.jax_enable_x64 and not rule.ok(float(np.float32(v))):
            # e.g. clip_high=1e-50 is 0 in float32, clip_low=1 - 1e-9 is 1: the rule fails there.
            raise ValueError(f"`{key}` must {rule.requirement} in float32 (JAX computes in float32 "
                             f"without `jax_enable_x64`); got {v!r}, {float(np.float32(v))!r} in "
                             "float32.")
    return out


# The rule of a global denominator (a LossOptions field, `aggregate`'s and `value_loss`'s argument).
# A concrete count of 0 (or inf) is a bug upstream; a traced 0 (a psum over empty masks) still
# gives loss 0 with a zero gradient.
NORMALIZER = Rule(lambda v: v > 0 and math.isfinite(v),
                          "be a positive, finite token or sequence count")
Normalizer = Annotated[Scalar, NORMALIZER]


def check_agg(agg: str, normalizer, name: str = "agg") -> None:
    """An aggregation mode ``name`` and the ``normalizer`` it needs (or refuses)."""
    _checks.check_option(agg, name, AGG_MODES)
    if agg == "seq-mean-token-sum-norm" and normalizer is None:
        raise ValueError(
            f"`{name}='seq-mean-token-sum-norm'` (Dr. GRPO) needs `normalizer`: the constant the "
            "token sums are divided by, e.g. number of sequences × max response length. It has "
            "no default on purpose: a padded width that changes with the batch is not a constant.")
    if agg == "token-sum" and normalizer is not None:
        raise ValueError(f"`{name}='token-sum'` has no denominator; do not pass `normalizer`.")


# The fields' own rules (each read from its annotation in LossOptions.__init__, where the other
# numeric fields name _checks' shared ones). Each value is a double already known to be a number;
# ±inf passes only where a rule allows it.
CLIP_LOW = Rule(lambda v: 0 < v < 1, "lie in (0, 1) (the ratio's lower bound is 1 - clip_low)")
DUAL_CLIP = Rule(lambda v: v > 1, "be > 1 (it caps the ratio of negative-advantage tokens; "
                 "`dual_clip=None` disables it)")
RATIO_CAP = Rule(lambda v: v > 1 and math.isfinite(v),
                 "be > 1 and finite (TRL's `delta`; `ratio_cap=None` disables it)")
KL_CLAMP = Rule(lambda v: v > 0, "be > 0 (or None)")
CISPO_MAX = Rule(lambda v: 0 < v and math.isfinite(v),
                 "be positive and finite (the cap of CISPO's ratio weight, TRL's `epsilon_high`)")


def _check_clamp(clamp) -> tuple | object:
    """``log_ratio_clamp``: a bound ``c > 0`` or a pair ``(lo, hi)``, ``lo < 0 < hi`` (±inf
    allowed); a list becomes a tuple (the same pytree)."""
    if isinstance(clamp, tuple | list):
        if len(clamp) != 2:
            raise ValueError(f"`log_ratio_clamp` must be a bound c or a pair (lo, hi); got {clamp!r}.")
        (lo_value, lo), (hi_value, hi) = (_checks.option_number(c, "log_ratio_clamp") for c in clamp)
        if (lo is not None and not lo < 0) or (hi is not None and not hi > 0):
            raise ValueError("`log_ratio_clamp` must be (lo, hi) with lo < 0 < hi (lo may be -inf, "
                             f"hi inf); got {tuple(clamp)!r}.")
        return lo_value, hi_value
    clamp, v = _checks.option_number(clamp, "log_ratio_clamp")
    if v is not None and not v > 0:
        raise ValueError(f"`log_ratio_clamp` must be > 0; got {v}.")
    return clamp


def checked_fields(values: dict) -> dict:
    """The fields of a LossOptions, each checked (concrete values only; traced ones as they are):
    the annotations' rules (:func:`check_fields`) for the modes, ``kl_ratio_weight`` and the
    numbers, the surrogates' own fields, the clamp, and the pairs that exclude each other."""
    values = dict(values)
    _checks.check_option(values["surrogate"], "surrogate", SURROGATES)  # before its fields
    for surrogate, fields in SURROGATE_FIELDS.items():
        for key, default in fields.items():
            if surrogate == values["surrogate"]:
                values[key] = default if values[key] is None else values[key]
            elif values[key] is not None:
                raise ValueError(f"`{key}` is a field of `surrogate={surrogate!r}`; with "
                                 f"`surrogate={values['surrogate']!r}` it must be None (pass "
                                 f"`surrogate={surrogate!r}`, or `{key}=None`).")
    out = check_fields(values, LossOptions._FIELD_RULES)
    out["log_ratio_clamp"] = _check_clamp(values["log_ratio_clamp"])
    if values["surrogate"] != "clip":
        for key in ("dual_clip", "ratio_cap"):
            if values[key] is not None:
                raise ValueError(f"`{key}` bounds the clipped surrogate; `surrogate="
                                 f"{values['surrogate']!r}` has no clip to bound (TRL and Liger "
                                 "ignore `delta` there): leave it None.")
    if values["ratio_cap"] is not None and values["dual_clip"] is not None:
        raise ValueError("`ratio_cap` (TRL's delta) and `dual_clip` (verl's dual clip) both bound "
                         "the loss of negative-advantage tokens; pass one of them.")
    check_agg(values["agg"], values["normalizer"])
    return out


class LossOptions(OptionsValue):
    """The options of the clipped policy loss: one immutable value (presets are instances).

    Taken as ``options=`` by :func:`credax.policy_loss`, :func:`credax.policy_loss_from_hidden`
    and ``credax.nnx.policy_loss_fn``; the fields and their meaning are those documented in
    :func:`credax.policy_loss`. It is a pytree: the numeric fields are its leaves (each may be
    traced, so a schedule of ``clip_low`` or ``kl_coef`` does not recompile; ``None`` fields have
    no leaf), the static choices (``agg``, ``kl_estimator``, ``ratio``, ``rollout_is``,
    ``kl_ratio_weight``, ``surrogate``) its aux data. It is not a mapping: ``policy_loss(..., **preset)`` is a
    ``TypeError`` that says to write ``options=preset``.

    Attributes:
      clip_low, clip_high: ratio bounds ``1 - clip_low`` and ``1 + clip_high``.
      dual_clip: ``None`` or ``c > 1``; ratio_cap: ``None`` or ``δ > 1`` (TRL's ``delta``).
      normalizer: ``None`` or the global denominator of :func:`credax.aggregate`.
      kl_coef, kl_clamp: weight of the KL term (``>= 0``) and the optional bound of its value.
      rollout_is_threshold: truncation of the rollout-correction weights (``> 0``).
      entropy_coef: weight of the entropy bonus.
      log_ratio_clamp: ``c > 0`` or ``(lo, hi)`` with ``lo < 0 < hi``.
      agg, kl_estimator, ratio, rollout_is: the static modes; kl_ratio_weight: a static bool.
      surrogate: static; ``"clip"`` (PPO/GRPO/DAPO/GSPO, and LUSPO with its aggregation),
        ``"cispo"``, ``"sapo"`` or ``"vespo"``: see :func:`credax.policy_loss`.
      cispo_max: CISPO's cap of the ratio weight (``> 0``, default 5.0: ScaleRL's ``ε_max``;
        TRL's ``epsilon_high``).
      sapo_tau_pos, sapo_tau_neg: SAPO's gate temperatures for ``A > 0`` and ``A <= 0`` (``> 0``,
        default 1.0 and 1.05).
      vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg: VESPO's gamma shape
        (``k >= 0``) and rate (``λ > 0``) for ``A >= 0`` and ``A < 0`` (default 2, 3, 3, 2).
        A surrogate's own fields are ``None`` unless it is the chosen ``surrogate`` (then ``None``
        takes the default): ``LossOptions(surrogate="sapo").sapo_tau_neg`` is 1.05, and
        ``LossOptions(cispo_max=5.0)`` (the surrogate left at ``"clip"``) is an error naming it.

    Raises:
      ValueError: an unknown mode; a concrete number out of its range, NaN, or finite as a double
        but beyond float32 (without x64); ``ratio_cap`` with ``dual_clip``; either of them with a
        ``surrogate`` other than ``"clip"``; a surrogate's field with another surrogate; ``agg``
        and ``normalizer`` that do not go together.
      TypeError: a number given as ``None`` (where ``None`` does not switch it off), a bool or a
        string; ``kl_ratio_weight`` not a Python bool (``"false"`` included).

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> opts = credax.LossOptions(clip_high=0.28, dual_clip=3.0)
      >>> opts.clip_low, opts.clip_high, opts.agg
      (0.2, 0.28, 'token-mean')
      >>> credax.presets.VERL_LOSS.replace(clip_high=0.28).clip_high
      0.28
      >>> lp = jnp.log(jnp.array([[1.5, 0.5]]))
      >>> out = credax.policy_loss(lp, jnp.zeros((1, 2)), jnp.array([1.0]), jnp.ones((1, 2), bool),
      ...                          options=opts)
      >>> round(float(out.loss), 4)   # (-1.28 - 0.5) / 2: the high clip binds at 1.28
      -0.89
    """

    _credax_option = "options"  # given for another argument, the entry's diagnosis names both
    _EXAMPLE = "credax.presets.VERL_LOSS"
    _check = staticmethod(lambda values: checked_fields(values))

    def __init__(
        self,
        *,
        clip_low: Annotated[Scalar, CLIP_LOW] = 0.2,
        clip_high: Positive = 0.2,
        dual_clip: Annotated[Scalar, DUAL_CLIP] | None = None,
        ratio_cap: Annotated[Scalar, RATIO_CAP] | None = None,
        normalizer: Normalizer | None = None,
        kl_coef: NonNegative = 0.0,
        kl_clamp: Annotated[Scalar, KL_CLAMP] | None = None,
        rollout_is_threshold: Positive = 2.0,
        entropy_coef: Finite = 0.0,
        log_ratio_clamp: Scalar | tuple[float, float] = LOG_RATIO_CLAMP,  # _check_clamp's rule
        agg: AggMode = "token-mean",
        kl_estimator: KlEstimator = "k3",
        ratio: Level = "token",
        rollout_is: Level = "token",
        kl_ratio_weight: bool = False,
        surrogate: Surrogate = "clip",
        # A surrogate's own fields: None unless it is chosen (then None takes SURROGATE_FIELDS').
        cispo_max: Annotated[Scalar, CISPO_MAX] | None = None,
        sapo_tau_pos: Positive | None = None,
        sapo_tau_neg: Positive | None = None,
        vespo_k_pos: NonNegative | None = None,
        vespo_lambda_pos: Positive | None = None,
        vespo_k_neg: NonNegative | None = None,
        vespo_lambda_neg: Positive | None = None,
    ):
        values = dict(locals())  # the fields, as given (one spelling: the signature)
        del values["self"]
        self._fill(checked_fields(values), checked=True)

    __slots__ = (*__init__.__annotations__, "_checked")  # the fields: the keywords above


DEFAULT = LossOptions()
# The fields, as the signature orders them: numeric (pytree leaves, may be traced), static (aux).
LOSS_OPTION_KEYS = LossOptions._FIELDS
NUMERIC_KEYS = LossOptions._LEAVES
STATIC_KEYS = LossOptions._STATIC
# The TypeError of a removed loose keyword (`clip_low=...` on policy_loss) says where it went.
MOVED_TO_LOSS_OPTIONS = {
    key: (f"Policy-loss options are one value: `options=credax.LossOptions({key}=...)` (or a "
          "preset such as credax.presets.VERL_LOSS, `preset.replace(...)` to change a field).")
    for key in LOSS_OPTION_KEYS
}


def as_loss_options(value, name: str = "options") -> LossOptions:
    """``value`` checked as the ``options=`` argument of the policy loss, on the host before
    tracing: a :class:`LossOptions` (checked unless its constructor built it), or ``None`` (the
    defaults).

    Raises:
      TypeError: anything else, naming ``name`` (a dict of fields, a ``Normalization``).
    """
    return LossOptions.take(value, name, DEFAULT)

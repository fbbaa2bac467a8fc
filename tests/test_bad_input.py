"""Bad input, one table-driven sweep (issue 37, reliability round four; issue 36: tests by subject).

The rule (tests/probes.py): a probe of one function's or one value's bad input lives in that
subject's test file, in its table ``probe``; a table that sweeps one kind of bad input across many
functions is a class of rows here. Every row of :data:`ROWS` is one probe: a call, the bad argument,
and either the exception it must raise (its type, and a regex that must match the message; the
message must also contain the argument's name) or a documented behaviour (a check of the result,
worked by hand in the comment next to it, or compared with an independent NumPy computation). The
rows are filed by class (``CLASSES``; ``test_every_class_has_rows``). The degenerate-input guide
(``docs/guides/degenerate-input.md``) lists every behaviour documented here.

* ``f32``: concrete hyperparameters, and the array inputs of the group statistics, finite as a
  double but beyond float32 (JAX without x64 would make them ``inf``): a ``ValueError`` naming the
  argument before tracing;
* ``null``: ``None`` (a config null) for a numeric hyperparameter: a ``TypeError`` naming it;
* ``int32``: 64-bit index inputs (turn maps, roles, tokens) beyond int32, which JAX would wrap;
* ``range``: concrete hyperparameters out of their range, as NumPy or JAX scalars;
* ``static``: static options given as concrete 0-d arrays (their Python value) or traced (named);
* ``bool``: static bool options given as strings, ints or ``None``: a ``TypeError`` naming the
  option, never read by truthiness (``"false"`` is truthy);
* ``norm``: :class:`credax.Normalization` with a huge ``ddof``, attribute deletion, a subclass,
  hand-made pytree aux data of the wrong length, a preset given where ``mask`` is expected;
* ``logprobs``: ``Turn(logprobs=)`` elements beyond float32, bools and numeric strings;
* ``hgpo``: a ``history`` far above ``K`` (refused before any level is traced);
* ``bridge``: ``credax.verl`` uids as a torch tensor; ``credax.torch`` passing on the
  removed-keyword hint;
* ``checkers``: a deliberately wrong function per checker of ``credax.testing``, which must reject
  it (``check_finite_gradients`` on a group-centred function whose std counts padding);
* ``g2po``: the episode part of a one-trajectory prompt under each pooling, against the NumPy
  restatement of the reference code, and the docstring that states it;
* ``skip``: the rows here that need torch (or verl), and the test files of the torch and verl
  bridges (which hold their probes), skip without them, never fail with an ``ImportError``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import pathlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import Normalization, Rollout, Turn, presets
from tests.probes import INF, NAN
from tests.reference.g2po import g2po_rows, rows_from_padded

CLASSES = ("f32", "null", "int32", "range", "static", "bool", "norm", "logprobs", "hgpo", "bridge",
           "checkers", "g2po", "skip")


@dataclass(frozen=True)
class Row:
    """One probe. ``exc`` set: ``call()`` raises it, its message matches ``match`` and contains
    ``arg``. ``exc`` None: ``check(call())`` asserts the documented behaviour."""

    cls: str
    label: str
    call: Callable[[], object]
    arg: str
    exc: type[BaseException] | None = None
    match: str = ""
    check: Callable[[object], None] | None = None

    @property
    def id(self) -> str:
        return f"{self.cls}.{self.label}"


ROWS: list[Row] = []


def raises(cls, label, call, arg, exc, match=None):
    ROWS.append(Row(cls, label, call, arg, exc, re.escape(f"`{arg}`") if match is None else match))


def behaves(cls, label, call, arg, check):
    ROWS.append(Row(cls, label, call, arg, check=check))


def _is(expected):
    def check(out):
        assert out == expected, out
    return check


# Small inputs, repeated so the module compiles few programs.
R4 = np.array([1.0, 0.0, 0.5, 0.5], np.float32)
IDS4 = np.array([0, 0, 1, 1])
S = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 1.0]], np.float32)
M = np.ones((4, 2), bool)
A = np.array([[1, 2], [1, 3], [1, 2], [1, 2]], np.int32)
ROLES = np.array([[0, 1], [2, 3], [0, 0], [1, 2]], np.int32)
V3 = np.zeros((4, 3), np.float32)
TT3 = np.array([[0, 1, 1], [0, 0, 1], [0, 1, -1], [1, 1, 1]], np.int32)

# The canonical call of each function with numeric hyperparameters, and those hyperparameters.
# (The policy loss, the fused head and the log-prob functions are other branches' this round.)
HYPER: dict[str, tuple[Callable, dict, tuple[str, ...]]] = {
    "adjacent_delta_credit": (lambda **kw: credax.adjacent_delta_credit(S, M, **kw), {}, ("initial",)),
    "best_prior": (lambda **kw: credax.best_prior(S, M, **kw), {}, ("initial",)),
    "discounted_returns": (lambda **kw: credax.discounted_returns(S, M, **kw), {"gamma": 0.9},
                           ("gamma",)),
    "g2po_advantages": (lambda **kw: credax.g2po_advantages(R4, A, M, IDS4, **kw), {},
                        ("gamma", "omega", "invalid_penalty", "success_reward", "step_discount")),
    "gae_advantages": (lambda **kw: credax.gae_advantages(S, S, M, **kw), {}, ("gamma", "lam")),
    "gigpo_advantages": (lambda **kw: credax.gigpo_advantages(R4, S, A, M, IDS4, **kw), {},
                         ("gamma", "omega")),
    "gpg_advantages": (lambda **kw: credax.gpg_advantages(R4, IDS4, **kw), {}, ("f_norm", "alpha")),
    "hgpo_advantages": (lambda **kw: credax.hgpo_advantages(R4, S, A, M, IDS4, **kw), {},
                        ("gamma", "alpha")),
    "hindsight_credit": (lambda **kw: credax.hindsight_credit(S, M, IDS4, **kw), {},
                         ("success_threshold", "initial")),
    "mt_grpo_advantages": (lambda **kw: credax.mt_grpo_advantages(S, R4, M, IDS4, **kw), {},
                           ("turn_coef",)),
    "reinforce_pp_advantages": (lambda **kw: credax.reinforce_pp_advantages(S, M, **kw), {},
                                ("gamma",)),
    "retrospective_credit": (lambda **kw: credax.retrospective_credit(S, M, **kw), {},
                             ("success_threshold", "progress_weight", "preservation_weight",
                              "regression_weight", "initial")),
    "scalar_process_advantages": (lambda **kw: credax.scalar_process_advantages(R4, S, M, **kw),
                                  {"lam": 0.5}, ("lam",)),
    "tcpo_advantages": (lambda **kw: credax.tcpo_advantages(S, M, IDS4, **kw), {},
                        ("success_threshold", "progress_weight", "preservation_weight",
                         "regression_weight", "hindsight_weight", "counterfactual_weight",
                         "initial", "gamma")),
    "triage_advantages": (lambda **kw: credax.triage_advantages(R4, ROLES, M, **kw), {}, ("lam",)),
    "turn_gae_advantages": (lambda **kw: credax.turn_gae_advantages(S, V3, TT3, M, **kw), {},
                            ("gamma", "lam")),
    "unbiased_turn_advantages": (lambda **kw: credax.unbiased_turn_advantages(S, M, IDS4, **kw), {},
                                 ("gamma",)),
    "value_loss": (lambda **kw: credax.value_loss(S, S, S, M, **kw), {}, ("clip",)),
    "vapo_lambda": (lambda **kw: credax.vapo_lambda(M, **kw), {}, ("alpha",)),
}
# Hyperparameters whose default is None (None is the documented "off" / "derive it").
NONE_IS_DEFAULT = {("gpg_advantages", "alpha"), ("value_loss", "clip")}


def _call(fn, base, **kw):
    return lambda: fn(**{**base, **kw})


# ============================================================================================
# Classes f32 and null: every numeric hyperparameter, beyond float32 and as None.
# ============================================================================================

BEYOND_F32 = {"1e39": 1e39, "neg_1e39": -1e39, "np_float64": np.float64(1e39),
              "np_float64_neg": np.float64(-3.5e38)}

for _fn_name, (_fn, _base, _params) in HYPER.items():
    for _p in _params:
        for _label, _value in BEYOND_F32.items():
            # Before: a rule-less or range-only rule (FINITE, NON_NEGATIVE) let 1e39 through and
            # JAX made it inf (best_prior's initial: inf at every turn; GPG's alpha: ±inf, NaN).
            raises("f32", f"{_fn_name}.{_p}.{_label}", _call(_fn, _base, **{_p: _value}), _p,
                   ValueError)
        if (_fn_name, _p) not in NONE_IS_DEFAULT:
            # Before: "None is not a valid value for jnp.array" from inside the trace.
            raises("null", f"{_fn_name}.{_p}", _call(_fn, _base, **{_p: None}), _p, TypeError,
                   rf"`{_p}` must be a number; got None")

# Documented: value_loss(clip=None) is the unclipped loss, mean (v - R)² / 2 (here R = 0).
behaves("null", "value_loss.clip_none_is_unclipped",
        lambda: credax.value_loss(S, S * 0, S * 0, M, clip=None).loss, "clip",
        # 0.5 · mean over the 8 turns of S² = 0.5 · (1 + 0 + 0 + 1 + .25 + .25 + 1 + 1) / 8
        lambda out: np.testing.assert_allclose(out, 0.5 * 4.5 / 8, rtol=1e-6))

# eps of a Normalization, and discount_weights' gamma (a plain function, not an entry).
for _label, _value in BEYOND_F32.items():
    raises("f32", f"Normalization.eps.{_label}", lambda v=_value: Normalization(eps=v), "eps",
           ValueError)  # a negative one is refused as negative (already before)
raises("f32", "Normalization.replace_eps", lambda: presets.VERL.replace(eps=1e39), "eps",
       ValueError, r"`eps`.*float32")
raises("f32", "Normalization.tree_map_eps",
       lambda: credax.grpo_advantages(R4, IDS4, normalization=jax.tree_util.tree_map(
           lambda _: 1e39, presets.TRL)), "eps", ValueError, r"`eps`.*float32")
for _label, _value in BEYOND_F32.items():
    raises("f32", f"discount_weights.gamma.{_label}",
           lambda v=_value: credax.discount_weights(3, v), "gamma", ValueError, r"`gamma`.*float32")
raises("null", "discount_weights.gamma", lambda: credax.discount_weights(3, None), "gamma",
       TypeError)
# An int beyond int32 as a hyperparameter: JAX cannot hold it as a weak int.
raises("f32", "best_prior.initial.int_2_40", lambda: credax.best_prior(S, M, initial=2**40),
       "initial", ValueError, r"`initial`.*int32")


# Documented: the largest float32 itself passes (it is representable).
@lambda f: behaves("f32", "best_prior.initial.f32_max", f, "initial",
                   lambda out: np.testing.assert_array_equal(np.asarray(out)[:, 0],
                                                             np.finfo(np.float32).max))
def _():
    # best_prior's first turn is `initial` itself.
    return credax.best_prior(S, M, initial=float(np.finfo(np.float32).max))


# Array inputs finite in float64 but beyond float32 (x64 off): JAX would cast 1e39 to inf and the
# group would come out NaN with no error (before: validate_rewards checked finiteness in float64
# only). Moved from tests/test_adversarial_r3.py (f32.float64_beyond_float32_*).
BIG = np.array([1e39, -1e39, 0.0, 0.5])
OVERFLOW_CALLS = {
    "grpo": (lambda x: credax.grpo_advantages(x, IDS4), "rewards"),
    "group_normalize": (lambda x: credax.group_normalize(x, IDS4), "x"),
    "rloo": (lambda x: credax.rloo_advantages(x, IDS4), "rewards"),
    "group_mean": (lambda x: credax.group_mean(x, IDS4), "x"),
    "peer_mean": (lambda x: credax.peer_mean(x, IDS4), "x"),
    "shrinkage": (lambda x: credax.shrinkage_advantages(x, IDS4), "rewards"),
    "dead_groups": (lambda x: credax.dead_groups(x, IDS4), "rewards"),
    "validate_rewards": (lambda x: credax.validate_rewards(x, IDS4), "rewards"),
}
for _label, (_fn, _arg) in OVERFLOW_CALLS.items():
    raises("f32", f"array.{_label}", lambda f=_fn: f(BIG), _arg, ValueError,
           r"holds 1e\+39 at index 0.*float32")


# ============================================================================================
# Class int32: 64-bit NumPy index inputs beyond int32 (x64 off): JAX would wrap them
# (2**32 -> 0, a real turn). Moved from tests/test_adversarial_r3.py (ids.int64_beyond_int32_*).
# ============================================================================================

TT_BIG = np.array([[0, 1, 2**32]])
BEYOND_INT32 = {
    "broadcast_token_turn": (lambda: credax.broadcast_to_tokens(np.ones((1, 2), np.float32), TT_BIG),
                             "token_turn"),
    "broadcast_token_turn_uint64": (lambda: credax.broadcast_to_tokens(
        np.ones((1, 2), np.float32), TT_BIG.astype(np.uint64)), "token_turn"),
    "turn_values": (lambda: credax.turn_values(np.ones((1, 3), np.float32), TT_BIG, num_turns=2),
                    "token_turn"),
    "turn_gae": (lambda: credax.turn_gae_advantages(np.ones((1, 2), np.float32),
                                                    np.ones((1, 3), np.float32), TT_BIG,
                                                    np.ones((1, 2), bool)), "token_turn"),
    "turn_surprisal": (lambda: credax.turn_surprisal(np.ones((1, 3), np.float32), TT_BIG,
                                                     num_turns=2), "token_turn"),
    "triage_roles": (lambda: credax.triage_advantages(np.ones(1, np.float32),
                                                      np.array([[0, 2**32 + 1]]),
                                                      np.ones((1, 2), bool)), "roles"),
    "credit_by_role": (lambda: credax.credit_by_role(np.ones((1, 2), np.float32),
                                                     np.array([[1, 2**32 + 1]]),
                                                     np.ones((1, 2), bool)), "roles"),
    "token_logprobs_tokens": (lambda: credax.token_logprobs(np.zeros((1, 3, 4), np.float32),
                                                            np.array([[0, 1, 2**32 + 1]])), "tokens"),
}
for _label, (_call, _arg) in BEYOND_INT32.items():
    raises("int32", _label, _call, _arg, ValueError, r"int32")


# ============================================================================================
# Class range: concrete hyperparameters out of range are refused whatever their type (NumPy,
# JAX). Moved from tests/test_adversarial.py (c3_<label>_<kind>).
# ============================================================================================

Z22 = np.zeros((2, 2), np.float32)
M22 = np.ones((2, 2), bool)
R2 = np.array([1.0, 0.0], np.float32)
IDS2 = np.array([3, 3])
OTHER_HYPER = [
    ("gamma_tcpo", "gamma", 1.5, lambda **kw: credax.tcpo_advantages(Z22, M22, IDS2, **kw)),
    ("gamma_returns", "gamma", -0.1, lambda **kw: credax.discounted_returns(Z22, M22, **kw)),
    ("gamma_gigpo", "gamma", NAN, lambda **kw: credax.gigpo_advantages(R2, Z22, np.zeros((2, 2), int),
                                                                       M22, IDS2, **kw)),
    ("gamma_hgpo", "gamma", 2.0, lambda **kw: credax.hgpo_advantages(R2, Z22, np.zeros((2, 2), int),
                                                                     M22, IDS2, **kw)),
    ("lam_triage", "lam", NAN, lambda **kw: credax.triage_advantages(R2, np.zeros((2, 2), np.int32), M22,
                                                                     **kw)),
    ("lam_process", "lam", INF, lambda **kw: credax.scalar_process_advantages(R2, Z22, M22, **kw)),
    ("turn_coef", "turn_coef", NAN, lambda **kw: credax.mt_grpo_advantages(Z22, R2, M22, IDS2, **kw)),
    ("omega", "omega", INF, lambda **kw: credax.gigpo_advantages(R2, Z22, np.zeros((2, 2), int), M22,
                                                                 IDS2, **kw)),
    ("initial_best_prior", "initial", NAN, lambda **kw: credax.best_prior(Z22, M22, **kw)),
    ("threshold", "success_threshold", NAN, lambda **kw: credax.retrospective_credit(Z22, M22, **kw)),
    ("hindsight_weight", "hindsight_weight", INF, lambda **kw: credax.tcpo_advantages(Z22, M22, IDS2,
                                                                                      **kw)),
    ("kl_clamp_fn", "clamp", -1.0, lambda **kw: credax.kl_divergence(R2, R2, **kw)),
    ("aggregate_normalizer", "normalizer", 0.0, lambda **kw: credax.aggregate(Z22, M22, **kw)),
    ("adjacent_initial", "initial", INF, lambda **kw: credax.adjacent_delta_credit(Z22, M22, **kw)),
]
for _label, _arg, _bad, _fn in OTHER_HYPER:
    for _kind, _make in (("numpy", np.float32), ("jax", jnp.asarray)):
        raises("range", f"{_label}_{_kind}", lambda fn=_fn, arg=_arg, bad=_bad, make=_make: fn(
            **{arg: make(bad)}), _arg, ValueError)


# ============================================================================================
# Class static: static options given as arrays. Moved from tests/test_adversarial.py
# (c7_static_int_as_jax_array, c7_static_traced_is_named, c7_static_array_not_scalar).
# ============================================================================================

# Documented: a concrete 0-d array (NumPy or JAX) is the Python value it holds.
behaves("static", "budget_jax_array", lambda: credax.select_top_surprisal(
    np.array([[0.3, 2.0, 0.7]], np.float32), np.ones((1, 3), bool), budget=jnp.asarray(1)).tolist(),
    "budget", _is([[False, True, False]]))
behaves("static", "before_np_int64_after_jax_array", lambda: credax.judge_windows(
    np.ones((1, 2), bool), before=np.int64(1), after=jnp.asarray(0)).index.tolist(),
    "before", _is([[[-1, 0], [0, 1]]]))
behaves("static", "num_turns_jax_array", lambda: credax.turn_surprisal(
    np.array([[-1.0]], np.float32), np.array([[0]]), num_turns=jnp.asarray(2)).tolist(),
    "num_turns", _is([[1.0, 0.0]]))
raises("static", "traced_budget", lambda: jax.jit(lambda b: credax.select_top_surprisal(
    np.zeros((1, 3), np.float32), np.ones((1, 3), bool), budget=b))(2), "budget", TypeError,
    "`budget` is static")
raises("static", "array_before", lambda: credax.judge_windows(np.ones((1, 2), bool),
                                                               before=np.array([1, 2])),
       "before", TypeError, "`before` is static")


# ============================================================================================
# Class bool: static bool options given as strings, ints or None.
# ============================================================================================

BOOL_OPTIONS = {
    "hgpo_advantages.episode_group": (lambda v: credax.hgpo_advantages(
        R4, S, A, M, IDS4, episode_group=v), "episode_group"),
    "tcpo_advantages.normalize": (lambda v: credax.tcpo_advantages(S, M, IDS4, normalize=v),
                                  "normalize"),
    "triage_advantages.whiten": (lambda v: credax.triage_advantages(R4, ROLES, M, whiten=v), "whiten"),
    "shrinkage_advantages.leave_one_out": (lambda v: credax.shrinkage_advantages(
        R4, IDS4, leave_one_out=v), "leave_one_out"),
    "shrinkage_baseline.leave_one_out": (lambda v: credax.shrinkage_baseline(
        R4, IDS4, leave_one_out=v).baseline, "leave_one_out"),
}
NOT_BOOLS = {"str_false": "false", "str_False": "False", "str_0": "0", "str_empty": "",
             "str_true": "true", "int_0": 0, "int_1": 1, "none": None}

for _key, (_fn, _arg) in BOOL_OPTIONS.items():
    for _label, _value in NOT_BOOLS.items():
        # Before: tcpo's normalize="false" normalised (truthy); triage's whiten="false" whitened.
        raises("bool", f"{_key}.{_label}", lambda f=_fn, v=_value: f(v), _arg, TypeError,
               rf"`{_arg}` must be a (Python )?bool")
    for _label, _value in {"np_bool": np.bool_(False), "jax_bool": jnp.asarray(False)}.items():
        # Documented: a NumPy bool or a concrete 0-d bool array is the Python bool it holds.
        behaves("bool", f"{_key}.{_label}", lambda f=_fn, v=_value: (f(v), f(False)), _arg,
                lambda out: np.testing.assert_array_equal(*(np.asarray(getattr(o, "advantages", o))
                                                            for o in out)))
for _field in ("center", "leave_one_out"):
    for _label in ("str_false", "int_0", "none"):
        raises("bool", f"Normalization.{_field}.{_label}",
               lambda f=_field, v=NOT_BOOLS[_label]: Normalization(**{f: v}), _field, TypeError,
               "must be Python bools")


# ============================================================================================
# Class norm: ddof, deletion, subclasses, hand-made aux data, a preset in the mask's place.
# ============================================================================================

HUGE_DDOF = {"2_31": 2**31, "2_63": 2**63, "1e30": 10**30, "np_int64": np.int64(2**40),
             "np_uint64": np.uint64(2**63)}
for _label, _value in HUGE_DDOF.items():
    # Before: OverflowError from inside jit ("overflow ... parsing an argument").
    raises("norm", f"ddof.{_label}", lambda v=_value: Normalization(ddof=v), "ddof", ValueError,
           r"`ddof` must be <= 2147483647")
raises("norm", "ddof.replace", lambda: presets.VERL.replace(ddof=2**31), "ddof", ValueError)
raises("norm", "ddof.tree_unflatten", lambda: credax.grpo_advantages(
    R4, IDS4, normalization=Normalization.tree_unflatten(
        (True, "group", 2**31, "add", "zero", False), [1e-6])), "ddof", ValueError)


@lambda f: behaves("norm", "ddof.int32_max", f, "ddof",
                   lambda out: np.testing.assert_array_equal(out, np.zeros(4)))
def _():
    # ddof = 2**31 - 1 > every set size: every set is a singleton, 0 (singleton="zero").
    return credax.grpo_advantages(R4, IDS4, normalization=Normalization(ddof=2**31 - 1))


for _field in ("center", "scale", "ddof", "eps", "eps_mode", "singleton", "leave_one_out"):
    # Before: `del` succeeded (the slot emptied); on a preset it broke every later caller.
    def _del_instance(f=_field):
        n = Normalization()
        delattr(n, f)

    def _del_preset(f=_field):
        try:
            delattr(presets.VERL, f)
        finally:
            assert hasattr(presets.VERL, f), f"presets.VERL lost `{f}`"

    raises("norm", f"del_instance.{_field}", _del_instance, _field, AttributeError,
           r"immutable: `\w+` cannot be deleted")
    raises("norm", f"del_preset.{_field}", _del_preset, _field, AttributeError,
           r"immutable: `\w+` cannot be deleted")


def _subclass():
    class MyNormalization(Normalization):  # noqa: F841 - defining it is the probe
        pass


def _subclass_with_slots():
    class Frozen(Normalization):  # noqa: F841
        __slots__ = ()


raises("norm", "subclass", _subclass, "Normalization", TypeError, "cannot be subclassed")
raises("norm", "subclass_slots", _subclass_with_slots, "Normalization", TypeError,
       "cannot be subclassed")

_AUX = tuple(presets.VERL.tree_flatten()[1])
for _label, (_aux, _children) in {"aux_short": (_AUX[:-1], [1e-6]), "aux_long": (_AUX + (1,), [1e-6]),
                                  "aux_empty": ((), [1e-6]), "no_children": (_AUX, []),
                                  "two_children": (_AUX, [1e-6, 1e-6])}.items():
    # Before: zip()'s "argument 2 is shorter than argument 1" (naming nothing), or accepted.
    raises("norm", f"tree_unflatten.{_label}",
           lambda a=_aux, c=_children: Normalization.tree_unflatten(a, c), "Normalization",
           ValueError, r"Normalization\.tree_unflatten: the aux data")

# A preset given positionally where a mask is expected (and by keyword as `mask=`).
POSITIONAL = {
    "grpo_advantages": (lambda p: credax.grpo_advantages(R4, IDS4, p), "mask", True),
    "group_normalize": (lambda p: credax.group_normalize(S, IDS4, p), "mask", True),
    "gdpo_advantages": (lambda p: credax.gdpo_advantages(S, IDS4, p, weights=np.ones(2, np.float32)),
                        "mask", True),
    "gpg_advantages": (lambda p: credax.gpg_advantages(R4, IDS4, p), "mask", False),
    "rloo_advantages": (lambda p: credax.rloo_advantages(R4, IDS4, p), "mask", False),
    "shrinkage_advantages": (lambda p: credax.shrinkage_advantages(R4, IDS4, p), "mask", False),
    "reinforce_pp_baseline_advantages": (lambda p: credax.reinforce_pp_baseline_advantages(
        R4, IDS4, p), "response_mask", True),
    "g2po_advantages": (lambda p: credax.g2po_advantages(R4, A, M, IDS4, p), "action_valid", True),
    "grpo_advantages_keyword": (lambda p: credax.grpo_advantages(R4, IDS4, mask=p), "mask", True),
}
for _key, (_fn, _arg, _takes) in POSITIONAL.items():
    for _preset in ("VERL", "TRL"):
        # Before: "Value 'Normalization(... eps=JitTracer ...)' with dtype ... is not a valid
        # JAX array type" from inside the trace, naming neither argument.
        raises("norm", f"positional.{_key}.{_preset}",
               lambda f=_fn, p=_preset: f(getattr(presets, p)), _arg, TypeError,
               rf"`{_arg}` got a credax\.Normalization.*"
               + ("pass it by keyword, `normalization=`" if _takes else "takes no `normalization=`"))


# ============================================================================================
# Class logprobs: Turn(logprobs=) elements.
# ============================================================================================

def _pad(logprobs):
    return credax.pad_rollouts([Rollout("q", [Turn([5, 6], 1.0, observation=[9], logprobs=logprobs),
                                              Turn([7], 0.0, logprobs=[-2.0])], prompt=[1])])


LOGPROB_ERRORS = {
    # (the bad element at position 1, error, pattern). Before: 1e39 became -inf in old_logp;
    # True became 1.0 and "-0.5" became -0.5 (np.asarray(..., float64) reads both as numbers).
    "1e39": (1e39, ValueError, "float32"),
    "neg_1e39": (-1e39, ValueError, "float32"),
    "np_float64": (np.float64(-1e39), ValueError, "float32"),
    "true": (True, TypeError, "must be a number; got bool"),
    "false": (False, TypeError, "must be a number; got bool"),
    "np_bool": (np.bool_(True), TypeError, "must be a number; got bool"),
    "str_number": ("-0.5", TypeError, "must be a number; got str"),
    "str_nan": ("nan", TypeError, "must be a number; got str"),
    "bytes": (b"-0.5", TypeError, "must be a number; got bytes"),
    "none": (None, TypeError, "must be a number; got NoneType"),
    "complex": (-0.5 + 0j, TypeError, "must be a number; got complex"),
    "nested": ([-0.5], TypeError, "must be a number; got list"),
    "inf": (float("-inf"), ValueError, "must be finite"),
}
for _label, (_value, _exc, _match) in LOGPROB_ERRORS.items():
    raises("logprobs", _label, lambda v=_value: _pad([-0.5, v]), "rollouts[0].turns[0].logprobs[1]",
           _exc, _match)


def _logp_equal(expected):
    def check(out):
        lp = np.asarray(out.batch.old_logp)
        # Row 0's tokens: prompt 1, action 5 6, observation 9, action 7.
        got = lp[np.asarray(out.batch.mask)]
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    return check


# Documented: NumPy scalars, 0-d arrays and the float32 maximum are numbers.
for _label, _value, _f in (("np_float32", np.float32(-1.5), -1.5), ("np_0d", np.array(-1.5), -1.5),
                           ("jax_scalar", jnp.float32(-1.5), -1.5), ("int", -1, -1.0),
                           ("f32_min", -float(np.finfo(np.float32).max),
                            -float(np.finfo(np.float32).max))):
    behaves("logprobs", f"accepted.{_label}", lambda v=_value: _pad([-0.5, v]),
            "rollouts[0].turns[0].logprobs[1]", _logp_equal([-0.5, _f, -2.0]))


def _round_trip_then_pad():
    # Documented: a rollouts file holds any finite double (JSON), as for scores; the float32 batch
    # cannot, so pad_rollouts refuses the value read back, naming the field.
    import tempfile
    path = f"{tempfile.mkdtemp()}/r.jsonl"
    credax.write_rollouts(path, [Rollout("q", [Turn([5], 1.0, logprobs=[1e39])])])
    back = credax.read_rollouts(path)
    assert back[0].turns[0].logprobs == [1e39]
    credax.pad_rollouts(back)


raises("logprobs", "file_round_trip_1e39", _round_trip_then_pad, "rollouts[0].turns[0].logprobs[0]",
       ValueError, "float32")
for _label, _value in (("true", True), ("str_number", "-0.5")):
    # The writer refuses what the reader would (already before this round).
    raises("logprobs", f"write.{_label}", lambda v=_value: credax.write_rollouts(
        "/nonexistent-dir/never-written.jsonl", [Rollout("q", [Turn([5], 1.0, logprobs=[v])])]),
        "rollouts[0].turns[0].logprobs[0]", TypeError, "must be a number to be written")


# ============================================================================================
# Class hgpo: a history far above K.
# ============================================================================================

for _label, _history in (("1e4", 10**4), ("1e9", 10**9), ("K_plus_1", 3)):
    # Before: 10**4 traced ten thousand levels (~0.2 s CPU each, measured: 64 levels 12.5 s).
    raises("hgpo", f"history_{_label}", lambda h=_history: credax.hgpo_advantages(
        R4, S, A, M, IDS4, history=h), "history", ValueError, r"`history` must be <= max\(K, 2\)")
raises("hgpo", "history_K1_3", lambda: credax.hgpo_advantages(
    R4, S[:, :1], A[:, :1], M[:, :1], IDS4, history=3), "history", ValueError)


def _hgpo(history, k=2):
    return credax.hgpo_advantages(R4, S[:, :k], A[:, :k], M[:, :k], IDS4, history=history)


def _same_advantages(pair):
    a, b = pair
    np.testing.assert_array_equal(a.advantages, b.advantages)
    assert not np.asarray(a.informative)[..., -1].any()  # the extra level is always empty


# Documented: history = K adds one level that can never hold a step: the same advantages as K - 1.
behaves("hgpo", "history_K", lambda: (_hgpo(2), _hgpo(1)), "history", _same_advantages)
# The default history (2) stays valid on a batch of one turn, and on no turns.
behaves("hgpo", "default_K1", lambda: (_hgpo(2, k=1), _hgpo(0, k=1)), "history", _same_advantages)
behaves("hgpo", "default_K0", lambda: _hgpo(2, k=0), "history",
        lambda out: (np.asarray(out.levels).shape == (4, 0, 4)) or pytest.fail("shape"))


# ============================================================================================
# Class bridge: credax.verl uids as torch tensors; credax.torch's removed-keyword hint.
# ============================================================================================

def _torch():
    return pytest.importorskip("torch")


def _verl():
    _torch()
    pytest.importorskip("verl")
    import credax.verl as cv
    return cv


def _uids(make):
    return lambda: _verl().uid_to_group_ids(make(_torch())).tolist()


for _label, _make, _want in (
        # Before: every row its own prompt ([0, 1, 2, 3]): iterating a tensor gives 0-d tensors,
        # hashed by identity.
        ("int64", lambda t: t.tensor([5, 5, 7, 7]), [0, 0, 1, 1]),
        ("int32", lambda t: t.tensor([7, 5, 7, 5], dtype=t.int32), [0, 1, 0, 1]),
        ("beyond_int32", lambda t: t.tensor([2**40, 2**40 + 1, 2**40, 5]), [0, 1, 0, 2]),
        ("bool", lambda t: t.tensor([True, False, True, True]), [0, 1, 0, 0]),
        ("float", lambda t: t.tensor([1.5, 1.5, 2.0, 2.0]), [0, 0, 1, 1]),
        ("requires_grad", lambda t: t.tensor([1.0, 2.0, 1.0, 2.0], requires_grad=True), [0, 1, 0, 1]),
        ("empty", lambda t: t.tensor([], dtype=t.int64), [])):
    behaves("bridge", f"verl_uid_tensor.{_label}", _uids(_make), "index", _is(_want))
raises("bridge", "verl_uid_tensor.two_d", lambda: _verl().uid_to_group_ids(
    _torch().zeros(2, 2, dtype=_torch().int64)), "index", ValueError, r"must be 1-D")
raises("bridge", "verl_uid_tensor.meta", lambda: _verl().uid_to_group_ids(
    _torch().empty(4, dtype=_torch().int64, device="meta")), "index", ValueError, "meta tensor")
raises("bridge", "verl_uid_tensor.nan", lambda: _verl().uid_to_group_ids(
    _torch().tensor([1.0, float("nan"), 1.0, 2.0])), "index", ValueError, "NaN")

TORCH_HINT_CALLS = {
    "grpo_advantages": lambda ct, t, kw: ct.grpo_advantages(t.tensor(R4), t.tensor(IDS4), **kw),
    "group_normalize": lambda ct, t, kw: ct.group_normalize(t.tensor(S), t.tensor(IDS4), **kw),
    "mt_grpo_advantages": lambda ct, t, kw: ct.mt_grpo_advantages(
        t.tensor(S), t.tensor(R4), t.tensor(M), t.tensor(IDS4), **kw),
}


def _ct():
    _torch()
    import credax.torch as ct
    return ct


for _fn_name, _fn in TORCH_HINT_CALLS.items():
    for _key, _value in (("center", True), ("scale", "none"), ("ddof", 0), ("eps", 1e-4),
                         ("eps_mode", "sqrt"), ("singleton", "raw"), ("leave_one_out", True)):
        # Before: Python's bare "got an unexpected keyword argument 'eps'" from Signature.bind,
        # without the hint credax's own entry gives (where the keyword went).
        raises("bridge", f"torch_hint.{_fn_name}.{_key}",
               lambda f=_fn, k=_key, v=_value: f(_ct(), _torch(), {k: v}), _key, TypeError,
               rf"credax\.torch\.{_fn_name}\(\) got an unexpected keyword argument '{_key}'\. "
               r"Normalisation options are one value: `normalization=")
raises("bridge", "torch_hint.unknown_keyword", lambda: _ct().grpo_advantages(
    _torch().tensor(R4), _torch().tensor(IDS4), colour=1), "colour", TypeError,
    r"unexpected keyword argument 'colour'")


# ============================================================================================
# Class checkers: a deliberately wrong function per checker of credax.testing.
# ============================================================================================

def _same(ids):
    return ids[:, None] == ids[None, :]


def _centred_std_counts_padding(scores, turn_mask, group_ids):
    """Per-(group, turn) z-score whose mean is right but whose std counts every row of the group,
    padded turns included: the padding leak. Its outputs sum to 0 in every set, so a plain sum's
    gradient is identically 0."""
    same = _same(group_ids).astype(scores.dtype)  # [B, B]
    valid = turn_mask.astype(scores.dtype)
    x = jnp.where(turn_mask, scores, 0.0)
    n = same @ valid
    mu = (same @ x) / jnp.maximum(n, 1.0)
    # Padded entries' own values (clipped: padding can be 1e30) enter the std: the leak.
    dev = jnp.clip(jnp.nan_to_num(scores), -10.0, 10.0) - mu
    var = (same @ (dev * dev)) / jnp.maximum(same.sum(1, keepdims=True) - 1.0, 1.0)
    out = (scores - mu) / jnp.sqrt(var + 1e-2)
    return jnp.where(turn_mask & (n > 1), out, 0.0)


def _centred_padding_leak(scores, turn_mask, group_ids):
    """A correct per-(group, turn) z-score plus a centred padding leak: the first valid member of
    each set gets ``+tanh(p)``, the second ``-tanh(p)``, where ``p`` sums the set's rows' padded
    scores. The leak sums to exactly 0 in every set (integer weights ±1), so the gradient of the
    plain sum is exactly 0 at every padded entry for any values; the outputs still depend on them."""
    same = _same(group_ids)
    valid = turn_mask
    earlier = jnp.tril(same, k=-1).astype(jnp.int32)  # rows j < i of the same group
    rank = earlier @ valid.astype(jnp.int32)  # valid members of the set before row i
    n = same.astype(jnp.int32) @ valid.astype(jnp.int32)
    u = (jnp.where(rank == 0, 1.0, 0.0) - jnp.where(rank == 1, 1.0, 0.0)).astype(scores.dtype)
    padded = jnp.where(turn_mask, 0.0, jnp.clip(jnp.nan_to_num(scores), -10.0, 10.0))
    p = same.astype(scores.dtype) @ padded
    z = credax.group_normalize(scores, group_ids, turn_mask)
    return jnp.where(valid & (n > 1), z + u * jnp.tanh(p), 0.0)


def _batch_normalised(scores, turn_mask, group_ids):
    valid = jnp.where(turn_mask, scores, 0.0)
    mu = valid.sum() / jnp.maximum(turn_mask.sum(), 1).astype(scores.dtype)
    return jnp.where(turn_mask, scores - mu, 0.0)


def _first_row_baseline(scores, turn_mask, group_ids):
    return jnp.where(turn_mask, scores - jnp.where(turn_mask[:1], scores[:1], 0.0), 0.0)


def _all_entries_mean(scores, turn_mask, group_ids):
    # The mean over every entry, padding included (a padded value changes real outputs).
    same = _same(group_ids).astype(scores.dtype)
    mu = (same @ jnp.nan_to_num(scores)) / same.sum(1, keepdims=True)
    return jnp.where(turn_mask, scores - mu, 0.0)


def _no_select(scores, turn_mask, group_ids):
    return scores * 2.0  # padded turns keep their garbage


def _value_branch(scores, turn_mask, group_ids):
    return scores if float(jnp.nanmax(scores)) > 0.5 else -scores  # Python control flow on values


def _offset_grpo(scores, turn_mask, group_ids):
    return jnp.where(turn_mask, credax.group_normalize(scores, group_ids, turn_mask) + 0.25, 0.0)


def _nan_gradient(scores, turn_mask, group_ids):
    # A std without the inner where: sqrt'(0) = inf in a constant group (the checker's classic).
    same = _same(group_ids).astype(scores.dtype)
    x = jnp.where(turn_mask, scores, 0.0)
    n = same @ turn_mask.astype(scores.dtype)
    mu = (same @ x) / jnp.maximum(n, 1.0)
    var = same @ jnp.where(turn_mask, (scores - mu) ** 2, 0.0) / jnp.maximum(n, 1.0)
    return jnp.where(turn_mask, (x - mu) * jnp.sqrt(var), 0.0)


def _checker(name, fn, **options):
    def run():
        import credax.testing as ctest
        getattr(ctest, f"check_{name}")(fn, max_examples=60, shrink=False, **options)
    return run


WRONG = {
    # checker: (wrong function, options, the invariant's name in the message)
    "padding_invariance": (_all_entries_mean, {}, "padding invariance"),
    "permutation_equivariance": (_first_row_baseline, {}, "permutation equivariance"),
    "group_isolation": (_batch_normalised, {}, "group isolation"),
    "masked_zero": (_no_select, {}, "masked zero"),
    "finite_gradients": (_nan_gradient, {}, "finite gradients"),
    "jit_matches_eager": (_value_branch, {}, "jit matches eager"),
    "group_zero_mean": (_offset_grpo, {}, "group zero mean"),
}
for _name, (_fn, _options, _what) in WRONG.items():
    raises("checkers", f"wrong.{_name}", _checker(_name, _fn, **_options), _what, AssertionError,
           f"{_what} violated")
# The blind spot of issue 37: a padding leak that sums to exactly 0 in every group. Before: passed
# (d sum / d x is exactly 0 at every padded entry, whatever the values).
for _label, _options in (("finite_padding", {"nonfinite_padding": False}), ("default", {})):
    raises("checkers", f"leak.centred_sum_zero.{_label}",
           _checker("finite_gradients", _centred_padding_leak, **_options), "finite gradients",
           AssertionError, r"masked entries of scores receive gradient")
# It is a real leak: padding invariance sees it too.
raises("checkers", "leak.centred_sum_zero.padding_invariance",
       _checker("padding_invariance", _centred_padding_leak), "padding invariance", AssertionError,
       "padding invariance violated")
# A std that counts padding: its plain sum is 0 only up to rounding (caught before too, by the
# residue of Σ (x - μ) for most drawn values; now by the weights, whatever the values).
raises("checkers", "leak.finite_gradients_finite_padding",
       _checker("finite_gradients", _centred_std_counts_padding, nonfinite_padding=False),
       "finite gradients", AssertionError, r"masked entries of scores receive gradient")
raises("checkers", "leak.finite_gradients_nonfinite_padding",
       _checker("finite_gradients", _centred_std_counts_padding), "finite gradients",
       AssertionError, r"finite gradients violated")
# And the correct function passes every checker it claims (no false alarm from the weights).
for _name in ("finite_gradients", "masked_zero", "padding_invariance"):
    behaves("checkers", f"correct.group_normalize.{_name}",
            _checker(_name, lambda s, m, g: credax.group_normalize(s, g, m)), "fn",
            lambda out: None)


# ============================================================================================
# Class g2po: a prompt of one trajectory under each episode pooling.
# ============================================================================================

ONE = (np.array([10.0, 1.0, 0.0], np.float32), np.array([[1, 2], [1, 2], [3, 4]]),
       np.array([[True, True], [True, True], [True, False]]), np.array([0, 1, 1]))


def _episode_vs_reference(pooling_rows):
    def check(out):
        # The reference restates the code with one row per step; its episode part alone is
        # the advantage with omega = 0.
        rows, where = rows_from_padded(*ONE)
        ref = g2po_rows(*rows, omega=0.0)
        got = np.array([np.asarray(out.episode)[b, t] for b, t in where])
        np.testing.assert_allclose(got, ref, atol=1e-5)
        assert pooling_rows(np.asarray(out.episode))
    return check


# Prompt 0: one trajectory of two steps, reward 10: its step population (10, 10) is constant,
# so E = 0 (not the raw reward the docstring promised). Prompt 1: steps (1, 1, 0): mean 2/3,
# std sqrt(1/3) = .5774: E = (1/3)/.5774 = .5774 twice, -(2/3)/.5774 = -1.1547.
behaves("g2po", "one_trajectory_step_pooling", lambda: credax.g2po_advantages(*ONE), "episode_pooling",
        _episode_vs_reference(lambda e: (e[0] == 0).all()))
# Under trajectory pooling the prompt of one trajectory keeps its raw reward (10 on each step).
behaves("g2po", "one_trajectory_trajectory_pooling",
        lambda: credax.g2po_advantages(*ONE, episode_pooling="trajectory"), "episode_pooling",
        lambda out: np.testing.assert_allclose(np.asarray(out.episode)[0], [10.0, 10.0]))
# A prompt of one step keeps its raw reward under step pooling too (the code's mean 0, std 1).
behaves("g2po", "one_step_step_pooling",
        lambda: credax.g2po_advantages(np.array([3.0], np.float32), np.array([[1, 2]]),
                                       np.array([[True, False]]), np.array([0])),
        "episode_pooling", lambda out: np.testing.assert_allclose(np.asarray(out.episode)[0, 0], 3.0))


def _doc_states_step_rule(doc):
    # Before: "a prompt with one row keeps its raw reward as E", false under step pooling.
    assert "a prompt with one row keeps" not in doc
    assert re.search(r'one trajectory of two or more steps is a constant set', doc)


behaves("g2po", "docstring", lambda: re.sub(r"\s+", " ", credax.g2po_advantages.__doc__),
        "episode_pooling", _doc_states_step_rule)


# ============================================================================================
# Class skip: tests of an optional extra skip without it, never fail with an ImportError.
# ============================================================================================

@contextlib.contextmanager
def _without(extras):
    """``import <extra>`` raises ImportError inside the block (``sys.modules[extra] = None``)."""
    saved = {m: sys.modules.get(m) for m in extras}
    try:
        for m in extras:
            sys.modules[m] = None
        yield
    finally:
        for m, v in saved.items():
            if v is None:
                sys.modules.pop(m, None)
            else:
                sys.modules[m] = v


def _row_without_torch(row):
    def run():
        with _without(("torch", "verl")):
            row.call()
    return run


def _module_without(module, extras):
    """Import ``tests/<module>.py`` afresh (a module object of its own) without ``extras``."""
    def run():
        spec = importlib.util.spec_from_file_location(f"_without_extras_{module}",
                                                      pathlib.Path(__file__).with_name(f"{module}.py"))
        with _without(extras):
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
    return run


for _row in [r for r in ROWS if r.cls == "bridge"]:
    # Before (the probes of the former tests/test_adversarial_r3.py): `import torch` ran before
    # the probe's importorskip: ImportError, not a skip.
    raises("skip", _row.label, _row_without_torch(_row), "torch", pytest.skip.Exception,
           r"could not import 'torch'|could not import 'verl'")
# The torch and verl bridges' probes live in their modules, which skip as a whole without them.
# A module skips naming the first of its extras (in its import order) that it cannot import: a
# hidden one, or one this environment lacks (without torch, test_verl skips for torch even
# when only verl is hidden).
_EXTRAS_OF = {"test_torch": ("torch",), "test_verl": ("torch", "verl")}
for _module, _extras in (("test_torch", ("torch",)), ("test_verl", ("torch", "verl")),
                         ("test_verl", ("verl",))):
    _missing = next(m for m in _EXTRAS_OF[_module]
                    if m in _extras or importlib.util.find_spec(m) is None)
    raises("skip", f"{_module}.without_{'_'.join(_extras)}", _module_without(_module, _extras),
           _missing, pytest.skip.Exception, rf"could not import '{_missing}'")


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_row(row: Row, tmp_path):
    if row.exc is None:
        row.check(row.call())
        return
    with pytest.raises(row.exc) as info:
        row.call()
    message = str(info.value)
    assert re.search(row.match, message, re.S), message
    assert row.arg in message, f"the message does not name `{row.arg}`: {message}"


def test_row_ids_unique():
    ids = [r.id for r in ROWS]
    assert len(ids) == len(set(ids))


def test_every_class_has_rows():
    counts = {cls: sum(r.cls == cls for r in ROWS) for cls in CLASSES}
    assert all(counts.values()), counts
    assert {r.cls for r in ROWS} <= set(CLASSES), counts

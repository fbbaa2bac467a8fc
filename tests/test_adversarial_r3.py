"""Adversarial probes, round three (issue 27): the surfaces that landed after the first round.

Each probe asserts a named error (the message names the argument or field) or a documented value,
worked by hand in the comment next to it or compared with an independent NumPy computation. The
probes are grouped in classes; ``CLASSES`` counts them (``test_probe_count``):

* ``norm``: :class:`credax.Normalization` built or rebuilt through pytree operations (a rebuilt
  value is checked on every call), non-numeric ``eps``, copy / deepcopy / pickle of the presets,
  and the removed ``**preset`` / loose-keyword forms of every normalising estimator (a
  ``TypeError`` naming the keyword and ``normalization=``);
* ``files``: ``write_rollouts`` never destroys a file nor leaves a partial one, writes only what
  ``read_rollouts`` accepts; every reader failure names file and line;
* ``f32``: values finite in float64 that overflow float32 when batched; shrinkage at large and
  small magnitudes;
* ``ids``: ids of every hashable kind (verl uids and anchors), 64-bit index inputs beyond int32,
  narrow ints, a tuple as ``group_ids``;
* ``torch``: unsigned index tensors and meta-device tensors in ``credax.torch`` / ``credax.verl``;
* ``gae``: zero-length axes, per-row λ/γ range checks;
* ``vocab``: V = 0, −inf logits and near one-hot rows in ``token_entropy`` (issue 30), token ids
  outside ``[0, V)``;
* ``testing``: ``credax.testing.check_group_isolation`` against ids compared in float32.

Shapes are small and repeated so the module compiles few programs.
"""

from __future__ import annotations

import copy
import enum
import math
import os
import pickle
import stat

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import Normalization, Rollout, RolloutFormatError, Turn, presets
from tests.reference.estimators import token_entropy as entropy_reference

NAN, INF = float("nan"), float("inf")
PROBES: dict[str, object] = {}
# Probes of behaviour in files this round does not own: expected to fail until their owner fixes
# it (strict: a probe that starts passing fails, so the entry is removed with the fix).
KNOWN: dict[str, str] = {}
CLASSES = ("norm", "files", "f32", "ids", "torch", "gae", "vocab", "testing")


def probe(cls: str, name: str):
    """Register a probe of class ``cls`` under the test id ``cls.name``."""
    assert cls in CLASSES, cls

    def decorate(fn):
        key = f"{cls}.{name}"
        assert key not in PROBES, key
        PROBES[key] = fn
        return fn

    return decorate


def raises(exc, match: str, fn, *args, **kwargs):
    with pytest.raises(exc, match=match):
        fn(*args, **kwargs)


def _raising_probes(cls: str, prefix: str, calls: dict, exc, match: str) -> None:
    """One probe per entry of ``calls`` (label -> no-argument call) that must raise ``exc``."""
    for label, call in calls.items():

        def _p(call=call):
            raises(exc, match, call)

        probe(cls, f"{prefix}_{label}")(_p)


R4 = np.array([1.0, 0.0, 0.5, 0.5], np.float32)
IDS4 = np.array([0, 0, 1, 1])
# grpo_advantages(R4, IDS4) under VERL: group [1, 0] has μ = .5, σ = .7071 (ddof 1):
# ±.5 / (.7071 + 1e-6) = ±.7071; group [.5, .5] is constant: exactly 0.
GRPO4 = np.array([0.70710576, -0.70710576, 0.0, 0.0], np.float32)
S22 = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 1.0]], np.float32)
TM22 = np.ones((4, 2), bool)
W2 = np.array([1.0, 0.5], np.float32)


# ============================================================================================
# Class norm: Normalization through pytree operations, re-checks, eps, copies, **preset refused.
# ============================================================================================

NORM_PRESETS = {name: getattr(presets, name) for name in presets.__all__
                if isinstance(getattr(presets, name), Normalization)}
MAPPING_PRESETS = {name: getattr(presets, name) for name in presets.__all__
                   if not callable(getattr(presets, name)) and name not in NORM_PRESETS}

# eps values that are not a non-negative finite real number, and the error each must raise.
BAD_EPS = {
    "negative": (-1.0, ValueError, "`eps` must be >= 0"),
    "nan": (NAN, ValueError, "`eps` must be >= 0"),
    "inf": (INF, ValueError, "`eps` must be >= 0"),
    "neg_inf": (-INF, ValueError, "`eps` must be >= 0"),
    "np_negative": (np.float32(-1e-3), ValueError, "`eps` must be >= 0"),
    "string": ("1e-6", TypeError, "`eps` must be a real number"),
    "none": (None, TypeError, "`eps` must be a real number"),
    "list": ([1e-6], TypeError, "`eps` must be a real number"),
    "complex": (1j, TypeError, "`eps` must be a real number"),
    "bool": (True, TypeError, "`eps` must be a real number"),
    "vector": (np.array([1e-6, 1e-6]), ValueError, r"`eps` must be a scalar; got shape \(2,\)"),
    "string_array": (np.array("1e-6"), TypeError, "`eps` must be a real number"),
    "object": (object(), TypeError, "`eps` must be a real number"),
}


def _estimators(norm):
    """Every estimator that takes ``normalization=``, called on a small batch (HGPO: estimators
    engineer; GiGPO: see the note at the ``**preset`` probes)."""
    return {
        "grpo": lambda: credax.grpo_advantages(R4, IDS4, normalization=norm),
        "group_normalize": lambda: credax.group_normalize(R4, IDS4, normalization=norm),
        "gdpo": lambda: credax.gdpo_advantages(S22, IDS4, weights=W2, normalization=norm),
        "tcpo": lambda: credax.tcpo_advantages(S22, TM22, IDS4, normalization=norm),
        "mt_grpo": lambda: credax.mt_grpo_advantages(S22, R4, TM22, IDS4, normalization=norm),
    }


for _label, (_eps, _exc, _match) in BAD_EPS.items():

    def _p(eps=_eps, exc=_exc, match=_match):
        # The constructor refuses it, naming `eps`.
        raises(exc, match, Normalization, eps=eps)

    probe("norm", f"constructor_eps_{_label}")(_p)

    def _p(eps=_eps, exc=_exc, match=_match):
        # A preset rebuilt by tree_map with a bad eps is checked where it is used, as the
        # constructor checks it (tree_unflatten cannot check: JAX unflattens with tracers and
        # sentinels), by every estimator that takes normalization=.
        bad = jax.tree_util.tree_map(lambda _: eps, presets.VERL)
        for name, call in _estimators(bad).items():
            with pytest.raises(exc, match=match):
                call()
                pytest.fail(name)

    probe("norm", f"tree_map_eps_{_label}")(_p)

    def _p(eps=_eps, exc=_exc, match=_match):
        # The same through tree_unflatten with the preset's own treedef.
        treedef = jax.tree_util.tree_structure(presets.TRL)
        raises(exc, match, credax.grpo_advantages, R4, IDS4,
               normalization=jax.tree_util.tree_unflatten(treedef, [eps]))

    probe("norm", f"unflatten_eps_{_label}")(_p)

    def _p(eps=_eps, exc=_exc, match=_match):
        raises(exc, match, presets.VERL.replace, eps=eps)

    probe("norm", f"replace_eps_{_label}")(_p)


# Static fields that tree_unflatten may be handed (aux data of another object, a hand-made one).
BAD_STATIC = {
    "scale": ("bogus", ValueError, "`scale` must be one of"),
    "eps_mode": ("mul", ValueError, "`eps_mode` must be one of"),
    "singleton": ("one", ValueError, "`singleton` must be one of"),
    "center": (1, TypeError, "`center` and `leave_one_out` must be Python bools"),
    "leave_one_out": ("yes", TypeError, "`center` and `leave_one_out` must be Python bools"),
    "ddof": (-1, ValueError, "`ddof` must be >= 0"),
    "ddof_float": (1.5, TypeError, "`ddof` must be a Python int"),
}
_STATIC_KEYS = ("center", "scale", "ddof", "eps_mode", "singleton", "leave_one_out")
for _label, (_value, _exc, _match) in BAD_STATIC.items():

    def _p(label=_label, value=_value, exc=_exc, match=_match):
        field = label.removesuffix("_float")
        aux = tuple(value if k == field else getattr(presets.VERL, k) for k in _STATIC_KEYS)
        bad = Normalization.tree_unflatten(aux, [1e-6])
        # Before: scale="bogus" computed the batch branch (±1.22 for this batch): garbage.
        raises(exc, match, credax.grpo_advantages, R4, IDS4, normalization=bad)
        raises(exc, match, credax.group_normalize, R4, IDS4, normalization=bad)

    probe("norm", f"unflatten_static_{_label}")(_p)


@probe("norm", "rebuilt_bad_eps_refused_on_every_call")
def _():
    # A good call compiles the program; a rebuilt (unchecked) object whose eps is bad must still
    # be checked on the host, on the first call and on every later one, and a good call after it
    # is unaffected.
    good = credax.grpo_advantages(R4, IDS4, normalization=presets.VERL)
    np.testing.assert_allclose(good, GRPO4, rtol=1e-6)
    bad = jax.tree_util.tree_map(lambda e: -e, presets.VERL)
    for _ in range(3):
        raises(ValueError, "`eps` must be >= 0", credax.grpo_advantages, R4, IDS4,
               normalization=bad)
    np.testing.assert_allclose(credax.grpo_advantages(R4, IDS4, normalization=presets.VERL),
                               GRPO4, rtol=1e-6)


@probe("norm", "replace_repairs_bad_object_keywords_refused")
def _():
    # A bad (rebuilt) object repaired by .replace of the bad field: replace rebuilds through the
    # constructor, the result is the repaired normalisation.
    bad = jax.tree_util.tree_map(lambda e: -1.0, presets.VERL)
    out = credax.grpo_advantages(R4, IDS4, normalization=bad.replace(eps=1e-6))
    np.testing.assert_allclose(out, GRPO4, rtol=1e-6)
    # ... a replace that does not repair it raises (every field is checked again) ...
    raises(ValueError, "`eps` must be >= 0", bad.replace, ddof=1)
    raises(ValueError, "`eps` must be >= 0", credax.grpo_advantages, R4, IDS4, normalization=bad)
    # ... and a loose keyword no longer overrides a field: it is refused by name, bad object or not.
    for norm in (bad, presets.VERL):
        raises(TypeError, r"unexpected keyword argument 'ddof'.*normalization=credax\.Normalization",
               credax.grpo_advantages, R4, IDS4, normalization=norm, ddof=1)
        raises(TypeError, r"unexpected keyword argument 'eps'.*normalization=credax\.Normalization",
               credax.grpo_advantages, R4, IDS4, normalization=norm, eps=1e-6)


@probe("norm", "unflatten_bad_scale_refused_on_every_call")
def _():
    # A bad scale through unflatten is refused on every call (an unchecked value is checked on use).
    aux = ("group" if k == "scale" else getattr(presets.TRL, k) for k in _STATIC_KEYS)
    bad = Normalization.tree_unflatten(tuple("x" if a == "group" else a for a in aux), [1e-4])
    for _ in range(2):
        raises(ValueError, "`scale` must be one of", credax.grpo_advantages, R4, IDS4,
               normalization=bad)


@probe("norm", "traced_bad_eps_is_nan_not_zero")
def _():
    # A traced eps cannot be checked before tracing. A negative or NaN one used to give 0 for
    # every row (den <= 0 was taken as a zero spread): garbage. Documented now: NaN at every
    # valid entry of a scaled normalisation; a valid traced eps is used as given.
    f = jax.jit(lambda e: credax.grpo_advantages(R4, IDS4, normalization=Normalization(eps=e)))
    assert np.isnan(np.asarray(f(jnp.float32(-1.0)))).all()
    assert np.isnan(np.asarray(f(jnp.float32(NAN)))).all()
    np.testing.assert_allclose(f(jnp.float32(1e-6)), GRPO4, rtol=1e-6)
    # scale="none" never reads eps: a bad traced one changes nothing there.
    g = jax.jit(lambda e: credax.grpo_advantages(R4, IDS4,
                                                 normalization=Normalization(scale="none", eps=e)))
    np.testing.assert_allclose(g(jnp.float32(-1.0)), [0.5, -0.5, 0.0, 0.0])


@probe("norm", "jit_round_trip_still_validates_statics")
def _():
    # Inside the caller's jit the object is unflattened with a traced eps: statics are still
    # checked, eps is used as given.
    out = jax.jit(lambda n: credax.grpo_advantages(R4, IDS4, normalization=n))(presets.VERL)
    np.testing.assert_allclose(out, GRPO4, rtol=1e-6)


for _name, _preset in NORM_PRESETS.items():
    for _how, _fn in (("copy", copy.copy), ("deepcopy", copy.deepcopy),
                      ("pickle", lambda v: pickle.loads(pickle.dumps(v)))):

        def _p(preset=_preset, fn=_fn):
            # Before: AttributeError "Normalization is immutable" from __setattr__.
            other = fn(preset)
            assert type(other) is Normalization
            assert other.asdict() == preset.asdict()
            assert other == preset  # value equality, as the preset's copies had
            np.testing.assert_array_equal(credax.grpo_advantages(R4, IDS4, normalization=other),
                                          credax.grpo_advantages(R4, IDS4, normalization=preset))
            with pytest.raises(AttributeError, match="immutable"):
                other.eps = 1.0

        probe("norm", f"{_how}_{_name}")(_p)

for _name, _preset in MAPPING_PRESETS.items():
    for _how, _fn in (("copy", copy.copy), ("deepcopy", copy.deepcopy),
                      ("pickle", lambda v: pickle.loads(pickle.dumps(v)))):

        # The mapping presets were MappingProxyType objects, which copy, deepcopy and pickle
        # refuse ("cannot pickle 'mappingproxy' object"); now presets.Options.
        # The loss presets are credax.LossOptions values since #36 (compared by .asdict(), set
        # by .replace()); HGPO's is still a read-only mapping.
        def _p(preset=_preset, fn=_fn):
            other = fn(preset)
            assert type(other) is type(preset)
            if isinstance(preset, credax.LossOptions):
                assert other == preset and other.asdict() == preset.asdict()
                with pytest.raises(AttributeError):
                    other.clip_low = 0.0  # still immutable
                return
            assert dict(other) == dict(preset)
            with pytest.raises((AttributeError, TypeError)):
                other["clip_low" if "clip_low" in other else "history"] = 0  # still read-only

        probe("norm", f"{_how}_{_name}")(_p)


@probe("norm", "pickle_deprecated_spelling_keeps_value")
def _():
    # A deprecated value pickles too (it warned when built; unpickling does not warn again).
    with pytest.warns(DeprecationWarning):
        legacy = Normalization(center=False, scale="none")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        other = pickle.loads(pickle.dumps(legacy))
    assert other.center is False and other.asdict() == legacy.asdict()
    assert other == legacy


@probe("norm", "pickle_traced_like_eps_array")
def _():
    # eps as a 0-d array survives a deepcopy as an equal, independent value.
    n = Normalization(eps=np.array(1e-4))
    other = copy.deepcopy(n)
    assert float(other.eps) == 1e-4 and other.eps is not n.eps


# **preset forms, removed: a Normalization is not a mapping, so `**preset` and `dict(preset)` are
# TypeErrors, and its fields as loose keywords (`**preset.asdict()`) are refused by name pointing at
# normalization= (presets module docstring). The fields rebuild the preset: the same numbers.
_NORMALIZE_KEYS = "center|scale|ddof|eps|eps_mode|singleton|leave_one_out"
_LOOSE = rf"unexpected keyword argument '({_NORMALIZE_KEYS})'.*normalization=credax\.Normalization"
_STAR_CALLS = {
    "grpo": lambda kw: credax.grpo_advantages(R4, IDS4, **kw),
    "group_normalize": lambda kw: credax.group_normalize(R4, IDS4, **kw),
    "gdpo": lambda kw: credax.gdpo_advantages(S22, IDS4, weights=W2, **kw),
    "tcpo": lambda kw: credax.tcpo_advantages(S22, TM22, IDS4, **kw).advantages,
    "mt_grpo": lambda kw: credax.mt_grpo_advantages(S22, R4, TM22, IDS4, **kw),
}
for _fname, _call in _STAR_CALLS.items():
    for _pname, _preset in NORM_PRESETS.items():

        def _p(call=_call, preset=_preset):
            with pytest.raises(TypeError):
                dict(preset)
            with pytest.raises(TypeError, match="mapping"):
                call({**preset})  # the ** form itself
            raises(TypeError, _LOOSE, call, preset.asdict())
            want = call({"normalization": preset})
            rebuilt = call({"normalization": Normalization(**preset.asdict())})
            np.testing.assert_array_equal(rebuilt, want)

        probe("norm", f"star_{_fname}_{_pname}")(_p)

for _pname, _preset in NORM_PRESETS.items():

    # gigpo_advantages takes `normalization=` only (its `scale`/`eps` keywords were removed too):
    # the documented behaviour (presets docstring) is a TypeError for `**preset` and for its
    # fields as keywords, and the preset's numbers through `normalization=preset`.
    def _p(preset=_preset):
        args = (R4[:2], S22[:2], np.array([[1, 2], [1, 3]]), TM22[:2], IDS4[:2])
        with pytest.raises(TypeError, match="mapping"):
            credax.gigpo_advantages(*args, **preset)
        raises(TypeError, _LOOSE, credax.gigpo_advantages, *args, **preset.asdict())
        for key in ("scale", "eps"):  # gigpo's own former keywords
            raises(TypeError, rf"unexpected keyword argument '{key}'.*normalization=",
                   credax.gigpo_advantages, *args, **{key: getattr(preset, key)})
        out = np.asarray(credax.gigpo_advantages(*args, normalization=preset))
        assert out.shape == (2, 2) and np.all(np.isfinite(out))

    probe("norm", f"star_gigpo_{_pname}")(_p)


# ============================================================================================
# Class files: write_rollouts never destroys a file, writes only what read_rollouts accepts;
# every reader failure names file and line.
# ============================================================================================

GOOD_ROLLOUTS = [Rollout("p", [Turn([1, 2], 1.0)])]


class _Label(enum.IntEnum):
    D = 0


def _bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _write_fails(rollouts, exc, match):
    """Writing ``rollouts`` over an existing good file raises ``exc`` naming the field; the file
    is byte-for-byte what it was, and no temporary file is left beside it."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.jsonl")
        credax.write_rollouts(path, GOOD_ROLLOUTS)
        before = _bytes(path)
        with pytest.raises(exc, match=match):
            credax.write_rollouts(path, rollouts)
        assert _bytes(path) == before
        assert os.listdir(d) == ["r.jsonl"]
        fresh = os.path.join(d, "new.jsonl")
        with pytest.raises(exc, match=match):
            credax.write_rollouts(fresh, rollouts)
        assert not os.path.exists(fresh) and os.listdir(d) == ["r.jsonl"]


def _round_trip(rollouts):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.jsonl")
        credax.write_rollouts(path, rollouts)
        return credax.read_rollouts(path)


_OK = [Turn([1], 1.0)]
# (rollouts, exception, message naming the field): each was either written and then refused by
# read_rollouts (or silently changed: int(1.5) = 1, int(True) = 1), or failed half-way through
# writing after the file had been truncated.
WRITE_FAILS = {
    "surrogate_prompt_id": ([Rollout("p", _OK), Rollout("a\ud800", _OK)], ValueError,
                            r"rollouts\[1\]\.prompt_id.*surrogate"),
    "surrogate_meta": ([Rollout("p", _OK, meta={"note": "x\udc80"})], ValueError,
                       r"rollouts\[0\]\.meta.*surrogate"),
    "surrogate_role": ([Rollout("p", [Turn([1], 1.0, role="\ud83d")])], ValueError,
                       r"rollouts\[0\]\.turns\[0\]\.role.*surrogate"),
    "surrogate_anchor": ([Rollout("p", [Turn([1], 1.0, anchor="s\udfff")])], ValueError,
                         r"rollouts\[0\]\.turns\[0\]\.anchor.*surrogate"),
    "surrogate_meta_key": ([Rollout("p", _OK, meta={"\ud800": 1})], ValueError,
                           r"rollouts\[0\]\.meta.*surrogate"),
    "empty_tuple_prompt_id": ([Rollout((), _OK)], ValueError, r"rollouts\[0\]\.prompt_id"),
    "nested_tuple_prompt_id": ([Rollout((1, (2,)), _OK)], TypeError,
                               r"rollouts\[0\]\.prompt_id\[1\]"),
    "negative_token": ([Rollout("p", [Turn([-1], 1.0)])], ValueError,
                       r"rollouts\[0\]\.turns\[0\]\.action\[0\]"),
    "token_beyond_int32": ([Rollout("p", [Turn([2**31], 1.0)])], ValueError,
                           r"rollouts\[0\]\.turns\[0\]\.action\[0\]"),
    "float_token": ([Rollout("p", [Turn([1.5], 1.0)])], TypeError,
                    r"rollouts\[0\]\.turns\[0\]\.action\[0\]"),
    "bool_token": ([Rollout("p", [Turn([True], 1.0)])], TypeError,
                   r"rollouts\[0\]\.turns\[0\]\.action\[0\]"),
    "float_array_tokens": ([Rollout("p", [Turn(np.array([1.0, 2.5]), 1.0)])], TypeError,
                           r"rollouts\[0\]\.turns\[0\]\.action\[0\]"),  # 1.0 is no int either
    "negative_prompt_token": ([Rollout("p", _OK, prompt=[-3])], ValueError,
                              r"rollouts\[0\]\.prompt\[0\]"),
    "observation_2d": ([Rollout("p", [Turn([1], 1.0, observation=np.zeros((1, 2), int))])],
                       TypeError, r"rollouts\[0\]\.turns\[0\]\.observation\[0\]"),
    "action_none": ([Rollout("p", [Turn([None], 1.0)])], TypeError,
                    r"rollouts\[0\]\.turns\[0\]\.action\[0\]"),
    "no_turns": ([Rollout("p", [])], ValueError, r"rollouts\[0\]\.turns"),
    "turns_string": ([Rollout("p", "turns")], TypeError, r"rollouts\[0\]\.turns"),
    "turn_not_turn": ([Rollout("p", [{"action": [1], "score": 1.0}])], TypeError,
                      r"rollouts\[0\]\.turns\[0\]"),
    "tuple_anchor": ([Rollout("p", [Turn([1], 1.0, anchor=(1, 2))])], TypeError,
                     r"rollouts\[0\]\.turns\[0\]\.anchor"),
    "bool_role": ([Rollout("p", [Turn([1], 1.0, role=True)])], TypeError,
                  r"rollouts\[0\]\.turns\[0\]\.role"),
    "float_role": ([Rollout("p", [Turn([1], 1.0, role=1.5)])], TypeError,
                   r"rollouts\[0\]\.turns\[0\]\.role"),
    "bool_score": ([Rollout("p", [Turn([1], True)])], TypeError,
                   r"rollouts\[0\]\.turns\[0\]\.score"),
    "string_score": ([Rollout("p", [Turn([1], "1.0")])], TypeError,
                     r"rollouts\[0\]\.turns\[0\]\.score"),
    "huge_int_score": ([Rollout("p", [Turn([1], 10**400)])], ValueError,
                       r"rollouts\[0\]\.turns\[0\]\.score"),
    "nan_reward": ([Rollout("p", [Turn([1], 1.0, reward=NAN)])], ValueError,
                   r"rollouts\[0\]\.turns\[0\]\.reward"),
    "inf_outcome": ([Rollout("p", _OK, outcome=-INF)], ValueError, r"rollouts\[0\]\.outcome"),
    "meta_not_dict": ([Rollout("p", _OK, meta=[1])], TypeError, r"rollouts\[0\]\.meta"),
    "meta_huge_int": ([Rollout("p", _OK, meta={"a": 10**5000})], ValueError,
                      r"rollouts\[0\]\.meta"),
    "meta_nan": ([Rollout("p", _OK, meta={"a": NAN})], ValueError, r"rollouts\[0\]\.meta"),
    "not_a_rollout": ([GOOD_ROLLOUTS[0], {"prompt_id": "p"}], TypeError, r"rollouts\[1\]"),
    "a_string": ("rollouts", TypeError, r"`rollouts` must be an iterable of credax.Rollout"),
    "a_single_rollout": (GOOD_ROLLOUTS[0], TypeError,
                         r"`rollouts` must be an iterable of credax.Rollout"),
    "bool_prompt_id": ([Rollout(True, _OK)], TypeError, r"rollouts\[0\]\.prompt_id"),
    "float_prompt_id": ([Rollout(1.5, _OK)], TypeError, r"rollouts\[0\]\.prompt_id"),
}
for _label, (_rollouts, _exc, _match) in WRITE_FAILS.items():

    def _p(rollouts=_rollouts, exc=_exc, match=_match):
        _write_fails(rollouts, exc, match)

    probe("files", f"write_refuses_{_label}")(_p)


@probe("files", "write_iterator_failing_midway_keeps_file")
def _():
    def gen():
        yield GOOD_ROLLOUTS[0]
        raise RuntimeError("upstream broke")

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.jsonl")
        credax.write_rollouts(path, [Rollout("q", _OK)] * 3)
        before = _bytes(path)
        with pytest.raises(RuntimeError, match="upstream broke"):
            credax.write_rollouts(path, gen())
        assert _bytes(path) == before and os.listdir(d) == ["r.jsonl"]


@probe("files", "write_replaces_keeps_permissions")
def _():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.jsonl")
        credax.write_rollouts(path, GOOD_ROLLOUTS)
        os.chmod(path, 0o640)
        credax.write_rollouts(path, [Rollout("q", _OK)])
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
        assert [r.prompt_id for r in credax.read_rollouts(path)] == ["q"]
        assert os.listdir(d) == ["r.jsonl"]


@probe("files", "write_into_missing_directory")
def _():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        raises(FileNotFoundError, "no such directory", credax.write_rollouts,
               os.path.join(d, "no", "r.jsonl"), GOOD_ROLLOUTS)
        assert os.listdir(d) == []


@probe("files", "write_through_symlink_replaces_target")
def _():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        target = os.path.join(d, "target.jsonl")
        credax.write_rollouts(target, GOOD_ROLLOUTS)
        link = os.path.join(d, "link.jsonl")
        os.symlink(target, link)
        credax.write_rollouts(link, [Rollout("q", _OK)])
        assert os.path.islink(link)
        assert [r.prompt_id for r in credax.read_rollouts(target)] == ["q"]


# Values that must round-trip: what is written is read back as the same rollout.
ROUND_TRIPS = {
    "numpy_int_prompt_id": (Rollout(np.int64(2**40), _OK), 2**40),
    "numpy_str_prompt_id": (Rollout(np.str_("task"), _OK), "task"),
    "mixed_tuple_prompt_id": (Rollout((np.int32(3), "a", 2**70), _OK), (3, "a", 2**70)),
    "unicode_prompt_id": (Rollout("é😀\u2028", _OK), "é😀\u2028"),
    "huge_int_prompt_id": (Rollout(-(10**30), _OK), -(10**30)),
}
for _label, (_rollout, _pid) in ROUND_TRIPS.items():

    def _p(rollout=_rollout, pid=_pid):
        back = _round_trip([rollout])[0]
        assert back.prompt_id == pid and type(back.prompt_id) is type(pid)

    probe("files", f"round_trip_{_label}")(_p)


@probe("files", "round_trip_numpy_fields_and_enum_role")
def _():
    r = Rollout("p", [Turn(np.array([1, 2], np.int16), np.float32(0.5), observation=np.arange(2),
                           role=_Label.D, reward=np.float64(0.25), anchor=np.int64(7))],
                prompt=np.array([4], np.uint8), outcome=np.float16(1.0))
    back = _round_trip([r])[0]
    t = back.turns[0]
    assert (t.action, t.score, t.observation, t.role, t.reward, t.anchor) == ([1, 2], 0.5, [0, 1],
                                                                                0, 0.25, 7)
    assert back.prompt == [4] and back.outcome == 1.0


@probe("files", "round_trip_1e39_score_then_pad_refuses")
def _():
    # 1e39 is a finite float64: the file carries it exactly.
    back = _round_trip([Rollout("p", [Turn([1], 1e39)])])[0]
    assert back.turns[0].score == 1e39


def _read(text, fmt="credax", binary=False):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "in.jsonl")
        with open(path, "wb") as f:
            f.write(text if binary else text.encode("utf-8"))
        return credax.read_rollouts(path, format=fmt)


LINE1 = '{"prompt_id": "p", "turns": [{"action": [1], "score": 1}]}\n'


def _turn_line(**fields):
    turn = {"action": [1], "score": 1}
    turn.update(fields)
    import json
    return LINE1 + json.dumps({"prompt_id": "p", "turns": [turn]}) + "\n"


# (file text, format, message): every failure is a RolloutFormatError naming file:line (and the
# field where there is one). Before: OverflowError, ValueError (digits limit), RecursionError,
# none naming the file.
READ_FAILS = {
    "huge_int_score": (LINE1 + '{"prompt_id": "p", "turns": [{"action": [1], "score": 1' + "0" * 400
                       + "}]}\n", "credax", r"in\.jsonl:2: field `turns\[0\]\.score`"),
    "huge_int_reward": (LINE1 + '{"prompt_id": "p", "turns": [{"action": [1], "score": 1, "reward": '
                        + "9" * 320 + "}]}\n", "credax", r"in\.jsonl:2: field `turns\[0\]\.reward`"),
    "huge_int_outcome": (LINE1 + '{"prompt_id": "p", "outcome": -' + "9" * 320 + ', "turns": [{"action":'
                         ' [1], "score": 1}]}\n', "credax", r"in\.jsonl:2: field `outcome`"),
    "overlong_digits_score": (LINE1 + '{"prompt_id": "p", "turns": [{"action": [1], "score": '
                              + "9" * 5000 + "}]}\n", "credax", r"in\.jsonl:2: .*digits"),
    "overlong_digits_prompt_id": (LINE1 + '{"prompt_id": ' + "7" * 5000 + ', "turns": []}\n',
                                  "credax", r"in\.jsonl:2: .*digits"),
    "overlong_digits_token": (LINE1 + '{"prompt_id": 1, "turns": [{"action": [' + "1" * 4500
                              + '], "score": 0}]}\n', "credax", r"in\.jsonl:2: .*digits"),
    "deep_nesting_meta": (LINE1 + '{"prompt_id": "p", "turns": [], "meta": {"a": ' + "[" * 100000
                          + "]" * 100000 + "}}\n", "credax", r"in\.jsonl:2: .*nest"),
    "deep_nesting_prompt_id": (LINE1 + '{"prompt_id": ' + "[" * 50000 + "]" * 50000 + "}\n",
                               "credax", r"in\.jsonl:2: .*nest"),
    "token_beyond_int32": (_turn_line(action=[2**31]), "credax",
                           r"in\.jsonl:2: field `turns\[0\]\.action\[0\]`"),
    "token_huge": (_turn_line(action=[1, 2**64]), "credax",
                   r"in\.jsonl:2: field `turns\[0\]\.action\[1\]`"),
    "lone_surrogate_prompt_id": (LINE1 + '{"prompt_id": "a\\ud800", "turns": [{"action": [1], "score"'
                                 ': 1}]}\n', "credax", r"in\.jsonl:2: field `prompt_id`.*surrogate"),
    "lone_surrogate_role": (LINE1 + '{"prompt_id": "a", "turns": [{"action": [1], "score": 1, "role":'
                            ' "\\udc00"}]}\n', "credax",
                            r"in\.jsonl:2: field `turns\[0\]\.role`.*surrogate"),
    "lone_surrogate_meta": (LINE1 + '{"prompt_id": "a", "turns": [{"action": [1], "score": 1}], '
                            '"meta": {"k": ["\\uDBFF"]}}\n', "credax",
                            r"in\.jsonl:2: field `meta\.k\[0\]`.*surrogate"),
    "verl_huge_int_score": ('{"input": "a", "output": "b", "score": 1' + "0" * 400 + ', "step": 1}\n',
                            "verl", r"in\.jsonl:1: field `score`"),
    "verl_overlong_step": ('{"input": "a", "output": "b", "score": 1, "step": ' + "9" * 5000 + "}\n",
                           "verl", r"in\.jsonl:1: .*digits"),
    "verl_deep_nesting": ('{"input": "a", "output": "b", "score": 1, "step": 1, "x": ' + "[" * 100000
                          + "]" * 100000 + "}\n", "verl", r"in\.jsonl:1: .*nest"),
    "verl_lone_surrogate_input": ('{"input": "\\ud800", "output": "b", "score": 1, "step": 1}\n',
                                  "verl", r"in\.jsonl:1: field `input`.*surrogate"),
}
for _label, (_text, _fmt, _match) in READ_FAILS.items():

    def _p(text=_text, fmt=_fmt, match=_match):
        raises(RolloutFormatError, match, _read, text, fmt)

    probe("files", f"read_names_line_{_label}")(_p)


@probe("files", "read_valid_surrogate_pair_is_fine")
def _():
    # A surrogate *pair* escape is one character (U+1F600): valid, read as it is.
    got = _read('{"prompt_id": "\\ud83d\\ude00", "turns": [{"action": [1], "score": 1}]}\n')
    assert got[0].prompt_id == "😀"


@probe("files", "read_huge_float_still_named")
def _():
    # 1e400 parses as inf: refused as not finite (this one was right before).
    raises(RolloutFormatError, r"in\.jsonl:1: field `turns\[0\]\.score`: expected a finite",
           _read, '{"prompt_id": "p", "turns": [{"action": [1], "score": 1e400}]}\n')


@probe("files", "read_then_write_round_trip_of_every_accepted_kind")
def _():
    text = ('{"prompt_id": [1, "a", ' + str(2**80) + '], "prompt": [0, 2147483647], "outcome": null,'
            ' "turns": [{"action": [], "score": -0.0, "observation": [5], "role": "D", "reward": 1e-300,'
            ' "anchor": -7}], "meta": {"x": [1, {"y": null}]}}\n')
    first = _read(text)
    again = _round_trip(first)
    for a, b in zip(first, again, strict=True):
        assert (a.prompt_id, a.prompt, a.outcome, a.turns) == (b.prompt_id, b.prompt, b.outcome,
                                                               b.turns)


# ============================================================================================
# Class f32: finite in float64, beyond float32 when batched; shrinkage at large magnitudes.
# ============================================================================================

F32_MAX = float(np.finfo(np.float32).max)
BIG = np.array([1e39, -1e39, 0.0, 0.5])
OVERFLOW_CALLS = {
    "grpo": lambda x: credax.grpo_advantages(x, IDS4),
    "group_normalize": lambda x: credax.group_normalize(x, IDS4),
    "rloo": lambda x: credax.rloo_advantages(x, IDS4),
    "group_mean": lambda x: credax.group_mean(x, IDS4),
    "peer_mean": lambda x: credax.peer_mean(x, IDS4),
    "shrinkage": lambda x: credax.shrinkage_advantages(x, IDS4),
    "dead_groups": lambda x: credax.dead_groups(x, IDS4),
    "validate_rewards": lambda x: credax.validate_rewards(x, IDS4),
}
# validate_rewards checked finiteness in float64 only, and check_group_ids accepted a tuple.
for _label, _call in OVERFLOW_CALLS.items():

    def _p(call=_call):
        # Before: JAX (x64 off) cast 1e39 to inf and the group came out NaN with no error.
        raises(ValueError, r"holds 1e\+39 at index 0.*float32", call, BIG)

    probe("f32", f"float64_beyond_float32_{_label}")(_p)


@probe("f32", "float64_beyond_float32_names_the_argument")
def _():
    raises(ValueError, r"`rewards` holds 1e\+39 at index 0.*float32", credax.grpo_advantages, BIG,
           IDS4)
    raises(ValueError, r"`x` holds -1e\+39 at index 1", credax.group_normalize,
           np.array([0.5, -1e39, 0.0, 0.5]), IDS4)


@probe("f32", "list_beyond_float32")
def _():
    raises(ValueError, r"`rewards` holds 1e\+39", credax.grpo_advantages, [1e39, 0.0, 1.0, 1.0],
           IDS4)


@probe("f32", "turn_scores_beyond_float32")
def _():
    s = S22.astype(np.float64)
    s[1, 1] = -2e38 * 2
    raises(ValueError, r"`scores` holds -4e\+38 at index \(1, 1\)", credax.tcpo_advantages, s,
           TM22, IDS4)
    raises(ValueError, r"`turn_rewards` holds -4e\+38", credax.mt_grpo_advantages, s, R4, TM22,
           IDS4)


@probe("f32", "gae_rewards_beyond_float32")
def _():
    r = np.zeros((1, 3))
    r[0, 2] = 5e38
    raises(ValueError, r"`rewards` holds 5e\+38", credax.gae_advantages, r, np.zeros((1, 3)),
           np.ones((1, 3), bool))


@probe("f32", "masked_beyond_float32_is_refused_too")
def _():
    # The host check cannot know which mask goes with which array: 1e39 is refused at a masked
    # entry too (documented); NaN / inf padding is not narrowed and passes.
    m = np.array([True, True, False, True])
    raises(ValueError, r"`rewards` holds 1e\+39 at index 2", credax.grpo_advantages,
           np.array([1.0, 0.0, 1e39, 0.5]), IDS4, m)
    out = credax.grpo_advantages(np.array([1.0, 0.0, INF, 0.5]), IDS4, m)
    np.testing.assert_allclose(out, [0.70710576, -0.70710576, 0.0, 0.0], rtol=1e-6)


@probe("f32", "float32_max_itself_is_fine")
def _():
    # ±float32 max is representable: the group [max, -max] is ±1/√2·√2 = ±0.7071 (set units).
    x = np.array([F32_MAX, -F32_MAX, 0.5, 0.5])
    np.testing.assert_allclose(credax.grpo_advantages(x, IDS4), GRPO4, rtol=1e-5)


@probe("f32", "nan_in_float64_follows_the_rule")
def _():
    # NaN / inf keep the documented rule (NaN at the outputs whose formula includes them).
    out = np.asarray(credax.grpo_advantages(np.array([NAN, 1.0, 0.5, 0.5]), IDS4))
    assert np.isnan(out[:2]).all() and (out[2:] == 0).all()


@probe("f32", "x64_on_keeps_float64")
def _():
    # With x64 on there is no float32 cast: 1e39 is an ordinary float64 (±0.7071 for [1e39, -1e39]).
    with jax.enable_x64(True):
        out = credax.grpo_advantages(BIG, IDS4)
    np.testing.assert_allclose(out[:2], [0.70710678, -0.70710678], rtol=1e-6)


R8 = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
IDS8 = np.array([0, 0, 1, 1, 2, 2, 3, 3])
# shrinkage_baseline(R8, IDS8) hand-worked in its docstring: c = 0.25 for every prompt and
# advantages (.125, .125, -.5, .5, -.125, -.125, .5, -.5). c is scale-free and the advantages
# scale with the rewards, so r·s gives c = .25 and s·A for every s.
SHRINK_A = np.array([0.125, 0.125, -0.5, 0.5, -0.125, -0.125, 0.5, -0.5])
for _s in (1e10, 1e19, 1e20, 1e25, 1e30, 1e35, 1e38, 1e-10, 1e-20, 1e-30, 1e-36):
    for _loo in (False, True):

        def _p(s=_s, loo=_loo):
            # Before: NaN from 1e20 up (squares overflow) and c = 1 from 1e-20 down (squares
            # underflow to 0: "identical prompt means").
            x = (R8 * s).astype(np.float32)
            out = credax.shrinkage_baseline(x, IDS8, leave_one_out=loo)
            ref = credax.shrinkage_baseline(R8.astype(np.float32), IDS8, leave_one_out=loo)
            np.testing.assert_allclose(out.shrinkage, ref.shrinkage, rtol=1e-5)
            np.testing.assert_allclose(np.asarray(out.baseline, np.float64) / s,
                                       np.asarray(ref.baseline), rtol=1e-5, atol=1e-6)
            adv = np.asarray(credax.shrinkage_advantages(x, IDS8, leave_one_out=loo), np.float64)
            if not loo:
                np.testing.assert_allclose(adv / s, SHRINK_A, rtol=1e-5, atol=1e-6)

        probe("f32", f"shrinkage_scale_{_s:g}_{'loo' if _loo else 'mean'}")(_p)


@probe("f32", "shrinkage_offset_near_float32_max")
def _():
    # r = 3e38 + R8·1e37 (all finite): c as for R8 (it is shift- and scale-free), no NaN.
    x = (np.float64(3e38) + R8 * 1e37).astype(np.float32)
    out = credax.shrinkage_baseline(x, IDS8)
    np.testing.assert_allclose(out.shrinkage, 0.25, rtol=1e-4)
    assert np.isfinite(np.asarray(out.baseline)).all()


@probe("f32", "shrinkage_nan_valid_reward_poisons_every_row")
def _():
    # A NaN reward at a valid row is in the grand mean and the pooled variance of every prompt:
    # NaN at every valid row (before: silently left out, with its row still counted in n_p).
    x = R8.astype(np.float32).copy()
    x[3] = np.nan
    out = credax.shrinkage_baseline(x, IDS8)
    assert np.isnan(np.asarray(out.baseline)).all() and np.isnan(float(out.grand_mean))
    m = np.ones(8, bool)
    m[3] = False  # masked: absent, the others finite
    assert np.isfinite(np.asarray(credax.shrinkage_baseline(x, IDS8, m).baseline)).all()


@probe("f32", "shrinkage_mixed_magnitudes")
def _():
    # One prompt at 1e30, the others 0/1: spread ~ 1e60 in float32 used to overflow. With
    # μ = (1e30, .5, 0, .5), μ̄ ≈ 2.5e29, Σ(μ - μ̄)² ≈ .75e60, σ² = (0 + .5 + 0 + .5)/4 = .25:
    # c = (4 - 3)(.25/2)/.75e60 ≈ 1.7e-61 -> 0 in float32: the baselines are the prompt means.
    x = R8.astype(np.float32).copy()
    x[:2] = 1e30
    out = credax.shrinkage_baseline(x, IDS8)
    np.testing.assert_allclose(out.shrinkage, 0.0, atol=1e-30)
    np.testing.assert_allclose(out.baseline, [1e30, 1e30, 0.5, 0.5, 0, 0, 0.5, 0.5], rtol=1e-5)


# ============================================================================================
# Class ids: every hashable kind, 64-bit inputs beyond int32, narrow ints, tuples.
# ============================================================================================

cv = None


def _verl():
    global cv
    if cv is None:
        pytest.importorskip("torch")
        pytest.importorskip("verl")
        import credax.verl as module
        cv = module
    return cv


def _uids(values):
    return _verl().uid_to_group_ids(values).tolist()


def _obj(values):
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


_nan = float("nan")
NAN_UIDS = {
    "same_object": _obj([_nan, _nan, "b"]),
    "distinct_objects": _obj([float("nan"), float("nan"), "b"]),
    "float_array": np.array([np.nan, np.nan, 1.0]),
    "numpy_nan": _obj([np.float32("nan"), "a", "a"]),
    "nan_in_tuple": [(1, _nan), (1, _nan), (2, 0)],
    "nan_deep_in_tuple": [("a", (1, float("nan"))), ("a", (1, 2.0)), "b"],
}
for _label, _values in NAN_UIDS.items():

    def _p(values=_values):
        # Before: the same NaN object merged rows, distinct ones split them (NaN != NaN).
        raises(ValueError, r"`index`.*row \d.*NaN", _uids, values)

    probe("ids", f"verl_nan_uid_{_label}")(_p)

# (uids, dense ids by type and value: 1, 1.0, True and "1" are four prompts; NumPy scalars count
# as the Python values they hold; tuples compare element by element the same way).
EXACT_UIDS = {
    "bool_int_float_str": (_obj([True, 1, 1.0, "1", 1]), [0, 1, 2, 3, 1]),
    "numpy_int_is_int": (_obj([np.int64(5), 5, np.uint8(5)]), [0, 0, 0]),
    "numpy_str_is_str": (_obj([np.str_("a"), "a"]), [0, 0]),
    "numpy_bool_is_bool": (_obj([np.bool_(True), True, 1]), [0, 0, 1]),
    "numpy_float_is_float": (_obj([np.float64(0.5), 0.5, np.float32(0.5)]), [0, 0, 0]),
    "bytes_vs_str": (_obj([b"a", "a"]), [0, 1]),
    "tuple_list_is_1d": ([(1, "a"), (1, "a"), (2, "a")], [0, 0, 1]),
    "tuple_mixed_numeric": ([(1, "a"), (1.0, "a"), (True, "a"), (np.int64(1), "a")], [0, 1, 2, 0]),
    "nested_tuples": ([(1, (2, 3)), (1, (2.0, 3)), (1, (2, 3))], [0, 1, 0]),
    "huge_ints": (_obj([2**70, 2**70 + 1, 2**70]), [0, 1, 0]),
    "negative_zero": (_obj([0.0, -0.0]), [0, 0]),
}
for _label, (_values, _want) in EXACT_UIDS.items():

    def _p(values=_values, want=_want):
        assert _uids(values) == want

    probe("ids", f"verl_uid_exact_{_label}")(_p)


@probe("ids", "verl_uid_unhashable_named")
def _():
    raises(TypeError, r"`index` row 1.*hashable", _uids, _obj(["a", ["b"], "a"]))


@probe("ids", "verl_uid_string_not_a_sequence")
def _():
    raises(TypeError, r"`index`.*string", _uids, "aabb")


def _verl_batch():
    torch = pytest.importorskip("torch")
    rm = torch.tensor([[1, 1, 0, 1], [1, 0, 1, 1]])
    tlr = torch.zeros(2, 4)
    tlr[:, -1] = torch.tensor([1.0, 0.0])
    return tlr, rm, _obj(["a", "a"])


NON_TENSOR_FAILS = {
    "roles_row_string": ({"turn_roles": ["DE", ["D", "E"]]}, TypeError,
                         r"non_tensor_batch\['turn_roles'\] row 0.*string"),
    "roles_field_string": ({"turn_roles": "DE"}, TypeError, r"non_tensor_batch\['turn_roles'\]"),
    "scores_row_string": ({"turn_scores": ["01", [0.0, 1.0]]}, TypeError,
                          r"non_tensor_batch\['turn_scores'\] row 0.*string"),
    "scores_row_scalar": ({"turn_scores": [0.5, 0.5]}, TypeError,
                          r"non_tensor_batch\['turn_scores'\] row 0"),
    "scores_beyond_float32": ({"turn_scores": [[1e39, 0.0], [0.0, 0.0]]}, ValueError,
                              r"non_tensor_batch\['turn_scores'\] row 0, turn 0.*1e\+39"),
    "scores_nan": ({"turn_scores": [[0.0, 0.0], [0.0, NAN]]}, ValueError,
                   r"non_tensor_batch\['turn_scores'\] row 1, turn 1.*nan"),
    "scores_not_numbers": ({"turn_scores": [["a", 0.0], [0.0, 1.0]]}, TypeError,
                           r"non_tensor_batch\['turn_scores'\] row 0, turn 0"),
    "anchors_nan": ({"anchor_ids": [[_nan, 1], [_nan, 1]]}, ValueError,
                    r"non_tensor_batch\['anchor_ids'\] row 0, turn 0.*NaN"),
    "anchors_unhashable": ({"anchor_ids": [[[1], 1], [2, 1]]}, TypeError,
                           r"non_tensor_batch\['anchor_ids'\] row 0, turn 0.*hashable"),
    "anchors_row_string": ({"anchor_ids": ["ab", [1, 2]]}, TypeError,
                           r"non_tensor_batch\['anchor_ids'\] row 0.*string"),
}
for _label, (_extra, _exc, _match) in NON_TENSOR_FAILS.items():

    def _p(extra=_extra, exc=_exc, match=_match):
        tlr, rm, uid = _verl_batch()
        raises(exc, match, _verl().from_verl, tlr, rm, uid, extra)

    probe("ids", f"verl_{_label}")(_p)


@probe("ids", "verl_anchors_exact_by_type")
def _():
    # True, 1 and 1.0 are three states (as pad_rollouts compares anchors); np.int64(1) is 1.
    tlr, rm, uid = _verl_batch()
    out = _verl().from_verl(tlr, rm, uid, {"anchor_ids": [[True, 1], [1.0, np.int64(1)]]})
    assert out.anchor_ids.tolist() == [[0, 1], [2, 1]]


@probe("ids", "verl_num_turns_checked")
def _():
    torch = pytest.importorskip("torch")
    for bad, exc in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)):
        raises(exc, "`num_turns`", _verl().turns_from_response_mask, torch.ones(1, 3),
               num_turns=bad)
        raises(exc, "`num_turns`", _verl().make_estimator, "grpo", num_turns=bad)


@probe("ids", "verl_nan_uid_in_estimator")
def _():
    # The registered estimator refuses it too (before: two NaN rows of one object merged and got
    # ±0.7071).
    tlr, rm, _ = _verl_batch()
    raises(ValueError, "NaN", _verl().ESTIMATORS["credax_grpo"], token_level_rewards=tlr,
           response_mask=rm, index=_obj([_nan, _nan]))


# 64-bit NumPy index inputs beyond int32 (x64 off): JAX would wrap them (2**32 -> 0, a real turn).
TT_BIG = np.array([[0, 1, 2**32]])
BEYOND_INT32 = {
    "broadcast_token_turn": lambda: credax.broadcast_to_tokens(np.ones((1, 2), np.float32), TT_BIG),
    "broadcast_token_turn_uint64": lambda: credax.broadcast_to_tokens(
        np.ones((1, 2), np.float32), TT_BIG.astype(np.uint64)),
    "turn_values": lambda: credax.turn_values(np.ones((1, 3), np.float32), TT_BIG, num_turns=2),
    "turn_gae": lambda: credax.turn_gae_advantages(np.ones((1, 2), np.float32),
                                                   np.ones((1, 3), np.float32), TT_BIG,
                                                   np.ones((1, 2), bool)),
    "turn_surprisal": lambda: credax.turn_surprisal(np.ones((1, 3), np.float32), TT_BIG,
                                                    num_turns=2),
    "triage_roles": lambda: credax.triage_advantages(np.ones(1, np.float32),
                                                     np.array([[0, 2**32 + 1]]),
                                                     np.ones((1, 2), bool)),
    "credit_by_role": lambda: credax.credit_by_role(np.ones((1, 2), np.float32),
                                                    np.array([[1, 2**32 + 1]]),
                                                    np.ones((1, 2), bool)),
    "token_logprobs_tokens": lambda: credax.token_logprobs(np.zeros((1, 3, 4), np.float32),
                                                           np.array([[0, 1, 2**32 + 1]])),
}
_raising_probes("ids", "int64_beyond_int32", BEYOND_INT32, ValueError, r"int32")


@probe("ids", "int64_within_int32_is_fine")
def _():
    # int64 values that fit pass unchanged: turn 1's value on token 2.
    out = credax.broadcast_to_tokens(np.array([[3.0, 4.0]], np.float32), np.array([[0, -1, 1]]))
    np.testing.assert_array_equal(out, [[3.0, 0.0, 4.0]])


@probe("ids", "anchor_hit_ratio_64bit_anchors")
def _():
    # Anchors 2**32 + 5 and 5 are two states: no step shares its (prompt, anchor) group -> 0.
    # Before: JAX wrapped 2**32 + 5 to 5 and the ratio was 1.
    out = credax.anchor_hit_ratio(np.array([[2**32 + 5], [5]]), np.ones((2, 1), bool),
                                  np.array([0, 0]))
    assert float(out) == 0.0


@probe("ids", "credit_by_role_int8_roles_many_roles")
def _():
    # int8 roles with num_roles=200: before, OverflowError from inside JAX ("Python integer 150
    # out of bounds for int8"). Widened first: role 5 and role 120 each count once.
    s = credax.credit_by_role(np.ones((1, 2), np.float32), np.array([[5, 120]], np.int8),
                              np.ones((1, 2), bool), num_roles=200)
    assert s.count[5] == 1 and s.count[120] == 1 and float(np.sum(s.count)) == 2


@probe("ids", "credit_by_role_uint8_roles")
def _():
    s = credax.credit_by_role(np.ones((1, 2), np.float32), np.array([[250, 0]], np.uint8),
                              np.ones((1, 2), bool), num_roles=300)
    assert s.count[250] == 1 and s.count[0] == 1


@probe("ids", "group_count_int8_ids_many_rows")
def _():
    # 300 rows of int8 id 0: a count of 300 (beyond int8) is exact.
    assert int(credax.group_count(np.zeros(300, np.int8))[0]) == 300


@probe("ids", "verl_response_mask_int8")
def _():
    torch = pytest.importorskip("torch")
    tt, tm = _verl().turns_from_response_mask(torch.tensor([[1, 1, 0, 1]], dtype=torch.int8))
    assert tt.tolist() == [[0, 0, -1, 1]] and tm.tolist() == [[True, True]]


TUPLE_IDS = {
    "grpo": lambda: credax.grpo_advantages(R4, (0, 0, 1, 1)),
    "group_normalize": lambda: credax.group_normalize(R4, (0, 0, 1, 1)),
    "groups": lambda: credax.groups((0, 0, 1, 1)),
    "groups_num_groups": lambda: credax.groups((0, 0, 1, 1), num_groups=2),
    "groups_contiguous": lambda: credax.groups((0, 0, 1, 1), layout="contiguous", group_size=2),
    "dead_groups": lambda: credax.dead_groups(R4, (0, 0, 1, 1)),
    "shrinkage": lambda: credax.shrinkage_baseline(R4, (0, 0, 1, 1)),
    "validate_rewards": lambda: credax.validate_rewards(R4, (0, 0, 1, 1)),
}
_raising_probes("ids", "tuple_group_ids", TUPLE_IDS, TypeError, r"`group_ids`.*tuple")


@probe("ids", "list_group_ids_still_work")
def _():
    np.testing.assert_allclose(credax.grpo_advantages(R4, [0, 0, 1, 1]), GRPO4, rtol=1e-6)


# ============================================================================================
# Class torch: unsigned index tensors, meta-device tensors.
# ============================================================================================


def _ct():
    pytest.importorskip("torch")
    import credax.torch as ct
    return ct


for _dt, _vals in (("uint8", [200, 200, 7, 7]), ("uint16", [60000, 60000, 7, 7]),
                   ("uint32", [2**32 - 1, 2**32 - 1, 7, 7]), ("uint64", [2**63, 2**63, 7, 7])):

    def _p(dt=_dt, vals=_vals):
        torch = pytest.importorskip("torch")  # skip without the extra, never an ImportError
        ids = torch.tensor(vals, dtype=getattr(torch, dt))
        out = _ct().grpo_advantages(torch.tensor(R4), ids)
        np.testing.assert_allclose(out.numpy(), [0.7071, -0.7071, 0.0, 0.0], atol=1e-4)

    probe("torch", f"unsigned_group_ids_{_dt}")(_p)

for _dt in ("uint8", "uint16", "uint32", "uint64"):

    def _p(dt=_dt):
        # Before: uint32 / uint64 raised NotImplementedError ("aminmax_cpu" not implemented).
        torch = pytest.importorskip("torch")  # skip without the extra, never an ImportError
        tt = torch.tensor([[0, 1, 1, 0]], dtype=getattr(torch, dt))
        out = _ct().broadcast_to_tokens(torch.tensor([[3.0, 4.0]]), tt)
        assert out.tolist() == [[3.0, 4.0, 4.0, 3.0]]

    probe("torch", f"unsigned_token_turn_{_dt}")(_p)

for _dt, _big in (("uint32", 2**32 - 1), ("uint64", 2**64 - 1), ("uint64_top", 2**63)):

    def _p(dt=_dt, big=_big):
        torch = pytest.importorskip("torch")  # skip without the extra, never an ImportError
        tt = torch.tensor([[0, 1, big]], dtype=getattr(torch, dt.removesuffix("_top")))
        raises(ValueError, r"`token_turn`.*int32", _ct().broadcast_to_tokens,
               torch.tensor([[3.0, 4.0]]), tt)

    probe("torch", f"unsigned_token_turn_beyond_int32_{_dt}")(_p)


def _meta_calls():
    torch = pytest.importorskip("torch")  # skip without the extra, never an ImportError
    ct = _ct()
    meta = torch.empty(4, device="meta")
    meta_ids = torch.empty(4, dtype=torch.int64, device="meta")
    return {
        "rewards": lambda: ct.grpo_advantages(meta, torch.tensor([0, 0, 1, 1])),
        "group_ids": lambda: ct.grpo_advantages(torch.tensor(R4), meta_ids),
        "both": lambda: ct.grpo_advantages(meta, meta_ids),
        "groups": lambda: ct.groups(meta_ids),
        "to_jax": lambda: ct.to_jax(meta, "rewards"),
        "dense_ids": lambda: ct.dense_ids(meta_ids, "group_ids"),
        "turns_from_response_mask": lambda: _verl().turns_from_response_mask(
            torch.ones(2, 3, device="meta")),
        "from_verl": lambda: _verl().from_verl(torch.zeros(2, 3, device="meta"),
                                               torch.ones(2, 3, device="meta"), _obj(["a", "b"])),
    }


for _label in ("rewards", "group_ids", "both", "groups", "to_jax", "dense_ids",
               "turns_from_response_mask", "from_verl"):

    def _p(label=_label):
        # Before: "all tensors must be on one device", "Unknown device type meta for Dlpack" or
        # "Tensor.item() cannot be called on meta tensors".
        raises(ValueError, r"`\w+` is a meta tensor", _meta_calls()[label])

    probe("torch", f"meta_{_label}")(_p)


@probe("torch", "float64_beyond_float32")
def _():
    torch = pytest.importorskip("torch")  # skip without the extra, never an ImportError
    x = torch.tensor([1e39, 0.0, 0.5, 0.5], dtype=torch.float64)
    raises(ValueError, r"`rewards` holds 1e\+39.*float32", _ct().grpo_advantages, x,
           torch.tensor([0, 0, 1, 1]))


# ============================================================================================
# Class gae: zero-length axes, per-row λ / γ range checks.
# ============================================================================================

ZERO_GAE = {
    "gae_no_steps": (lambda: credax.gae_advantages(np.zeros((2, 0)), np.zeros((2, 0)),
                                                   np.ones((2, 0), bool)), (2, 0)),
    "gae_no_rows_no_steps": (lambda: credax.gae_advantages(np.zeros((0, 0)), np.zeros((0, 0)),
                                                           np.ones((0, 0), bool)), (0, 0)),
    "gae_no_steps_row_lam": (lambda: credax.gae_advantages(
        np.zeros((2, 0)), np.zeros((2, 0)), np.ones((2, 0), bool), lam=np.array([0.5, 1.0]),
        bootstrap=np.ones(2)), (2, 0)),
    "turn_gae_no_turns": (lambda: credax.turn_gae_advantages(
        np.zeros((2, 0)), np.zeros((2, 3)), -np.ones((2, 3), int), np.ones((2, 0), bool)), (2, 0)),
    "turn_gae_no_turns_no_tokens": (lambda: credax.turn_gae_advantages(
        np.zeros((2, 0)), np.zeros((2, 0)), np.zeros((2, 0), int), np.ones((2, 0), bool)), (2, 0)),
    "turn_gae_no_rows": (lambda: credax.turn_gae_advantages(
        np.zeros((0, 2)), np.zeros((0, 3)), np.zeros((0, 3), int), np.ones((0, 2), bool)), (0, 2)),
}
for _label, (_call, _shape) in ZERO_GAE.items():

    def _p(call=_call, shape=_shape):
        # Before: IndexError from inside the scan for an empty step axis.
        out = call()
        for field in out:
            assert field.shape == shape

    probe("gae", f"zero_length_{_label}")(_p)


@probe("gae", "zero_length_turn_values")
def _():
    out = credax.turn_values(np.zeros((2, 0), np.float32), np.zeros((2, 0), int), num_turns=2)
    assert out.values.shape == (2, 2) and not np.asarray(out.has_token).any()


_ROW = np.ones((2, 3), bool)
BAD_ROWS = {
    "lam_numpy_above_1": ("lam", np.array([0.5, 1.5]), r"`lam` must lie in \[0, 1\]; got 1.5 at row 1"),
    "lam_numpy_negative": ("lam", np.array([-0.1, 0.5]), r"`lam` must lie in \[0, 1\]; got -0.1 at row 0"),
    "lam_numpy_nan": ("lam", np.array([0.5, NAN]), r"`lam` must lie in \[0, 1\]; got nan at row 1"),
    "lam_list": ("lam", [0.9, 2.0], r"`lam` must lie in \[0, 1\]; got 2.0 at row 1"),
    "lam_jax_committed": ("lam", jnp.array([0.5, 1.01]), r"`lam` must lie in \[0, 1\]; got 1.01"),
    "gamma_numpy_above_1": ("gamma", np.array([1.0, 1.2]), r"`gamma` must lie in \[0, 1\]; got 1.2"),
    "gamma_numpy_negative": ("gamma", np.array([-1.0, 0.5]), r"`gamma` must lie in \[0, 1\]; got -1.0"),
    "gamma_jax_inf": ("gamma", jnp.array([INF, 0.5]), r"`gamma` must lie in \[0, 1\]; got inf"),
}
for _label, (_name, _value, _match) in BAD_ROWS.items():

    def _p(name=_name, value=_value, match=_match):
        # Before: the per-row values were never checked (only scalars were): γ = -1 or λ = 1.5
        # gave finite garbage, NaN gave NaN rows.
        raises(ValueError, match, credax.gae_advantages, np.zeros((2, 3)), np.zeros((2, 3)), _ROW,
               **{name: value})
        raises(ValueError, match, credax.turn_gae_advantages, np.zeros((2, 2)), np.zeros((2, 3)),
               np.array([[0, 0, 1], [0, 1, 1]]), np.ones((2, 2), bool), **{name: value})

    probe("gae", f"per_row_{_label}")(_p)


@probe("gae", "per_row_valid_values_work")
def _():
    # Row 0: λ = 0 (one-step TD), row 1: λ = 1 (Monte Carlo), γ = 1, V = 0, reward 1 at the end:
    # row 0 advantages (0, 0, 1) (δ_j = r_j), row 1 (1, 1, 1).
    r = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    out = credax.gae_advantages(r, np.zeros((2, 3)), _ROW, lam=np.array([0.0, 1.0]))
    np.testing.assert_allclose(out.advantages, [[0, 0, 1], [1, 1, 1]])


@probe("gae", "per_row_traced_is_used_as_given")
def _():
    # Inside the caller's jit the values cannot be seen: used as given (documented).
    f = jax.jit(lambda lam: credax.gae_advantages(np.zeros((2, 3)), np.zeros((2, 3)), _ROW,
                                                  lam=lam).advantages)
    assert f(jnp.array([0.5, 1.5])).shape == (2, 3)


@probe("gae", "per_row_wrong_shape_named")
def _():
    raises(ValueError, r"`lam` must be a scalar or have shape \[B\]", credax.gae_advantages,
           np.zeros((2, 3)), np.zeros((2, 3)), _ROW, lam=np.array([0.5, 0.5, 0.5]))


# ============================================================================================
# Class vocab: V = 0, -inf logits and near one-hot rows in token_entropy, tokens outside [0, V).
# ============================================================================================


@probe("vocab", "entropy_v0")
def _():
    # Before: "zero-size array to reduction operation max" from inside JAX.
    raises(ValueError, r"`logits` must have a vocabulary axis V >= 1", credax.token_entropy,
           np.zeros((1, 2, 0), np.float32))
    raises(ValueError, r"`logits` must have a vocabulary axis V >= 1", credax.token_entropy,
           np.zeros((1, 2, 0), np.float32), mask=np.ones((1, 2), bool))


@probe("vocab", "v0_everywhere")
def _():
    raises(ValueError, "V >= 1", credax.token_logprobs, np.zeros((1, 2, 0), np.float32),
           np.zeros((1, 2), int))
    raises(ValueError, "V >= 1", credax.token_logprobs_from_hidden, np.zeros((1, 2, 3), np.float32),
           np.zeros((3, 0), np.float32), np.zeros((1, 2), int), with_entropy=True)


NEG_INF_ROWS = {
    # [0, -inf, -inf]: one-hot, H = 0 (before: NaN from 0 · -inf).
    "one_hot": [0.0, -INF, -INF, -INF],
    # [1, 2, -inf, -inf]: the entropy of softmax([1, 2]) = 0.5822 (reference).
    "two_live": [1.0, 2.0, -INF, -INF],
    "live_at_end": [-INF, -INF, 3.0, 3.0],  # H = ln 2
    "three_live_large": [500.0, -INF, 499.0, 498.0],
}
for _label, _row in NEG_INF_ROWS.items():

    def _p(row=_row):
        x = np.array([[row]], np.float32)
        np.testing.assert_allclose(credax.token_entropy(x)[0, 0], entropy_reference(x)[0, 0],
                                   rtol=1e-5, atol=1e-7)
        g = jax.grad(lambda v: credax.token_entropy(v).sum())(jnp.asarray(x))
        assert np.isfinite(np.asarray(g)).all()
        h = credax.token_entropy(x, temperature=0.5)
        np.testing.assert_allclose(h[0, 0], entropy_reference(x, 0.5)[0, 0], rtol=1e-5, atol=1e-7)

    probe("vocab", f"entropy_neg_inf_{_label}")(_p)


@probe("vocab", "entropy_all_neg_inf_row_is_nan")
def _():
    # A row of only -inf is no distribution: NaN (documented), the other rows as without it.
    x = np.array([[[-INF, -INF], [0.0, 0.0]]], np.float32)
    out = np.asarray(credax.token_entropy(x))
    assert np.isnan(out[0, 0]) and abs(out[0, 1] - math.log(2)) < 1e-6
    out = np.asarray(credax.token_entropy(x, mask=np.array([[False, True]])))  # masked: 0
    assert out[0, 0] == 0.0


NEAR_ONE_HOT = {
    "issue30_300_290": [[300.0, 290.0]],  # 4.994e-4 (issue 30; float32 before: 0.0)
    "1000_990_980": [[1000.0, 990.0, 980.0]],
    "50_30": [[50.0, 30.0]],
    "mixed_rows": [[300.0, 290.0], [0.0, 0.0], [-5.0, 20.0]],
    "1e4_gap_5": [[1e4, 1e4 - 5.0]],
}
for _label, _rows in NEAR_ONE_HOT.items():

    def _p(rows=_rows):
        # Float32 keeps H to ~1e-7 absolute (float resolution of the O(1) shifted terms) and
        # 1e-3 relative, whatever the logits' magnitude; before, the error was the ulp of the
        # largest logit (3e-5 at 300: [300, 290] gave 0.0, float64 4.994e-4).
        x = np.array([rows], np.float32)
        np.testing.assert_allclose(credax.token_entropy(x), entropy_reference(x), rtol=1e-3,
                                   atol=1e-7)
        lp = credax.token_logprobs_from_hidden(x, np.eye(x.shape[-1], dtype=np.float32),
                                               np.zeros(x.shape[:2], int), with_entropy=True)
        np.testing.assert_allclose(lp.entropy, entropy_reference(x), rtol=1e-3, atol=1e-7)

    probe("vocab", f"entropy_near_one_hot_{_label}")(_p)


@probe("vocab", "entropy_random_large_logits_vs_float64")
def _():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(2, 8, 50)) * 30 + 200).astype(np.float32)
    np.testing.assert_allclose(credax.token_entropy(x), entropy_reference(x), rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(credax.token_entropy(x, temperature=0.7),
                               entropy_reference(x, 0.7), rtol=1e-3, atol=1e-5)


@probe("vocab", "entropy_gradient_matches_float64")
def _():
    # dH/dz_v = -p_v (log p_v + H), from H = -Σ p log p; reference in float64.
    x = np.array([[[300.0, 290.0, 285.0]]], np.float32)
    g = np.asarray(jax.grad(lambda v: credax.token_entropy(v).sum())(jnp.asarray(x)))
    z = x.astype(np.float64)[0, 0]
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    h = -(p * np.log(p)).sum()
    np.testing.assert_allclose(g[0, 0], -p * (np.log(p) + h), rtol=1e-2, atol=1e-8)


TOKENS_OUT = {
    "equal_v": np.array([[0, 4]]),
    "negative": np.array([[-1, 0]]),
    "int32_max": np.array([[0, 2**31 - 1]]),
    "jax_array": jnp.array([[0, 7]]),
    "list": [[0, 5]],
}
for _label, _tokens in TOKENS_OUT.items():

    def _p(tokens=_tokens):
        # Before: NaN log-probs with no error.
        raises(ValueError, r"`tokens` must lie in \[0, V=4\)", credax.token_logprobs,
               np.zeros((1, 2, 4), np.float32), tokens)
        raises(ValueError, r"`tokens` must lie in \[0, V=4\)", credax.token_logprobs_from_hidden,
               np.zeros((1, 2, 3), np.float32), np.zeros((3, 4), np.float32), tokens)

    probe("vocab", f"tokens_outside_vocab_{_label}")(_p)


@probe("vocab", "tokens_outside_vocab_masked_are_fine")
def _():
    # Padding ids (-100) at masked positions are allowed: documented, 0 there.
    out = credax.token_logprobs(np.zeros((1, 2, 4), np.float32), np.array([[1, -100]]),
                                mask=np.array([[True, False]]))
    np.testing.assert_allclose(out, [[-math.log(4), 0.0]], rtol=1e-6)
    raises(ValueError, r"tokens\[0, 1\] = -100", credax.token_logprobs,
           np.zeros((1, 2, 4), np.float32), np.array([[1, -100]]), mask=np.array([[True, True]]))


@probe("vocab", "tokens_outside_vocab_inside_jit_are_nan")
def _():
    # Inside the caller's jit the ids are traced and cannot be checked: NaN there (documented).
    f = jax.jit(lambda t: credax.token_logprobs(jnp.zeros((1, 2, 4)), t))
    out = np.asarray(f(jnp.array([[1, 4]])))
    assert abs(out[0, 0] + math.log(4)) < 1e-6 and np.isnan(out[0, 1])


@probe("vocab", "tokens_closed_over_inside_jit_are_nan")
def _():
    # Concrete ids closed over by the caller's jit are not checked there (the check would need a
    # value the trace does not have): NaN, no crash. (Before the fix of this round's check: a
    # ConcretizationTypeError from inside JAX; found by tests/test_losses.py.)
    tokens = jnp.array([[1, 4]])
    out = np.asarray(jax.jit(lambda x: credax.token_logprobs(x, tokens))(jnp.zeros((1, 2, 4))))
    assert abs(out[0, 0] + math.log(4)) < 1e-6 and np.isnan(out[0, 1])


# ============================================================================================
# Class testing: check_group_isolation catches ids compared in float32.
# ============================================================================================


def _float32_ids_grpo(rewards, group_ids, mask):
    """Dr. GRPO with ids compared in float32: ids that differ below float32's resolution merge."""
    ids = jnp.asarray(group_ids).astype(jnp.float32)
    same = (ids[:, None] == ids[None, :]) & mask[None, :] & mask[:, None]
    n = same.sum(axis=1).astype(rewards.dtype)
    total = jnp.where(same, rewards[None, :], jnp.zeros((), rewards.dtype)).sum(axis=1)
    mean = total / jnp.maximum(n, jnp.ones((), rewards.dtype))
    return jnp.where(mask, rewards - mean, jnp.zeros((), rewards.dtype))


def _adapter(fn):
    return lambda b: fn(b.rewards, b.group_ids, b.row_mask)


@probe("testing", "group_isolation_catches_float32_ids")
def _():
    import credax.testing as ctest

    with pytest.raises(AssertionError, match="group isolation violated"):
        ctest.check_group_isolation(_float32_ids_grpo, adapter=_adapter, max_examples=50,
                                    shrink=False)


@probe("testing", "group_isolation_passes_exact_ids")
def _():
    import credax.testing as ctest

    ctest.check_group_isolation(credax.grpo_advantages, adapter=_adapter, max_examples=30)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe(name):
    if name not in KNOWN:
        PROBES[name]()
        return
    try:
        PROBES[name]()
    except (Exception, pytest.fail.Exception) as err:  # noqa: BLE001 - any failure is the known one
        pytest.xfail(f"{KNOWN[name]} ({type(err).__name__})")
    pytest.fail(f"{name} passes now: remove it from KNOWN ({KNOWN[name]}).")


def test_probe_count():
    # Issue 27 asks for at least 200 new probes; every class has some.
    counts = {cls: sum(k.startswith(cls + ".") for k in PROBES) for cls in CLASSES}
    assert all(counts.values()), counts
    assert len(PROBES) >= 200, counts

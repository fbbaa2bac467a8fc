"""``credax.Normalization``: one options value for every estimator that normalises within groups.

What is checked: the object (immutable, a pytree with a traced ``eps`` and static fields, not a
mapping: ``**preset`` and ``dict(preset)`` are ``TypeError``s, ``asdict()`` gives the fields), that
every normalising estimator applies it (as the NumPy reference does with the same fields) and is
the only channel (its fields as loose keywords are refused by name, pointing at ``normalization=``),
that presets are instances, and the deprecation path (each deprecated spelling warns when the
Normalization is built, names its replacement and computes what it did).

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

import copy
import pickle

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import Normalization, presets
from tests.probes import INF, NAN, Probes, raises
from tests.reference import groups as ref

R = jnp.array([1.0, 0.0, 0.35, 0.35, 2.0, 0.5, -1.0])
IDS = jnp.array([3, 3, -1, -1, 42, 9, 9])
MASK = jnp.array([True, True, True, True, True, True, False])
CUSTOM = Normalization(scale="none", ddof=0, eps=1e-3, eps_mode="sqrt", singleton="raw",
                       leave_one_out=True)
FIELDS = ["center", "scale", "ddof", "eps", "eps_mode", "singleton", "leave_one_out"]


def loose(key):
    """The TypeError message of a removed loose normalisation keyword: named, and where it went."""
    return rf"unexpected keyword argument '{key}'\. .*`normalization=credax\.Normalization\({key}=\.\.\.\)`"


def test_defaults_and_fields():
    n = Normalization()
    assert n.asdict() == dict(center=True, scale="group", ddof=1, eps=1e-6, eps_mode="add",
                              singleton="zero", leave_one_out=False)
    assert list(n.asdict()) == FIELDS
    assert n.replace(eps=0.5).eps == 0.5 and n.eps == 1e-6  # replace copies
    fields = n.asdict()
    fields["eps"] = 0.5  # a new dict: the object does not change
    assert n.eps == 1e-6 and Normalization(**fields).eps == 0.5
    assert Normalization(**CUSTOM.asdict()).asdict() == CUSTOM.asdict()  # asdict rebuilds it


def test_not_a_mapping():
    n = Normalization()
    with pytest.raises(TypeError):
        dict(n)
    with pytest.raises(TypeError):
        list(n)
    with pytest.raises(TypeError, match="must be a mapping"):
        (lambda **kw: kw)(**n)
    with pytest.raises(TypeError, match="must be a mapping"):
        credax.grpo_advantages(R, IDS, **presets.VERL)


def test_immutable():
    n = Normalization()
    with pytest.raises(AttributeError, match="immutable"):
        n.eps = 0.0
    with pytest.raises(TypeError):
        n["eps"] = 0.0  # not a mapping, and no item assignment either
    with pytest.raises(TypeError, match="no field"):
        n.replace(epsilon=0.0)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(scale="prompt"), ValueError, "scale"),
        (dict(eps_mode="mul"), ValueError, "eps_mode"),
        (dict(singleton="one"), ValueError, "singleton"),
        (dict(ddof=-1), ValueError, "ddof"),
        (dict(ddof=1.0), TypeError, "ddof"),
        (dict(leave_one_out=1), TypeError, "leave_one_out"),
        (dict(eps=-1e-6), ValueError, "`eps` must be >= 0"),
        (dict(eps=float("nan")), ValueError, "`eps` must be >= 0 and finite"),
        (dict(eps=jnp.float32(-1.0)), ValueError, "`eps` must be >= 0"),
    ],
)
def test_bad_fields_raise_naming_the_field(kwargs, error, match):
    with pytest.raises(error, match=match):
        Normalization(**kwargs)


def test_pytree_eps_is_the_only_leaf_and_is_traced():
    leaves, treedef = jax.tree.flatten(CUSTOM)
    assert leaves == [1e-3]
    rebuilt = jax.tree.unflatten(treedef, [0.5])
    assert rebuilt.asdict() == CUSTOM.replace(eps=0.5).asdict()
    # Static fields differ -> different treedef (a new program); eps differs -> same treedef.
    assert jax.tree.structure(CUSTOM.replace(eps=0.1)) == treedef
    assert jax.tree.structure(CUSTOM.replace(ddof=1)) != treedef
    assert rebuilt == CUSTOM.replace(eps=0.5)  # value equality


def test_a_schedule_of_eps_compiles_once(traced_once):
    grpo = traced_once(credax.grpo_advantages)
    for eps in (1e-6, 1e-3, 0.5):
        grpo(R, IDS, MASK, normalization=Normalization(eps=eps))
    # a preset with the same static fields shares the program (TRL: the defaults but eps 1e-4) ...
    grpo(R, IDS, MASK, normalization=presets.TRL)
    # ... and a loose keyword is refused before tracing: no second trace either
    with pytest.raises(TypeError, match="'eps'"):
        grpo(R, IDS, MASK, eps=0.25)
    grpo(R, IDS, MASK, normalization=Normalization(eps=0.25))


def test_normalization_inside_a_user_jit_with_traced_eps():
    f = jax.jit(lambda eps: credax.group_normalize(R, IDS, MASK, normalization=Normalization(eps=eps)))
    np.testing.assert_array_equal(f(0.0), credax.group_normalize(R, IDS, MASK,
                                                                 normalization=Normalization(eps=0.0)))


# Every estimator that normalises within groups: the object is the only channel for its options.
def _turn_case():
    rng = np.random.default_rng(0)
    scores = rng.choice([0.0, 0.35, 0.5, 1.0], size=(7, 3)).astype(np.float32)
    turn_mask = np.arange(3)[None, :] < rng.integers(1, 4, size=(7, 1))
    return jnp.asarray(scores), jnp.asarray(turn_mask)


S, TM = _turn_case()
ANCHORS = jnp.asarray(np.random.default_rng(1).integers(0, 2, size=(7, 3)), jnp.int32)
ESTIMATORS = {
    "group_normalize": lambda **kw: credax.group_normalize(R, IDS, MASK, **kw),
    "grpo_advantages": lambda **kw: credax.grpo_advantages(R, IDS, MASK, **kw),
    "gdpo_advantages": lambda **kw: credax.gdpo_advantages(
        jnp.stack([R, R[::-1]], axis=1), IDS, MASK, weights=jnp.array([1.0, 0.5]), **kw),
    "mt_grpo_advantages": lambda **kw: credax.mt_grpo_advantages(S, R, TM, IDS, **kw),
    "tcpo_advantages": lambda **kw: credax.tcpo_advantages(S, TM, IDS, **kw).advantages,
}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_estimator_takes_the_object_and_refuses_its_fields_as_keywords(name):
    fn = ESTIMATORS[name]
    custom = np.asarray(fn(normalization=CUSTOM))
    # The object is applied (CUSTOM is not the default) and equals its fields rebuilt.
    assert not np.array_equal(custom, np.asarray(fn()))
    np.testing.assert_array_equal(custom, fn(normalization=Normalization(**CUSTOM.asdict())))
    np.testing.assert_array_equal(fn(normalization=presets.VERL),
                                  fn(normalization=Normalization(**presets.VERL.asdict())))
    np.testing.assert_array_equal(fn(normalization=None), fn())
    # A changed field goes through replace; a loose keyword no longer overrides the object: every
    # field is refused by name, with or without an object, pointing at normalization=.
    np.testing.assert_array_equal(fn(normalization=CUSTOM.replace(ddof=1)),
                                  fn(normalization=Normalization(**{**CUSTOM.asdict(), "ddof": 1})))
    for key, value in CUSTOM.asdict().items():
        with pytest.raises(TypeError, match=loose(key)):
            fn(**{key: value})
        with pytest.raises(TypeError, match=loose(key)):
            fn(normalization=CUSTOM, **{key: value})


@pytest.mark.parametrize("norm", [CUSTOM, presets.VERL, presets.TRL_BATCH, Normalization()],
                         ids=["custom", "verl", "trl_batch", "default"])
def test_the_object_computes_what_the_reference_computes_with_its_fields(norm):
    # The NumPy reference takes the fields as keywords; credax takes them as one object.
    want = ref.group_normalize(R, IDS, MASK, **norm.asdict())
    np.testing.assert_allclose(credax.group_normalize(R, IDS, MASK, normalization=norm), want,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(credax.grpo_advantages(R, IDS, MASK, normalization=norm), want,
                               rtol=1e-5, atol=1e-6)


def test_gigpo_takes_the_object_only():
    def gigpo(**kw):
        return credax.gigpo_advantages(R, S, ANCHORS, TM, IDS, gamma=0.5, **kw)

    # Its former `scale` / `eps` keywords are refused like the other fields.
    for key, value in (("scale", "none"), ("eps", 0.0), ("ddof", 0)):
        with pytest.raises(TypeError, match=loose(key)):
            gigpo(**{key: value})
    none = gigpo(normalization=Normalization(scale="none"))
    no_eps = gigpo(normalization=Normalization(eps=0.0))
    assert np.all(np.isfinite(np.asarray(none))) and not np.array_equal(none, no_eps)
    np.testing.assert_array_equal(gigpo(normalization=None), gigpo(normalization=Normalization()))
    # "batch": both levels divide by the batch std of their entries
    assert np.all(np.isfinite(np.asarray(gigpo(normalization=Normalization(scale="batch")))))
    with pytest.warns(DeprecationWarning, match="use `scale='none'`"):
        legacy = gigpo(normalization=Normalization(scale=False))
    np.testing.assert_array_equal(legacy, none)


def test_object_must_be_a_normalization():
    with pytest.raises(TypeError, match="`normalization` must be a credax.Normalization"):
        credax.grpo_advantages(R, IDS, normalization="verl")
    # a plain dict of fields is refused (it is what the old presets were), with the way to build one
    with pytest.raises(TypeError, match=r"`normalization`.*got dict.*credax\.Normalization\(\*\*fields\)"):
        credax.grpo_advantages(R, IDS, normalization=dict(scale="none"))
    with pytest.raises(TypeError, match="`normalization`"):  # a loss preset is not one either
        credax.grpo_advantages(R, IDS, normalization=presets.VERL_LOSS)
    np.testing.assert_array_equal(credax.grpo_advantages(R, IDS, normalization=None),
                                  credax.grpo_advantages(R, IDS, normalization=Normalization()))


# --------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["VERL", "VERL_DR_GRPO", "TRL", "TRL_BATCH", "TRL_NONE"])
def test_presets_are_normalizations_not_mappings(name):
    preset = getattr(presets, name)
    assert isinstance(preset, Normalization)
    with pytest.raises(TypeError, match="must be a mapping"):
        credax.grpo_advantages(R, IDS, MASK, **preset)
    with pytest.raises(TypeError):
        dict(preset)
    np.testing.assert_array_equal(credax.grpo_advantages(R, IDS, MASK, normalization=preset),
                                  credax.grpo_advantages(R, IDS, MASK,
                                                         normalization=Normalization(**preset.asdict())))


def test_preset_values_hand_written():
    # The peers' conventions, from their code (see credax.presets): not derived from credax.
    assert presets.VERL.asdict() == dict(center=True, scale="group", ddof=1, eps=1e-6, eps_mode="add",
                                         singleton="raw", leave_one_out=False)
    assert presets.VERL_DR_GRPO.scale == "none" and presets.VERL_DR_GRPO.singleton == "raw"
    assert presets.TRL.eps == 1e-4 and presets.TRL.singleton == "zero"
    assert presets.TRL_BATCH.scale == "batch" and presets.TRL_NONE.scale == "none"
    # HGPO's preset carries its normalisation as one value (verl-agent: population std, +1e-6).
    hgpo = presets.hgpo_verl_agent.keywords["normalization"]
    assert isinstance(hgpo, Normalization)
    assert hgpo.asdict() == dict(center=True, scale="group", ddof=0, eps=1e-6, eps_mode="add",
                                 singleton="zero", leave_one_out=False)
    assert not {"scale", "ddof", "eps"} & set(presets.hgpo_verl_agent.keywords)


# --------------------------------------------------------------------------------------------
# Deprecations: each warns, names the replacement, and computes what it did
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new"), [(True, "group"), (False, "none")])
def test_bool_scale_is_deprecated(old, new):
    with pytest.warns(DeprecationWarning, match=f"use `scale='{new}'`"):
        got = credax.grpo_advantages(R, IDS, MASK, normalization=Normalization(scale=old))
    np.testing.assert_array_equal(got, credax.grpo_advantages(R, IDS, MASK,
                                                              normalization=Normalization(scale=new)))
    with pytest.warns(DeprecationWarning, match=f"use `scale='{new}'`"):
        assert Normalization(scale=old).scale == new


def test_deprecation_warns_on_every_call_not_only_the_first_trace():
    # The warning comes from building the value, so a call that hits the compiled program warns too.
    for _ in range(2):
        with pytest.warns(DeprecationWarning, match="scale"):
            credax.group_normalize(R, IDS, normalization=Normalization(scale=False))


def test_singleton_center_is_deprecated():
    x, ids = jnp.array([5.0, 1.0, 3.0]), jnp.array([9, 2, 2])
    with pytest.warns(DeprecationWarning, match="use `singleton='zero'`"):
        got = credax.group_normalize(x, ids, normalization=Normalization(singleton="center"))
    # ddof <= 1: identical to "zero" (a set of one centres to 0).
    np.testing.assert_array_equal(got, credax.group_normalize(
        x, ids, normalization=Normalization(singleton="zero")))
    # ddof=2 (the pair becomes a singleton set): still the centred, unscaled value x - μ.
    with pytest.warns(DeprecationWarning):
        np.testing.assert_array_equal(credax.group_normalize(
            x, ids, normalization=Normalization(ddof=2, singleton="center")), [0.0, -1.0, 1.0])


def test_center_false_is_deprecated():
    two, ids = jnp.array([0.0, 2.0]), jnp.array([1, 1])
    with pytest.warns(DeprecationWarning, match="`center=False` is deprecated.*jnp.where"):
        got = credax.group_normalize(two, ids, normalization=Normalization(center=False, scale="none"))
    np.testing.assert_array_equal(got, [0.0, 2.0])  # unchanged, as documented


def test_negative_eps_raises_when_the_object_is_built():
    # One check, in Normalization, when it is built (constructor or replace), not at the call.
    with pytest.raises(ValueError, match="`eps` must be >= 0"):
        Normalization(eps=-1.0)
    with pytest.raises(ValueError, match="`eps` must be >= 0"):
        presets.TRL.replace(eps=-1.0)
    # A value that skipped the constructor (tree_map builds one) is checked by the estimator.
    unchecked = jax.tree.map(lambda _: -1.0, Normalization())
    with pytest.raises(ValueError, match="`eps` must be >= 0"):
        credax.mt_grpo_advantages(S, R, TM, IDS, normalization=unchecked)
    # The loose keyword is refused by name before its value is looked at.
    with pytest.raises(TypeError, match=loose("eps")):
        credax.grpo_advantages(R, IDS, eps=-1.0)
    # A traced eps cannot be checked before tracing and is used as given.
    out = jax.jit(lambda e: credax.grpo_advantages(R, IDS, normalization=Normalization(eps=e)))(
        jnp.float32(0.0))
    np.testing.assert_array_equal(out, credax.grpo_advantages(R, IDS, normalization=Normalization(eps=0.0)))


def test_hgpo_bool_scale_is_deprecated_on_every_call():
    def hgpo(**kw):
        return credax.hgpo_advantages(R, S, ANCHORS, TM, IDS, history=1, **kw).advantages

    # HGPO's default is Normalization(ddof=0) (population std): keep ddof=0 as its keywords did.
    for _ in range(2):  # the second call hits the compiled program: it still warns
        with pytest.warns(DeprecationWarning, match="use `scale='none'`"):
            legacy = hgpo(normalization=Normalization(ddof=0, scale=False))
    np.testing.assert_array_equal(legacy, hgpo(normalization=Normalization(ddof=0, scale="none")))
    np.testing.assert_array_equal(hgpo(), hgpo(normalization=Normalization(ddof=0)))
    with pytest.raises(ValueError, match="scale"):
        Normalization(ddof=0, scale="prompt")
    # its removed keywords are refused by name; a singleton other than "zero" is refused
    for key, value in (("scale", "none"), ("ddof", 0), ("eps", 1e-6)):
        with pytest.raises(TypeError, match=loose(key)):
            hgpo(**{key: value})
    with pytest.raises(ValueError, match="singleton"):
        hgpo(normalization=Normalization(ddof=0, singleton="raw"))


def test_warning_points_at_the_caller():
    with pytest.warns(DeprecationWarning) as record:
        Normalization(scale=True)
    assert record[0].filename == __file__


def test_round_trips_through_jit():
    # Normalization round-trips through jit as a pytree (chex's tree assertion compares leaves).
    out = jax.jit(lambda n: n)(CUSTOM)
    chex.assert_trees_all_close(out, CUSTOM)
    assert isinstance(out, Normalization) and out.scale == "none"


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


R4 = np.array([1.0, 0.0, 0.5, 0.5], np.float32)
IDS4 = np.array([0, 0, 1, 1])


# grpo_advantages(R4, IDS4) under VERL: group [1, 0] has μ = .5, σ = .7071 (ddof 1):
# ±.5 / (.7071 + 1e-6) = ±.7071; group [.5, .5] is constant: exactly 0.
GRPO4 = np.array([0.70710576, -0.70710576, 0.0, 0.0], np.float32)


S22 = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 1.0]], np.float32)
TM22 = np.ones((4, 2), bool)
W2 = np.array([1.0, 0.5], np.float32)


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


Z22 = np.zeros((2, 2), np.float32)
M22 = np.ones((2, 2), bool)
R2 = np.array([1.0, 0.0], np.float32)
IDS2 = np.array([3, 3])
KINDS = {"python": float, "numpy": np.float32, "jax": jnp.asarray}


EPS_CASES = [
    ("group_normalize", lambda **kw: credax.group_normalize(R2, IDS2, **kw)),
    ("grpo", lambda **kw: credax.grpo_advantages(R2, IDS2, **kw)),
    ("gdpo", lambda **kw: credax.gdpo_advantages(Z22, IDS2, weights=np.ones(2, np.float32), **kw)),
    ("tcpo", lambda **kw: credax.tcpo_advantages(Z22, M22, IDS2, **kw)),
    ("mt_grpo", lambda **kw: credax.mt_grpo_advantages(Z22, R2, M22, IDS2, **kw)),
    ("gigpo", lambda **kw: credax.gigpo_advantages(R2, Z22, np.zeros((2, 2), int), M22, IDS2, **kw)),
    ("hgpo", lambda **kw: credax.hgpo_advantages(R2, Z22, np.zeros((2, 2), int), M22, IDS2, **kw)),
]


def unchecked_normalization(eps, **fields):
    """A Normalization holding ``eps`` that no constructor checked: built by ``tree_unflatten``, as
    ``jax.tree.map`` or a transformation's output builds one. The estimators check such a value."""
    return jax.tree_util.tree_map(lambda _: eps, Normalization(**fields))


EPS_MESSAGE = r"`eps` must be >= 0 and finite"


for _bad in (-1e-6, NAN, INF):
    for _kind in ("python", "jax"):

        def _p(bad=_bad, make=KINDS[_kind]):
            # A concrete bad eps is refused where the Normalization is built (and by replace).
            raises(ValueError, EPS_MESSAGE, Normalization, eps=make(bad))
            raises(ValueError, EPS_MESSAGE, presets.VERL.replace, eps=make(bad))

        probe("hyper", f"eps_built_{_bad}_{_kind}")(_p)


for _label, _fn in EPS_CASES:
    for _bad in (-1e-6, NAN, INF):
        for _kind in ("python", "jax"):

            def _p(fn=_fn, bad=_bad, make=KINDS[_kind]):
                # A Normalization that skipped the constructor is checked by the estimator itself...
                raises(ValueError, EPS_MESSAGE, fn, normalization=unchecked_normalization(make(bad)))
                # ... and the removed loose keyword is refused by name, pointing at normalization=.
                raises(TypeError, r"unexpected keyword argument 'eps'.*normalization=credax\.Normalization",
                       fn, eps=make(bad))

            probe("hyper", f"eps_{_label}_{_bad}_{_kind}")(_p)


@probe("hyper", "traced_values_are_not_checked")
def _():
    # A traced schedule cannot be checked: it is used as given (documented), no error.
    out = jax.jit(lambda e: credax.grpo_advantages(R2, IDS2, normalization=Normalization(eps=e)))(0.5)
    # [1, 0]: μ = 0.5, unbiased σ = 2**-0.5, so A = ±0.5 / (σ + 0.5)
    np.testing.assert_allclose(out, [0.5 / (2 ** -0.5 + 0.5), -0.5 / (2 ** -0.5 + 0.5)], rtol=1e-6)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

"""``credax.Normalization``: one options value for every estimator that normalises within groups.

What is checked: the object (immutable, a pytree with a traced ``eps`` and static fields, not a
mapping: ``**preset`` and ``dict(preset)`` are ``TypeError``s, ``asdict()`` gives the fields), that
every normalising estimator applies it (as the NumPy reference does with the same fields) and is
the only channel (its fields as loose keywords are refused by name, pointing at ``normalization=``),
that presets are instances, and the deprecation path (each deprecated spelling warns when the
Normalization is built, names its replacement and computes what it did).
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import Normalization, presets
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
    hgpo = presets.HGPO_VERL_AGENT["normalization"]
    assert isinstance(hgpo, Normalization)
    assert hgpo.asdict() == dict(center=True, scale="group", ddof=0, eps=1e-6, eps_mode="add",
                                 singleton="zero", leave_one_out=False)
    assert not {"scale", "ddof", "eps"} & set(presets.HGPO_VERL_AGENT)


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

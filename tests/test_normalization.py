"""``credax.Normalization``: one options value for every estimator that normalises within groups.

What is checked: the object (immutable, a pytree with a traced ``eps`` and static fields, a mapping
so ``**preset`` keeps working), that every normalising estimator accepts it and gives exactly what
the same options as keywords give, that keywords override it, that presets are instances, and the
deprecation path (each deprecated spelling warns, names its replacement and computes what it did).
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import Normalization, presets

R = jnp.array([1.0, 0.0, 0.35, 0.35, 2.0, 0.5, -1.0])
IDS = jnp.array([3, 3, -1, -1, 42, 9, 9])
MASK = jnp.array([True, True, True, True, True, True, False])
CUSTOM = Normalization(scale="none", ddof=0, eps=1e-3, eps_mode="sqrt", singleton="raw",
                       leave_one_out=True)


def test_defaults_and_fields():
    n = Normalization()
    assert dict(n) == dict(center=True, scale="group", ddof=1, eps=1e-6, eps_mode="add",
                           singleton="zero", leave_one_out=False)
    assert list(n) == ["center", "scale", "ddof", "eps", "eps_mode", "singleton", "leave_one_out"]
    assert n.replace(eps=0.5).eps == 0.5 and n.eps == 1e-6  # replace copies


def test_immutable():
    n = Normalization()
    with pytest.raises(AttributeError, match="immutable"):
        n.eps = 0.0
    with pytest.raises(TypeError):
        n["eps"] = 0.0  # a read-only mapping
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
    assert jax.tree.unflatten(treedef, [0.5]) == CUSTOM.replace(eps=0.5)
    # Static fields differ -> different treedef (a new program); eps differs -> same treedef.
    assert jax.tree.structure(CUSTOM.replace(eps=0.1)) == treedef
    assert jax.tree.structure(CUSTOM.replace(ddof=1)) != treedef


def test_a_schedule_of_eps_compiles_once(traced_once):
    grpo = traced_once(credax.grpo_advantages)
    for eps in (1e-6, 1e-3, 0.5):
        grpo(R, IDS, MASK, normalization=Normalization(eps=eps))
    # keywords and an equal Normalization share the program (they are folded before tracing)
    grpo(R, IDS, MASK, eps=0.25)


def test_normalization_inside_a_user_jit_with_traced_eps():
    f = jax.jit(lambda eps: credax.group_normalize(R, IDS, MASK, normalization=Normalization(eps=eps)))
    np.testing.assert_array_equal(f(0.0), credax.group_normalize(R, IDS, MASK, normalization=credax.Normalization(eps=0.0)))


# Every estimator that normalises within groups, called with options as keywords or as an object.
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
def test_every_estimator_takes_the_object_like_its_keywords(name):
    fn = ESTIMATORS[name]
    np.testing.assert_array_equal(fn(normalization=CUSTOM), fn(**CUSTOM))
    np.testing.assert_array_equal(fn(normalization=presets.VERL), fn(**presets.VERL))
    np.testing.assert_array_equal(fn(normalization=None), fn())
    # An explicit keyword overrides the field of the object.
    np.testing.assert_array_equal(fn(normalization=CUSTOM, ddof=1), fn(**CUSTOM.replace(ddof=1)))


def test_gigpo_takes_the_object_and_the_same_scale_spellings():
    def gigpo(**kw):
        return credax.gigpo_advantages(R, S, ANCHORS, TM, IDS, gamma=0.5, **kw)

    np.testing.assert_array_equal(gigpo(scale="none"), gigpo(normalization=Normalization(scale="none")))
    np.testing.assert_array_equal(gigpo(scale="group", eps=0.0),
                                  gigpo(normalization=Normalization(eps=0.0)))
    # "batch": both levels divide by the batch std of their entries
    assert np.all(np.isfinite(np.asarray(gigpo(scale="batch"))))
    with pytest.warns(DeprecationWarning, match="use `scale='none'`"):
        legacy = gigpo(scale=False)
    np.testing.assert_array_equal(legacy, gigpo(scale="none"))


def test_object_must_be_a_normalization_or_mapping():
    with pytest.raises(TypeError, match="normalization"):
        credax.grpo_advantages(R, IDS, normalization="verl")
    # a plain dict of fields is accepted (it is what the old presets were)
    np.testing.assert_array_equal(credax.grpo_advantages(R, IDS, normalization=dict(scale="none")),
                                  credax.grpo_advantages(R, IDS, normalization=credax.Normalization(scale="none")))


# --------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["VERL", "VERL_DR_GRPO", "TRL", "TRL_BATCH", "TRL_NONE"])
def test_presets_are_normalizations_and_mappings(name):
    preset = getattr(presets, name)
    assert isinstance(preset, Normalization)
    np.testing.assert_array_equal(credax.grpo_advantages(R, IDS, MASK, normalization=preset),
                                  credax.grpo_advantages(R, IDS, MASK, normalization=preset))


def test_preset_values_hand_written():
    # The peers' conventions, from their code (see credax.presets): not derived from credax.
    assert dict(presets.VERL) == dict(center=True, scale="group", ddof=1, eps=1e-6, eps_mode="add",
                                      singleton="raw", leave_one_out=False)
    assert presets.VERL_DR_GRPO.scale == "none" and presets.VERL_DR_GRPO.singleton == "raw"
    assert presets.TRL.eps == 1e-4 and presets.TRL.singleton == "zero"
    assert presets.TRL_BATCH.scale == "batch" and presets.TRL_NONE.scale == "none"


# --------------------------------------------------------------------------------------------
# Deprecations: each warns, names the replacement, and computes what it did
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new"), [(True, "group"), (False, "none")])
def test_bool_scale_is_deprecated(old, new):
    with pytest.warns(DeprecationWarning, match=f"use `scale='{new}'`"):
        got = credax.grpo_advantages(R, IDS, MASK, normalization=credax.Normalization(scale=old))
    np.testing.assert_array_equal(got, credax.grpo_advantages(R, IDS, MASK, normalization=credax.Normalization(scale=new)))
    with pytest.warns(DeprecationWarning, match=f"use `scale='{new}'`"):
        assert Normalization(scale=old).scale == new


def test_deprecation_warns_on_every_call_not_only_the_first_trace():
    for _ in range(2):
        with pytest.warns(DeprecationWarning, match="scale"):
            credax.group_normalize(R, IDS, normalization=credax.Normalization(scale=False))


def test_singleton_center_is_deprecated():
    x, ids = jnp.array([5.0, 1.0, 3.0]), jnp.array([9, 2, 2])
    with pytest.warns(DeprecationWarning, match="use `singleton='zero'`"):
        got = credax.group_normalize(x, ids, normalization=credax.Normalization(singleton="center"))
    # ddof <= 1: identical to "zero" (a set of one centres to 0).
    np.testing.assert_array_equal(got, credax.group_normalize(x, ids, normalization=credax.Normalization(singleton="zero")))
    # ddof=2 (the pair becomes a singleton set): still the centred, unscaled value x - μ.
    with pytest.warns(DeprecationWarning):
        np.testing.assert_array_equal(credax.group_normalize(x, ids, normalization=credax.Normalization(ddof=2, singleton="center")),
                                      [0.0, -1.0, 1.0])


def test_center_false_is_deprecated():
    two, ids = jnp.array([0.0, 2.0]), jnp.array([1, 1])
    with pytest.warns(DeprecationWarning, match="`center=False` is deprecated.*jnp.where"):
        got = credax.group_normalize(two, ids, normalization=credax.Normalization(center=False, scale="none"))
    np.testing.assert_array_equal(got, [0.0, 2.0])  # unchanged, as documented


def test_negative_eps_raises_from_the_object_and_the_keyword():
    # One check, in Normalization, for both spellings (a keyword is folded into the object).
    with pytest.raises(ValueError, match="`eps` must be >= 0"):
        credax.grpo_advantages(R, IDS, normalization=credax.Normalization(eps=-1.0))
    with pytest.raises(ValueError, match="`eps` must be >= 0"):
        credax.mt_grpo_advantages(S, R, TM, IDS, normalization=dict(eps=-1.0))
    # A traced eps cannot be checked before tracing and is used as given.
    out = jax.jit(lambda e: credax.grpo_advantages(R, IDS, normalization=credax.Normalization(eps=e)))(jnp.float32(0.0))
    np.testing.assert_array_equal(out, credax.grpo_advantages(R, IDS, normalization=credax.Normalization(eps=0.0)))


def test_hgpo_bool_scale_is_deprecated_on_every_call():
    def hgpo(**kw):
        return credax.hgpo_advantages(R, S, ANCHORS, TM, IDS, history=1, **kw).advantages

    for _ in range(2):  # the second call hits the compiled program: it still warns
        with pytest.warns(DeprecationWarning, match="use `scale='none'`"):
            legacy = hgpo(scale=False)
    np.testing.assert_array_equal(legacy, hgpo(scale="none"))
    with pytest.raises(ValueError, match="scale"):
        hgpo(scale="prompt")


def test_warning_points_at_the_caller():
    with pytest.warns(DeprecationWarning) as record:
        credax.grpo_advantages(R, IDS, normalization=credax.Normalization(scale=True))
    assert record[0].filename == __file__


def test_round_trips_through_jit():
    # Normalization round-trips through jit as a pytree (chex's tree assertion compares leaves).
    out = jax.jit(lambda n: n)(CUSTOM)
    chex.assert_trees_all_close(out, CUSTOM)
    assert isinstance(out, Normalization) and out.scale == "none"

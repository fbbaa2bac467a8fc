"""LossOptions: the policy loss's one options value, its presets, and the loss's bad-input probes.

The value (immutable, a pytree with the modes as aux data, checked when built), the one rule for
every preset (a value passed whole: ``**preset`` is a TypeError that says so, for loss and
normalisation presets alike), the removed keywords' TypeErrors, and the #37 probes of the policy
loss: hyperparameters finite as a double but not in float32, config nulls, static bools given as
strings, ``presets.trl_loss``'s counts, zero-length token axes and shapes in the fused path's
errors, forward-mode autodiff of the fused loss. Each probe failed before LossOptions (the
values ran through, NaN or inf came out, or JAX failed deep inside).

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

from __future__ import annotations

import copy
import math
import pickle
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import _checks, _loss_options, _normalization, presets
from credax._loss_options import LOSS_OPTION_KEYS
from tests.probes import INF, NAN, Probes, raises

B, T, D, V = 2, 5, 3, 4
LOGP = jnp.log(jnp.array([[1.1, 1.5, 0.5, 4.0, 1.0], [1.0, 0.9, 1.2, 1.0, 0.7]]))
OLD = jnp.zeros((B, T))
ADV = jnp.array([1.0, -1.0])
MASK = jnp.ones((B, T), bool)
HIDDEN = jax.random.normal(jax.random.key(0), (B, T, D))
W = jax.random.normal(jax.random.key(1), (D, V))
TOKENS = jnp.array([[0, 1, 2, 3, 0], [3, 2, 1, 0, 1]])


def loss(**kw):
    return credax.policy_loss(LOGP, OLD, ADV, MASK, **kw)


def fused(**kw):
    return credax.policy_loss_from_hidden(HIDDEN, W, TOKENS, OLD, ADV, MASK, **kw)


# --------------------------------------------------------------------------------------------
# The value.
# --------------------------------------------------------------------------------------------


def test_defaults_are_the_loss_defaults():
    # Hand-worked: ratios 1.1, 1.5, 0.5, 4.0, 1.0 with A = +1 (row 0): -1.1, -1.2 (high clip),
    # -0.5 (below 0.8 with A > 0: the unclipped branch is the max), -1.2, -1.0; row 1 with A = -1:
    # ratios 1.0, 0.9, 1.2, 1.0, 0.7 give 1.0, 0.9, 1.2, 1.0, 0.8 (low clip). Token mean over 10.
    want = (-1.1 - 1.2 - 0.5 - 1.2 - 1.0 + 1.0 + 0.9 + 1.2 + 1.0 + 0.8) / 10
    np.testing.assert_allclose(float(loss().loss), want, atol=1e-6)
    assert credax.LossOptions() == credax.LossOptions(clip_low=0.2, clip_high=0.2, agg="token-mean")
    np.testing.assert_array_equal(loss(options=credax.LossOptions()).loss, loss().loss)


def test_a_field_changes_the_loss_as_the_keyword_did():
    # clip_high 0.5: the 1.5 ratio is inside now (-1.5), 4.0 is clipped at 1.5 (-1.5).
    out = loss(options=credax.LossOptions(clip_high=0.5))
    want = (-1.1 - 1.5 - 0.5 - 1.5 - 1.0 + 1.0 + 0.9 + 1.2 + 1.0 + 0.8) / 10
    np.testing.assert_allclose(float(out.loss), want, atol=1e-6)


def test_immutable_replace_asdict_copy_pickle():
    opts = credax.LossOptions(dual_clip=3.0)
    with pytest.raises(AttributeError, match="immutable"):
        opts.clip_low = 0.1
    with pytest.raises(AttributeError, match="immutable"):
        del opts.clip_low
    assert opts.replace(clip_low=0.1).clip_low == 0.1 and opts.clip_low == 0.2
    with pytest.raises(TypeError, match=r"no field\(s\) \['clip'\]"):
        opts.replace(clip=0.1)
    assert credax.LossOptions(**opts.asdict()) == opts
    assert list(opts.asdict()) == list(LOSS_OPTION_KEYS)
    assert copy.deepcopy(opts) == opts and pickle.loads(pickle.dumps(opts)) == opts
    with pytest.raises(ValueError, match="clip_low"):
        opts.replace(clip_low=1.5)  # replace checks as the constructor does


def test_a_pytree_numbers_as_leaves_modes_as_aux_data():
    opts = credax.LossOptions(kl_coef=0.1, dual_clip=3.0, agg="seq-mean-token-mean")
    leaves, treedef = jax.tree_util.tree_flatten(opts)
    assert leaves == [0.2, 0.2, 3.0, 0.1, 2.0, 0.0, 20.0]  # None fields have no leaf
    assert jax.tree_util.tree_unflatten(treedef, leaves) == opts
    # A surrogate's own fields are leaves only when it is chosen.
    sapo = credax.LossOptions(surrogate="sapo", sapo_tau_neg=1.5)
    assert jax.tree_util.tree_leaves(sapo) == [0.2, 0.2, 0.0, 2.0, 0.0, 20.0, 1.0, 1.5]
    # A schedule of a numeric field does not recompile; a mode does.
    f = jax.jit(lambda o: credax.policy_loss(LOGP, OLD, ADV, MASK, options=o).loss)
    f(credax.LossOptions(clip_low=0.1))
    f(credax.LossOptions(clip_low=0.3))
    assert f._cache_size() == 1
    f(credax.LossOptions(agg="seq-mean-token-mean"))
    assert f._cache_size() == 2


def test_gradients_reach_the_numeric_fields():
    # d loss / d kl_coef = aggregated KL (k3 of logp against logp - 1: e^-1 - 1 + 1 = e^-1 per token)
    grad = jax.grad(lambda o: loss(options=o, ref_logp=LOGP - 1).loss)(
        credax.LossOptions(kl_coef=0.1))
    np.testing.assert_allclose(float(grad.kl_coef), math.exp(-1), rtol=1e-6)


def test_a_rebuilt_value_is_checked_where_it_is_used():
    bad = jax.tree_util.tree_map(lambda x: -x, credax.LossOptions())  # clip_low -0.2
    with pytest.raises(ValueError, match="`clip_low` must lie in"):
        loss(options=bad)
    _, treedef = jax.tree_util.tree_flatten(credax.LossOptions())
    leaves = jax.tree_util.tree_leaves(credax.LossOptions())
    with pytest.raises(ValueError):  # a hand-made aux of the wrong length
        jax.tree_util.tree_unflatten(treedef, leaves[:-1])


def test_each_field_declares_its_rule_once_in_the_signature():
    # #43: a field's annotation is its rule (a Rule, a Literal's modes, a bool), read by the
    # reader the public functions use; typing's own reader resolves every annotation. By hand
    # only: log_ratio_clamp (a bound or a pair) and Normalization's ddof (a static int, int32).
    for cls, by_hand in ((credax.LossOptions, {"log_ratio_clamp"}), (credax.Normalization, {"ddof"})):
        hints = typing.get_type_hints(cls.__init__, include_extras=True)
        assert set(hints) - set(_checks.annotated_fields(cls.__init__)) == by_hand
    rules = _checks.annotated_fields(credax.LossOptions.__init__)
    assert rules["agg"] == (("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum",
                             "seq-mean-token-sum-norm"), False)
    assert rules["kl_ratio_weight"] == (bool, False) and rules["kl_coef"] == (_checks.NON_NEGATIVE, False)
    assert rules["dual_clip"][1] and rules["sapo_tau_pos"] == (_checks.POSITIVE, True)  # None: off
    assert _checks.annotated_fields(credax.Normalization.__init__)["singleton"] == (
        ("zero", "raw", "center"), False)  # "center" deprecated, still accepted
    # The mode constants keep their values; the pytree layout (leaves, then aux data) is the one
    # the hand-written key tuples gave before the signature was read for it.
    assert (_loss_options.KL_ESTIMATORS, _loss_options.RATIO_LEVELS, _loss_options.ROLLOUT_IS_LEVELS,
            _loss_options.SURROGATES) == (("k1", "k2", "k3", "abs"), ("token", "sequence"),
                                          ("token", "sequence"), ("clip", "cispo", "sapo", "vespo"))
    assert (_normalization.SINGLETON_MODES, _normalization.EPS_MODES, _normalization.SCALE_MODES) == (
        ("zero", "raw"), ("add", "sqrt"), ("group", "batch", "none"))
    assert _loss_options.NUMERIC_KEYS == (
        "clip_low", "clip_high", "dual_clip", "ratio_cap", "normalizer", "kl_coef", "kl_clamp",
        "rollout_is_threshold", "entropy_coef", "log_ratio_clamp", "cispo_max", "sapo_tau_pos",
        "sapo_tau_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")
    assert _loss_options.STATIC_KEYS == ("agg", "kl_estimator", "ratio", "rollout_is",
                                         "kl_ratio_weight", "surrogate")
    assert credax.Normalization._LEAVES == ("eps",) and credax.Normalization._STATIC == (
        "center", "scale", "ddof", "eps_mode", "singleton", "leave_one_out")


# --------------------------------------------------------------------------------------------
# One rule for every preset; removed keywords say where they went.
# --------------------------------------------------------------------------------------------


LOSS_PRESETS = [presets.VERL_LOSS, presets.VERL_GSPO_LOSS, presets.TRL_LOSS,
                *(presets.trl_loss(t, num_rows=B, max_completion_length=T)
                  for t in presets.TRL_LOSS_TYPES)]


@pytest.mark.parametrize("preset", LOSS_PRESETS)
def test_loss_presets_are_values_not_mappings(preset):
    assert isinstance(preset, credax.LossOptions)
    with pytest.raises(TypeError, match=r"must be a mapping.*`options=`"):
        loss(**preset)
    with pytest.raises(TypeError, match="must be a mapping"):
        dict(preset)
    assert np.isfinite(float(loss(options=preset).loss))


@pytest.mark.parametrize("preset", [presets.VERL, presets.TRL, presets.VPR])
def test_normalization_presets_follow_the_same_rule(preset):
    with pytest.raises(TypeError, match=r"must be a mapping.*`normalization=`"):
        credax.grpo_advantages(jnp.array([1.0, 0.0]), jnp.array([0, 0]), **preset)


def test_the_wrong_kind_of_value_is_named():
    with pytest.raises(TypeError,
                       match=r"`options` (must be a credax.LossOptions|got a credax.Normalization)"):
        loss(options=presets.VERL)
    with pytest.raises(TypeError, match=r"`options`.*mapping is not accepted"):
        loss(options={"clip_low": 0.1})
    with pytest.raises(TypeError, match=r"`normalization` got a credax.LossOptions"):
        credax.grpo_advantages(jnp.array([1.0, 0.0]), jnp.array([0, 0]),
                               normalization=presets.VERL_LOSS)


@pytest.mark.parametrize("key", LOSS_OPTION_KEYS)
def test_every_removed_keyword_says_where_it_went(key):
    value = credax.LossOptions().asdict()[key]
    for call in (loss, fused):
        with pytest.raises(TypeError, match=rf"'{key}'.*options=credax.LossOptions\({key}="):
            call(**{key: value})
    model = lambda tok: (HIDDEN, W)  # noqa: E731
    batch = credax.nnx.PolicyBatch(TOKENS, MASK, OLD, ADV)
    with pytest.raises(TypeError, match=rf"\['{key}'\].*options=credax.LossOptions\({key}="):
        credax.nnx.policy_loss_fn(model, batch, **{key: value})


def test_torch_passes_on_where_a_removed_keyword_went():
    pytest.importorskip("torch")
    import credax.torch as ctorch

    with pytest.raises(TypeError, match=r"'clip_low'.*options=credax.LossOptions\(clip_low="):
        ctorch.policy_loss_from_hidden(HIDDEN, W, TOKENS, OLD, ADV, MASK, clip_low=0.1)


# --------------------------------------------------------------------------------------------
# #37 probes: hyperparameters beyond float32, config nulls, bools as strings.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, value", [
    ("clip_high", 1e39), ("dual_clip", 1e39), ("ratio_cap", 1e39), ("normalizer", 1e39),
    ("kl_coef", 1e39), ("kl_clamp", 1e39), ("rollout_is_threshold", 1e39),
    ("entropy_coef", -1e39), ("log_ratio_clamp", 1e39), ("kl_coef", np.float64(5e38)),
])
def test_finite_as_a_double_but_beyond_float32_is_refused_by_name(key, value):
    # Before: 1e39 became inf in float32 (kl_coef=1e39 gave loss inf, clip_high=1e39 ran).
    with pytest.raises(ValueError, match=rf"`{key}` (is|=) .*beyond float32"):
        credax.LossOptions(**{key: value})


@pytest.mark.parametrize("key, value", [
    ("clip_high", 1e-50),           # 0 in float32: no upper clip range left
    ("clip_low", 1 - 1e-9),         # 1 in float32: the lower bound 1 - clip_low would be 0
    ("rollout_is_threshold", 1e-46),
])
def test_a_value_that_breaks_its_rule_in_float32_is_refused(key, value):
    with pytest.raises(ValueError, match=rf"`{key}` must .* in float32"):
        credax.LossOptions(**{key: value})


def test_log_ratio_clamp_pair_beyond_float32():
    with pytest.raises(ValueError, match="`log_ratio_clamp` (is|=) .*beyond float32"):
        credax.LossOptions(log_ratio_clamp=(-1e39, 10.0))
    assert credax.LossOptions(log_ratio_clamp=[-math.inf, 10.0]).log_ratio_clamp == (-math.inf, 10.0)


@pytest.mark.parametrize("key", ["clip_low", "clip_high", "kl_coef", "rollout_is_threshold",
                                 "entropy_coef", "log_ratio_clamp"])
def test_none_for_a_number_is_refused_by_name(key):
    # Before: kl_coef=None ran as 0 silently; clip_low=None failed inside jnp.array.
    with pytest.raises(TypeError, match=rf"`{key}` must be a real number; got None"):
        credax.LossOptions(**{key: None})


@pytest.mark.parametrize("key", ["dual_clip", "ratio_cap", "normalizer", "kl_clamp"])
def test_none_switches_the_optional_fields_off(key):
    assert getattr(credax.LossOptions(**{key: None}), key) is None


@pytest.mark.parametrize("value", ["false", "True", 0, 1, None, np.bool_(True)])
def test_kl_ratio_weight_must_be_a_python_bool(value):
    # Before: "false" was read by truthiness (the KL was ratio-weighted).
    with pytest.raises(TypeError, match="`kl_ratio_weight` must be a Python bool"):
        credax.LossOptions(kl_ratio_weight=value)


@pytest.mark.parametrize("key, value", [("clip_low", "0.2"), ("kl_coef", True),
                                        ("clip_high", np.array([0.2, 0.3])), ("kl_coef", [0.1])])
def test_numbers_of_the_wrong_kind_are_named(key, value):
    with pytest.raises((TypeError, ValueError), match=rf"`{key}`"):
        credax.LossOptions(**{key: value})


@pytest.mark.parametrize("key, value", [("agg", "mean"), ("agg", None), ("ratio", "seq"),
                                        ("kl_estimator", "k4"), ("rollout_is", True),
                                        ("surrogate", "luspo"), ("surrogate", None)])
def test_unknown_modes_are_named(key, value):
    with pytest.raises(ValueError, match=rf"`{key}` must be one of"):
        credax.LossOptions(**{key: value})


@pytest.mark.parametrize("fields, match", [
    (dict(clip_low=0.0), "clip_low"), (dict(clip_low=math.nan), "clip_low"),
    (dict(dual_clip=1.0), "dual_clip"), (dict(kl_coef=-0.1), "kl_coef"),
    (dict(normalizer=0), "normalizer"), (dict(log_ratio_clamp=(0.5, 1.0)), "log_ratio_clamp"),
    (dict(ratio_cap=2.0, dual_clip=3.0), "ratio_cap"),
    (dict(surrogate="cispo", ratio_cap=2.0), "`ratio_cap` bounds the clipped surrogate"),
    (dict(surrogate="vespo", dual_clip=3.0), "`dual_clip` bounds the clipped surrogate"),
    (dict(cispo_max=5.0), r"`cispo_max` is a field of `surrogate='cispo'`"),
    (dict(surrogate="sapo", vespo_k_pos=1.0), r"`vespo_k_pos` is a field of `surrogate='vespo'`"),
    (dict(surrogate="cispo", cispo_max=0.0), "cispo_max"),
    (dict(surrogate="sapo", sapo_tau_pos=-1.0), "sapo_tau_pos"),
    (dict(surrogate="sapo", sapo_tau_neg=math.inf), "sapo_tau_neg"),
    (dict(surrogate="vespo", vespo_k_neg=-0.5), "vespo_k_neg"),
    (dict(surrogate="vespo", vespo_lambda_pos=0.0), "vespo_lambda_pos"),
    (dict(surrogate="vespo", vespo_lambda_neg=math.nan), "vespo_lambda_neg"),
    (dict(agg="seq-mean-token-sum-norm"), "needs `normalizer`"),
    (dict(agg="token-sum", normalizer=3.0), "no denominator"),
])
def test_ranges_and_pairs_are_checked_when_built(fields, match):
    with pytest.raises(ValueError, match=match):
        credax.LossOptions(**fields)


def test_a_surrogates_fields_take_their_defaults_when_it_is_chosen():
    # TRL 1.16's defaults (CISPO's cap: ScaleRL's ε_max = 5; TRL falls back to `epsilon`).
    assert credax.LossOptions().cispo_max is None
    assert credax.LossOptions(surrogate="cispo").cispo_max == 5.0
    sapo = credax.LossOptions(surrogate="sapo")
    assert (sapo.sapo_tau_pos, sapo.sapo_tau_neg) == (1.0, 1.05)
    vespo = credax.LossOptions(surrogate="vespo", vespo_k_neg=4.0)
    assert (vespo.vespo_k_pos, vespo.vespo_lambda_pos, vespo.vespo_k_neg,
            vespo.vespo_lambda_neg) == (2.0, 3.0, 4.0, 2.0)
    # Switching surrogate: the old one's fields go back to None by name.
    with pytest.raises(ValueError, match="`sapo_tau_pos` is a field"):
        sapo.replace(surrogate="cispo")
    assert sapo.replace(surrogate="cispo", sapo_tau_pos=None, sapo_tau_neg=None).cispo_max == 5.0
    # A schedule of a surrogate's field does not recompile.
    f = jax.jit(lambda o: credax.policy_loss(LOGP, OLD, ADV, MASK, options=o).loss)
    f(credax.LossOptions(surrogate="sapo", sapo_tau_neg=1.1))
    f(credax.LossOptions(surrogate="sapo", sapo_tau_neg=1.3))
    assert f._cache_size() == 1


def test_traced_fields_are_used_as_given():
    # Inside a jit the value of a traced field cannot be seen; the kind and shape can.
    f = jax.jit(lambda c: loss(options=credax.LossOptions(clip_high=c)).loss)
    np.testing.assert_allclose(f(0.5), loss(options=credax.LossOptions(clip_high=0.5)).loss)
    with pytest.raises(ValueError, match="`clip_high` must be a scalar"):
        jax.jit(lambda c: credax.LossOptions(clip_high=c))(jnp.ones(2))


@pytest.mark.parametrize("temperature", [1e-46, 1e-39, 1e39])
def test_a_temperature_that_float32_breaks_is_refused(temperature):
    # Before: 1e-46 (0 in float32) gave a NaN loss; 1e39 (inf) a finite loss of flattened logits.
    with pytest.raises(ValueError, match="`temperature` (is|=) .*float32"):
        fused(temperature=temperature)
    with pytest.raises(ValueError, match="`temperature` (is|=) .*float32"):
        credax.token_logprobs_from_hidden(HIDDEN, W, TOKENS, temperature=temperature)


# --------------------------------------------------------------------------------------------
# presets.trl_loss: every count and bound, by TRL's name.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(loss_type="dapo", num_items_in_batch=10, num_processes=0), ValueError, "num_processes"),
    (dict(loss_type="dapo", num_processes=-2), ValueError, "num_processes"),
    (dict(loss_type="dapo", num_processes=1.5), ValueError, "num_processes"),
    (dict(loss_type="dapo", num_processes=math.nan), ValueError, "num_processes"),
    (dict(loss_type="dapo", num_processes=True), TypeError, "num_processes"),
    (dict(loss_type="grpo", num_rows=-1), ValueError, "num_rows"),
    (dict(loss_type="grpo", num_rows=0), ValueError, "num_rows"),
    (dict(loss_type="grpo", num_rows=2.5), ValueError, "num_rows"),
    (dict(loss_type="grpo", num_rows="8"), TypeError, "num_rows"),
    (dict(loss_type="dr_grpo", num_rows=2, max_completion_length=0), ValueError,
     "max_completion_length"),
    (dict(loss_type="dr_grpo", num_rows=2, max_completion_length=math.inf), ValueError,
     "max_completion_length"),
    (dict(loss_type="dapo", num_items_in_batch=math.nan), ValueError, "num_items_in_batch"),
    (dict(loss_type="dapo", num_items_in_batch=-4), ValueError, "num_items_in_batch"),
    (dict(loss_type="dapo", epsilon=-0.1), ValueError, "epsilon"),
    (dict(loss_type="dapo", epsilon=1.0), ValueError, "epsilon"),
    (dict(loss_type="dapo", epsilon=None), TypeError, "epsilon"),
    (dict(loss_type="dapo", epsilon_high=-0.2), ValueError, "epsilon_high"),
    (dict(loss_type="dapo", delta=0.5), ValueError, "delta"),
    (dict(loss_type="dapo", use_bias_correction_kl="false"), TypeError, "use_bias_correction_kl"),
    (dict(loss_type="gspo"), ValueError, "loss_type"),
    (dict(loss_type="sapo", sapo_temperature_pos=0.0), ValueError, "sapo_temperature_pos"),
    (dict(loss_type="sapo", sapo_temperature_neg=-1.0), ValueError, "sapo_temperature_neg"),
    (dict(loss_type="sapo", sapo_temperature_neg="1"), TypeError, "sapo_temperature_neg"),
    (dict(loss_type="vespo", vespo_k_pos=-1.0), ValueError, "vespo_k_pos"),
    (dict(loss_type="vespo", vespo_lambda_neg=None), TypeError, "vespo_lambda_neg"),
])
def test_trl_loss_checks_every_argument_by_name(kwargs, exc, match):
    # Before: num_processes=0 was a ZeroDivisionError, the rest passed into the options.
    with pytest.raises(exc, match=rf"`{match}`"):
        presets.trl_loss(**kwargs)


def test_trl_loss_maps_the_new_loss_types():
    # TRL 1.16's config -> credax's fields (grpo_trainer._compute_loss, read for its rules).
    cispo = presets.trl_loss("cispo", epsilon_high=5.0, num_items_in_batch=40, delta=2.0)
    assert (cispo.surrogate, cispo.cispo_max, cispo.agg, cispo.normalizer) == (
        "cispo", 5.0, "token-mean", 40.0)
    assert cispo.ratio_cap is None                      # TRL ignores delta for cispo
    assert presets.trl_loss("cispo").cispo_max == 0.2   # TRL's fallback: epsilon
    sapo = presets.trl_loss("sapo", num_rows=6, sapo_temperature_neg=2.0)
    assert (sapo.surrogate, sapo.agg, sapo.normalizer, sapo.sapo_tau_pos, sapo.sapo_tau_neg) == (
        "sapo", "seq-mean-token-mean", 6, 1.0, 2.0)
    luspo = presets.trl_loss("luspo", num_rows=6, importance_sampling_level="sequence", delta=2.0)
    assert (luspo.surrogate, luspo.ratio, luspo.agg, luspo.normalizer, luspo.ratio_cap) == (
        "clip", "sequence", "seq-mean-token-sum", 6, 2.0)
    vespo = presets.trl_loss("vespo", vespo_lambda_pos=0.0, vespo_k_neg=1.0)
    assert (vespo.surrogate, vespo.agg, vespo.vespo_lambda_pos, vespo.vespo_k_neg,
            vespo.vespo_k_pos, vespo.vespo_lambda_neg) == ("vespo", "token-mean", 1e-4, 1.0,
                                                            2.0, 2.0)  # TRL's λ floor 1e-4


def test_trl_loss_accepts_whole_counts_of_any_type():
    assert presets.trl_loss("grpo", num_rows=np.int64(8)).normalizer == 8
    assert presets.trl_loss("grpo", num_rows=8.0).normalizer == 8
    # TRL's dapo denominator: max(N, 1) / processes (N = 0 is an empty accumulation batch).
    assert presets.trl_loss("dapo", num_items_in_batch=0, num_processes=2).normalizer == 0.5
    assert presets.trl_loss("dapo", num_items_in_batch=30, num_processes=3).normalizer == 10.0


# --------------------------------------------------------------------------------------------
# The fused path: zero-length token axes, the caller's shapes in errors, forward mode.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_zero_length_token_axis(chunk_size):
    # Before: "attempt to get argmax of an empty sequence" from inside the token-range check.
    h0, tok0, z0, m0 = (jnp.zeros((B, 0, D)), jnp.zeros((B, 0), jnp.int32), jnp.zeros((B, 0)),
                        jnp.zeros((B, 0), bool))
    assert credax.token_logprobs_from_hidden(h0, W, tok0, chunk_size=chunk_size).shape == (B, 0)
    out = credax.policy_loss_from_hidden(h0, W, tok0, z0, ADV, m0, chunk_size=chunk_size)
    assert float(out.loss) == 0.0 and all(float(m) == 0.0 for m in out.metrics[:6])
    dh, dw = jax.grad(lambda h, w: credax.policy_loss_from_hidden(
        h, w, tok0, z0, ADV, m0, chunk_size=chunk_size).loss, argnums=(0, 1))(h0, W)
    assert dh.shape == (B, 0, D) and not np.any(dw)


def test_fused_errors_quote_the_callers_shapes():
    # Before: with chunk_size=2 the message quoted the padded (2, 6) for the caller's (2, 5).
    with pytest.raises(ValueError, match=r"\[B, T\] = \(2, 5\).*got \(2, 6\)"):
        credax.policy_loss_from_hidden(HIDDEN, W, TOKENS, OLD, jnp.ones((B, T + 1)), MASK,
                                       chunk_size=2)
    with pytest.raises(ValueError, match=r"`old_logp`.*\(2, 5\)"):
        credax.policy_loss_from_hidden(HIDDEN, W, TOKENS, jnp.zeros((B, T + 1)), ADV, MASK,
                                       chunk_size=2)


def test_forward_mode_is_refused_clearly_and_the_composition_supports_it():
    with pytest.raises(TypeError, match="forward-mode autodiff"):
        jax.jvp(lambda h: credax.policy_loss_from_hidden(h, W, TOKENS, OLD, ADV, MASK,
                                                         chunk_size=2).loss, (HIDDEN,), (HIDDEN,))
    # The pointer of the docstring: the two-call composition, in both modes, agrees with the
    # fused loss's reverse-mode gradient (a directional derivative along the hidden states).
    def composition(h):
        lp = credax.token_logprobs_from_hidden(h, W, TOKENS, mask=MASK, chunk_size=2)
        return credax.policy_loss(lp, OLD, ADV, MASK).loss

    _, tangent = jax.jvp(composition, (HIDDEN,), (HIDDEN,))
    grad = jax.grad(lambda h: credax.policy_loss_from_hidden(
        h, W, TOKENS, OLD, ADV, MASK, chunk_size=2).loss)(HIDDEN)
    np.testing.assert_allclose(float(tangent), float(jnp.sum(grad * HIDDEN)), rtol=1e-5)
    assert "forward-mode" in credax.policy_loss_from_hidden.__doc__


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


Z22 = np.zeros((2, 2), np.float32)
M22 = np.ones((2, 2), bool)
R2 = np.array([1.0, 0.0], np.float32)
IDS2 = np.array([3, 3])
KINDS = {"python": float, "numpy": np.float32, "jax": jnp.asarray}


def _loss_with(*args, ref_logp=None, **fields):
    """``policy_loss`` with ``fields`` in its ``options=`` (a LossOptions checks them when built)."""
    return credax.policy_loss(*args, ref_logp=ref_logp, options=credax.LossOptions(**fields))


HYPER_CASES = [
    # (label, function, argument, bad value, extra keyword arguments)
    ("clip_low_above_1", _loss_with, "clip_low", 1.5, {}),
    ("clip_low_zero", _loss_with, "clip_low", 0.0, {}),
    ("clip_low_nan", _loss_with, "clip_low", NAN, {}),
    ("clip_high_zero", _loss_with, "clip_high", 0.0, {}),
    ("clip_high_inf", _loss_with, "clip_high", INF, {}),
    ("dual_clip_half", _loss_with, "dual_clip", 0.5, {}),
    ("dual_clip_nan", _loss_with, "dual_clip", NAN, {}),
    ("kl_coef_negative", _loss_with, "kl_coef", -1.0, {"ref_logp": Z22}),
    ("kl_coef_nan", _loss_with, "kl_coef", NAN, {"ref_logp": Z22}),
    ("kl_coef_without_ref", _loss_with, "kl_coef", 0.1, {}),
    ("normalizer_negative", _loss_with, "normalizer", -4.0, {}),
    ("normalizer_zero", _loss_with, "normalizer", 0.0, {}),
    ("normalizer_inf", _loss_with, "normalizer", INF, {}),
    ("kl_clamp_zero", _loss_with, "kl_clamp", 0.0, {"ref_logp": Z22}),
    ("log_ratio_clamp_zero", _loss_with, "log_ratio_clamp", 0.0, {}),
    ("log_ratio_clamp_nan", _loss_with, "log_ratio_clamp", NAN, {}),
]


for _label, _fn, _arg, _bad, _extra in HYPER_CASES:
    for _kind, _make in KINDS.items():

        def _p(fn=_fn, arg=_arg, bad=_bad, extra=_extra, make=_make):
            # the message names the argument (`kl_coef=0.1` needs `ref_logp` names it too)
            raises(ValueError, f"`{arg}[`=]", fn, Z22, Z22, R2, M22, **{arg: make(bad)}, **extra)

        probe("hyper", f"policy_loss_{_label}_{_kind}")(_p)


@probe("hyper", "log_ratio_clamp_pair")
def _():
    raises(ValueError, "`log_ratio_clamp`", _loss_with, Z22, Z22, R2, M22,
           log_ratio_clamp=(1.0, 2.0))
    raises(ValueError, "`log_ratio_clamp`", _loss_with, Z22, Z22, R2, M22,
           log_ratio_clamp=(-1.0, jnp.asarray(-0.5)))
    raises(ValueError, "`log_ratio_clamp`", _loss_with, Z22, Z22, R2, M22,
           log_ratio_clamp=(-1.0, 1.0, 2.0))


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

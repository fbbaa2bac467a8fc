"""The 11 frame bug classes of issue #43, one test each (each failed at a3e9449).

They are fixed at the root, by the public entry's one host step (``credax._api``) and the one
range rule / concrete-value reader of ``credax._checks``; no test here needs a special case.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import credax

BF16 = ml_dtypes.bfloat16
IDS = jnp.array([0, 0, 1, 1])
LOGITS, TOKENS = jnp.zeros((1, 2, 3)), jnp.zeros((1, 2), jnp.int32)


def test_big_endian_numpy_inputs_read_as_their_values_after_a_native_call():
    # Before: GRPO of '>f4' [1, 0, 0.35, 0.7] after a native call gave [0, 0, 5.8e-05, -5.8e-05].
    r = np.array([1.0, 0.0, 0.35, 0.7], "<f4")
    ids = np.array([0, 0, 1, 1], "<i4")
    native = np.asarray(credax.grpo_advantages(r, ids))
    swapped = np.asarray(credax.grpo_advantages(r.astype(">f4"), ids.astype(">i4")))
    np.testing.assert_array_equal(swapped, native)
    # Hand-worked: a pair {1, 0} has mean 0.5, unbiased std sqrt(0.5): ±0.5 / (0.7071 + 1e-6).
    np.testing.assert_allclose(native[:2], [0.7071058, -0.7071058], rtol=1e-5)


def test_bfloat16_hyperparameters_obey_their_rules():
    # Before: a NumPy bfloat16 skipped every range check (gamma=2 ran; eps=-1 gave NaN everywhere).
    with pytest.raises(ValueError, match="`gamma` must lie in"):
        credax.discounted_returns(jnp.ones((1, 3)), jnp.ones((1, 3), bool), gamma=BF16(2))
    with pytest.raises(ValueError, match="`eps` must be >= 0"):
        credax.Normalization(eps=BF16(-1))
    with pytest.raises(ValueError, match="`gamma` must lie in \\[0, 1\\]; got 2.0 at row 1"):
        credax.gae_advantages(jnp.ones((2, 3)), jnp.zeros((2, 3)), jnp.ones((2, 3), bool),
                              gamma=np.array([0.5, 2.0], BF16))  # one gamma per row


def test_a_temperature_given_as_a_0d_jax_array_is_range_checked():
    # Before: jnp.asarray(-1.0) was never checked and scored the negated logits.
    with pytest.raises(ValueError, match="`temperature` must be positive"):
        credax.token_logprobs(LOGITS, TOKENS, temperature=jnp.asarray(-1.0))


@pytest.mark.parametrize("temperature", [BF16(2.0), jnp.asarray(2.0, jnp.bfloat16)],
                         ids=["numpy", "jax"])
def test_a_valid_bfloat16_temperature_is_accepted(temperature):
    # Before: refused as not a real scalar. Uniform logits: log p = -log 3 whatever T.
    out = credax.token_logprobs(LOGITS, TOKENS, temperature=temperature)
    np.testing.assert_allclose(out, np.full((1, 2), -np.log(3.0)), rtol=1e-6)


@pytest.mark.parametrize("rewards", [[jnp.float32(1.0), 1e39, 0.0, 1.0], (1.0, 1e39, 0.0, 1.0)],
                         ids=["list_jax_first", "tuple"])
def test_lists_led_by_a_jax_scalar_and_tuples_get_the_host_range_check(rewards):
    # Before: both skipped the check and 1e39 became inf.
    with pytest.raises(ValueError, match="`rewards` holds 1e\\+39 at index 1.*float32"):
        credax.grpo_advantages(rewards, IDS)


def test_loss_options_accept_bfloat16_and_float_subclasses_and_refuse_what_normalization_refuses():
    # Before: a valid bfloat16 and a float subclass were refused ("must be a real number ...
    # got bfloat16"); a subclass and malformed aux data were let through.
    class Half(float):
        pass

    assert float(credax.LossOptions(clip_high=BF16(0.25)).clip_high) == 0.25
    assert credax.LossOptions(clip_high=Half(0.25)).clip_high == 0.25
    with pytest.raises(TypeError, match="cannot be subclassed"):
        type("Sub", (credax.LossOptions,), {})
    with pytest.raises(ValueError, match="LossOptions.tree_unflatten"):
        credax.LossOptions.tree_unflatten(("token-mean",), (0.2,))


def test_options_values_copy_the_caller_s_numpy_leaves():
    # Before: they kept a reference; writing -1 into the array afterwards gave NaN everywhere.
    eps, clip = np.array(1e-6), np.array(0.2)
    norm, opts = credax.Normalization(eps=eps), credax.LossOptions(clip_high=clip)
    eps[...] = -1.0
    clip[...] = -1.0
    assert float(norm.eps) == 1e-6 and float(opts.clip_high) == 0.2
    out = credax.grpo_advantages(jnp.array([1.0, 0.0, 1.0, 1.0]), IDS, normalization=norm)
    assert np.isfinite(np.asarray(out)).all()


@pytest.mark.parametrize("rewards, kind", [(np.array(["1", "0", "1", "0"]), "string"),
                                           (np.array([1, 0, 1, 0], dtype=object), "object"),
                                           (np.array([1, 0, 1, 0], dtype=complex), "complex")])
def test_string_object_and_complex_arrays_are_refused_by_name(rewards, kind):
    # Before: JAX's generic error from inside the trace, naming no argument.
    with pytest.raises(TypeError, match=f"`rewards` is an? {kind} array"):
        credax.grpo_advantages(rewards, IDS)


def test_true_in_a_list_of_ids_is_refused_not_counted_as_one():
    # Before: [0, True, 1, 1] grouped row 1 with rows 2 and 3.
    with pytest.raises(TypeError, match="`group_ids` mixes bools with numbers"):
        credax.grpo_advantages(jnp.ones(4), [0, True, 1, 1])


def test_static_shape_arguments_obey_the_static_rule():
    # Before: turn_surprisal(num_turns=2**31) raised JAX's OverflowError; discount_weights was
    # the one public array function that was not a public function.
    with pytest.raises(ValueError, match="`num_turns` = 2147483648 is outside int32"):
        credax.turn_surprisal(jnp.zeros((1, 2)), jnp.zeros((1, 2), jnp.int32), num_turns=2**31)
    assert isinstance(credax.discount_weights, credax._api.PublicFunction)
    with pytest.raises(ValueError, match="`num_turns` = 2147483648 is outside int32"):
        credax.discount_weights(2**31, 0.5)
    with pytest.raises(TypeError, match="`num_turns` is static"):
        jax.jit(lambda k: credax.discount_weights(k, 0.5))(3)


_FIRST_CALL = {
    "jit": "jax.jit(lambda r: credax.discounted_returns(r, m, gamma=0.5))(r)",
    "vmap": "jax.vmap(lambda r: credax.discounted_returns(r[None], m, gamma=0.5)[0])(r)",
    "grad": "jax.grad(lambda r: credax.discounted_returns(r, m, gamma=0.5).sum())(r)",
    "scan": "jax.lax.scan(lambda c, r: (c, credax.discounted_returns(r[None], m, gamma=0.5)[0]),"
            " 0, r)[1]",
    "shard_map": "jax.shard_map(lambda r: credax.discounted_returns(r, m[:1], gamma=0.5), "
                 "mesh=jax.make_mesh((2,), ('b',), axis_types=(jax.sharding.AxisType.Auto,)), "
                 "in_specs=P('b'), out_specs=P('b'))(jnp.ones((2, 3)))",
}


@pytest.mark.parametrize("where", sorted(_FIRST_CALL))
def test_the_first_call_of_a_process_may_be_inside_a_transformation(where):
    # Before: inside shard_map a bare AssertionError (the entry built its known types under a
    # trace). A fresh process each, so that the call really is the first.
    script = textwrap.dedent(f"""
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import PartitionSpec as P
        import credax
        r, m = jnp.ones((1, 3)), jnp.ones((1, 3), bool)
        out = {_FIRST_CALL[where]}
        print(np.asarray(out).ravel()[:3].tolist())
    """)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # Returns of [1, 1, 1] with gamma 0.5: 1.75, 1.5, 1 (vmap/scan/jit); the gradient is
    # d(sum of returns)/d r_k = sum_{j<=k} 0.5^(k-j): 1, 1.5, 1.75.
    expected = [1.0, 1.5, 1.75] if where == "grad" else [1.75, 1.5, 1.0]
    assert done.stdout.strip() == str(expected)

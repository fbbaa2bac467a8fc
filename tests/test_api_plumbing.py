"""The public-entry plumbing of ``credax._api``: concrete vs traced values, compile once, sharding.

Every public array function goes through ``jit_public``; these tests pin down what it promises on
small functions of their own, and on two real entries (``policy_loss``, ``grpo_advantages``).
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import _api, _groups

# --------------------------------------------------------------------------------------------
# Concrete values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [0.25, np.float32(0.25), np.array(0.25), jnp.array(0.25), jnp.array(0.25, jnp.bfloat16)]
)
def test_concrete_float_reads_every_concrete_scalar(value):
    assert _api.concrete_float(value) == 0.25  # 0.25 is exact in every float type above


@pytest.mark.parametrize("value", [None, np.zeros(2), jnp.zeros((1,)), [0.25], "0.25"])
def test_concrete_float_refuses_non_scalars(value):
    assert _api.concrete_float(value) is None


def test_concrete_float_is_none_for_a_tracer():
    seen = []
    jax.jit(lambda x: seen.append(_api.concrete_float(x)) or x)(0.25)
    assert seen == [None]


def test_concrete_numpy_leaves_jax_arrays_on_device():
    assert _api.concrete_numpy(jnp.arange(3)) is None
    host = _api.concrete_numpy([1, 2, 3])
    assert isinstance(host, np.ndarray) and host.tolist() == [1, 2, 3]


def test_check_concrete_names_the_argument_and_passes_traced_values():
    with pytest.raises(ValueError, match=r"^`lam` must be >= 0; got -1.0\.$"):
        _api.check_concrete(-1, "lam", lambda v: v >= 0, "be >= 0")
    assert _api.check_concrete(2, "lam", lambda v: v >= 0, "be >= 0") == 2.0
    jax.jit(lambda x: _api.check_concrete(x, "lam", lambda v: v >= 0, "be >= 0") or x)(-1.0)


# --------------------------------------------------------------------------------------------
# Hyperparameter checks of a real entry: concrete values are checked, traced ones are not
# --------------------------------------------------------------------------------------------

LOGP = jnp.log(jnp.array([[0.5, 0.25, 0.5]]))
OLD = jnp.log(jnp.array([[0.5, 0.5, 0.25]]))
ADV = jnp.array([[1.0, -1.0, 1.0]])
MASK = jnp.ones((1, 3), bool)


@pytest.mark.parametrize("bad", [1.5, np.float64(1.5), np.array(1.5), jnp.array(1.5)])
def test_concrete_hyperparameter_is_range_checked(bad):
    # A committed JAX scalar is concrete too: it is read back and checked like a float.
    with pytest.raises(ValueError, match="clip_low"):
        credax.policy_loss(LOGP, OLD, ADV, MASK, clip_low=bad)


def test_python_float_inside_a_user_jit_is_still_checked():
    with pytest.raises(ValueError, match="clip_low"):
        jax.jit(lambda lp: credax.policy_loss(lp, OLD, ADV, MASK, clip_low=1.5).loss)(LOGP)


def test_traced_hyperparameter_is_used_as_given():
    # clip_low = 1.5 puts the lower bound at -0.5: no ratio is below it. Hand-worked, ratios
    # r = (1, 0.5, 2), A = (1, -1, 1), clip_high = 0.2: per-token losses max(-A r, -A clip(r)) =
    # (-1, 0.5, -1.2); token mean = -1.7 / 3.
    loss = jax.jit(lambda c: credax.policy_loss(LOGP, OLD, ADV, MASK, clip_low=c).loss)(1.5)
    np.testing.assert_allclose(float(loss), -1.7 / 3, rtol=1e-6)


# --------------------------------------------------------------------------------------------
# jit_public on functions of our own
# --------------------------------------------------------------------------------------------


def test_decorated_function_compiles_once_for_new_values_and_traced_options():
    chex.clear_trace_counter()

    @_api.jit_public(static_argnames=("power",))
    @chex.assert_max_traces(n=2)
    def f(x, *, scale=1.0, power=1):
        return scale * x**power

    x = jnp.arange(3.0)
    np.testing.assert_allclose(f(x, scale=2.0), [0.0, 2.0, 4.0])
    f(x + 1, scale=3.0)  # new values, a new (traced) hyperparameter: the same program
    f(x, scale=0.5)
    np.testing.assert_allclose(f(x, power=2), [0.0, 1.0, 4.0])  # new static option: 2nd trace
    with pytest.raises(AssertionError, match="traced > 2 times"):
        f(x, power=3)


def test_check_sees_bound_arguments_with_defaults_before_tracing():
    seen = []

    @_api.jit_public(check=lambda a: seen.append(dict(a)))
    def f(x, y=3.0, *, z=None):
        return x + y

    f(jnp.ones(2), z=1)
    assert list(seen[0]) == ["x", "y", "z"] and seen[0]["y"] == 3.0 and seen[0]["z"] == 1
    assert not isinstance(seen[0]["x"], jax.core.Tracer)  # the raw call, not the trace


def test_convert_runs_on_the_host_and_raw_ids_share_the_program_of_groups():
    chex.clear_trace_counter()

    @_groups.jit_grouped()
    @chex.assert_max_traces(n=1)
    def count(x, group_ids):
        assert isinstance(group_ids, credax.Groups)  # converted before tracing
        return jax.ops.segment_sum(jnp.ones_like(x), group_ids.index, group_ids.num_groups)[
            group_ids.index
        ]

    x = jnp.zeros(5)
    ids = np.array([7, -3, 7, 10**6, -3])
    np.testing.assert_array_equal(count(x, ids), [2, 2, 2, 1, 2])
    np.testing.assert_array_equal(count(x, credax.groups(ids)), [2, 2, 2, 1, 2])
    np.testing.assert_array_equal(count(x, jnp.asarray(ids[::-1])), [2, 1, 2, 2, 2])
    chex.clear_trace_counter()  # a keyword call is a new jit signature: one more trace, converted too
    np.testing.assert_array_equal(count(x, group_ids=ids), [2, 2, 2, 1, 2])


def test_public_options_rebuild_a_real_entry(traced_once):
    # The rebuilt grpo_advantages traces once for raw ids, a Groups, new values and a new eps.
    grpo = traced_once(credax.grpo_advantages)
    r = np.array([1.0, 0.0, 0.5, 0.5, 2.0], np.float32)
    ids = np.array([4, 4, -1, -1, 9])
    expected = credax.grpo_advantages(r, ids)
    np.testing.assert_array_equal(grpo(r, ids, eps=1e-6), expected)
    grpo(r[::-1].copy(), credax.groups(ids), eps=1e-3)
    grpo(r, jnp.asarray(ids), eps=0.0)


# --------------------------------------------------------------------------------------------
# Explicit-mesh replication
# --------------------------------------------------------------------------------------------


def test_replicate_explicit_gathers_explicit_axes_only():
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    x = jnp.arange(4.0)
    explicit = jax.make_mesh((1,), ("batch",), axis_types=(AxisType.Explicit,))
    sharded = jax.device_put(x, NamedSharding(explicit, P("batch")))
    out = _api.replicate_explicit(sharded)
    assert tuple(jax.typeof(out).sharding.spec) in {(), (None,)}
    np.testing.assert_array_equal(out, x)

    auto = jax.make_mesh((1,), ("batch",), axis_types=(AxisType.Auto,))
    on_auto = jax.device_put(x, NamedSharding(auto, P("batch")))
    assert _api.replicate_explicit(on_auto) is on_auto
    assert _api.replicate_explicit(x) is x
    assert _api.replicate_explicit("group") == "group"  # static options pass through


def test_lower_goes_through_the_public_checks_and_rewrites():
    # `.lower` folds the normalisation keywords as the call does (the bare `.jitted` body would
    # see normalization=None), and rejects what the call rejects.
    import numpy as np

    import credax

    s = np.linspace(0.0, 1.0, 8, dtype=np.float32).reshape(4, 2)
    m = np.ones((4, 2), bool)
    g = credax.groups(np.array([0, 0, 1, 1]))
    compiled = credax.tcpo_advantages.lower(s, m, g, eps=1e-4).compile()
    assert compiled.memory_analysis().output_size_in_bytes > 0
    import pytest

    with pytest.raises(ValueError, match="eps"):
        credax.tcpo_advantages.lower(s, m, g, eps=-1.0)

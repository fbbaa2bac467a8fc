"""The public-entry plumbing of ``credax._api``: the entry object, concrete vs traced values,
compile once, sharding.

Every public array function is a ``PublicFunction`` made by ``jit_public``; these tests pin down
what it promises on small functions of their own, and on real entries (``policy_loss``,
``grpo_advantages``, ``tcpo_advantages``, ``discounted_returns``): also that an unknown keyword
is refused by name before tracing (a removed normalisation keyword with the hint saying where
it went), and that ``normalization=`` is converted on the host by ``as_normalization``, which
checks a value the constructor did not build and trusts one it did.
"""

import inspect
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credax
from credax import _api, _checks, _grouping, _normalization
from credax._normalization import MOVED_TO_NORMALIZATION, NORMALIZE_KEYS, Normalization

# --------------------------------------------------------------------------------------------
# Concrete values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [0.25, np.float32(0.25), np.array(0.25), jnp.array(0.25), jnp.array(0.25, jnp.bfloat16)]
)
def test_concrete_float_reads_every_concrete_scalar(value):
    assert _api.concrete_float(value) == 0.25  # 0.25 is exact in every float type above


@pytest.mark.parametrize("value", [None, np.zeros(2), jnp.zeros((1,)), [0.25], "0.25", True, 10**400])
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
        credax.policy_loss(LOGP, OLD, ADV, MASK, options=credax.LossOptions(clip_low=bad))


def test_python_float_inside_a_user_jit_is_still_checked():
    with pytest.raises(ValueError, match="clip_low"):
        jax.jit(lambda lp: credax.policy_loss(lp, OLD, ADV, MASK,
                                              options=credax.LossOptions(clip_low=1.5)).loss)(LOGP)


def test_traced_hyperparameter_is_used_as_given():
    # clip_low = 1.5 puts the lower bound at -0.5: no ratio is below it. Hand-worked, ratios
    # r = (1, 0.5, 2), A = (1, -1, 1), clip_high = 0.2: per-token losses max(-A r, -A clip(r)) =
    # (-1, 0.5, -1.2); token mean = -1.7 / 3.
    loss = jax.jit(lambda c: credax.policy_loss(LOGP, OLD, ADV, MASK,
                                                options=credax.LossOptions(clip_low=c)).loss)(1.5)
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
    assert sorted(seen[0]) == ["x", "y", "z"] and seen[0]["y"] == 3.0 and seen[0]["z"] == 1
    assert not isinstance(seen[0]["x"], jax.core.Tracer)  # the raw call, not the trace


def test_ids_become_groups_before_the_body_host_ids_share_the_program_of_groups():
    chex.clear_trace_counter()

    @_grouping.jit_grouped()
    @chex.assert_max_traces(n=2)
    def count(x, group_ids):
        assert isinstance(group_ids, credax.Groups)  # converted before the body
        return jax.ops.segment_sum(jnp.ones_like(x), group_ids.index, group_ids.num_groups)[
            group_ids.index
        ]

    x = jnp.zeros(5)
    ids = np.array([7, -3, 7, 10**6, -3])
    # NumPy ids are converted by credax.groups on the host: the program of a Groups (trace 1).
    np.testing.assert_array_equal(count(x, ids), [2, 2, 2, 1, 2])
    np.testing.assert_array_equal(count(x, credax.groups(ids)), [2, 2, 2, 1, 2])
    # JAX ids are densified inside the program: one program of their own (trace 2), once.
    np.testing.assert_array_equal(count(x, jnp.asarray(ids[::-1])), [2, 1, 2, 2, 2])
    np.testing.assert_array_equal(count(x, jnp.asarray(ids)), [2, 2, 2, 1, 2])
    with pytest.raises(AssertionError, match="traced > 2 times"):  # a new shape: a third trace
        count(x[:4], ids[:4])
    chex.clear_trace_counter()  # a keyword call is a new jit signature: one more trace, converted too
    np.testing.assert_array_equal(count(x, group_ids=ids), [2, 2, 2, 1, 2])


def test_with_body_rebuilds_a_real_entry(traced_once):
    # The rebuilt grpo_advantages traces once for NumPy ids, a Groups, new values and a new eps,
    # and once more for JAX ids (densified inside their own program).
    grpo = traced_once(credax.grpo_advantages, n=2)
    r = np.array([1.0, 0.0, 0.5, 0.5, 2.0], np.float32)
    ids = np.array([4, 4, -1, -1, 9])
    expected = credax.grpo_advantages(r, ids)
    np.testing.assert_array_equal(grpo(r, ids, normalization=Normalization(eps=1e-6)), expected)
    grpo(r[::-1].copy(), credax.groups(ids), normalization=Normalization(eps=1e-3))
    np.testing.assert_array_equal(
        grpo(r, jnp.asarray(ids), normalization=Normalization(eps=1e-6)), expected)
    grpo(r[::-1].copy(), jnp.asarray(ids), normalization=Normalization(eps=0.0))
    with pytest.raises(TypeError, match="normalization"):  # the host conversion is rebuilt too
        grpo(r, ids, normalization=dict(eps=0.0))
    with pytest.raises(AssertionError, match="traced > 2 times"):  # a new shape: a third trace
        grpo(r[:4], ids[:4])


# --------------------------------------------------------------------------------------------
# The entry object: its attributes, its plan, and the manners of a function
# --------------------------------------------------------------------------------------------


def _entry():
    """A small entry with one argument of each kind: converted ids, a static option, a checked
    hyperparameter, a plain array."""
    seen = []

    def body(x, group_ids, *, power=1, scale: _checks.Positive = 1.0):
        """x**power * scale, per row (a test body)."""
        seen.append((group_ids, power))
        return scale * x**power

    entry = _api.jit_public(static_argnames=("power",), convert={"group_ids": credax.groups})(body)
    return entry, body, seen


def test_entry_attributes_are_the_body_s():

    entry, body, _ = _entry()
    assert entry.body is body and entry.__wrapped__ is body
    assert (entry.__name__, entry.__qualname__, entry.__module__, entry.__doc__) == (
        body.__name__, body.__qualname__, body.__module__, body.__doc__)
    assert entry.signature == inspect.signature(entry) == inspect.signature(body)
    assert inspect.isroutine(entry) and not inspect.isroutine(credax.Groups)
    jitted_type = type(jax.jit(body))
    assert isinstance(entry.jitted, jitted_type)
    for name in credax.__all__:  # every public array function is such an entry
        fn = getattr(credax, name)
        if hasattr(fn, "with_body"):
            assert inspect.isfunction(fn.body) and fn.__wrapped__ is fn.body, name
            assert isinstance(fn.jitted, jitted_type) and fn.signature == inspect.signature(fn), name


def test_the_call_runs_its_steps_in_order():
    entry, _, seen = _entry()
    x = np.arange(4.0, dtype=np.float32)
    ids = np.array([2**40, 2**40, 7, 7])  # beyond int32: fine for ids (densified on the host)
    out = entry(x, ids, power=np.int64(2), scale=2.0)  # a NumPy static: its Python value
    np.testing.assert_allclose(out, [0.0, 2.0, 8.0, 18.0])
    (received, power), = seen
    assert isinstance(received, credax.Groups) and power == 2 and type(power) is int
    with pytest.raises(ValueError, match="`x` holds 1e\\+39"):  # step 1: host range, by name
        entry(np.array([1e39, 0.0]), ids[:2])
    with pytest.raises(ValueError, match="^`scale` must be > 0"):  # step 2: check
        entry(x, ids, scale=-1.0)
    with pytest.raises(TypeError, match="`power` is static"):  # step 3: a traced static option
        jax.jit(lambda p: entry(x, ids, power=p))(2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'powr'"):  # Python's own
        entry(x, ids, powr=2)


def test_with_body_keeps_the_declarations():
    entry, _, _ = _entry()
    got = []

    def instrumented(x, group_ids, *, power=1, scale=1.0):
        got.append(type(group_ids))
        return x + power

    other = entry.with_body(instrumented)
    assert other.body is instrumented and other._declared == entry._declared
    np.testing.assert_allclose(other(np.zeros(2, np.float32), [5, 6], power=3), [3.0, 3.0])
    assert got == [credax.Groups]  # converted as the original entry converts
    with pytest.raises(ValueError, match="scale"):  # checked as the original entry checks
        other(np.zeros(2, np.float32), [5, 6], scale=0.0)


def test_lower_applies_the_call_s_rewrites():
    entry, _, _ = _entry()
    x = jnp.arange(4.0)
    # A static option given as a 0-d array and raw ids: lowered as the call compiles them.
    text = entry.lower(x, [1, 1, 2, 2], power=jnp.asarray(3)).as_text()
    assert "stablehlo" in text or "HloModule" in text
    with pytest.raises(ValueError, match="scale"):
        entry.lower(x, [1, 1, 2, 2], scale=-1.0)


def test_declarations_naming_no_parameter_are_refused():
    def body(x, *, power=1):
        return x

    with pytest.raises(ValueError, match=r"\['pwer'\] not among the parameters"):
        _api.jit_public(static_argnames=("pwer",))(body)
    with pytest.raises(ValueError, match="group_ids"):
        _api.jit_public(convert={"group_ids": credax.groups})(body)
    with pytest.raises(ValueError, match="both static and converted"):
        _api.jit_public(static_argnames=("x",), convert={"x": credax.groups})(body)


def test_an_entry_binds_copies_pickles_and_documents_like_a_function():
    import copy
    import pickle
    import pydoc

    fn = credax.grpo_advantages
    assert pickle.loads(pickle.dumps(fn)) is fn
    assert copy.copy(fn) is fn and copy.deepcopy(fn) is fn

    class Holder:
        advantages = credax.best_prior  # a class attribute binds, as a function's would

    bound = Holder().advantages
    assert bound.__func__ is credax.best_prior
    assert Holder.advantages is credax.best_prior
    page = pydoc.render_doc(fn, renderer=pydoc.plaintext)
    assert "grpo_advantages(rewards" in page  # help() shows the signature, then the docstring
    assert fn.__doc__.strip().splitlines()[0] in page
    entry, _, _ = _entry()
    with pytest.raises((pickle.PicklingError, AttributeError), match="local"):  # as a local function
        pickle.dumps(entry)


def test_with_body_keeps_the_keyword_hints():
    # with_body rebuilds the entry with the same declarations: the refusal of a removed keyword
    # names where it went in the rebuilt entry as in the public one.
    rebuilt = credax.grpo_advantages.with_body(credax.grpo_advantages.body)
    r, ids = np.array([1.0, 0.0], np.float32), np.array([0, 0])
    with pytest.raises(TypeError) as public:
        credax.grpo_advantages(r, ids, eps=0.0)
    with pytest.raises(TypeError) as again:
        rebuilt(r, ids, eps=0.0)
    assert str(again.value) == str(public.value) and "normalization=" in str(public.value)


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
    # `.lower` converts `normalization=` on the host as the call does, and rejects what the call
    # rejects: a removed keyword, a value that is not a Normalization, an unchecked bad one.
    import numpy as np

    import credax

    s = np.linspace(0.0, 1.0, 8, dtype=np.float32).reshape(4, 2)
    m = np.ones((4, 2), bool)
    g = credax.groups(np.array([0, 0, 1, 1]))
    compiled = credax.tcpo_advantages.lower(s, m, g, normalization=Normalization(eps=1e-4)).compile()
    assert compiled.memory_analysis().output_size_in_bytes > 0
    with pytest.raises(TypeError, match="unexpected keyword argument 'eps'.*normalization="):
        credax.tcpo_advantages.lower(s, m, g, eps=1e-4)
    with pytest.raises(TypeError, match="`normalization`"):
        credax.tcpo_advantages.lower(s, m, g, normalization=dict(eps=1e-4))
    with pytest.raises(ValueError, match="eps"):
        credax.tcpo_advantages.lower(s, m, g, normalization=jax.tree.map(lambda _: -1.0, Normalization()))


# The common call: what it skips and what it still checks
# --------------------------------------------------------------------------------------------


def _public_signatures():
    for name in credax.__all__:
        fn = getattr(credax, name)
        if hasattr(fn, "with_body"):
            yield name, fn.signature


def test_the_call_gives_the_check_what_inspect_binds():
    seen = []

    def f(x, g=None, *, eps=1.0, scale=2.0):
        return x * scale

    entry = _api.jit_public(check=lambda a: seen.append(dict(a)))(f)
    x, g = jnp.ones(2), jnp.zeros(2)
    for args, kwargs in [((x,), {}), ((x, g), {}), ((x,), {"eps": 0.5}), ((x, None), {"scale": 3}),
                         ((), {"x": x, "eps": 0.25}), ((x,), {"g": g, "scale": 1.5})]:
        entry(*args, **kwargs)
        expected = inspect.signature(f).bind(*args, **kwargs)
        expected.apply_defaults()
        assert seen.pop() == dict(expected.arguments), (args, kwargs)


def test_a_check_runs_only_when_it_can_fail():
    seen = []

    @_api.reads("eps")
    def check(a):
        seen.append(a["eps"])
        _api.check_concrete(a["eps"], "eps", *_checks.POSITIVE)

    entry = _api.jit_public(check=check)(lambda x, *, eps=1.0, other=0.0: x * eps + other)
    assert seen == [1.0]  # once on the defaults, when the entry was built
    entry(jnp.ones(2), other=3.0)
    assert seen == [1.0]  # nothing it reads was given: skipped
    entry(jnp.ones(2), eps=2.0)
    assert seen == [1.0, 2.0]
    for bad in (-1.0, jnp.asarray(-1.0), np.float64(-1.0)):  # a Python, JAX and NumPy number
        with pytest.raises(ValueError, match="^`eps` must be > 0"):
            entry(jnp.ones(2), eps=bad)
    def positive_eps(x, eps: _checks.Positive = 1.0):
        return x * eps

    rules = _api.jit_public()(positive_eps)  # the rule is the annotation's
    for bad in (-1.0, jnp.asarray(-1.0), 0):
        with pytest.raises(ValueError, match="^`eps` must be > 0"):
            rules(jnp.ones(2), bad)  # given positionally
        with pytest.raises(ValueError, match="^`eps` must be > 0"):
            rules(jnp.ones(2), eps=bad)


def test_a_check_is_proved_on_the_defaults_when_the_entry_is_built():
    @_api.reads("eps")
    def reads_more(a):
        return a["eps"] + a["scale"]  # reads an argument it does not declare

    def body(x, *, eps=1.0, scale=1.0):
        return x

    def bad_default(x, eps: _checks.Positive = 0.0):
        return x

    with pytest.raises(KeyError, match="scale"):
        _api.jit_public(check=reads_more)(body)
    with pytest.raises(ValueError, match="^`eps` must be > 0"):  # a default breaking its rule
        _api.jit_public()(bad_default)


def test_the_call_keeps_the_host_screen():
    entry, _, _ = _entry()
    x, ids = jnp.arange(4.0), jnp.asarray([1, 1, 2, 2])
    entry(x, ids, scale=2.0)
    with pytest.raises(ValueError, match="`x` holds 1e\\+39"):  # a NumPy float64 array: range
        entry(np.array([1e39, 0.0, 0.0, 0.0]), ids)
    with pytest.raises(ValueError, match="`scale` = 1e\\+39 is finite in float64"):
        entry(x, ids, scale=1e39)
    with pytest.raises(TypeError, match="`scale` must be a number; got None"):
        entry(x, ids, scale=None)
    with pytest.raises(TypeError, match="`power` must be a Python bool|`power` is static"):
        entry(x, ids, power=jnp.asarray(2.5))
    with pytest.raises(TypeError, match="`group_ids` got a credax.Normalization"):
        entry(x, credax.presets.VERL)


def test_a_hand_built_groups_jax_cannot_hash_is_refused_by_name():
    bad = credax.Groups(jnp.zeros(4, jnp.int32), jnp.asarray(4))  # num_groups must be static
    with pytest.raises(TypeError, match="`group_ids`: a Groups needs `num_groups` as a Python int"):
        credax.grpo_advantages(jnp.zeros(4), bad)
    floats = credax.Groups(jnp.zeros(4), 4)  # checked inside the program: the same message
    with pytest.raises(TypeError, match="`group_ids`: a Groups needs an integer `index`"):
        credax.grpo_advantages(jnp.zeros(4), floats)


# --------------------------------------------------------------------------------------------
# Unknown keywords: refused by name before tracing; the normalisation fields say where they went
# --------------------------------------------------------------------------------------------


def _normalizing_entries():
    for name in credax.__all__:
        fn = getattr(credax, name)
        if callable(fn) and hasattr(fn, "with_body"):
            if "normalization" in fn.signature.parameters:
                yield name, fn


def test_unknown_keyword_is_refused_by_name_before_tracing():
    traced = []

    @_api.jit_public(hints={"eps": "Pass `normalization=` instead."})
    def f(x, *, scale=1.0):
        traced.append(x)
        return scale * x

    with pytest.raises(TypeError, match=r"^f\(\) got an unexpected keyword argument 'eps'\. "
                                        r"Pass `normalization=` instead\.$"):
        f(jnp.ones(2), eps=object())  # not an array: JAX would have refused it as "non-array"
    with pytest.raises(TypeError, match=r"^f\(\) got an unexpected keyword argument 'epsilon'\.$"):
        f(jnp.ones(2), epsilon=0.5)  # no hint for it: the name alone
    assert traced == []  # refused before tracing
    np.testing.assert_array_equal(f(jnp.ones(2), scale=2.0), [2.0, 2.0])


def test_every_public_function_refuses_an_unknown_keyword_by_name_first():
    checked = 0
    for name, _sig in _public_signatures():
        fn = getattr(credax, name)
        # No other argument given: the unknown keyword is refused before anything else is read.
        with pytest.raises(TypeError, match=rf"^{fn.__name__}\(\) got an unexpected "
                                            r"keyword argument 'not_an_option'\.$"):
            fn(not_an_option=1)
        checked += 1
    assert checked > 50


def test_removed_normalization_keywords_are_refused_with_the_hint():
    entries = dict(_normalizing_entries())
    assert {"group_normalize", "grpo_advantages", "gdpo_advantages", "tcpo_advantages",
            "mt_grpo_advantages", "gigpo_advantages", "hgpo_advantages",
            "triage_advantages"} <= entries.keys()
    for fn in entries.values():
        for key in NORMALIZE_KEYS:
            message = (f"{fn.__name__}() got an unexpected keyword argument {key!r}. "
                       f"{MOVED_TO_NORMALIZATION[key]}")
            with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
                fn(**{key: object()})
            assert f"normalization=credax.Normalization({key}=...)" in message
    with pytest.raises(TypeError, match=r"'whiten_eps'\. Pass `normalization=credax\.Normalization\("):
        credax.triage_advantages(whiten_eps=1e-8)
    # a real call, good arrays and all: the keyword is still refused, and not by JAX
    r, ids = np.array([1.0, 0.0], np.float32), np.array([0, 0])
    with pytest.raises(TypeError, match=r"^grpo_advantages\(\) got an unexpected keyword argument 'scale'"):
        credax.grpo_advantages(r, ids, normalization=credax.presets.VERL, scale="none")


# --------------------------------------------------------------------------------------------
# `normalization=`: converted on the host by as_normalization; checked once when built
# --------------------------------------------------------------------------------------------


def test_every_normalizing_entry_converts_normalization_with_as_normalization():
    for name, fn in _normalizing_entries():
        assert fn._declared["convert"]["normalization"] is _normalization.as_normalization, name


def test_as_normalization_accepts_a_normalization_or_none_only():
    built = Normalization(eps=1e-3)
    assert _normalization.as_normalization(built) is built  # the value itself, not a copy
    assert _normalization.as_normalization(None) is None
    with pytest.raises(TypeError, match=r"^`normalization` must be a credax\.Normalization .*got dict "
                                        r"\(a mapping is not accepted: build `credax\.Normalization"):
        _normalization.as_normalization(dict(eps=1e-3))
    with pytest.raises(TypeError, match=r"^`norm` must be .*got str\.$"):
        _normalization.as_normalization("verl", "norm")


def test_normalization_is_converted_on_the_host_before_tracing():
    seen = []

    @_grouping.jit_grouped()
    def f(x, group_ids, *, normalization=None):
        seen.append(normalization)
        return x

    x, ids = jnp.zeros(2), np.array([0, 0])
    for bad in (dict(eps=1e-3), "verl", credax.presets.VERL_LOSS, 1e-3):
        with pytest.raises(TypeError, match="`normalization` (must be|got) a credax"):
            f(x, ids, normalization=bad)
    assert seen == []  # refused on the host: never traced
    f(x, ids)
    f(x, ids, normalization=Normalization(eps=1e-3))
    assert seen[0] is None and isinstance(seen[1], Normalization)
    assert isinstance(seen[1].eps, jax.core.Tracer)  # eps is the traced leaf


@pytest.fixture
def field_checks(monkeypatch):
    """Counts the field checks of Normalization (constructor, as_normalization) from now on."""
    calls = []
    original = _normalization._checked_fields

    def counting(values):
        calls.append(values)
        return original(values)

    monkeypatch.setattr(_normalization, "_checked_fields", counting)
    return calls


def test_a_built_normalization_is_not_rechecked_per_call(field_checks):
    r, ids = np.array([1.0, 0.0, 0.5, 0.5], np.float32), np.array([0, 0, 1, 1])
    norm = Normalization(eps=1e-3, ddof=0)
    assert norm._checked and len(field_checks) == 1  # the constructor checked it, once
    expected = credax.grpo_advantages(r, ids, normalization=norm)  # compiles (the trace may check)
    field_checks.clear()
    for _ in range(3):
        np.testing.assert_array_equal(credax.grpo_advantages(r, ids, normalization=norm), expected)
    assert field_checks == []  # no check on the call path
    # copies, pickles and replace are built through the checks, so they are trusted too
    import copy
    import pickle

    for other in (copy.copy(norm), copy.deepcopy(norm), pickle.loads(pickle.dumps(norm)),
                  norm.replace(eps=1e-3)):
        assert other._checked
    assert _normalization.as_normalization(norm) is norm


def test_an_unflattened_normalization_is_checked_on_every_call(field_checks):
    r, ids = np.array([1.0, 0.0, 0.5, 0.5], np.float32), np.array([0, 0, 1, 1])
    leaves, treedef = jax.tree.flatten(Normalization(eps=1e-3, ddof=0))
    good = jax.tree.unflatten(treedef, [1e-3])
    assert not good._checked  # tree_unflatten cannot check (JAX unflattens with tracers)
    expected = credax.grpo_advantages(r, ids, normalization=Normalization(eps=1e-3, ddof=0))
    np.testing.assert_array_equal(credax.grpo_advantages(r, ids, normalization=good), expected)
    field_checks.clear()
    for _ in range(2):
        credax.grpo_advantages(r, ids, normalization=good)
    assert len(field_checks) >= 2  # checked on each call (the compiled program is reused)
    bad_eps = jax.tree.unflatten(treedef, [-1.0])
    bad_scale = Normalization.tree_unflatten((True, "bogus", 0, "add", "zero", False), [1e-3])
    for _ in range(2):  # refused on every call, by the same field checks as the constructor
        with pytest.raises(ValueError, match="`eps` must be >= 0"):
            credax.grpo_advantages(r, ids, normalization=bad_eps)
        with pytest.raises(ValueError, match="`scale` must be one of"):
            credax.grpo_advantages(r, ids, normalization=bad_scale)
        with pytest.raises(ValueError, match="`eps` must be >= 0"):
            _normalization.as_normalization(bad_eps)

"""Multi-device: batch-sharded inputs give the same results as one device.

JAX fixes its device count at start-up, so the check runs in a subprocess with 8 forced CPU
devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``). Rows are sharded over a
``jax.sharding.Mesh`` with the ids shuffled so that every group spans several shards: a grouped
statistic computed per shard would be wrong, the results must equal the single-device ones.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import credax
    from credax import presets

    jax.config.update("jax_numpy_rank_promotion", "raise")
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    assert len(jax.devices()) == 8, jax.devices()

    mesh = jax.make_mesh((8,), ("batch",))
    rows = NamedSharding(mesh, P("batch"))
    rows_turns = NamedSharding(mesh, P("batch", None))

    rng = np.random.default_rng(0)
    b, k = 64, 5
    # 9 groups of sizes 1..13 with arbitrary ids, shuffled across the 8 shards of 8 rows.
    ids = np.repeat([-7, 0, 3, 11, 2**31 - 1, -(2**31), 42, 99, 1000], [1, 2, 3, 5, 7, 9, 11, 13, 13])
    ids = rng.permutation(ids)
    assert ids.shape == (b,)
    spans = [len(set(np.flatnonzero(ids == g) // 8)) for g in np.unique(ids)]
    assert max(spans) >= 4, spans  # groups really span shards
    r = rng.choice([0.0, 0.35, 1 / 3, 0.95, 1.0], size=b).astype(np.float32)
    r[ids == 42] = 0.35  # a constant group
    mask = (rng.random(b) < 0.9) | (ids == -7)  # the singleton is valid
    r = np.where(mask, r, np.nan).astype(np.float32)
    x = rng.normal(size=(b, k)).astype(np.float32)
    turn_mask = np.arange(k)[None, :] < rng.integers(1, k + 1, size=(b, 1))
    x = np.where(turn_mask, x, np.inf).astype(np.float32)

    def run(r, ids, mask, x, turn_mask):
        g = credax.groups(ids)
        return [
            credax.grpo_advantages(r, ids, mask),
            credax.grpo_advantages(r, g, mask, normalization=presets.VERL),
            credax.rloo_advantages(r, g, mask),
            credax.degenerate_groups(r, g, mask),
            credax.group_normalize(x, ids, turn_mask),
            credax.group_normalize(x, g, turn_mask, normalization=presets.TRL_BATCH),
            credax.peer_mean(x, g, turn_mask).mean,
            credax.group_count(g, turn_mask),
        ]

    # one device
    single = [np.asarray(o) for o in run(r, ids, mask, x, turn_mask)]


    def run_small(r, ids, mask, x, turn_mask):
        # outside jit each public function compiles on its own: the two the contract names
        return [credax.grpo_advantages(r, ids, mask), credax.group_normalize(x, ids, turn_mask)]


    def check(outputs, label):
        if len(outputs) == 2:  # run_small
            outputs = [outputs[0], None, None, None, outputs[1], None, None, None]
        assert len(outputs) == len(single), label
        for i, (a, s) in enumerate(zip(single, outputs, strict=True)):
            if s is None:
                continue
            np.testing.assert_allclose(np.asarray(s, np.float64), a.astype(np.float64),
                                       rtol=1e-5, atol=1e-6, err_msg=f"{label} output {i}")
        assert np.all(np.asarray(outputs[0])[ids == 42] == 0.0), label  # constant group
        print(label, "OK", flush=True)


    assert np.all(single[0][ids == 42] == 0.0)
    assert np.asarray(single[3])[ids == -7].all()  # the singleton is degenerate

    def put(mesh):
        rows = NamedSharding(mesh, P("batch"))
        rows_turns = NamedSharding(mesh, P("batch", None))
        out = (jax.device_put(r, rows), jax.device_put(ids.astype(np.int32), rows),
               jax.device_put(mask, rows), jax.device_put(x, rows_turns),
               jax.device_put(turn_mask, rows_turns))
        assert len(out[0].sharding.device_set) == 8
        return out

    def attempt(label, thunk):
        # Each configuration reports on its own line; the tests look for "<label> OK".
        try:
            check(thunk(), label)
        except Exception as e:
            print(label, "FAIL", type(e).__name__, str(e).splitlines()[0][:300], flush=True)


    # 1. Auto mesh axes (GSPMD propagation): inside the caller's jit (ids traced, densified on
    #    the sharded rows) and through the public functions on sharded concrete arrays.
    auto = jax.make_mesh((8,), ("batch",), axis_types=(AxisType.Auto,))
    args = put(auto)
    attempt("AUTO_JIT", lambda: jax.jit(run)(*args))
    attempt("AUTO_EAGER", lambda: run_small(*args))

    # 2. Explicit mesh axes (jax.make_mesh's default in JAX 0.10): shardings are part of the
    #    types; with and without a mesh context, under jit and not.
    explicit = jax.make_mesh((8,), ("batch",), axis_types=(AxisType.Explicit,))
    args = put(explicit)
    attempt("EXPLICIT_JIT", lambda: jax.jit(run)(*args))
    attempt("EXPLICIT_EAGER", lambda: run_small(*args))

    def in_mesh(thunk):
        with jax.set_mesh(explicit):
            return thunk()

    attempt("EXPLICIT_SET_MESH_JIT", lambda: in_mesh(lambda: jax.jit(run)(*args)))

"""
)


def on_eight_devices(args, timeout):
    """Run ``python *args`` in a subprocess with 8 forced CPU devices; its stdout."""
    root = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, *args], env=env, cwd=root, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def eight_devices():
    """Run SCRIPT once in a subprocess with 8 forced CPU devices; its stdout."""
    return on_eight_devices(["-c", SCRIPT], timeout=300)


@pytest.mark.parametrize("label", ["AUTO_JIT", "AUTO_EAGER", "EXPLICIT_JIT", "EXPLICIT_EAGER",
                                   "EXPLICIT_SET_MESH_JIT"])
def test_batch_sharded_equals_single_device(eight_devices, label):
    assert f"{label} OK" in eight_devices, eight_devices


# Every public array function (issue 13, class 6): auto-axis and explicit-axis (jax.make_mesh's
# default, also under jax.set_mesh + jit) batch-sharded inputs give the single-device results.
EVERY_FUNCTION = pathlib.Path(__file__).with_name("multidevice_every_function.py")


@pytest.fixture(scope="module")
def eight_devices_every_function():
    return on_eight_devices([str(EVERY_FUNCTION)], timeout=900)


@pytest.mark.parametrize("label", ["AUTO_EAGER", "EXPLICIT_EAGER", "EXPLICIT_SET_MESH_JIT"])
def test_every_public_function_sharded(eight_devices_every_function, label):
    assert f"{label} ALL OK" in eight_devices_every_function, eight_devices_every_function

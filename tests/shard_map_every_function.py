"""Run by tests/test_shard_map.py in a subprocess with 8 forced CPU devices: every entry of the
method registry and the tests' forms (``credax.testing.calls.REGISTRY``) called inside
``jax.shard_map`` on meshes of 4 and 8 devices, whole prompt groups on each shard, against the unsharded call.

Usage: ``python tests/shard_map_every_function.py`` (the sweep) or ``... first`` (a fresh process
whose first credax call is made inside ``shard_map``). Prints one JSON object a line:
``{"mesh": n, "label": ..., "kind": ..., "diff": d, "error": e}``, ``d`` the largest absolute
difference (``0.0``: every bit equal; ``inf``: shapes or NaN placement differ). The test reads it.

Each entry is one of three kinds (the test checks the split covers the registry):

* ``local``: ``group_local=True``: each shard's rows of the output equal the unsharded call's rows
  (an output without a row axis, e.g. ``discount_weights``, equals the call on the shard's rows);
* ``axis``: a batch statistic that takes ``axis_name``: called with ``axis_name="b"``, every output
  equals the unsharded call's (rows and scalars alike);
* ``shard``: a batch statistic without an axis argument: inside ``shard_map`` it computes the
  shard's own statistic; it must equal the call on the shard's rows alone.
"""

# ruff: noqa: E501
from __future__ import annotations

import json
import sys

import jax

if len(sys.argv) > 1 and sys.argv[1] == "first":
    # A fresh process: the first credax call of the process is made inside shard_map.
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import credax

    mesh = jax.make_mesh((4,), ("b",), devices=jax.devices()[:4])
    put = lambda x: jax.device_put(x, NamedSharding(mesh, P("b")))  # noqa: E731
    r = jnp.arange(16, dtype=jnp.float32) % 3
    ids = jnp.repeat(jnp.arange(4) * 7 - 3, 4).astype(jnp.int32)
    try:
        out = jax.shard_map(lambda r, i: credax.grpo_advantages(r, i), mesh=mesh,
                            in_specs=(P("b"), P("b")), out_specs=P("b"))(put(r), put(ids))
        ok = bool(jnp.array_equal(out, credax.grpo_advantages(r, ids)))
        print("FIRST", "OK" if ok else "DIFFERS", flush=True)
    except Exception as e:  # noqa: BLE001 - reported to the test
        print("FIRST FAIL", type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "",
              flush=True)
    sys.exit(0)

if len(sys.argv) > 1 and sys.argv[1] == "ids":
    # JAX group ids densified inside shard_map (issue #44 item 4: the hashing loop's carry), one
    # whole group per shard: the group-local estimators equal the unsharded call, bit for bit.
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import credax

    credax.grpo_advantages(jnp.zeros(2), jnp.zeros(2, jnp.int32))  # the entry warm (not tested here)
    mesh = jax.make_mesh((4,), ("b",), devices=jax.devices()[:4])
    put = lambda x: jax.device_put(x, NamedSharding(mesh, P("b")))  # noqa: E731
    r = jnp.asarray(np.random.default_rng(0).choice([0.0, 0.5, 1.0], 16), jnp.float32)
    ids = jnp.repeat(jnp.array([-7, 2**31 - 1, 0, 99]), 4).astype(jnp.int32)

    def f(r, i):
        return (credax.grpo_advantages(r, i), credax.rloo_advantages(r, credax.groups(i)),
                credax.groups(i).index)

    try:
        out = jax.shard_map(f, mesh=mesh, in_specs=(P("b"), P("b")), out_specs=P("b"))(put(r), put(ids))
        ok = (bool(jnp.array_equal(out[0], credax.grpo_advantages(r, ids)))
              and bool(jnp.array_equal(out[1], credax.rloo_advantages(r, ids)))
              and bool(jnp.all(out[2] == 0)))  # one group per shard: dense index 0 on each
        print("IDS", "OK" if ok else "DIFFERS", flush=True)
    except Exception as e:  # noqa: BLE001 - reported to the test
        print("IDS FAIL", type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "", flush=True)
    sys.exit(0)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from credax import _registry  # noqa: E402
from credax._batch import TurnBatch  # noqa: E402
from credax._collectives import vary_like  # noqa: E402
from credax.bench.sweep import example_batch  # noqa: E402
from credax.testing import calls  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
assert len(jax.devices()) == 8, jax.devices()

# The batch statistics that take `axis_name` (a psum over the mesh axis): the whitening,
# global counts and the loss's normaliser.
AXIS = ("gpg_advantages", "reinforce_pp_advantages", "reinforce_pp_baseline_advantages",
        "aggregate", "policy_loss", "policy_loss:turns", "policy_loss:tokens",
        "policy_loss_from_hidden")
REPLICATED = {"unembedding"}

# 48 rows: 8 blocks of 6, each block whole prompt groups (a 4-device shard holds two blocks, an
# 8-device shard one), rows shuffled inside the block, arbitrary ids; the last block all masked
# (no real turn, no token): a shard whose rows are all masked.
BLOCKS = ((6,), (2, 4), (1, 2, 3), (3, 3), (1, 5), (2, 2, 2), (4, 2), (6,))
ROWS = 6


def sweep_batch() -> TurnBatch:
    rng = np.random.default_rng(7)
    b = example_batch(48, 4, 12, seed=3)
    ids = []
    fresh = iter(rng.choice(np.arange(-500, 500) * 13, 40, replace=False).tolist())
    for sizes in BLOCKS:
        block = np.concatenate([np.full(s, next(fresh)) for s in sizes])
        ids.extend(rng.permutation(block).tolist())
    turn_mask = b.turn_mask.copy()
    token_turn = b.token_turn.copy()
    turn_mask[-ROWS:] = False
    token_turn[-ROWS:] = -1
    rewards = (np.round(2 * b.rewards) / 2).astype(np.float32)  # GPG: some zero rewards
    return b._replace(group_ids=np.asarray(ids, np.int32), turn_mask=turn_mask,
                      token_turn=token_turn, rewards=rewards)


HOST = sweep_batch()
B = HOST.scores.shape[0]


def rows_of(batch: TurnBatch, rows) -> TurnBatch:
    return TurnBatch(*(None if v is None else v if name in REPLICATED else np.asarray(v)[rows]
                       for name, v in zip(TurnBatch._fields, batch, strict=True)))


def leaves(out):
    return [np.asarray(x) for x in jax.tree.leaves(out)]


def difference(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape or a.dtype != b.dtype:
        return float("inf")
    if a.tobytes() == b.tobytes():
        return 0.0
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if not np.array_equal(np.isnan(a64), np.isnan(b64)):
        return float("inf")
    d = np.nanmax(np.abs(a64 - b64), initial=0.0)
    return float(d) if d > 0 else 1e-300  # equal values, other bits (-0.0)


def kind_of(label: str, entry) -> str:
    return "local" if entry.group_local else "axis" if label in AXIS else "shard"


WHOLE: dict[str, list] = {}


def run(n: int) -> None:
    mesh = jax.make_mesh((n,), ("b",), devices=jax.devices()[:n])
    shard_rows = B // n
    fields = TurnBatch._fields
    present = [name for name, v in zip(fields, HOST, strict=True) if v is not None]

    def place(name, v):
        spec = P() if name in REPLICATED else P("b")
        return jax.device_put(np.asarray(v), NamedSharding(mesh, spec))

    placed = [place(name, getattr(HOST, name)) for name in present]
    in_specs = tuple(P() if name in REPLICATED else P("b") for name in present)
    whole_batch = HOST.map(jnp.asarray)
    for label, entry in calls.REGISTRY.items():
        kind = kind_of(label, entry)
        options = {"axis_name": "b"} if kind == "axis" else {}
        try:
            if label not in WHOLE:  # the unsharded call, once for both meshes
                WHOLE[label] = leaves(entry(whole_batch))
            whole = WHOLE[label]

            def local(*values, entry=entry, options=options):
                batch = TurnBatch(**dict(zip(present, values, strict=True)))
                out = jax.tree.leaves(entry(batch, **options))
                # One leading shard axis on every leaf (an invariant leaf cast to vary first).
                return [vary_like(x[None], values[0]) for x in out]

            fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=P("b")))
            sharded = leaves(fn(*placed))
            worst = 0.0
            for i, (s, w) in enumerate(zip(sharded, whole, strict=True)):
                for k in range(n):
                    part = s[k]
                    rows = np.arange(k * shard_rows, (k + 1) * shard_rows)
                    per_row = w.ndim > 0 and w.shape[0] == B and part.shape[:1] == (shard_rows,)
                    if kind == "axis":
                        expected = w[rows] if per_row else w
                    elif kind == "local" and per_row:
                        expected = w[rows]
                    else:  # the statistic of the shard's rows alone
                        expected = leaves(entry(rows_of(HOST, rows).map(jnp.asarray)))[i]
                    worst = max(worst, difference(part, expected))
            print(json.dumps({"mesh": n, "label": label, "kind": kind, "diff": worst,
                              "error": None}), flush=True)
        except Exception as e:  # noqa: BLE001 - reported to the test, one line per entry
            print(json.dumps({"mesh": n, "label": label, "kind": kind, "diff": None,
                              "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}),
                  flush=True)


# Warm the public entry outside shard_map first: the sweep tests the functions, the `first` mode
# the first call of a process.
_registry.CALLS["grpo_advantages"](HOST.map(jnp.asarray))
for n in (4, 8):
    run(n)

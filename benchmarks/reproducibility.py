"""Which public functions are bitwise identical across device counts and per prompt group
(issue #38, measured).

Every call of the call table (``credax._registry.CALLS`` and ``credax.bench.sweep.FORMS``) on one
batch, its inputs sharded over the batch axis of an auto-axis mesh of 1, 2, 4 and 8 forced CPU
devices, compared with the unsharded single-device result: ``bitwise`` where every output bit is
equal on every mesh, else the largest absolute difference. Run (it forces 8 host devices itself,
so run it as a script)::

    PYTHONPATH=src python benchmarks/reproducibility.py              # batch-sharded inputs
    PYTHONPATH=src python benchmarks/reproducibility.py --replicate  # the recipe: replicated
    PYTHONPATH=src python benchmarks/reproducibility.py --streaming  # one group's rows alone

Prints one Markdown table row per call; ``--only=name,name`` restricts it to those labels.
``--replicate`` places every input replicated on the mesh (``PartitionSpec()``) before the call,
the recipe of the reproducibility guide. ``--streaming`` (one device) calls every entry on each
prompt group's rows alone and compares with those rows of the whole batch's call
(:func:`streaming_difference`), over the batches of :data:`STREAMING_BATCHES`, next to the entry's
``group_local`` flag of the registry.
"""

import os
import sys

if "jax" not in sys.modules:  # 8 host devices, before JAX starts
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from credax import _registry  # noqa: E402 -- the core method registry
from credax._batch import TurnBatch  # noqa: E402
from credax.bench.sweep import FORMS, example_batch  # noqa: E402 -- the other forms of a call

REPLICATED = {"unembedding"}
# The batches of --streaming: (group sizes, seed). Equal sizes (what a GRPO orchestrator streams;
# 20, 64 and 128 rows: XLA's CPU code for a row-local reduction can change with the row count) and
# one batch of unequal sizes with a singleton group.
STREAMING_BATCHES = tuple((sizes, seed)
                          for sizes in ((4,) * 5, (8,) * 8, (16,) * 8, (1, 3, 4, 6, 8))
                          for seed in range(4))


def streaming_batch(sizes=(4,) * 5, seed: int = 0) -> TurnBatch:
    """A batch of ``len(sizes)`` prompt groups of those sizes, rows shuffled (each group's rows
    interleaved with the others'), arbitrary ids (negative, sparse), every field set
    (``example_batch``); rewards rounded to 0, 0.5 and 1, so that groups differ in their share of
    zero rewards (GPG's batch α) and some are constant."""
    rng = np.random.default_rng(1000 + seed)
    b = example_batch(sum(sizes), 4, 12, seed=seed)
    ids = np.repeat(rng.choice(np.arange(-50, 50) * 7, len(sizes), replace=False), sizes)
    return b._replace(group_ids=rng.permutation(ids).astype(np.int32),
                      rewards=(np.round(2 * b.rewards) / 2).astype(np.float32))


def group_rows(batch: TurnBatch, rows) -> TurnBatch:
    """The batch's rows ``rows`` (in that order): every field but the unembedding (not per row)."""
    return TurnBatch(*(None if v is None else v if name in REPLICATED else np.asarray(v)[rows]
                       for name, v in zip(TurnBatch._fields, batch, strict=True)))


def streaming_difference(entry, batch: TurnBatch) -> float:
    """The largest absolute difference, over the prompt groups of ``batch``, between ``entry``
    called on the group's rows alone and those rows of its call on the whole batch: ``0.0`` where
    every output bit is equal. An output whose leading axis is the batch's is compared on the
    group's rows, any other output (a scalar, a per-role fit) whole; a shape that differs is
    ``inf``, bits that differ with equal values (NaN payloads, -0.0) ``1e-300``."""
    rows_b = batch.scores.shape[0]
    whole = jax.tree.leaves(jax.tree.map(np.asarray, entry(batch.map(jnp.asarray))))
    worst = 0.0
    for g in np.unique(batch.group_ids):
        rows = np.flatnonzero(batch.group_ids == g)
        part = jax.tree.leaves(jax.tree.map(np.asarray,
                                            entry(group_rows(batch, rows).map(jnp.asarray))))
        for a, b in zip(part, whole, strict=True):
            b = b[rows] if b.ndim and b.shape[0] == rows_b else b
            if a.shape != b.shape or a.dtype != b.dtype:
                return float("inf")
            if a.tobytes() != b.tobytes():
                d = np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0)
                worst = max(worst, float(d) if d > 0 else 1e-300)
    return worst


def _shown(w) -> str:
    return (w if isinstance(w, str) else "bitwise" if w == 0 else
            "NaN placement differs" if w == 1e-300 else f"{w:.1e}")


def streaming(only: set[str] | None = None) -> None:
    """Prints the guide's per-group table: ``| label | yes/no (group_local) | difference |``, the
    difference the largest over STREAMING_BATCHES (``≤ x`` for a group-local entry)."""
    table = {label: c for label, c in {**_registry.CALLS, **FORMS}.items()
             if only is None or label in only}
    worst = dict.fromkeys(table, 0.0)
    for sizes, seed in STREAMING_BATCHES:
        batch = streaming_batch(sizes, seed)
        for label, c in table.items():
            worst[label] = max(worst[label], streaming_difference(c, batch))
    print("| call | group-local | one group alone vs its rows in the batch |")
    print("|---|---|---|")
    for label, w in worst.items():
        local = table[label].group_local
        shown = f"≤ {_shown(w)}" if local and isinstance(w, float) and 0 < w < 1e-3 else _shown(w)
        print(f"| `{label}` | {'yes' if local else 'no' if local is False else 'undeclared'} "
              f"| {shown} |")


def main(replicate: bool = False, only: set[str] | None = None) -> None:
    host = example_batch(16, 4, 12, seed=0, num_groups=5)
    table = {label: c for label, c in {**_registry.CALLS, **FORMS}.items()
             if only is None or label in only}
    single = {}
    for label, c in table.items():
        single[label] = jax.tree.map(np.asarray, c(host.map(jnp.asarray)))
    worst = {label: 0.0 for label in single}
    for n in (1, 2, 4, 8):
        mesh = jax.make_mesh((n,), ("batch",), axis_types=(AxisType.Auto,),
                             devices=jax.devices()[:n])

        def place(name, v, mesh=mesh):
            spec = (P() if replicate or name in REPLICATED
                    else P("batch", *([None] * (v.ndim - 1))))
            return jax.device_put(v, NamedSharding(mesh, spec))

        batch = TurnBatch(*(None if v is None else place(name, v)
                            for name, v in zip(TurnBatch._fields, host, strict=True)))
        for label, c in table.items():
            try:
                out = jax.tree.map(np.asarray, c(batch))
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                worst[label] = f"error: {type(e).__name__}"
                continue
            if isinstance(worst[label], str):
                continue
            for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(single[label]), strict=True):
                a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
                same = (a.view(np.uint8) == b.view(np.uint8)).all() if a.dtype == b.dtype else False
                if not same:
                    d = np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)),
                                  initial=0.0) if a.size else 0.0
                    worst[label] = max(worst[label], float(d) if d > 0 else 1e-300)
    print("| call | 1, 2, 4, 8 devices vs unsharded |")
    print("|---|---|")
    for label, w in worst.items():
        print(f"| `{label}` | {_shown(w)} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    picked = [a.split("=", 1)[1] for a in args if a.startswith("--only=")]
    only = set(picked[0].split(",")) if picked else None
    if "--streaming" in args:
        streaming(only)
    else:
        main(replicate="--replicate" in args, only=only)

"""Which public functions are bitwise identical across device counts (issue #38, measured).

Every call of the call table (``credax._registry.ALL``) on one batch, its inputs sharded over
the batch axis of an auto-axis mesh of 1, 2, 4 and 8 forced CPU devices, compared with the
unsharded single-device result: ``bitwise`` where every output bit is equal on every mesh, else
the largest absolute difference. Run (it forces 8 host devices itself, so run it as a script)::

    PYTHONPATH=src python benchmarks/reproducibility.py              # batch-sharded inputs
    PYTHONPATH=src python benchmarks/reproducibility.py --replicate  # the recipe: replicated

Prints one Markdown table row per call; ``--only=name,name`` restricts it to those labels.
``--replicate`` places every input replicated on the mesh (``PartitionSpec()``) before the call,
the recipe of the reproducibility guide.
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

from credax import _registry as calls  # noqa: E402 -- the core method registry
from credax._batch import TurnBatch, example_batch  # noqa: E402

REPLICATED = {"unembedding"}


def main(replicate: bool = False, only: set[str] | None = None) -> None:
    host = example_batch(16, 4, 12, seed=0, num_groups=5)
    table = {label: c for label, c in calls.ALL.items() if only is None or label in only}
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
        shown = w if isinstance(w, str) else ("bitwise" if w == 0 else
                                              "NaN placement differs" if w == 1e-300 else f"{w:.1e}")
        print(f"| `{label}` | {shown} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    picked = [a.split("=", 1)[1] for a in args if a.startswith("--only=")]
    main(replicate="--replicate" in args, only=set(picked[0].split(",")) if picked else None)

"""Where a compiled call spends its time, kernel by kernel, as JAX's profiler records it.

``kernel_profile(fn, *args)`` runs ``fn(*args)`` (already compiled by a first call) under
``jax.profiler`` and sums the recorded duration of every event by name, per call. On the CPU the
events are XLA's thunks — one per fused kernel (``*_fusion``), library reduction (``ynn_fusion``),
scatter, gather, copy or ``while`` loop — on the host threads that run them. Runtime bookkeeping
(the executable's launch, the wait for completion, Python frames) is left out, so on the CPU the
rows add up to the work itself. On a GPU the trace also holds the device's kernels next to the
host's launch events, and both are listed (not yet run on a GPU: no session had one).

Used to find the floor of a pipeline (``docs/guides/speed.md``): which kernel dominates, and
whether a change moved time or only moved it elsewhere. Measure on a quiet machine; the rows are
wall-clock durations of events, so a loaded machine inflates them all.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import tempfile
from collections.abc import Callable
from typing import Any

# Events that wrap the kernels rather than being one: the executable's launch and wait, buffer
# handling, and Python frames (named "$file:line function" by the profiler).
_RUNTIME_PREFIXES = ("$", "ThunkExecutor", "PjitFunction", "CommonPjRt", "PjRt", "ParseArguments",
                     "Handle input", "AllocateOutputBuffers", "PythonRefManager", "end: ",
                     "Wait for ", "ThreadpoolListener")


def kernel_profile(fn: Callable[..., Any], *args: Any, calls: int = 20) -> list[dict]:
    """Per-call time of every kernel of ``fn(*args)``, longest first.

    Args:
      fn: a function of JAX arrays (jitted or not); it is called once before the trace so that
        compilation is not in it.
      *args: its arguments.
      calls: how many traced calls the durations are averaged over.

    Returns:
      ``[{"name", "count", "us"}]``: the event name, how many times it ran per call, and its
      summed duration per call in microseconds, longest first.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from credax.bench.profile import kernel_profile
      >>> rows = kernel_profile(jax.jit(lambda x: jnp.sin(x) * 2 + 1), jnp.ones((256, 256)))
      >>> rows[0]["count"], rows[0]["us"] > 0
      (1.0, True)
    """
    import jax

    if calls < 1:
        raise ValueError(f"`calls` must be >= 1; got {calls}.")
    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory(prefix="credax-profile-") as log_dir:
        jax.profiler.start_trace(log_dir, create_perfetto_trace=True)
        try:
            for _ in range(calls):
                jax.block_until_ready(fn(*args))
        finally:
            jax.profiler.stop_trace()
        paths = glob.glob(f"{log_dir}/**/*.trace.json.gz", recursive=True)
        if not paths:
            raise RuntimeError("jax.profiler wrote no perfetto trace (*.trace.json.gz).")
        with gzip.open(paths[0]) as f:
            events = json.load(f)["traceEvents"]
    total: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for e in events:
        name = e.get("name", "")
        if e.get("ph") != "X" or not name or name.startswith(_RUNTIME_PREFIXES):
            continue
        total[name][0] += 1
        total[name][1] += float(e.get("dur", 0.0))
    rows = [{"name": k, "count": n / calls, "us": us / calls} for k, (n, us) in total.items()]
    return sorted(rows, key=lambda r: -r["us"])

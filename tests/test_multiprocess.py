"""credax across hosts: two local processes under ``jax.distributed`` give the one-process results.

Two CPU processes (4 devices each via ``--xla_force_host_platform_device_count=4``, gloo CPU
collectives, coordinator on 127.0.0.1 at a free port) shard one global batch of 32 rows over the 8
global devices so that every prompt has rollouts on both processes, and compute GRPO, TCPO, TRIAGE
(whitened over the batch), the policy loss with a global normalizer, and GRPO / TCPO under the
contiguous layout promise with one block spanning both processes. They must equal the same
computation in this one process on unsharded arrays: exactly for the TCPO credit (maxima,
selections, leave-one-out means of the same members) and up to float32 rounding (rtol 1e-6,
atol 1e-6) for sums whose order the cross-process reduction may change.

The recipe of docs/guides/reproducibility.md (issue #38): the same computations with the global
batch placed replicated on all 8 devices of both processes before the call must give, in each
process, the one-process result bit for bit.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import credax

sys.path.insert(0, str(Path(__file__).resolve().parent))
import multiprocess_worker as worker  # noqa: E402

WORKER = Path(__file__).resolve().parent / "multiprocess_worker.py"
TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_processes(out_dir: Path) -> tuple[dict, list[dict], dict]:
    """The two workers' results: the batch-sharded outputs (gathered), each process's replicated
    outputs, and the one-process outputs computed here."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
           # keeps the suite's XLA_FLAGS (conftest.py)
           "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"}
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(i), str(port), str(out_dir)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=TIMEOUT_S)
            logs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert all(p.returncode == 0 for p in procs), "\n---\n".join(log[-3000:] for log in logs)
    got = dict(np.load(out_dir / "multiprocess.npz"))
    replicated = [dict(np.load(out_dir / f"replicated_{i}.npz")) for i in range(2)]
    data = worker.global_batch()
    arrays = {k: jnp.asarray(v) for k, v in data.items()}
    arrays["normalizer"] = float((data["token_turn"] >= 0).sum())
    want = {k: np.asarray(v) for k, v in worker.compute(credax, arrays).items()}
    return got, replicated, want


def test_two_processes_equal_one_process(tmp_path):
    got, replicated, want = run_two_processes(tmp_path)
    data = worker.global_batch()
    arrays = {k: jnp.asarray(v) for k, v in data.items()}
    assert set(got) == set(want)
    np.testing.assert_array_equal(got["tcpo_credit"], want["tcpo_credit"])
    for name in ("grpo", "tcpo", "triage", "loss", "grpo_contiguous", "tcpo_contiguous"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6, err_msg=name)
    # the layout promise (one block of every row) against the general path, in one process
    every = credax.groups(jnp.zeros(worker.BATCH, jnp.int32))
    np.testing.assert_allclose(want["grpo_contiguous"],
                               credax.grpo_advantages(arrays["rewards"], every), rtol=2e-6, atol=1e-6)
    # The recipe: replicated inputs give the one-process bits in both processes, every output.
    for i, copy in enumerate(replicated):
        assert set(copy) == set(want)
        for name in want:
            np.testing.assert_array_equal(copy[name], want[name], err_msg=f"process {i}: {name}")
            assert copy[name].tobytes() == want[name].tobytes(), (i, name)  # -0.0, NaN bits
    # The contrast: batch-sharded, some output differs from the one-process result in the last
    # bits (else the check above would not show that the recipe does anything here).
    assert any(got[name].tobytes() != want[name].tobytes() for name in want)
    # The batch really mixes prompts across the two processes (rows 0-15 vs 16-31).
    assert set(data["ids"][:16]) == set(data["ids"][16:])
    assert np.any(want["grpo"] != 0) and np.any(want["tcpo"] != 0)


if __name__ == "__main__":
    # The figures of docs/guides/reproducibility.md: PYTHONPATH=src python tests/test_multiprocess.py
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        got, replicated, want = run_two_processes(Path(tmp))
    print("| output | batch-sharded vs one process | replicated, process 0 / 1 |")
    print("|---|---|---|")
    for name, w in want.items():
        d = np.max(np.abs(got[name].astype(np.float64) - w.astype(np.float64)))
        rep = " / ".join("bitwise" if c[name].tobytes() == w.tobytes() else "differs"
                         for c in replicated)
        print(f"| `{name}` | {'bitwise' if got[name].tobytes() == w.tobytes() else f'{d:.1e}'} "
              f"| {rep} |")

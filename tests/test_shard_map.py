"""Every public function inside ``jax.shard_map`` (issue #46; #44 item 4).

JAX fixes its device count at start-up, so tests/shard_map_every_function.py runs in a subprocess
with 8 forced CPU devices and calls every entry of the method registry inside ``jax.shard_map``
on meshes of 4 and 8 devices, whole prompt groups on each shard (groups of 1 to 6 rows, rows
shuffled within the shard, one shard whose rows are all masked):

* a group-local entry (``group_local=True``) gives the unsharded call's rows, bit for bit where
  docs/guides/reproducibility.md's per-group table says ``bitwise``, else within twice its bound;
* a batch statistic that takes ``axis_name`` (REINFORCE++ and -baseline whitening, GPG's count,
  ``aggregate``, the policy losses' normaliser) called with ``axis_name="b"`` gives the unsharded
  call's outputs to float32 rounding, the all-masked shard included;
* any other batch statistic computes its shard's own statistic: the call on the shard's rows.

Two more subprocesses: JAX ids densified inside ``shard_map`` (the hashing loop's carry, #44
item 4) and a fresh process whose first credax call is made inside ``shard_map``.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from credax.testing import calls

from .test_streaming import documented

SCRIPT = pathlib.Path(__file__).with_name("shard_map_every_function.py")
ROUNDING = 1e-5  # float32 rounding of O(1) outputs summed in another order (measured: <= 2.3e-6)


def on_eight_devices(*args, timeout=900) -> str:
    root = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, cwd=root,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _axis_entries() -> tuple[str, ...]:
    source = SCRIPT.read_text()
    start = source.index("AXIS = (")
    return eval(source[start + len("AXIS = "):source.index(")", start) + 1])  # noqa: S307


AXIS = _axis_entries()


@pytest.fixture(scope="module")
def sweep() -> dict[tuple[int, str], dict]:
    out = on_eight_devices()
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {(r["mesh"], r["label"]): r for r in rows}


def test_the_axis_entries_are_batch_statistics_of_the_registry():
    assert set(AXIS) <= set(calls.REGISTRY)
    assert all(calls.REGISTRY[label].group_local is False for label in AXIS)


@pytest.mark.parametrize("mesh", [4, 8])
@pytest.mark.parametrize("label", list(calls.REGISTRY))
def test_inside_shard_map(sweep, mesh, label):
    result = sweep[(mesh, label)]
    assert result["error"] is None, f"{label} on {mesh} devices: {result['error']}"
    diff = result["diff"]
    entry = calls.REGISTRY[label]
    if entry.group_local:
        claim = documented()[label][1]
        if claim == "bitwise":
            assert diff == 0.0, f"{label}: the guide says bitwise; {diff} inside shard_map"
        else:
            bound = float(claim.removeprefix("≤ "))
            assert diff <= 2 * bound, f"{label}: {diff} against the guide's {claim}"
    else:
        assert result["kind"] == ("axis" if label in AXIS else "shard")
        assert diff <= ROUNDING, f"{label} ({result['kind']}): {diff}"


def test_jax_ids_inside_shard_map():
    # Before the fix: "while_loop body function carry input and carry output must have equal
    # types" from the hashing loop of credax.groups (its seed did not vary over the mesh axis).
    out = on_eight_devices("ids", timeout=300)
    assert "IDS OK" in out, out


def test_first_call_of_a_process_inside_shard_map():
    # (at a3e9449 the entry built its table of known types under the trace: a bare AssertionError)
    out = on_eight_devices("first", timeout=300)
    assert "FIRST OK" in out, out

"""The vocabulary-parallel fused head (issue #46): ``vocab_axis=`` of
``token_logprobs_from_hidden``, ``policy_loss_from_hidden`` and ``credax.nnx``, and the
unembedding sharded over the vocabulary on an Explicit mesh under ``jit``.

tests/vocab_parallel_check.py runs in a subprocess with 8 forced CPU devices (JAX fixes the count
at start-up): with the unembedding's vocabulary split over 4 or 8 devices inside ``jax.shard_map``,
the log-probs, entropies, loss and metrics, and the gradients w.r.t. the hidden states, the
device's unembedding slice and the temperature equal the single-device call to float32 rounding
(relative to the output's magnitude); chunked with a padded last chunk, with temperature and
entropy, one row all masked; rows over a second axis with the loss's global normaliser; rows
alone over an axis (the replicated unembedding's gradient summed over the shards); the NNX
wrapper (fused and not); and the compiled program holds no all-gather. Before this issue the
Explicit-mesh ``jit`` call all-gathered the ``[D, V]`` unembedding (``policy_loss_from_hidden``)
or failed with a ``ShardingTypeError`` (``token_logprobs_from_hidden``).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).with_name("vocab_parallel_check.py")
ROUNDING = 2e-6  # relative; measured <= 9.5e-7
CHECKS = ["logprobs n=4 chunk=None T=None entropy=False", "logprobs n=4 chunk=4 T=None entropy=False",
          "logprobs n=4 chunk=3 T=1.3 entropy=True", "logprobs n=8 chunk=4 T=0.7 entropy=True",
          "loss n=4 chunk=4 T=1.0 agg=token-mean ratio=token surrogate=clip",
          "loss n=8 chunk=3 T=0.7 agg=seq-mean-token-mean ratio=token surrogate=clip",
          "loss n=4 chunk=3 T=1.0 agg=seq-mean-token-sum ratio=sequence surrogate=clip",
          "loss n=4 chunk=4 T=0.7 agg=token-mean ratio=token surrogate=vespo",
          "loss data x vocab", "loss rows only", "nnx policy_loss_fn", "explicit mesh jit"]


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    root = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(SCRIPT)], env=env, cwd=root, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["check"]: r for r in rows}


def test_every_check_ran(results):
    assert sorted(results) == sorted(CHECKS)


@pytest.mark.parametrize("check", CHECKS)
def test_equals_the_single_device_call(results, check):
    r = results[check]
    assert "error" not in r, r
    assert r["value"] <= ROUNDING, r
    assert max(r["grads"]) <= ROUNDING, r


@pytest.mark.parametrize("check", CHECKS)
def test_no_all_gather_in_the_compiled_program(results, check):
    assert results[check].get("gathers") == 0, results[check]


def test_vocab_axis_must_be_an_axis_name():
    import jax.numpy as jnp

    import credax

    with pytest.raises(TypeError, match="vocab_axis"):
        credax.token_logprobs_from_hidden(jnp.zeros((1, 2, 3)), jnp.zeros((3, 4)),
                                          jnp.zeros((1, 2), jnp.int32), vocab_axis=3)


@pytest.mark.parametrize("call", ["logprobs", "loss", "reinforce", "aggregate"])
def test_an_axis_outside_shard_map_is_named(call):
    import jax.numpy as jnp

    import credax

    h, w, tok = jnp.zeros((1, 2, 3)), jnp.zeros((3, 4)), jnp.zeros((1, 2), jnp.int32)
    mask, old = jnp.ones((1, 2), bool), jnp.zeros((1, 2))
    calls = {
        "logprobs": lambda: credax.token_logprobs_from_hidden(h, w, tok, vocab_axis="v"),
        "loss": lambda: credax.policy_loss_from_hidden(h, w, tok, old, jnp.ones(1), mask,
                                                       vocab_axis="v"),
        "reinforce": lambda: credax.reinforce_pp_advantages(old, mask, axis_name="data"),
        "aggregate": lambda: credax.aggregate(old, mask, axis_name="data"),
    }
    with pytest.raises(ValueError, match="names no mesh axis bound here"):
        calls[call]()


def test_the_benchmark_measures_per_device_memory_of_the_three_paths():
    # benchmarks/vocab_parallel.py at toy sizes, memory only (XLA's memory analysis: exact): the
    # vocabulary-parallel path holds less than half the single device's arguments and temporaries
    # on 8 devices, the gathered path all-gathers the unembedding and holds more than one device.
    root = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root / "src"), str(root),
                                                      env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.vocab_parallel", "--no-time",
                           "--vocab", "8192", "--tokens", "2,64", "--dim", "64", "--chunk", "16"],
                          env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {cells[1]: [float(c) for c in cells[2:6]] for line in proc.stdout.splitlines()
            if line.startswith("| 8,192") for cells in [[c.strip() for c in line.split("|")[1:-1]]]}
    assert set(rows) == {"vocab-parallel", "gathered (all-gather)", "single"}, proc.stdout
    total = {name: r[0] + r[2] for name, r in rows.items()}  # arguments + temporaries, MiB
    assert total["vocab-parallel"] < total["single"] / 2, rows
    assert total["gathered (all-gather)"] > total["single"], rows

"""The speed benchmark cannot rot: ``python -m credax.bench --quick`` runs here (a smoke test, not
a timed test: nothing asserts a speed), and its peers match hand-worked cases.

The quick run goes through a subprocess, exactly as a user (or ``make bench``) calls it, so the
benchmark's own jax configuration (platform, thread count) is not mixed with the test suite's.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from credax.bench import peers
from credax.bench.cases import make_config, make_token_turn, make_turns
from credax.bench.harness import Impl, Runner

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [sys.executable, "-m", "credax.bench", "--quick", "--platform", "cpu", "--threads", "1",
         "--out", str(out)],
        cwd=out, capture_output=True, text=True, timeout=1500,  # an unrelated folder
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    data = json.loads((out / "speed-cpu.json").read_text())
    return out, data, proc.stdout


def test_quick_run_writes_json_table_and_plot(quick_run):
    out, data, stdout = quick_run
    assert (out / "speed-cpu.png").stat().st_size > 10_000
    md = (out / "speed-cpu.md").read_text()
    assert "GRPO advantages" in md
    assert "ratio credax_groups/torch_vectorized" in stdout or not data["meta"]["machine"]["torch"]
    meta = data["meta"]
    assert meta["preset"] == "quick" and meta["device"] == "cpu" and meta["threads"] == 1
    machine = meta["machine"]
    assert machine["nproc"] >= 1 and machine["cpu_model"] and machine["jax"]
    assert data["failures"] == []


def test_every_timed_implementation_was_checked_first(quick_run):
    _, data, _ = quick_run
    cases = {rec["case"] for rec in data["cases"]}
    assert "grpo" in cases and "triage_broadcast" in cases
    for rec in data["cases"]:
        events = rec["events"]
        assert events.count("time") == 1, rec["case"]
        start = events.index("time")
        assert all(e.startswith("check:") for e in events[:start])
        checked = {e.split(":", 1)[1] for e in events[:start]}
        assert rec["results"], rec["case"]
        for name, result in rec["results"].items():
            assert name in checked, (rec["case"], name)
            agreement = rec["agreement"][name]
            assert agreement["ok"] is True and agreement["max_abs_err"] <= 1e-3
            assert result["reps"] >= 7 or any(n.startswith(name) for n in rec["notes"])
            assert len(result["samples_s"]) == result["reps"]
            assert 0 < result["min_s"] <= result["median_s"] <= result["max_s"]
        for ratio in rec["ratios"].values():
            assert ratio["median"] > 0
            assert ratio["min"] <= ratio["q25"] <= ratio["median"] <= ratio["q75"] <= ratio["max"]


def test_quick_run_covers_every_entry_point(quick_run):
    _, data, _ = quick_run
    import credax

    names = [r["fn"] for r in data["sweep"]]
    public = {n for n in credax.__all__ if callable(getattr(credax, n))
              and not isinstance(getattr(credax, n), type)}
    covered = {n.split(" (")[0] for n in names} | set(data["not_timed"])
    assert public <= covered, f"add a sweep entry in credax/bench/cases.py for {public - covered}"
    for r in data["sweep"]:
        assert isinstance(r["recompiled"], bool)
        assert r["compiles_on_second_call"] == 0, r
        assert r["bytes_moved"] > 0 and r["steady_median_s"] > 0
        if r["cache_size_after_first"] is not None:
            assert r["compile_total_s"] > 0 and r["cache_size_after_first"] >= 1
    tcpo = next(r for r in data["sweep"] if r["fn"] == "tcpo_advantages")
    assert tcpo["compiles_on_changed_hyperparameter"] == 0
    assert tcpo["compiled"]["output_size_in_bytes"] > 0
    # Two fresh processes shared a persistent compilation cache: the first wrote its programs.
    pc = tcpo["persistent_cache"]
    assert pc["cache_entries"] >= 1 and pc["cold_first_call_s"] > 0 and pc["warm_first_call_s"] > 0
    cb = data["copy_bandwidth"]
    assert cb["bytes_per_s"] > 0 and cb["bytes_moved"] == 2 * cb["mib"] * 2**20
    for rec in data["cases"]:
        for r in rec["results"].values():
            if "bytes_moved" in r:
                assert r["roofline_fraction"] == pytest.approx(
                    r["bytes_moved"] / r["median_s"] / cb["bytes_per_s"])
    # credax.bench carries no goals of its own; the project's targets read the same records
    assert data["targets"] == [] and "Targets" not in (quick_run[0] / "speed-cpu.md").read_text()
    from benchmarks.targets import evaluate_targets

    compile_target = next(t for t in evaluate_targets(data["cases"], data["sweep"])
                          if t["target"] == "compile of tcpo_advantages (trace + lower + XLA), seconds")
    assert compile_target["measured"] == tcpo["compile_total_s"]


def test_lm_head_case_checks_values_and_gradients_then_reports_floor_and_memory(quick_run):
    # the tiny LM-head case of the quick preset: every implementation matched the float64 loss
    # and both gradients before it was timed; the floor's GEMM rate and the memory per chunk of
    # logits are reported
    _, data, _ = quick_run
    (rec,) = [r for r in data["cases"] if r["case"] == "lm_head"]
    b, t, d, v, c = (rec["params"][k] for k in ("B", "T", "D", "V", "chunk"))
    expected = {"credax_chunked", "naive_jax", "credax_fused", "matmul_floor"}
    if data["meta"]["machine"]["torch"]:
        expected.add("torch_chunked")
    assert set(rec["results"]) == expected
    assert all(rec["agreement"][n]["ok"] for n in expected)
    assert rec["gemm"]["flops"] == 6 * b * t * d * v and rec["gemm"]["gflop_per_s"] > 0
    assert rec["chunk_bytes"] == b * c * v * 4
    mem = rec["memory"]
    # the naive program holds the whole logits at least once: T / c chunks or more
    assert mem["naive_jax"]["temp_chunks"] >= t / c
    assert mem["credax_chunked"]["temp_chunks"] < mem["naive_jax"]["temp_chunks"]
    assert mem["credax_nnx"]["temp_bytes"] > 0 and mem["credax_nnx_fused"]["temp_bytes"] > 0
    assert mem["credax_fused"]["temp_chunks"] < mem["naive_jax"]["temp_chunks"]
    ratios = {"credax_chunked/matmul_floor", "credax_fused/matmul_floor"}
    if data["meta"]["machine"]["torch"]:
        ratios.add("torch_chunked/credax_fused")
    assert ratios <= set(rec["ratios"])
    md = (quick_run[0] / "speed-cpu.md").read_text()
    assert "LM head" in md and "GFLOP/s measured in this run" in md


def test_threads_take_effect_although_credax_imports_jax_first(quick_run):
    # `python -m credax.bench` imports credax, which imports jax, before the CLI runs: --threads
    # was skipped whenever jax was imported (always), so the process kept every CPU.
    if (os.cpu_count() or 1) < 2 or not hasattr(os, "sched_getaffinity"):
        pytest.skip("needs two CPUs and sched_getaffinity")
    assert quick_run[1]["meta"]["machine"]["sched_affinity"] == 1


def _bench(*argv, code=None):
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "credax.bench", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_platform_takes_effect_or_fails_clearly(tmp_path):
    # --platform tpu on a machine without a TPU: JAX cannot start that backend. It used to be
    # ignored (JAX_PLATFORMS was set after jax had read it) and the run went on on the CPU.
    proc = _bench("--quick", "--platform", "tpu", "--only", "grpo", "--no-torch", "--out",
                  str(tmp_path))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--platform tpu" in proc.stderr and not (tmp_path / "speed-cpu.json").exists()


def test_settings_after_jax_started_are_refused():
    # main() called in a process whose JAX already runs: --threads and --platform can no longer
    # change anything, so the call stops with an error instead of timing with other settings.
    code = ("import sys, jax; jax.devices()\n"
            "from credax.bench import main\n"
            "sys.exit(main(['--quick', '--only', 'grpo', '--no-torch', *sys.argv[1:]]))")
    for extra in (["--platform", "gpu"], ["--threads", "1"]):
        if extra[0] == "--threads" and len(os.sched_getaffinity(0)) < 2:
            continue
        proc = subprocess.run([sys.executable, "-c", code, *extra], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "already started" in proc.stderr and extra[0] in proc.stderr


@pytest.mark.parametrize("argv, flag", [
    (["--batch", "0"], "--batch"), (["--batch", "12"], "--batch"), (["--turns", "-1"], "--turns"),
    (["--tokens", "0"], "--tokens"), (["--token-batch", "0"], "--token-batch"),
    (["--group-size", "0"], "--group-size"), (["--threads", "0"], "--threads"),
    (["--threads", "100000"], "--threads"),
])
def test_bench_cli_validates_sizes(argv, flag, capsys):
    # each of these used to run (a zero or negative size was ignored or fed to the cases) or die
    # with a traceback from make_config; the parser now refuses them, naming the flag
    from credax.bench.__main__ import parse_args

    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2 and flag in capsys.readouterr().err


def test_bench_cli_refuses_a_bad_size_before_starting():
    proc = _bench("--batch", "12")
    assert proc.returncode == 2 and "--batch 12 must be a multiple" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_import_credax_does_not_import_the_benchmark():
    code = "import sys, credax; assert 'credax.bench' not in sys.modules; print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


def test_profile_reports_the_kernels_of_a_steady_call(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "credax.bench", "--quick", "--platform", "cpu", "--only", "sweep",
         "--entries", "grpo_advantages (contiguous)", "--profile", "--no-torch", "--out",
         str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (rec,) = json.loads((tmp_path / "speed-cpu.json").read_text())["sweep"]
    kernels = rec["kernels"]
    # XLA's fused kernels are named "*fusion*"; the runtime's own events are left out
    assert any("fusion" in k["name"] for k in kernels), kernels
    assert not any(k["name"].startswith(("$", "ThunkExecutor", "PjitFunction")) for k in kernels)
    assert all(k["us"] >= 0 and k["count"] > 0 for k in kernels)
    assert [k["us"] for k in kernels] == sorted((k["us"] for k in kernels), reverse=True)
    assert "Time per kernel" in (tmp_path / "speed-cpu.md").read_text()


def test_bench_cli_rejects_bad_arguments():
    for bad in (["--reps", "3"], ["--only", "nope"]):
        proc = subprocess.run([sys.executable, "-m", "credax.bench", *bad], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2 and "error" in proc.stderr, proc.stderr
    # `make bench-gpu` on a machine without a GPU stops before timing anything
    proc = subprocess.run([sys.executable, "-m", "credax.bench", "--platform", "cpu", "--require",
                           "gpu"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--require gpu" in proc.stdout, proc.stdout + proc.stderr


def test_gpu_host_script_records_the_host_and_runs_the_benchmark_from_src(tmp_path):
    # benchmarks/gpu_host.sh is `make bench-gpu` for a GPU host that cannot install anything.
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {**os.environ, "HOST_PY": sys.executable}
    refused = tmp_path / "refused"
    proc = subprocess.run(["bash", "benchmarks/gpu_host.sh", str(refused)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    # no GPU here: it records the host, then stops before timing anything
    assert proc.returncode == 2 and "--require gpu" in proc.stdout, proc.stdout + proc.stderr
    host = (refused / "host.txt").read_text()
    assert f"from {root / 'src' / 'credax'}" in host and "\njax 0." in host, host
    assert not (refused / "speed-gpu.json").exists()
    assert "skipped" in (refused / "nnx_step.log").read_text()
    assert "skipped" in (refused / "vocab_parallel.log").read_text()
    # the same script end to end on the CPU at toy sizes (PRESET / REQUIRE exist for this check)
    out = tmp_path / "ran"
    proc = subprocess.run(["bash", "benchmarks/gpu_host.sh", str(out), "--only", "grpo",
                           "--no-torch"], cwd=root, env={**env, "PRESET": "quick", "REQUIRE": "cpu"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    data = json.loads((out / "speed-cpu.json").read_text())
    assert data["failures"] == [] and [r["case"] for r in data["cases"]] == ["grpo"] * 2
    assert (out / "bench.log").read_text().startswith("credax speed benchmark")
    # then the NNX step's credit share (the quick head size here), with its conditions
    nnx_log = (out / "nnx_step.log").read_text()
    assert "credit:" in nnx_log and "conditions:" in nnx_log, nnx_log
    # the vocabulary-parallel head needs two devices: one CPU device here, skipped and said so
    assert "skipped (1 cpu device(s); needs 2)" in (out / "vocab_parallel.log").read_text()


def test_runner_does_not_time_a_wrong_implementation():
    cfg = make_config("quick", "cpu", reps=7)
    runner = Runner(cfg)
    reference = np.arange(4.0)
    impls = [
        Impl("right", lambda: np.arange(4.0), "right", np.asarray),
        Impl("wrong", lambda: np.arange(4.0) + 0.01, "off by 0.01", np.asarray),
    ]
    rec = runner.run_case("toy", {"B": 4}, 4, "B", reference, impls, [("right", "wrong")])
    assert list(rec["results"]) == ["right"]
    assert rec["agreement"]["wrong"]["ok"] is False
    assert rec["ratios"] == {}
    assert len(runner.failures) == 1 and "wrong" in runner.failures[0]


def test_reference_grpo_hand_worked():
    # ids 3: {1, 0}: mean .5, unbiased std sqrt(.5) -> ±.5/.70711 = ±.70711 (eps 0);
    # ids 9: {.35, .35} constant -> 0; id 4 singleton keeps its raw score (verl) -> 2.
    r = np.array([1.0, 0.0, 0.35, 0.35, 2.0])
    ids = np.array([3, 3, 9, 9, 4])
    expected = [0.70710678, -0.70710678, 0.0, 0.0, 2.0]
    np.testing.assert_allclose(peers.reference_grpo(r, ids, eps=0.0), expected, atol=1e-8)
    np.testing.assert_allclose(peers.numpy_grpo(r, ids, eps=1e-6), expected, atol=1e-5)


# Two trajectories of one prompt, two turns, τ = 1:
#   row 0: s = (0, 1): m = (0, 0), Δ = (0, 1), retro = (0, 1); eligible = (T, F); u = (1, 1)
#   row 1: s = (0, 0): m = (0, 0), Δ = (0, 0), retro = (0, 0); eligible = (T, T); u = (0, 0)
#   turn 0: both eligible, H = (1 - 0, 0 - 1) = (1, -1); credit (1, -1)
#   turn 1: row 1 eligible alone, no peer -> H = 0; credit (1, 0)
#   z per turn (population variance, eps 1e-6 inside the sqrt): turn 0 ±1/sqrt(1 + 1e-6),
#   turn 1 ±.5/sqrt(.25 + 1e-6), times γ^1 = .5.
TCPO_S = np.array([[0.0, 1.0], [0.0, 0.0]])
TCPO_EXPECTED = np.array([
    [1 / math.sqrt(1 + 1e-6), 0.5 * 0.5 / math.sqrt(0.25 + 1e-6)],
    [-1 / math.sqrt(1 + 1e-6), -0.5 * 0.5 / math.sqrt(0.25 + 1e-6)],
])


def test_reference_tcpo_hand_worked():
    mask = np.ones((2, 2), bool)
    got = peers.reference_tcpo(TCPO_S, mask, np.array([5, 5]), gamma=0.5, eps=1e-6)
    np.testing.assert_allclose(got, TCPO_EXPECTED, rtol=1e-12)


def test_reference_lm_head_gradients_equal_finite_differences():
    # The hand-written float64 gradient of the loss from hidden states against central
    # differences of the reference's own loss value (an independent check of the algebra): one
    # row with a ratio outside the clip range (its gradient is 0), masked positions (gradient 0).
    rng = np.random.default_rng(5)
    b, t, d, v = 2, 5, 3, 7
    h = rng.standard_normal((b, t, d))
    w = rng.standard_normal((d, v))
    tok = rng.integers(0, v, (b, t))
    mask = np.ones((b, t), bool)
    mask[1, 3:] = False
    adv = np.array([0.7, -1.3])
    old = peers.reference_lm_head_logp(h, w, tok) + 0.1 * rng.standard_normal((b, t))
    old[0, 1] -= 1.0  # ratio e^1 > 1.2 with A > 0: the clipped term binds
    loss, dh, dw = peers.reference_lm_head_loss(h, w, tok, old, adv, mask, rows=3)
    f = lambda hh, ww: peers.reference_lm_head_loss(hh, ww, tok, old, adv, mask)[0]
    eps = 1e-6
    num_h, num_w = np.zeros_like(h), np.zeros_like(w)
    for idx in np.ndindex(h.shape):
        e = np.zeros_like(h)
        e[idx] = eps
        num_h[idx] = (f(h + e, w) - f(h - e, w)) / (2 * eps)
    for idx in np.ndindex(w.shape):
        e = np.zeros_like(w)
        e[idx] = eps
        num_w[idx] = (f(h, w + e) - f(h, w - e)) / (2 * eps)
    np.testing.assert_allclose(dh, num_h, atol=1e-8)
    np.testing.assert_allclose(dw, num_w, atol=1e-8)
    assert np.all(dh[0, 1] == 0) and np.all(dh[1, 3:] == 0)
    assert loss == pytest.approx(peers.reference_policy_loss(
        peers.reference_lm_head_logp(h, w, tok), old, np.repeat(adv, t).reshape(b, t), mask))


def test_reference_broadcast_and_triage_hand_worked():
    # roles D (+1), R (-.5), unlabeled; λ = .2: .7 + .2, .7 - .1, .7; padded turn -> 0
    turn = peers.reference_triage(
        np.array([0.7]), np.array([[0, 3, -1, 1]]), np.array([[1, 1, 1, 0]], bool), lam=0.2,
        constants=(1.0, 0.5, -0.1, -0.5),
    )
    np.testing.assert_allclose(turn, [[0.9, 0.6, 0.7, 0.0]], atol=1e-12)
    tokens = peers.reference_broadcast(turn, np.array([[-1, 0, 0, -1, 1, 2, -1]]))
    np.testing.assert_allclose(tokens, [[0, 0.9, 0.9, 0, 0.6, 0.7, 0]], atol=1e-12)


def test_token_turn_generator_is_consistent():
    rng = np.random.default_rng(0)
    _, turn_mask = make_turns(rng, 6, 5)
    token_turn = make_token_turn(rng, turn_mask, 200)
    assert token_turn.shape == (6, 200) and token_turn.dtype == np.int32
    for b in range(6):
        used = set(token_turn[b][token_turn[b] >= 0].tolist())
        assert used <= set(np.flatnonzero(turn_mask[b]).tolist())
        assert np.all(token_turn[b, : 200 // 8] == -1)  # the prompt gets no credit


torch = peers.load_torch()


@pytest.mark.skipif(torch is None, reason="torch (the bench extra) is not installed")
def test_torch_peers_match_references():
    rng = np.random.default_rng(3)
    ids = np.repeat(np.array([11, -4, 7, 2**20]), 4)
    perm = rng.permutation(16)
    ids = ids[perm]
    r = rng.random(16).astype(np.float32)
    ref = peers.reference_grpo(r, ids, eps=1e-6)
    rt, it = torch.as_tensor(r), torch.as_tensor(ids.astype(np.int64))
    np.testing.assert_allclose(peers.torch_grpo_vectorized(rt, it).numpy(), ref, atol=1e-5)
    np.testing.assert_allclose(peers.torch_grpo_loop(rt, [str(i) for i in ids]).numpy(), ref,
                               atol=1e-5)
    order = np.argsort(ids, kind="stable")
    sorted_out = peers.torch_grpo_reshape(torch.as_tensor(r[order]), 4).numpy()
    np.testing.assert_allclose(sorted_out, ref[order], atol=1e-5)

    got = peers.torch_tcpo_loop(torch.as_tensor(TCPO_S), torch.ones(2, 2, dtype=torch.bool),
                                torch.tensor([5, 5]), gamma=0.5, eps=1e-6)
    np.testing.assert_allclose(got.numpy(), TCPO_EXPECTED, rtol=1e-12)

    scores, turn_mask = make_turns(rng, 32, 6)
    tids = np.repeat(np.arange(4) * 3 - 5, 8)[rng.permutation(32)]
    ref = peers.reference_tcpo(scores, turn_mask, tids, gamma=0.9)
    got = peers.torch_tcpo_loop(torch.as_tensor(scores.astype(np.float64)),
                                torch.as_tensor(turn_mask), torch.as_tensor(tids), gamma=0.9)
    np.testing.assert_allclose(got.numpy(), ref, atol=1e-9)

    # the vectorised peer: the hand-worked case (one block of 2), then the random rows sorted
    # into blocks of 8 (the trainer layout)
    # the chunked LM-head loss, 11 tokens in chunks of 4 (the last one short), nn.Linear layout
    b, t, d, v = 1, 11, 4, 9
    h = rng.standard_normal((b, t, d))
    w = rng.standard_normal((d, v))
    tok = rng.integers(0, v, (b, t))
    mask = np.arange(t)[None] >= 2
    adv = np.array([0.8])
    old = peers.reference_lm_head_logp(h, w, tok) + 0.2 * rng.standard_normal((b, t))
    loss, dh, dw = peers.reference_lm_head_loss(h, w, tok, old, adv, mask)
    h_t = torch.as_tensor(h.reshape(t, d)).requires_grad_(True)
    w_t = torch.as_tensor(np.ascontiguousarray(w.T)).requires_grad_(True)
    got = peers.torch_lm_head_chunked(h_t, w_t, torch.as_tensor(tok.reshape(-1)),
                                      torch.as_tensor(old.reshape(-1)),
                                      torch.full((t,), 0.8, dtype=torch.float64),
                                      torch.as_tensor(mask.reshape(-1).astype(np.float64)), 4)
    # the peer computes its logits in float32 (`.float()`, as Liger does), whatever the input
    assert float(got[0]) == pytest.approx(loss, abs=1e-6)
    np.testing.assert_allclose(got[1].numpy(), dh.reshape(t, d), atol=1e-6)
    np.testing.assert_allclose(got[2].numpy().T, dw, atol=1e-6)

    got = peers.torch_tcpo_reshape(torch.as_tensor(TCPO_S), torch.ones(2, 2, dtype=torch.bool), 2,
                                   gamma=0.5, eps=1e-6)
    np.testing.assert_allclose(got.numpy(), TCPO_EXPECTED, rtol=1e-12)
    order = np.argsort(tids, kind="stable")
    got = peers.torch_tcpo_reshape(torch.as_tensor(scores[order].astype(np.float64)),
                                   torch.as_tensor(turn_mask[order]), 8, gamma=0.9)
    np.testing.assert_allclose(got.numpy(), ref[order], atol=1e-9)


@pytest.mark.parametrize("preset", ["quick", "default", "targets", "gpu"])
def test_every_preset_has_lm_head_shapes_the_case_accepts(preset):
    # the case walks whole chunks (T a multiple of chunk_size); the CPU and GPU presets measure
    # both vocabulary sizes the targets are read at (`targets`: the project's, benchmarks/targets.py)
    from benchmarks.targets import PRESETS

    base, fields, _ = PRESETS.get(preset, (preset, None, ""))
    shapes = make_config(base, "cpu", fields=fields).lm_head
    assert shapes and all(t % c == 0 for _, t, _, _, c in shapes)
    if preset != "quick":
        assert {v for *_, v, _ in shapes} == {32768, 131072}


def test_main_in_process_leaves_the_callers_heap_unfrozen(tmp_path, capsys):
    # The benchmark freezes its start-up heap (gc.freeze) so that its many gc.collect() calls are
    # cheap; called as a function (credax.bench.main) it must give the caller's process back as it
    # was, with nothing left frozen.
    import gc

    import credax.bench

    assert gc.get_freeze_count() == 0
    assert credax.bench.main(["--quick", "--only", "grpo", "--no-torch", "--out", str(tmp_path)]) == 0
    assert gc.get_freeze_count() == 0
    assert (tmp_path / "speed-cpu.json").exists()


def test_platform_without_its_device_names_it_and_how_to_install_jax(tmp_path):
    # Issue 44 item 11: --platform cuda on a machine without a GPU ended in JAX's bare
    # AssertionError (a traceback, exit 1). Now: exit 2, the platform named, the install line.
    import jax
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("this machine has a GPU")
    proc = _bench("--quick", "--platform", "cuda", "--only", "grpo", "--no-torch", "--out",
                  str(tmp_path))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--platform cuda" in proc.stderr and "jax[cuda12]" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_report_headings_state_the_run_sizes_and_ratios_read_one_way():
    # Issue 44 item 11: the headings said "groups of 8" and "K = 16" whatever the run's sizes
    # were, and ratio columns mixed credax/torch with torch/credax. A committed run's JSON with
    # its sizes changed: the headings follow, and every ratio has credax (or a floor) second.
    from credax.bench import report
    data = json.loads((ROOT / "benchmarks" / "results" / "speed-cpu.json").read_text())
    for rec in data["cases"]:
        if "group_size" in rec["params"]:
            rec["params"]["group_size"] = 4
        if rec["case"] == "triage_broadcast":
            rec["params"]["K"] = 8
    md = report.render_markdown(data)
    headings = [line for line in md.splitlines() if line.startswith("**")]
    assert not [h for h in headings if "groups of 8" in h], headings
    assert "**GRPO advantages, shuffled sparse int32 ids (groups of 4)**" in md
    assert "**TRIAGE turn advantages + broadcast to tokens (K = 8)**" in md
    assert report.RATIO_HEADING in md
    grpo = next(r for r in data["cases"] if r["case"] == "grpo")
    stored = grpo["ratios"]["credax_groups/torch_vectorized"]["median"]
    assert "torch_vectorized/credax_groups" in md and "credax_groups/torch_vectorized" not in md
    assert f"{1 / stored:.3g}×" in md
    lines = md.splitlines()
    tables = [lines[i + 2] for i, line in enumerate(lines) if line == report.RATIO_HEADING]
    assert len(tables) >= 3
    for line in tables:
        if line.startswith("| size |"):
            for column in line.strip("| ").split(" | ")[1:]:
                first, second = column.split("/")
                # credax never first against a peer; a floor never first
                credax_or_floor = second.startswith("credax") or second.endswith("_floor")
                assert not first.endswith("_floor"), column
                assert credax_or_floor or not first.startswith("credax"), column

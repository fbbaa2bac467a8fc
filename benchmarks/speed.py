"""Speed of credax against the implementations people use today, side by side in one process.

    python -m benchmarks.speed                 # full CPU run -> benchmarks/results/speed-cpu.{json,png,md}
    python -m benchmarks.speed --quick         # toy sizes (CI), written to a temporary directory
    python -m benchmarks.speed --device gpu    # JAX on jax.devices()[0], torch peers on CUDA

Method. Every implementation is first checked against a float64 reference (``benchmarks.peers``);
one that disagrees is not timed and the run exits non-zero. Then, per case: two warm-up calls,
a calibration call that sets how many calls make one sample (at least ``min_sample_s`` of work, so
the clock's resolution and per-sample overhead do not matter), and ``reps`` samples per
implementation, interleaved — repetition ``r`` runs every implementation once, in an order rotated
by ``r`` — so drift on a shared machine hits all of them alike. JAX results are
``block_until_ready``-ed after every call (CUDA torch results are synchronised), so a sample is
latency, not dispatch. Reported: median, quartiles, min and max per implementation, and ratios of
pairs computed per repetition (the two samples of a ratio were taken back to back) — medians of
those ratios, with their min and max. Compile time is measured separately (``jax.monitoring``
events of a cold call after ``jax.clear_caches()``), as is whether a second call with the same
shapes, or with a changed numeric hyperparameter, compiles again.

Ratios are from one run on one machine; absolute times on a shared machine are not comparable
across runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"
GROUP_SIZE = 8
TRIAGE_CONSTANTS = (1.0, 0.5, -0.1, -0.5)
LAM = 0.2
EPS = 1e-6
# TCPO options of the public reimplementation (population std, eps inside the square root,
# sets of fewer than two keep their raw credit), so that the torch peer computes the same numbers.
TCPO_OPTIONS = dict(ddof=0, eps_mode="sqrt", eps=EPS, singleton="raw")
TCPO_GAMMA = 0.9

now = time.perf_counter


# ------------------------------------------------------------------------------------------------
# configuration
# ------------------------------------------------------------------------------------------------


@dataclass
class Config:
    quick: bool
    device: str
    reps: int
    min_sample_s: float
    impl_budget_s: float  # time one implementation may take in one case before it gets fewer reps
    skip_call_s: float  # a single call slower than this is not timed at all
    grpo_sizes: list[int]
    tcpo_sizes: list[tuple[int, int]]
    token_batch: int
    token_lengths: list[int]
    num_turns: int
    compile_shapes: dict[str, Any] = field(default_factory=dict)


def make_config(quick: bool, device: str, reps: int | None) -> Config:
    if quick:
        return Config(
            quick=True, device=device, reps=reps or 7, min_sample_s=0.0005, impl_budget_s=2.0,
            skip_call_s=5.0, grpo_sizes=[64, 512], tcpo_sizes=[(128, 8)],
            token_batch=16, token_lengths=[1024], num_turns=8,
            compile_shapes=dict(grpo=512, tcpo=(128, 8), tokens=(16, 1024), num_turns=8),
        )
    return Config(
        quick=False, device=device, reps=reps or 9, min_sample_s=0.02, impl_budget_s=40.0,
        skip_call_s=60.0, grpo_sizes=[512, 4096, 65536],
        tcpo_sizes=[(b, k) for b in (512, 4096) for k in (8, 16, 32)],
        token_batch=512, token_lengths=[1024, 4096, 16384], num_turns=16,
        compile_shapes=dict(grpo=4096, tcpo=(4096, 16), tokens=(512, 4096), num_turns=16),
    )


# ------------------------------------------------------------------------------------------------
# harness
# ------------------------------------------------------------------------------------------------


@dataclass
class Impl:
    """One implementation of a case: ``run()`` does the work and returns a synchronised result."""

    name: str
    run: Callable[[], Any]
    label: str
    to_numpy: Callable[[Any], np.ndarray]


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _stats(samples: list[float]) -> dict:
    a = np.asarray(samples)
    return {
        "median_s": float(np.median(a)),
        "q25_s": float(np.percentile(a, 25)),
        "q75_s": float(np.percentile(a, 75)),
        "min_s": float(a.min()),
        "max_s": float(a.max()),
        "samples_s": [float(v) for v in a],
    }


class Runner:
    """Checks, times and records cases; collects notes and failures for the report."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.cases: list[dict] = []
        self.skipped: list[dict] = []
        self.failures: list[str] = []

    def skip(self, case: str, reason: str, params: dict | None = None) -> None:
        print(f"  SKIP {case} {params or ''}: {reason}")
        self.skipped.append({"case": case, "params": params or {}, "reason": reason})

    def run_case(
        self,
        case: str,
        params: dict,
        size: int,
        size_label: str,
        reference: np.ndarray,
        impls: list[Impl],
        ratios: list[tuple[str, str]],
        *,
        rtol: float = 1e-4,
        atol: float = 1e-4,
        notes: list[str] | None = None,
    ) -> dict:
        rec: dict[str, Any] = {
            "case": case, "params": params, "size": size, "size_label": size_label,
            "events": [], "agreement": {}, "results": {}, "ratios": {},
            "notes": list(notes or []), "labels": {i.name: i.label for i in impls},
        }
        print(f"\n[{case}] {params}")
        gc.collect()
        checked: list[Impl] = []
        # 1. agreement with the float64 reference, before anything is timed
        for impl in impls:
            t0 = now()
            out = impl.run()
            first = now() - t0
            got = np.asarray(impl.to_numpy(out), dtype=np.float64)
            ok = got.shape == reference.shape and bool(
                np.allclose(got, reference, rtol=rtol, atol=atol)
            )
            err = float(np.max(np.abs(got - reference))) if got.shape == reference.shape else math.inf
            rec["events"].append(f"check:{impl.name}")
            rec["agreement"][impl.name] = {
                "ok": ok, "max_abs_err": err, "rtol": rtol, "atol": atol, "first_call_s": first,
            }
            if ok:
                checked.append(impl)
            else:
                msg = f"{case} {params}: {impl.name} disagrees with the reference (max |err| {err:.3g})"
                print("  FAIL " + msg)
                self.failures.append(msg)
        # 2. timing, interleaved
        rec["events"].append("time")
        results, timing_notes = self._time(checked)
        rec["results"] = results
        rec["notes"] += timing_notes
        for num, den in ratios:
            if num in results and den in results:
                rec["ratios"][f"{num}/{den}"] = self._paired_ratio(results[num], results[den])
        self._print_case(rec)
        self.cases.append(rec)
        return rec

    def _time(self, impls: list[Impl]) -> tuple[dict, list[str]]:
        cfg = self.cfg
        plan = []
        notes = []
        for impl in impls:
            impl.run()  # warm-up (the agreement check was the first call)
            impl.run()
            t0 = now()
            impl.run()
            one = max(now() - t0, 1e-7)
            if one > cfg.skip_call_s:
                notes.append(f"{impl.name}: not timed, one call takes {one:.1f} s "
                             f"(> {cfg.skip_call_s:.0f} s)")
                continue
            inner = max(1, min(100_000, math.ceil(cfg.min_sample_s / one)))
            reps = cfg.reps
            if one * inner * reps > cfg.impl_budget_s:
                reps = max(3, int(cfg.impl_budget_s // (one * inner)))
                if reps < cfg.reps:
                    notes.append(f"{impl.name}: {reps} repetitions instead of {cfg.reps} "
                                 f"(one call takes {one:.2f} s)")
            plan.append((impl, inner, reps))
        samples: dict[str, list[float]] = {impl.name: [] for impl, _, _ in plan}
        for r in range(max((reps for _, _, reps in plan), default=0)):
            shift = r % max(len(plan), 1)
            order = plan[shift:] + plan[:shift]
            for impl, inner, reps in order:
                if r >= reps:
                    continue
                t0 = now()
                for _ in range(inner):
                    impl.run()
                samples[impl.name].append((now() - t0) / inner)
        results = {}
        for impl, inner, _ in plan:
            results[impl.name] = {**_stats(samples[impl.name]), "calls_per_sample": inner,
                                  "reps": len(samples[impl.name])}
        return results, notes

    @staticmethod
    def _paired_ratio(a: dict, b: dict) -> dict:
        n = min(len(a["samples_s"]), len(b["samples_s"]))
        paired = [x / y for x, y in zip(a["samples_s"][:n], b["samples_s"][:n], strict=True)]
        return {
            "median": float(np.median(paired)),
            "min": float(np.min(paired)),
            "max": float(np.max(paired)),
            "of_medians": a["median_s"] / b["median_s"],
            "pairs": n,
        }

    @staticmethod
    def _print_case(rec: dict) -> None:
        for name, r in rec["results"].items():
            print(f"  {name:<26} {fmt_time(r['median_s']):>10}  "
                  f"IQR {fmt_time(r['q25_s'])}–{fmt_time(r['q75_s'])}  "
                  f"({r['reps']} reps × {r['calls_per_sample']} calls)")
        for key, v in rec["ratios"].items():
            print(f"  ratio {key:<44} {v['median']:8.3f}  [{v['min']:.3f}, {v['max']:.3f}]")
        for note in rec["notes"]:
            print(f"  note: {note}")


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------


def make_ids(rng: np.random.Generator, batch: int) -> np.ndarray:
    """Sparse int32 prompt ids (negatives included), groups of GROUP_SIZE, rows shuffled."""
    unique = rng.choice(2**31 - 1, size=batch // GROUP_SIZE, replace=False) - 2**30
    return rng.permutation(np.repeat(unique, GROUP_SIZE)).astype(np.int32)


def make_turns(rng: np.random.Generator, batch: int, num_turns: int):
    """Prefix turn masks of random length and verifier scores in {0, 1/6, ..., 1}."""
    lengths = rng.integers(1, num_turns + 1, size=batch)
    turn_mask = np.arange(num_turns)[None, :] < lengths[:, None]
    steps = rng.choice(np.array([-1, 0, 0, 1, 2]), size=(batch, num_turns))
    level = np.clip(np.cumsum(steps, axis=1), 0, 6)
    scores = np.where(turn_mask, level / 6.0, 0.0).astype(np.float32)
    return scores, turn_mask


def make_token_turn(rng: np.random.Generator, turn_mask: np.ndarray, length: int) -> np.ndarray:
    """``[B, T]`` turn index per token: prompt (-1), then response / observation (-1) spans of
    each valid turn, then padding (-1)."""
    batch = turn_mask.shape[0]
    token_turn = np.full((batch, length), -1, dtype=np.int32)
    prompt = length // 8
    for b in range(batch):
        n = int(turn_mask[b].sum())
        budget = int((length - prompt) * rng.uniform(0.6, 1.0))
        spans = np.floor(rng.dirichlet(np.ones(2 * n)) * budget).astype(np.int64)
        labels = np.full(2 * n, -1, dtype=np.int32)
        labels[0::2] = np.arange(n)
        row = np.repeat(labels, spans)
        token_turn[b, prompt : prompt + row.size] = row
    return token_turn


# ------------------------------------------------------------------------------------------------
# cases
# ------------------------------------------------------------------------------------------------


class Env:
    """Imports and device plumbing shared by the cases."""

    def __init__(self, cfg: Config):
        import jax
        import jax.numpy as jnp

        import credax

        from . import peers

        self.jax, self.jnp, self.credax, self.peers = jax, jnp, credax, peers
        self.device = cfg.device
        self.jax_device = jax.devices()[0]
        self.torch = peers.torch if peers.HAVE_TORCH else None
        self.torch_note = ""
        self.torch_device = "cpu"
        if self.torch is None:
            self.torch_note = f"torch not importable ({peers.TORCH_IMPORT_ERROR}): torch peers skipped"
            print("NOTE: " + self.torch_note)
        elif cfg.device == "gpu":
            if self.torch.cuda.is_available():
                self.torch_device = "cuda"
            else:
                self.torch = None
                self.torch_note = "torch has no CUDA device: torch peers skipped on a GPU run"
                print("NOTE: " + self.torch_note)

    def put(self, x):
        return self.jax.device_put(self.jnp.asarray(x), self.jax_device)

    def jax_run(self, fn, *args, **kwargs):
        block = self.jax.block_until_ready
        return lambda: block(fn(*args, **kwargs))

    def t(self, x, dtype=None):
        out = self.torch.as_tensor(np.ascontiguousarray(x)).to(self.torch_device)
        return out if dtype is None else out.to(dtype)

    def torch_run(self, fn, *args, **kwargs):
        if self.torch_device == "cuda":
            sync = self.torch.cuda.synchronize

            def run():
                out = fn(*args, **kwargs)
                sync()
                return out

            return run
        return lambda: fn(*args, **kwargs)


def case_grpo(env: Env, runner: Runner, batch: int) -> None:
    credax, peers, torch = env.credax, env.peers, env.torch
    rng = np.random.default_rng(batch)
    ids = make_ids(rng, batch)
    rewards = rng.random(batch, dtype=np.float32)
    order = np.argsort(ids, kind="stable")
    reference = peers.reference_grpo(rewards, ids, eps=EPS)

    r_j, ids_j = env.put(rewards), env.put(ids)
    g = credax.groups(ids_j)
    env.jax.block_until_ready(g.index)
    opts = dict(credax.presets.VERL)
    impls = [
        Impl("credax_raw_ids", env.jax_run(credax.grpo_advantages, r_j, ids_j, **opts),
             "credax, raw ids every call", _as_numpy),
        Impl("credax_groups", env.jax_run(credax.grpo_advantages, r_j, g, **opts),
             "credax, precomputed Groups", _as_numpy),
        Impl("numpy", lambda: peers.numpy_grpo(rewards, ids, EPS), "NumPy unique+bincount",
             _as_numpy),
    ]
    notes = []
    if torch is not None:
        r_t, ids_t = env.t(rewards), env.t(ids.astype(np.int64))
        r_sorted_t = env.t(rewards[order])
        uids = np.array([f"uid-{i}" for i in ids.tolist()], dtype=object)
        unsort = np.empty_like(order)
        unsort[order] = np.arange(batch)
        impls += [
            Impl("torch_vectorized", env.torch_run(peers.torch_grpo_vectorized, r_t, ids_t, EPS),
                 "torch unique+index_add (verl grpo_vectorized)", _as_numpy),
            Impl("torch_reshape_sorted",
                 env.torch_run(peers.torch_grpo_reshape, r_sorted_t, GROUP_SIZE, EPS),
                 "torch view(-1, G) on pre-sorted input (TRL)",
                 lambda out: _as_numpy(out)[unsort]),
            Impl("torch_loop", env.torch_run(peers.torch_grpo_loop, r_t, uids, EPS),
                 "torch per-sample loop over uid dict (verl default)", _as_numpy),
        ]
    else:
        notes.append(env.torch_note)
    ratios = [("credax_groups", "torch_vectorized"), ("credax_groups", "torch_reshape_sorted"),
              ("credax_raw_ids", "torch_vectorized"), ("credax_raw_ids", "numpy"),
              ("credax_groups", "numpy"), ("torch_loop", "credax_raw_ids")]
    runner.run_case("grpo", {"B": batch, "group_size": GROUP_SIZE, "ids": "shuffled"}, batch, "B",
                    reference, impls, ratios, notes=notes)


def case_tcpo(env: Env, runner: Runner, batch: int, num_turns: int) -> None:
    credax, peers, torch = env.credax, env.peers, env.torch
    params = {"B": batch, "K": num_turns, "group_size": GROUP_SIZE, "gamma": TCPO_GAMMA}
    rng = np.random.default_rng(1000 * batch + num_turns)
    ids = make_ids(rng, batch)
    scores, turn_mask = make_turns(rng, batch, num_turns)
    reference = peers.reference_tcpo(scores, turn_mask, ids, gamma=TCPO_GAMMA, eps=EPS)
    s_j, m_j, ids_j = env.put(scores), env.put(turn_mask), env.put(ids)
    g = credax.groups(ids_j)
    opts = dict(TCPO_OPTIONS, gamma=TCPO_GAMMA)
    adv = lambda out: _as_numpy(out.advantages)
    impls = [
        Impl("credax_raw_ids", env.jax_run(credax.tcpo_advantages, s_j, m_j, ids_j, **opts),
             "credax tcpo_advantages, raw ids", adv),
        Impl("credax_groups", env.jax_run(credax.tcpo_advantages, s_j, m_j, g, **opts),
             "credax tcpo_advantages, precomputed Groups", adv),
    ]
    notes = []
    if torch is not None:
        s_t, m_t, ids_t = env.t(scores), env.t(turn_mask), env.t(ids.astype(np.int64))
        impls.append(Impl(
            "torch_turn_loop",
            env.torch_run(peers.torch_tcpo_loop, s_t, m_t, ids_t, gamma=TCPO_GAMMA, eps=EPS),
            "torch per-turn loop, cummax + scatter_add (TCPO reimplementations)", _as_numpy))
    else:
        notes.append(env.torch_note)
    ratios = [("torch_turn_loop", "credax_raw_ids"), ("torch_turn_loop", "credax_groups")]
    runner.run_case("tcpo", params, batch * num_turns, "B·K", reference, impls, ratios,
                    notes=notes)


def case_triage_broadcast(env: Env, runner: Runner, length: int) -> None:
    credax, peers, torch = env.credax, env.peers, env.torch
    batch, num_turns = runner.cfg.token_batch, runner.cfg.num_turns
    params = {"B": batch, "K": num_turns, "T": length, "tokens": batch * length}
    rng = np.random.default_rng(length)
    _, turn_mask = make_turns(rng, batch, num_turns)
    token_turn = make_token_turn(rng, turn_mask, length)
    roles = rng.integers(-1, 4, size=(batch, num_turns)).astype(np.int32)
    outcome = rng.standard_normal(batch).astype(np.float32)
    turn_ref = peers.reference_triage(outcome, roles, turn_mask, lam=LAM, constants=TRIAGE_CONSTANTS)
    reference = peers.reference_broadcast(turn_ref, token_turn)
    src = reference.astype(np.float32)  # the floor copies a float32 [B, T] array
    consts = np.asarray(TRIAGE_CONSTANTS, dtype=np.float32)

    a_j, roles_j, m_j, tt_j = env.put(outcome), env.put(roles), env.put(turn_mask), env.put(token_turn)
    turn_ref_j = env.put(turn_ref.astype(np.float32))
    notes = []
    impls = []
    triage, broadcast = credax.triage_advantages, credax.broadcast_to_tokens
    block = env.jax.block_until_ready

    def credax_pipeline():
        return block(broadcast(triage(a_j, roles_j, m_j, lam=LAM), tt_j))

    impls.append(Impl("credax_triage_broadcast", credax_pipeline,
                      "credax triage_advantages + broadcast_to_tokens", _as_numpy))
    impls.append(Impl("credax_broadcast", env.jax_run(credax.broadcast_to_tokens, turn_ref_j, tt_j),
                      "credax broadcast_to_tokens alone (turn values given)", _as_numpy))
    impls.append(Impl("numpy_take", lambda: peers.numpy_triage_take(
        outcome, roles, turn_mask, token_turn, LAM, consts), "NumPy lookup + take_along_axis",
        _as_numpy))
    if torch is not None:
        a_t, roles_t, m_t = env.t(outcome), env.t(roles.astype(np.int64)), env.t(turn_mask)
        tt_t, c_t = env.t(token_turn.astype(np.int64)), env.t(consts)
        impls.append(Impl("torch_gather", env.torch_run(
            peers.torch_triage_gather, a_t, roles_t, m_t, tt_t, LAM, c_t),
            "torch lookup + gather (int64 index)", _as_numpy))
    else:
        notes.append(env.torch_note)
    floor = _floor_impl(env, src)
    impls.append(Impl("copy_floor", floor, "floor: fresh float32 [B,T] copy",
                      lambda out: reference))  # a copy of the answer: agreement is by construction
    # Diagnostic: the same one-read-one-write pass as an XLA program, i.e. through XLA's
    # allocator (NumPy madvises huge pages for large arrays, XLA's buffers get 4 KiB pages).
    src_j = env.put(src)
    xla_double = env.jax.jit(lambda x: x * np.float32(2))
    impls.append(Impl("xla_pass", env.jax_run(xla_double, src_j),
                      "diagnostic: XLA x*2 into a fresh [B,T] buffer",
                      lambda out: _as_numpy(out) / 2))
    ratios = [("credax_triage_broadcast", "copy_floor"), ("torch_gather", "credax_triage_broadcast"),
              ("credax_broadcast", "copy_floor"), ("numpy_take", "credax_triage_broadcast"),
              ("credax_broadcast", "xla_pass"), ("xla_pass", "copy_floor")]
    runner.run_case("triage_broadcast", params, batch * length, "tokens", reference, impls, ratios,
                    notes=notes)


def _floor_impl(env: Env, src: np.ndarray):
    """NumPy ``src.copy()`` on CPU; on a GPU run, a device-to-device copy of the same array."""
    peers = env.peers
    if env.device == "gpu":
        if env.torch is not None and env.torch_device == "cuda":
            src_t = env.t(src)
            return env.torch_run(lambda: src_t.clone())
        src_j = env.put(src)
        return env.jax_run(lambda: env.jnp.array(src_j, copy=True))
    return lambda: peers.copy_floor(src)


def case_policy_loss(env: Env, runner: Runner, length: int) -> None:
    credax, peers, jax = env.credax, env.peers, env.jax
    batch, num_turns = runner.cfg.token_batch, runner.cfg.num_turns
    params = {"B": batch, "K": num_turns, "T": length, "tokens": batch * length}
    rng = np.random.default_rng(7 * length)
    _, turn_mask = make_turns(rng, batch, num_turns)
    token_turn = make_token_turn(rng, turn_mask, length)
    turn_adv = np.where(turn_mask, rng.standard_normal((batch, num_turns)), 0).astype(np.float32)
    token_adv = peers.reference_broadcast(turn_adv, token_turn).astype(np.float32)
    mask = token_turn >= 0
    old = (-rng.random((batch, length)) * 3).astype(np.float32)
    logp = (old + 0.1 * rng.standard_normal((batch, length))).astype(np.float32)
    reference = np.asarray(peers.reference_policy_loss(logp, old, token_adv, mask))

    lp, od, mk = env.put(logp), env.put(old), env.put(mask)
    ta, tv, tt = env.put(token_adv), env.put(turn_adv), env.put(token_turn)
    loss = lambda out: np.asarray(out.loss)
    fwd = [
        Impl("token_advantages", env.jax_run(credax.policy_loss, lp, od, ta, mk),
             "policy_loss, precomputed [B,T] advantages", loss),
        Impl("turn_advantages", env.jax_run(credax.policy_loss, lp, od, tv, mk, token_turn=tt),
             "policy_loss, [B,K] advantages + token_turn (fused gather)", loss),
        Impl("broadcast_then_loss", lambda: jax.block_until_ready(
            credax.policy_loss(lp, od, credax.broadcast_to_tokens(tv, tt), mk)),
             "broadcast_to_tokens, then policy_loss (two calls, [B,T] in between)", loss),
    ]
    runner.run_case("policy_loss", params, batch * length, "tokens", reference, fwd,
                    [("turn_advantages", "token_advantages"),
                     ("turn_advantages", "broadcast_then_loss")], rtol=1e-4, atol=1e-5)

    # The same two losses differentiated w.r.t. logp (what a training step computes).
    def value_and_grad(with_turns: bool):
        if with_turns:
            f = lambda lp, od, adv, mk, tt: credax.policy_loss(lp, od, adv, mk, token_turn=tt).loss
        else:
            f = lambda lp, od, adv, mk: credax.policy_loss(lp, od, adv, mk).loss
        return jax.jit(jax.value_and_grad(f))

    vg_token, vg_turn = value_and_grad(False), value_and_grad(True)
    grads = [
        Impl("token_advantages", env.jax_run(vg_token, lp, od, ta, mk),
             "value_and_grad, precomputed [B,T] advantages", lambda out: np.asarray(out[0])),
        Impl("turn_advantages", env.jax_run(vg_turn, lp, od, tv, mk, tt),
             "value_and_grad, [B,K] advantages + token_turn", lambda out: np.asarray(out[0])),
    ]
    runner.run_case("policy_loss_grad", params, batch * length, "tokens", reference, grads,
                    [("turn_advantages", "token_advantages")], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# compile time and recompilation
# ------------------------------------------------------------------------------------------------


TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def measure_compile(env: Env, name: str, jitted, first, second, changed=None,
                    changed_what: str = "") -> dict:
    """Cold first call (after ``jax.clear_caches()``), then same-shape calls: compile events.

    ``first``/``second`` call the public function on fresh data of the same shapes; ``changed``
    calls it with a different numeric hyperparameter (which is traced, so must not recompile).
    """
    jax = env.jax
    events: list[tuple[str, float, str]] = []

    def listener(event, duration, **kw):
        if event in (TRACE_EVENT, LOWER_EVENT, COMPILE_EVENT):
            events.append((event, float(duration), str(kw.get("fun_name", ""))))

    jax.clear_caches()
    gc.collect()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        t0, c0 = now(), time.process_time()
        jax.block_until_ready(first())
        first_s, first_cpu_s = now() - t0, time.process_time() - c0
        cold = list(events)
        size_first = jitted._cache_size()
        events.clear()
        jax.block_until_ready(second())
        again = list(events)
        size_second = jitted._cache_size()
        events.clear()
        changed_events = None
        if changed is not None:
            jax.block_until_ready(changed())
            changed_events = list(events)
            events.clear()
        steady = []
        for _ in range(7):
            t0 = now()
            jax.block_until_ready(second())
            steady.append(now() - t0)
        after_steady = list(events)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)

    def total(evts, kind):
        return float(sum(d for e, d, _ in evts if e == kind))

    by_fun: dict[str, float] = {}
    for _, d, f in cold:
        by_fun[f] = by_fun.get(f, 0.0) + d
    compiles = lambda evts: sum(1 for e, _, _ in evts if e == COMPILE_EVENT)
    rec = {
        "fn": name,
        "first_call_s": first_s,
        # CPU seconds of the whole process during the cold call: the compile's work, which a
        # loaded machine does not inflate the way it inflates wall-clock time.
        "first_call_cpu_s": first_cpu_s,
        "trace_s": total(cold, TRACE_EVENT),
        "lower_s": total(cold, LOWER_EVENT),
        "backend_compile_s": total(cold, COMPILE_EVENT),
        "compile_total_s": total(cold, TRACE_EVENT) + total(cold, LOWER_EVENT)
        + total(cold, COMPILE_EVENT),
        "by_function_s": by_fun,
        "steady_median_s": float(np.median(steady)),
        "cache_size_after_first": size_first,
        "cache_size_after_second": size_second,
        "compiles_on_second_call": compiles(again),
        "compiles_on_changed_hyperparameter": None if changed_events is None
        else compiles(changed_events),
        "changed_hyperparameter": changed_what,
        "compiles_in_steady_calls": compiles(after_steady),
    }
    rec["recompiled"] = bool(
        rec["compiles_on_second_call"] or (rec["compiles_on_changed_hyperparameter"] or 0)
        or rec["compiles_in_steady_calls"] or size_second != size_first
    )
    print(f"  {name:<34} compile {fmt_time(rec['compile_total_s']):>9} "
          f"(trace {fmt_time(rec['trace_s'])}, lower {fmt_time(rec['lower_s'])}, "
          f"XLA {fmt_time(rec['backend_compile_s'])}); first call {fmt_time(first_s)} "
          f"(CPU {fmt_time(first_cpu_s)}); "
          f"steady {fmt_time(rec['steady_median_s'])}; recompiled: {rec['recompiled']}")
    return rec


def case_compile(env: Env, cfg: Config) -> list[dict]:
    credax, put = env.credax, env.put
    shapes = cfg.compile_shapes
    print(f"\n[compile] shapes {shapes}")
    out = []
    rng = np.random.default_rng(42)

    def fresh_grpo():
        b = shapes["grpo"]
        return put(rng.random(b, dtype=np.float32)), put(make_ids(rng, b))

    r1, i1 = fresh_grpo()
    r2, i2 = fresh_grpo()
    out.append(measure_compile(
        env, "groups (raw ids)", credax._groups._representatives_jit,
        lambda: credax.groups(i1).index, lambda: credax.groups(i2).index))
    g1, g2 = credax.groups(i1), credax.groups(i2)
    out.append(measure_compile(
        env, "grpo_advantages (Groups)", credax.grpo_advantages.jitted,
        lambda: credax.grpo_advantages(r1, g1, eps=1e-6),
        lambda: credax.grpo_advantages(r2, g2, eps=1e-6),
        lambda: credax.grpo_advantages(r2, g2, eps=1e-4), "eps"))
    out.append(measure_compile(
        env, "grpo_advantages (raw ids)", credax.grpo_advantages.jitted,
        lambda: credax.grpo_advantages(r1, i1, eps=1e-6),
        lambda: credax.grpo_advantages(r2, i2, eps=1e-6),
        lambda: credax.grpo_advantages(r2, i2, eps=1e-4), "eps"))

    b, k = shapes["tcpo"]
    data = []
    for _ in range(2):
        s, m = make_turns(rng, b, k)
        data.append((put(s), put(m), put(make_ids(rng, b))))
    (s1, m1, j1), (s2, m2, j2) = data
    tc = credax.tcpo_advantages
    hp = dict(gamma=0.9, hindsight_weight=1.0)
    out.append(measure_compile(
        env, "tcpo_advantages (raw ids)", tc.jitted,
        lambda: tc(s1, m1, j1, **hp), lambda: tc(s2, m2, j2, **hp),
        lambda: tc(s2, m2, j2, gamma=0.8, hindsight_weight=0.5), "gamma, hindsight_weight"))
    h1, h2 = credax.groups(j1), credax.groups(j2)
    out.append(measure_compile(
        env, "tcpo_advantages (Groups)", tc.jitted,
        lambda: tc(s1, m1, h1, **hp), lambda: tc(s2, m2, h2, **hp),
        lambda: tc(s2, m2, h2, gamma=0.8, hindsight_weight=0.5), "gamma, hindsight_weight"))

    b, t = shapes["tokens"]
    k = shapes["num_turns"]
    tok = []
    for _ in range(2):
        _, m = make_turns(rng, b, k)
        tok.append((m, make_token_turn(rng, m, t)))
    (m1, tt1), (m2, tt2) = tok
    v1 = put(rng.standard_normal((b, k)).astype(np.float32))
    v2 = put(rng.standard_normal((b, k)).astype(np.float32))
    a1, a2 = (put(rng.standard_normal(b).astype(np.float32)) for _ in range(2))
    ro1, ro2 = (put(rng.integers(-1, 4, size=(b, k)).astype(np.int32)) for _ in range(2))
    out.append(measure_compile(
        env, "triage_advantages", credax.triage_advantages.jitted,
        lambda: credax.triage_advantages(a1, ro1, put(m1), lam=0.2),
        lambda: credax.triage_advantages(a2, ro2, put(m2), lam=0.2),
        lambda: credax.triage_advantages(a2, ro2, put(m2), lam=0.4), "lam"))
    tt1j, tt2j = put(tt1), put(tt2)
    out.append(measure_compile(
        env, "broadcast_to_tokens", credax.broadcast_to_tokens.jitted,
        lambda: credax.broadcast_to_tokens(v1, tt1j), lambda: credax.broadcast_to_tokens(v2, tt2j)))

    lp1, lp2 = (put((-rng.random((b, t)) * 3).astype(np.float32)) for _ in range(2))
    od1, od2 = (put((-rng.random((b, t)) * 3).astype(np.float32)) for _ in range(2))
    mk1, mk2 = put(tt1 >= 0), put(tt2 >= 0)
    ta1 = put(rng.standard_normal((b, t)).astype(np.float32))
    ta2 = put(rng.standard_normal((b, t)).astype(np.float32))
    pl = credax.policy_loss
    out.append(measure_compile(
        env, "policy_loss ([B,T] advantages)", pl.jitted,
        lambda: pl(lp1, od1, ta1, mk1, clip_low=0.2),
        lambda: pl(lp2, od2, ta2, mk2, clip_low=0.2),
        lambda: pl(lp2, od2, ta2, mk2, clip_low=0.1), "clip_low"))
    out.append(measure_compile(
        env, "policy_loss ([B,K] + token_turn)", pl.jitted,
        lambda: pl(lp1, od1, v1, mk1, token_turn=tt1j, clip_low=0.2),
        lambda: pl(lp2, od2, v2, mk2, token_turn=tt2j, clip_low=0.2),
        lambda: pl(lp2, od2, v2, mk2, token_turn=tt2j, clip_low=0.1), "clip_low"))
    return out


# ------------------------------------------------------------------------------------------------
# targets, report
# ------------------------------------------------------------------------------------------------


def _find(cases, case, **params):
    for rec in cases:
        if rec["case"] == case and all(rec["params"].get(k) == v for k, v in params.items()):
            return rec
    return None


def evaluate_targets(cases: list[dict], compile_recs: list[dict]) -> list[dict]:
    targets = []

    def ratio(name, case, params, key, op, threshold, invert=False):
        rec = _find(cases, case, **params)
        value = None
        if rec is not None and key in rec["ratios"]:
            value = rec["ratios"][key]["median"]
        met = None if value is None else (value <= threshold if op == "<=" else value >= threshold)
        targets.append({"target": name, "case": case, "params": params, "ratio": key,
                        "measured": value, "op": op, "threshold": threshold, "met": met})

    g = {"B": 65536}
    ratio("GRPO B=65536: credax (Groups) vs torch vectorized", "grpo", g,
          "credax_groups/torch_vectorized", "<=", 1.0)
    ratio("GRPO B=65536: credax (Groups) vs torch reshape on sorted", "grpo", g,
          "credax_groups/torch_reshape_sorted", "<=", 1.0)
    ratio("GRPO B=65536: credax (raw ids) vs torch vectorized", "grpo", g,
          "credax_raw_ids/torch_vectorized", "<=", 3.0)
    ratio("GRPO B=65536: per-sample loop / credax (raw ids) (speed-up)", "grpo", g,
          "torch_loop/credax_raw_ids", ">=", 50.0)
    ratio("TCPO B=4096 K=16: torch per-turn loop / credax raw ids (speed-up)", "tcpo",
          {"B": 4096, "K": 16}, "torch_turn_loop/credax_raw_ids", ">=", 20.0)
    ratio("TRIAGE+broadcast 8M tokens: credax / copy floor", "triage_broadcast", {"T": 16384},
          "credax_triage_broadcast/copy_floor", "<=", 2.5)
    ratio("TRIAGE+broadcast 8M tokens: torch gather / credax (speed-up)", "triage_broadcast",
          {"T": 16384}, "torch_gather/credax_triage_broadcast", ">=", 3.0)
    ratio("policy_loss 8M tokens: turn advantages / token advantages", "policy_loss",
          {"T": 16384}, "turn_advantages/token_advantages", "<=", 1.25)
    # The Groups variant: the raw-id variant also compiles the id hashing (`groups`).
    tc = [r for r in compile_recs if r["fn"] == "tcpo_advantages (Groups)"]
    value = tc[0]["compile_total_s"] if tc else None
    targets.append({"target": "compile of tcpo_advantages (trace + lower + XLA), seconds",
                    "case": "compile", "measured": value, "op": "<=", "threshold": 1.0,
                    "met": None if value is None else value <= 1.0,
                    "cpu_s": tc[0]["first_call_cpu_s"] if tc else None})
    recompiled = [r["fn"] for r in compile_recs if r["recompiled"]]
    targets.append({"target": "no recompilation on a second call (every entry point)",
                    "case": "compile", "measured": recompiled, "op": "==", "threshold": [],
                    "met": None if not compile_recs else not recompiled})
    return targets


def machine_info(env: Env) -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        cpu = platform.processor()
    torch = env.peers.torch
    import jaxlib

    info = {
        "nproc": os.cpu_count(),
        "sched_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "jax": env.jax.__version__,
        "jaxlib": jaxlib.__version__,
        "credax": getattr(env.credax, "__version__", "?"),
        "torch": torch.__version__ if torch is not None else None,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "jax_devices": [str(d) for d in env.jax.devices()],
        "torch_device": env.torch_device if env.torch is not None else None,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    try:
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=Path(__file__).resolve().parent, timeout=5,
        ).stdout.strip()
    except Exception:
        info["git_commit"] = None
    return info


def render_markdown(data: dict) -> str:
    m = data["meta"]["machine"]
    n = data["meta"]["threads"]
    threads = "" if n is None else f", pinned to {n} CPU(s), torch threads = {n}"
    lines = [
        f"Command: `{data['meta']['command']}` — {data['meta']['date']}, "
        f"{'quick mode, ' if data['meta']['quick'] else ''}device `{data['meta']['device']}`"
        f"{threads}"
        f"{''.join(f', {k}={v}' for k, v in data['meta']['env'].items())}.",
        f"Machine: {m['nproc']} CPUs (`nproc`), {m['cpu_model']}; load average at start "
        f"{', '.join(f'{x:.2f}' for x in (m['load_average'] or []))}; Python {m['python']}, "
        f"jax {m['jax']}, jaxlib {m['jaxlib']}, NumPy {m['numpy']}, torch {m['torch']} "
        f"({m['torch_threads']} threads).",
        "",
        "Median time per call (interquartile range in brackets); ratios are medians of "
        "per-repetition ratios, from this one run.",
        "",
    ]
    by_case: dict[str, list[dict]] = {}
    for rec in data["cases"]:
        by_case.setdefault(rec["case"], []).append(rec)
    titles = {
        "grpo": "GRPO advantages, groups of 8, shuffled sparse int32 ids",
        "tcpo": "TCPO full pipeline (retrospective + hindsight + per-(prompt, turn) z-score, γ^k)",
        "triage_broadcast": "TRIAGE turn advantages + broadcast to tokens (K = 16)",
        "policy_loss": "policy_loss forward (token-mean clipped surrogate)",
        "policy_loss_grad": "policy_loss value_and_grad w.r.t. logp",
    }
    for case, recs in by_case.items():
        impls = []
        for rec in recs:
            for name in rec["results"]:
                if name not in impls:
                    impls.append(name)
        lines.append(f"**{titles.get(case, case)}**")
        lines.append("")
        head = ["size"] + impls
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for rec in recs:
            size = ", ".join(f"{k}={v}" for k, v in rec["params"].items()
                             if k in ("B", "K", "T"))
            row = [size]
            for name in impls:
                r = rec["results"].get(name)
                row.append("—" if r is None else
                           f"{fmt_time(r['median_s'])} [{fmt_time(r['q25_s'])}–{fmt_time(r['q75_s'])}]")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        ratio_keys = []
        for rec in recs:
            for key in rec["ratios"]:
                if key not in ratio_keys:
                    ratio_keys.append(key)
        if ratio_keys:
            lines.append("| size | " + " | ".join(ratio_keys) + " |")
            lines.append("|" + "---|" * (len(ratio_keys) + 1))
            for rec in recs:
                size = ", ".join(f"{k}={v}" for k, v in rec["params"].items()
                                 if k in ("B", "K", "T"))
                cells = []
                for key in ratio_keys:
                    v = rec["ratios"].get(key)
                    cells.append("—" if v is None else f"{v['median']:.3g}×")
                lines.append(f"| {size} | " + " | ".join(cells) + " |")
            lines.append("")
        notes = [f"{rec['params']}: {n}" for rec in recs for n in rec["notes"]]
        if notes:
            lines += ["Notes: " + "; ".join(notes), ""]
    if data["compile"]:
        lines += ["**Compile time (cold, after `jax.clear_caches()`) and recompilation**", "",
                  "| entry point | trace + lower + XLA compile (wall) | first call: wall / CPU | "
                  "steady call | compiles on 2nd call (same shapes) | on a changed hyperparameter |",
                  "|---|---|---|---|---|---|"]
        for r in data["compile"]:
            changed = r["compiles_on_changed_hyperparameter"]
            changed = "—" if changed is None else f"{changed} ({r['changed_hyperparameter']})"
            lines.append(
                f"| {r['fn']} | {fmt_time(r['compile_total_s'])} | {fmt_time(r['first_call_s'])} / "
                f"{fmt_time(r['first_call_cpu_s'])} | "
                f"{fmt_time(r['steady_median_s'])} | {r['compiles_on_second_call']} | {changed} |")
        lines.append("")
    lines += ["**Targets**", "", "| target | measured | goal | met |", "|---|---|---|---|"]
    for t in data["targets"]:
        v = t["measured"]
        if isinstance(v, float):
            shown = f"{v:.3g}" + ("" if t["case"] == "compile" else "×")
        elif v is None:
            shown = "not run"
        else:
            shown = str(v)
        goal = f"{t['op']} {t['threshold']}"
        met = {True: "yes", False: "**no**", None: "—"}[t["met"]]
        lines.append(f"| {t['target']} | {shown} | {goal} | {met} |")
    if data["skipped"]:
        lines += ["", "Skipped: " + "; ".join(f"{s['case']} {s['params']}: {s['reason']}"
                                            for s in data["skipped"])]
    return "\n".join(lines) + "\n"


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("grpo", "GRPO advantages (groups of 8, shuffled ids)", "B (trajectories)"),
        ("tcpo", "TCPO full pipeline", "B·K (turn entries)"),
        ("triage_broadcast", "TRIAGE + broadcast to tokens (B=512)", "B·T (tokens)"),
        ("policy_loss", "policy_loss forward / value_and_grad", "B·T (tokens)"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(13, 10))
    colors = {}
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def color(name):
        if name not in colors:
            colors[name] = palette[len(colors) % len(palette)]
        return colors[name]

    for ax, (case, title, xlabel) in zip(axes.flat, panels, strict=True):
        cases = [c for c in data["cases"] if c["case"] == case]
        if case == "policy_loss":
            cases += [c for c in data["cases"] if c["case"] == "policy_loss_grad"]
        series: dict[tuple[str, str], list[tuple[int, float, float, float]]] = {}
        for rec in cases:
            variant = ""
            if case == "tcpo":
                variant = f"K={rec['params']['K']}"
            if rec["case"] == "policy_loss_grad":
                variant = "grad"
            for name, r in rec["results"].items():
                series.setdefault((name, variant), []).append(
                    (rec["size"], r["median_s"], r["q25_s"], r["q75_s"]))
        styles = ["-", "--", ":", "-."]
        variants = sorted({v for _, v in series})
        for (name, variant), pts in sorted(series.items()):
            pts.sort()
            x = [p[0] for p in pts]
            y = [p[1] for p in pts]
            lo = [p[1] - p[2] for p in pts]
            hi = [p[3] - p[1] for p in pts]
            label = name + (f" ({variant})" if variant else "")
            ax.errorbar(x, y, yerr=[lo, hi], marker="o", ms=4, capsize=2,
                        linestyle=styles[variants.index(variant) % len(styles)],
                        color=color(name), label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("median time per call (s)")
        ax.grid(True, which="both", alpha=0.3)
        if series:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
    m = data["meta"]["machine"]
    fig.suptitle(f"credax speed vs peers — {data['meta']['device']}, {m['nproc']} CPUs "
                 f"({m['cpu_model']}), jax {m['jax']}, torch {m['torch']}"
                 + (" — QUICK MODE" if data["meta"]["quick"] else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="toy sizes, a few seconds (CI)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                   help="cpu: JAX_PLATFORMS=cpu; gpu: JAX on jax.devices()[0], torch on CUDA")
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default: benchmarks/results, or a temporary "
                        "directory with --quick)")
    p.add_argument("--reps", type=int, default=None, help="repetitions per implementation (>= 7)")
    p.add_argument("--threads", type=int, default=None,
                   help="restrict the process to this many CPUs (affinity) and torch to this "
                        "many threads (default: each library's own default). On a shared machine "
                        "use 1: an oversubscribed torch thread pool can make a parallel op "
                        "100x slower, which no ratio survives")
    p.add_argument("--only", default="", help="comma-separated cases: grpo,tcpo,triage,loss,compile")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.reps is not None and args.reps < 7:
        raise SystemExit("--reps must be at least 7")
    if "jax" not in sys.modules:  # these must be set before jax is imported
        if args.device == "cpu":
            os.environ["JAX_PLATFORMS"] = "cpu"
        if args.threads is not None:
            # XLA sizes its CPU thread pools from the affinity mask; torch is set below.
            if hasattr(os, "sched_setaffinity"):
                allowed = sorted(os.sched_getaffinity(0))
                os.sched_setaffinity(0, allowed[: args.threads])
            if args.threads == 1:
                flags = "--xla_cpu_multi_thread_eigen=false"
                os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()
    cfg = make_config(args.quick, args.device, args.reps)
    out_dir = args.out or (Path(tempfile.gettempdir()) / "credax-bench-quick" if args.quick
                           else RESULTS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    want = lambda name: not only or name in only

    env = Env(cfg)
    if args.threads is not None and env.peers.torch is not None:
        env.peers.torch.set_num_threads(args.threads)
    runner = Runner(cfg)
    started = now()
    meta = {
        "command": "python -m benchmarks.speed" + (" " + " ".join(argv if argv is not None
                                                                    else sys.argv[1:])).rstrip(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": cfg.device,
        "quick": cfg.quick,
        "reps": cfg.reps,
        "min_sample_s": cfg.min_sample_s,
        "threads": args.threads,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "env": {k: os.environ[k] for k in ("GLIBC_TUNABLES", "JAX_CPU_ENABLE_ASYNC_DISPATCH",
                                           "OMP_NUM_THREADS") if k in os.environ},
        "machine": machine_info(env),
    }
    print(f"credax speed benchmark — {meta['command']}")
    print(f"machine: {meta['machine']['nproc']} CPUs, {meta['machine']['cpu_model']}, "
          f"jax {meta['machine']['jax']} {meta['machine']['jax_devices']}, "
          f"torch {meta['machine']['torch']}")

    if want("grpo"):
        for b in cfg.grpo_sizes:
            case_grpo(env, runner, b)
    if want("tcpo"):
        for b, k in cfg.tcpo_sizes:
            case_tcpo(env, runner, b, k)
    if want("triage"):
        for t in cfg.token_lengths:
            case_triage_broadcast(env, runner, t)
    if want("loss"):
        for t in cfg.token_lengths:
            case_policy_loss(env, runner, t)
    compile_recs = case_compile(env, cfg) if want("compile") else []

    targets = evaluate_targets(runner.cases, compile_recs)
    data = {
        "meta": {**meta, "wall_s": now() - started},
        "cases": runner.cases,
        "compile": compile_recs,
        "targets": targets,
        "skipped": runner.skipped,
        "failures": runner.failures,
    }
    stem = f"speed-{cfg.device}"
    json_path, png_path, md_path = (out_dir / f"{stem}.{ext}" for ext in ("json", "png", "md"))
    json_path.write_text(json.dumps(data, indent=1) + "\n")
    md = render_markdown(data)
    md_path.write_text(md)
    plot(data, png_path)
    print("\n" + md)
    print(f"wrote {json_path}, {md_path}, {png_path} ({data['meta']['wall_s']:.1f} s)")
    if runner.failures:
        print("FAILED agreement checks:\n  " + "\n  ".join(runner.failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

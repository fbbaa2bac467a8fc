"""What is timed: presets, synthetic data, the peer cases, the entry-point sweep.

Peer cases (credax against NumPy and, with torch installed, the torch implementations of
:mod:`credax.bench.peers`, each checked against a float64 reference first):

* ``grpo``: GRPO advantages, groups of 8, from shuffled sparse int32 ids, a precomputed ``Groups``
  and the contiguous layout promise;
* ``tcpo``: the TCPO pipeline (retrospective + hindsight + per-(prompt, turn) z-score, ``γ^k``);
* ``triage_broadcast``: TRIAGE turn advantages broadcast to tokens, against a fresh copy (the floor);
* ``policy_loss`` / ``policy_loss_grad``: the clipped surrogate with ``[B, T]`` token advantages
  against ``[B, K]`` turn advantages gathered inside the loss.
* ``lm_head``: ``jax.value_and_grad`` of the policy loss from hidden states through an
  unembedding at LLM vocabulary sizes — credax's chunked ``token_logprobs_from_hidden`` +
  ``policy_loss`` (two calls, four GEMMs) and the fused ``policy_loss_from_hidden`` (three GEMMs)
  against the naive full log-softmax,
  a Liger-style chunked torch loss and the floor of the same run: the three LM-head GEMMs as plain
  ``jnp.dot`` calls; with compiled temporaries and process peak memory per chunk of logits.

The sweep times every public entry point of credax alone at one size per preset: steady time,
compile time, recompiles on a second call and on a changed hyperparameter, bytes moved, GB/s and
the fraction of the device copy bandwidth, XLA's compiled memory, and the device's peak memory where
the backend reports it.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import peers
from .harness import (
    Config,
    Impl,
    Runner,
    as_numpy,
    call_peak_bytes,
    compiled_memory,
    device_memory,
    fmt_bytes,
    fmt_time,
    measure_compile,
    nbytes,
    persistent_cache_first_call,
)
from .profile import kernel_profile

GROUP_SIZE = 8
TRIAGE_CONSTANTS = (1.0, 0.5, -0.1, -0.5)
LAM = 0.2
EPS = 1e-6
# TCPO options of the public reimplementation (population std, eps inside the square root,
# sets of fewer than two keep their raw credit), so that the torch peer computes the same numbers.
# The fields of TCPO's z-score in the peers' form (credax.Normalization(**TCPO_NORMALIZATION)); a
# dict, since this module imports credax (and so JAX) only once the platform is chosen.
TCPO_NORMALIZATION = dict(ddof=0, eps_mode="sqrt", eps=EPS, singleton="raw")
TCPO_GAMMA = 0.9

PRESETS = ("quick", "default", "gpu")
# LM-head shapes (B, T, D, V, chunk_size): the batch of sequences, their length, the hidden width,
# the vocabulary and the positions per chunk (a chunk of logits is B x chunk x V). Each is 2.1e9
# multiply-adds per GEMM, about 0.15 s for the floor on a quiet 2-CPU machine. A chunk holds 128
# tokens: every chunk reads the whole [D, V] unembedding and writes a [D, V] gradient, so with
# fewer tokens a chunk is bound by that traffic rather than by its GEMMs (32 tokens a chunk at
# V=128k, D=256 measured 2.6x the floor: docs/speed-log.md).
LM_HEAD_CPU = [(4, 128, 128, 32768, 32), (2, 128, 64, 131072, 64)]

# Public functions the sweep does not time, and why (host-side data plumbing, not credit math).
NOT_TIMED = {
    "read_rollouts": "file I/O (reads a JSONL rollout dump)",
    "write_rollouts": "file I/O (writes a JSONL rollout dump)",
    "pad_rollouts": "host-side Python over ragged rollouts, before any array exists",
    "rollouts_from_tunix": "host-side conversion of Tunix trajectory objects into Rollouts",
    "credit": "the registry's call of an estimator, each timed under its own name above",
    "credit_methods": "a dict of method names (no arrays)",
}
CASES = ("grpo", "tcpo", "triage", "loss", "lm_head", "sweep")


def make_config(preset: str = "default", device: str = "cpu", reps: int | None = None, *,
                fields: dict[str, Any] | None = None, **sizes: Any) -> Config:
    """The sizes and timing budget of a preset, with any size given by the user in ``sizes``
    (``batch``, ``turns``, ``tokens``, ``group_size``, ``token_batch``) replacing the preset's.

    ``fields``: :class:`Config` fields that replace the preset's first (a preset of one's own built
    on a shipped one, as ``benchmarks/targets.py``'s ``targets`` preset is on ``default``)."""
    if preset == "quick":
        cfg = Config(
            preset=preset, device=device, reps=reps or 7, min_sample_s=0.0005, impl_budget_s=2.0,
            skip_call_s=5.0, grpo_sizes=[64, 512], tcpo_sizes=[(128, 8)],
            token_batch=16, token_lengths=[1024], num_turns=8, copy_mib=4,
            lm_head=[(2, 16, 16, 256, 4)],
            sweep=dict(B=64, K=4, G=8, Bt=4, T=64, M=3, LB=2, LT=16, V=64, D=16),
        )
    elif preset == "default":
        cfg = Config(
            preset=preset, device=device, reps=reps or 9, min_sample_s=0.02, impl_budget_s=40.0,
            skip_call_s=60.0, grpo_sizes=[512, 4096, 65536],
            tcpo_sizes=[(b, k) for b in (512, 4096) for k in (8, 16, 32)],
            token_batch=512, token_lengths=[1024, 4096, 16384], num_turns=16, copy_mib=64,
            lm_head=LM_HEAD_CPU,
            sweep=dict(B=4096, K=16, G=8, Bt=64, T=2048, M=4, LB=4, LT=256, V=2048, D=256),
        )
    elif preset == "gpu":  # sized for one accelerator, the whole run in well under 5 minutes
        cfg = Config(
            preset=preset, device=device, reps=reps or 9, min_sample_s=0.01, impl_budget_s=10.0,
            skip_call_s=20.0, grpo_sizes=[4096, 65536, 1 << 18],
            tcpo_sizes=[(4096, 16), (65536, 16)],
            token_batch=512, token_lengths=[4096, 16384], num_turns=16, copy_mib=512,
            lm_head=[(4, 512, 2048, 32768, 128), (4, 512, 2048, 131072, 128)],
            sweep=dict(B=65536, K=16, G=8, Bt=512, T=4096, M=4, LB=8, LT=512, V=16384, D=1024),
        )
    else:
        raise ValueError(f"`preset` must be one of {list(PRESETS)}; got {preset!r}.")
    if fields:
        cfg = dataclasses.replace(cfg, **fields)
    if sizes.get("batch"):
        b = sizes["batch"]
        cfg.grpo_sizes = [b]
        cfg.tcpo_sizes = [(b, sizes.get("turns") or cfg.num_turns)]
        cfg.sweep["B"] = b
    if sizes.get("turns"):
        cfg.num_turns = sizes["turns"]
        cfg.tcpo_sizes = [(b, sizes["turns"]) for b, _ in cfg.tcpo_sizes]
        cfg.sweep["K"] = sizes["turns"]
    if sizes.get("tokens"):
        cfg.token_lengths = [sizes["tokens"]]
        cfg.sweep["T"] = sizes["tokens"]
    if sizes.get("token_batch"):
        cfg.token_batch = sizes["token_batch"]
        cfg.sweep["Bt"] = sizes["token_batch"]
    if sizes.get("group_size"):
        cfg.group_size = cfg.sweep["G"] = sizes["group_size"]
    for b in cfg.grpo_sizes + [b for b, _ in cfg.tcpo_sizes] + [cfg.sweep["B"]]:
        if b % cfg.group_size:
            raise ValueError(f"batch sizes must be multiples of the group size {cfg.group_size}; "
                             f"got {b}.")
    return cfg


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------


def make_ids(rng: np.random.Generator, batch: int, group_size: int = GROUP_SIZE) -> np.ndarray:
    """Sparse int32 prompt ids (negatives included), groups of ``group_size``, rows shuffled."""
    unique = rng.choice(2**31 - 1, size=batch // group_size, replace=False) - 2**30
    return rng.permutation(np.repeat(unique, group_size)).astype(np.int32)


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


def contiguous_order(ids: np.ndarray):
    """The row order that makes each prompt's rows one block (a trainer's layout), and its inverse."""
    order = np.argsort(ids, kind="stable")
    unsort = np.empty_like(order)
    unsort[order] = np.arange(order.size)
    return order, unsort


# ------------------------------------------------------------------------------------------------
# environment
# ------------------------------------------------------------------------------------------------


class Env:
    """Imports and device plumbing shared by the cases."""

    def __init__(self, cfg: Config, *, use_torch: bool = True):
        import jax
        import jax.numpy as jnp

        import credax

        self.jax, self.jnp, self.credax, self.peers = jax, jnp, credax, peers
        self.device = cfg.device
        self.jax_device = jax.devices()[0]
        self.torch = peers.load_torch() if use_torch else None
        self.torch_note = ""
        self.torch_device = "cpu"
        if not use_torch:
            self.torch_note = "torch peers not requested (--no-torch)"
        elif self.torch is None:
            self.torch_note = (f"torch not importable ({peers.TORCH_IMPORT_ERROR}): torch peers "
                               "skipped (pip install '/path/to/credax[bench]')")
            print("NOTE: " + self.torch_note)
        elif self.jax_device.platform == "gpu":
            if self.torch.cuda.is_available():
                self.torch_device = "cuda"
            else:
                self.torch = None
                self.torch_note = "torch has no CUDA device: torch peers skipped on a GPU run"
                print("NOTE: " + self.torch_note)
        elif self.jax_device.platform != "cpu":
            self.torch = None
            self.torch_note = f"no torch peer on {self.jax_device.platform}: torch peers skipped"

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


# ------------------------------------------------------------------------------------------------
# peer cases
# ------------------------------------------------------------------------------------------------


def case_grpo(env: Env, runner: Runner, batch: int) -> None:
    credax, peers, torch = env.credax, env.peers, env.torch
    g_size = runner.cfg.group_size
    rng = np.random.default_rng(batch)
    ids = make_ids(rng, batch, g_size)
    rewards = rng.random(batch, dtype=np.float32)
    order, unsort = contiguous_order(ids)
    reference = peers.reference_grpo(rewards, ids, eps=EPS)

    r_j, ids_j = env.put(rewards), env.put(ids)
    g = credax.groups(ids_j)
    env.jax.block_until_ready(g.index)
    r_sorted_j = env.put(rewards[order])
    c = credax.groups(ids[order], layout="contiguous", group_size=g_size)
    opts = dict(normalization=credax.presets.VERL)
    inputs = r_j.nbytes + ids_j.nbytes
    impls = [
        Impl("credax_raw_ids", env.jax_run(credax.grpo_advantages, r_j, ids_j, **opts),
             "credax, raw ids every call", as_numpy, inputs),
        Impl("credax_groups", env.jax_run(credax.grpo_advantages, r_j, g, **opts),
             "credax, precomputed Groups", as_numpy, inputs),
        Impl("credax_contiguous", env.jax_run(credax.grpo_advantages, r_sorted_j, c, **opts),
             "credax, contiguous layout promise (groups(ids, layout='contiguous'))",
             lambda out: as_numpy(out)[unsort], r_j.nbytes),
        Impl("numpy", lambda: peers.numpy_grpo(rewards, ids, EPS), "NumPy unique+bincount",
             as_numpy, inputs),
    ]
    notes = []
    if torch is not None:
        r_t, ids_t = env.t(rewards), env.t(ids.astype(np.int64))
        r_sorted_t = env.t(rewards[order])
        uids = np.array([f"uid-{i}" for i in ids.tolist()], dtype=object)
        impls += [
            Impl("torch_vectorized", env.torch_run(peers.torch_grpo_vectorized, r_t, ids_t, EPS),
                 "torch unique+index_add (verl grpo_vectorized)", as_numpy, inputs),
            Impl("torch_reshape_sorted",
                 env.torch_run(peers.torch_grpo_reshape, r_sorted_t, g_size, EPS),
                 "torch view(-1, G) on pre-sorted input (TRL)",
                 lambda out: as_numpy(out)[unsort], r_j.nbytes),
        ]
        if batch <= 65536:  # the per-sample loop takes seconds beyond that
            impls.append(Impl("torch_loop", env.torch_run(peers.torch_grpo_loop, r_t, uids, EPS),
                              "torch per-sample loop over uid dict (verl default)", as_numpy))
    else:
        notes.append(env.torch_note)
    ratios = [("credax_groups", "torch_vectorized"), ("credax_groups", "torch_reshape_sorted"),
              ("credax_raw_ids", "torch_vectorized"), ("credax_contiguous", "torch_reshape_sorted"),
              ("credax_raw_ids", "numpy"), ("credax_groups", "numpy"),
              ("torch_loop", "credax_raw_ids")]
    runner.run_case("grpo", {"B": batch, "group_size": g_size, "ids": "shuffled"}, batch, "B",
                    reference, impls, ratios, notes=notes)


def tcpo_output_floor(env: Env, struct):
    """A program with TCPO's inputs and outputs and no work: one elementwise pass per output.

    The floor of the public call, which returns every intermediate (15 ``[B, K]`` arrays)."""
    jax, jnp = env.jax, env.jnp
    leaves, tree = jax.tree.flatten(struct)

    def floor(s, m):
        outs = []
        for i, leaf in enumerate(leaves):
            v = jnp.where(m, s, jnp.float32(i))
            outs.append(v > 0.5 if leaf.dtype == jnp.bool_ else v.astype(leaf.dtype))
        return jax.tree.unflatten(tree, outs)

    return jax.jit(floor)


def case_tcpo(env: Env, runner: Runner, batch: int, num_turns: int) -> None:
    credax, peers, torch, jax = env.credax, env.peers, env.torch, env.jax
    g_size = runner.cfg.group_size
    params = {"B": batch, "K": num_turns, "group_size": g_size, "gamma": TCPO_GAMMA}
    rng = np.random.default_rng(1000 * batch + num_turns)
    ids = make_ids(rng, batch, g_size)
    scores, turn_mask = make_turns(rng, batch, num_turns)
    reference = peers.reference_tcpo(scores, turn_mask, ids, gamma=TCPO_GAMMA, eps=EPS)
    s_j, m_j, ids_j = env.put(scores), env.put(turn_mask), env.put(ids)
    g = credax.groups(ids_j)
    order, unsort = contiguous_order(ids)
    s_c, m_c = env.put(scores[order]), env.put(turn_mask[order])
    c = credax.groups(ids[order], layout="contiguous", group_size=g_size)
    opts = dict(normalization=credax.Normalization(**TCPO_NORMALIZATION), gamma=TCPO_GAMMA)
    adv = lambda out: as_numpy(out.advantages)
    adv_c = lambda out: as_numpy(out.advantages)[unsort]
    # What a training step pays: the call inside the step's jit, only the advantages used (XLA
    # drops the intermediates the step does not read).
    step = jax.jit(lambda s, m, g: credax.tcpo_advantages(s, m, g, **opts).advantages)
    inputs = s_j.nbytes + m_j.nbytes + ids_j.nbytes
    floor = tcpo_output_floor(env, jax.eval_shape(
        lambda: credax.tcpo_advantages(s_j, m_j, g, **opts)))
    impls = [
        Impl("credax_raw_ids", env.jax_run(credax.tcpo_advantages, s_j, m_j, ids_j, **opts),
             "credax tcpo_advantages, raw ids", adv, inputs),
        Impl("credax_groups", env.jax_run(credax.tcpo_advantages, s_j, m_j, g, **opts),
             "credax tcpo_advantages, precomputed Groups", adv, inputs),
        Impl("credax_contiguous", env.jax_run(credax.tcpo_advantages, s_c, m_c, c, **opts),
             "credax tcpo_advantages, contiguous layout promise", adv_c, s_j.nbytes + m_j.nbytes),
        Impl("credax_contiguous_step", env.jax_run(step, s_c, m_c, c),
             "in a jitted step, advantages only, contiguous layout", lambda o: as_numpy(o)[unsort],
             s_j.nbytes + m_j.nbytes),
        Impl("credax_raw_ids_step", lambda: jax.block_until_ready(step(s_j, m_j, credax.groups(ids_j))),
             "in a jitted step, advantages only, raw ids", as_numpy, inputs),
        Impl("output_floor", env.jax_run(floor, s_j, m_j),
             "floor: the public call's 15 outputs written from its inputs, no work",
             lambda out: reference, s_j.nbytes + m_j.nbytes),
    ]
    notes = []
    if torch is not None:
        s_t, m_t, ids_t = env.t(scores), env.t(turn_mask), env.t(ids.astype(np.int64))
        impls.append(Impl(
            "torch_turn_loop",
            env.torch_run(peers.torch_tcpo_loop, s_t, m_t, ids_t, gamma=TCPO_GAMMA, eps=EPS),
            "torch per-turn loop, cummax + scatter_add (TCPO reimplementations)", as_numpy,
            inputs))
        # The strongest torch form: no turn loop, the trainer layout as view(-1, G, K).
        impls.append(Impl(
            "torch_reshape_sorted",
            env.torch_run(peers.torch_tcpo_reshape, env.t(scores[order]), env.t(turn_mask[order]),
                          g_size, gamma=TCPO_GAMMA, eps=EPS),
            "torch view(-1, G, K) on pre-sorted input, no turn loop", lambda o: as_numpy(o)[unsort],
            s_j.nbytes + m_j.nbytes))
    else:
        notes.append(env.torch_note)
    ratios = [("torch_turn_loop", "credax_raw_ids"), ("torch_turn_loop", "credax_groups"),
              ("torch_turn_loop", "credax_contiguous"), ("torch_turn_loop", "credax_contiguous_step"),
              ("torch_turn_loop", "credax_raw_ids_step"), ("credax_contiguous", "output_floor"),
              ("torch_reshape_sorted", "credax_contiguous"),
              ("torch_reshape_sorted", "credax_contiguous_step")]
    runner.run_case("tcpo", params, batch * num_turns, "B·K", reference, impls, ratios,
                    notes=notes)


def _floor_impl(env: Env, src: np.ndarray):
    """NumPy ``src.copy()`` on CPU; on an accelerator, a device-to-device copy of the same array."""
    if env.jax_device.platform != "cpu":
        if env.torch is not None and env.torch_device == "cuda":
            src_t = env.t(src)
            return env.torch_run(lambda: src_t.clone())
        src_j = env.put(src)
        copy = env.jax.jit(lambda x: x + 0.0)
        return env.jax_run(copy, src_j)
    return lambda: env.peers.copy_floor(src)


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
    triage, broadcast = credax.triage_advantages, credax.broadcast_to_tokens
    block = env.jax.block_until_ready

    def credax_pipeline():
        return block(broadcast(triage(a_j, roles_j, m_j, lam=LAM), tt_j))

    pipe_in = a_j.nbytes + roles_j.nbytes + m_j.nbytes + tt_j.nbytes
    impls = [
        Impl("credax_triage_broadcast", credax_pipeline,
             "credax triage_advantages + broadcast_to_tokens", as_numpy, pipe_in),
        Impl("credax_broadcast", env.jax_run(credax.broadcast_to_tokens, turn_ref_j, tt_j),
             "credax broadcast_to_tokens alone (turn values given)", as_numpy,
             turn_ref_j.nbytes + tt_j.nbytes),
        Impl("numpy_take", lambda: peers.numpy_triage_take(
            outcome, roles, turn_mask, token_turn, LAM, consts), "NumPy lookup + take_along_axis",
            as_numpy, pipe_in),
    ]
    notes = []
    if torch is not None:
        a_t, roles_t, m_t = env.t(outcome), env.t(roles.astype(np.int64)), env.t(turn_mask)
        tt_t, c_t = env.t(token_turn.astype(np.int64)), env.t(consts)
        impls.append(Impl("torch_gather", env.torch_run(
            peers.torch_triage_gather, a_t, roles_t, m_t, tt_t, LAM, c_t),
            "torch lookup + gather (int64 index)", as_numpy, pipe_in))
    else:
        notes.append(env.torch_note)
    impls.append(Impl("copy_floor", _floor_impl(env, src), "floor: fresh float32 [B,T] copy",
                      lambda out: reference, src.nbytes))  # a copy of the answer
    # Diagnostic: the same one-read-one-write pass as an XLA program, i.e. through XLA's
    # allocator (NumPy madvises huge pages for large arrays; XLA's buffers come from malloc).
    src_j = env.put(src)
    xla_double = env.jax.jit(lambda x: x * np.float32(2))
    impls.append(Impl("xla_pass", env.jax_run(xla_double, src_j),
                      "diagnostic: XLA x*2 into a fresh [B,T] buffer",
                      lambda out: as_numpy(out) / 2, src.nbytes))
    ratios = [("credax_triage_broadcast", "copy_floor"), ("torch_gather", "credax_triage_broadcast"),
              ("credax_broadcast", "copy_floor"), ("numpy_take", "credax_triage_broadcast"),
              ("credax_broadcast", "xla_pass"), ("xla_pass", "copy_floor")]
    runner.run_case("triage_broadcast", params, batch * length, "tokens", reference, impls, ratios,
                    notes=notes)


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
    base = lp.nbytes + od.nbytes + mk.nbytes
    fwd = [
        Impl("token_advantages", env.jax_run(credax.policy_loss, lp, od, ta, mk),
             "policy_loss, precomputed [B,T] advantages", loss, base + ta.nbytes),
        Impl("turn_advantages", env.jax_run(credax.policy_loss, lp, od, tv, mk, token_turn=tt),
             "policy_loss, [B,K] advantages + token_turn (fused gather)", loss,
             base + tv.nbytes + tt.nbytes),
        Impl("broadcast_then_loss", lambda: jax.block_until_ready(
            credax.policy_loss(lp, od, credax.broadcast_to_tokens(tv, tt), mk)),
             "broadcast_to_tokens, then policy_loss (two calls, [B,T] in between)", loss,
             base + tv.nbytes + tt.nbytes),
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
             "value_and_grad, precomputed [B,T] advantages", lambda out: np.asarray(out[0]),
             base + ta.nbytes),
        Impl("turn_advantages", env.jax_run(vg_turn, lp, od, tv, mk, tt),
             "value_and_grad, [B,K] advantages + token_turn", lambda out: np.asarray(out[0]),
             base + tv.nbytes + tt.nbytes),
    ]
    runner.run_case("policy_loss_grad", params, batch * length, "tokens", reference, grads,
                    [("turn_advantages", "token_advantages")], rtol=1e-4, atol=1e-5)


def nnx_temp_bytes(env: Env, hidden, unembedding, tokens, old_logp, advantages, mask,
                   chunk_size: int, fused: bool = False) -> int | None:
    """Compiled temporaries of ``nnx.value_and_grad(credax.nnx.policy_loss_fn)`` on a model that
    returns ``(hidden, unembedding)`` (both parameters, so nothing but the loss is in the program),
    with ``chunk_size``; ``None`` without flax."""
    try:
        from flax import nnx
    except Exception:  # pragma: no cover - flax is the nnx extra
        return None
    import functools

    import credax.nnx as cnnx

    class Head(nnx.Module):
        def __init__(self):
            self.hidden, self.unembedding = nnx.Param(hidden), nnx.Param(unembedding)

    graph, state = nnx.split(Head())
    batch = cnnx.PolicyBatch(tokens, mask, old_logp, advantages)
    apply = lambda m, _: (m.hidden[...], m.unembedding[...])
    loss_fn = functools.partial(cnnx.policy_loss_fn, apply=apply, chunk_size=chunk_size,
                                fused=fused)

    def step(state, batch):
        model = nnx.merge(graph, state)
        (loss, _), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model, batch)
        return loss, grads

    compiled = env.jax.jit(step).lower(state, batch).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def case_lm_head(env: Env, runner: Runner, batch: int, length: int, dim: int, vocab: int,
                 chunk_size: int) -> dict:
    """``value_and_grad`` of the policy loss from hidden states through the unembedding."""
    jax, jnp, credax, peers, torch = env.jax, env.jnp, env.credax, env.peers, env.torch
    if length % chunk_size:
        raise ValueError(f"lm_head: T={length} must be a multiple of chunk_size={chunk_size}.")
    tokens_n = batch * length
    params = {"B": batch, "T": length, "D": dim, "V": vocab, "chunk": chunk_size,
              "tokens": tokens_n}
    rng = np.random.default_rng(vocab + length + dim)
    hidden = rng.standard_normal((batch, length, dim), dtype=np.float32)
    unembedding = (rng.standard_normal((dim, vocab), dtype=np.float32) / np.sqrt(dim)).astype(
        np.float32)
    tokens = rng.integers(0, vocab, size=(batch, length)).astype(np.int32)
    mask = np.arange(length)[None, :] >= length // 8            # the prompt is not trained on
    mask = mask & (np.arange(length)[None, :] < length - rng.integers(0, length // 8 + 1, (batch, 1)))
    advantages = rng.standard_normal(batch).astype(np.float32)
    # the behaviour policy's log-probs: the current ones (float64) moved by a little noise, so
    # that some ratios leave the clip range
    lp64 = peers.reference_lm_head_logp(hidden, unembedding, tokens)
    old = (lp64 + 0.15 * rng.standard_normal((batch, length))).astype(np.float32)
    loss64, dh64, dw64 = peers.reference_lm_head_loss(hidden, unembedding, tokens, old, advantages,
                                                      mask)
    sh, sw = float(np.abs(dh64).max()) or 1.0, float(np.abs(dw64).max()) or 1.0
    # one flat vector: the loss, then each gradient divided by its largest reference entry, so
    # one tolerance reads as "relative to the gradient's scale"
    flat = lambda loss, dh, dw: np.concatenate([np.atleast_1d(np.float64(loss)),
                                                np.ravel(dh) / sh, np.ravel(dw) / sw])
    reference = flat(loss64, dh64, dw64)
    jax_out = lambda out: flat(np.asarray(out[0]), np.asarray(out[1][0]), np.asarray(out[1][1]))

    h_j, w_j, tok_j, old_j, adv_j, m_j = map(env.put, (hidden, unembedding, tokens, old, advantages,
                                                        mask))

    def credax_loss(h, w, tok, od, adv, m):
        lp = credax.token_logprobs_from_hidden(h, w, tok, chunk_size=chunk_size, mask=m)
        return credax.policy_loss(lp, od, adv, m).loss

    def naive_loss(h, w, tok, od, adv, m):
        logits = jnp.einsum("btd,dv->btv", h, w)
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), tok[..., None], axis=-1)[..., 0]
        return credax.policy_loss(lp, od, adv, m).loss

    chunked = jax.jit(jax.value_and_grad(credax_loss, argnums=(0, 1)))
    naive = jax.jit(jax.value_and_grad(naive_loss, argnums=(0, 1)))
    def fused_loss(h, w, tok, od, adv, m):
        return credax.policy_loss_from_hidden(h, w, tok, od, adv, m, chunk_size=chunk_size).loss

    fused = jax.jit(jax.value_and_grad(fused_loss, argnums=(0, 1)))
    args = (h_j, w_j, tok_j, old_j, adv_j, m_j)
    # the floor: the three GEMMs of the head, forward and backward, as plain jnp.dot calls
    h2 = h_j.reshape(tokens_n, dim)
    g2 = env.put(rng.standard_normal((tokens_n, vocab), dtype=np.float32))
    gemms = [(jax.jit(lambda a, b: jnp.dot(a, b)), (h2, w_j)),        # logits = h W
             (jax.jit(lambda g, b: jnp.dot(g, b.T)), (g2, w_j)),      # d h = d logits Wᵀ
             (jax.jit(lambda a, g: jnp.dot(a.T, g)), (h2, g2))]       # d W = hᵀ d logits
    block = jax.block_until_ready

    def floor():
        return [block(f(*a)) for f, a in gemms]

    impls = [
        Impl("credax_chunked", env.jax_run(chunked, *args),
             f"credax token_logprobs_from_hidden(chunk_size={chunk_size}) + policy_loss, "
             "value_and_grad", jax_out),
        Impl("naive_jax", env.jax_run(naive, *args),
             "JAX full logits + log_softmax + the same policy_loss, value_and_grad", jax_out),
        Impl("credax_fused", env.jax_run(fused, *args),
             f"credax policy_loss_from_hidden(chunk_size={chunk_size}), value_and_grad: the "
             "chunk's gradient in the forward scan (3 GEMMs a chunk)", jax_out),
        Impl("matmul_floor", floor, "floor: the 3 LM-head GEMMs as plain jnp.dot calls",
             lambda out: reference),
    ]
    notes = []
    if torch is not None:
        h_t = env.t(hidden.reshape(tokens_n, dim)).requires_grad_(True)
        w_t = env.t(np.ascontiguousarray(unembedding.T)).requires_grad_(True)  # nn.Linear [V, D]
        tok_t = env.t(tokens.reshape(-1).astype(np.int64))
        old_t, m_t = env.t(old.reshape(-1)), env.t(mask.reshape(-1).astype(np.float32))
        adv_t = env.t(np.repeat(advantages, length))
        impls.append(Impl(
            "torch_chunked", env.torch_run(peers.torch_lm_head_chunked, h_t, w_t, tok_t, old_t,
                                           adv_t, m_t, batch * chunk_size),
            f"torch chunked loss, Liger style ({batch * chunk_size} tokens a chunk)",
            lambda out: flat(float(out[0]), as_numpy(out[1]), as_numpy(out[2]).T)))
    else:
        notes.append(env.torch_note)
    tol = 1e-4 if env.jax_device.platform == "cpu" else 2e-2  # accelerators: TF32 GEMMs by default
    if tol > 1e-4:
        notes.append(f"tolerance {tol} of each gradient's scale on {env.jax_device.platform} "
                     "(JAX's default float32 matmul precision there is not full float32)")
    ratios = [("credax_fused", "matmul_floor"), ("credax_chunked", "matmul_floor"),
              ("naive_jax", "matmul_floor"), ("torch_chunked", "matmul_floor"),
              ("torch_chunked", "credax_fused"), ("torch_chunked", "credax_chunked"),
              ("naive_jax", "credax_chunked"), ("credax_chunked", "credax_fused")]
    rec = runner.run_case("lm_head", params, tokens_n, "tokens", reference, impls, ratios,
                          rtol=tol, atol=tol, notes=notes)

    # the floor's own figures: FLOPs and the GEMM rate this run measured
    flops = 3 * 2 * tokens_n * dim * vocab
    floor_s = rec["results"].get("matmul_floor", {}).get("median_s")
    rec["gemm"] = {"flops": flops, "floor_median_s": floor_s,
                   "gflop_per_s": None if not floor_s else flops / floor_s / 1e9}
    # memory, per chunk of logits (B x chunk x V float32)
    chunk_bytes = batch * chunk_size * vocab * 4
    rec["chunk_bytes"] = chunk_bytes
    rec["unembedding_bytes"] = dim * vocab * 4
    runs = {i.name: i.run for i in impls if i.name in rec["results"]}
    compiled = {"credax_chunked": chunked, "naive_jax": naive, "credax_fused": fused}
    memory = {}
    for name, run in runs.items():
        entry: dict[str, Any] = {}
        if name in compiled:
            c = compiled_memory(compiled[name], *args) or {}
            entry["temp_bytes"] = c.get("temp_size_in_bytes")
        elif name == "matmul_floor":
            temps = [(compiled_memory(f, *a) or {}).get("temp_size_in_bytes") for f, a in gemms]
            entry["temp_bytes"] = None if None in temps else max(temps)
        gc.collect()
        peak = call_peak_bytes(run)
        entry["process_peak_bytes"], entry["process_peak_how"] = peak["bytes"], peak["how"]
        memory[name] = entry
    for name, fused_nnx in (("credax_nnx", False), ("credax_nnx_fused", True)):
        nnx_temp = nnx_temp_bytes(env, h_j, w_j, tok_j, old_j, adv_j, m_j, chunk_size, fused_nnx)
        if nnx_temp is not None:
            memory[name] = {"temp_bytes": nnx_temp}
    for name, entry in memory.items():
        for key in ("temp_bytes", "process_peak_bytes"):
            if entry.get(key) is not None:
                entry[key.replace("_bytes", "_chunks")] = entry[key] / chunk_bytes
        if name.startswith(("credax_chunked", "credax_fused", "credax_nnx")) and entry.get(
                "temp_bytes") is not None:
            # what is left once the one [D, V] buffer of a chunk's unembedding gradient (the
            # GEMM's output, before it is added to the running sum) is taken out
            entry["temp_less_unembedding_chunks"] = (entry["temp_bytes"]
                                                     - rec["unembedding_bytes"]) / chunk_bytes
    rec["memory"] = memory
    print(f"  GEMM floor: {flops / 1e9:.2f} GFLOP in {fmt_time(floor_s)} -> "
          f"{rec['gemm']['gflop_per_s'] or 0:.1f} GFLOP/s; one chunk of logits "
          f"{fmt_bytes(chunk_bytes)}, the [D, V] unembedding {fmt_bytes(rec['unembedding_bytes'])}")
    for name, entry in memory.items():
        t, p = entry.get("temp_chunks"), entry.get("process_peak_chunks")
        u = entry.get("temp_less_unembedding_chunks")
        print(f"  memory {name:<26} temporaries "
              f"{'—' if t is None else f'{t:.2f}'} chunks"
              f"{'' if u is None else f' ({u:.2f} without the [D, V] gradient buffer)'}, "
              f"process peak {'—' if p is None else f'{p:.2f}'} chunks")
    return rec


# ------------------------------------------------------------------------------------------------
# the entry-point sweep
# ------------------------------------------------------------------------------------------------


@dataclass
class Entry:
    """One public entry point with two same-shape inputs and, optionally, a changed
    hyperparameter (numeric, so traced: changing it must not recompile)."""

    name: str
    fn: Any
    args: tuple
    args2: tuple
    kwargs: dict
    changed: dict | None = None
    jitted: Any = "auto"

    def call(self, args, kwargs=None):
        return self.fn(*args, **(self.kwargs if kwargs is None else kwargs))


# Fields of the registry's batch that place an entry on the token batch ([Bt, T]) or on the
# LM-head batch ([LB, LT] tokens, V vocabulary, D hidden), rather than on the turn batch ([B, K]).
_LM_FIELDS = frozenset({"logits", "tokens", "hidden", "unembedding"})
_TOKEN_FIELDS = frozenset({"token_turn", "logp", "values"})
# Sweep options that depend on the sizes: chunks of a quarter of the sequence.
_SIZED_OPTIONS = {"token_logprobs_from_hidden": lambda z: {"chunk_size": max(1, z["LT"] // 4)},
                  "token_logprobs_from_hidden:entropy":
                      lambda z: {"chunk_size": max(1, z["LT"] // 4)}}


def _sweep_name(label: str) -> str:
    """``"name:form"`` of the registry as the sweep names it: ``"name (form)"``."""
    name, _, form = label.partition(":")
    return f"{name} ({form})" if form else name


def entry_points(env: Env, cfg: Config) -> list[Entry]:
    """Every public entry point of credax, with inputs at the sweep size of ``cfg``: every call of
    the method registry (``credax._registry``: each public array function) and its forms
    (``credax.bench.sweep``) on
    two batches of the same shape, its numeric hyperparameters at the first value of the one
    schedule (``credax.bench.sweep.SCHEDULE``, the compile-once test's) and changed to the second for
    the recompilation check; then the layouts of ``groups`` and the host-side functions."""
    from credax import _registry
    from credax._batch import TurnBatch
    from credax.bench.sweep import FORMS, scheduled_options

    credax, put = env.credax, env.put
    z = cfg.sweep
    b, k, g_size, bt, t, m_alt = z["B"], z["K"], z["G"], z["Bt"], z["T"], z["M"]
    lb, lt, vocab, hid = z["LB"], z["LT"], z["V"], z["D"]
    rng = np.random.default_rng(2026)
    roles = lambda n: rng.integers(-1, 4, size=(n, k)).astype(np.int32)  # noqa: E731

    def turn_batch():
        s, m = make_turns(rng, b, k)
        ids = make_ids(rng, b, g_size)
        return TurnBatch(scores=s, turn_mask=m, group_ids=ids, rewards=s[:, 0], roles=roles(b),
                         token_turn=np.full((b, 1), -1, np.int32),
                         anchors=rng.integers(0, 8, size=(b, k)).astype(np.int32),
                         turn_rewards=s)  # the scores as per-turn rewards (the step methods)

    def token_batch():
        _, m = make_turns(rng, bt, k)
        tt = make_token_turn(rng, m, t)
        old = (-rng.random((bt, t)) * 3).astype(np.float32)
        lp = (old + 0.1 * rng.standard_normal((bt, t))).astype(np.float32)
        v = np.where(m, rng.standard_normal((bt, k)), 0).astype(np.float32)
        return TurnBatch(scores=v, turn_mask=m, group_ids=np.arange(bt, dtype=np.int32) // 2,
                         rewards=rng.random(bt).astype(np.float32), roles=roles(bt), token_turn=tt,
                         logp=lp, values=old)

    def lm_batch(w):
        return TurnBatch(scores=np.zeros((lb, k), np.float32), turn_mask=np.ones((lb, k), bool),
                         group_ids=np.zeros(lb, np.int32), rewards=np.zeros(lb, np.float32),
                         roles=roles(lb), token_turn=np.zeros((lb, lt), np.int32),
                         logits=rng.standard_normal((lb, lt, vocab), dtype=np.float32),
                         tokens=rng.integers(0, vocab, size=(lb, lt)).astype(np.int32),
                         hidden=rng.standard_normal((lb, lt, hid), dtype=np.float32),
                         unembedding=w)

    def on_device(batch):  # arrays on the device, ids as Groups (densified once, outside timing)
        batch = batch.map(put)
        return batch._replace(group_ids=credax.groups(batch.group_ids))

    def with_alternatives(batch):
        return batch._replace(alt_scores=put(rng.random((b, k, m_alt), dtype=np.float32)),
                              alt_mask=put(rng.random((b, k, m_alt)) < 0.7))

    turns1, turns2 = turn_batch(), turn_batch()
    d1, d2 = on_device(turns1), on_device(turns2)
    a1, a2 = with_alternatives(d1), with_alternatives(d2)
    t1, t2 = on_device(token_batch()), on_device(token_batch())
    w = rng.standard_normal((hid, vocab), dtype=np.float32) / np.sqrt(hid)
    l1, l2 = on_device(lm_batch(w)), on_device(lm_batch(w))
    out: list[Entry] = []

    def add(name, fn, x1, x2, kwargs=None, changed=None, jitted="auto"):
        out.append(Entry(name, fn, x1, x2, kwargs or {}, changed, jitted))

    def tuned(fn, args, kwargs):
        """The call's keywords at the schedule's first values, and its second values (the traced
        options that must not recompile; ``None`` where the call has none)."""
        signature = inspect.signature(fn)
        first = {**kwargs, **scheduled_options(signature, args, kwargs, 0)}
        return first, scheduled_options(signature, args, kwargs, 1) or None

    for label, c in {**_registry.CALLS, **FORMS}.items():
        needs = set(c.needs)
        pair = ((l1, l2) if needs & _LM_FIELDS else (t1, t2) if needs & _TOKEN_FIELDS
                else (a1, a2) if "alt_scores" in needs else (d1, d2))
        (args1, kwargs), (args2, _) = c.args(pair[0]), c.args(pair[1])
        sized = _SIZED_OPTIONS.get(label, lambda z: {})(z)
        fn = getattr(credax, c.name)
        options, changed = tuned(fn, args1, {**kwargs, **sized})
        add(_sweep_name(label), fn, args1, args2, options, changed)
    # The contiguous layout of the ids (a Groups with group_size), and groups itself.
    ids1, ids2 = turns1.group_ids, turns2.group_ids
    c1 = credax.groups(np.repeat(np.arange(b // g_size), g_size), layout="contiguous",
                       group_size=g_size)
    grpo, tcpo = _registry.ESTIMATORS["grpo_advantages"], _registry.ESTIMATORS["tcpo_advantages"]
    for name, c in (("grpo_advantages (contiguous)", grpo), ("tcpo_advantages (contiguous)", tcpo)):
        (x1, kw), (x2, _) = c.args(d1._replace(group_ids=c1)), c.args(d2._replace(group_ids=c1))
        add(name, getattr(credax, c.name), x1, x2, *tuned(getattr(credax, c.name), x1, kw))
    add("groups (raw ids)", credax.groups, (put(ids1),), (put(ids2),),
        jitted=credax.groups.jitted)  # the hashing program (groups is a host function around it)
    order1, order2 = np.argsort(ids1, kind="stable"), np.argsort(ids2, kind="stable")
    add("groups (contiguous, host ids)", credax.groups, (ids1[order1],), (ids2[order2],),
        {"layout": "contiguous", "group_size": g_size}, jitted=None)
    # host-side checks and parsing (NumPy in, no jit)
    np_s, np_m = turns1.scores, turns1.turn_mask
    add("validate_turns", credax.validate_turns, (np_s, np_m, ids1),
        (turns2.scores, turns2.turn_mask, ids2), jitted=None)
    add("validate_rewards", credax.validate_rewards, (turns1.rewards, ids1),
        (turns2.rewards, ids2), jitted=None)
    alt1, alt2, am = (np.asarray(a1.alt_scores), np.asarray(a2.alt_scores),
                      np.asarray(a1.alt_mask))
    add("validate_alternatives", credax.validate_alternatives, (alt1, am, np_s),
        (alt2, am, turns2.scores), jitted=None)
    add("validate_roles", credax.validate_roles, (turns1.roles, np_m),
        (turns2.roles, turns2.turn_mask), jitted=None)
    tree = _registry.ESTIMATORS["tree_advantages"]  # its forests: each row a chain of its turns
    forest1, forest2 = (tuple(map(np.asarray, tree.args(x)[0])) for x in (turns1, turns2))
    add("validate_tree", credax.validate_tree, forest1, forest2, jitted=None)
    labels = [["D", "E", "N", "R"][: 1 + i % 4] for i in range(min(b, 256))]
    add("parse_roles", credax.parse_roles, (labels,), (labels,), {"num_turns": 4}, jitted=None)
    covered = {e.fn for e in out}
    missing = [n for n in credax.__all__ if inspect.isroutine(getattr(credax, n))
               and getattr(credax, n) not in covered and n not in NOT_TIMED]
    if missing:  # a new public function must get a call-table entry: say so in the report
        print(f"NOTE: public functions without a sweep entry: {missing}")
    return out


def run_sweep(env: Env, cfg: Config, copy_bw: float | None, only: str = "",
              profile: bool = False) -> list[dict]:
    """Compile, recompile, steady time, bytes, roofline and memory of every entry point (or of
    those whose name contains one of the comma-separated words of ``only``); with ``profile``,
    also its steady call's time per kernel (:func:`credax.bench.profile.kernel_profile`)."""
    jax = env.jax
    print(f"\n[sweep] every public entry point, sizes {cfg.sweep}")
    words = [w.strip() for w in only.split(",") if w.strip()]
    records = []
    for e in entry_points(env, cfg):
        if words and not any(w in e.name for w in words):
            continue
        jitted = getattr(e.fn, "jitted", None) if e.jitted == "auto" else e.jitted
        gc.collect()
        mem_before = device_memory()
        rec = measure_compile(
            e.name, jitted, lambda e=e: e.call(e.args), lambda e=e: e.call(e.args2),
            None if e.changed is None else (lambda e=e: e.call(e.args2, {**e.kwargs, **e.changed})),
            ", ".join(e.changed or {}), cfg=cfg,
        )
        mem_after = device_memory()
        result = e.call(e.args)
        jax.block_until_ready(result)
        moved = nbytes(e.args) + nbytes(e.kwargs) + nbytes(result)
        rec["bytes_moved"] = moved
        rec["gb_per_s"] = moved / rec["steady_median_s"] / 1e9
        rec["roofline_fraction"] = (moved / rec["steady_median_s"] / copy_bw) if copy_bw else None
        rec["peak_bytes_in_use"] = None if mem_after is None else mem_after[1]
        rec["bytes_in_use_before"] = None if mem_before is None else mem_before[0]
        # XLA's accounting of the program, lowered through the public entry's `.lower` (its checks
        # and rewrites, e.g. folding normalisation keywords); host functions have none.
        auto = getattr(e.fn, "jitted", None) is not None and e.jitted == "auto"
        rec["compiled"] = compiled_memory(e.fn, *e.args, **e.kwargs) if auto else None
        if profile:
            rec["kernels"] = kernel_profile(lambda e=e: e.call(e.args))
        if e.name == "tcpo_advantages":
            z = cfg.sweep
            rec["persistent_cache"] = persistent_cache_first_call(z["B"], z["K"], z["G"])
        records.append(rec)
    return records

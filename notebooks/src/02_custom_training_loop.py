# %% [markdown]
# # A complete training loop in plain JAX: rollout, credit, loss, update
#
# credax is a library of functions, not a trainer: it never owns your model, your optimizer or
# your rollout code. This notebook writes a whole RL training loop for a small multi-turn agent
# with **Flax NNX** (the policy), **optax** (the optimizer) and **credax** (credit and loss),
# every step visible:
#
# 1. **rollout** — the policy plays a batch of episodes, 8 per prompt, and a verifier scores
#    every turn;
# 2. **credit** — one credax call turns scores into per-turn advantages (GRPO or TCPO here; any
#    estimator of notebook 01 drops in);
# 3. **loss** — `credax.policy_loss`, the clipped surrogate, on the action tokens, with the
#    `[B, K]` turn advantages gathered to tokens inside the loss;
# 4. **update** — `nnx.value_and_grad` and an `nnx.Optimizer` wrapping `optax.adamw`.
#
# Then the **same loop runs data-parallel over 8 devices** with `jax.sharding`, rows shuffled so
# that each prompt's rollouts are spread across devices, and produces the same numbers. That is
# the property that matters when you scale out: credax computes group statistics from the
# `group_ids` you pass, never from positions or shards, so sharding changes where the work runs,
# not what it computes.
#
# The 8 devices are CPU devices forced by `XLA_FLAGS`, which has to be set before JAX starts —
# so the first cell does it, and the whole notebook runs with 8 CPU devices. The whole notebook
# takes well under a minute on a laptop CPU.

# %%
import os
import pathlib
import sys

# before importing jax; added to any XLA_FLAGS already set, which keep applying
os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"),
                                                 "--xla_force_host_platform_device_count=8"]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The toy task lives in the repository's benchmarks package: put the repository on the path.
ROOT = next(p for p in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents]
            if (p / "benchmarks" / "lab").is_dir())
sys.path.insert(0, str(ROOT))

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import credax
from benchmarks.lab import env as E
from benchmarks.lab.policy import SLOTS, Policy, final_score, rollout

# %matplotlib inline
print(jax.devices())

# %% [markdown]
# ## The task
#
# The credit lab's toy task (`benchmarks/lab/env.py`), at a small size: each
# prompt is a hidden code of `L = 2` symbols over `V = 6` letters. The agent starts from a blank
# answer and has `K = 6` turns. Each turn it emits one action, spelled as up to three tokens like
# an LLM's tool call:
#
# * `probe i` reveals the hidden symbol at position `i` (the score does not move: pure
#   information — an *exploration* turn);
# * `write i v` sets position `i` of the answer to `v` (the score rises, stays or falls);
# * `stop` ends the episode.
#
# After every turn the verifier scores the answer: the fraction of positions that are right.
# Success is a score of 1 at the end. The policy (`benchmarks/lab/policy.py`) is a small
# NNX MLP that decodes the three tokens autoregressively; `rollout` plays all episodes with a
# `lax.scan` over turns and returns `[B, K]` scores and masks and `[B, K, 3]` tokens with their
# log-probs under the rollout policy. One in five codes is held out for evaluation.
#
# Here is what the untrained policy does:

# %%
TASK = E.Task(length=2, alphabet=6, turns=6)
PROMPTS, GROUP = 16, 8                  # 16 prompts x 8 rollouts = 128 trajectories per step
B, K = PROMPTS * GROUP, TASK.turns
HIDDEN, LR, EPOCHS, CLIP = 64, 3e-3, 2, 0.2
train_pool, eval_pool = E.split_targets(TASK)
print(f"{len(train_pool)} training codes, {len(eval_pool)} held-out codes")

LETTERS = "ABCDEFGH"


def describe(r, b):
    # One trajectory of a Rollout, as text.
    steps = []
    for k in range(K):
        if not r.turn_mask[b, k]:
            break
        kind, pos, val = np.asarray(r.tokens[b, k])
        pos, val = pos - TASK.pos_offset, val - TASK.val_offset
        action = {E.STOP: "stop", E.PROBE: f"probe {pos}", E.WRITE: f"write {pos} {LETTERS[val]}"}
        steps.append(f"{action[int(kind)]} ({float(r.scores[b, k]):.1f})")
    code = "".join(LETTERS[v] for v in np.asarray(r.before.target[b, 0]))
    return f"code {code}: " + " -> ".join(steps)


@nnx.jit
def play(model, key):
    # 32 episodes of every held-out code: the rollout, and the fraction solved at the end.
    r = rollout(model, jnp.repeat(eval_pool, 32, axis=0), key)
    return r, jnp.mean((final_score(r) >= 1.0).astype(jnp.float32))


untrained = Policy(TASK, HIDDEN, rngs=nnx.Rngs(0))
r, success = play(untrained, jax.random.key(0))
print(f"held-out success of the untrained policy: {float(success):.3f}")
for b in (0, 1, 32, 64):
    print(describe(r, b))

# %% [markdown]
# ## Credit, loss, update
#
# Two credit functions with the same signature, `(rollout, groups) -> [B, K]` advantages:
# GRPO's outcome advantage on every turn, and TCPO's turn credit from the score history
# (retrospective + hindsight). The loss recomputes the log-probs of the sampled tokens under the
# current policy (`credax.token_logprobs`, from the logits without a full log-softmax), and
# `credax.policy_loss` takes the `[B, K]` advantages with `token_turn` — the turn of each token,
# `-1` for token slots an action did not use — so the per-token tensor is never built.
#
# The training step is one `nnx.jit` function: rollout, credit, and two optimisation epochs on
# the batch. Targets and group ids come in as arguments, so that the data-parallel run below can
# hand them in sharded.

# %%
def grpo_credit(r, groups):
    advantage = credax.grpo_advantages(final_score(r), groups)      # [B]: outcome, per prompt
    return jnp.where(r.turn_mask, advantage[:, None], 0.0)         # every turn gets it


def tcpo_credit(r, groups):
    return credax.tcpo_advantages(r.scores, r.turn_mask, groups).advantages   # [B, K]


def loss_fn(model, r, advantages, token_turn):
    logits = model(r.obs, r.tokens)                                  # [B, K, 3, vocab]
    logp = credax.token_logprobs(logits.reshape(B, K * SLOTS, -1), r.tokens.reshape(B, -1))
    out = credax.policy_loss(logp, r.logp.reshape(B, -1), advantages, r.token_mask.reshape(B, -1),
                             token_turn=token_turn,
                             options=credax.LossOptions(clip_low=CLIP, clip_high=CLIP))
    return out.loss, out.metrics


def make_train_step(credit):
    @nnx.jit
    def train_step(model, optimizer, targets, group_ids, key):
        r = rollout(model, targets, key)                                   # 1. rollout
        groups = credax.groups(group_ids, num_groups=PROMPTS)  # densify once, reuse
        advantages = credit(r, groups)                                     # 2. credit
        turn_of_slot = jnp.arange(K, dtype=jnp.int32)[None, :, None]
        token_turn = jnp.where(r.token_mask, turn_of_slot, -1).reshape(B, -1)
        grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
        for _ in range(EPOCHS):
            (loss, metrics), grads = grad_fn(model, r, advantages, token_turn)   # 3. loss
            optimizer.update(model, grads)                                       # 4. update
        final = final_score(r)
        return dict(loss=loss, score=jnp.mean(final),
                    success=jnp.mean((final >= 1.0).astype(jnp.float32)),
                    clip_frac=metrics.clip_frac_low + metrics.clip_frac_high)

    return train_step


STEP = {"GRPO": make_train_step(grpo_credit), "TCPO": make_train_step(tcpo_credit)}

# %% [markdown]
# ## The outer loop
#
# Each step draws 16 training codes and repeats each 8 times. The rows are then **shuffled**
# (one fixed permutation): a prompt's rollouts are not adjacent, which a correct credit function
# must not care about — and which spreads each prompt over several devices later on.
# `place(x, spec)` is how an array reaches the devices; on one device it is the identity.

# %%
SHUFFLE = np.random.default_rng(0).permutation(B)
# One optax object for every run: nnx.jit's cache key includes the optimizer's structure, and
# a freshly built optax.chain would not compare equal, so each run would compile again.
TX = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(LR, weight_decay=1e-4))


def batches(seed, steps):
    key = jax.random.key(seed)
    for step in range(steps):
        k_targets, k_rollout = jax.random.split(jax.random.fold_in(key, step))
        codes = E.sample_train_targets(TASK, k_targets, PROMPTS, train_pool)
        targets = jnp.repeat(codes, GROUP, axis=0)[SHUFFLE]
        group_ids = jnp.repeat(jnp.arange(PROMPTS, dtype=jnp.int32), GROUP)[SHUFFLE]
        yield targets, group_ids, k_rollout


def train(credit, *, seed=0, steps=110, eval_every=10, place=lambda x, spec: x):
    model = Policy(TASK, HIDDEN, rngs=nnx.Rngs(seed))
    optimizer = nnx.Optimizer(model, TX, wrt=nnx.Param)
    nnx.update(model, place(nnx.state(model), P()))          # parameters: replicated
    nnx.update(optimizer, place(nnx.state(optimizer), P()))  # optimizer state: replicated
    log, evals = [], []
    for step, (targets, group_ids, key) in enumerate(batches(seed, steps)):
        if eval_every and step % eval_every == 0:
            evals.append((step, float(play(model, jax.random.key(10_000 + step))[1])))
        stats = STEP[credit](model, optimizer, place(targets, P("data")),   # rows: sharded
                             place(group_ids, P("data")), key)
        log.append(jax.device_get(stats))
    if eval_every:
        evals.append((steps, float(play(model, jax.random.key(10_000 + steps))[1])))
    return model, {k: np.array([s[k] for s in log]) for k in log[0]}, evals


runs = {credit: train(credit) for credit in ("GRPO", "TCPO")}

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4), layout="constrained")
for credit, (_, log, evals) in runs.items():
    steps, success = zip(*evals, strict=True)
    left.plot(steps, success, marker="o", label=credit)
    smooth = np.convolve(log["score"], np.ones(10) / 10, mode="valid")
    right.plot(np.arange(len(smooth)) + 9, smooth, label=credit)
left.set(xlabel="training step", ylabel="success on held-out codes", ylim=(-0.02, 1.02),
         title="held-out success (32 episodes per code)")
right.set(xlabel="training step", ylabel="final score (10-step mean)", ylim=(0, 1.02),
          title="training batch: verifier score at the end")
for ax in (left, right):
    ax.grid(alpha=0.3)
    ax.legend()
plt.show()

# %% [markdown]
# What did each policy learn to do? The mix of actions on held-out codes, and a few episodes:

# %%
for credit, (model, _, _) in runs.items():
    r, success = play(model, jax.random.key(7))
    kind = np.asarray(r.tokens[..., 0])[np.asarray(r.turn_mask)]   # action type of real turns
    mix = {name: np.mean(kind == code) for name, code in
           [("probe", E.PROBE), ("write", E.WRITE), ("stop", E.STOP)]}
    print(f"{credit}: held-out success {float(success):.2f}; share of turns: "
          + ", ".join(f"{name} {share:.2f}" for name, share in mix.items()))
    for b in (0, 32, 64):
        print("   ", describe(r, b))

# %% [markdown]
# One seed of one small configuration proves nothing about which estimator is better: runs are
# noisy, and another seed can reorder them. The action mix shows *what* each credit taught, and
# it is the first thing to look at when a curve disappoints: how often the agent probes
# (gathers information the score cannot see) and how often it writes (moves the score). Turn
# credit built from the score history pays a write the moment it helps, while a probe is worth
# something only through what followed it — notebook 01's *exploration* cells.
# `python -m benchmarks.lab` compares every estimator on this task over several seeds, with
# confidence intervals.
#
# ## The same loop, data-parallel over 8 devices
#
# A `jax.sharding.Mesh` with one axis, `data`, over the 8 devices. Parameters and optimizer
# state are replicated (`P()`); targets and group ids are split by rows (`P("data")`): each
# device rolls out 16 of the 128 episodes. Nothing else changes — `train_step` is the same
# function, and XLA (GSPMD) inserts the cross-device reductions that the group statistics, the
# token-mean of the loss and the gradient need. Because the rows were shuffled, every prompt's
# 8 rollouts live on several devices, so a statistic taken per shard would be wrong.
#
# (`jax.make_mesh` defaults to `Explicit` axes in recent JAX; `Auto` lets the compiler propagate
# shardings through code written without them, like this loop.)

# %%
mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
sharded = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))

targets, group_ids, _ = next(batches(0, 1))
shown = sharded(group_ids, P("data"))
print(shown.sharding)
for shard in shown.addressable_shards[:3]:
    prompts = sorted(set(np.asarray(shard.data).tolist()))
    print(f"  {shard.device}: rows {shard.index[0]}, prompts {prompts}")
print("  ...")

STEPS_DP = 12
one_model, one_log, _ = train("GRPO", steps=STEPS_DP, eval_every=None)
dp_model, dp_log, _ = train("GRPO", steps=STEPS_DP, eval_every=None, place=sharded)

# %%
print(f"{'step':>4} {'loss, 1 device':>15} {'loss, 8 devices':>16} {'score 1':>8} {'score 8':>8}")
for step in range(0, STEPS_DP, 3):
    print(f"{step:4d} {one_log['loss'][step]:+15.8f} {dp_log['loss'][step]:+16.8f} "
          f"{one_log['score'][step]:8.4f} {dp_log['score'][step]:8.4f}")

params = lambda m: jax.tree.leaves(nnx.state(m, nnx.Param))
param_diff = max(float(jnp.max(jnp.abs(a - b)))
                 for a, b in zip(params(one_model), params(dp_model), strict=True))
print()
print("rollouts identical on every step:", all(np.array_equal(one_log[k], dp_log[k])
                                            for k in ("score", "success")))
print(f"largest loss difference: {np.abs(one_log['loss'] - dp_log['loss']).max():.1e}")
print(f"largest parameter difference after {STEPS_DP} steps: {param_diff:.1e}")
print("parameters live on", len(params(dp_model)[0].sharding.device_set), "devices")

np.testing.assert_array_equal(one_log["score"], dp_log["score"])
np.testing.assert_allclose(one_log["loss"], dp_log["loss"], atol=1e-6)
assert param_diff < 1e-5

# %% [markdown]
# Every rollout of every step is the same on 1 and on 8 devices (JAX's random bits do not depend
# on how an array is sharded), and the losses and parameters agree to float32 rounding: a sum
# split over 8 devices is added in a different order, which moves the last bits. On real
# accelerators, replace the forced CPU devices by `jax.devices()` and keep the rest.
#
# If you write the step with `jax.shard_map` instead (explicit per-device code), the per-device
# loss must be normalised by the *global* token count: pass
# `normalizer=jax.lax.psum(jnp.sum(mask), "data")` to `credax.policy_loss`, and compute group
# statistics on the gathered rows or keep each prompt's rollouts on one device.
#
# ## What to try next
#
# * Swap the credit: `credax.triage_advantages(grpo, roles, turn_mask)` with the environment's
#   oracle roles (`r.roles`, masked by `r.turn_mask`), `credax.gigpo_advantages` with `r.anchors`
#   as anchor states, or `credax.mt_grpo_advantages` with the score change as turn reward —
#   each is one line in a new credit function.
# * Change the loss: `clip_high=0.28` (DAPO's clip-higher), `agg="seq-mean-token-mean"`, or a
#   KL term against a frozen reference (`ref_logp=`, `kl_coef=`).
# * Use `credax.nnx.policy_loss_fn` with a `credax.nnx.PolicyBatch` for a language model that
#   maps `tokens` to logits, and `credax.nnx.sequence_logprobs` for the old log-probs.
# * Run `python -m benchmarks.lab --tiny` (seconds) or the default demo (every method, 5
#   seeds) to compare estimators properly.

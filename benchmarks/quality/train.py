"""The training loop: rollout, credit, clipped policy loss and adamw, all in one jitted step.

One training step = sample ``prompts`` training-split targets, roll out ``group`` episodes each,
compute per-turn advantages ``[B, K]`` with the method's credax function, and take ``epochs`` adamw
steps on the clipped surrogate (``credax.nnx.policy_loss_fn`` → ``credax.policy_loss``, which
gathers each token's turn advantage through ``token_turn`` inside the fused loss).
``eval_every`` steps are fused into one ``lax.scan``; seeds are a vmapped axis, so one compiled
program trains every seed of a method at once and the Python loop only reports progress.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import credax

from . import env as E
from .lab import credit_eval
from .methods import DIAGNOSTICS, Context, Method, Settings
from .policy import Policy, Rollout, episode_return, final_score, rollout


@dataclass(frozen=True)
class Config:
    """Everything that defines a run. Shared by every method; fixed before any comparison."""

    task: E.Task = E.Task()  # or refine.RefineTask()
    group: int = 8  # G rollouts per prompt
    prompts: int = 16  # prompts per training step (B = prompts * group)
    hidden: int = 128  # trunk width
    steps: int = 200  # training steps
    lr: float = 3e-3
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    epochs: int = 2  # optimisation passes over each batch (so the ratio clip can bind)
    clip: float = 0.2
    eval_every: int = 20
    eval_repeats: int = 2  # episodes per held-out target at each evaluation
    checkpoints: tuple[int, ...] = (0, 100, 200)  # steps at which the credit lab measures credit
    lab_pairs: int = 128  # (trajectory, turn) pairs per checkpoint batch with a ground truth
    lab_branches: int = 32  # N: branch pairs per ground-truth estimate
    settings: Settings = field(default_factory=Settings)


class Metrics(NamedTuple):
    """Per-seed evaluation metrics (each ``f32[S]`` under the seed vmap)."""

    success: jax.Array  # final score == 1
    ret: jax.Array  # episode return (final score - per-turn cost): what every method maximises
    final_score: jax.Array
    best_turn: jax.Array  # best score over the episode's turns
    turns_to_success: jax.Array  # mean first-success turn (1-based) over episodes that succeed
    reached: jax.Array  # fraction of episodes that reach success at some turn
    length: jax.Array  # mean number of turns taken
    probes: jax.Array  # turns per episode that revealed a new symbol (exploration)
    regressions: jax.Array  # turns per episode that lowered the score
    broke_solved: jax.Array  # of the episodes that reached success: fraction that regressed after


def evaluate(model: Policy, targets: jax.Array, key: jax.Array, repeats: int) -> Metrics:
    t = jnp.repeat(targets, repeats, axis=0)
    r = rollout(model, t, key)
    final = final_score(r)
    ret = episode_return(model.task, r)
    solved = r.turn_mask & (r.scores >= 1.0)
    after = jnp.cumsum(solved.astype(jnp.int32), axis=1) > 0  # at or after the first success
    broke = jnp.any(after & r.turn_mask & (r.roles == E.REGRESSION), axis=1)
    reached = jnp.any(solved, axis=1)
    first = jnp.argmax(solved, axis=1).astype(jnp.float32) + 1.0
    n_reached = jnp.sum(reached.astype(jnp.float32))
    tts = jnp.where(
        n_reached > 0,
        jnp.sum(jnp.where(reached, first, 0.0)) / jnp.maximum(n_reached, 1.0),
        jnp.nan,
    )
    best = jnp.max(jnp.where(r.turn_mask, r.scores, 0.0), axis=1)
    f32 = lambda x: jnp.mean(x.astype(jnp.float32))
    return Metrics(
        success=f32(final >= 1.0),
        ret=f32(ret),
        final_score=f32(final),
        best_turn=f32(best),
        turns_to_success=tts,
        reached=f32(reached),
        length=f32(jnp.sum(r.turn_mask, axis=1)),
        probes=f32(jnp.sum(r.turn_mask & (r.roles == E.EXPLORATION), axis=1)),
        regressions=f32(jnp.sum(r.turn_mask & (r.roles == E.REGRESSION), axis=1)),
        broke_solved=jnp.where(
            n_reached > 0, jnp.sum((reached & broke).astype(jnp.float32)) / jnp.maximum(n_reached, 1.0),
            jnp.nan,
        ),
    )


class Batch(NamedTuple):
    """One optimisation batch: credax's ``PolicyBatch`` plus what the model and value loss read."""

    policy: credax.nnx.PolicyBatch  # tokens [B, 1 + 3K] (BOS + action tokens), per-turn credit
    obs: jax.Array  # f32[B, K, D] observations (the model's side input, like an encoder's)
    outcome: jax.Array  # f32[B] episode return (value-head target)
    turn_mask: jax.Array  # bool[B, K]


BOS = 0  # any token id: position 0 is never scored (credax.nnx alignment)


def to_sequence(r: Rollout, advantages: jax.Array, token_turn: jax.Array):
    """Lay a rollout out as a token sequence ``[BOS, a_{0,0}, a_{0,1}, a_{0,2}, a_{1,0}, ...]``.

    Every per-token field is aligned with the token it is about (credax.nnx's convention), so the
    rollout's sampled log-probs are the old log-probs as they are, shifted by the BOS slot.
    """
    B = r.tokens.shape[0]
    pad = lambda x, v: jnp.concatenate([jnp.full((B, 1), v, x.dtype), x.reshape(B, -1)], axis=1)
    return credax.nnx.PolicyBatch(
        tokens=pad(r.tokens, BOS),
        mask=pad(r.token_mask, False),
        old_logp=pad(r.logp, 0.0),
        advantages=advantages,
        token_turn=pad(token_turn, -1),
    )


def _apply(obs):
    """How credax.nnx calls the model: the output at position ``t`` predicts token ``t + 1``."""

    def apply(model: Policy, tokens: jax.Array) -> jax.Array:
        B = tokens.shape[0]
        actions = tokens[:, 1:].reshape(B, -1, model.task.slots)
        logits = model(obs, actions)  # [B, K, 3, vocab], slot logits of each action token
        logits = logits.reshape(B, -1, logits.shape[-1])
        # The last position predicts nothing; credax never reads it.
        return jnp.concatenate([logits, jnp.zeros_like(logits[:, :1])], axis=1)

    return apply


def loss_fn(model: Policy, batch: Batch, normalizer: jax.Array, value_coef: jax.Array, cfg: Config):
    """credax's clipped policy loss on the action tokens, plus the value head's regression.

    ``normalizer`` is the aggregation denominator: the batch's valid-token count (``token-mean``,
    every method but Dr. GRPO) or Dr. GRPO's constant ``sequences x max response tokens`` — the
    same ``Σ_{b,t} ℓ / normalizer`` as credax's ``seq-mean-token-sum-norm``, passed as a traced
    value so every method shares one compiled program. ``value_coef`` is 0 except for the
    learned-value baseline.
    """
    loss, metrics = credax.nnx.policy_loss_fn(
        model, batch.policy, apply=_apply(batch.obs), agg="token-mean", normalizer=normalizer,
        clip_low=cfg.clip, clip_high=cfg.clip,
    )
    v = model.value(batch.obs)
    err = jnp.where(batch.turn_mask, jnp.square(v - batch.outcome[:, None]), 0.0)
    value_loss = jnp.sum(err) / jnp.maximum(jnp.sum(batch.turn_mask.astype(jnp.float32)), 1.0)
    return loss + value_coef * value_loss, metrics


def make_optimizer(cfg: Config) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.adamw(cfg.lr, weight_decay=cfg.weight_decay),
    )


def init(cfg: Config, key: jax.Array):
    model = cfg.task.policy(cfg.hidden, rngs=nnx.Rngs(params=key))
    opt = nnx.Optimizer(model, make_optimizer(cfg), wrt=nnx.Param)
    return nnx.split((model, opt))


def make_context(model: Policy, key: jax.Array, pool: jax.Array, cfg: Config) -> Context:
    """Sample ``prompts`` training targets, roll out ``group`` episodes each: one batch."""
    task = cfg.task
    k_targets, k_roll, k_credit = jax.random.split(key, 3)
    prompt_targets = E.sample_train_targets(task, k_targets, cfg.prompts, pool)
    targets = jnp.repeat(prompt_targets, cfg.group, axis=0)
    group_ids = credax.groups(
        jnp.repeat(jnp.arange(cfg.prompts, dtype=jnp.int32), cfg.group), num_groups=cfg.prompts
    )
    r: Rollout = rollout(model, targets, k_roll)
    B, K = r.scores.shape
    outcome = episode_return(task, r)
    values = jax.lax.stop_gradient(model.value(r.obs))
    turn_index = jnp.arange(K, dtype=jnp.int32)[None, :, None]
    token_turn = jnp.where(r.token_mask, turn_index, -1).reshape(B, -1)
    return Context(r, group_ids, outcome, values, token_turn, model, k_credit)


def train_step(graphdef, state, key, pool, index, methods: tuple[Method, ...], cfg: Config):
    """One training step of method ``methods[index]`` (``index`` traced: one program for all)."""
    model, opt = nnx.merge(graphdef, state)
    ctx = make_context(model, key, pool, cfg)
    r, outcome, token_turn = ctx.rollout, ctx.outcome, ctx.token_turn
    B, K = r.scores.shape
    # Only the selected branch runs (the index is not batched by the seed vmap).
    branches = [lambda m=m: m.credit(ctx, cfg.settings) for m in methods]
    adv = jax.lax.stop_gradient(jax.lax.switch(index, branches))
    batch = Batch(to_sequence(r, adv, token_turn), r.obs, outcome, r.turn_mask)
    tokens = jnp.sum(batch.policy.mask.astype(jnp.float32))
    dr_norm = jnp.asarray([m.agg == "seq-mean-token-sum-norm" for m in methods])[index]
    normalizer = jnp.where(dr_norm, jnp.float32(B * K * cfg.task.slots), tokens)
    uses_value = jnp.asarray([m.value_loss for m in methods])[index]
    value_coef = jnp.where(uses_value, jnp.float32(cfg.settings.value_coef), jnp.float32(0.0))
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    for _ in range(cfg.epochs):
        (loss, metrics), grads = grad_fn(model, batch, normalizer, value_coef, cfg)
        # optax's bias correction computes `decay ** int_count`, which strict dtype promotion (the
        # test suite's setting) refuses; everything else here is strict-clean.
        with jax.numpy_dtype_promotion("standard"):
            opt.update(model, grads)
    valid = jnp.maximum(jnp.sum(r.turn_mask.astype(jnp.float32)), 1.0)
    # Credit diagnostics: the mean advantage each method gives turns of each oracle role.
    is_role = r.turn_mask[..., None] & (r.roles[..., None] == jnp.arange(4, dtype=jnp.int32)[None, None])
    role_count = jnp.sum(is_role.astype(jnp.float32), axis=(0, 1))
    role_sum = jnp.sum(jnp.where(is_role, adv[..., None], 0.0), axis=(0, 1))
    info = dict(
        loss=loss,
        train_return=jnp.mean(outcome),
        train_success=jnp.mean((final_score(r) >= 1.0).astype(jnp.float32)),
        adv_abs=jnp.sum(jnp.abs(adv)) / valid,
        clip_frac=metrics.clip_frac_low + metrics.clip_frac_high,
        role_adv_sum=role_sum,
        role_count=role_count,
    )
    return nnx.state((model, opt)), info


class Runner:
    """The compiled programs of one configuration (one task): training every method and seed at
    once, held-out evaluation, and the credit lab's checkpoint evaluation.

    Training: the method is a traced index into ``methods`` (a ``lax.switch``) and each
    (method, seed) pair is one instance of a ``vmap``, so one compiled program trains every
    method and seed together in ``eval_every``-step chunks (``lax.scan``). Under the vmap every
    credit branch is computed for every instance and the instance's own is selected — cheap, as
    the credit math is small next to the rollout and the two optimisation epochs — except for
    the "true advantage" control, whose per-turn ground-truth branches would cost ``K`` rollouts
    per step for all instances: it trains in its own program (the index unbatched, only its branch
    runs). The lab program takes one seed axis and is called once per (method, checkpoint).
    """

    def __init__(self, cfg: Config, methods: tuple[Method, ...]):
        self.cfg, self.methods = cfg, tuple(methods)
        self.train_pool, self.eval_pool = E.split_targets(cfg.task)
        self.graphdef, _ = init(cfg, jax.random.key(0))
        graphdef, methods = self.graphdef, self.methods
        self.batched = tuple(m for m in methods if m.name != "true_adv")
        self.solo = tuple(m for m in methods if m.name == "true_adv")
        # The lab measures every method's credit, then the TCPO diagnostics (never trained).
        self.measured = methods + tuple(d for d in DIAGNOSTICS if d not in methods)

        def init_state(key):
            return init(cfg, key)[1]

        def chunk_of(group):
            def chunk(state, key, pool, index):
                def body(s, k):
                    return train_step(graphdef, s, k, pool, index, group, cfg)

                keys = jax.random.split(key, cfg.eval_every)
                return jax.lax.scan(body, state, keys)

            return chunk

        def ev(state, key, targets):
            model, _ = nnx.merge(graphdef, state)
            return evaluate(model, targets, key, cfg.eval_repeats)

        def lab(state, key, pool):
            model, _ = nnx.merge(graphdef, state)
            k_ctx, k_lab = jax.random.split(key)
            ctx = make_context(model, k_ctx, pool, cfg)
            return credit_eval(model, ctx, self.measured, cfg.settings, pairs=cfg.lab_pairs,
                               branches=cfg.lab_branches, key=k_lab)

        self.init_state = jax.jit(jax.vmap(init_state))
        self.chunk = jax.jit(jax.vmap(chunk_of(self.batched), in_axes=(0, 0, None, 0)))
        self.chunk_solo = jax.jit(jax.vmap(chunk_of(self.solo), in_axes=(0, 0, None, None)))
        self.evaluate = jax.jit(jax.vmap(ev, in_axes=(0, 0, None)))
        self.lab = jax.jit(jax.vmap(lab, in_axes=(0, 0, None)))

    def run(self, seeds, log=None, *, steps: int | None = None) -> dict:
        """Train every method on every seed; return ``{method name: Run}``.

        The same seed gives every method the same initial parameters, the same training prompts,
        the same evaluation keys and the same lab keys (common random numbers: differences
        between methods are not differences in the luck of the draw). ``log(stage, step, total,
        {name: Metrics})`` is called after every chunk.
        """
        cfg = self.cfg
        S = len(seeds)
        keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, dtype=jnp.uint32))
        fold = lambda ks, i: jax.vmap(lambda k: jax.random.fold_in(k, i))(ks)
        k_init, k_train, k_eval, k_lab = (fold(keys, i) for i in range(4))
        total = cfg.steps if steps is None else steps
        chunks = max(1, total // cfg.eval_every)
        marks = sorted(s for s in cfg.checkpoints if s <= chunks * cfg.eval_every)
        host = lambda x: jax.tree.map(np.asarray, x)
        state0 = self.init_state(k_init)
        lab0 = host(self.lab(state0, fold(k_lab, 0), self.train_pool)) if 0 in marks else None
        m0 = host(self.evaluate(state0, fold(k_eval, 0), self.eval_pool))
        out = {}
        for group, batched in [(self.batched, True), (self.solo, False)]:
            if not group:
                continue
            M = len(group)
            tile = lambda x, M=M: jnp.concatenate([x] * M, axis=0)  # instance i: method i // S
            state = jax.tree.map(tile, state0)
            index = jnp.repeat(jnp.arange(M, dtype=jnp.int32), S)
            split = lambda x, M=M: jax.tree.map(lambda a: a.reshape(M, S, *a.shape[1:]), x)
            curves = [[(0, m0)] for _ in range(M)]
            infos = [[] for _ in range(M)]
            labs = [({0: lab0} if lab0 is not None else {}) for _ in range(M)]
            for c in range(chunks):
                k_c = tile(fold(k_train, c))
                if batched:
                    state, info = self.chunk(state, k_c, self.train_pool, index)
                else:
                    state, info = self.chunk_solo(state, k_c, self.train_pool, jnp.int32(0))
                at = (c + 1) * cfg.eval_every
                ms = split(host(self.evaluate(state, tile(fold(k_eval, c + 1)), self.eval_pool)))
                info = split(jax.tree.map(lambda x: np.asarray(x).mean(axis=1), info))
                for i in range(M):
                    mi = jax.tree.map(lambda a, i=i: a[i], ms)
                    curves[i].append((at, mi))
                    ii = jax.tree.map(lambda a, i=i: a[i], info)
                    with np.errstate(invalid="ignore", divide="ignore"):
                        ii["role_adv"] = ii["role_adv_sum"] / ii["role_count"]
                    infos[i].append(ii)
                if at in marks:
                    for i in range(M):
                        si = jax.tree.map(lambda a, i=i: a[i * S:(i + 1) * S], state)
                        labs[i][at] = host(self.lab(si, fold(k_lab, at), self.train_pool))
                if log is not None:
                    log(at, chunks * cfg.eval_every, {m.name: curves[i][-1][1] for i, m in enumerate(group)})
            for i, m in enumerate(group):
                out[m.name] = Run(curves[i][-1][1], curves[i], infos[i], labs[i])
        return out


class Run(NamedTuple):
    final: Metrics  # per-seed held-out metrics after training
    curve: list  # [(step, Metrics)]
    infos: list  # per chunk: training diagnostics, means over the chunk
    labs: dict  # {checkpoint step: LabBatch} (host arrays, leading seed axis)


_RUNNERS: dict = {}


def get_runner(cfg: Config, methods: tuple[Method, ...]) -> Runner:
    """A cached :class:`Runner`: configurations that differ only in ``steps`` share one compiled
    program (``steps`` only sets how many chunks the Python loop runs; pass it to ``run``)."""
    key = (replace(cfg, steps=0), tuple(methods))
    if key not in _RUNNERS:
        _RUNNERS[key] = Runner(cfg, methods)
    return _RUNNERS[key]

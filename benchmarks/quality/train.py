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
from .methods import Context, Method, Settings
from .policy import SLOTS, Policy, Rollout, final_score, rollout


@dataclass(frozen=True)
class Config:
    """Everything that defines a run. Shared by every method; fixed before any comparison."""

    task: E.Task = E.Task()
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
    settings: Settings = field(default_factory=Settings)


class Metrics(NamedTuple):
    """Per-seed evaluation metrics (each ``f32[S]`` under the seed vmap)."""

    success: jax.Array  # final score == 1
    final_score: jax.Array
    best_turn: jax.Array  # best score over the episode's turns
    turns_to_success: jax.Array  # mean first-success turn (1-based) over episodes that succeed
    reached: jax.Array  # fraction of episodes that reach success at some turn
    length: jax.Array  # mean number of turns taken
    probes: jax.Array  # turns per episode that revealed a new symbol (exploration)
    regressions: jax.Array  # turns per episode that lowered the score


def evaluate(model: Policy, targets: jax.Array, key: jax.Array, repeats: int) -> Metrics:
    t = jnp.repeat(targets, repeats, axis=0)
    r = rollout(model, t, key)
    final = final_score(r)
    solved = r.turn_mask & (r.scores >= 1.0)
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
        final_score=f32(final),
        best_turn=f32(best),
        turns_to_success=tts,
        reached=f32(reached),
        length=f32(jnp.sum(r.turn_mask, axis=1)),
        probes=f32(jnp.sum(r.turn_mask & (r.roles == E.EXPLORATION), axis=1)),
        regressions=f32(jnp.sum(r.turn_mask & (r.roles == E.REGRESSION), axis=1)),
    )


class Batch(NamedTuple):
    """One optimisation batch: credax's ``PolicyBatch`` plus what the model and value loss read."""

    policy: credax.nnx.PolicyBatch  # tokens [B, 1 + 3K] (BOS + action tokens), per-turn credit
    obs: jax.Array  # f32[B, K, D] observations (the model's side input, like an encoder's)
    outcome: jax.Array  # f32[B] final score (value-head target)
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
        actions = tokens[:, 1:].reshape(B, -1, SLOTS)
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
    model = Policy(cfg.task, cfg.hidden, rngs=nnx.Rngs(params=key))
    opt = nnx.Optimizer(model, make_optimizer(cfg), wrt=nnx.Param)
    return nnx.split((model, opt))


def train_step(graphdef, state, key, pool, index, methods: tuple[Method, ...], cfg: Config):
    """One training step of method ``methods[index]`` (``index`` traced: one program for all)."""
    model, opt = nnx.merge(graphdef, state)
    task = cfg.task
    k_targets, k_roll, k_credit = jax.random.split(key, 3)
    prompt_targets = E.sample_train_targets(task, k_targets, cfg.prompts, pool)
    targets = jnp.repeat(prompt_targets, cfg.group, axis=0)
    group_ids = credax.groups(
        jnp.repeat(jnp.arange(cfg.prompts, dtype=jnp.int32), cfg.group), num_groups=cfg.prompts
    )
    r: Rollout = rollout(model, targets, k_roll)
    B, K = r.scores.shape
    outcome = final_score(r)
    values = jax.lax.stop_gradient(model.value(r.obs))
    turn_index = jnp.arange(K, dtype=jnp.int32)[None, :, None]
    token_turn = jnp.where(r.token_mask, turn_index, -1).reshape(B, -1)
    ctx = Context(r, group_ids, outcome, values, token_turn, model, k_credit)
    # Only the selected branch runs (the index is not batched by the seed vmap).
    branches = [lambda m=m: m.credit(ctx, cfg.settings) for m in methods]
    adv = jax.lax.stop_gradient(jax.lax.switch(index, branches))
    batch = Batch(to_sequence(r, adv, token_turn), r.obs, outcome, r.turn_mask)
    tokens = jnp.sum(batch.policy.mask.astype(jnp.float32))
    dr_norm = jnp.asarray([m.agg == "seq-mean-token-sum-norm" for m in methods])[index]
    normalizer = jnp.where(dr_norm, jnp.float32(B * K * SLOTS), tokens)
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
        train_score=jnp.mean(outcome),
        train_success=jnp.mean((outcome >= 1.0).astype(jnp.float32)),
        adv_abs=jnp.sum(jnp.abs(adv)) / valid,
        clip_frac=metrics.clip_frac_low + metrics.clip_frac_high,
        role_adv_sum=role_sum,
        role_count=role_count,
    )
    return nnx.state((model, opt)), info


class Runner:
    """The compiled program of one configuration: chunked training of any of ``methods`` and
    evaluation, vmapped over seeds.

    The method is a traced index into ``methods`` (``lax.switch``) and the seeds are traced keys,
    so the whole benchmark compiles three functions once — init, a chunk of ``eval_every``
    training steps, evaluation — whatever the number of methods and seeds. On two CPU cores XLA
    compilation, not training, would otherwise dominate the demo's wall time.
    """

    def __init__(self, cfg: Config, methods: tuple[Method, ...]):
        self.cfg, self.methods = cfg, tuple(methods)
        self.train_pool, self.eval_pool = E.split_targets(cfg.task)
        self.graphdef, _ = init(cfg, jax.random.key(0))
        graphdef, methods = self.graphdef, self.methods

        def init_state(key):
            return init(cfg, key)[1]

        def chunk(state, key, pool, index):
            def body(s, k):
                return train_step(graphdef, s, k, pool, index, methods, cfg)

            keys = jax.random.split(key, cfg.eval_every)
            return jax.lax.scan(body, state, keys)

        def ev(state, key, targets):
            model, _ = nnx.merge(graphdef, state)
            return evaluate(model, targets, key, cfg.eval_repeats)

        self.init_state = jax.jit(jax.vmap(init_state))
        self.chunk = jax.jit(jax.vmap(chunk, in_axes=(0, 0, None, None)))
        self.evaluate = jax.jit(jax.vmap(ev, in_axes=(0, 0, None)))

    def run(self, method: str | int, seeds, log=None, *, steps: int | None = None):
        """Train every seed with one method; return ``(final Metrics, [(step, Metrics)], info)``.

        The same seed gives every method the same initial parameters, the same training prompts
        and the same evaluation keys (common random numbers: differences between methods are not
        differences in luck of the draw of targets).
        """
        cfg = self.cfg
        index = method if isinstance(method, int) else [m.name for m in self.methods].index(method)
        keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, dtype=jnp.uint32))
        fold = lambda ks, i: jax.vmap(lambda k: jax.random.fold_in(k, i))(ks)
        k_init, k_train, k_eval = fold(keys, 0), fold(keys, 1), fold(keys, 2)
        state = self.init_state(k_init)
        m = jax.tree.map(np.asarray, self.evaluate(state, fold(k_eval, 0), self.eval_pool))
        curve = [(0, m)]
        infos = []
        chunks = max(1, (cfg.steps if steps is None else steps) // cfg.eval_every)
        idx = jnp.int32(index)
        for c in range(chunks):
            state, info = self.chunk(state, fold(k_train, c), self.train_pool, idx)
            m = jax.tree.map(np.asarray, self.evaluate(state, fold(k_eval, c + 1), self.eval_pool))
            info = jax.tree.map(lambda x: np.asarray(x).mean(axis=1), info)  # mean over the chunk
            # Mean advantage per oracle role over the chunk (NaN where a role never occurred).
            with np.errstate(invalid="ignore", divide="ignore"):
                info["role_adv"] = info["role_adv_sum"] / info["role_count"]
            curve.append(((c + 1) * cfg.eval_every, m))
            infos.append(info)
            if log is not None:
                log(self.methods[index], c + 1, chunks, m, info)
        return curve[-1][1], curve, infos


_RUNNERS: dict = {}


def get_runner(cfg: Config, methods: tuple[Method, ...]) -> Runner:
    """A cached :class:`Runner`: configurations that differ only in ``steps`` share one compiled
    program (``steps`` only sets how many chunks the Python loop runs; pass it to ``run``)."""
    key = (replace(cfg, steps=0), tuple(methods))
    if key not in _RUNNERS:
        _RUNNERS[key] = Runner(cfg, methods)
    return _RUNNERS[key]

"""The training loop: rollout, credit, clipped policy loss and adamw, compiled once per task.

One training step = sample ``prompts`` training-split targets, roll out ``group`` episodes each,
compute per-turn advantages ``[B, K]`` with the method's credax function, and take ``epochs`` adamw
steps on the clipped surrogate (``credax.nnx.policy_loss_fn`` → ``credax.policy_loss``, which
gathers each token's turn advantage through ``token_turn`` inside the fused loss). Every
(method, seed) pair is one instance of a ``vmap`` (``Runner``): the rollout and the optimisation of
all instances are one program each, and each method's credit runs on its own instances only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import credax

from . import env as E
from .methods import BASELINES, DIAGNOSTICS, Context, Method, Settings, outcome_rewards
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
    # The lab after step 0 measures the first ``lab_seeds`` seeds of each method only (0: all):
    # at step 0 every method shares one policy per seed, so the whole seed range costs one lab
    # per seed; after training each method's policy is its own, so each seed costs a lab per
    # method. The held-out success (the verdict) is measured on every seed.
    lab_seeds: int = 0
    # The lab after step 0 measures these methods only (empty: every method). After training
    # each (method, seed) costs its own ground truth, so the demo keeps these labs for the
    # headline methods, whose verdicts the guide reads; the step-0 lab (one per seed, shared by
    # every method) and every method's held-out success are unaffected.
    lab_methods: tuple[str, ...] = ()
    # Machine-independence probe: every method's training credit multiplied by ``1 + perturb·z``
    # (``z`` standard normal, fresh per step and instance) — a change of the last bits, the
    # in-process stand-in for another CPU's float reductions. 0: off.
    perturb: float = 0.0
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
    old_values: jax.Array  # f32[B, K] the value head at rollout time (value-loss clip anchor)
    returns: jax.Array  # f32[B, K] the value head's target (credax.gae_advantages returns)
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
    """credax's clipped policy loss on the action tokens, plus credax's clipped value loss.

    ``normalizer`` is the aggregation denominator: the batch's valid-token count (``token-mean``,
    every method but Dr. GRPO) or Dr. GRPO's constant ``sequences x max response tokens`` — the
    same ``Σ_{b,t} ℓ / normalizer`` as credax's ``seq-mean-token-sum-norm``, passed as a traced
    value so every method shares one compiled program. ``value_coef`` is 0 except for the
    learned-value baseline, whose head regresses on the GAE returns with ``credax.value_loss``
    (``½·max((V − R)², (clip(V, V_old ± c) − R)²)``, verl's clip ``c = 0.5``).
    """
    loss, metrics = credax.nnx.policy_loss_fn(
        model, batch.policy, apply=_apply(batch.obs),
        options=credax.LossOptions(agg="token-mean", normalizer=normalizer, clip_low=cfg.clip,
                                   clip_high=cfg.clip),
    )
    v = credax.value_loss(model.value(batch.obs), batch.old_values, batch.returns, batch.turn_mask,
                          clip=cfg.settings.value_clip)
    return loss + value_coef * v.loss, metrics


def make_optimizer(cfg: Config) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.adamw(cfg.lr, weight_decay=cfg.weight_decay),
    )


def init(cfg: Config, key: jax.Array):
    model = cfg.task.policy(cfg.hidden, rngs=nnx.Rngs(params=key))
    opt = nnx.Optimizer(model, make_optimizer(cfg), wrt=nnx.Param)
    return nnx.split((model, opt))


def graph_structure(cfg: Config):
    """The (model, optimizer) graph definition, traced abstractly: building the model eagerly
    would compile every initializer op by op (~6 s of CPU per task, measured), only to throw the
    numbers away."""
    box = []

    def build(key):
        graphdef, state = init(cfg, key)
        box.append(graphdef)
        return state

    jax.eval_shape(build, jax.random.key(0))
    return box[0]


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


# --- the three phases of a training step (each vmapped over (method, seed) instances) ----------


def rollout_phase(graphdef, state, key, pool, cfg: Config) -> Context:
    """One batch of the instance's policy (the context without the model: it is not an array)."""
    model, _ = nnx.merge(graphdef, state)
    return make_context(model, key, pool, cfg)._replace(model=None)


def credit_phase(graphdef, state, ctx: Context, method: Method, cfg: Config) -> jax.Array:
    """``f32[B, K]``: ``method``'s per-turn advantages on the batch (the model put back for the
    methods that resample from the policy: TCPO's counterfactuals, the true-advantage control)."""
    model, _ = nnx.merge(graphdef, state)
    out = method.credit(ctx._replace(model=model), cfg.settings)
    check_credit_shape(out, ctx.rollout.scores.shape, method.name)
    return jax.lax.stop_gradient(out)


def check_credit_shape(out, shape, name: str) -> None:
    """At trace time (free: shapes and dtypes are static), refuse a credit that is not one float
    array of ``shape``: ``--credit``'s check runs the function once, on one batch, and a function
    whose output changes on training's trace (Python state, a branch on a field the check's batch
    did not have) would otherwise end in a JAX broadcasting traceback minutes later."""
    where = (f"--credit {name}: in the training trace (one instance: B={shape[0]} rollouts, "
             f"K={shape[1]} turns)")
    if isinstance(out, list | tuple) or not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise ValueError(f"{where} it returned a {type(out).__name__}; return one array f32[B, K]")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{where} it returned shape {tuple(out.shape)}; expected [B, K] = "
                         f"{tuple(shape)} (the first-batch check passed: does the output depend on "
                         "Python state or on a field that differs between calls?)")
    if not jnp.issubdtype(out.dtype, jnp.floating):
        raise ValueError(f"{where} it returned dtype {out.dtype}; expected a float dtype (float32)")


def update_phase(graphdef, state, ctx: Context, adv, dr_norm, uses_value, cfg: Config):
    """``epochs`` adamw steps on the clipped surrogate of the batch with advantages ``adv``."""
    r, outcome = ctx.rollout, ctx.outcome
    B, K = r.scores.shape
    gae = credax.gae_advantages(outcome_rewards(r.turn_mask, outcome), ctx.values, r.turn_mask,
                                gamma=cfg.settings.value_gamma, lam=cfg.settings.value_lam)
    batch = Batch(to_sequence(r, adv, ctx.token_turn), r.obs, ctx.values, gae.returns, r.turn_mask)
    tokens = jnp.sum(batch.policy.mask.astype(jnp.float32))
    normalizer = jnp.where(dr_norm, jnp.float32(B * K * cfg.task.slots), tokens)
    value_coef = jnp.where(uses_value, jnp.float32(cfg.settings.value_coef), jnp.float32(0.0))
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)

    def epoch(st, _):
        model, opt = nnx.merge(graphdef, st)
        (loss, metrics), grads = grad_fn(model, batch, normalizer, value_coef, cfg)
        # optax's bias correction computes `decay ** int_count`, which strict dtype promotion (the
        # test suite's setting) refuses; everything else here is strict-clean.
        with jax.numpy_dtype_promotion("standard"):
            opt.update(model, grads)
        return nnx.state((model, opt)), (loss, metrics.clip_frac_low + metrics.clip_frac_high)

    state, (loss, clip) = jax.lax.scan(epoch, state, None, length=cfg.epochs)
    valid = jnp.maximum(jnp.sum(r.turn_mask.astype(jnp.float32)), 1.0)
    info = dict(
        loss=loss[-1],
        train_return=jnp.mean(outcome),
        train_success=jnp.mean((final_score(r) >= 1.0).astype(jnp.float32)),
        adv_abs=jnp.sum(jnp.abs(adv)) / valid,
        clip_frac=clip[-1],
    )
    return state, info


# XLA's CPU backend options per program. Compilation dominates a 2-core run for the big
# programs that hold every method's credit math, and running time for the small hot ones (the
# rollout, the optimisation epochs, the ground truth's branch rollouts): the credit programs
# compile at level 0 (~2x faster to compile, their run time is negligible), the hot ones at the
# default level 2 (~2x faster to run). The programs that sample episodes (the rollout, the
# held-out evaluation, the ground truth's branches, the true-advantage control) also turn off
# XLA's YNNPACK fusions: there the policy's small matmuls are fused with their elementwise
# neighbours into YNNPACK kernels that ran slower than XLA's own loops (refinement task, one
# call's CPU time, loaded: ground-truth core 1009 -> 551 ms, evaluation 1248 -> 857 ms; probe
# task 636 -> 477 ms and 91 -> 74 ms). The optimisation epochs keep them (refinement 1048 ->
# 952 ms without, but probe 668 -> 745 ms). The user's XLA_FLAGS still apply to everything else.
HOT = {"xla_backend_optimization_level": 2}
SAMPLING = {**HOT, "xla_cpu_experimental_ynn_fusion_type": ""}
COLD = {"xla_backend_optimization_level": 0}


class Runner:
    """The compiled programs of one configuration (one task) and the loop that drives them.

    Every (method, seed) pair is one instance of a ``vmap``: method ``i`` of ``methods`` owns the
    instances ``[o_i, o_i + S_i)``, its seeds ``0..S_i-1`` (``counts``: ``S_i`` per method, the
    headline methods more than the rest; ``None``: every method the ``run``'s seeds). A training
    step is three programs: the rollout of every
    instance (hot), every method's credit on its own instances only (one cold program holding
    each method's credit code once, applied to its static slice; the true-advantage control,
    whose per-turn branch rollouts are hot, has its own program), and the optimisation epochs of
    every instance (hot, the epochs a ``lax.scan``). The held-out evaluation and the credit lab
    (``checkpoint.py``) run on all instances at once; at step 0 every method's instances hold the same
    initial parameters and keys, so the lab's step-0 batch is the same for all of them.
    """

    def __init__(self, cfg: Config, methods: tuple[Method, ...], counts: tuple[int, ...] | None = None):
        from . import checkpoint

        self.cfg, self.methods = cfg, tuple(methods)
        self.counts = None if counts is None else tuple(int(c) for c in counts)
        if self.counts is not None and len(self.counts) != len(self.methods):
            raise ValueError(f"counts: {len(self.counts)} seed counts for {len(self.methods)} methods")
        # Seconds (wall, this thread, results waited for) per phase: where the run's time goes.
        self.timers: dict[str, float] = {}
        self.train_pool, self.eval_pool = E.split_targets(cfg.task)
        self.graphdef = graph_structure(cfg)
        gd, methods = self.graphdef, self.methods
        hot = lambda f: jax.jit(f, compiler_options=HOT)
        cold = lambda f: jax.jit(f, compiler_options=COLD)
        sampling = lambda f: jax.jit(f, compiler_options=SAMPLING)
        # The true-advantage controls: their credit is the policy's own branch rollouts, a hot
        # program per control (its N is static) instead of a slice of the cold credit program.
        self.solo = [i for i, m in enumerate(methods) if m.oracle]
        # Measured by the lab only: TCPO's parts and switches (on TCPO + hindsight's policy) and
        # the outcome baselines' variance comparison (on GRPO's policy).
        self.diagnostics = tuple(d for d in DIAGNOSTICS if d.name not in {m.name for m in methods})
        self.baselines = BASELINES

        self.init_state = hot(jax.vmap(lambda k: init(cfg, k)[1]))
        self.roll = sampling(jax.vmap(lambda st, k, pool: rollout_phase(gd, st, k, pool, cfg),
                                 in_axes=(0, 0, None)))

        def credits(states, ctx):
            spans = self._spans(ctx.outcome.shape[0])
            out = []
            for i, m in enumerate(methods):
                a, b = spans[i]
                sl = lambda x, a=a, b=b: x[a:b]
                if i in self.solo:
                    out.append(jnp.zeros_like(ctx.rollout.scores[a:b]))
                    continue
                out.append(jax.vmap(lambda st, c, m=m: credit_phase(gd, st, c, m, cfg))(
                    jax.tree.map(sl, states), jax.tree.map(sl, ctx)))
            return jnp.concatenate(out)

        def each(group):
            return lambda st, c: jnp.stack(
                [credit_phase(gd, st, c, m, cfg) for m in group]) if group else None

        self.credits = cold(credits)
        self.true_credit = {i: sampling(jax.vmap(lambda st, c, m=methods[i]: credit_phase(gd, st, c, m, cfg)))
                            for i in self.solo}
        self.diag_credits = cold(jax.vmap(each(self.diagnostics), out_axes=1))
        self.baseline_credits = cold(jax.vmap(each(self.baselines), out_axes=1))
        dr = np.asarray([m.agg == "seq-mean-token-sum-norm" for m in methods])
        uv = np.asarray([m.value_loss for m in methods])
        self._flags = (dr, uv)
        self.update = hot(jax.vmap(lambda st, c, a, d, u: update_phase(gd, st, c, a, d, u, cfg)))
        # 1 + perturb·z on every instance's training credit (Config.perturb), z from the step key.
        self.perturb = hot(jax.vmap(lambda a, k: a * (1.0 + cfg.perturb * jax.random.normal(
            jax.random.fold_in(k, 0x5EED), a.shape, a.dtype))))

        def ev(state, key, targets):
            model, _ = nnx.merge(gd, state)
            return evaluate(model, targets, key, cfg.eval_repeats)

        self.evaluate = sampling(jax.vmap(ev, in_axes=(0, 0, None)))
        self.lab_core = sampling(jax.vmap(lambda st, c, k: checkpoint.core(gd, st, c, k, cfg)))

    # --- driving the programs ----------------------------------------------------------------

    def _spans(self, total: int) -> list[tuple[int, int]]:
        """``[(start, stop)]``: the instances of each method among ``total``."""
        counts = self.counts or (total // len(self.methods),) * len(self.methods)
        if sum(counts) != total:
            raise ValueError(f"{total} instances for seed counts {counts}")
        ends = np.cumsum(counts)
        return [(int(e - c), int(e)) for c, e in zip(counts, ends, strict=True)]

    def _timed(self, phase, f, *args, **kw):
        t = time.perf_counter()
        out = jax.block_until_ready(f(*args, **kw))
        self.timers[phase] = self.timers.get(phase, 0.0) + time.perf_counter() - t
        return out

    def step_credit(self, states, ctx):
        """Every instance's own method's advantages ``f32[M·S, B, K]``."""
        adv = self.credits(states, ctx)
        spans = self._spans(ctx.outcome.shape[0])
        for i in self.solo:
            a, b = spans[i]
            sl = lambda x, a=a, b=b: x[a:b]
            true = self.true_credit[i](jax.tree.map(sl, states), jax.tree.map(sl, ctx))
            adv = jnp.concatenate([adv[:a], true, adv[b:]])
        return adv

    def lab(self, states, keys, *, shared: bool = False) -> dict:
        """The credit lab on every instance's own policy: ``{method name: checkpoint.LabBatch}``.
        ``shared``: every method's instances hold the same parameters (step 0): one lab per seed
        serves every method, on all its seeds; otherwise each method's first ``cfg.lab_seeds``
        seeds (all when 0)."""
        from . import checkpoint

        spans = self._spans(states_leading(states))
        ctx = self.roll(states, keys, self.train_pool)
        adv = np.asarray(self.step_credit(states, ctx))  # the true-advantage controls' own too
        names = {m.name: i for i, m in enumerate(self.methods)
                 if shared or not self.cfg.lab_methods or m.name in self.cfg.lab_methods}
        cap = lambda n: n if shared or not self.cfg.lab_seeds else min(n, self.cfg.lab_seeds)
        span = lambda i: (spans[i][0], spans[i][0] + cap(spans[i][1] - spans[i][0]))
        def sl(x, i):
            lo, hi = span(i)
            return jax.tree.map(lambda a: a[lo:hi], x)

        extra = {}
        for host, group, fn in [("tcpo_hindsight", self.diagnostics, self.diag_credits),
                                ("grpo", self.baselines, self.baseline_credits)]:
            if group and host in names:
                i = names[host]
                extra[host] = (group, np.asarray(fn(sl(states, i), sl(ctx, i))))
        # The device part runs in chunks of the smallest method's seed count (one compiled shape
        # for every call). At step 0 every method holds the same parameters and keys, so the
        # method with the most seeds serves all of them (the others take its first seeds). Each
        # core is assembled at once and dropped: its per-turn gradient rows ([S, B·K, D], ~140 MB
        # at the default size for 5 seeds) are the big part.
        chunk = min(cap(spans[i][1] - spans[i][0]) for i in names.values())

        def core_of(i):
            a, b = span(i)
            parts = []
            for c in range(a, b, chunk):
                sub = lambda x, c=c: jax.tree.map(lambda v: v[c:min(c + chunk, b)], x)
                parts.append(jax.tree.map(np.asarray, self.lab_core(sub(states), sub(ctx), sub(keys))))
            return parts[0] if len(parts) == 1 else jax.tree.map(lambda *v: np.concatenate(v), *parts)

        out, shared_core = {}, None
        if shared:
            widest = max(range(len(spans)), key=lambda i: spans[i][1] - spans[i][0])
            shared_core = core_of(widest)
        for m, i in names.items():
            a, b = span(i)
            core = core_of(i) if shared_core is None else jax.tree.map(lambda v, n=b - a: v[:n], shared_core)
            rows = [(m, adv[a:b])]
            if m in extra:
                group, credit = extra[m]
                rows += [(d.name, credit[j]) for j, d in enumerate(group)]
            out[m] = checkpoint.assemble(core, rows)
            del core
        return out

    def run(self, seeds, log=None, *, steps: int | None = None) -> dict:
        """Train every method on every seed; return ``{method name: Run}``.

        The same seed gives every method the same initial parameters, the same training prompts,
        the same evaluation keys and the same lab keys (common random numbers: differences
        between methods are not differences in the luck of the draw). ``log(step, total,
        {name: Metrics})`` is called after every ``eval_every`` steps.
        """
        cfg, methods = self.cfg, self.methods
        M = len(self.methods)
        counts = self.counts or (len(seeds),) * M
        if max(counts) > len(seeds):
            raise ValueError(f"seed counts {counts} need {max(counts)} seeds; got {len(seeds)}")
        keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, dtype=jnp.uint32))
        fold = lambda ks, i: jax.vmap(lambda k: jax.random.fold_in(k, i))(ks)
        # Per seed -> per instance: method i's instances are its seeds 0..S_i-1.
        take = jnp.asarray(np.concatenate([np.arange(c) for c in counts]))
        tile = lambda x: jax.tree.map(lambda a: a[take], x)
        bounds = np.cumsum((0,) + tuple(counts))
        k_init, k_train, k_eval, k_lab = (fold(keys, i) for i in range(4))
        total = cfg.steps if steps is None else steps
        chunks = 0 if total == 0 else max(1, total // cfg.eval_every)  # 0 steps: the step-0 lab only
        marks = sorted(s for s in cfg.checkpoints if s <= chunks * cfg.eval_every)
        host = lambda x: jax.tree.map(np.asarray, x)
        split = lambda x: [jax.tree.map(lambda a, i=i: a[bounds[i]:bounds[i + 1]], x) for i in range(M)]
        dr, uv = (jnp.asarray(np.repeat(f, counts)) for f in self._flags)
        states = tile(self._timed("init", self.init_state, k_init))
        curves = [[] for _ in range(M)]
        infos = [[] for _ in range(M)]
        labs = [{} for _ in range(M)]

        def measure(at):
            ms = split(host(self._timed("evaluate", self.evaluate, states,
                                        tile(fold(k_eval, at // cfg.eval_every)), self.eval_pool)))
            for i in range(M):
                curves[i].append((at, ms[i]))
            if at in marks:
                t = time.perf_counter()
                lb = self.lab(states, tile(fold(k_lab, at)), shared=at == 0)
                self.timers[f"lab@{at}"] = self.timers.get(f"lab@{at}", 0.0) + time.perf_counter() - t
                for i, m in enumerate(methods):
                    if m.name in lb:  # Config.lab_methods: after step 0, some methods only
                        labs[i][at] = lb[m.name]

        measure(0)
        for c in range(chunks):
            chunk_info = []
            # Step k's key: split(fold(k_train, chunk), eval_every)[k], per seed.
            step_keys = jax.vmap(lambda kk: jax.random.split(kk, cfg.eval_every))(fold(k_train, c))
            for k in range(cfg.eval_every):
                k_step = tile(step_keys[:, k])
                ctx = self._timed("rollout", self.roll, states, k_step, self.train_pool)
                adv = self._timed("credit", self.step_credit, states, ctx)
                if cfg.perturb:
                    adv = self.perturb(adv, k_step)
                states, info = self._timed("update", self.update, states, ctx, adv, dr, uv)
                chunk_info.append(info)
            at = (c + 1) * cfg.eval_every
            info = split(host(jax.tree.map(lambda *xs: jnp.mean(jnp.stack(xs), axis=0), *chunk_info)))
            for i in range(M):
                infos[i].append(info[i])
            measure(at)
            if log is not None:
                log(at, chunks * cfg.eval_every, {m.name: curves[i][-1][1] for i, m in enumerate(methods)})
        return {m.name: Run(curves[i][-1][1], curves[i], infos[i], labs[i]) for i, m in enumerate(methods)}


def states_leading(states) -> int:
    return jax.tree.leaves(states)[0].shape[0]


class Run(NamedTuple):
    final: Metrics  # per-seed held-out metrics after training
    curve: list  # [(step, Metrics)]
    infos: list  # per eval_every steps: training diagnostics, means over those steps
    labs: dict  # {checkpoint step: LabBatch} (host arrays, leading seed axis)


_RUNNERS: dict = {}


def get_runner(cfg: Config, methods: tuple[Method, ...], counts: tuple[int, ...] | None = None) -> Runner:
    """A cached :class:`Runner`: configurations that differ only in ``steps`` share the compiled
    programs (``steps`` only sets how many steps the Python loop runs; pass it to ``run``)."""
    key = (replace(cfg, steps=0), tuple(methods), None if counts is None else tuple(counts))
    if key not in _RUNNERS:
        _RUNNERS[key] = Runner(cfg, methods, counts)
    return _RUNNERS[key]

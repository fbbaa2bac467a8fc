"""The credit methods compared, each a function from a rollout batch to per-turn advantages.

Every method maps the same :class:`Context` (one rollout batch and what can be computed from it) to
``advantages: float32[B, K]``, ``0`` on padded turns, using credax for all of the credit math. The
loop then broadcasts the turn advantages to the action tokens and applies the same clipped policy
loss to every method. Per-method settings are the papers' or SPEC's defaults, written next to
each method; nothing was tuned per method.

Shared definitions:
- outcome = the episode return: the verifier score after the last real turn (a partial answer
  earns partial credit) minus the task's per-turn cost (0 on the probe task, see ``refine.py``);
- score change (MT-GRPO's turn reward, GiGPO's step reward) = ``s_k - s_{k-1}`` with ``s_{-1} = 0``
  (credax.adjacent_delta_credit);
- roles come from a judge in ``judges.py``; the oracle is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

import credax
from credax._batch import TurnBatch
from credax._registry import CALLS

from . import groundtruth, judges
from .policy import Policy, Rollout, final_score, sampling_noise


@dataclass(frozen=True)
class Settings:
    """Per-method hyperparameters (SPEC / paper defaults), the same for every task and seed."""

    triage_lam: float = 0.2  # TRIAGE λ (SPEC §5 default; the paper's ALFWorld value)
    scalar_lam: float = 0.2  # scalar process-reward baseline: the same λ as TRIAGE
    mt_turn_coef: float = 1.0  # MT-GRPO turn_advantage_coef (repo default)
    faca_reaction_coef: float = 1.0  # FACA's reaction weight (credax's default; no public code)
    gigpo_gamma: float = 0.95  # GiGPO γ (verl-agent scripts)
    gigpo_omega: float = 1.0  # GiGPO ω (verl-agent scripts)
    # Learned-value baseline: GAE over turns (γ = λ = 1: the advantage is outcome − V(turn)) and
    # credax.value_loss, ½·clipped squared error, verl's clip 0.5; weight 1 keeps the value
    # head's earlier weight (0.5 × mean squared error).
    value_coef: float = 1.0
    value_clip: float = 0.5
    value_gamma: float = 1.0
    value_lam: float = 1.0
    cf_alternatives: int = 4  # TCPO: M alternatives per selected turn
    cf_budget: int = 16  # TCPO: Top-L selected turns per batch (scope="batch", SPEC default)


class Context(NamedTuple):
    rollout: Rollout
    groups: credax.Groups  # prompt of each row
    outcome: jax.Array  # f32[B] episode return (final score - per-turn cost)
    values: jax.Array  # f32[B, K] V(observation) of the rollout policy (stop-gradient)
    token_turn: jax.Array  # i32[B, T] turn of each action token, -1 for unused slots
    model: Policy  # the rollout policy (for counterfactual resampling)
    key: jax.Array


@dataclass(frozen=True)
class Method:
    name: str
    label: str  # what the tables and plots show
    credit: Callable  # (Context, Settings) -> f32[B, K]
    agg: str = "token-mean"  # loss aggregation (Dr. GRPO changes it; the rest use the default)
    value_loss: bool = False  # train the value head (learned-value baseline only)
    # True-advantage controls: branch pairs per turn of the ground-truth estimate they train on
    # (0 for every other method). Their credit needs the policy's own branch rollouts, so each
    # N has a compiled program of its own (train.Runner).
    oracle: int = 0
    # The lab's kinds of method. ``unbiased``: an outcome-only estimator of the return's advantage
    # (a baseline that does not depend on the action) — what the true-advantage ceiling is
    # compared with; ``control``: a check on the lab itself (true advantage, shuffled credit),
    # left out of the across-method analyses.
    unbiased: bool = False
    control: bool = False
    # ``bonus``: adds a hand-set per-turn bonus (a role constant, a scalar progress reward) to an
    # outcome advantage — it can win by shaping the reward instead of by tracking A*.
    bonus: bool = False


def _mask(ctx: Context, x: jax.Array) -> jax.Array:
    return jnp.where(ctx.rollout.turn_mask, x, jnp.zeros_like(x))


def _per_turn(ctx: Context, a: jax.Array) -> jax.Array:
    """An outcome advantage ``[B]`` given to every real turn of its trajectory."""
    return _mask(ctx, jnp.broadcast_to(a[:, None], ctx.rollout.scores.shape))


def _score_change(ctx: Context) -> jax.Array:
    return credax.adjacent_delta_credit(ctx.rollout.scores, ctx.rollout.turn_mask)


def turn_batch(ctx: Context, **fields) -> TurnBatch:
    """The rollout batch as the call table's input (``credax.testing.calls``): the outcome as the
    row's reward, the score change as the per-turn reward, every row real; ``fields`` replace
    fields (another step reward, the judge's roles, ...)."""
    r = ctx.rollout
    batch = TurnBatch(scores=r.scores, turn_mask=r.turn_mask, group_ids=ctx.groups,
                      rewards=ctx.outcome, roles=r.roles, token_turn=ctx.token_turn,
                      rows=jnp.ones(ctx.outcome.shape, bool), anchors=r.anchors,
                      turn_rewards=_score_change(ctx))
    return batch._replace(**fields)


# --- outcome-only baselines --------------------------------------------------------------------


def grpo(ctx: Context, s: Settings) -> jax.Array:
    """GRPO: the group-normalised final score on every turn (DeepSeekMath; verl conventions)."""
    return _per_turn(ctx, CALLS["grpo_advantages"](turn_batch(ctx)))


def dr_grpo(ctx: Context, s: Settings) -> jax.Array:
    """Dr. GRPO: centred, not std-scaled (with the sequence-sum loss aggregation, see METHODS)."""
    return _per_turn(ctx, CALLS["grpo_advantages"](
        turn_batch(ctx), normalization=credax.Normalization(scale="none")))


def rloo(ctx: Context, s: Settings) -> jax.Array:
    """RLOO: final score minus the mean of the other rollouts of the prompt."""
    return _per_turn(ctx, CALLS["rloo_advantages"](turn_batch(ctx)))


# --- step-level baselines ----------------------------------------------------------------------


def mt_grpo(ctx: Context, s: Settings) -> jax.Array:
    """MT-GRPO (K-turn form): outcome advantage + per-(prompt, turn) normalised score change."""
    return CALLS["mt_grpo_advantages"](turn_batch(ctx), turn_coef=s.mt_turn_coef)


def faca(ctx: Context, s: Settings) -> jax.Array:
    """FACA (``credax.faca_advantages``): outcome advantage + the reaction to each turn normalised
    per (prompt, turn). The lab has no user: the verifier's feedback before the next turn (the
    score change) stands for the reaction, and the last real turn, which no turn follows, has none
    (the default ``reaction_mask``); reaction weight 1."""
    return CALLS["faca_advantages"](turn_batch(ctx), reaction_coef=s.faca_reaction_coef)


def gigpo(ctx: Context, s: Settings) -> jax.Array:
    """GiGPO: episode advantage + ω × step advantage within anchor-state groups.

    Anchor = int32 hash of the observation before the turn (answer, revealed symbols, turn index),
    compared within the prompt; step reward = score change, discounted with γ = 0.95.
    """
    return CALLS["gigpo_advantages"](turn_batch(ctx), gamma=s.gigpo_gamma, omega=s.gigpo_omega)


def outcome_rewards(turn_mask: jax.Array, outcome: jax.Array) -> jax.Array:
    """``f32[B, K]``: the episode return on each row's last real turn, ``0`` elsewhere (the reward
    layout whose undiscounted GAE with ``λ = 1`` is ``outcome − V`` at every turn)."""
    K = turn_mask.shape[1]
    last = jnp.sum(turn_mask.astype(jnp.int32), axis=1) - 1
    return jnp.where(jnp.arange(K, dtype=jnp.int32)[None] == last[:, None], outcome[:, None], 0.0)


def value_baseline(ctx: Context, s: Settings) -> jax.Array:
    """Learned value baseline: turn-level GAE (``credax.gae_advantages``, each turn one step, the
    return on the last turn, γ = λ = 1: ``outcome − V(observation)``), V a head on the shared
    trunk trained with ``credax.value_loss`` on the GAE returns (TRIAGE's outcome-supervised
    shared-backbone value comparison)."""
    r = ctx.rollout
    return credax.gae_advantages(outcome_rewards(r.turn_mask, ctx.outcome), ctx.values, r.turn_mask,
                                 gamma=s.value_gamma, lam=s.value_lam).advantages


def hgpo(ctx: Context, s: Settings) -> jax.Array:
    """HGPO with verl-agent's shipped configuration (``credax.presets.hgpo_verl_agent``: history
    2, γ 0.95, level weights (k+1)^1, population std, no episode level), groups keyed on the
    last k anchor hashes within the prompt; step reward = score change, plus the episode's turn
    costs (``outcome − final score``: 0 on the probe task) on its last turn, so the undiscounted
    sum of the step rewards is the episode return."""
    r = ctx.rollout
    step = _score_change(ctx) + outcome_rewards(r.turn_mask, ctx.outcome - final_score(r))
    return CALLS["hgpo_advantages"](turn_batch(ctx, turn_rewards=step),
                                    fn=credax.presets.hgpo_verl_agent)


def turn_baseline(ctx: Context, s: Settings) -> jax.Array:
    """The turn-count-unbiased turn baseline (``credax.unbiased_turn_advantages``, verl RFC
    #7244): each turn's return to go (score changes from that turn on, minus the task's cost of
    each turn taken: they sum to the episode return) minus the mean return to go of the *other*
    rollouts of the prompt that reached the same turn. The baseline never depends on the row's
    own later actions, so the expected gradient is the return's policy gradient: an unbiased
    method that still tells the turns of one rollout apart."""
    r = ctx.rollout
    turns = jnp.maximum(jnp.sum(r.turn_mask.astype(jnp.float32), axis=1), 1.0)
    cost = (final_score(r) - ctx.outcome) / turns  # the task's per-turn cost (0 on the probe task)
    step = jnp.where(r.turn_mask, _score_change(ctx) - cost[:, None], 0.0)
    return CALLS["unbiased_turn_advantages"](turn_batch(ctx, turn_rewards=step))


def turn_baseline_outcome(ctx: Context, s: Settings) -> jax.Array:
    """The turn-count-unbiased baseline with the past return added back (a mechanism probe for
    the ``turn_baseline`` puzzle): ``credax.unbiased_turn_advantages`` on the outcome placed on
    the last real turn, so every turn's "return to go" is the whole return ``R_i`` and the credit
    is ``R_i − mean_{peers at turn t} R_j``. The baseline is the same peer set's, still built
    from other rollouts only (unbiased); what changes is that the turn's credit no longer drops
    the return already earned before it, the part that ties ``turn_baseline``'s credit to the
    state (a rollout that has earned much has little left to earn)."""
    r = ctx.rollout
    return CALLS["unbiased_turn_advantages"](
        turn_batch(ctx, turn_rewards=outcome_rewards(r.turn_mask, ctx.outcome)))


def g2po(ctx: Context, s: Settings) -> jax.Array:
    """G2PO (``credax.g2po_advantages``): the episode advantage plus the per-prompt state graph's
    edge advantage, states = the anchor hashes GiGPO uses; the terminal success value is the
    task's success return 1 (the refinement task's turn costs keep every return below it, so
    there every terminal value is 0), the rest the shipped code's defaults."""
    return _mask(ctx, CALLS["g2po_advantages"](turn_batch(ctx), success_reward=1.0))


# --- verl's outcome estimators with a token whitening (lab methods, not in the default demo) ------
# The lab's credit is per turn, so each turn stands for one token here: the whitening is over the
# batch's valid turns instead of its valid tokens (a turn's tokens all get its value anyway).


def reinforce_pp(ctx: Context, s: Settings) -> jax.Array:
    """REINFORCE++ (``credax.reinforce_pp_advantages``): the return on the last turn, returns to go
    (γ = 1: the episode return at every turn), whitened over the batch's valid turns."""
    r = ctx.rollout
    rewards = outcome_rewards(r.turn_mask, ctx.outcome)
    return _mask(ctx, credax.reinforce_pp_advantages(rewards, r.turn_mask))


def reinforce_pp_baseline(ctx: Context, s: Settings) -> jax.Array:
    """REINFORCE++-baseline (``credax.reinforce_pp_baseline_advantages``): prompt-centred return,
    whitened over the batch's valid turns."""
    r = ctx.rollout
    return _mask(ctx, credax.reinforce_pp_baseline_advantages(ctx.outcome, ctx.groups, r.turn_mask))


def gpg(ctx: Context, s: Settings) -> jax.Array:
    """GPG (``credax.gpg_advantages``): prompt-centred return times the batch's inverse share of
    nonzero returns, on every turn."""
    return _per_turn(ctx, CALLS["gpg_advantages"](turn_batch(ctx)))


# --- shrinkage baselines (James–Stein; arXiv 2511.03710) ---------------------------------------


def shrink(ctx: Context, s: Settings) -> jax.Array:
    """Dr. GRPO with credax's shrinkage baseline: ``r − b``, ``b`` the prompt mean shrunk toward
    the across-prompt mean (``credax.shrinkage_advantages``; unscaled, Dr. GRPO's aggregation)."""
    return _per_turn(ctx, CALLS["shrinkage_advantages"](turn_batch(ctx)))


def shrink_rloo(ctx: Context, s: Settings) -> jax.Array:
    """RLOO with the shrinkage baseline: the mean of the other rows, shrunk toward the
    across-prompt mean (``credax.shrinkage_advantages(leave_one_out=True)``)."""
    return _per_turn(ctx, CALLS["shrinkage_advantages"](turn_batch(ctx), leave_one_out=True))


def scalar_process(ctx: Context, s: Settings) -> jax.Array:
    """Scalar process-reward baseline: GRPO + λ·p, with p = the score change in units of one
    position (+1 one more position right, -1 one fewer, 0 otherwise): the dense scalar a judge
    grading progress would give. It cannot see exploration (probes get 0)."""
    r = ctx.rollout
    p = _score_change(ctx) * jnp.float32(r.before.target.shape[-1])
    return CALLS["scalar_process_advantages"](turn_batch(ctx, scores=p), lam=s.scalar_lam)


# --- TRIAGE ------------------------------------------------------------------------------------


def triage(judge, constants=credax.TRIAGE_ROLE_CONSTANTS, what: str = ""):
    def credit(ctx: Context, s: Settings) -> jax.Array:
        r = ctx.rollout
        roles = judge(r.roles, r.turn_mask, ctx.key)
        return CALLS["triage_advantages"](turn_batch(ctx, roles=roles), lam=s.triage_lam,
                                          constants=constants)

    credit.__doc__ = (f"TRIAGE: GRPO + λ·c[role], roles from the {judge.__name__} judge, constants "
                      f"(c_D, c_E, c_N, c_R) = {tuple(constants)}{what}.")
    return credit


# --- bias controls: does a role bonus win by tracking A* or by shaping the reward? ---------------


def shuffle_within_rows(x: jax.Array, turn_mask: jax.Array, key: jax.Array) -> jax.Array:
    """``x`` with each row's valid entries randomly permuted among that row's valid positions
    (``-1`` elsewhere): the same multiset of labels per rollout, on the wrong turns."""
    B, K = x.shape
    u = jnp.where(turn_mask, jax.random.uniform(key, (B, K)), 2.0)
    order = jnp.argsort(u, axis=1)  # each row's valid positions first, in random order
    slots = jnp.argsort(jnp.where(turn_mask, jnp.arange(K)[None], K + jnp.arange(K)[None]), axis=1)
    picked = jnp.take_along_axis(x, order, axis=1)
    out = jnp.zeros_like(x).at[jnp.arange(B)[:, None], slots].set(picked)
    return jnp.where(turn_mask, out, -1)


def shuffled_roles(roles, turn_mask, key):
    """A judge that knows how many turns of each role a rollout has, but not which turns: the
    oracle's labels permuted within each rollout. TRIAGE with it keeps every rollout's total
    role bonus (the shaping) and loses the per-turn information (the credit)."""
    return shuffle_within_rows(judges.oracle(roles, turn_mask), turn_mask, jax.random.fold_in(key, 11))


# --- TCPO --------------------------------------------------------------------------------------


def tcpo_retrospective(ctx: Context, s: Settings) -> jax.Array:
    """TCPO, retrospective credit only (hindsight weight 0), normalised per (prompt, turn)."""
    return CALLS["tcpo_advantages"](turn_batch(ctx), hindsight_weight=0.0)


def tcpo_hindsight(ctx: Context, s: Settings) -> jax.Array:
    """TCPO, retrospective + hindsight delayed credit (SPEC defaults)."""
    return CALLS["tcpo_advantages"](turn_batch(ctx))


def counterfactuals(ctx: Context, s: Settings):
    """Real fixed-history counterfactuals at the Top-L most surprising hindsight-eligible turns.

    Selection: ``select_top_surprisal`` over the batch on the mean token surprisal of each turn,
    among the turns hindsight would credit (non-improving, before success). At each selected turn
    the environment state before the turn is restored, ``M`` alternative actions are decoded from
    the rollout policy and the verifier scores them. Static shapes: exactly ``budget`` slots, the
    unused ones dropped by an out-of-range scatter.

    Returns ``(alt_scores f32[B,K,M], alt_mask bool[B,K,M], selected bool[B,K])``.
    """
    r = ctx.rollout
    B, K = r.scores.shape
    M, budget = s.cf_alternatives, s.cf_budget
    task = ctx.model.task
    logp = r.logp.reshape(B, -1)
    surprisal = credax.turn_surprisal(logp, ctx.token_turn, num_turns=K)
    prior = credax.best_prior(r.scores, r.turn_mask)
    eligible = r.turn_mask & (prior < 1.0) & (r.scores <= prior)
    selected = credax.select_top_surprisal(surprisal, eligible, budget=budget, scope="batch")
    flat = jnp.nonzero(selected.reshape(-1), size=budget, fill_value=B * K)[0]
    used = flat < B * K
    at = jnp.minimum(flat, B * K - 1)
    before = jax.tree.map(lambda x: x.reshape(B * K, *x.shape[2:])[at], r.before)
    # M copies of each selected state: [budget, M, ...].
    rep = jax.tree.map(lambda x: jnp.repeat(x[:, None], M, axis=1), before)
    obs = task.observe(rep)
    tokens, _ = ctx.model.sample(obs, sampling_noise(task, ctx.key, (budget, M)))
    _, info = task.step(rep, tokens)
    alt = jnp.zeros((B * K + 1, M), jnp.float32).at[flat].set(info.score, mode="drop")[:-1]
    alt_mask = jnp.zeros((B * K + 1, M), bool).at[flat].set(
        jnp.broadcast_to(used[:, None], (budget, M)), mode="drop"
    )[:-1]
    return alt.reshape(B, K, M), alt_mask.reshape(B, K, M), selected


def tcpo_full(ctx: Context, s: Settings) -> jax.Array:
    """Full TCPO: retrospective + hindsight, refined by counterfactuals at Top-L surprisal turns."""
    alt, alt_mask, selected = counterfactuals(ctx, s)
    return CALLS["tcpo_advantages"](turn_batch(ctx, alt_scores=alt, alt_mask=alt_mask),
                                    selected=selected)


# --- controls: the lab checking itself -----------------------------------------------------------


def true_advantage(n: int):
    """Control: the ground-truth estimator as the credit (``groundtruth.per_turn_estimate``: the
    mean of ``n`` common-random-number branch pairs at every turn, unbiased, noise ``∝ 1/n``),
    scaled by its batch RMS so its size is that of a z-scored advantage. The lab measures the
    credit it trains on, on the checkpoint batch with its own branch noise, against the lab's
    independent ``N``-pair ``Â*``: its correlation is measured, not 1 by construction."""

    def credit(ctx: Context, s: Settings) -> jax.Array:
        r = ctx.rollout
        a = groundtruth.per_turn_estimate(ctx.model, r.before, r.tokens, r.turn_mask, ctx.key, n)
        count = jnp.maximum(jnp.sum(r.turn_mask.astype(jnp.float32)), 1.0)
        rms = jnp.sqrt(jnp.sum(jnp.square(a)) / count)
        return _mask(ctx, a / (rms + 1e-6))

    credit.__doc__ = f"Control: the true advantage estimated with {n} branch pairs per turn."
    return credit


def shuffle_valid(x: jax.Array, turn_mask: jax.Array, key: jax.Array) -> jax.Array:
    """``x`` with its valid entries randomly permuted among the valid positions; ``0`` elsewhere."""
    flat, valid = x.reshape(-1), turn_mask.reshape(-1)
    n = flat.shape[0]
    order = jnp.argsort(jnp.where(valid, jax.random.uniform(key, (n,)), 2.0))  # valid, random order
    slots = jnp.argsort(jnp.where(valid, jnp.arange(n), n + jnp.arange(n)))  # valid positions first
    out = jnp.zeros_like(flat).at[slots].set(jnp.where(valid[order], flat[order], 0.0))
    return jnp.where(valid, out, 0.0).reshape(x.shape)


def shuffled(ctx: Context, s: Settings) -> jax.Array:
    """Control: GRPO's per-turn advantages permuted over the valid turns of the batch (the same
    values, no relation to the turns they land on: correlation with A* ≈ 0)."""
    return shuffle_valid(grpo(ctx, s), ctx.rollout.turn_mask, jax.random.fold_in(ctx.key, 7))


C_D, C_E, C_N, C_R = credax.TRIAGE_ROLE_CONSTANTS
EXPLORATION_ONLY = (0.0, C_E, 0.0, 0.0)  # TRIAGE's exploration bonus and nothing else
NO_EXPLORATION = (C_D, 0.0, C_N, C_R)  # TRIAGE's constants with the exploration bonus removed

# Trained in `make demo`, except OFF_DEMO (the demo's 4-minute budget): Dr. GRPO, RLOO and the
# RLOO-form shrinkage train in `--preset oracle` (same seeds and sizes: the same numbers), the
# p = 0.4 judge with `--methods`.
OFF_DEMO = ("dr_grpo", "rloo", "shrink_rloo", "triage_p04")

ALL_METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        Method("grpo", "GRPO", grpo, unbiased=True),
        Method("dr_grpo", "Dr. GRPO", dr_grpo, agg="seq-mean-token-sum-norm", unbiased=True),
        Method("rloo", "RLOO", rloo, unbiased=True),
        Method("mt_grpo", "MT-GRPO", mt_grpo),
        Method("shrink", "shrinkage baseline (Dr. GRPO form)", shrink, agg="seq-mean-token-sum-norm",
               unbiased=True),
        Method("shrink_rloo", "shrinkage baseline (RLOO form)", shrink_rloo, unbiased=True),
        Method("gigpo", "GiGPO", gigpo),
        Method("turn_baseline", "turn-count-unbiased turn baseline", turn_baseline, unbiased=True),
        Method("hgpo", "HGPO (verl-agent preset)", hgpo),
        Method("value", "value baseline", value_baseline, value_loss=True, unbiased=True),
        Method("scalar_prm", "scalar process reward", scalar_process, bonus=True),
        Method("triage", "TRIAGE (oracle judge)", triage(judges.oracle), bonus=True),
        Method("triage_p02", "TRIAGE (p=0.2 judge)", triage(judges.noisy(0.2)), bonus=True),
        Method("triage_p04", "TRIAGE (p=0.4 judge)", triage(judges.noisy(0.4)), bonus=True),
        Method("triage_blind", "TRIAGE (regression-blind)", triage(judges.regression_blind), bonus=True),
        Method("triage_shuffled", "bias control: TRIAGE, roles shuffled in each rollout",
               triage(shuffled_roles), bonus=True),
        Method("explore_only", "bias control: GRPO + exploration bonus only",
               triage(judges.oracle, EXPLORATION_ONLY), bonus=True),
        Method("triage_no_explore", "bias control: TRIAGE with c_E = 0",
               triage(judges.oracle, NO_EXPLORATION), bonus=True),
        Method("tcpo_retro", "TCPO retrospective", tcpo_retrospective),
        Method("tcpo_hindsight", "TCPO + hindsight", tcpo_hindsight),
        Method("tcpo_full", "TCPO full (+counterfactual)", tcpo_full),
        Method("true_adv", "control: true advantage (N=1)", true_advantage(1), oracle=1, control=True),
        Method("shuffled", "control: shuffled GRPO credit", shuffled, control=True),
    ]
}
METHODS: dict[str, Method] = {n: m for n, m in ALL_METHODS.items() if n not in OFF_DEMO}


# --- TCPO investigation: SPEC readings switched, and TCPO's parts as credits of their own -------


def _tcpo_with(**switch):
    def credit(ctx: Context, s: Settings) -> jax.Array:
        return CALLS["tcpo_advantages"](turn_batch(ctx), **switch)

    credit.__doc__ = f"TCPO + hindsight with {switch}."
    return credit


def _tcpo_part(part):
    def credit(ctx: Context, s: Settings) -> jax.Array:
        # the whole TCPO result (its parts), not only the advantages the table's call returns
        args, kwargs = CALLS["tcpo_advantages"].args(turn_batch(ctx))
        out = credax.tcpo_advantages(*args, **kwargs, normalize=False)
        x = {"retrospective": out.retrospective.credit, "hindsight": out.hindsight.credit,
             "raw": out.credit}[part]
        return _mask(ctx, x)

    credit.__doc__ = f"TCPO's {part} credit, before the per-(prompt, turn) z-score."
    return credit


# TCPO + hindsight with one of SPEC's readings switched: trainable (``--methods``) and measured by
# the lab on TCPO + hindsight's policy (DIAGNOSTICS).
TCPO_SWITCHES: tuple[Method, ...] = (
    Method("tcpo_unnormalized", "TCPO + hindsight, normalize=False", _tcpo_with(normalize=False)),
    Method("tcpo_no_preserve", "TCPO + hindsight, preservation_weight=0",
           _tcpo_with(preservation_weight=0.0)),
)

# Trainable, not in the default demo (``--methods``): the demo's OFF_DEMO methods, the ceiling's
# controls, the TCPO switches, G2PO, FACA and verl's token-whitened outcome estimators.
VARIANTS: dict[str, Method] = {
    **{n: ALL_METHODS[n] for n in OFF_DEMO},
    **{m.name: m for m in [
        # The ceiling (``--preset oracle``): the true advantage averaged over more branch pairs.
        *(Method(f"true_adv_n{n}", f"control: true advantage (N={n})", true_advantage(n), oracle=n,
                 control=True) for n in (4, 16)),
        *TCPO_SWITCHES,
        Method("g2po", "G2PO", g2po),
        Method("faca", "FACA (score change as the reaction)", faca),
        Method("turn_baseline_outcome", "turn-count-unbiased baseline, past return added back",
               turn_baseline_outcome, unbiased=True),
        Method("reinforce_pp", "REINFORCE++", reinforce_pp),
        Method("reinforce_pp_baseline", "REINFORCE++-baseline", reinforce_pp_baseline, unbiased=True),
        Method("gpg", "GPG", gpg, unbiased=True),
    ]},
}

# Measured by the lab only (never trained): TCPO's parts, and the variants above
# (``tcpo_unnormalized`` equals R + H before the z-score: with γ = 1 that is all normalize does).
DIAGNOSTICS: tuple[Method, ...] = (
    Method("tcpo_part_retro", "TCPO part: retrospective R (raw)", _tcpo_part("retrospective")),
    Method("tcpo_part_hindsight", "TCPO part: hindsight H (raw)", _tcpo_part("hindsight")),
    Method("tcpo_part_raw", "TCPO part: R + H before the z-score", _tcpo_part("raw")),
    *TCPO_SWITCHES,
    Method("grpo_plus_tcpo", "diagnostic: GRPO + TCPO-hindsight advantage",
           lambda ctx, s: grpo(ctx, s) + tcpo_hindsight(ctx, s)),
)

# Measured by the lab on GRPO's own batch at every checkpoint: the unscaled outcome baselines,
# plain and shrunk, on the same rollouts (the shrinkage baseline's variance reduction against A*).
BASELINES: tuple[Method, ...] = (
    Method("dr_grpo", "Dr. GRPO", dr_grpo),
    Method("shrink", "shrinkage baseline (Dr. GRPO form)", shrink),
    Method("rloo", "RLOO", rloo),
    Method("shrink_rloo", "shrinkage baseline (RLOO form)", shrink_rloo),
)

METHODS_BY_NAME: dict[str, Method] = {**METHODS, **VARIANTS, **{d.name: d for d in DIAGNOSTICS}}

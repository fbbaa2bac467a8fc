"""The lab's exact tier: small MDPs solved by backward induction, every credit method scored exactly.

    python -m benchmarks.lab.exact                  # every MDP, G = 3, writes results/exact/
    python -m benchmarks.lab.exact --group 2 --out /tmp/exact

The trained lab's verdicts carry Monte-Carlo and training chaos. Here there is none: each MDP is
small enough that the value of a tabular softmax policy is computed by backward induction, and
every batch a method could see (every ordered group of ``G`` trajectories of one prompt, with its
probability) is enumerated, so the *expected* update of each method is a finite sum.

Each MDP isolates one failure mode the field argues about (:data:`MDPS`):

- ``delayed``: the decisive turn is the first, the reward arrives on the last, the turns between
  are distractors whose exact advantage is 0;
- ``stop``: variable horizon with a stop action and a per-turn cost (turn-count bias: who credits
  taking another turn, who credits stopping);
- ``recovery``: a bad edit (a regression) that later turns repair, so successful rollouts contain
  a turn whose exact advantage is negative;
- ``probe``: information gathering: a probe changes no score but reveals the hidden bit that the
  answer needs; its value depends on whether the policy uses what it learns.

The exact quantities (float64 NumPy): ``V(s)``, ``Q(s, a)``, ``A(s, a) = Q − V`` of the return
``R = final score − c·turns`` (the lab's return), with states that hold the prompt (the hidden
part) as the lab's ground truth does (``groundtruth.py`` restarts from the full state); the
visitation ``d(s)``; ``J = Σ_prompt p·V(s_0)``; and the policy gradient of the tabular softmax
``π(a | o) = softmax(θ[o])`` over observations ``o``::

    ∂J/∂θ[o, b] = Σ_{s : o(s) = o} d(s)·π(b | o)·A(s, b)

Per method and policy (``uniform`` θ = 0, and ``midway``: the first iterate of exact gradient
ascent whose J is half-way from the uniform policy's to where the ascent levels off):

- identification against the exact ``A(s_k, a_k)`` over every turn of every batch, weighted by
  the batch's probability: ``rmse`` (in the return's units; meaningful for the unscaled methods),
  Pearson ``rho``, ``sign`` (share of turns with ``A ≠ 0`` whose credit has A's sign, a zero
  credit, ``|credit| <= CREDIT_ZERO = 1e-6``, counting as wrong), ``zero_mass`` (share of the
  credit's absolute mass on turns with ``A = 0``);
- the expected gradient ``E[ĝ]``, ``ĝ = Σ_{b,k} Â_{b,k}·∇log π(a_{b,k} | o_{b,k}) / n`` with the
  method's own aggregation (``n`` = the batch's turn count for the lab's ``token-mean``, ``G·K``
  for Dr. GRPO's ``seq-mean-token-sum-norm``; one token per turn here): ``cos`` its cosine with
  ``∇J``, ``snr = ‖E ĝ‖² / E‖ĝ − E ĝ‖²``; and with ``n = G`` (the sequence sum, the form whose
  expectation an unbiased estimator makes exactly ``∇J``): ``cos_sum``, ``scale = ⟨E ĝ, ∇J⟩ /
  ‖∇J‖²`` and ``bias = ‖E ĝ − ∇J‖ / ‖∇J‖``.

Every method gets one batch = one prompt's group of ``G`` rows; the batch-pooled ones (the
shrinkage baselines, GPG, the REINFORCE++ whitenings) pool over that one group. What each
method is fed is written beside it in :data:`METHODS`. The credit is computed in float32 by the
lab's own adapters (``methods.py``) or credax directly; every sum around it is float64.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import pathlib
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import credax
from credax._registry import CALLS

from . import methods as M

DECISIVE, EXPLORATION, NO_PROGRESS, REGRESSION = 0, 1, 2, 3
AMAX = 3  # actions of the widest MDP (the alternatives are padded to AMAX − 1)
KMAX = 4  # every MDP is padded to this many turns (one compiled program per method)
TOL = 1e-9  # |A| at or below this is an exact zero (the MDPs' advantages are sums of dyadic terms)
RESULTS = pathlib.Path(__file__).parent / "results" / "exact"


# --- the MDPs ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """An MDP in plain Python: hashable states, built into arrays by :func:`build`.

    ``step(state, a)`` returns ``[(probability, next state, revealed)]`` (``revealed``: the turn
    gave the agent new information, the lab oracle's Exploration); every state holds its turn
    index, so the state graph is acyclic and backward induction is exact.
    """

    name: str
    label: str
    isolates: str
    turns: int
    actions: int  # A: actions of the tabular policy (every state offers all of them)
    action_names: tuple[str, ...]
    starts: tuple  # ((probability, state), ...): one prompt per start state
    step: Callable
    score: Callable  # state -> verifier score in [0, 1] (the score after the turn that led there)
    observe: Callable  # state -> hashable observation (the policy's row; the anchor state)
    terminal: Callable
    turn_cost: float = 0.0
    units: int = 1  # score steps per unit score (the scalar process reward counts steps)


def _delayed() -> Spec:
    # state (t, first): the first action decides; the score is revealed after the last turn.
    return Spec(
        "delayed", "delayed effect", "the decisive turn is the first, the reward comes after the "
        "last; turns 2 and 3 are distractors (exact advantage 0)", 3, 2, ("good", "bad"),
        ((1.0, (0, None)),),
        step=lambda s, a: [(1.0, (s[0] + 1, a if s[0] == 0 else s[1]), False)],
        score=lambda s: float(s[0] == 3 and s[1] == 0),
        observe=lambda s: s, terminal=lambda s: s[0] == 3)


def _stop() -> Spec:
    # state (t, solved, stopped): work solves with probability 1/2; every turn costs 0.1.
    def step(s, a):
        t, solved, _ = s
        if a == 0:
            return [(1.0, (t + 1, solved, True), False)]
        if solved:
            return [(1.0, (t + 1, True, False), False)]
        return [(0.5, (t + 1, True, False), False), (0.5, (t + 1, False, False), False)]

    return Spec(
        "stop", "variable horizon", "stop or work (solves with probability 1/2) for up to 4 "
        "turns, 0.1 per turn taken: working after success and stopping early are the mistakes",
        4, 2, ("stop", "work"), ((1.0, (0, False, False)),), step=step,
        score=lambda s: float(s[1]), observe=lambda s: (s[0], s[1]),
        terminal=lambda s: s[2] or s[0] == 4, turn_cost=0.1)


def _recovery() -> Spec:
    # state (t, level): a good edit raises the level (0, 1/2, 1), a bad edit lowers it.
    return Spec(
        "recovery", "recovery after a bad turn", "4 edits, good (+1/2) or bad (−1/2) on a score "
        "in {0, 1/2, 1}: a rollout can regress and still end solved", 4, 2, ("good", "bad"),
        ((1.0, (0, 0)),),
        step=lambda s, a: [(1.0, (s[0] + 1, min(s[1] + 1, 2) if a == 0 else max(s[1] - 1, 0)),
                            False)],
        score=lambda s: s[1] / 2, observe=lambda s: s, terminal=lambda s: s[0] == 4, units=2)


def _probe() -> Spec:
    # state (h, t, revealed, answered): h the hidden bit (the prompt); answering ends the episode.
    def step(s, a):
        h, t, revealed, _ = s
        if a == 0:
            return [(1.0, (h, t + 1, h, None), revealed is None)]
        return [(1.0, (h, t + 1, revealed, a - 1), False)]

    return Spec(
        "probe", "information gathering", "a hidden bit, 3 turns: probe (reveals it, score "
        "unchanged) or answer 0 / 1 (ends the episode, score 1 if right)", 3, 3,
        ("probe", "answer 0", "answer 1"), ((0.5, (0, 0, None, None)), (0.5, (1, 0, None, None))),
        step=step, score=lambda s: float(s[3] is not None and s[3] == s[0]),
        observe=lambda s: (s[1], s[2]), terminal=lambda s: s[3] is not None or s[1] == 3)


MDPS: dict[str, Callable[[], Spec]] = {
    "delayed": _delayed, "stop": _stop, "recovery": _recovery, "probe": _probe}


class MDP(NamedTuple):
    """An MDP as arrays (``S`` states, ``O`` observations, ``A`` actions)."""

    spec: Spec
    states: list  # the hashable states, index = state id
    obs: np.ndarray  # int[S] observation id of each state
    turn: np.ndarray  # int[S]
    terminal: np.ndarray  # bool[S]
    score: np.ndarray  # f64[S]
    trans: np.ndarray  # f64[S, A, S] transition probabilities (0 rows at terminal states)
    revealed: np.ndarray  # f64[S, A] probability that the turn reveals information
    starts: np.ndarray  # int[P] start state of each prompt
    prompt_p: np.ndarray  # f64[P]
    num_obs: int


def build(spec: Spec) -> MDP:
    """Enumerate the reachable states of ``spec`` (breadth first) into arrays."""
    index, states = {}, []

    def add(s):
        if s not in index:
            index[s] = len(states)
            states.append(s)
        return index[s]

    starts = [add(s) for _, s in spec.starts]
    edges, i = [], 0
    while i < len(states):
        s = states[i]
        if not spec.terminal(s):
            for a in range(spec.actions):
                for p, s2, rev in spec.step(s, a):
                    edges.append((i, a, add(s2), p, rev))
        i += 1
    S, A = len(states), spec.actions
    trans, revealed = np.zeros((S, A, S)), np.zeros((S, A))
    for i, a, j, p, rev in edges:
        trans[i, a, j] += p
        revealed[i, a] += p * rev
    obs_ids: dict = {}
    obs = np.array([obs_ids.setdefault(spec.observe(s), len(obs_ids)) for s in states])
    term = np.array([spec.terminal(s) for s in states])
    turn = np.zeros(S, int)
    for i, _, j, _, _ in edges:
        turn[j] = turn[i] + 1
    return MDP(spec, states, obs, turn, term, np.array([spec.score(s) for s in states]), trans,
               revealed, np.array(starts), np.array([p for p, _ in spec.starts]), len(obs_ids))


# --- exact solution ----------------------------------------------------------------------------


def policy_probs(theta: np.ndarray) -> np.ndarray:
    """``f64[O, A]`` softmax of the tabular logits."""
    z = theta - theta.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class Solution(NamedTuple):
    pi: np.ndarray  # f64[O, A]
    v: np.ndarray  # f64[S] expected reward to go (per-turn reward Δscore − c)
    q: np.ndarray  # f64[S, A]
    adv: np.ndarray  # f64[S, A] (0 at terminal states)
    visit: np.ndarray  # f64[S] probability that the state is visited
    j: float
    grad: np.ndarray  # f64[O, A] ∂J/∂θ


def solve(mdp: MDP, theta: np.ndarray) -> Solution:
    """Backward induction over the turn-layered states, then the forward visitation and ∇J."""
    pi = policy_probs(theta)
    c = mdp.spec.turn_cost
    # reward of s -a-> s': score(s') − score(s) − c (the adjacent score change minus the cost).
    reward = mdp.score[None, None, :] - mdp.score[:, None, None] - c
    v, q = np.zeros(len(mdp.states)), np.zeros((len(mdp.states), mdp.spec.actions))
    for t in range(mdp.turn.max(), -1, -1):
        at = np.nonzero((mdp.turn == t) & ~mdp.terminal)[0]
        q[at] = np.einsum("saj,saj->sa", mdp.trans[at], reward[at] + v[None, None, :])
        v[at] = np.sum(pi[mdp.obs[at]] * q[at], axis=1)
    adv = np.where(mdp.terminal[:, None], 0.0, q - v[:, None])
    visit = np.zeros(len(mdp.states))
    visit[mdp.starts] += mdp.prompt_p
    for t in range(mdp.turn.max() + 1):
        at = np.nonzero((mdp.turn == t) & ~mdp.terminal)[0]
        visit += np.einsum("s,sa,saj->j", visit[at], pi[mdp.obs[at]], mdp.trans[at])
    j = float(np.sum(mdp.prompt_p * v[mdp.starts]))
    grad = np.zeros_like(pi)
    np.add.at(grad, mdp.obs, visit[:, None] * pi[mdp.obs] * adv)
    return Solution(pi, v, q, adv, visit, j, grad)


def checkpoints(mdp: MDP, *, lr: float = 2.0, steps: int = 400) -> dict[str, np.ndarray]:
    """The policies the tier is scored at: ``uniform`` (θ = 0) and ``midway``, the first iterate
    of exact gradient ascent (step ``lr``) whose J is at least half-way from the uniform J to
    the J the ascent reaches after ``steps`` steps."""
    theta = np.zeros((mdp.num_obs, mdp.spec.actions))
    path = [theta]
    for _ in range(steps):
        theta = theta + lr * solve(mdp, theta).grad
        path.append(theta)
    js = [solve(mdp, t).j for t in path]
    target = js[0] + 0.5 * (js[-1] - js[0])
    mid = next(t for t, j in zip(path, js, strict=True) if j >= target)
    return {"uniform": path[0], "midway": mid}


# --- trajectories and batches --------------------------------------------------------------------


class Trajectories(NamedTuple):
    """Every trajectory of every prompt, turn arrays padded to ``KMAX``."""

    prompt: np.ndarray  # int[N]
    prob: np.ndarray  # f64[N] probability given its prompt
    state: np.ndarray  # int[N, K] state before each turn (0 at padding)
    action: np.ndarray  # int[N, K]
    mask: np.ndarray  # bool[N, K]
    scores: np.ndarray  # f64[N, K] verifier score after each turn
    revealed: np.ndarray  # bool[N, K]


def trajectories(mdp: MDP, sol: Solution) -> Trajectories:
    """Depth-first enumeration of every trajectory with nonzero probability."""
    rows = []

    def walk(prompt, s, p, path):
        if mdp.terminal[s]:
            rows.append((prompt, p, path))
            return
        for a in range(mdp.spec.actions):
            pa = p * sol.pi[mdp.obs[s], a]
            for j in np.nonzero(mdp.trans[s, a])[0]:
                pj = pa * mdp.trans[s, a, j]
                if pj > 0:
                    walk(prompt, j, pj, [*path, (s, a, j, mdp.revealed[s, a] > 0)])

    for i, s in enumerate(mdp.starts):
        walk(i, s, 1.0, [])
    N = len(rows)
    out = Trajectories(np.zeros(N, int), np.zeros(N), np.zeros((N, KMAX), int),
                       np.zeros((N, KMAX), int), np.zeros((N, KMAX), bool), np.zeros((N, KMAX)),
                       np.zeros((N, KMAX), bool))
    for n, (prompt, p, path) in enumerate(rows):
        out.prompt[n], out.prob[n] = prompt, p
        for k, (s, a, j, rev) in enumerate(path):
            out.state[n, k], out.action[n, k], out.mask[n, k] = s, a, True
            out.scores[n, k], out.revealed[n, k] = mdp.score[j], rev
    return out


class Batches(NamedTuple):
    """Every ordered group of ``G`` trajectories of one prompt: ``idx int[nb, G]``, ``prob f64[nb]``
    (the prompt's probability times the rows')."""

    idx: np.ndarray
    prob: np.ndarray


def batches(mdp: MDP, tr: Trajectories, group: int) -> Batches:
    idx, prob = [], []
    for i, p in enumerate(mdp.prompt_p):
        rows = np.nonzero(tr.prompt == i)[0]
        combo = np.array(list(itertools.product(rows, repeat=group)), int).reshape(-1, group)
        idx.append(combo)
        prob.append(p * np.prod(tr.prob[combo], axis=1))
    return Batches(np.concatenate(idx), np.concatenate(prob))


class Turns(NamedTuple):
    """What a method may read about one batch, ``[G, K]`` per row (float32 for credax)."""

    scores: jax.Array  # verifier score after each turn
    turn_mask: jax.Array
    outcome: jax.Array  # [G] the return: final score − c·turns
    roles: jax.Array  # oracle roles from the exact advantage (see ``exact_roles``)
    env_roles: jax.Array  # the lab oracle's roles: score rose / fell / revealed / otherwise
    anchors: jax.Array  # observation id before the turn (the lab's anchor: the observation)
    values: jax.Array  # E[R | s_k]: the exact value of the whole return (past costs included)
    values_to_go: jax.Array  # V(s_k): the exact expected reward to go
    rewards: jax.Array  # per-turn reward Δscore − c (sums to the return)
    alt_scores: jax.Array  # [G, K, A−1] expected score after each other action
    alt_mask: jax.Array
    advantage: jax.Array  # the exact A(s_k, a_k) (the control)


def exact_roles(adv: np.ndarray, revealed: np.ndarray) -> np.ndarray:
    """Roles from the exact advantage: Decisive ``A > 0``, Regression ``A < 0``, and at ``A = 0``
    Exploration if the turn revealed information, else No-progress."""
    zero = np.where(revealed, EXPLORATION, NO_PROGRESS)
    return np.where(adv > TOL, DECISIVE, np.where(adv < -TOL, REGRESSION, zero))


def env_roles(scores: np.ndarray, mask: np.ndarray, revealed: np.ndarray) -> np.ndarray:
    """The lab oracle's roles (``env.step``): the score rose, fell, the turn revealed, otherwise."""
    prev = np.concatenate([np.zeros_like(scores[:, :1]), scores[:, :-1]], axis=1)
    r = np.where(scores > prev, DECISIVE, np.where(
        scores < prev, REGRESSION, np.where(revealed, EXPLORATION, NO_PROGRESS)))
    return np.where(mask, r, -1)


class Tier(NamedTuple):
    """One (MDP, policy) case: the exact solution, its trajectories and batches, the per-turn
    inputs of every trajectory and the score-function features ``∇log π`` of its turns."""

    mdp: MDP
    sol: Solution
    tr: Trajectories
    bt: Batches
    turns: Turns  # per trajectory, [N, K] (gathered into batches by ``batch_inputs``)
    adv: np.ndarray  # f64[N, K] exact A(s_k, a_k), 0 at padding
    phi: np.ndarray  # f64[N, K, O·A] ∇_θ log π(a_k | o_k), 0 at padding


def prepare(mdp: MDP, theta: np.ndarray, group: int) -> Tier:
    sol = solve(mdp, theta)
    tr = trajectories(mdp, sol)
    N, A, c = len(tr.prob), mdp.spec.actions, mdp.spec.turn_cost
    adv = np.where(tr.mask, sol.adv[tr.state, tr.action], 0.0)
    turns_taken = tr.mask.sum(axis=1)
    final = tr.scores[np.arange(N), turns_taken - 1]
    outcome = final - c * turns_taken
    prev = np.concatenate([np.zeros((N, 1)), tr.scores[:, :-1]], axis=1)
    reward = np.where(tr.mask, tr.scores - prev - c, 0.0)
    k = np.arange(KMAX)[None]
    past = np.where(tr.mask, prev - c * k, 0.0)  # return already earned before turn k
    v_togo = np.where(tr.mask, sol.v[tr.state], 0.0)
    # Expected score after each other action (TCPO's counterfactuals, exact).
    nxt = np.einsum("nkaj,j->nka", mdp.trans[tr.state], mdp.score)
    others = np.array([[b for b in range(A) if b != a] for a in range(A)])
    alt = np.take_along_axis(nxt, others[tr.action], axis=2)
    pad = AMAX - A  # one alternatives shape for every MDP (one compilation)
    alt_mask = np.concatenate([np.broadcast_to(tr.mask[..., None], alt.shape),
                               np.zeros((N, KMAX, pad), bool)], axis=2)
    alt = np.concatenate([alt, np.zeros((N, KMAX, pad))], axis=2)
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    turns = Turns(
        scores=f32(np.where(tr.mask, tr.scores, 0.0)), turn_mask=jnp.asarray(tr.mask),
        outcome=f32(outcome),
        roles=jnp.asarray(np.where(tr.mask, exact_roles(adv, tr.revealed), -1), jnp.int32),
        env_roles=jnp.asarray(env_roles(tr.scores, tr.mask, tr.revealed), jnp.int32),
        anchors=jnp.asarray(np.where(tr.mask, mdp.obs[tr.state], -1), jnp.int32),
        values=f32(past + v_togo), values_to_go=f32(v_togo), rewards=f32(reward),
        alt_scores=f32(alt), alt_mask=jnp.asarray(alt_mask),
        advantage=f32(adv))
    num_obs = mdp.num_obs
    phi = np.zeros((N, KMAX, num_obs, A))
    n, kk = np.nonzero(tr.mask)
    o = mdp.obs[tr.state[n, kk]]
    phi[n, kk, o, :] -= sol.pi[o]
    phi[n, kk, o, tr.action[n, kk]] += 1.0
    return Tier(mdp, sol, tr, batches(mdp, tr, group), turns, adv, phi.reshape(N, KMAX, num_obs * A))


# --- the methods -------------------------------------------------------------------------------


class _Before(NamedTuple):
    target: jax.Array  # only its last axis is read (the scalar process reward's units)


def context(b: Turns, units: int) -> M.Context:
    """One batch as the lab's :class:`methods.Context` (the fields the adapters read)."""
    G, K = b.scores.shape
    r = M.Rollout(obs=None, tokens=None, logp=None, token_mask=None, turn_mask=b.turn_mask,
                  scores=b.scores, roles=b.roles, anchors=b.anchors,
                  before=_Before(jnp.zeros((G, K, units), jnp.int32)))
    token_turn = jnp.where(b.turn_mask, jnp.arange(K, dtype=jnp.int32)[None], -1)
    groups = credax.groups(jnp.zeros(G, jnp.int32), num_groups=1)
    return M.Context(r, groups, b.outcome, b.values, token_turn, None, jax.random.key(0))


def _lab(fn):
    """A lab adapter (``methods.py``) as an exact-tier credit ``(Turns, units) -> [G, K]``."""
    return lambda b, units: fn(context(b, units), M.Settings())


def _masked(b: Turns, x):
    return jnp.where(b.turn_mask, x, 0.0)


def _gdpo(b, units):
    # Two components, normalised apart: the final score and the turn cost −c·turns (the return
    # minus the final score), weights (1, 1).
    turns = jnp.sum(b.turn_mask.astype(jnp.int32), axis=1)
    last = jnp.take_along_axis(b.scores, (turns - 1)[:, None], axis=1)[:, 0]
    comps = jnp.stack([last, b.outcome - last], axis=1)
    a = credax.gdpo_advantages(comps, jnp.zeros(b.outcome.shape, jnp.int32),
                               weights=jnp.ones(2, jnp.float32))
    return _masked(b, jnp.broadcast_to(a[:, None], b.scores.shape))


def _gae(lam):
    def credit(b, units):
        return credax.gae_advantages(b.rewards, b.values_to_go, b.turn_mask, lam=lam).advantages
    return credit


def _turn_gae(b, units):
    # One token per turn: the turn's token carries V(s_k).
    K = b.scores.shape[1]
    token_turn = jnp.where(b.turn_mask, jnp.arange(K, dtype=jnp.int32)[None], -1)
    return credax.turn_gae_advantages(b.rewards, b.values_to_go, token_turn, b.turn_mask,
                                      lam=0.95).advantages


def _triage_env(b, units):
    return _lab(M.triage(M.judges.oracle))(b._replace(roles=b.env_roles), units)


def _explore_only(b, units):
    credit = M.triage(M.judges.oracle, M.EXPLORATION_ONLY)
    return _lab(credit)(b._replace(roles=b.env_roles), units)


def _tcpo_full(b, units):
    # Every eligible turn selected (the lab's Top-L budget of 16 covers a G·K ≤ 16 batch), the
    # alternatives' exact expected scores as the counterfactuals.
    ctx = context(b, units)
    prior = credax.best_prior(b.scores, b.turn_mask)
    selected = b.turn_mask & (prior < 1.0) & (b.scores <= prior)
    return CALLS["tcpo_advantages"](M.turn_batch(ctx, alt_scores=b.alt_scores,
                                                 alt_mask=b.alt_mask), selected=selected)


class Method(NamedTuple):
    name: str
    label: str
    credit: Callable  # (Turns, units) -> f32[G, K]
    agg: str  # "token-mean" or "seq-mean-token-sum-norm"
    fed: str  # what the method is given here


_TM, _DR = "token-mean", "seq-mean-token-sum-norm"
_OUT = "the return"
_STEP = "the return and the score change as turn reward"

METHODS: tuple[Method, ...] = (
    Method("grpo", "GRPO", _lab(M.grpo), _TM, _OUT),
    Method("dr_grpo", "Dr. GRPO", _lab(M.dr_grpo), _DR, _OUT),
    Method("rloo", "RLOO", _lab(M.rloo), _TM, _OUT),
    Method("gdpo", "GDPO (score, cost)", _gdpo, _TM,
           "two components, the final score and −c·turns, weights (1, 1)"),
    Method("shrink", "shrinkage (Dr. GRPO form)", _lab(M.shrink), _DR, _OUT + " (one prompt per batch)"),
    Method("shrink_rloo", "shrinkage (RLOO form)", _lab(M.shrink_rloo), _TM,
           _OUT + " (one prompt per batch)"),
    Method("gpg", "GPG", _lab(M.gpg), _TM, _OUT),
    Method("reinforce_pp", "REINFORCE++", _lab(M.reinforce_pp), _TM,
           "the return on the last turn, whitened over the batch's turns"),
    Method("reinforce_pp_baseline", "REINFORCE++-baseline", _lab(M.reinforce_pp_baseline), _TM,
           "the return, prompt-centred, whitened over the batch's turns"),
    Method("mt_grpo", "MT-GRPO", _lab(M.mt_grpo), _TM, _STEP),
    Method("gigpo", "GiGPO", _lab(M.gigpo), _TM, _STEP + ", anchors = the observation"),
    Method("hgpo", "HGPO (verl-agent preset)", _lab(M.hgpo), _TM,
           "the score change plus the turn costs, anchors = the observation"),
    Method("g2po", "G2PO", _lab(M.g2po), _TM, "the return, states = the observation"),
    Method("turn_baseline", "turn-count-unbiased turn baseline", _lab(M.turn_baseline), _TM,
           "the score change minus the turn cost as turn reward"),
    Method("value", "value baseline (exact V)", _lab(M.value_baseline), _TM,
           "the return on the last turn, the exact E[R | s_k] as critic (γ = λ = 1)"),
    Method("gae_td", "GAE λ=0 (exact V)", _gae(0.0), _TM,
           "per-turn rewards, the exact V as critic: the one-step TD error"),
    Method("turn_gae", "turn GAE λ=0.95 (exact V)", _turn_gae, _TM,
           "per-turn rewards, the exact V on each turn's token"),
    Method("scalar_prm", "scalar process reward", _lab(M.scalar_process), _TM,
           "GRPO + 0.2 × the score change in score steps"),
    Method("triage", "TRIAGE (oracle: exact-A roles)", _lab(M.triage(M.judges.oracle)), _TM,
           "roles from the sign of the exact advantage (Exploration: a revealing turn at A = 0)"),
    Method("triage_env", "TRIAGE (oracle: score roles)", _triage_env, _TM,
           "the lab oracle's roles: the score rose / fell / the turn revealed / otherwise"),
    Method("triage_blind", "TRIAGE (regression-blind)", _lab(M.triage(M.judges.regression_blind)),
           _TM, "exact-A roles with Regression called Decisive"),
    Method("explore_only", "GRPO + exploration bonus", _explore_only, _TM,
           "the score roles (Exploration: a revealing turn), constants (0, c_E, 0, 0)"),
    Method("tcpo_retro", "TCPO retrospective", _lab(M.tcpo_retrospective), _TM, "the scores"),
    Method("tcpo_hindsight", "TCPO + hindsight", _lab(M.tcpo_hindsight), _TM, "the scores"),
    Method("tcpo_unnormalized", "TCPO + hindsight, normalize=False",
           _lab(M.TCPO_SWITCHES[0].credit), _TM, "the scores"),
    Method("tcpo_no_preserve", "TCPO + hindsight, preservation_weight=0",
           _lab(M.TCPO_SWITCHES[1].credit), _TM, "the scores"),
    Method("tcpo_full", "TCPO full (exact counterfactuals)", _tcpo_full, _TM,
           "the scores, every other action's expected score at every eligible turn"),
    Method("exact", "control: exact advantage", lambda b, units: _masked(b, b.advantage), _TM,
           "A(s_k, a_k) itself"),
)

CHUNK = 8192  # batches per compiled call (one shape for every MDP: one compilation per method)
_COMPILED: dict = {}


def _compiled(credit: Callable, units: int):
    key = (credit, units)
    if key not in _COMPILED:
        _COMPILED[key] = jax.jit(jax.vmap(lambda b: credit(b, units)))
    return _COMPILED[key]


def batch_credit(tier: Tier, credit: Callable) -> np.ndarray:
    """``f64[nb, G, K]``: the method's credit on every batch (float32 credit, chunked)."""
    idx = tier.bt.idx
    fn = _compiled(credit, tier.mdp.spec.units)
    out = []
    for start in range(0, len(idx), CHUNK):
        chunk = idx[start:start + CHUNK]
        pad = CHUNK - len(chunk)
        chunk = np.concatenate([chunk, np.repeat(chunk[:1], pad, axis=0)]) if pad else chunk
        b = jax.tree.map(lambda x, chunk=chunk: x[chunk], tier.turns)
        out.append(np.asarray(fn(b), np.float64)[:CHUNK - pad])
    return np.concatenate(out)


# A credit of absolute value at most CREDIT_ZERO is a zero credit for the sign accuracy. The
# credit is float32: a method whose exact credit is 0 on a turn (a z-score of equal values, a
# difference of equal returns) comes out as ±1e-8 or so, and np.sign of that is a coin flip that
# would count as agreement half the time. 1e-6 is 16 float32 ulps of 1 (credit here is O(0.1-1):
# scores in [0, 1], z-scores of a few rows) and far below any credit a method means.
CREDIT_ZERO = 1e-6


def sign_agrees(credit: np.ndarray, adv: np.ndarray) -> np.ndarray:
    """``bool``: the credit has the exact advantage's sign; a credit within ``CREDIT_ZERO`` of 0
    is a zero credit and agrees with no nonzero advantage."""
    c = np.where(np.abs(credit) <= CREDIT_ZERO, 0.0, credit)
    return np.sign(c) == np.sign(adv)


def scores(tier: Tier, credit: np.ndarray, agg: str) -> dict:
    """The identification and expected-gradient scores of one method's credit on every batch."""
    idx, w = tier.bt.idx, tier.bt.prob
    mask = tier.tr.mask[idx]  # [nb, G, K]
    a = tier.adv[idx]
    c = np.where(mask, credit, 0.0)
    wt = np.where(mask, w[:, None, None], 0.0)
    tot = wt.sum()
    mean = lambda x: float(np.sum(wt * x) / tot)  # noqa: E731
    rmse = np.sqrt(mean(np.square(c - a)))
    ca, aa = c - mean(c), a - mean(a)
    den = np.sqrt(mean(ca * ca) * mean(aa * aa))
    rho = mean(ca * aa) / den if den > 0 else float("nan")
    nz = mask & (np.abs(a) > TOL)
    sign = float(np.sum(np.where(nz, wt, 0.0) * sign_agrees(c, a)) / np.sum(np.where(nz, wt, 0.0)))
    absmass = np.sum(wt * np.abs(c))
    zero = mask & (np.abs(a) <= TOL)
    zero_mass = float(np.sum(np.where(zero, wt * np.abs(c), 0.0)) / absmass) if absmass > 0 \
        else float("nan")
    # Per-batch gradients: Σ_{b,k} Â φ, then divided by the aggregation's count.
    G = idx.shape[1]
    raw = np.einsum("ngk,ngkp->np", c, tier.phi[idx])
    K = int(tier.mdp.spec.turns)
    count = mask.sum(axis=(1, 2)) if agg == "token-mean" else np.full(len(idx), G * K)
    g_agg = raw / count[:, None]
    g_sum = raw / G
    grad = tier.sol.grad.reshape(-1)
    e_agg, e_sum = w @ g_agg, w @ g_sum
    gn = float(np.linalg.norm(grad))

    def cos(x):  # None where the expected gradient vanishes (float32 rounding aside)
        n = float(np.linalg.norm(x))
        return float(x @ grad / (n * gn)) if n > 1e-9 * gn else None

    noise = float(w @ np.sum(np.square(g_agg - e_agg), axis=1))
    signal = float(e_agg @ e_agg)
    finite = lambda x: float(x) if np.isfinite(x) else None  # noqa: E731
    return {
        "rmse": float(rmse), "rho": finite(rho), "sign": sign, "zero_mass": finite(zero_mass),
        "cos": cos(e_agg), "cos_sum": cos(e_sum), "scale": float(e_sum @ grad / gn**2),
        "bias": float(np.linalg.norm(e_sum - grad) / gn),
        # None: the update is the same on every batch (noise at float32 rounding level).
        "snr": signal / noise if noise > 1e-12 * signal else None,
    }


def evaluate(tier: Tier, method: Method) -> dict:
    return scores(tier, batch_credit(tier, method.credit), method.agg)


# --- the run -----------------------------------------------------------------------------------


def cases(group: int, mdps=tuple(MDPS)) -> dict[str, dict[str, Tier]]:
    """``{mdp: {policy: Tier}}`` for the named MDPs at both checkpoint policies."""
    out = {}
    for name in mdps:
        mdp = build(MDPS[name]())
        out[name] = {p: prepare(mdp, th, group) for p, th in checkpoints(mdp).items()}
    return out


def run(group: int = 3, mdps=tuple(MDPS), methods=METHODS, log=None) -> dict:
    """The tier's JSON record: per MDP and policy, J, ‖∇J‖, sizes and every method's scores."""
    record = {"group": group, "turns_padded": KMAX,
              "methods": {m.name: {"label": m.label, "agg": m.agg, "fed": m.fed} for m in methods},
              "mdps": {}}
    for name, tiers in cases(group, mdps).items():
        spec = next(iter(tiers.values())).mdp.spec
        rec = {"label": spec.label, "isolates": spec.isolates, "turns": spec.turns,
               "actions": list(spec.action_names), "turn_cost": spec.turn_cost, "policies": {}}
        for pol, tier in tiers.items():
            t0 = time.process_time()
            rows = {m.name: evaluate(tier, m) for m in methods}
            rec["policies"][pol] = {
                "J": tier.sol.j, "grad_norm": float(np.linalg.norm(tier.sol.grad)),
                "trajectories": len(tier.tr.prob), "batches": len(tier.bt.prob),
                "zero_turn_share": float(_zero_share(tier)), "methods": rows}
            if log:
                log(f"{name}/{pol}: J={tier.sol.j:.4f}, {len(tier.tr.prob)} trajectories, "
                    f"{len(tier.bt.prob)} batches, {time.process_time() - t0:.1f} CPU s")
        record["mdps"][name] = rec
    return record


def _zero_share(tier: Tier) -> float:
    """Expected share of a trajectory's turns whose exact advantage is 0."""
    m = tier.tr.mask
    w = tier.tr.prob[:, None] * m * tier.mdp.prompt_p[tier.tr.prompt][:, None]
    return float(np.sum(w * (np.abs(tier.adv) <= TOL)) / np.sum(w))


# --- tables and the figure ---------------------------------------------------------------------

COLUMNS = (("rmse", "RMSE", "{:.3f}"), ("rho", "ρ(Â, A)", "{:+.2f}"), ("sign", "sign acc.", "{:.2f}"),
           ("zero_mass", "mass on A=0", "{:.2f}"), ("cos", "cos(E ĝ, ∇J)", "{:+.3f}"),
           ("cos_sum", "cos, Σ/G", "{:+.3f}"), ("bias", "bias", "{:.3f}"), ("snr", "SNR", "{:.2f}"))


def _cell(key, x, pattern):
    if x is None:
        return "∞" if key == "snr" else "—"
    return pattern.format(x)


def row(label: str, s: dict) -> str:
    """One markdown table row of a method's scores (:data:`COLUMNS`)."""
    return "| " + " | ".join([label, *(_cell(k, s[k], p) for k, _, p in COLUMNS)]) + " |"


def render(record: dict) -> str:
    """The tier's markdown tables from its JSON record (what ``results/exact/exact.md`` holds)."""
    out = [f"Exact tier: every ordered group of G = {record['group']} trajectories of one prompt "
           "enumerated with its probability. RMSE in the return's units; sign accuracy over turns "
           f"with A ≠ 0 (a credit within {CREDIT_ZERO:g} of 0 is zero: wrong); mass on A=0: "
           "share of |credit| on turns whose exact advantage is 0; cos: "
           "the expected gradient (the method's aggregation) against ∇J; cos, Σ/G and bias "
           "(‖E ĝ − ∇J‖/‖∇J‖): the sequence-sum form; SNR = ‖E ĝ‖² / E‖ĝ − E ĝ‖².", ""]
    head = "| method | " + " | ".join(t for _, t, _ in COLUMNS) + " |"
    rule = "|" + "---|" * (len(COLUMNS) + 1)
    for name, rec in record["mdps"].items():
        for pol, p in rec["policies"].items():
            out += [f"### {name}: {rec['label']}, {pol} policy", "",
                    f"{rec['isolates']}. J = {p['J']:.4f}, ‖∇J‖ = {p['grad_norm']:.4f}, "
                    f"{p['trajectories']} trajectories, {p['batches']} batches, share of turns with "
                    f"A = 0: {p['zero_turn_share']:.2f}.", "", head, rule]
            out += [row(record["methods"][m]["label"], s) for m, s in p["methods"].items()]
            out.append("")
    return "\n".join(out)


def plot(path: pathlib.Path, record: dict) -> None:
    """Expected-gradient cosine (top) and sign accuracy (bottom) of every method, one panel per MDP,
    both policies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(record["methods"])
    mdps = list(record["mdps"])
    fig, axes = plt.subplots(2, len(mdps), figsize=(4.2 * len(mdps), 9), sharey=True, squeeze=False)
    y = np.arange(len(names))
    for j, mdp in enumerate(mdps):
        pols = record["mdps"][mdp]["policies"]
        for i, (key, title) in enumerate([("cos", "cos(E ĝ, ∇J)"), ("sign", "sign accuracy")]):
            ax = axes[i, j]
            for off, (pol, p) in zip((-0.2, 0.2), pols.items(), strict=False):
                vals = [np.nan if p["methods"][n][key] is None else p["methods"][n][key]
                        for n in names]
                ax.barh(y + off, vals, height=0.38, label=pol)
            ax.axvline(0, color="black", lw=0.8)
            ax.set_title(f"{mdp}: {title}", fontsize=10)
            ax.set_yticks(y, [record["methods"][n]["label"] for n in names], fontsize=7)
            ax.grid(axis="x", alpha=0.3)
            ax.legend(fontsize=7)
    axes[0, 0].invert_yaxis()
    fig.suptitle(f"Exact tier (G = {record['group']}, every batch enumerated)", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


# --- a user's credit function ------------------------------------------------------------------


def user_rows(credit_fn: Callable, name: str, *, group: int = 3, mdps=tuple(MDPS)) -> list[str]:
    """The exact-tier scores of a ``--credit`` function, one line per (MDP, policy).

    ``credit_fn(ctx, settings) -> f32[B, K]`` is the lab's credit protocol (``__main__.user_method``):
    here ``ctx`` is a :class:`methods.Context` of one batch of ``G`` rows of one prompt
    (``ctx.rollout.scores / turn_mask / roles / anchors``, ``ctx.outcome``, ``ctx.groups``,
    ``ctx.values`` = the exact value, ``ctx.model = None``: a method that resamples from the
    policy cannot run here). Returns lines ``"<name> exact <mdp>/<policy>: cos +0.912, sign
    0.83, ..."`` for the verdict, in :data:`COLUMNS` order.
    """
    credit = lambda b, units: credit_fn(context(b, units), M.Settings())  # noqa: E731
    agg = getattr(credit_fn, "agg", "token-mean")
    lines = []
    for mdp, tiers in cases(group, mdps).items():
        for pol, tier in tiers.items():
            s = scores(tier, batch_credit(tier, credit), agg)
            cells = ", ".join(f"{k} {_cell(k, s[k], p)}" for k, _, p in COLUMNS)
            lines.append(f"{name} exact {mdp}/{pol}: {cells}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lab.exact", description=__doc__.split("\n")[0])
    p.add_argument("--group", type=int, default=3, help="G: rollouts per batch (default 3)")
    p.add_argument("--mdps", default=",".join(MDPS), help="comma-separated: " + ",".join(MDPS))
    p.add_argument("--out", default=str(RESULTS), help="output folder (default: results/exact)")
    args = p.parse_args(argv)
    mdps = tuple(m.strip() for m in args.mdps.split(","))
    unknown = [m for m in mdps if m not in MDPS]
    if unknown:
        p.error(f"--mdps: unknown MDP(s) {unknown}; choose from {list(MDPS)}")
    if not 2 <= args.group <= 4:
        p.error(f"--group must be 2, 3 or 4 (every batch is enumerated); got {args.group}")
    t0, c0 = time.perf_counter(), time.process_time()
    record = run(args.group, mdps, log=lambda s: print(s, flush=True))
    from .report import environment

    record["environment"] = environment()
    record["timing"] = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    record["command"] = "python -m benchmarks.lab.exact " + " ".join(
        sys.argv[1:] if argv is None else argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "exact.json").write_text(json.dumps(record, indent=1) + "\n")
    (out / "exact.md").write_text(render(record) + "\n")
    plot(out / "exact.png", record)
    print(render(record))
    print(f"wall {record['timing']['wall_s']:.0f} s, process CPU {record['timing']['cpu_s']:.0f} s; "
          f"wrote {out}/exact.json, exact.md, exact.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

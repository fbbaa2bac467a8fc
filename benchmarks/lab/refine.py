"""The verifier-guided refinement task (TCPO's own setting): submit whole answers, keep what passes.

A prompt is a hidden target of ``L`` symbols over an alphabet of ``V`` (think: a program of ``L``
lines, each with ``V`` candidate implementations, and one unit test per line). Each turn the agent
either

- ``submit a_1 .. a_L``: a whole answer. The verifier scores it in ``[0, 1]`` with partial credit —
  the fraction of tests that pass — and its report (which tests pass) is in the next observation,
  together with every (line, candidate) already seen to fail; or
- ``stop``: end the episode with the last submitted answer.

The return is the final answer's score minus ``turn_cost`` per turn taken (the stop turn included):
an honest reason to stop once solved, so "turns to success" is measurable. The episode does *not*
end on success: a solved answer must be held (stop, or resubmit it) and can be broken by the next
submission — a regression inside a successful rollout, the event TCPO's retrospective credit and
TRIAGE's regression role are about.

Oracle roles (credax's ``Role`` coding): Decisive = the score rose, Regression = it fell,
Exploration = the score stayed but the submission tried a (line, candidate) never tried before
(information: it failed), No-progress = otherwise (resubmitting, holding, stopping).

Pure JAX on fixed shapes, the same interface as ``env.Task`` (``reset/observe/step/anchor/
token_valid/split_targets/policy``), so the rollout, the ground truth and every method run on it
unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from . import env as E

STOP, SUBMIT = 0, 1
NUM_TYPES = 2
_NEG = -1e9


@dataclass(frozen=True)
class RefineTask:
    """Static shape of the refinement task (hashable: a static argument of ``jax.jit``)."""

    length: int = 4  # L tests / answer positions
    alphabet: int = 5  # V candidates per position
    turns: int = 8  # K turn budget
    turn_cost: float = 0.02  # per turn taken, subtracted from the final score

    name = "refine"
    label = "verifier-guided refinement"

    @property
    def blank(self) -> int:
        return self.alphabet

    @property
    def slots(self) -> int:
        return 1 + self.length  # type token, then one token per position

    @property
    def vocab(self) -> int:
        return NUM_TYPES + self.alphabet

    @property
    def obs_dim(self) -> int:
        L, V = self.length, self.alphabet
        # answer one-hot (V+1 with blank), pass bit, failed-candidate bits; turn one-hot; score.
        return L * (V + 1) + L + L * V + self.turns + 1

    def reset(self, target):
        shape = target.shape
        return State(
            target=target.astype(jnp.int32),
            answer=jnp.full(shape, self.blank, jnp.int32),
            failed=jnp.zeros((*shape, self.alphabet), bool),
            turn=jnp.zeros(shape[:-1], jnp.int32),
            score=jnp.zeros(shape[:-1], jnp.float32),
            done=jnp.zeros(shape[:-1], bool),
        )

    def observe(self, state):
        batch = state.turn.shape
        answer = jax.nn.one_hot(state.answer, self.alphabet + 1, dtype=jnp.float32)
        passed = (state.answer == state.target).astype(jnp.float32)
        turn = jax.nn.one_hot(jnp.minimum(state.turn, self.turns - 1), self.turns, dtype=jnp.float32)
        return jnp.concatenate(
            [
                answer.reshape(*batch, -1),
                passed,
                state.failed.astype(jnp.float32).reshape(*batch, -1),
                turn,
                state.score[..., None],
            ],
            axis=-1,
        )

    def step(self, state, tokens):
        """Apply action tokens ``int32[..., 1 + L]`` (type, then candidate ``NUM_TYPES + v`` per
        position); finished episodes are left unchanged. Returns ``(next_state, env.Step)``."""
        live = ~state.done
        submit = live & (tokens[..., 0] == SUBMIT)
        vals = tokens[..., 1:] - NUM_TYPES
        answer = jnp.where(submit[..., None], vals, state.answer)
        score = E.verifier(answer, state.target)
        tried = jax.nn.one_hot(vals, self.alphabet, dtype=jnp.bool_) & submit[..., None, None]
        wrong = (vals != state.target)[..., None]
        new_fail = tried & wrong & ~state.failed
        failed = state.failed | (tried & wrong)
        info_gain = jnp.any(new_fail, axis=(-2, -1))
        turn = state.turn + live.astype(jnp.int32)
        done = state.done | (live & (tokens[..., 0] == STOP)) | (turn >= self.turns)
        role = jnp.where(
            score > state.score,
            E.DECISIVE,
            jnp.where(score < state.score, E.REGRESSION,
                      jnp.where(info_gain, E.EXPLORATION, E.NO_PROGRESS)),
        ).astype(jnp.int32)
        nxt = State(state.target, answer, failed, turn, score, done)
        return nxt, E.Step(valid=live, score=score, role=role, info_gain=info_gain)

    def anchor(self, state):
        """int32 hash of what the agent sees (answer, failed candidates, turn): GiGPO's anchor."""
        batch = state.turn.shape
        parts = jnp.concatenate(
            [state.answer, state.failed.reshape(*batch, -1).astype(jnp.int32), state.turn[..., None]],
            axis=-1,
        ).astype(jnp.uint32)
        h = jnp.full(batch, 2166136261, jnp.uint32)
        for i in range(parts.shape[-1]):
            h = (h ^ parts[..., i]) * jnp.uint32(16777619)
        return (h & jnp.uint32(0x7FFFFFFF)).astype(jnp.int32)

    def token_valid(self, tokens):
        """``bool[..., 1 + L]``: stop uses the type token only, submit all of them."""
        submit = tokens[..., :1] == SUBMIT
        return jnp.concatenate(
            [jnp.ones_like(submit), jnp.broadcast_to(submit, tokens[..., 1:].shape)], axis=-1
        )

    def split_targets(self):
        return E.split_targets(self)

    def policy(self, hidden: int, *, rngs):
        return RefinePolicy(self, hidden, rngs=rngs)


class State(NamedTuple):
    target: jax.Array  # int32[..., L]
    answer: jax.Array  # int32[..., L] last submitted answer, ``blank`` before the first
    failed: jax.Array  # bool[..., L, V] candidate v seen failing at position i
    turn: jax.Array  # int32[...]
    score: jax.Array  # f32[...] score of the last submitted answer
    done: jax.Array  # bool[...]


class RefinePolicy(nnx.Module):
    """MLP trunk on the observation; a stop/submit head; one shared per-position candidate head
    that reads the trunk and that position's own features (answer, pass bit, failed candidates).

    The answer's positions are decoded independently given the observation (the verifier's
    report makes them separable), each as one token of the shared vocabulary.
    """

    def __init__(self, task: RefineTask, hidden: int, *, rngs: nnx.Rngs):
        self.task = task
        L, V = task.length, task.alphabet
        self.trunk1 = nnx.Linear(task.obs_dim, hidden, rngs=rngs)
        self.trunk2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.type_head = nnx.Linear(hidden, NUM_TYPES, rngs=rngs)
        self.val_in = nnx.Linear(hidden + L + (V + 1) + 1 + V, hidden, rngs=rngs)
        self.val_out = nnx.Linear(hidden, V, rngs=rngs)
        self.value_head = nnx.Linear(hidden, 1, rngs=rngs)

    def trunk(self, obs):
        return jax.nn.relu(self.trunk2(jax.nn.relu(self.trunk1(obs))))

    def value(self, obs):
        return self.value_head(self.trunk(obs))[..., 0]

    def _logits(self, obs):
        t = self.task
        L, V = t.length, t.alphabet
        batch = obs.shape[:-1]
        h = self.trunk(obs)
        answer = obs[..., : L * (V + 1)].reshape(*batch, L, V + 1)
        passed = obs[..., L * (V + 1) : L * (V + 2)].reshape(*batch, L, 1)
        failed = obs[..., L * (V + 2) : L * (2 * V + 2)].reshape(*batch, L, V)
        pos = jnp.broadcast_to(jnp.eye(L, dtype=obs.dtype), (*batch, L, L))
        local = jnp.concatenate([pos, answer, passed, failed], axis=-1)
        # val_in([h, local]) with the trunk's share h·W_h computed once per row, not once per
        # position (the same affine map; L times fewer multiply-adds for the trunk's part).
        H = h.shape[-1]
        kernel, bias = self.val_in.kernel[...], self.val_in.bias[...]
        bias = bias.reshape((1,) * (local.ndim - 1) + (-1,))
        pre = (h @ kernel[:H])[..., None, :] + local @ kernel[H:] + bias
        val = self.val_out(jax.nn.relu(pre))  # [..., L, V]
        return self.type_head(h), val

    def __call__(self, obs, tokens):
        """Teacher-forced logits ``[..., 1 + L, vocab]`` (the logits do not depend on ``tokens``:
        the positions are conditionally independent given the observation)."""
        type_lg, val_lg = self._logits(obs)
        V = self.task.alphabet
        neg = lambda x, n: jnp.full((*x.shape[:-1], n), _NEG, x.dtype)
        first = jnp.concatenate([type_lg, neg(type_lg, V)], axis=-1)[..., None, :]
        rest = jnp.concatenate([neg(val_lg, NUM_TYPES), val_lg], axis=-1)
        return jnp.concatenate([first, rest], axis=-2)

    def sample(self, obs, noise):
        """Decode one action per row from uniform noise ``f32[..., 1 + L]`` (one number per
        token, :func:`policy.inverse_cdf`): ``(tokens, logp)``."""
        from .policy import inverse_cdf, pick_logp

        type_lg, val_lg = self._logits(obs)
        kind = inverse_cdf(type_lg, noise[..., 0])
        vals = inverse_cdf(val_lg, noise[..., 1:])
        tokens = jnp.concatenate([kind[..., None], vals + NUM_TYPES], axis=-1)
        logp = jnp.concatenate([pick_logp(type_lg, kind)[..., None], pick_logp(val_lg, vals)], axis=-1)
        return tokens, logp

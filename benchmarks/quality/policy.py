"""A small Flax NNX agent that spells each action as tokens, and the rollout that runs it.

The policy reads the observation (answer, revealed symbols, turn index, last score) through an MLP
trunk and emits the action autoregressively, one token per slot, like a language model decoding a
tool call: the type token (stop / probe / write); then the position token, conditioned on the type;
then the value token, conditioned on the type and the position (it also sees the observation at
that position — a one-slot "pointer" read, which keeps the toy model tiny). Every slot's logits live
in one shared action vocabulary (``task.vocab``), with the tokens that cannot appear in that slot
pushed to a large negative logit, so log-probabilities are ordinary per-token log-softmaxes and
``credax`` sees exactly what it would see from an LLM: ``[B, T]`` tokens with a ``token_turn`` map.

A value head on the shared trunk serves the learned-value baseline (TRIAGE's "outcome-supervised
shared-backbone value"); the other methods leave it untrained.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from . import env as E

SLOTS = 3  # tokens per action: type, position, value
_NEG = -1e9  # logit of tokens impossible in a slot (finite: no inf - inf in logsumexp)


class Policy(nnx.Module):
    def __init__(self, task: E.Task, hidden: int, *, rngs: nnx.Rngs):
        self.task = task
        L, V = task.length, task.alphabet
        self.trunk1 = nnx.Linear(task.obs_dim, hidden, rngs=rngs)
        self.trunk2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.type_head = nnx.Linear(hidden, E.NUM_TYPES, rngs=rngs)
        # Position logits for each type: one linear map, the block of the chosen type is read.
        self.pos_head = nnx.Linear(hidden, E.NUM_TYPES * L, rngs=rngs)
        local = E.NUM_TYPES + L + 2 * (V + 1)
        self.val_in = nnx.Linear(hidden + local, hidden, rngs=rngs)
        self.val_out = nnx.Linear(hidden, V, rngs=rngs)
        self.value_head = nnx.Linear(hidden, 1, rngs=rngs)

    # --- pieces ---------------------------------------------------------------------------------

    def trunk(self, obs: jax.Array) -> jax.Array:
        return jax.nn.relu(self.trunk2(jax.nn.relu(self.trunk1(obs))))

    def type_logits(self, h):
        return self.type_head(h)

    def pos_logits(self, h, kind):
        L = self.task.length
        blocks = self.pos_head(h).reshape(*h.shape[:-1], E.NUM_TYPES, L)
        return jnp.take_along_axis(blocks, kind[..., None, None], axis=-2)[..., 0, :]

    def val_logits(self, h, obs, kind, pos):
        t = self.task
        L, W = t.length, t.alphabet + 1
        answer = obs[..., : L * W].reshape(*obs.shape[:-1], L, W)
        revealed = obs[..., L * W : 2 * L * W].reshape(*obs.shape[:-1], L, W)
        pick = lambda x: jnp.take_along_axis(x, pos[..., None, None], axis=-2)[..., 0, :]
        local = jnp.concatenate(
            [
                jax.nn.one_hot(kind, E.NUM_TYPES, dtype=h.dtype),
                jax.nn.one_hot(pos, L, dtype=h.dtype),
                pick(answer),
                pick(revealed),
            ],
            axis=-1,
        )
        return self.val_out(jax.nn.relu(self.val_in(jnp.concatenate([h, local], axis=-1))))

    def value(self, obs: jax.Array) -> jax.Array:
        """Predicted final score from the observation, ``float32[...]``."""
        return self.value_head(self.trunk(obs))[..., 0]

    # --- the shared vocabulary ------------------------------------------------------------------

    def _to_vocab(self, type_lg, pos_lg, val_lg):
        """Slot logits ``[..., 3, vocab]`` with impossible tokens at a large negative logit."""
        t = self.task
        L, V = t.length, t.alphabet
        pad = lambda x, before, after: jnp.concatenate(
            [
                jnp.full((*x.shape[:-1], before), _NEG, x.dtype),
                x,
                jnp.full((*x.shape[:-1], after), _NEG, x.dtype),
            ],
            axis=-1,
        )
        return jnp.stack(
            [pad(type_lg, 0, L + V), pad(pos_lg, E.NUM_TYPES, V), pad(val_lg, E.NUM_TYPES + L, 0)],
            axis=-2,
        )

    def __call__(self, obs: jax.Array, tokens: jax.Array) -> jax.Array:
        """Teacher-forced logits ``[..., 3, vocab]`` for action tokens ``int32[..., 3]``."""
        t = self.task
        kind = tokens[..., 0]
        pos = tokens[..., 1] - t.pos_offset
        h = self.trunk(obs)
        return self._to_vocab(
            self.type_logits(h), self.pos_logits(h, kind), self.val_logits(h, obs, kind, pos)
        )

    def sample(self, obs: jax.Array, key: jax.Array):
        """Decode one action per row: ``(kind, pos, val, tokens int32[..., 3], logp f32[..., 3])``.

        All three slots are always decoded (fixed shapes); ``token_valid`` says which of them the
        action actually uses, and only those carry credit.
        """
        t = self.task
        k1, k2, k3 = jax.random.split(key, 3)
        h = self.trunk(obs)
        lg0 = self.type_logits(h)
        kind = jax.random.categorical(k1, lg0).astype(jnp.int32)
        lg1 = self.pos_logits(h, kind)
        pos = jax.random.categorical(k2, lg1).astype(jnp.int32)
        lg2 = self.val_logits(h, obs, kind, pos)
        val = jax.random.categorical(k3, lg2).astype(jnp.int32)
        tokens = jnp.stack([kind, pos + t.pos_offset, val + t.val_offset], axis=-1)
        logp = jnp.stack(
            [_pick_logp(lg0, kind), _pick_logp(lg1, pos), _pick_logp(lg2, val)], axis=-1
        )
        return kind, pos, val, tokens, logp


def _pick_logp(logits, idx):
    return jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), idx[..., None], axis=-1)[..., 0]


def token_valid(tokens: jax.Array) -> jax.Array:
    """``bool[..., 3]``: stop uses the type token only, probe type + position, write all three."""
    kind = tokens[..., 0]
    return jnp.stack([jnp.ones_like(kind, bool), kind != E.STOP, kind == E.WRITE], axis=-1)


class Rollout(NamedTuple):
    """One batch of episodes, turn-major arrays ``[B, K, ...]``."""

    obs: jax.Array  # f32[B, K, D] observation before each turn
    tokens: jax.Array  # i32[B, K, 3]
    logp: jax.Array  # f32[B, K, 3] log-prob of each sampled token under the rollout policy
    token_mask: jax.Array  # bool[B, K, 3] token used by a real turn
    turn_mask: jax.Array  # bool[B, K]
    scores: jax.Array  # f32[B, K] verifier score after each turn
    roles: jax.Array  # i32[B, K] oracle role (garbage at padded turns; masked everywhere)
    anchors: jax.Array  # i32[B, K] hash of the observation before the turn (GiGPO)
    before: E.State  # environment state before each turn, fields [B, K, ...]


def rollout(model: Policy, targets: jax.Array, key: jax.Array) -> Rollout:
    """Play ``K`` turns for every target row with ``lax.scan`` over turns."""
    task = model.task
    state0 = E.reset(task, targets)

    def turn(state, k):
        obs = E.observe(task, state)
        kind, pos, val, tokens, logp = model.sample(obs, k)
        nxt, info = E.step(task, state, kind, pos, val)
        mask = token_valid(tokens) & info.valid[..., None]
        out = (obs, tokens, logp, mask, info.valid, info.score, info.role, E.anchor_hash(state), state)
        return nxt, out

    keys = jax.random.split(key, task.turns)
    _, outs = jax.lax.scan(turn, state0, keys)
    swap = lambda x: jnp.swapaxes(x, 0, 1)  # [K, B, ...] -> [B, K, ...]
    obs, tokens, logp, mask, valid, score, role, anchor, before = jax.tree.map(swap, outs)
    return Rollout(obs, tokens, logp, mask, valid, score, role, anchor, before)


def final_score(r: Rollout) -> jax.Array:
    """Score after the last real turn, ``f32[B]`` (every episode has at least one turn)."""
    last = jnp.sum(r.turn_mask.astype(jnp.int32), axis=1) - 1
    return jnp.take_along_axis(r.scores, last[:, None], axis=1)[:, 0]

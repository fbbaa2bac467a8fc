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

    def sample(self, obs: jax.Array, noise: jax.Array):
        """Decode one action per row from uniform noise ``f32[..., 3]`` (one number per slot).

        Each slot's token is the inverse CDF of its softmax at that slot's uniform number
        (:func:`inverse_cdf`), a categorical draw. Taking the noise as an argument lets the
        ground-truth estimator give two branches the same randomness (common random numbers).
        Returns ``(tokens int32[..., 3], logp f32[..., 3])``. All three slots are always decoded
        (fixed shapes); ``task.token_valid`` says which of them the action actually uses, and
        only those carry credit.
        """
        t = self.task
        h = self.trunk(obs)
        lg0 = self.type_logits(h)
        kind = inverse_cdf(lg0, noise[..., 0])
        lg1 = self.pos_logits(h, kind)
        pos = inverse_cdf(lg1, noise[..., 1])
        lg2 = self.val_logits(h, obs, kind, pos)
        val = inverse_cdf(lg2, noise[..., 2])
        tokens = jnp.stack([kind, pos + t.pos_offset, val + t.val_offset], axis=-1)
        logp = jnp.stack(
            [pick_logp(lg0, kind), pick_logp(lg1, pos), pick_logp(lg2, val)], axis=-1
        )
        return tokens, logp


def pick_logp(logits, idx):
    return jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), idx[..., None], axis=-1)[..., 0]


def inverse_cdf(logits: jax.Array, u: jax.Array) -> jax.Array:
    """``int32[...]``: the categorical draw ``min{j : F_j > u·F_{n-1}}`` from ``logits f32[..., n]``
    and a uniform ``u ∈ [0, 1)`` (``F`` the cumulative softmax).

    ``P(j) = F_j - F_{j-1} = softmax(logits)_j``: one uniform number per token instead of one
    Gumbel number per vocabulary entry (``argmax(logits + G)``), whose noise was, on a CPU, most
    of a held-out evaluation call's cost and a third of a training rollout's (measured with the
    noise replaced by zeros: docs/guides/credit-lab.md). Scaling ``u`` by the last cumulative mass (1 up to
    rounding) keeps the draw inside ``[0, n)`` and off zero-probability tokens however the sum
    rounds. Two branches given the same ``u`` at the same state draw the same token (common
    random numbers).
    """
    c = jnp.cumsum(jax.nn.softmax(logits, axis=-1), axis=-1)
    return jnp.sum((c <= u[..., None] * c[..., -1:]).astype(jnp.int32), axis=-1)


def sampling_noise(task, key: jax.Array, batch: tuple[int, ...]) -> jax.Array:
    """Sampling noise of one turn for a batch of rows: one uniform number per action slot,
    ``f32[*batch, slots]`` (see :func:`inverse_cdf`)."""
    return jax.random.uniform(key, (*batch, task.slots), jnp.float32)


class Rollout(NamedTuple):
    """One batch of episodes, turn-major arrays ``[B, K, ...]``."""

    obs: jax.Array  # f32[B, K, D] observation before each turn
    tokens: jax.Array  # i32[B, K, S] (S = task.slots)
    logp: jax.Array  # f32[B, K, S] log-prob of each sampled token under the rollout policy
    token_mask: jax.Array  # bool[B, K, S] token used by a real turn
    turn_mask: jax.Array  # bool[B, K]
    scores: jax.Array  # f32[B, K] verifier score after each turn
    roles: jax.Array  # i32[B, K] oracle role (garbage at padded turns; masked everywhere)
    anchors: jax.Array  # i32[B, K] hash of the observation before the turn (GiGPO)
    before: NamedTuple  # environment state before each turn, fields [B, K, ...]


def play(model, state0, noise_fn, forced: jax.Array | None = None, *, collect: bool = True):
    """Play ``K`` turns from ``state0`` (any turn; finished episodes stay inert) with ``lax.scan``.

    ``noise_fn(t)`` gives the sampling noise of scan step ``t``. ``forced`` (``int32[..., S]``), if
    given, replaces the first action's tokens where ``forced[..., 0] >= 0`` (the ground truth's
    "continue after the logged action" branch). Returns ``(Rollout, final state)``;
    ``collect=False`` keeps only the final state (``(None, final)``: no per-turn arrays, for the
    ground truth's many branches).
    """
    task = model.task

    def turn(state, t):
        obs = task.observe(state)
        tokens, logp = model.sample(obs, noise_fn(t))
        if forced is not None:
            use = (t == 0) & (forced[..., :1] >= 0)
            tokens = jnp.where(use, forced, tokens)
        nxt, info = task.step(state, tokens)
        if not collect:
            return nxt, None
        mask = task.token_valid(tokens) & info.valid[..., None]
        out = (obs, tokens, logp, mask, info.valid, info.score, info.role, task.anchor(state), state)
        return nxt, out

    final, outs = jax.lax.scan(turn, state0, jnp.arange(task.turns))
    if not collect:
        return None, final
    swap = lambda x: jnp.moveaxis(x, 0, state0.turn.ndim)  # [K, ..., x] -> [..., K, x]
    return Rollout(*jax.tree.map(swap, outs)), final


def rollout(model, targets: jax.Array, key: jax.Array) -> Rollout:
    """Play ``K`` turns for every target row from the reset state."""
    task = model.task
    keys = jax.random.split(key, task.turns)
    r, _ = play(model, task.reset(targets), lambda t: sampling_noise(task, keys[t], targets.shape[:-1]))
    return r


def final_score(r: Rollout) -> jax.Array:
    """Score after the last real turn, ``f32[B]`` (every episode has at least one turn)."""
    last = jnp.sum(r.turn_mask.astype(jnp.int32), axis=1) - 1
    return jnp.take_along_axis(r.scores, last[:, None], axis=1)[:, 0]


def episode_return(task, r: Rollout) -> jax.Array:
    """The return every method is trained on and the ground truth is about, ``f32[B]``:
    the final score minus ``task.turn_cost`` per turn taken (no cost on the probe task)."""
    turns = jnp.sum(r.turn_mask.astype(jnp.float32), axis=1)
    return final_score(r) - jnp.float32(task.turn_cost) * turns

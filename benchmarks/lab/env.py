"""The toy multi-turn task: find a hidden code by probing and writing, scored by a verifier.

A prompt is a hidden target of ``L`` symbols over an alphabet of ``V``. The agent keeps an answer
(initially blank) and acts for up to ``K`` turns; each turn is one action spelled as up to three
tokens:

- ``probe i``    reveals ``target[i]`` in the next observation (the score does not move: pure
  information gain, the "exploration" turns outcome-only credit cannot tell from idling);
- ``write i v``  sets ``answer[i] = v`` (the score rises, stays or falls);
- ``stop``       ends the episode.

The verifier scores every turn: the fraction of answer positions equal to the target, in
``[0, 1]``; success is score 1. The episode does not end on success: the agent must also learn to
stop (or at least not to damage a solved answer), so preservation and regression after success
are real events.

Everything is pure JAX on fixed shapes: one environment step is a function of arrays, vectorised
over trajectories by broadcasting, and the rollout (``policy.rollout``) scans it over turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

# Action types (the first token of every action).
STOP, PROBE, WRITE = 0, 1, 2
NUM_TYPES = 3
# Oracle roles, in credax's ``Role`` coding (SPEC §5).
DECISIVE, EXPLORATION, NO_PROGRESS, REGRESSION = 0, 1, 2, 3


@dataclass(frozen=True)
class Task:
    """Static shape of the task. Hashable, so it can be a static argument of ``jax.jit``."""

    length: int = 4  # L, symbols in the hidden target
    alphabet: int = 6  # V, symbols per position
    turns: int = 10  # K, turn budget

    @property
    def blank(self) -> int:
        """Code of an unwritten answer position / an unrevealed target position."""
        return self.alphabet

    @property
    def vocab(self) -> int:
        """Action-token vocabulary: 3 type tokens, L position tokens, V value tokens."""
        return NUM_TYPES + self.length + self.alphabet

    @property
    def pos_offset(self) -> int:
        return NUM_TYPES

    @property
    def val_offset(self) -> int:
        return NUM_TYPES + self.length

    @property
    def obs_dim(self) -> int:
        # answer and revealed target, one-hot over V+1 (blank) per position; turn index; score.
        return 2 * self.length * (self.alphabet + 1) + self.turns + 1

    # --- the task interface the rollout, the ground truth and the methods use -----------------
    # (``refine.RefineTask`` implements the same methods for the verifier-guided refinement task.)

    name = "probe"
    label = "probe/write (information gathering)"
    slots = 3  # tokens per action: type, position, value
    turn_cost = 0.0  # the return is the final score

    def reset(self, target):
        return reset(self, target)

    def observe(self, state):
        return observe(self, state)

    def step(self, state, tokens):
        """Apply action tokens ``int32[..., 3]`` (type, position, value in the shared vocabulary)."""
        return step(self, state, tokens[..., 0], tokens[..., 1] - self.pos_offset,
                    tokens[..., 2] - self.val_offset)

    def anchor(self, state):
        return anchor_hash(state)

    def token_valid(self, tokens):
        """``bool[..., 3]``: stop uses the type token only, probe type + position, write all three."""
        kind = tokens[..., 0]
        return jnp.stack([jnp.ones_like(kind, bool), kind != STOP, kind == WRITE], axis=-1)

    def split_targets(self):
        return split_targets(self)

    def policy(self, hidden: int, *, rngs):
        from .policy import Policy

        return Policy(self, hidden, rngs=rngs)


class State(NamedTuple):
    """Environment state of a batch of episodes (leading axes ``[...]``)."""

    target: jax.Array  # int32[..., L]
    answer: jax.Array  # int32[..., L], ``blank`` where unwritten
    revealed: jax.Array  # int32[..., L], ``blank`` where not probed yet
    turn: jax.Array  # int32[...], turns taken so far
    score: jax.Array  # float32[...], verifier score of the current answer
    done: jax.Array  # bool[...], stopped or out of turns


class Step(NamedTuple):
    """What one environment step reports about the turn that was just played."""

    valid: jax.Array  # bool[...]: the turn happened (episode not over before it)
    score: jax.Array  # float32[...]: verifier score after the turn
    role: jax.Array  # int32[...]: oracle role of the turn
    info_gain: jax.Array  # bool[...]: the turn revealed a new target symbol


def verifier(answer: jax.Array, target: jax.Array) -> jax.Array:
    """Fraction of positions where the answer equals the target, ``float32[...]``."""
    return jnp.mean((answer == target).astype(jnp.float32), axis=-1)


def reset(task: Task, target: jax.Array) -> State:
    """Blank answer, nothing revealed, turn 0, score 0."""
    blank = jnp.full(target.shape, task.blank, jnp.int32)
    batch = target.shape[:-1]
    return State(
        target=target.astype(jnp.int32),
        answer=blank,
        revealed=blank,
        turn=jnp.zeros(batch, jnp.int32),
        score=jnp.zeros(batch, jnp.float32),
        done=jnp.zeros(batch, bool),
    )


def observe(task: Task, state: State) -> jax.Array:
    """Observation features ``float32[..., obs_dim]``: answer, revealed symbols, turn, last score."""
    answer = jax.nn.one_hot(state.answer, task.alphabet + 1, dtype=jnp.float32)
    revealed = jax.nn.one_hot(state.revealed, task.alphabet + 1, dtype=jnp.float32)
    batch = state.turn.shape
    turn = jax.nn.one_hot(jnp.minimum(state.turn, task.turns - 1), task.turns, dtype=jnp.float32)
    return jnp.concatenate(
        [
            answer.reshape(*batch, -1),
            revealed.reshape(*batch, -1),
            turn,
            state.score[..., None],
        ],
        axis=-1,
    )


def anchor_hash(state: State) -> jax.Array:
    """An int32 hash of the observation (answer, revealed symbols, turn) — GiGPO's anchor state.

    The score is a function of the answer and the (per-prompt) target, so it adds nothing within a
    prompt group. FNV-1a style mixing in uint32 (wrapping multiply), folded to a non-negative
    int32 so the ids fit credax's int32 contract.
    """
    parts = jnp.concatenate(
        [state.answer, state.revealed, state.turn[..., None]], axis=-1
    ).astype(jnp.uint32)
    h = jnp.full(parts.shape[:-1], 2166136261, jnp.uint32)
    for i in range(parts.shape[-1]):
        h = (h ^ parts[..., i]) * jnp.uint32(16777619)
    return (h & jnp.uint32(0x7FFFFFFF)).astype(jnp.int32)


def step(task: Task, state: State, kind: jax.Array, pos: jax.Array, val: jax.Array):
    """Apply one action to every episode; finished episodes are left unchanged.

    Args:
      kind: int32[...] action type (``STOP``, ``PROBE``, ``WRITE``).
      pos: int32[...] position in ``[0, L)`` (ignored for ``STOP``).
      val: int32[...] symbol in ``[0, V)`` (used by ``WRITE`` only).

    Returns:
      ``(next_state, Step)``.
    """
    live = ~state.done
    at = jax.nn.one_hot(pos, task.length, dtype=jnp.bool_)  # [..., L]
    probe = live & (kind == PROBE)
    write = live & (kind == WRITE)
    info_gain = probe & jnp.any(at & (state.revealed == task.blank), axis=-1)
    revealed = jnp.where(probe[..., None] & at, state.target, state.revealed)
    answer = jnp.where(write[..., None] & at, val[..., None], state.answer)
    score = verifier(answer, state.target)
    turn = state.turn + live.astype(jnp.int32)
    done = state.done | (live & (kind == STOP)) | (turn >= task.turns)
    role = jnp.where(
        score > state.score,
        DECISIVE,
        jnp.where(score < state.score, REGRESSION, jnp.where(info_gain, EXPLORATION, NO_PROGRESS)),
    ).astype(jnp.int32)
    nxt = State(state.target, answer, revealed, turn, score, done)
    return nxt, Step(valid=live, score=score, role=role, info_gain=info_gain)


def held_out(task: Task, targets: jax.Array) -> jax.Array:
    """``bool[...]``: the target belongs to the evaluation split (about 1 in 5 of all targets).

    The split is a fixed hash of the target, so training never samples an evaluation target and
    the evaluation set is the same for every method and seed.
    """
    code = jnp.zeros(targets.shape[:-1], jnp.uint32)
    for i in range(task.length):
        code = code * jnp.uint32(task.alphabet) + targets[..., i].astype(jnp.uint32)
    mixed = (code * jnp.uint32(2654435761)) >> jnp.uint32(16)
    return (mixed % jnp.uint32(5)) == jnp.uint32(0)


def all_targets(task: Task) -> jax.Array:
    """Every target, ``int32[V**L, L]`` (small for the toy sizes)."""
    n = task.alphabet**task.length
    idx = jnp.arange(n, dtype=jnp.int32)
    digits = [(idx // (task.alphabet**i)) % task.alphabet for i in reversed(range(task.length))]
    return jnp.stack(digits, axis=-1).astype(jnp.int32)


def sample_train_targets(task: Task, key: jax.Array, num: int, pool: jax.Array) -> jax.Array:
    """``num`` targets drawn uniformly from ``pool`` (the training split), ``int32[num, L]``."""
    idx = jax.random.randint(key, (num,), 0, pool.shape[0])
    return pool[idx]


def split_targets(task: Task):
    """(train pool, evaluation pool) as host-side concrete arrays."""
    every = all_targets(task)
    heldout = held_out(task, every)
    import numpy as np

    every_np, heldout_np = np.asarray(every), np.asarray(heldout)
    return jnp.asarray(every_np[~heldout_np]), jnp.asarray(every_np[heldout_np])

"""Role judges for TRIAGE: the oracle, noisy judges and the regression-blind judge.

The oracle labels each turn from what the environment knows (``env.step``): Decisive when the
score rose, Regression when it fell, Exploration when the turn revealed a new target symbol, and
No-progress otherwise (re-probing, rewriting the same symbol, writing a wrong symbol over a wrong
one, stopping). The judges below corrupt the oracle the way real LLM judges fail:

- ``noisy(p)``: each label is replaced, with probability ``p``, by one of the three *other* roles
  drawn uniformly (a symmetric confusion, the judge-reliability axis of TRIAGE's theory);
- ``regression_blind``: every Regression is called Decisive — the failure the TRIAGE paper reports
  for a judge without thinking (regression-in-success F1 24 vs 82), which made TRIAGE worse than
  GRPO there.

Padded turns are labelled ``-1`` (unlabeled), which credax's ``role_credit`` maps to ``0``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import env as E

NUM_ROLES = 4


def oracle(roles: jax.Array, turn_mask: jax.Array, key: jax.Array | None = None) -> jax.Array:
    del key
    return jnp.where(turn_mask, roles, -1).astype(jnp.int32)


def noisy(p: float):
    """A judge that flips each oracle label to a uniformly drawn other role with probability p."""

    def judge(roles, turn_mask, key):
        k_flip, k_to = jax.random.split(key)
        flip = jax.random.bernoulli(k_flip, p, roles.shape)
        shift = jax.random.randint(k_to, roles.shape, 1, NUM_ROLES, dtype=jnp.int32)
        flipped = (roles + shift) % NUM_ROLES  # uniform over the 3 other roles
        return jnp.where(turn_mask, jnp.where(flip, flipped, roles), -1).astype(jnp.int32)

    judge.__name__ = f"noisy_{p}"
    return judge


def regression_blind(roles, turn_mask, key=None):
    del key
    blind = jnp.where(roles == E.REGRESSION, E.DECISIVE, roles)
    return jnp.where(turn_mask, blind, -1).astype(jnp.int32)

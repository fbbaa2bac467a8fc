"""An example of scoring your own credit method in the lab (the guide's "Score your own method").

    python -m benchmarks.lab --credit benchmarks/lab/example_credit.py:progress_credit --tasks refine

A credit method is a function ``(ctx, settings) -> f32[B, K]``: ``ctx`` is the rollout batch
(``methods.Context``: ``ctx.rollout.scores`` / ``turn_mask`` / ``roles`` / ``anchors``,
``ctx.outcome`` the episode return, ``ctx.groups`` the prompt of each row as ``credax.Groups``,
``ctx.values`` the value head, ``ctx.model`` the policy), ``settings`` the lab's shared
``methods.Settings``. It is traced once under ``jax.jit`` and ``jax.vmap``: pure JAX only. The
lab trains it with the same loss, optimiser, seeds and batches as every built-in method and
measures its credit against the ground truth ``A*``.
"""

import jax.numpy as jnp

import credax


def progress_credit(ctx, settings):
    """GRPO's outcome advantage plus the turn's own score change: a user's first per-turn idea."""
    r = ctx.rollout
    outcome = credax.grpo_advantages(ctx.outcome, ctx.groups)
    progress = credax.adjacent_delta_credit(r.scores, r.turn_mask)
    return jnp.where(r.turn_mask, outcome[:, None] + progress, 0.0)


progress_credit.label = "example: GRPO + score change"  # the name the tables show (optional)

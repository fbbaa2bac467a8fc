"""G2PO: a state graph per prompt — identical observations merged into nodes, edges scored.

Group-Graph Policy Optimization (code ``Nala-YN/G2PO``, ``g2po/core_g2po.py``) builds, for each
prompt, a graph whose nodes are the distinct observations its rollouts visited (GiGPO's anchor
groups, at any turn index) and whose edges are the steps between them. A node's value is the mean
discounted episode reward of the steps that acted in it; a step is credited with where its edge
leads (the next node's value, compared with the other steps of the same node) and with how much the
edge gains (next value minus own value, compared with every step of the prompt), on top of the
episode advantage. Every statistic goes through the grouping primitive (``_group_stats``, ``_grouping``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._checks import Finite, NonNegative, Unit
from ._group_ids import Groups, groups_from_keys
from ._group_stats import check_x_and_groups, group_stats
from ._grouping import jit_grouped, normalization_or, normalize_with_groups
from ._normalization import Normalization

EPISODE_POOLING = ("step", "trajectory")


class G2PO(NamedTuple):
    """G2PO advantages and their parts, all ``float[B, K]`` and ``0`` on padded turns.

    Attributes:
      advantages: ``episode + omega · (next_score + score_gain)``.
      episode: the episode advantage (the outcome normalised within the prompt).
      next_score: the next node's value (minus the invalid-action penalty) normalised within the
        step's node (component 1 of ``compute_step_level_advantage``).
      score_gain: the edge's gain, next node's value minus this node's, normalised over every step
        of the prompt (component 2).
      node_value: the value of the node each step acted in (``compute_group_aggregation_values``).
    """

    advantages: Array
    episode: Array
    next_score: Array
    score_gain: Array
    node_value: Array


@jit_grouped(
    static_argnames=("episode_pooling",),
    anchors=True,
)
def g2po_advantages(
    outcome_rewards: Float[Array, " B"],
    anchor_ids: Int[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups,
    action_valid: Bool[Array, "B K"] | None = None,
    *,
    gamma: Unit = 0.95,
    omega: Finite = 1.0,
    invalid_penalty: Finite = 0.1,
    success_reward: Finite = 10.0,
    step_discount: NonNegative = 1.0,
    episode_pooling: str = "step",
    normalization: Normalization | None = None,
) -> G2PO:
    """G2PO: episode advantage plus ``ω`` × the state graph's edge advantage.

    Per prompt, the nodes are the distinct ``anchor_ids`` its rollouts visited (at any turn
    index); row ``i`` has ``L_i`` valid turns (a prefix), outcome ``R_i``, and acts at turn ``t``
    in node ``n(i,t)``::

        V(n)        = mean_{(j,s) in n} γ^{L_j - s} R_j                     node value
        N_{i,t}     = V(n(i,t+1)), or the terminal value after the last turn:
                      success_reward if R_i == success_reward, else 0
        C1_{i,t}    = norm_{steps of node n(i,t)}(N_{i,t} - invalid_penalty · [action invalid])
        C2_{i,t}    = norm_{steps of the prompt}(N_{i,t} - V(n(i,t)))
        E_{i,t}     = norm_{steps of the prompt}(R_i)        (each step a copy: episode_pooling="step")
        A_{i,t}     = E_{i,t} + ω (C1_{i,t} + C2_{i,t})

    ``norm`` is :func:`credax.group_normalize` with ``normalization`` (default
    ``Normalization()``: unbiased std, ``+1e-6``: the shipped run's ``mean_std_norm``;
    ``Normalization(scale="none")`` is the code's default ``mean_norm``). Its ``singleton`` field
    is set per part by G2PO's rules: a node of one step gets ``C1 = 0``, a prompt with one step
    ``C2 = 0`` (the code: NaN from ``torch.std`` of one value), and a prompt whose episode
    population is a single value keeps its raw reward as ``E`` (the code's mean 0, std 1). That
    population is the prompt's *steps* under the default ``episode_pooling="step"`` (the code's
    rows are steps): a prompt with one trajectory of two or more steps is a constant set, so
    ``E = 0`` on each step, and only a one-step prompt keeps its raw reward; under
    ``"trajectory"`` it is the prompt's trajectories, and a one-trajectory prompt keeps its raw
    reward. Constant sets give exactly ``0`` (the code divides a float residue by ``eps``).

    Parity: ``tests/test_g2po.py`` checks this value for value against a NumPy restatement of
    ``g2po/core_g2po.py`` (``compute_group_aggregation_values`` then
    ``compute_g2po_outcome_advantage``), row = step, as verl-agent lays batches out, and against
    the code itself when it is on the machine. The code fixes ``γ = 0.95``, ``SUCCESS_REWARD =
    10`` and the penalty 0.1 (this function's defaults) and pools episode statistics over steps
    (``compute_mean_std_cross_steps=True``); ``episode_pooling="trajectory"`` counts each
    trajectory once. ``step_discount`` is credax's: it multiplies the step part by
    ``step_discount^t`` (1, the code: off).

    Args:
      outcome_rewards: ``float[B]`` episode reward ``R_i`` (the code's ``episode_rewards``; it also
        reaches the episode level as each step row's summed token reward).
      anchor_ids: ``int[B, K]`` id of the observation each step acted on (equality is all that
        matters, within a prompt; host 64-bit ids are densified exactly).
      turn_mask: ``bool[B, K]`` real steps, a prefix of each row.
      group_ids: ``int[B]`` prompt of each rollout, or a ``Groups``.
      action_valid: optional ``bool[B, K]``; a step whose action was invalid gets ``-invalid_penalty``
        on its next-node score (``is_action_valid``). ``None``: every action valid.
      gamma: discount of the node values, in ``[0, 1]``; may be traced.
      omega: weight of the step part (``step_advantage_w``); may be traced.
      invalid_penalty: may be traced. success_reward: the outcome that marks success; may be traced.
      step_discount: ``>= 0``; may be traced.
      episode_pooling: static, ``"step"`` (the code) or ``"trajectory"``.
      normalization: a :class:`credax.Normalization` for all three normalisations.

    Returns:
      :class:`G2PO` ``(advantages, episode, next_score, score_gain, node_value)``, each
      ``float[B, K]``; ``0`` on padded turns.

    Raises:
      TypeError: non-integer ``anchor_ids``/``group_ids``, non-boolean masks.
      ValueError: shapes disagree; ``gamma`` outside ``[0, 1]``; unknown ``episode_pooling``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> # One prompt, two rollouts from state 1: one succeeds (10) via state 2, one fails via 3.
      >>> out = credax.g2po_advantages(jnp.array([10.0, 0.0]), jnp.array([[1, 2], [1, 3]]),
      ...                              jnp.ones((2, 2), bool), jnp.zeros(2, jnp.int32),
      ...                              normalization=credax.Normalization(scale="none"))
      >>> # V(1) = (.95² 10 + .95² 0) / 2 = 4.5125, V(2) = 9.5, V(3) = 0; E = R - 5 = ±5
      >>> # C1: node 1 -> next (9.5, 0): ±4.75; nodes 2, 3 single: 0
      >>> # C2: gains (4.9875, .5, -4.5125, 0) - their mean .24375
      >>> # A = (5 + 4.75 + 4.74375, 5 + .25625), (-5 - 4.75 - 4.75625, -5 - .24375)
      >>> [[round(float(v), 4) for v in row] for row in out.advantages]
      [[14.4937, 5.2562], [-14.5063, -5.2438]]
      >>> # A prompt with one trajectory of two steps: its step population (10, 10) is constant.
      >>> one = (jnp.array([10.0]), jnp.array([[1, 2]]), jnp.ones((1, 2), bool), jnp.zeros(1, int))
      >>> credax.g2po_advantages(*one).episode.tolist()
      [[0.0, 0.0]]
      >>> credax.g2po_advantages(*one, episode_pooling="trajectory").episode.tolist()
      [[10.0, 10.0]]

    References:
      Group-Graph Policy Optimization for Long-Horizon Agentic Reinforcement Learning; code
      ``Nala-YN/G2PO`` (``g2po/core_g2po.py``, ``examples/g2po_trainer/run_alfworld.sh``).
    """
    _checks.check_option(episode_pooling, "episode_pooling", EPISODE_POOLING)
    r = _checks.as_float_array(outcome_rewards, "outcome_rewards")
    _checks.check_ndim(r, "outcome_rewards", 1, "[B]")
    anchors = _checks.as_int_array(anchor_ids, "anchor_ids")
    _checks.check_ndim(anchors, "anchor_ids", 2, "[B, K]")
    _checks.check_shape(r, "outcome_rewards", anchors.shape[:1], "[B]")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", anchors.shape)
    check_x_and_groups(anchors, group_ids, "anchor_ids")
    out_dtype, dt = _numeric.output_dtype(r.dtype), _numeric.compute_dtype(r.dtype)
    batch, num_turns = anchors.shape
    if num_turns == 0:
        zero = jnp.zeros((batch, 0), out_dtype)
        return G2PO(zero, zero, zero, zero, zero)
    if action_valid is None:
        invalid = jnp.zeros(anchors.shape, bool)
    else:
        invalid = ~_checks.as_mask(action_valid, "action_valid", anchors.shape)
    r = r.astype(dt)
    n = batch * num_turns
    flat_mask = turn_mask.reshape(n)
    opts = normalization_or(normalization)

    # Node values: γ^{L - t} R over the member steps of each (prompt, anchor) node.
    length = jnp.sum(turn_mask, axis=1)
    t = jnp.arange(num_turns, dtype=dt)[None, :]
    gamma = _checks.scalar(gamma, dt, "gamma")
    discounted = gamma ** (length[:, None].astype(dt) - t) * r[:, None]
    discounted = jnp.where(turn_mask, discounted, jnp.zeros((), dt))
    prompt = jnp.broadcast_to(group_ids.index[:, None], anchors.shape).reshape(n)
    nodes = groups_from_keys(prompt, anchors.reshape(n), valid=flat_mask)
    st = group_stats(discounted.reshape(n), nodes, flat_mask, sum_sq=False)
    value = jnp.where(st.nonfinite, jnp.nan, st.mean_value()).reshape(anchors.shape)
    value = jnp.where(turn_mask, value, jnp.zeros((), dt))

    # Where each edge leads: the next step's node, or the terminal node.
    success = _checks.scalar(success_reward, dt, "success_reward")
    terminal = jnp.where(r == success, success, jnp.zeros((), dt))
    next_valid = jnp.pad(turn_mask[:, 1:], ((0, 0), (0, 1)))
    next_value = jnp.where(next_valid, jnp.pad(value[:, 1:], ((0, 0), (0, 1))), terminal[:, None])
    penalty = _checks.scalar(invalid_penalty, dt, "invalid_penalty")
    scored = next_value - jnp.where(invalid, penalty, jnp.zeros((), dt))
    c1 = normalize_with_groups(scored.reshape(n), nodes, flat_mask, opts.replace(singleton="zero"))
    prompt_steps = Groups(prompt, group_ids.num_groups)
    gain = jnp.where(turn_mask, next_value - value, jnp.zeros((), dt)).reshape(n)
    c2 = normalize_with_groups(gain, prompt_steps, flat_mask, opts.replace(singleton="zero"))

    # The episode level.
    if episode_pooling == "step":
        per_step = jnp.where(turn_mask, r[:, None], jnp.zeros((), dt)).reshape(n)
        episode = normalize_with_groups(per_step, prompt_steps, flat_mask,
                                        opts.replace(singleton="raw")).reshape(anchors.shape)
    else:
        has_turn = jnp.any(turn_mask, axis=1)
        a_e = normalize_with_groups(r, group_ids, has_turn, opts.replace(singleton="raw"))
        episode = jnp.where(turn_mask, a_e[:, None], jnp.zeros((), dt))

    c1, c2 = c1.reshape(anchors.shape), c2.reshape(anchors.shape)
    weight = _checks.scalar(omega, dt, "omega") * _checks.scalar(step_discount, dt, "step_discount") ** t
    adv = jnp.where(turn_mask, episode + weight * (c1 + c2), jnp.zeros((), dt))
    parts = (adv, episode, c1, c2, value)
    return G2PO(*(p.astype(out_dtype) for p in parts))

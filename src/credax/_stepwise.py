"""Step-level baselines from the literature: MT-GRPO and GiGPO.

Both compare turns (steps) across the trajectories of one prompt through the shared grouping
primitive (``_grouping``): MT-GRPO per (prompt, turn index), GiGPO per (prompt, anchor state) at any
turn index.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks
from ._checks import Finite, Unit
from ._group_ids import Groups, groups_from_keys
from ._group_stats import check_x_and_groups, prepare
from ._grouping import jit_grouped, normalization_or, normalize_with_groups
from ._normalization import Normalization
from ._turns import masked_discounted_returns, prepare_anchored_steps, prepare_turns

# --- MT-GRPO ---------------------------------------------------------------------------------


@jit_grouped()
def mt_grpo_advantages(
    turn_rewards: Float[Array, "B K"],
    outcome_rewards: Float[Array, " B"],
    turn_mask: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups,
    *,
    turn_coef: Finite = 1.0,
    normalization: Normalization | None = None,
) -> Float[Array, "B K"]:
    """MT-GRPO turn advantages: outcome advantage per prompt plus turn advantage per (prompt, turn).

    ::

        Â^O_i    = group_normalize(outcome_rewards)_i           over the rows of prompt q_i
        Â^T_{i,k} = group_normalize(turn_rewards)_{i,k}          over the rows of q_i with turn k
        A_{i,k}   = Â^O_i + turn_coef · Â^T_{i,k}                on valid turns, 0 elsewhere

    Both normalisations take the same options (those of :func:`credax.group_normalize`, as one
    :class:`credax.Normalization` or as keywords). A row with no valid turn is not a trajectory:
    it enters no statistic and gets ``0``.

    K-turn generalisation. The paper's code (``SiliangZeng/Multi-Turn-RL-Agent``,
    ``MTGRPOEnvTrainer._assign_advantages``) is fixed at two turns: tokens of the first turn get
    ``Â^O + λ·Â^T`` from one scalar turn reward per rollout, later tokens ``Â^O``. That is this
    function with ``K = 2``, ``turn_rewards[:, 1]`` constant (a constant set normalises to exactly
    ``0``) and ``normalization=credax.presets.TRL`` (unbiased std, ``+1e-4``). Here every turn index gets its
    own normalised turn reward, the per-turn-index form the paper's v2 describes; the code's
    fallback (rows without a tool result get the advantage of the summed reward) is not
    reproduced — give such rows their own mask.

    Stopping (verl issue #7244): the per-turn-index peer sets contain only rows that reached turn
    ``k``; that a row reached ``k`` is its history, so the baseline of turn ``k`` does not depend
    on the row's own actions from ``k`` on and this function adds no stopping-dependent term (on
    the two-turn stopping MDP of ``tests/test_turn_baseline.py``, with leave-one-out centring and
    no std, its expected gradient is exactly the policy gradient plus ``λ·`` each turn's reward
    credited to its own action). The RFC's
    bias — a hidden bonus of ``−E[r_k | turn k reached]`` on every "take another turn" — appears
    when per-index-normalised turn rewards are *summed over the remaining turns*; for a return
    credited per turn without it, use :func:`credax.unbiased_turn_advantages`.

    Args:
      turn_rewards: ``float[B, K]`` reward of each turn; padded turns may hold anything.
      outcome_rewards: ``float[B]`` outcome reward of each trajectory.
      turn_mask: ``bool[B, K]`` real turns.
      group_ids: ``int[B]`` prompt of each row (any integers), or a ``Groups``.
      turn_coef: ``λ`` (``turn_advantage_coef`` in the paper's code, default 1). May be traced.
      normalization: one :class:`credax.Normalization` for both levels, as
        :func:`credax.group_normalize` (``None``: ``Normalization()``; its ``eps`` may be traced).

    Returns:
      ``float[B, K]`` in the dtype of ``turn_rewards``; ``0`` on padded turns.

    Raises:
      TypeError: non-boolean ``turn_mask``, non-integer ``group_ids``, a ``normalization`` that
        is not a :class:`credax.Normalization`.
      ValueError: shapes disagree.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> turn = jnp.array([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])  # 2-turn code form
      >>> outcome = jnp.array([1.0, 0.0, 0.0, 1.0])
      >>> a = credax.mt_grpo_advantages(turn, outcome, jnp.ones((4, 2), bool), jnp.zeros(4, int),
      ...                               normalization=credax.Normalization(eps=0.0))
      >>> # Â^O = ±0.5/0.57735 = ±0.866; turn 0: μ=0.75, σ=0.5 -> Â^T = 0.5, -1.5, 0.5, 0.5
      >>> [[round(float(v), 3) for v in row] for row in a]
      [[1.366, 0.866], [-2.366, -0.866], [-0.366, -0.866], [1.366, 0.866]]

    References:
      Zeng et al. 2025, MT-GRPO (arXiv 2505.11821); code ``SiliangZeng/Multi-Turn-RL-Agent``
      (``verifiers/trainers/mt_grpo_env_trainer.py``); verl RFC issue #7244 for the bias.
    """
    r_t, turn_mask, out_dtype = prepare_turns(turn_rewards, turn_mask, "turn_rewards")
    check_x_and_groups(r_t, group_ids, "turn_rewards")
    r_o = _checks.as_float_array(outcome_rewards, "outcome_rewards")
    _checks.check_shape(r_o, "outcome_rewards", r_t.shape[:1], "[B]")
    dt = r_t.dtype
    has_turn = jnp.any(turn_mask, axis=1)
    opts = normalization_or(normalization)
    a_o = normalize_with_groups(r_o.astype(dt), group_ids, has_turn, opts)
    a_t = normalize_with_groups(r_t, group_ids, turn_mask, opts)
    coef = _checks.scalar(turn_coef, dt, "turn_coef")
    out = jnp.where(turn_mask, a_o[:, None] + coef * a_t, jnp.zeros_like(r_t))
    return out.astype(out_dtype)


# --- GiGPO -----------------------------------------------------------------------------------



@jit_grouped(
    anchors=True,
)
def gigpo_advantages(
    outcome_rewards: Float[Array, " B"],
    step_rewards: Float[Array, "B K"],
    anchor_ids: Int[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups,
    *,
    gamma: Unit = 0.95,
    omega: Finite = 1.0,
    normalization: Normalization | None = None,
) -> Float[Array, "B K"]:
    """GiGPO: episode advantage per prompt plus ``ω`` × step advantage within anchor-state groups.

    ::

        A^E_i     = (R_i - mean_{j ∈ prompt(i)} R_j) / (std + eps)          (Eq. 3)
        G_{i,k}   = Σ_{t>=k} γ^{t-k} r_{i,t}                                (Eq. 5)
        A^S_{i,k} = (G_{i,k} - mean_{anchor(i,k)} G) / (std + eps)          (Eqs. 6-7)
        A_{i,k}   = A^E_i + ω · A^S_{i,k}                                   (Eq. 8)

    The anchor group of a step is every valid step, at **any** turn index, of any trajectory of the
    same prompt whose ``anchor_ids`` is equal: steps that acted on the same environment state are
    compared with each other. Both stds are unbiased (``ddof=1``) with ``eps`` added (the
    defaults of :class:`credax.Normalization`; ``normalization=`` changes both levels);
    ``Normalization(scale="none")`` (GiGPO's ``mean_norm``) only subtracts the mean, at both
    levels. Degenerate groups: an anchor group of one step, or whose returns are all equal, gives
    step advantage exactly ``0`` (GiGPO's rule); an episode group of one trajectory gives episode
    advantage ``0`` and a zero-spread one gives ``0`` (credax's ``group_normalize`` defaults).
    Trajectories with no valid turn (padding rows) take no part in any statistic.

    Args:
      outcome_rewards: ``float[B]`` episode reward ``R_i`` of each trajectory.
      step_rewards: ``float[B, K]`` per-step environment rewards ``r_{i,t}`` (put the episode
        reward on the last step if that is your reward design, as verl-agent's reward manager
        does). Values at padded turns never matter (NaN included).
      anchor_ids: ``int[B, K]`` id of the state each step acted on — the caller's hash of the
        observation (e.g. ``hash(text) & 0x7FFFFFFF``, or ``np.unique(obs, return_inverse=True)``
        per batch). Equal ids mean the same state; only equality matters, within a prompt. Host
        (NumPy, list) 64-bit ids are densified exactly before JAX sees them; a JAX array made
        from 64-bit ids without x64 was truncated already and could merge two states, so pass
        host ids. Values at padded turns are ignored.
      turn_mask: ``bool[B, K]`` real steps.
      group_ids: ``int[B]`` prompt (task, initial state) of each trajectory, or a ``Groups``.
      gamma: step discount ``γ``; may be traced. GiGPO uses 0.95.
      omega: weight ``ω`` of the step advantage (``step_advantage_w``); may be traced.
      normalization: the options of both normalisations as one :class:`credax.Normalization`
        (default ``Normalization()``: unbiased std, ``+eps``, singletons ``0``). Its ``scale``:
        ``"group"`` divides by ``std + eps`` (``mean_std_norm``), ``"none"`` only centres
        (``mean_norm``, verl-agent's config default), ``"batch"`` divides by the std of all
        episodes / all steps; its ``eps`` is added to both stds and may be traced.

    Returns:
      ``float[B, K]`` in the promoted floating dtype of the two reward inputs (float32 for integer
      input); ``0`` at padded turns.

    Raises:
      TypeError: non-numeric rewards, non-integer ``anchor_ids`` or ``group_ids``, non-boolean
        ``turn_mask``, a ``normalization`` that is not a :class:`credax.Normalization`.
      ValueError: shapes disagree.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> # One prompt, two trajectories; both start in state 5, so their first steps compare.
      >>> outcome = jnp.array([1.0, 0.0])
      >>> steps = jnp.array([[0.0, 1.0], [0.0, 0.0]])
      >>> anchors = jnp.array([[5, 8], [5, 9]])
      >>> mask = jnp.ones((2, 2), bool)
      >>> adv = credax.gigpo_advantages(outcome, steps, anchors, mask, jnp.array([0, 0]),
      ...                               gamma=0.5, normalization=credax.Normalization(eps=0.0))
      >>> # A^E = ±0.7071; G = (0.5, 1) and (0, 0); anchor 5: ±0.7071; anchors 8, 9: singletons -> 0
      >>> [[round(float(v), 4) for v in row] for row in adv]
      [[1.4142, 0.7071], [-1.4142, -0.7071]]

    References:
      Feng et al. 2025, GiGPO (arXiv 2505.10978), Eqs. 3-8; code ``langfengQ/verl-agent``
      ``gigpo/core_gigpo.py``. Where credax differs from verl-agent: (1) an episode group of one
      trajectory gets ``0``, verl-agent keeps the raw reward (mean 0, std 1) — add
      ``jnp.where(credax.group_count(ids) == 1, outcome_rewards, 0)[:, None]`` on valid turns to
      reproduce it; (2) each trajectory counts once in the episode statistics, as in the paper's
      Eq. 3: verl-agent's default ``compute_mean_std_cross_steps=True`` pools one copy per step
      row (longer trajectories weigh more), which is not reproduced; (3) anchors are caller ids
      compared by equality, not observation text (verl-agent's optional similarity clustering is
      not reproduced — cluster on the host and pass the cluster id).
    """
    r, s, anchors, turn_mask, out_dtype, dt = prepare_anchored_steps(
        outcome_rewards, step_rewards, anchor_ids, turn_mask)

    # Episode level: one entry per trajectory (the paper's Eq. 3), padding rows excluded.
    has_turn = jnp.any(turn_mask, axis=1)
    r, has_turn, _ = prepare(r.astype(dt), group_ids, has_turn, "outcome_rewards")
    opts = normalization_or(normalization)
    a_e = normalize_with_groups(r, group_ids, has_turn, opts)

    # Step level: flatten [B, K] to B*K entries and group by the key pair (prompt, anchor), so a
    # state revisited at another turn index, or by another trajectory, joins the same group.
    batch, num_turns = s.shape
    n = batch * num_turns
    g_k = masked_discounted_returns(s.astype(dt), turn_mask, _checks.scalar(gamma, dt, "gamma"))
    prompt = jnp.broadcast_to(group_ids.index[:, None], s.shape).reshape(n)
    flat_mask = turn_mask.reshape(n)
    anchor_groups = groups_from_keys(prompt, anchors.reshape(n), valid=flat_mask)
    a_s = normalize_with_groups(g_k.reshape(n), anchor_groups, flat_mask, opts)
    a_s = a_s.reshape(s.shape)

    omega = _checks.scalar(omega, dt, "omega")
    out = jnp.where(turn_mask, a_e[:, None] + omega * a_s, jnp.zeros((), dt))
    return out.astype(out_dtype)

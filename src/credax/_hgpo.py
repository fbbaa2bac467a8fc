"""HGPO: hierarchical history groups — steps compared with peers that share their last k observations.

GiGPO groups a step with the other steps of its prompt that acted on the same state. HGPO widens
that into a hierarchy: at level ``k`` (``1 <= k <= H + 1``) a step's group is every valid step of
the same prompt whose last ``k`` observations (its own and the ``k - 1`` before it) are equal. Low
levels have many members (a good baseline, but a coarse notion of "same situation"); high levels
few (precise, noisy). Each step's advantage is a weighted mean of its normalised discounted return
over the levels where it is informative.

Groups are always nested inside the prompt: the key of every level includes the prompt's group,
so identical observations reached from different prompts never pool (a framework shipped anchor
groups pooled over the whole batch; here it cannot happen by construction). Grouping goes through
the shared primitive (``_group_ids.groups_from_keys`` and ``_grouping.normalize_with_groups``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._checks import Finite, Unit
from ._group_ids import Groups, groups_from_keys
from ._group_stats import check_x_and_groups, exact_at_mean, group_stats, prepare
from ._grouping import jit_grouped, normalization_or, normalize_with_groups
from ._normalization import Normalization
from ._turns import masked_discounted_returns, prepare_anchored_steps

EPISODE_POOLING = ("trajectory", "step")
EPISODE_SINGLETON = ("zero", "raw")


class HGPO(NamedTuple):
    """HGPO advantages and their parts.

    Attributes:
      advantages: ``float[B, K]`` the weighted mean over informative levels; ``0`` on padded turns.
      levels: ``float[B, K, H + 2]`` the normalised return of each step at each level: index 0 is
        the episode level (``0`` unless ``episode_group``), index ``k`` the level of the last
        ``k`` observations.
      informative: ``bool[B, K, H + 2]`` the levels that voted: valid and the step's value not
        exactly at its group's mean (a singleton group, a zero-spread group or a member exactly
        at its group mean gives ``0`` and abstains; "exactly" in real arithmetic on the returns
        as the inputs define them, decided with integers, see :func:`hgpo_advantages`).
    """

    advantages: Array
    levels: Array
    informative: Array


def history_keys(anchors: jnp.ndarray, turn_mask: jnp.ndarray, k: int):
    """The last ``k`` anchors of each step (``[B, K]`` each, newest first) and where all are valid.

    Position ``t`` at level ``k`` needs ``t >= k - 1`` and valid turns at ``t - k + 1 .. t``, so a
    padded turn's anchor (garbage) is never part of a key.
    """
    keys, valid = [], turn_mask
    for j in range(k):
        shifted = jnp.pad(anchors, ((0, 0), (j, 0)))[:, : anchors.shape[1]]
        shifted_mask = jnp.pad(turn_mask, ((0, 0), (j, 0)))[:, : anchors.shape[1]]
        keys.append(shifted)
        valid = valid & shifted_mask
    return keys, valid


# HGPO's history levels: the population std (ddof 0), ``+1e-6`` on the std.
HGPO_NORMALIZATION = Normalization(ddof=0)


def _exact_votes(a, x, g: Groups, mask, *, pooled: bool, lo=None):
    """A level's values and votes with "at the mean" decided exactly (no tolerance).

    A member exactly at its set's mean (:func:`credax._group_stats.exact_at_mean`, on the
    two-float ``x + lo`` when ``lo`` is given) gets exactly ``0`` and abstains, whatever float
    residue the normalisation left; every other valid member votes, even where its float value
    rounded to ``0``. Where the set's values are off the exact grid (or non-finite) the float value
    decides (``!= 0``). ``pooled``: the episode level, whose singletons follow
    ``episode_singleton`` (a raw reward votes when nonzero), so only sets of two or more are
    decided exactly there.
    """
    st = group_stats(x, g, mask, sum_sq=False)
    exact = exact_at_mean(x, g, mask, st.inv_unit, lo)
    decided = exact.decided & mask
    if pooled:
        decided = decided & (exact.count > 1)
    at_mean = exact.at_mean & decided
    a = jnp.where(at_mean, jnp.zeros((), a.dtype), a)
    voted = mask & jnp.where(decided, ~at_mean, a != 0)
    return a, voted


def _two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e == a + b`` exactly (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    """``a = hi + lo`` with ``hi`` the top half of the significand (its low bits masked off): each
    of ``hi`` and ``lo`` has at most 12 significant bits in float32, so the product of two halves
    is exact (Dekker's split, made with bits so no contracted multiply-add can disturb it)."""
    ints = jnp.dtype(f"int{8 * a.dtype.itemsize}")
    drop = (int(jnp.finfo(a.dtype).nmant) + 1) // 2
    bits = jax.lax.bitcast_convert_type(a, ints)
    hi = jax.lax.bitcast_convert_type(bits & ints.type(~((1 << drop) - 1)), a.dtype)
    return hi, a - hi


def two_float_returns(r: jax.Array, turn_mask: jax.Array, gamma: jax.Array):
    """The discounted returns as float32 pairs ``hi + lo`` (double-float, ~48 bits).

    The recurrence of :func:`credax._turns.masked_discounted_returns`, ``G = r + γ G'``, on pairs:
    ``γ · hi'`` is split exactly into a float and its error (Dekker's product), ``r + fl(γ hi')`` is
    added exactly (TwoSum), and only the sum of the small terms (the two errors and ``γ · lo'``)
    is rounded, about ``2**-48`` of ``G``. So where the real return of the given float32 rewards
    and ``γ`` needs at most about 48 significant bits (``γ = 1``: sums of the rewards; a power of
    two) the pair *is* that return; otherwise it is within ``K · 2**-47`` of it (relative). Not
    differentiable (the caller stops its gradient); ``lo`` is ``0`` where ``hi`` is not finite.
    """
    sg = jax.lax.stop_gradient
    r, gamma = sg(jnp.where(turn_mask, r, jnp.zeros_like(r))), sg(gamma)
    gh, gl = _split(gamma)

    def step(carry, r_k):
        hi, lo = carry
        p = gamma * hi
        hh, hl = _split(hi)
        err = ((gh * hh - p) + gh * hl + gl * hh) + gl * hl  # p + err == γ · hi exactly
        s, t = _two_sum(r_k, p)
        hi, lo = _two_sum(s, t + (err + gamma * lo))
        return (hi, lo), (hi, lo)

    zero = jnp.zeros_like(r[:, 0])
    _, (hi, lo) = jax.lax.scan(step, (zero, zero), r.T, reverse=True)
    hi, lo = hi.T, lo.T
    lo = jnp.where(jnp.isfinite(hi) & jnp.isfinite(lo), lo, jnp.zeros_like(lo))
    return jnp.where(turn_mask, hi, jnp.zeros_like(hi)), jnp.where(turn_mask, lo, jnp.zeros_like(lo))


def _centred_on_a_member(g, hi, lo, groups: Groups, valid):
    """``g`` with each group's values replaced by their two-float distance to one member.

    Normalisation is blind to a per-group shift, so a level normalised from these values is the
    level of the returns; but the distance ``(hi_i + lo_i) - (hi_m + lo_m)`` to the group's
    largest member ``m``, rounded once, keeps a deviation that the float32 returns round away
    (three steps of float32 0.1 and one of 0.3 differ by 7e-9, their float32 returns not at all).
    The value carries ``g``'s gradient. A group whose spread overflows (returns beyond ``1e38``)
    keeps ``g``.
    """
    sg = jax.lax.stop_gradient
    ok = valid & jnp.isfinite(hi)
    neg_inf = jnp.full((), -jnp.inf, hi.dtype)
    both = jnp.where(ok[:, None], jnp.stack([hi, -hi], axis=1), neg_inf)
    top = jax.ops.segment_max(both, groups.index, groups.num_groups)[groups.index]
    big, low = top[:, 0], -top[:, 1]
    big_lo = jax.ops.segment_max(jnp.where(ok & (hi == big), lo, neg_inf), groups.index,
                                 groups.num_groups)[groups.index]
    s, e = _two_sum(hi, -big)
    y = s + (e + (lo - big_lo))
    fits = ok & jnp.isfinite(big - low)
    return jnp.where(fits, y + (g - sg(g)), g)


@jit_grouped(
    static_argnames=("history", "episode_group", "episode_pooling", "episode_singleton"),
    anchors=True,
)
def hgpo_advantages(
    outcome_rewards: Float[Array, " B"],
    step_rewards: Float[Array, "B K"],
    anchor_ids: Int[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups,
    *,
    history: int = 2,
    gamma: Unit = 0.95,
    alpha: Finite = 1.0,
    episode_group: bool = False,
    episode_pooling: str = "trajectory",
    episode_singleton: str = "zero",
    normalization: Normalization | None = None,
) -> HGPO:
    """HGPO step advantages: level-weighted normalised returns over history groups of ``k = 1..H+1``.

    With ``G_{i,t} = Σ_{s>=t} γ^{s-t} r_{i,s}`` (the discounted step return) and, at level ``k``,
    the group ``P_k(i,t)`` of valid steps of the same prompt with equal last ``k`` observations::

        A^k_{i,t} = (G_{i,t} - mean_{P_k} G) / (std_{P_k}(G) + eps)     std with ``ddof`` (0: HGPO)
        w_k       = (k + 1)^α                                          level weights (w_0 = 1)
        A_{i,t}   = Σ_{k ∈ I} w_k A^k_{i,t} / (Σ_{k ∈ I} w_k + eps)     I = informative levels

    A level is informative for a step when the step has ``k`` valid observations and
    ``A^k != 0`` in exact arithmetic: singleton groups, zero-spread groups and a member exactly at
    its group's mean give exactly ``0`` (whatever ``eps``) and abstain; every other member votes,
    however small its value. "Exactly at the mean" is ``n · G_{i,t} == Σ_{P_k} G`` in real
    arithmetic on the returns *as the inputs define them*, decided with integer limbs (no
    tolerance, no float residue). In float32 the returns for this decision, and for the level
    values, are double-float pairs ``hi + lo`` (about 48 significant bits): Dekker's exact product
    and Knuth's exact sum in the recurrence ``G = r + γ G'``, one rounding of the small terms a
    step. So "exact" means: equal to the real return of the given float32 rewards and ``γ``
    wherever that return fits in about 48 bits (``γ = 1``: sums of the rewards; ``γ`` a power of
    two; one or two steps for any ``γ``), and within ``K · 2**-47`` (relative) of it otherwise —
    far below what a float32 return keeps. A tie of the inputs stays a tie though its float32
    return rounds (rewards all 0.35f, γ = 1: returns x, 2x, 3x put 2x exactly at the mean, the
    float32 ``fl(x + fl(x + x))`` does not), and a deviation that float32 returns round away
    votes with its value (three steps of 0.1f against one of 0.3f differ by ``7.5e-9``): as
    verl-agent's rule computes in float64 on the same float32 inputs. In float64 (x64) the
    returns are the float64 recurrence's, as verl-agent's. Each level is normalised from each
    return's double-float distance to its group's largest member (the same level: normalisation
    ignores a per-group shift) with ``scale`` ``"group"`` or ``"none"``; ``"batch"`` (a batch std
    is not shift-free) normalises the float32 returns. Float32 inputs 0.7, 0.85, 1.0 are *not* an
    exact progression (the mean of the three float32 values misses 0.85f by ``2e-8``): the middle
    one votes; in float64 inputs 0.7, 0.85, 1.0 it is at the mean. A group holding a return below
    ``2**-32`` of its largest magnitude (float32; ``2**-61`` in float64), other than ``0``, is
    outside the exact grid: there the computed value decides (``!= 0``). The same rule applies to
    the episode level's groups of two or more (on the outcome rewards as given). The pairs cost
    time: see ``CHANGELOG.md`` (#44) for the measured figure. ``episode_group=True`` adds the episode
    advantage (the trajectory's outcome normalised within its prompt, unbiased std) as level 0
    with weight 1 (verl-agent's ``base_group``). ``scale="none"`` only centres (``mean_norm``), at
    every level. No informative level: ``0``. The weighted mean is computed with the weights
    divided by the step's largest informative one (the same value), so any finite ``α`` gives a
    finite result: a large ``α`` tends to the highest informative level; for a large ``-α`` every
    weight falls below ``eps`` and the value tends to ``0`` (with ``eps = 0``: the lowest level).
    ``K = 0`` (no turns) gives empty outputs ``[B, 0]`` and ``[B, 0, H + 2]``.

    Args:
      outcome_rewards: ``float[B]`` episode reward of each trajectory (used by the episode level).
      step_rewards: ``float[B, K]`` per-step rewards (put the episode reward on the last step if
        that is your reward design); padded values never matter.
      anchor_ids: ``int[B, K]`` the caller's hash of each step's observation (equality is all that
        matters; keep them in int32 or enable x64). Padded values never matter.
      turn_mask: ``bool[B, K]`` real steps.
      group_ids: ``int[B]`` prompt of each trajectory, or a ``Groups``.
      history: static ``0 <= H <= max(K, 2)``; levels ``k = 1..H+1`` (``H = 0`` is GiGPO's anchor
        group with HGPO's std and weighting, at the same turn index or not).
      gamma: discount of the step returns; may be traced.
      alpha: level-weight exponent ``α`` (0: uniform); may be traced.
      episode_group: static; include the episode level.
      episode_pooling: static; ``"trajectory"`` (each trajectory once, the paper's form) or
        ``"step"`` (one copy per valid step, verl-agent's ``compute_mean_std_cross_steps=True``).
      episode_singleton: static; a prompt with one trajectory gets ``0`` (``"zero"``) or its raw
        reward (``"raw"``, verl-agent's mean 0 / std 1).
      normalization: a :class:`credax.Normalization` for the history levels (default
        ``Normalization(ddof=0)``: HGPO's population std, ``+1e-6``). Its ``scale``: ``"group"``
        divides by the std (``mean_std_norm``), ``"none"`` only centres (``mean_norm``); its
        ``eps`` is also added to the weight sum and may be traced. Its ``singleton`` must be
        ``"zero"`` (a group of one abstains). The episode level uses it with ``ddof=1`` and
        ``singleton=episode_singleton``.

    Returns:
      :class:`HGPO` ``(advantages, levels, informative)``; float outputs in the promoted dtype of
      the reward inputs; ``0`` on padded turns.

    Raises:
      TypeError: non-integer ``anchor_ids``/``group_ids``, non-boolean ``turn_mask``, non-bool
        ``episode_group``, a ``normalization`` that is not a :class:`credax.Normalization`.
      ValueError: shapes disagree; unknown ``episode_pooling``/``episode_singleton``;
        ``history < 0`` or ``> max(K, 2)`` (levels above ``K`` are always empty, and each
        would be traced); ``normalization.singleton`` not ``"zero"``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> # One prompt, three trajectories: all start in state 1; two move to state 2, one to 3.
      >>> steps = jnp.array([[0.0, 1.0], [0.0, 0.0], [0.0, 0.5]])
      >>> anchors = jnp.array([[1, 2], [1, 2], [1, 3]])
      >>> out = credax.hgpo_advantages(jnp.zeros(3), steps, anchors, jnp.ones((3, 2), bool),
      ...                              jnp.zeros(3, int), history=1, gamma=1.0,
      ...                              normalization=credax.Normalization(ddof=0, eps=0.0))
      >>> # turn 1, k=1 (state 2): returns (1, 0) -> ±1; k=2 (states 1,2): same pair -> ±1.
      >>> # turn 0: k=1 (state 1): returns (1, 0, .5) -> (1.2247, -1.2247, 0) (population std).
      >>> [[round(float(v), 4) for v in row] for row in out.advantages]
      [[1.2247, 1.0], [-1.2247, -1.0], [0.0, 0.0]]

    References:
      HGPO, hierarchical history-prefix groups for agentic RL; code ``recipe/hgpo/core_hgpo.py``
      (``hgpo_advantage_estimate``) in the verl-agent family. credax reproduces its grouping by
      (prompt, level, last-k observations), its population std, the ``L^α`` level weights
      normalised by ``Σw + eps`` over nonzero level advantages, and its ``base_group`` episode
      level (``credax.presets.hgpo_verl_agent`` is its shipped configuration). Where credax differs:
      a zero-spread group is exactly ``0`` (abstains); verl-agent's float mean of a constant
      non-dyadic group can leave a residue that then divides by ``eps`` and votes, and its float
      ``!= 0`` test can let a rounded mean vote or drop a genuine deviation below the rounding.
    """
    _checks.check_option(episode_pooling, "episode_pooling", EPISODE_POOLING)
    _checks.check_option(episode_singleton, "episode_singleton", EPISODE_SINGLETON)
    history = _checks.check_static_int(history, "history", minimum=0)
    r, s, anchors, turn_mask, out_dtype, dt = prepare_anchored_steps(
        outcome_rewards, step_rewards, anchor_ids, turn_mask)
    base = normalization_or(normalization, HGPO_NORMALIZATION)
    if base.singleton != "zero":
        raise ValueError("hgpo_advantages: `normalization.singleton` must be 'zero' (a history "
                         f"group of one abstains); got {base.singleton!r}. The episode level's "
                         "singletons are `episode_singleton`.")
    eps = _checks.scalar(base.eps, dt, "eps")
    batch, num_turns = s.shape
    if history > max(num_turns, 2):
        # Refused, not capped: levels above K can never hold a step (level k needs k valid turns)
        # and each is traced on its own (~0.2 s), so a history in the thousands ran for minutes.
        raise ValueError(f"`history` must be <= max(K, 2) = {max(num_turns, 2)} for K = {num_turns} "
                         f"turns (levels above K are always empty); got {history}.")
    n = batch * num_turns
    check_x_and_groups(s, group_ids, "step_rewards")
    if num_turns == 0:  # no step: empty outputs of the documented shapes
        return HGPO(jnp.zeros(s.shape, out_dtype), jnp.zeros((batch, 0, history + 2), out_dtype),
                    jnp.zeros((batch, 0, history + 2), bool))

    gamma = _checks.scalar(gamma, dt, "gamma")
    g = masked_discounted_returns(s.astype(dt), turn_mask, gamma)
    g_flat = g.reshape(n)
    # float32: the returns as double-float pairs decide "at the mean" and carry the deviations
    # (see the docstring); float64 returns are the float64 recurrence's, as verl-agent's.
    pairs = dt == jnp.float32
    if pairs:
        hi, lo = two_float_returns(s.astype(dt), turn_mask, gamma)
        hi, lo = hi.reshape(n), lo.reshape(n)
    shift_ok = pairs and base.center and base.scale != "batch"
    prompt = jnp.broadcast_to(group_ids.index[:, None], s.shape)

    # Level 0: the episode group.
    if episode_group:
        if episode_pooling == "trajectory":
            has_turn = jnp.any(turn_mask, axis=1)
            rr, has_turn, _ = prepare(r.astype(dt), group_ids, has_turn, "outcome_rewards")
            a_e = normalize_with_groups(rr, group_ids, has_turn,
                                        base.replace(ddof=1, singleton=episode_singleton))
            a_e, voted = _exact_votes(a_e, rr, group_ids, has_turn, pooled=True)
            a_e = jnp.broadcast_to(a_e[:, None], s.shape)
            voted = jnp.broadcast_to(voted[:, None], s.shape) & turn_mask
        else:
            per_step = jnp.broadcast_to(r.astype(dt)[:, None], s.shape).reshape(n)
            flat = Groups(prompt.reshape(n), group_ids.num_groups)
            per_step = jnp.where(turn_mask.reshape(n), per_step, jnp.zeros((), dt))
            a_e = normalize_with_groups(per_step, flat, turn_mask.reshape(n), base.replace(
                ddof=1, singleton=episode_singleton))
            a_e, voted = _exact_votes(a_e, per_step, flat, turn_mask.reshape(n), pooled=True)
            a_e, voted = a_e.reshape(s.shape), voted.reshape(s.shape)
        levels, votes = [a_e], [voted]
    else:
        levels, votes = [jnp.zeros(s.shape, dt)], [jnp.zeros(s.shape, bool)]

    # Levels 1..H+1: the last k observations, nested in the prompt. Level k's key is level
    # k - 1's group plus the one older anchor: a row valid at level k is valid at k - 1, where its
    # group index (the group's lowest row, whatever the key's hash) names its whole key tuple. So
    # each level hashes two key columns instead of k + 1, and the groups are the same.
    previous = prompt.reshape(n)
    for k in range(1, history + 2):
        keys, valid_k = history_keys(anchors, turn_mask, k)
        flat_valid = valid_k.reshape(n)
        level_groups = groups_from_keys(previous, keys[-1].reshape(n), valid=flat_valid)
        previous = level_groups.index
        x_k = (_centred_on_a_member(g_flat, hi, lo, level_groups, flat_valid) if shift_ok
               else g_flat)
        a_k = normalize_with_groups(x_k, level_groups, flat_valid, base)
        a_k, voted = (_exact_votes(a_k, hi, level_groups, flat_valid, pooled=False, lo=lo) if pairs
                      else _exact_votes(a_k, g_flat, level_groups, flat_valid, pooled=False))
        levels.append(a_k.reshape(s.shape))
        votes.append(voted.reshape(s.shape))

    levels = jnp.stack(levels, axis=-1)
    informative = jnp.stack(votes, axis=-1)
    alpha = _checks.scalar(alpha, dt, "alpha")
    # Σ w_k A_k / (Σ w_k + eps) with w_k = (k + 1)^α, computed with every weight divided by the
    # step's largest informative one (in log space): the same value, and no overflow to inf/inf
    # for a large α (3^α overflows float32 from α ≈ 81) nor underflow to 0/eps for a large -α.
    log_w = alpha * jnp.log(jnp.arange(history + 2, dtype=dt) + 1)
    log_w = jnp.where(informative, log_w, -jnp.inf)
    any_level = jnp.any(informative, axis=-1)
    top = jnp.where(any_level, jnp.max(log_w, axis=-1), jnp.zeros((), dt))
    w = jnp.where(informative, jnp.exp(log_w - top[..., None]), jnp.zeros((), dt))
    total = jnp.sum(w, axis=-1)
    num = jnp.sum(jnp.where(informative, w * levels, jnp.zeros((), dt)), axis=-1)
    eps_scaled = jnp.where(eps > 0, jnp.exp(jnp.log(jnp.where(eps > 0, eps, 1)) - top), 0)
    adv = _numeric.safe_div(num, total + eps_scaled, any_level & (total + eps_scaled > 0))
    adv = jnp.where(turn_mask, adv, jnp.zeros((), dt))
    levels = jnp.where(turn_mask[..., None], levels, jnp.zeros((), dt))
    return HGPO(adv.astype(out_dtype), levels.astype(out_dtype), informative)

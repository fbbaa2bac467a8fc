"""TRIAGE: role-typed credit on top of an outcome advantage, and the tools around its judge.

GRPO gives every turn of a trajectory the same advantage ``A_i``: useful exploration inside a failed
rollout is punished with it, and a regression inside a successful one is rewarded with it. TRIAGE
(Xu et al. 2026) lets an LLM judge label each environment-facing turn with one of four roles and adds
a fixed, bounded correction per role::

    A_{i,k} = A_i + λ · c[ρ_{i,k}],     c = (c_D, c_E, c_N, c_R) = (1, 0.5, -0.1, -0.5)

The verifier outcome keeps the direction; the role only shifts the turn within it (and may flip the
sign of a small ``|A_i|``: the correction is additive and deliberately not clipped).

Assumptions, stated once:

* Roles are integer codes ``int[B, K]`` (:class:`Role`; ``-1`` = unlabeled). The judge itself is a
  data-producing component outside this library: :func:`judge_windows` gives the bounded context the
  paper's judge sees (at most 5 turns before and 5 after, never the outcome), :func:`parse_roles`
  turns the judge's text into codes on the host, :func:`validate_roles` checks them eagerly.
* An unlabeled turn (missing or unparseable judge output) gets ``c = 0``, i.e. plain ``A_i`` — not
  the ``NO_PROGRESS`` constant: a judge failure is not evidence of a harmless turn.
* Under ``jit`` values cannot be checked: a code outside ``[-1, 4)`` is treated as unlabeled (``c = 0``)
  by every function here; :func:`validate_roles` rejects such codes eagerly.
* ``turn_mask`` marks real turns; padded turns get exactly ``0`` whatever their role or value.
* The outcome advantage ``A_i`` comes from the caller (``credax.grpo_advantages`` or any other
  estimator): nothing here normalises implicitly, except the opt-in ``whiten`` of
  :func:`triage_advantages`, which is unverified (see there).

The theory (the paper's Propositions 1-2) reads the role correction as a projection of the
per-turn advantage residual ``δ = A* - A_i`` onto the role variable: :func:`fit_role_constants`
computes that projection ``E[δ | ρ]`` and :func:`optimal_mixing_weight` the best ``λ`` for fixed
constants, for users who have a residual estimate (a value model, Monte-Carlo rollouts, a synthetic
task) and want to check whether their judge helps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._api import jit_public
from ._checks import Finite
from ._group_ids import Groups
from ._group_stats import segment_stats
from ._grouping import normalization_or, normalize_with_groups
from ._normalization import MOVED_TO_NORMALIZATION, Normalization, as_normalization
from ._roles import NUM_ROLES, check_roles

TRIAGE_ROLE_CONSTANTS = (1.0, 0.5, -0.1, -0.5)
"""``(c_D, c_E, c_N, c_R)``, indexed by :class:`Role`: the paper's constants, fixed across tasks."""
# The opt-in batch whitening of triage_advantages: the population std, +1e-8 (TRIAGE v3's form).
WHITEN = Normalization(ddof=0, eps=1e-8)


# --------------------------------------------------------------------------------------------
# Shared argument handling.
# --------------------------------------------------------------------------------------------


def _check_roles(roles, shape: tuple[int, ...] | None = None) -> jax.Array:
    roles = _checks.as_array(roles, "roles")
    check_roles(roles, shape)
    return _numeric.widen_index(roles)


def _check_outcome_advantages(outcome_advantages, batch: int) -> jax.Array:
    a = _checks.as_float_array(outcome_advantages, "outcome_advantages")
    if a.shape != (batch,):
        raise ValueError(
            f"`outcome_advantages` must have shape [B] = ({batch},) (one advantage per trajectory, "
            f"the rows of `roles`); got {a.shape}."
        )
    return a


def _role_constants(constants, dtype) -> jax.Array:
    c = _checks.as_float_array(constants, "constants")
    if c.shape != (NUM_ROLES,):
        raise ValueError(
            f"`constants` must have shape [{NUM_ROLES}] (c_D, c_E, c_N, c_R, indexed by Role); "
            f"got {c.shape}."
        )
    return c.astype(dtype)


def _labelled(roles: jax.Array, turn_mask: jax.Array) -> jax.Array:
    # Out-of-range codes cannot be rejected under jit: they count as unlabeled.
    return turn_mask & (roles >= 0) & (roles < NUM_ROLES)


def _credit(roles: jax.Array, labelled: jax.Array, c: jax.Array) -> jax.Array:
    """``c[roles]`` where labelled, exactly 0 elsewhere (``take`` is differentiable in ``c``)."""
    picked = jnp.take(c, jnp.clip(roles, 0, NUM_ROLES - 1))
    return jnp.where(labelled, picked, jnp.zeros_like(picked))


# --------------------------------------------------------------------------------------------
# Credit.
# --------------------------------------------------------------------------------------------


@jit_public(replicate=True)
def role_credit(
    roles: Int[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    constants: Float[Array, " 4"] | Sequence[float | Float[Array, ""]] = TRIAGE_ROLE_CONSTANTS,
) -> Float[Array, "B K"]:
    """Per-turn role credit: ``c[ρ_{i,k}]``, ``0`` for unlabeled or padded turns.

    Args:
      roles: ``int[B, K]`` role codes (:class:`Role`), ``-1`` = unlabeled. A code outside
        ``[-1, 4)`` is treated as unlabeled under ``jit`` (:func:`validate_roles` rejects it).
      turn_mask: ``bool[B, K]`` real turns.
      constants: ``float[4]`` ``(c_D, c_E, c_N, c_R)``; may be traced (a learned or scheduled
        vector does not recompile).

    Returns:
      ``float[B, K]`` in the dtype of ``constants`` (float32 for the default tuple without x64);
      ``0`` at unlabeled and padded turns.

    Raises:
      TypeError: ``roles`` is not an integer array, or ``turn_mask`` is not boolean.
      ValueError: shapes disagree, or ``constants`` is not ``[4]``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> roles = jnp.array([[0, 1, 2, 3, -1]])
      >>> c = credax.role_credit(roles, jnp.array([[True, True, True, True, False]]))
      >>> [round(float(v), 4) for v in c[0]]
      [1.0, 0.5, -0.1, -0.5, 0.0]

    References:
      Xu et al. 2026, TRIAGE (arXiv 2606.32017), constants of its §4 (reported as fixed across tasks).
    """
    roles = _check_roles(roles)
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", roles.shape)
    c_raw = _checks.as_float_array(constants, "constants")
    c = _role_constants(c_raw, _numeric.compute_dtype(c_raw.dtype))
    credit = _credit(roles, _labelled(roles, turn_mask), c)
    return credit.astype(_numeric.output_dtype(c_raw.dtype))


@jit_public(
    static_argnames=("whiten",),
    convert={"normalization": as_normalization}, replicate=True,
    hints={**MOVED_TO_NORMALIZATION, "whiten_eps": "Pass `normalization=credax.Normalization("
           "ddof=0, eps=...)` with `whiten=True`."},
)
def triage_advantages(
    outcome_advantages: Float[Array, " B"],
    roles: Int[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    lam: Finite = 0.2,
    constants: Float[Array, " 4"] | Sequence[float | Float[Array, ""]] = TRIAGE_ROLE_CONSTANTS,
    whiten: bool = False,
    normalization: Normalization | None = None,
) -> Float[Array, "B K"]:
    """Role-typed turn advantage: ``A_{i,k} = A_i + λ · c[ρ_{i,k}]`` on valid turns.

    An unlabeled turn (``-1``) gets plain ``A_i``; a padded turn gets ``0``. With ``λ = 0`` this is
    the outcome advantage broadcast over the valid turns (GRPO when ``A`` is GRPO's).

    ``whiten=True`` then z-scores the result over *all valid turns of the batch* (one set, not per
    prompt or per turn index) with ``normalization`` (default ``WHITEN``, the population std:
    ``(x - μ) / (σ + 1e-8)``); a batch
    whose valid values are all equal (or a single valid turn) gives ``0``. **Unverified**: this step
    is reported only by a third-party "TRIAGE v3" reimplementation (not by the authors), not by the
    paper or any quoted source; it is off by default. Note that it rescales the outcome part too and
    makes every turn's advantage depend on the whole batch.

    Args:
      outcome_advantages: ``float[B]`` the trajectory advantage ``A_i`` (e.g.
        ``credax.grpo_advantages(rewards, group_ids)``). Rows whose turns are all padded may hold
        anything (NaN included).
      roles: ``int[B, K]`` role codes (:class:`Role`), ``-1`` = unlabeled; codes outside
        ``[-1, 4)`` are treated as unlabeled under ``jit`` (:func:`validate_roles` rejects them).
      turn_mask: ``bool[B, K]`` real turns.
      lam: mixing weight ``λ``; may be traced (schedules do not recompile). The paper reports 0.2
        (ALFWorld, WebShop) and 0.4 (Search-QA).
      constants: ``float[4]`` ``(c_D, c_E, c_N, c_R)``; may be traced.
      whiten: static; opt-in batch z-score of the result (unverified, see above).
      normalization: the whitening's options, a :class:`credax.Normalization` (default
        ``Normalization(ddof=0, eps=1e-8)``); read only with ``whiten=True``. Its ``eps`` may be
        traced.

    Returns:
      ``float[B, K]`` in the dtype of ``outcome_advantages`` (float32 for integer input); ``0`` at
      padded turns.

    Raises:
      TypeError: non-integer ``roles``, non-boolean ``turn_mask``, non-bool ``whiten``, a
        ``normalization`` that is not a :class:`credax.Normalization`.
      ValueError: shapes disagree, ``constants`` is not ``[4]``, or ``lam`` is not a scalar.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> a = credax.grpo_advantages(jnp.array([1.0, 0.0]), jnp.array([7, 7]),
      ...                           normalization=credax.Normalization(eps=0.0))
      >>> R = credax.Role
      >>> roles = jnp.array([[R.DECISIVE, R.REGRESSION, -1], [R.EXPLORATION, R.NO_PROGRESS, 0]])
      >>> mask = jnp.array([[True, True, True], [True, True, False]])
      >>> adv = credax.triage_advantages(a, roles, mask, lam=0.2)
      >>> # A = ±0.7071; + 0.2 * (1, -0.5, 0) and + 0.2 * (0.5, -0.1); padded turn -> 0
      >>> [[round(float(v), 4) for v in row] for row in adv]
      [[0.9071, 0.6071, 0.7071], [-0.6071, -0.7271, 0.0]]

    References:
      Xu et al. 2026, TRIAGE (arXiv 2606.32017): the additive rule of §4 with ``λ`` and the four
      constants. Where credax decides what the sources leave open: unlabeled turns get ``c = 0``;
      the correction is not clipped (it may flip the sign of a small ``A_i``); no whitening unless
      asked. ``A_i`` is whatever outcome advantage the caller passes (the paper: "standard
      group-normalized" GRPO, convention not stated).
    """
    roles = _check_roles(roles)
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", roles.shape)
    a = _check_outcome_advantages(outcome_advantages, roles.shape[0])
    out_dtype = _numeric.output_dtype(a.dtype)
    dt = _numeric.compute_dtype(a.dtype)
    lam = _checks.scalar(lam, dt, "lam")
    c = _role_constants(constants, dt)
    credit = _credit(roles, _labelled(roles, turn_mask), c)
    total = a.astype(dt)[:, None] + lam * credit
    out = jnp.where(turn_mask, total, jnp.zeros_like(total))
    if whiten:
        # One set holding every valid turn of the batch: the shared primitive on the flattened
        # [B*K] view with a single group (its per-trailing-index statistics would be per turn).
        n = out.size
        flat = normalize_with_groups(
            out.reshape(n), Groups(jnp.zeros((n,), jnp.int32), 1), turn_mask.reshape(n),
            normalization_or(normalization, WHITEN),
        )
        out = flat.reshape(out.shape)
    return out.astype(out_dtype)


@jit_public(replicate=True)
def scalar_process_advantages(
    outcome_advantages: Float[Array, " B"],
    process_rewards: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    lam: Finite,
) -> Float[Array, "B K"]:
    """Scalar process-reward baseline: ``A_{i,k} = A_i + λ · p_{i,k}`` on valid turns.

    The ablation baseline TRIAGE compares against: a judge emits a scalar score per turn instead of
    a role. Values of ``process_rewards`` at padded turns never matter (NaN included).

    Args:
      outcome_advantages: ``float[B]`` the trajectory advantage ``A_i``.
      process_rewards: ``float[B, K]`` per-turn judge scores ``p``.
      turn_mask: ``bool[B, K]`` real turns.
      lam: mixing weight ``λ`` (required: the paper gives no value for this baseline); may be
        traced.

    Returns:
      ``float[B, K]`` in the promoted floating dtype of the two inputs; ``0`` at padded turns.

    Raises:
      TypeError: non-numeric inputs or non-boolean ``turn_mask``.
      ValueError: shapes disagree.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> adv = credax.scalar_process_advantages(
      ...     jnp.array([0.5]), jnp.array([[1.0, -1.0, jnp.nan]]),
      ...     jnp.array([[True, True, False]]), lam=0.25)
      >>> [round(float(v), 4) for v in adv[0]]
      [0.75, 0.25, 0.0]

    References:
      Xu et al. 2026, TRIAGE (arXiv 2606.32017): the "scalar judge-derived process reward" baseline.
    """
    p = _checks.as_float_array(process_rewards, "process_rewards")
    _checks.check_ndim(p, "process_rewards", 2, "[B, K]")
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", p.shape)
    a = _check_outcome_advantages(outcome_advantages, p.shape[0])
    out_dtype = _numeric.output_dtype(jnp.promote_types(a.dtype, p.dtype))
    dt = _numeric.compute_dtype(out_dtype)
    lam = _checks.scalar(lam, dt, "lam")
    p = jnp.where(turn_mask, p.astype(dt), jnp.zeros((), dt))
    total = a.astype(dt)[:, None] + lam * p
    return jnp.where(turn_mask, total, jnp.zeros_like(total)).astype(out_dtype)


# --------------------------------------------------------------------------------------------
# The theory: role constants and mixing weight from residuals.
# --------------------------------------------------------------------------------------------


def _residual_args(residuals, roles, turn_mask):
    """Shared argument handling of the role-fitting functions: (residuals, roles, turn_mask,
    output dtype, compute dtype)."""
    d = _checks.as_float_array(residuals, "residuals")
    _checks.check_ndim(d, "residuals", 2, "[B, K]")
    roles = _check_roles(roles, d.shape)
    turn_mask = _checks.as_mask(turn_mask, "turn_mask", d.shape)
    return d, roles, turn_mask, _numeric.output_dtype(d.dtype), _numeric.compute_dtype(d.dtype)


class RoleFit(NamedTuple):
    """Per-role fit of the advantage residual."""

    constants: jax.Array  # float[4]: E[δ | ρ], 0 for a role with no labelled turn
    counts: jax.Array  # int32[4]: labelled valid turns of each role


@jit_public(replicate=True)
def fit_role_constants(
    residuals: Float[Array, "B K"],
    roles: Int[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
) -> RoleFit:
    """The MSE-optimal role-only correction: ``c*_ρ = E[δ | ρ]``, the mean residual per role.

    ``δ_{i,k} = A*_{i,k} - A_i`` is the gap between a per-turn advantage estimate (a value model,
    Monte-Carlo rollouts, a synthetic task's ground truth) and the outcome advantage. The mean is
    taken over valid, labelled turns of the whole batch; unlabeled, padded and out-of-range turns
    are ignored whatever they hold. A role with no labelled turn gets constant ``0``. With these
    constants and ``λ = 1``, :func:`triage_advantages` is the ``L²`` projection of ``A*`` onto
    (outcome advantage + role) corrections — the paper's Proposition 1.

    Args:
      residuals: ``float[B, K]`` ``δ``.
      roles: ``int[B, K]`` role codes, ``-1`` = unlabeled.
      turn_mask: ``bool[B, K]`` real turns.

    Returns:
      ``RoleFit(constants: float[4] in residuals' dtype, counts: int32[4])``, indexed by
      :class:`Role`. A role whose residuals are all equal recovers that value exactly.

    Raises:
      TypeError: non-numeric ``residuals``, non-integer ``roles`` or non-boolean ``turn_mask``.
      ValueError: shapes disagree.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> d = jnp.array([[0.3, 0.1, -0.2, 9.0]])
      >>> fit = credax.fit_role_constants(d, jnp.array([[0, 0, 3, -1]]), jnp.ones((1, 4), bool))
      >>> [round(float(v), 4) for v in fit.constants], fit.counts.tolist()
      ([0.2, 0.0, 0.0, -0.2], [2, 0, 0, 1])

    References:
      Xu et al. 2026, TRIAGE (arXiv 2606.32017), §4.1 Propositions 1-2 (role-conditioned credit as
      a projection of the advantage residual onto the role variable).
    """
    d, roles, turn_mask, out_dtype, dt = _residual_args(residuals, roles, turn_mask)
    n = d.size
    if n == 0:
        return RoleFit(jnp.zeros((NUM_ROLES,), out_dtype), jnp.zeros((NUM_ROLES,), jnp.int32))
    valid = _labelled(roles, turn_mask).reshape(n)
    index = jnp.clip(roles, 0, NUM_ROLES - 1).reshape(n)
    # The shared segment statistics shift each role's values by their maximum, so a role whose
    # residuals are all equal gets exactly that value back (a plain sum / count would not).
    st = segment_stats(d.astype(dt).reshape(n), index, NUM_ROLES, valid)
    # Read each role's (identical, per-entry) statistics off one member: its first valid entry.
    rows = jnp.arange(n, dtype=jnp.int32)
    first = jax.ops.segment_min(jnp.where(valid, rows, n), index, NUM_ROLES)
    present = first < n
    first = jnp.clip(first, 0, n - 1)
    mean_value = jnp.where(st.nonfinite, jnp.full_like(st.shift, jnp.nan), st.mean_value())
    mean = jnp.where(present, mean_value[first], jnp.zeros((), dt))
    counts = jnp.where(present, st.count[first], jnp.zeros((), dt)).astype(jnp.int32)
    return RoleFit(mean.astype(out_dtype), counts)


@jit_public(replicate=True)
def optimal_mixing_weight(
    residuals: Float[Array, "B K"],
    roles: Int[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    constants: Float[Array, " 4"] | Sequence[float | Float[Array, ""]] = TRIAGE_ROLE_CONSTANTS,
) -> Float[Array, ""]:
    """The ``λ`` that best fits the residual with fixed constants: ``λ* = Σ c_ρ δ / Σ c_ρ²``.

    Minimises ``Σ (δ_{i,k} - λ c[ρ_{i,k}])²`` over valid, labelled turns (unlabeled turns carry no
    correction and do not enter either sum). ``λ* > 0`` exactly when ``Σ c_ρ δ > 0`` in the sample —
    the paper's condition ``Cov(c_ρ̂, δ) > 0`` when the residuals have mean zero; if it fails, no
    positive ``λ`` reduces the error. ``0`` when no labelled turn has a non-zero constant.

    Args:
      residuals: ``float[B, K]`` ``δ = A* - A_i`` (see :func:`fit_role_constants`).
      roles: ``int[B, K]`` role codes, ``-1`` = unlabeled.
      turn_mask: ``bool[B, K]`` real turns.
      constants: ``float[4]`` ``(c_D, c_E, c_N, c_R)``; may be traced.

    Returns:
      Scalar in the dtype of ``residuals``.

    Raises:
      TypeError, ValueError: as :func:`fit_role_constants`.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> d = jnp.array([[0.3, -0.15, 0.0]])   # 0.3 * c_D, 0.3 * c_R, unlabeled
      >>> lam = credax.optimal_mixing_weight(d, jnp.array([[0, 3, -1]]), jnp.ones((1, 3), bool))
      >>> round(float(lam), 4)
      0.3

    References:
      Xu et al. 2026, TRIAGE (arXiv 2606.32017), §4.1; the closed form is the least-squares
      solution for one coefficient (our derivation of the paper's stated condition).
    """
    d, roles, turn_mask, out_dtype, dt = _residual_args(residuals, roles, turn_mask)
    labelled = _labelled(roles, turn_mask)
    c = _credit(roles, labelled, _role_constants(constants, dt))
    d = jnp.where(labelled, d.astype(dt), jnp.zeros((), dt))
    num = jnp.sum(c * d)
    den = jnp.sum(c * c)
    return _numeric.safe_div(num, den, den > 0).astype(out_dtype)


# --------------------------------------------------------------------------------------------
# The judge's context.
# --------------------------------------------------------------------------------------------


class Windows(NamedTuple):
    """Judge context of every turn: turn indices and which slots hold a turn."""

    index: jax.Array  # int32[B, K, before + 1 + after]; -1 where not valid
    valid: jax.Array  # bool[B, K, before + 1 + after]


@jit_public(static_argnames=("before", "after"), replicate=True)
def judge_windows(
    turn_mask: Bool[Array, "B K"],
    *,
    before: int = 5,
    after: int = 5,
) -> Windows:
    """For every turn, the indices of up to ``before`` preceding and ``after`` following valid turns.

    Slot ``j`` of turn ``k``'s window (``j = 0 .. before + after``) holds the valid turn of the same
    row that is ``j - before`` valid turns away from ``k``: slot ``before`` is ``k`` itself, slots
    before it the preceding valid turns (oldest first), slots after it the following ones. Padded
    turns are skipped (with prefix masks, the window of ``k`` is simply ``k - before .. k + after``
    clipped to the row's valid turns). Slots past either end of the row, and every slot of a
    padded turn, have ``valid = False`` and ``index = -1``. This is the bounded context the TRIAGE
    judge sees: at most 5 action-observation pairs on each side, never the final outcome.

    Args:
      turn_mask: ``bool[B, K]`` real turns.
      before: static, ``>= 0``; turns of context before each turn.
      after: static, ``>= 0``; turns of context after each turn.

    Returns:
      ``Windows(index: int32[B, K, W], valid: bool[B, K, W])`` with ``W = before + 1 + after``.

    Raises:
      TypeError: ``turn_mask`` is not boolean, or ``before``/``after`` are not Python ints.
      ValueError: ``turn_mask`` is not 2-D, or ``before``/``after`` is negative.

    Examples:
      >>> import credax, numpy as np
      >>> mask = np.array([[True, True, True, True, False]])
      >>> w = credax.judge_windows(mask, before=2, after=1)
      >>> w.index[0].tolist()
      [[-1, -1, 0, 1], [-1, 0, 1, 2], [0, 1, 2, 3], [1, 2, 3, -1], [-1, -1, -1, -1]]

      Building the judge prompts on the host (``turns[b][k]`` is the text of one action and its
      observation; the outcome is never shown):

      >>> turns = [["ls", "cat a.py", "edit a.py", "run tests"]]
      >>> index, valid = np.asarray(w.index), np.asarray(w.valid)
      >>> prompts = {}
      >>> for b, k in zip(*np.nonzero(mask)):
      ...     context = [("TARGET: " if j == k else "") + turns[b][j]
      ...                for j, ok in zip(index[b, k], valid[b, k]) if ok]
      ...     prompts[b, k] = "Label the TARGET turn D/E/N/R.\\n" + "\\n".join(context)
      >>> print(prompts[0, 2])
      Label the TARGET turn D/E/N/R.
      ls
      cat a.py
      TARGET: edit a.py
      run tests

    References:
      Xu et al. 2026, TRIAGE (arXiv 2606.32017): the judge sees the segment and at most 5 preceding
      and 5 following action-observation pairs, not the verifier outcome.
    """
    turn_mask = _checks.as_array(turn_mask, "turn_mask")
    _checks.check_mask(turn_mask, "turn_mask")
    _checks.check_ndim(turn_mask, "turn_mask", 2, "[B, K]")
    before = _checks.check_static_int(before, "before")
    after = _checks.check_static_int(after, "after")
    batch, num_turns = turn_mask.shape
    width = before + 1 + after
    if turn_mask.size == 0:
        return Windows(jnp.full((batch, num_turns, width), -1, jnp.int32),
                       jnp.zeros((batch, num_turns, width), bool))
    # rank[b, k]: how many valid turns precede k; position[b, r]: where the r-th valid turn sits.
    rank = jnp.cumsum(turn_mask.astype(jnp.int32), axis=1) - 1
    count = jnp.sum(turn_mask.astype(jnp.int32), axis=1)
    cols = jnp.broadcast_to(jnp.arange(num_turns, dtype=jnp.int32)[None, :], turn_mask.shape)
    rows = jnp.broadcast_to(jnp.arange(batch, dtype=jnp.int32)[:, None], turn_mask.shape)
    position = jnp.full(turn_mask.shape, -1, jnp.int32).at[
        rows, jnp.where(turn_mask, rank, num_turns)].set(cols, mode="drop")
    offsets = jnp.arange(-before, after + 1, dtype=jnp.int32)
    target = rank[:, :, None] + offsets[None, None, :]
    valid = turn_mask[:, :, None] & (target >= 0) & (target < count[:, None, None])
    picked = jnp.take_along_axis(
        position, jnp.clip(target, 0, num_turns - 1).reshape(batch, num_turns * width), axis=1
    ).reshape(batch, num_turns, width)
    return Windows(jnp.where(valid, picked, -1), valid)

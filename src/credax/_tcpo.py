"""TCPO: turn credit from per-turn verifier scores (score-to-credit conversion).

In verifier-guided refinement the model gets a score ``s_k`` after every turn and tries again. A
score says how good the current output is; credit should say how much *this turn* changed the
refinement. TCPO (Liao, Chen & Tang 2026, arXiv 2608.01667) converts the score history of each
trajectory into three kinds of reference-based credit, then compares each turn with the same turn
of the other trajectories of its prompt:

* retrospective: progress over the best score so far, a small bonus for holding a solved state, a
  penalty for falling back after success (:func:`retrospective_credit`);
* hindsight: a non-improving turn before success is judged by the best score reached *after* it,
  relative to its eligible peers at the same turn index (:func:`hindsight_credit`);
* counterfactual: on a few high-surprisal turns, alternatives resampled at the same history say
  whether the chosen output beat its siblings (:func:`counterfactual_credit`,
  :func:`select_top_surprisal`).

:func:`tcpo_advantages` composes them, z-scores per (prompt, turn) and weights turn ``k`` by
``γ^k``, returning every intermediate so a training loop can log what each turn got and why. The
ablation rungs of the paper's Table 3 are the same functions with parts switched off, plus
:func:`raw_score_credit` and :func:`adjacent_delta_credit`.

Notation. Arrays are ``[B, K]``, one row per trajectory, turn index ``k`` 0-based. The paper
indexes turns from 1: its ``m_{i,1}`` (first turn) is ``best_prior[:, 0]`` here and its
``γ^{k-1}`` is ``γ^k``. Scores are assumed in ``[0, 1]`` (``validate_turns`` checks it eagerly).
Valid turns form a prefix of each row; padded turns may hold anything (NaN, inf): they never enter
a statistic, a maximum or a gradient, and every output is exactly ``0`` (``False``) there.

Readings. The paper's text and code are not public; its formulas are rebuilt from the abstract and
secondary write-ups. What the sources leave open is credax's reading, switchable
(docs/decisions.md): the preservation bonus (``0.1``), how the counterfactual refines the
hindsight estimate (it replaces it on selected, eligible, informative turns), the surprisal
(``credax.turn_surprisal``) and the scope of the top-L budget.

Variable turn counts. The per-(prompt, turn) peer sets of the hindsight baseline and of the
z-score contain only the trajectories that *reached* turn ``k``. That a row reached ``k`` is its
history, so the sets add no stopping term by themselves (verl issue #7244's bias needs
per-index-normalised rewards *summed* over the remaining turns; ``unbiased_turn_advantages`` is
that sum done right). The credit lab measures TCPO's credit paying for continuing over stopping
beyond the true advantage on its refinement task (docs/guides/credit-lab.md); with a fixed number
of turns (every row reaches every ``k``) the question does not arise.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import _checks, _numeric
from ._api import jit_public
from ._checks import Finite, Unit
from ._collectives import vary_like
from ._group_ids import Groups
from ._group_stats import check_x_and_groups
from ._grouping import jit_grouped, normalization_or, normalize_with_groups, peer_mean_with_groups
from ._normalization import Normalization
from ._turns import (
    discount_powers,
    masked_best_prior,
    masked_future_best,
    masked_turn_maxima,
    prepare_turns,
    running_max,
)

SCOPES = ("batch", "group", "trajectory")


class Retrospective(NamedTuple):
    """Retrospective credit and its parts, all ``[B, K]``; ``0`` / ``False`` on padded turns."""

    credit: jax.Array  # progress_weight·Δ + preservation_weight·preserved − regression_weight·regression
    best_prior: jax.Array  # m_k = max(initial, max_{t<k} s_t)
    improvement: jax.Array  # Δ_k = max(s_k − m_k, 0)
    preserved: jax.Array  # bool: prior success, no improvement, s_k >= m_k (a solved state held)
    regression: jax.Array  # max(m_k − s_k, 0) after a prior success, else 0


class Hindsight(NamedTuple):
    """Hindsight delayed credit and its parts, all ``[B, K]``; ``0`` / ``False`` on padded turns."""

    credit: jax.Array  # u − baseline on eligible turns with at least one eligible peer, else 0
    future_best: jax.Array  # u_k = max_{t>=k} s_t
    eligible: jax.Array  # bool: a valid, non-improving turn before any success
    peer_count: jax.Array  # int32: other eligible trajectories of the prompt at turn k
    baseline: jax.Array  # mean of their u; 0 without peers


class Counterfactual(NamedTuple):
    """Counterfactual credit from alternatives sampled at the same history, all ``[B, K]``."""

    credit: jax.Array  # s − mean of the valid alternatives; 0 without alternatives
    alt_mean: jax.Array  # mean of the valid alternatives; 0 without alternatives
    alt_count: jax.Array  # int32: number of valid alternatives
    informative: jax.Array  # bool: some alternative, and not all of {s} ∪ alternatives equal


class TCPO(NamedTuple):
    """Everything :func:`tcpo_advantages` computed, main result first."""

    advantages: jax.Array  # γ^k · z-score per (prompt, turn) of `credit`; 0 on padded turns
    credit: jax.Array  # R + where(use, counterfactual_weight·C, hindsight_weight·H)
    retrospective: Retrospective
    hindsight: Hindsight
    counterfactual: Counterfactual  # zeros (informative False) when no alternatives are given


def _cast(tree, out_dtype):
    """Floating leaves to the output dtype; bool and int leaves (masks, counts) unchanged."""
    return jax.tree.map(
        lambda a: a.astype(out_dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree
    )


# --------------------------------------------------------------------------------------------
# Bodies on prepared inputs (compute dtype, boolean masks): shared by the public functions and
# the composition, so tcpo_advantages computes the best prior and the grouping once.
# --------------------------------------------------------------------------------------------


def _retrospective(s, mask, *, initial, threshold, w_progress, w_preserve, w_regress, m=None):
    zero = jnp.zeros_like(s)
    m = masked_best_prior(s, mask, initial) if m is None else m
    # A padded turn is read as "equal to the best prior": no improvement, no regression, and its
    # value (NaN, inf) never reaches an arithmetic op, so neither outputs nor gradients see it.
    s_v = jnp.where(mask, s, m)
    delta = jnp.where(mask, jnp.maximum(s_v - m, 0), zero)
    prior_success = mask & (m >= threshold)
    preserved = prior_success & (delta == 0) & (s_v >= m)
    regression = jnp.where(prior_success, jnp.maximum(m - s_v, 0), zero)
    credit = w_progress * delta + w_preserve * preserved.astype(s.dtype) - w_regress * regression
    return Retrospective(
        credit=jnp.where(mask, credit, zero),
        best_prior=jnp.where(mask, m, zero),
        improvement=delta,
        preserved=preserved,
        regression=regression,
    )


def _hindsight(s, mask, g: Groups, retro: Retrospective, *, threshold, u=None):
    zero = jnp.zeros_like(s)
    # best_prior / improvement are exact copies of m and Δ on valid turns (0 on padded ones,
    # where `mask` already excludes the turn).
    eligible = mask & (retro.best_prior < threshold) & (retro.improvement == 0)
    u = jnp.where(mask, masked_future_best(s, mask) if u is None else u, zero)
    # Leave-one-out mean over the *other eligible* trajectories of the prompt at the same turn
    # index: the peer statistics of u with mask = eligible on [B, K] (one grouping primitive).
    peers = peer_mean_with_groups(u, g, eligible)
    credit = jnp.where(peers.count > 0, u - peers.mean, zero)
    # A non-finite score is neither improving nor not: its own credit is NaN, never 0.
    credit = jnp.where(mask & ~jnp.isfinite(s), jnp.full_like(s, jnp.nan), credit)
    return Hindsight(
        credit=credit, future_best=u, eligible=eligible, peer_count=peers.count,
        baseline=peers.mean,
    )


def _counterfactual(s, alt, alt_mask):
    count = jnp.sum(alt_mask, axis=-1, dtype=jnp.int32)
    has = count > 0
    n = count.astype(s.dtype)
    # Average the differences s − alt rather than subtracting the mean: alternatives equal to s
    # then give exactly 0 credit (no float residue from summing and dividing).
    diff = jnp.where(alt_mask, s[..., None] - alt, jnp.zeros_like(alt))
    credit = _numeric.safe_div(jnp.sum(diff, axis=-1), n, has)
    alt_mean = _numeric.safe_div(jnp.sum(jnp.where(alt_mask, alt, jnp.zeros_like(alt)), -1), n, has)
    hi = jnp.max(jnp.where(alt_mask, alt, -jnp.inf), axis=-1, initial=-jnp.inf)
    lo = jnp.min(jnp.where(alt_mask, alt, jnp.inf), axis=-1, initial=jnp.inf)
    informative = has & ~((hi == s) & (lo == s))
    return Counterfactual(credit=credit, alt_mean=alt_mean, alt_count=count, informative=informative)


def check_alternatives_shape(alt, batch_turns=None, name="alt_scores") -> None:
    """``alt`` (NumPy or JAX, concrete or traced) is ``[B, K, M]``, its ``[B, K]`` that of
    ``scores`` when ``batch_turns`` is given: the rule of TCPO and of ``validate_alternatives``."""
    _checks.check_ndim(alt, name, 3, "[B, K, M]")
    if batch_turns is not None:
        _checks.check_leading(alt, name, batch_turns, "[B, K, M]",
                              f"[B, K] = {tuple(batch_turns)} (the shape of `scores`)")


def _check_alternatives(alt_scores, alt_mask, batch_turns, name="alt_scores"):
    alt = _checks.as_float_array(alt_scores, name)
    check_alternatives_shape(alt, batch_turns, name)
    alt_mask = _checks.as_mask(alt_mask, "alt_mask", alt.shape)
    return alt, alt_mask


# --------------------------------------------------------------------------------------------
# Public functions.
# --------------------------------------------------------------------------------------------


@jit_public(replicate=True)
def retrospective_credit(
    scores: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    success_threshold: Finite = 1.0,
    progress_weight: Finite = 1.0,
    preservation_weight: Finite = 0.1,
    regression_weight: Finite = 1.0,
    initial: Finite = 0.0,
) -> Retrospective:
    """Retrospective turn credit: progress, preservation and regression against the best prior.

    With ``m_k = max(initial, max_{t<k} s_t)`` (the best score before turn ``k``) and the success
    threshold ``τ``::

        Δ_k          = max(s_k − m_k, 0)                              improvement (a new best)
        success_k    = m_k >= τ                                       solved before turn k
        preserved_k  = success_k ∧ Δ_k = 0 ∧ s_k >= m_k               a solved state held
        regression_k = success_k · max(m_k − s_k, 0)                  the drop after success
        credit_k     = w_Δ·Δ_k + w_p·preserved_k − w_r·regression_k

    A non-improving turn before any success gets ``0`` here (hindsight credit handles it). In the
    paper's 1-based notation ``m_{i,k} = max_{t<k} r_{i,t}`` with ``m_{i,1} = 0``: our ``m_0`` is
    ``initial`` (default ``0``). Comparing with the best prior score rather than the previous one
    is what tells a new best from a fluctuation (compare :func:`adjacent_delta_credit`).

    Args:
      scores: ``float[B, K]`` per-turn verifier scores, assumed in ``[0, 1]``.
      turn_mask: ``bool[B, K]`` real turns (a prefix of each row); padded scores may be anything.
      success_threshold: ``τ``; a score ``>= τ`` counts as solved. May be traced.
      progress_weight: ``w_Δ``. May be traced.
      preservation_weight: ``w_p``, the "small positive" bonus for holding a solved state;
        *(reading)* the paper gives no value, ``0.1`` is ours. May be traced.
      regression_weight: ``w_r``. May be traced.
      initial: ``m_0``, the reference before the first turn. May be traced.

    Returns:
      ``Retrospective(credit, best_prior, improvement, preserved, regression)``: floats in the
      dtype of ``scores`` (float32 for integer input) and ``preserved: bool``, all ``[B, K]`` and
      ``0`` / ``False`` on padded turns.

    Raises:
      TypeError: non-boolean ``turn_mask``, non-numeric ``scores``.
      ValueError: ``scores`` is not ``[B, K]``, shapes disagree, a hyperparameter is not a scalar.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> s = jnp.array([[0.0, 0.5, 1.0, 1.0, 0.5]])   # improve, improve, hold, regress
      >>> r = credax.retrospective_credit(s, jnp.ones((1, 5), bool))
      >>> [round(float(v), 2) for v in r.credit[0]]
      [0.0, 0.5, 0.5, 0.1, -0.5]
      >>> r.preserved[0].tolist(), r.best_prior[0].tolist()
      ([False, False, False, True, False], [0.0, 0.0, 0.5, 1.0, 1.0])

    References:
      Liao, Chen & Tang 2026, TCPO (arXiv 2608.01667), retrospective credit. Default weights are
      neutral (1, 0.1, 1): the paper's coefficients are not public.
    """
    s, mask, out_dtype = prepare_turns(scores, turn_mask)
    dt = s.dtype
    out = _retrospective(
        s, mask,
        initial=_checks.scalar(initial, dt, "initial"),
        threshold=_checks.scalar(success_threshold, dt, "success_threshold"),
        w_progress=_checks.scalar(progress_weight, dt, "progress_weight"),
        w_preserve=_checks.scalar(preservation_weight, dt, "preservation_weight"),
        w_regress=_checks.scalar(regression_weight, dt, "regression_weight"),
    )
    return _cast(out, out_dtype)


@jit_grouped()
def hindsight_credit(
    scores: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups,
    *,
    success_threshold: Finite = 1.0,
    initial: Finite = 0.0,
) -> Hindsight:
    """Hindsight delayed credit: judge a non-improving turn by the best score reached after it.

    With ``m``, ``Δ`` as in :func:`retrospective_credit` and ``u_k = max_{t>=k} s_t`` (valid
    turns of the same row)::

        eligible_{i,k}  = valid ∧ m_{i,k} < τ ∧ Δ_{i,k} = 0      non-improving, before success
        P_{i,k}         = {j ≠ i : same prompt, turn k valid and eligible in row j}
        baseline_{i,k}  = mean_{j ∈ P_{i,k}} u_{j,k}             (0 when P is empty)
        credit_{i,k}    = u_{i,k} − baseline_{i,k}  if eligible and |P_{i,k}| > 0, else 0

    The baseline is leave-one-out over the *other eligible* trajectories of the prompt at the same
    turn index; ineligible peers (already solved, or improving at ``k``) do not enter it. Over an
    eligible (prompt, turn) set with at least two members the credits sum to zero. No extra
    verifier call is needed. With the default ``initial = 0`` a first turn is eligible only if it
    scored exactly ``0``. The paper's ``u_{i,k} = max_{t>=k} r_{i,t}`` with 1-based ``k`` is
    ``future_best[:, k-1]`` here.

    Args:
      scores: ``float[B, K]`` per-turn verifier scores, assumed in ``[0, 1]``.
      turn_mask: ``bool[B, K]`` real turns; padded turns neither count as peers nor get credit.
      group_ids: ``int[B]`` prompt of each row (any integers), or a ``Groups``.
      success_threshold: ``τ``. May be traced.
      initial: ``m_0``. May be traced.

    Returns:
      ``Hindsight(credit, future_best, eligible, peer_count, baseline)``, all ``[B, K]``: floats
      in the dtype of ``scores``, ``eligible: bool``, ``peer_count: int32``. ``peer_count`` and
      ``baseline`` are ``0`` on ineligible turns; everything is ``0`` / ``False`` on padded turns.

    Raises:
      TypeError: non-boolean ``turn_mask``, non-integer ``group_ids``.
      ValueError: shapes disagree.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> s = jnp.array([[0.0, 0.0, 1.0],    # turn 0 stalls, the trajectory is repaired later
      ...                [0.0, 0.0, 0.0],    # stalls and never recovers
      ...                [1.0, 1.0, 1.0]])   # solved at once: never eligible
      >>> h = credax.hindsight_credit(s, jnp.ones((3, 3), bool), jnp.array([7, 7, 7]))
      >>> h.eligible.tolist()
      [[True, True, False], [True, True, True], [False, False, False]]
      >>> [[round(float(v), 2) for v in row] for row in h.credit]
      [[1.0, 1.0, 0.0], [-1.0, -1.0, 0.0], [0.0, 0.0, 0.0]]

    References:
      Liao, Chen & Tang 2026, TCPO (arXiv 2608.01667), hindsight delayed credit. The
      leave-one-out, eligible-only peer set follows the paper's "other eligible trajectories of
      the same prompt at the same turn index".
    """
    s, mask, out_dtype = prepare_turns(scores, turn_mask)
    check_x_and_groups(s, group_ids, "scores")
    dt = s.dtype
    threshold = _checks.scalar(success_threshold, dt, "success_threshold")
    one, zero = jnp.ones((), dt), jnp.zeros((), dt)
    retro = _retrospective(
        s, mask, initial=_checks.scalar(initial, dt, "initial"), threshold=threshold,
        w_progress=one, w_preserve=zero, w_regress=zero,
    )
    return _cast(_hindsight(s, mask, group_ids, retro, threshold=threshold), out_dtype)


@jit_public(replicate=True)
def counterfactual_credit(
    scores: Float[Array, "B K"],
    alt_scores: Float[Array, "B K M"],
    alt_mask: Bool[Array, "B K M"],
) -> Counterfactual:
    """Fixed-history counterfactual credit: the turn's score against alternatives at its history.

    For each turn, ``M`` alternative outputs were sampled *with the same history* and scored by
    the verifier (the caller's job; ``alt_mask`` marks the ones that exist)::

        alt_mean_k    = mean_{valid m} alt_{k,m}
        credit_k      = s_k − alt_mean_k           (0 for a turn without alternatives)
        informative_k = some valid alternative ∧ not all of {s_k} ∪ {alt_{k,m}} equal

    Positive when the chosen output beat its siblings, negative when it did worse. A turn whose
    alternatives all tie with it carries no information (``credit = 0`` exactly,
    ``informative = False``).

    Args:
      scores: ``float[B, K]`` the scores of the turns actually taken.
      alt_scores: ``float[B, K, M]`` scores of the alternatives; masked entries may be anything.
      alt_mask: ``bool[B, K, M]`` real alternatives. Turns with none (padded turns included) get
        ``0`` whatever their score holds.

    Returns:
      ``Counterfactual(credit, alt_mean, alt_count, informative)``, all ``[B, K]``: floats in the
      dtype of ``scores``, ``alt_count: int32``, ``informative: bool``.

    Raises:
      TypeError: non-boolean ``alt_mask``.
      ValueError: ``alt_scores`` is not ``[B, K, M]`` for the ``[B, K]`` of ``scores``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> s = jnp.array([[1.0, 0.5, 0.0]])
      >>> alt = jnp.array([[[0.0, 1.0, 0.5], [0.5, 0.5, 9.0], [0.0, 0.0, 0.0]]])
      >>> ok = jnp.array([[[True, True, True], [True, True, False], [False, False, False]]])
      >>> c = credax.counterfactual_credit(s, alt, ok)
      >>> c.credit.tolist(), c.alt_count.tolist(), c.informative.tolist()
      ([[0.5, 0.0, 0.0]], [[3, 2, 0]], [[True, False, False]])

    References:
      Liao, Chen & Tang 2026, TCPO (arXiv 2608.01667), selective fixed-history counterfactual
      estimation (``C = r − mean of the resampled scores``).
    """
    s, _, out_dtype = prepare_turns(scores, None)
    alt, alt_mask = _check_alternatives(alt_scores, alt_mask, s.shape)
    return _cast(_counterfactual(s, alt.astype(s.dtype), alt_mask), out_dtype)


@jit_grouped(static_argnames=("budget", "scope"))
def select_top_surprisal(
    surprisal: Float[Array, "B K"],
    candidates: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups | None = None,
    *,
    budget: int,
    scope: str = "batch",
) -> Bool[Array, "B K"]:
    """The ``budget`` candidate turns of highest surprisal (TCPO's top-L counterfactual budget).

    Among the entries with ``candidates`` true, select the ``L = budget`` of largest
    ``surprisal``: over the whole batch (``scope="batch"``), per prompt (``"group"``, needs
    ``group_ids``) or per row (``"trajectory"``). Ties break toward the lower flat index
    ``b·K + k``; a scope with fewer candidates than ``L`` selects all of them. A NaN surprisal at
    a candidate ranks below every number, ``-inf`` included (it is selected only to fill the
    budget).

    No sort (XLA's CPU sort of the ``B·K`` keys took 30–73 ms at B=4096, K=16, loaded). Each
    scope's cut is found by bisection instead — the largest surprisal ``τ`` with at least ``L``
    candidates at or above it (over the bits of the floats, one bisection step per bit), then,
    among the candidates tied at ``τ``, the flat-index bound that admits exactly the missing
    number (one step per bit of ``B·K``) — each step a masked count per scope.
    ``O(BK · (w + log BK))`` for ``w``-bit floats, no loop over rows, the same selection as a
    sort.

    Args:
      surprisal: ``float[B, K]``, e.g. :func:`credax.turn_surprisal`; values off the candidates
        never matter.
      candidates: ``bool[B, K]`` turns that may be selected (e.g. ``hindsight.eligible``).
      group_ids: ``int[B]`` or ``Groups``; required for ``scope="group"`` and rejected otherwise.
      budget: static ``L >= 0``. The paper uses 5 (math) and 10 (code, AppWorld).
      scope: static ``"batch"``, ``"group"`` or ``"trajectory"``. *(reading)* The paper does not
        say which; a compute budget suggests ``"batch"``.

    Returns:
      ``bool[B, K]``, true at selected turns (never outside ``candidates``).

    Raises:
      ValueError: unknown ``scope``, ``group_ids`` missing for ``"group"`` or given otherwise,
        shapes disagree, negative ``budget``.
      TypeError: non-boolean ``candidates``, non-int ``budget``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> surprisal = jnp.array([[0.3, 2.0, 0.7], [0.7, 5.0, 0.1]])
      >>> cand = jnp.array([[True, True, True], [True, False, True]])   # 5.0 is not a candidate
      >>> credax.select_top_surprisal(surprisal, cand, budget=3).astype(int).tolist()
      [[0, 1, 1], [1, 0, 0]]
      >>> credax.select_top_surprisal(surprisal, cand, budget=1, scope="trajectory").astype(int).tolist()
      [[0, 1, 0], [1, 0, 0]]

    References:
      Liao, Chen & Tang 2026, TCPO (arXiv 2608.01667): top-L surprisal selection costs
      1.03–1.05× training against 1.11–1.16× for counterfactuals on every turn.
    """
    _checks.check_option(scope, "scope", SCOPES)
    budget = _checks.check_static_int(budget, "budget", minimum=0)
    surprisal = _checks.as_float_array(surprisal, "surprisal")
    _checks.check_ndim(surprisal, "surprisal", 2, "[B, K]")
    candidates = _checks.as_mask(candidates, "candidates", surprisal.shape)
    batch, turns = surprisal.shape
    if scope == "group" and group_ids is None:
        raise ValueError('`group_ids` is required with scope="group" (the prompt of each row).')
    if scope != "group" and group_ids is not None:
        raise ValueError(f'`group_ids` is only used with scope="group"; got scope={scope!r}. '
                         "Drop `group_ids` or set the scope.")
    n = batch * turns
    if n == 0 or budget == 0:
        return jnp.zeros((batch, turns), dtype=bool)
    # Each scope as rows of a [scopes, entries] view: the batch is one row of B·K entries (a
    # row count compiles and runs faster on the CPU than a reduction of [B, K] to a scalar), a
    # trajectory is a row, and prompts gather their rows' counts by a segment sum.
    shape = (batch, turns)
    if scope == "batch":
        surprisal, candidates = surprisal.reshape(1, n), candidates.reshape(1, n)
    if scope != "group":
        count = lambda p: jnp.sum(p, axis=1, dtype=jnp.int32)  # noqa: E731
        spread = lambda v: v[:, None]  # noqa: E731
    else:
        check_x_and_groups(surprisal, group_ids, "surprisal")
        index, num_groups = group_ids.index, group_ids.num_groups
        count = lambda p: jax.ops.segment_sum(  # noqa: E731
            jnp.sum(p, axis=1, dtype=jnp.int32), index, num_groups)
        spread = lambda v: v[index][:, None]  # noqa: E731
    s = surprisal.astype(_numeric.compute_dtype(surprisal.dtype))
    # Candidates ranked by an unsigned key in the order of their surprisal: NaN is 0, below every
    # number (-inf included); -0.0 and 0.0 are one key.
    key = jnp.where(jnp.isnan(s), jnp.zeros((), _ordered_uint(s.dtype)), _ordered_bits(s))
    # Per scope: L, or all its candidates (a budget beyond B·K is B·K: no int32 overflow).
    want = jnp.minimum(count(candidates), min(budget, n))
    width = 8 * s.dtype.itemsize

    def cut_step(_, bounds):  # invariant: count(key >= lo) >= want; the answer lies in [lo, hi]
        lo, hi = bounds
        mid = lo + (hi - lo) // 2 + (hi - lo) % 2  # the upper middle: lo < mid <= hi unless equal
        ok = count(candidates & (key >= spread(mid))) >= want
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid - 1)

    top = jnp.full(want.shape, jnp.iinfo(key.dtype).max, key.dtype)
    # vary_like: inside jax.shard_map the bounds vary over the mesh axes the keys vary over.
    cut, _ = jax.lax.fori_loop(0, width, cut_step,
                               vary_like((jnp.zeros_like(top), top), key, candidates))
    above = candidates & (key > spread(cut))
    tied = candidates & (key == spread(cut))
    missing = want - count(above)  # the ties to take, lowest flat index first
    flat = jnp.arange(n, dtype=jnp.int32).reshape(surprisal.shape)

    def tie_step(_, bounds):  # the smallest bound j with count(tied & flat < j) >= missing
        lo, hi = bounds
        mid = lo + (hi - lo) // 2
        ok = count(tied & (flat < spread(mid))) >= missing
        return jnp.where(ok, lo, mid + 1), jnp.where(ok, mid, hi)

    end = jnp.full(want.shape, n, jnp.int32)
    _, bound = jax.lax.fori_loop(0, n.bit_length(), tie_step,
                                 vary_like((jnp.zeros_like(end), end), key, candidates))
    return (above | (tied & (flat < spread(bound)))).reshape(shape)


def _ordered_uint(dtype):
    return jnp.dtype(f"uint{8 * jnp.dtype(dtype).itemsize}")


def _ordered_bits(s: jax.Array) -> jax.Array:
    """Unsigned integers in the order of the (non-NaN) floats ``s``: ``a < b`` iff ``u(a) < u(b)``.

    The IEEE bit pattern with the sign bit set for positives and every bit flipped for negatives
    (the usual radix-sort key), after -0.0 is made 0.0. Integer operations only: XLA's CPU float
    comparisons treat denormals as zero and it folds ``s + 0.0`` to ``s``, while these keys keep
    every float's exact order (as the NumPy reference does). Every number, -inf included, maps
    above 0, which is free for NaN.
    """
    uint = _ordered_uint(s.dtype)
    bits = jax.lax.bitcast_convert_type(s, uint)
    sign = uint.type(1 << (8 * uint.itemsize - 1))
    bits = jnp.where(bits == sign, jnp.zeros_like(bits), bits)  # -0.0 -> 0.0
    return jnp.where((bits & sign) != 0, ~bits, bits | sign)


@jit_grouped(
    static_argnames=("normalize",),
)
def tcpo_advantages(
    scores: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    group_ids: Int[Array, " B"] | Groups,
    *,
    success_threshold: Finite = 1.0,
    progress_weight: Finite = 1.0,
    preservation_weight: Finite = 0.1,
    regression_weight: Finite = 1.0,
    hindsight_weight: Finite = 1.0,
    counterfactual_weight: Finite = 1.0,
    initial: Finite = 0.0,
    alt_scores: Float[Array, "B K M"] | None = None,
    alt_mask: Bool[Array, "B K M"] | None = None,
    selected: Bool[Array, "B K"] | None = None,
    normalize: bool = True,
    gamma: Unit = 1.0,
    normalization: Normalization | None = None,
) -> TCPO:
    """TCPO turn advantages: retrospective + hindsight (+ counterfactual), z-scored per (prompt, turn).

    The composition, with ``R``, ``H``, ``C`` from :func:`retrospective_credit`,
    :func:`hindsight_credit` and :func:`counterfactual_credit`::

        use_{i,k}    = selected ∧ H.eligible ∧ C.informative          (all false without alt_scores)
        credit_{i,k} = R_{i,k} + (w_c·C_{i,k} if use_{i,k} else w_h·H_{i,k})
        z_{i,k}      = group_normalize(credit, group_ids, turn_mask, normalization=…)   if normalize
        A_{i,k}      = γ^k · z_{i,k}                 (the paper's γ^{k-1}, 1-based k)

    *(reading)* On a selected, eligible turn whose alternatives are informative, the
    counterfactual *replaces* the hindsight estimate ("refines" in the paper); elsewhere hindsight
    stands. Eligible turns have ``R = 0``, so adding ``H`` and replacing by ``H`` coincide. The
    z-score compares each turn with the same turn index of the other trajectories of its prompt
    (``normalization=``, as :func:`credax.group_normalize`; the TCPO reimplementation's
    population std with ``eps`` inside the square root is
    ``Normalization(ddof=0, eps_mode="sqrt", singleton="raw")``). ``A`` goes to every token of
    turn ``k`` through :func:`credax.broadcast_to_tokens`.

    The ablation ladder of the paper's Table 3 is reachable from here: ``hindsight_weight=0`` is
    retrospective-only, no ``alt_scores`` is retrospective + hindsight, and
    ``preservation_weight=regression_weight=hindsight_weight=0, normalize=False, gamma=1`` returns
    the bare improvement ``Δ``. :func:`raw_score_credit` and :func:`adjacent_delta_credit` give the
    lower rungs (normalise them with :func:`credax.group_normalize`).

    Caveat: the (prompt, turn) peer sets contain only trajectories that reached turn ``k``. When
    the policy chooses when to stop, the credit lab measures this credit paying for continuing
    over stopping beyond the true advantage (docs/guides/credit-lab.md); for a turn baseline
    that is unbiased whoever stops, see :func:`credax.unbiased_turn_advantages`.

    Args:
      scores: ``float[B, K]`` per-turn verifier scores in ``[0, 1]``.
      turn_mask: ``bool[B, K]`` real turns (a prefix of each row); padded values never matter.
      group_ids: ``int[B]`` prompt of each row (any integers), or a ``Groups``.
      success_threshold, progress_weight, preservation_weight, regression_weight, initial: as
        :func:`retrospective_credit`. May be traced.
      hindsight_weight: ``w_h``. May be traced.
      counterfactual_weight: ``w_c``. May be traced.
      alt_scores: optional ``float[B, K, M]`` scores of alternatives resampled at each turn's
        history; only selected, eligible turns use them.
      alt_mask: optional ``bool[B, K, M]`` real alternatives (default: all of ``alt_scores``).
      selected: optional ``bool[B, K]`` turns allowed to use their alternatives, e.g.
        :func:`select_top_surprisal` (default with ``alt_scores``: every turn, the paper's
        "counterfactuals on all turns").
      normalize: z-score per (prompt, turn) (static).
      gamma: ``γ``, turn ``k`` is weighted by ``γ^k`` after normalisation. May be traced.
      normalization: the options of :func:`credax.group_normalize` for the z-score, one
        :class:`credax.Normalization` (``None``: ``Normalization()``; its ``eps`` may be traced,
        the rest is static).

    Returns:
      ``TCPO(advantages, credit, retrospective, hindsight, counterfactual)``: ``advantages`` and
      ``credit`` ``[B, K]`` in the dtype of ``scores``, ``0`` on padded turns; the parts as
      returned by the individual functions (``counterfactual`` is zeros with
      ``informative = False`` when no ``alt_scores`` are given).

    Raises:
      TypeError: non-boolean masks, non-integer ``group_ids``.
      TypeError: a ``normalization`` that is not a :class:`credax.Normalization`.
      ValueError: shapes disagree, unknown options, ``alt_mask`` or ``selected`` without
        ``alt_scores``.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> s = jnp.array([[0.0, 0.5, 1.0, 1.0],
      ...                [0.0, 0.0, 1.0, 0.0],     # 4th turn padded
      ...                [1.0, 0.5, 1.0, 0.0],     # 4th turn padded
      ...                [0.0, 0.0, 0.0, 0.0]])    # 4th turn padded
      >>> valid = jnp.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0]], bool)
      >>> out = credax.tcpo_advantages(s, valid, jnp.zeros(4, jnp.int32), normalize=False)
      >>> # turn 0: rows 0, 1, 3 stall (eligible) with future best 1, 1, 0 -> H = .5, .5, -1;
      >>> # turn 1: rows 1, 3 eligible -> H = 1, -1; row 0 improves +.5, row 2 regresses -.5.
      >>> [[round(float(v), 2) for v in row] for row in out.credit]
      [[0.5, 0.5, 0.5, 0.1], [0.5, 1.0, 1.0, 0.0], [1.0, -0.5, 0.1, 0.0], [-1.0, -1.0, 0.0, 0.0]]

    References:
      Liao, Chen & Tang 2026, TCPO (arXiv 2608.01667). Weights, τ, γ and the normalisation
      convention of the paper are not public: defaults are neutral (unit weights, ``γ = 1``) and
      the z-score uses credax's GRPO defaults (unbiased std, ``+1e-6`` on the std, singleton
      sets ``0``).
    """
    s, mask, out_dtype = prepare_turns(scores, turn_mask)
    check_x_and_groups(s, group_ids, "scores")
    dt = s.dtype

    def hyper(value, name):
        return _checks.scalar(value, dt, name)

    threshold = hyper(success_threshold, "success_threshold")
    initial = hyper(initial, "initial")
    # The best prior and the future best in one pass over the turns.
    best_before, best_after = masked_turn_maxima(s, mask, initial)
    retro = _retrospective(
        s, mask,
        initial=initial,
        threshold=threshold,
        w_progress=hyper(progress_weight, "progress_weight"),
        w_preserve=hyper(preservation_weight, "preservation_weight"),
        w_regress=hyper(regression_weight, "regression_weight"),
        m=best_before,
    )
    hind = _hindsight(s, mask, group_ids, retro, threshold=threshold, u=best_after)

    if alt_scores is None:
        if alt_mask is not None or selected is not None:
            raise ValueError("`alt_mask` and `selected` need `alt_scores` (the alternatives' "
                             "scores); without them no counterfactual is used.")
        zero = jnp.zeros_like(s)
        counter = Counterfactual(zero, zero, jnp.zeros(s.shape, jnp.int32), jnp.zeros(s.shape, bool))
        use = jnp.zeros(s.shape, bool)
    else:
        alt, alt_mask = _check_alternatives(alt_scores, alt_mask, s.shape)
        selected = _checks.as_mask(selected, "selected", s.shape)
        # Alternatives of padded turns do not exist, whatever alt_mask says.
        alt_mask = alt_mask & mask[:, :, None]
        counter = _counterfactual(jnp.where(mask, s, 0), alt.astype(dt), alt_mask)
        use = selected & hind.eligible & counter.informative

    refined = jnp.where(
        use,
        hyper(counterfactual_weight, "counterfactual_weight") * counter.credit,
        hyper(hindsight_weight, "hindsight_weight") * hind.credit,
    )
    credit = jnp.where(mask, retro.credit + refined, jnp.zeros_like(s))
    if normalize:
        # credit is a long expression of the inputs: see _group_stats._block_stats on long_input.
        opts = normalization_or(normalization)
        z = normalize_with_groups(credit, group_ids, mask, opts, long_input=True)
    else:
        z = credit
    weights = discount_powers(s.shape[1], hyper(gamma, "gamma"))
    advantages = jnp.where(mask, weights[None, :] * z, jnp.zeros_like(s))
    return _cast(TCPO(advantages, credit, retro, hind, counter), out_dtype)


@jit_public(replicate=True)
def raw_score_credit(
    scores: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
) -> Float[Array, "B K"]:
    """The "turn reward" rung of TCPO's ablation: each turn's credit is its own score, ``s_k``.

    A score measures the quality of the output, not what the turn changed: a turn that merely
    keeps a good output gets full credit, a repair from 0 to 0.5 less than holding 1.

    Args:
      scores: ``float[B, K]``.
      turn_mask: ``bool[B, K]``.

    Returns:
      ``float[B, K]``, ``0`` on padded turns.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.raw_score_credit(jnp.array([[0.0, 0.5, jnp.nan]]), jnp.array([[True, True, False]]))
      Array([[0. , 0.5, 0. ]], dtype=float32)
    """
    s, mask, out_dtype = prepare_turns(scores, turn_mask)
    return jnp.where(mask, s, jnp.zeros_like(s)).astype(out_dtype)


@jit_public(replicate=True)
def adjacent_delta_credit(
    scores: Float[Array, "B K"],
    turn_mask: Bool[Array, "B K"],
    *,
    initial: Finite = 0.0,
) -> Float[Array, "B K"]:
    """The "score difference" rung of TCPO's ablation: ``s_k − s_{k−1}``, with ``s_{−1} = initial``.

    ``s_{k−1}`` is the score of the previous *valid* turn of the row (with prefix masks, turn
    ``k − 1``). Unlike :func:`retrospective_credit` it cannot tell a new best from a recovery
    after a fluctuation: 1 → 0.5 → 1 credits the last turn +0.5 although nothing new was reached.

    Args:
      scores: ``float[B, K]``.
      turn_mask: ``bool[B, K]``.
      initial: the score before the first turn. May be traced.

    Returns:
      ``float[B, K]``, ``0`` on padded turns.

    Examples:
      >>> import credax, jax.numpy as jnp
      >>> credax.adjacent_delta_credit(jnp.array([[1.0, 0.5, 1.0]]), jnp.ones((1, 3), bool))
      Array([[ 1. , -0.5,  0.5]], dtype=float32)
    """
    s, mask, out_dtype = prepare_turns(scores, turn_mask)
    initial = _checks.scalar(initial, s.dtype, "initial")
    turns = s.shape[1]
    k = jnp.arange(turns, dtype=jnp.int32)
    # Index of the last valid turn strictly before k (−1: none), so a gap never pairs a turn with
    # a padded value.
    last = running_max(jnp.where(mask, k[None, :], -1))
    before = jnp.concatenate([jnp.full_like(last[:, :1], -1), last[:, :-1]], axis=1)
    clean = jnp.where(mask, s, jnp.zeros_like(s))
    prev = jnp.take_along_axis(clean, jnp.maximum(before, 0), axis=1)
    prev = jnp.where(before >= 0, prev, initial)
    return jnp.where(mask, s - prev, jnp.zeros_like(s)).astype(out_dtype)

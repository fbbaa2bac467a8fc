"""Turns from Tunix's data: the :class:`TurnLayout` of a batch, the turn methods, and the
per-token advantages Tunix trains on (see :mod:`credax.tunix`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from numbers import Real
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import _checks
from .._group_ids import Groups, exact_id
from .._stepwise import gigpo_advantages, mt_grpo_advantages
from .._tcpo import tcpo_advantages
from .._turn_baseline import unbiased_turn_advantages
from .._turns import broadcast_to_tokens

# --------------------------------------------------------------------------------------------
# Host-side readers: what credax.tunix receives is checked before credax converts it, on the
# rules of credax._checks (the float32 and int32 range rule is check_host_range's).
# --------------------------------------------------------------------------------------------


def _host(x, name: str) -> np.ndarray:
    return _checks.host_array(x, name, "credax.tunix works on the host (outside jit)")


def _real(x, name: str, *, ndim: int, where: np.ndarray | None = None) -> np.ndarray:
    """``x`` as a real NumPy array of ``ndim`` dimensions whose entries (those ``where`` selects)
    are finite and within float32: checked before the float32 conversion, which would turn
    ``1e39`` into ``inf`` and a bool or a string into a number."""
    a = _host(x, name)
    _checks.check_real(a, name, bool_ok=False)
    if a.ndim != ndim:
        raise ValueError(f"`{name}` must be {ndim}-D; got shape {a.shape}.")
    selected = a if where is None else np.where(where, a, 0)
    _checks.check_host_range(selected, name)
    bad = ~np.isfinite(selected)
    if bad.any():
        at = _checks.first_index(bad)
        raise ValueError(f"`{name}` must be finite (no NaN or inf); {name}[{', '.join(map(str, at))}] = "
                         f"{a[at].item()!r}.")
    return a


def _bool_mask(x, name: str) -> np.ndarray:
    """A ``[B, L]`` mask as bool: booleans, or integers that are all 0 or 1 (Tunix's int masks)."""
    a = _host(x, name)
    if a.ndim != 2:
        raise ValueError(f"`{name}` must be 2-D [B, L]; got shape {a.shape}.")
    if a.dtype == np.bool_:
        return a
    _checks.check_int(a, name, "a boolean or 0/1 integer array")
    bad = (a != 0) & (a != 1)
    if bad.any():
        at = _checks.first_index(bad)
        raise ValueError(f"`{name}` must hold only 0 and 1; {name}[{at[0]}, {at[1]}] = {a[at]}.")
    return a.astype(bool)


def _index(x, name: str) -> np.ndarray:
    """An integer index array, refused where JAX would wrap it (check_host_range)."""
    a = _host(x, name)
    _checks.check_int(a, name)
    _checks.check_host_range(a, name)
    return a


def _groups(rewards, num_generations) -> tuple[jax.Array, Groups]:
    """Tunix's rewards as float32 and the ``N / G`` groups of ``G`` consecutive generations."""
    r = _host(rewards, "rewards")
    if r.ndim != 1 or r.dtype == np.bool_ or not (np.issubdtype(r.dtype, np.floating)
                                                  or np.issubdtype(r.dtype, np.integer)):
        raise ValueError(f"`rewards` must be a 1-D real array [N] (Tunix's rewards of N / G prompts); "
                         f"got {r.dtype} of shape {r.shape}.")
    _real(r, "rewards", ndim=1)  # before the float32 cast: NaN, inf and beyond float32 named
    if isinstance(num_generations, bool) or not isinstance(num_generations, int | np.integer) \
            or num_generations < 1 or r.shape[0] % int(num_generations):
        raise ValueError(f"`num_generations` must be a positive int dividing N = {r.shape[0]}; got "
                         f"{num_generations!r}.")
    n, g = r.shape[0], int(num_generations)
    return jnp.asarray(r, jnp.float32), Groups(jnp.arange(n, dtype=jnp.int32) // g, max(n // g, 1))



# --------------------------------------------------------------------------------------------
# Turns from Tunix's own data.
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TurnLayout:
    """The turns of a Tunix batch on the host: what the turn-level methods take.

    ``B`` rows in Tunix's order, ``K`` turns (padded), ``L`` completion tokens. Built by
    :func:`turns_from_mask` or :func:`turns_from_steps`; passed to :func:`turn_advantages` and
    returned by the ``turns`` function of :class:`TurnCreditGRPOLearner`.

    Attributes:
      scores: ``float32[B, K]`` the verifier's score of the state after each turn, in ``[0, 1]``:
        TCPO's input (its progress, regression and preservation terms are on that scale). From
        per-step rewards (``scores=`` of :func:`turns_from_steps`, :func:`turns_from_mask`): each
        step's reward (``"reward"``, the default: the environment scores each turn's state) or
        their running total ``s_k = Σ_{j<=k} r_j`` (``"total"``: rewards are increments);
        ``0`` on padded turns.
      turn_mask: ``bool[B, K]`` real turns, a prefix of each row. A row with none (Tunix's
        overlong filter or degenerate-group masking emptied its mask) enters no statistic and
        gets advantage ``0``.
      token_turn: ``int32[B, L]`` the turn of each completion token; ``-1`` on environment
        tokens, padding and tokens outside every turn (they leave the loss).
      rewards: ``float32[B, K]`` Tunix's per-step ``reward`` (MT-GRPO's turn reward, GiGPO's step
        reward, the turn baseline's reward); ``None`` when only scores are known.
      outcome: ``float32[B]`` the trajectory reward ``Σ_k r_k`` (Tunix's ``trajectory_reward``);
        ``None`` when only scores are known.
      anchors: ``int32[B, K]`` dense ids of the state each turn acted on (GiGPO's anchor
        states), ``-1`` on padded turns; ``None`` when not given.
    """

    scores: np.ndarray
    turn_mask: np.ndarray
    token_turn: np.ndarray
    rewards: np.ndarray | None = None
    outcome: np.ndarray | None = None
    anchors: np.ndarray | None = None


# How a layout's scores come from per-step rewards: each step's own reward (the verifier's score of
# the state after it), or their running total (rewards that are increments of the score).
SCORES = ("reward", "total")


def _scores_option(scores) -> str:
    if not isinstance(scores, str) or scores not in SCORES:
        raise ValueError(f"`scores` must be one of {SCORES}: each step's reward as the turn's score, "
                         f"or their running total; got {scores!r}.")
    return scores


def _from_rewards(rewards: list[list[float]], token_turn: np.ndarray, name: str,
                  anchors: np.ndarray | None = None, scores: str = "reward") -> TurnLayout:
    b = len(rewards)
    k = max([len(r) for r in rewards] + [1])
    mask = np.arange(k)[None, :] < np.array([len(r) for r in rewards], np.int64).reshape(b, 1)
    r = np.zeros((b, k), np.float64)
    for i, row in enumerate(rewards):
        r[i, :len(row)] = row
    r = _real(r, name, ndim=2, where=mask)
    clean = np.where(mask, r, 0.0)
    per_turn = np.where(mask, np.cumsum(clean, axis=1), 0.0) if scores == "total" else clean
    return TurnLayout(scores=per_turn.astype(np.float32), turn_mask=mask, token_turn=token_turn,
                      rewards=np.where(mask, r, 0.0).astype(np.float32),
                      outcome=np.where(mask, r, 0.0).sum(axis=1).astype(np.float32), anchors=anchors)


def _rows(values, name: str, count: int) -> list:
    if isinstance(values, str | bytes) or not hasattr(values, "__len__"):
        raise TypeError(f"`{name}` must be a sequence of {count} rows; got {type(values).__name__}.")
    if len(values) != count:
        raise ValueError(f"`{name}` must have one entry per row, {count}; got {len(values)}.")
    return list(values)


def _numbers(row, name: str) -> list[float]:
    a = _host(row, name)
    if a.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-D sequence of numbers; got shape {a.shape}.")
    return _real(a, name, ndim=1).astype(np.float64).tolist()


def turns_from_mask(completion_mask, turn_rewards, *, scores: str = "reward") -> TurnLayout:
    """Turns from a completion mask with holes: each run of true tokens is one turn.

    Tunix's agentic learner marks the model's tokens ``1`` and the environment's ``0`` in one
    completion (``assistant, env, assistant, env, ...``), so a row such as ``[1, 1, 0, 0, 1, 0]``
    holds two turns: tokens 0-1 are turn 0, token 4 is turn 1, the rest is ``-1``. A hole at the
    start is fine (``[0, 0, 0, 1, 0, 0]`` is one turn, token 3). ``turn_rewards[b]`` gives the
    reward of each turn of row ``b``, one per run, in order.

    Two model turns with no environment token between them form one run, so they count as one
    turn here: when that can happen, lay the turns out from Tunix's steps
    (:func:`turns_from_steps`), which knows each step's token counts.

    Args:
      completion_mask: ``[B, L]`` booleans or 0/1 integers (``TrainExample.completion_mask``).
      turn_rewards: ``B`` sequences of per-turn rewards (ragged). A row the mask empties
        (Tunix's overlong filter) has no turn; its rewards are not used.
      scores: the layout's ``scores`` (TCPO's per-turn verifier scores, in ``[0, 1]``):
        ``"reward"`` (default) each turn's reward, ``"total"`` their running total.

    Returns:
      A :class:`TurnLayout` with ``rewards``, ``outcome`` (their sum) and ``scores``.

    Raises:
      ValueError: a mask value other than 0/1, a row whose reward count is not its run count
        (naming both), a non-finite reward.
      TypeError: a non-integer, non-boolean mask; rewards that are not a sequence of rows.

    Examples:
      >>> import numpy as np
      >>> from credax.tunix import turns_from_mask
      >>> t = turns_from_mask(np.array([[0, 0, 0, 1, 0, 0], [1, 1, 0, 0, 1, 0]]), [[1.0], [0.0, 1.0]])
      >>> t.token_turn.tolist()
      [[-1, -1, -1, 0, -1, -1], [0, 0, -1, -1, 1, -1]]
      >>> t.turn_mask.tolist(), t.scores.tolist(), t.outcome.tolist()
      ([[True, False], [True, True]], [[1.0, 0.0], [0.0, 1.0]], [1.0, 1.0])
    """
    scores = _scores_option(scores)
    m = _bool_mask(completion_mask, "completion_mask")
    starts = m & ~np.pad(m, ((0, 0), (1, 0)))[:, :-1]
    runs = starts.sum(axis=1)
    token_turn = np.where(m, np.cumsum(starts, axis=1) - 1, -1).astype(np.int32)
    rows = _rows(turn_rewards, "turn_rewards", m.shape[0])
    rewards = []
    for b, row in enumerate(rows):
        values = _numbers(row, f"turn_rewards[{b}]")
        if runs[b] == 0:
            values = []
        elif len(values) != runs[b]:
            raise ValueError(
                f"`turn_rewards[{b}]` has {len(values)} rewards but row {b} of `completion_mask` has "
                f"{runs[b]} turns (runs of true tokens); give one reward per turn, in order, or lay "
                "the turns out from Tunix's steps with turns_from_steps.")
        rewards.append(values)
    return _from_rewards(rewards, token_turn, "turn_rewards", scores=scores)


def _get(step, key: str, default=None):
    return step.get(key, default) if isinstance(step, Mapping) else getattr(step, key, default)


def _count(tokens, name: str) -> int:
    if tokens is None:
        return 0
    a = _host(tokens, name)
    if a.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-D token sequence; got shape {a.shape}.")
    return int(a.shape[0])


def turns_from_steps(steps, *, length: int, anchors=None, completion_mask=None,
                     scores: str = "reward") -> TurnLayout:
    """Turns from Tunix's per-step data: one turn per step, laid out as Tunix's completion.

    ``steps[b]`` is trajectory ``b``'s list of steps, each a Tunix ``Step``
    (``Trajectory.steps``) or the dict of the trajectory engine's ``"Steps"`` mode: its
    ``assistant_tokens``, ``env_tokens`` and ``reward`` are read. Tunix's ``"Token"`` mode
    concatenates ``assistant_0, env_0, assistant_1, env_1, ...`` into the completion and cuts it
    at ``length`` (``max_response_length``); the assistant tokens of step ``k`` get
    ``token_turn = k``, the environment tokens ``-1``. A step whose tokens were cut off is still
    a turn (its reward stays in the returns), it just has no token to train.

    Args:
      steps: ``B`` sequences of steps (Tunix's row order).
      length: ``L``, the completion length of the ``TrainExample`` (static).
      anchors: optional ``B`` sequences of hashable state keys, one per step (the state the step
        acted on, e.g. the observation text): densified exactly into ``anchors`` (GiGPO).
      completion_mask: optional ``[B, L]`` mask to check the layout against: on every row it
        does not empty, its true tokens must be exactly the assistant tokens.
      scores: the layout's ``scores``, TCPO's per-turn verifier scores in ``[0, 1]``:
        ``"reward"`` (default) each step's reward, the environment's score of the state after the
        step (Tunix's agentic environments reward each step); ``"total"`` their running total,
        for rewards that are increments of a score (a sparse final reward, a shaped progress).

    Returns:
      A :class:`TurnLayout` with ``rewards`` (each step's ``reward``), ``outcome`` and ``scores``.

    Raises:
      ValueError: a step without a ``reward``, a non-finite reward, anchors of the wrong counts,
        a layout that disagrees with ``completion_mask`` (naming the row and token).

    Examples:
      >>> from credax.tunix import turns_from_steps
      >>> steps = [[{"assistant_tokens": [5, 6], "env_tokens": [7], "reward": 0.0},
      ...           {"assistant_tokens": [8], "env_tokens": [], "reward": 1.0}]]
      >>> t = turns_from_steps(steps, length=5)
      >>> t.token_turn.tolist(), t.rewards.tolist(), t.scores.tolist()
      ([[0, 0, -1, 1, -1]], [[0.0, 1.0]], [[0.0, 1.0]])
      >>> turns_from_steps([[{"reward": 0.5}, {"reward": 0.25}]], length=0, scores="total").scores
      array([[0.5 , 0.75]], dtype=float32)
    """
    scores = _scores_option(scores)
    if isinstance(length, bool) or not isinstance(length, int | np.integer) or length < 0:
        raise ValueError(f"`length` must be a non-negative int (the completion length L); got {length!r}.")
    rows = _rows(steps, "steps", len(steps) if hasattr(steps, "__len__") else -1)
    token_turn = np.full((len(rows), int(length)), -1, np.int32)
    rewards = []
    for b, row in enumerate(rows):
        row = _rows(row, f"steps[{b}]", len(row) if hasattr(row, "__len__") else -1)
        pos, values = 0, []
        for k, step in enumerate(row):
            reward = _get(step, "reward")
            if reward is None:
                raise ValueError(f"`steps[{b}][{k}]` has no `reward`.")
            if isinstance(reward, bool | np.bool_ | str | bytes) or not isinstance(reward, Real):
                raise TypeError(f"`steps[{b}][{k}].reward` must be a real number; got {reward!r}.")
            values.append(float(reward))
            n = _count(_get(step, "assistant_tokens"), f"steps[{b}][{k}].assistant_tokens")
            token_turn[b, min(pos, length):min(pos + n, length)] = k
            pos += n + _count(_get(step, "env_tokens"), f"steps[{b}][{k}].env_tokens")
        rewards.append(_numbers(np.asarray(values, np.float64), f"steps[{b}] rewards"))
    dense = None
    if anchors is not None:
        keys = _rows(anchors, "anchors", len(rows))
        ids: dict[Any, int] = {}
        width = max([len(r) for r in rewards] + [1])
        dense = np.full((len(rows), width), -1, np.int32)
        for b, row in enumerate(keys):
            if len(row) != len(rewards[b]):
                raise ValueError(f"`anchors[{b}]` must have one key per step, {len(rewards[b])}; "
                                 f"got {len(row)}.")
            for k, key in enumerate(row):
                dense[b, k] = ids.setdefault(exact_id(key, f"anchors[{b}][{k}]"), len(ids))
    if completion_mask is not None:
        m = _bool_mask(completion_mask, "completion_mask")
        if m.shape != token_turn.shape:
            raise ValueError(f"`completion_mask` must have shape [B, L] = {token_turn.shape}; "
                             f"got {m.shape}.")
        off = (m != (token_turn >= 0)) & m.any(axis=1, keepdims=True)
        if off.any():
            b, t = _checks.first_index(off)
            put = "no assistant token" if m[b, t] else "an assistant token"
            raise ValueError(
                f"the steps do not lay out as the completion: completion_mask[{b}, {t}] = "
                f"{int(m[b, t])} but the steps put {put} there (are the steps in Tunix's row order, "
                "and `length` the completion length?).")
    return _from_rewards(rewards, token_turn, "steps' rewards", dense, scores)


# --------------------------------------------------------------------------------------------
# Turn-level credit: named methods, the conversion, and the learners.
# --------------------------------------------------------------------------------------------


def _needs(layout: TurnLayout, name: str, *fields: str) -> None:
    missing = [f for f in fields if getattr(layout, f) is None]
    if missing:
        how = ("give anchors= to turns_from_steps (the state each step acted on)" if missing == ["anchors"]
               else "build the turns with turns_from_mask or turns_from_steps")
        raise ValueError(f"method {name!r} needs the turns' {' and '.join(missing)}: {how}.")


def _tcpo_layout(t: TurnLayout, groups: Groups) -> jax.Array:
    return tcpo_advantages(jnp.asarray(t.scores), jnp.asarray(t.turn_mask), groups).advantages


def _mt_grpo_layout(t: TurnLayout, groups: Groups) -> jax.Array:
    _needs(t, "mt_grpo", "rewards", "outcome")
    return mt_grpo_advantages(jnp.asarray(t.rewards), jnp.asarray(t.outcome), jnp.asarray(t.turn_mask),
                              groups)


def _gigpo_layout(t: TurnLayout, groups: Groups) -> jax.Array:
    _needs(t, "gigpo", "rewards", "outcome", "anchors")
    return gigpo_advantages(jnp.asarray(t.outcome), jnp.asarray(t.rewards), t.anchors,
                            jnp.asarray(t.turn_mask), groups)


def _turn_baseline_layout(t: TurnLayout, groups: Groups) -> jax.Array:
    _needs(t, "turn_baseline", "rewards")
    return unbiased_turn_advantages(jnp.asarray(t.rewards), jnp.asarray(t.turn_mask), groups)


TURN_METHODS: dict[str, Callable[[TurnLayout, Groups], jax.Array]] = {
    "tcpo": _tcpo_layout,
    "mt_grpo": _mt_grpo_layout,
    "gigpo": _gigpo_layout,
    "turn_baseline": _turn_baseline_layout,
}


def _check_verifier_scores(s: np.ndarray, turn_mask: np.ndarray) -> None:
    """TCPO's scale: valid scores are verifier scores in ``[0, 1]`` (its hindsight threshold, its
    progress, regression and preservation terms are on that scale)."""
    bad = turn_mask & ~((s >= 0) & (s <= 1))
    if bad.any():
        b, k = _checks.first_index(bad)
        raise ValueError(
            f"method 'tcpo' reads per-turn verifier scores in [0, 1]; scores[{b}, {k}] = {s[b, k]:g}. "
            "From Tunix's step rewards: scores='reward' (each step's reward scores the state after "
            "it; the default) or scores='total' (their running total) where that stays in [0, 1]; "
            "else rescale the rewards, or choose a reward method (mt_grpo, gigpo, turn_baseline).")


def _as_layout(turns, turn_mask, token_turn) -> TurnLayout:
    if isinstance(turns, TurnLayout):
        if turn_mask is not None or token_turn is not None:
            raise TypeError("`turn_advantages`: give a TurnLayout alone, or scores, turn_mask and "
                            "token_turn; not both.")
        return turns
    if turn_mask is None or token_turn is None:
        raise TypeError("`turn_advantages` needs `turn_mask` and `token_turn` with `scores` (or a "
                        "TurnLayout as the only positional argument).")
    return TurnLayout(scores=turns, turn_mask=turn_mask, token_turn=token_turn)


def _check_method_output(out, name: str, shape: tuple[int, int], turn_mask: np.ndarray) -> np.ndarray:
    if isinstance(out, tuple) and hasattr(out, "advantages"):
        out = out.advantages  # a credax estimator's result (TCPO, MTGRPO, ...): its advantages
    elif isinstance(out, tuple | list | dict):
        raise TypeError(f"`method` {name} must return one [B, K] = {shape} array of advantages; "
                        f"got a {type(out).__name__} of {len(out)} items (return the advantages "
                        "alone, e.g. `lambda s, m, g: f(s, m, g).advantages`).")
    a = np.asarray(out) if not isinstance(out, jax.core.Tracer) else out
    if not hasattr(a, "shape") or tuple(a.shape) != shape:
        raise ValueError(f"`method` {name} must return [B, K] = {shape} advantages; got "
                         f"{getattr(a, 'shape', type(out).__name__)}.")
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"`method` {name} must return floating advantages; got dtype {a.dtype}.")
    bad = turn_mask & ~np.isfinite(a)
    if bad.any():
        b, k = _checks.first_index(bad)
        raise ValueError(f"`method` {name} returned a non-finite advantage on a valid turn: "
                         f"[{b}, {k}] = {a[b, k]}.")
    return a


def turn_advantages(turns, turn_mask=None, token_turn=None, *, completion_mask, num_generations: int,
                    method: str | Callable[[jax.Array, jax.Array, Groups], jax.Array] = "tcpo"):
    """Per-token advantages ``[B, L]`` and the narrowed completion mask, for a Tunix batch.

    ::

        groups   = row // num_generations                       (Tunix's row order)
        A_{b,k}  = method(turns, groups)                        per turn, [B, K]
        a_{b,t}  = A_{b, token_turn[b, t]}    where token_turn >= 0, else 0
        mask'    = completion_mask ∧ (token_turn >= 0)

    What :class:`TurnCreditGRPOLearner` and :class:`AgenticTurnCreditGRPOLearner` do after Tunix
    built its ``TrainExample``. Every host array is checked before it is converted (a float32
    cast would turn ``1e39`` into ``inf``; an int64 ``token_turn`` could wrap), and what ``method``
    returns is checked (shape ``[B, K]``, floating, finite on valid turns).

    Args:
      turns: a :class:`TurnLayout` (:func:`turns_from_mask`, :func:`turns_from_steps`), or the
        ``scores`` ``[B, K]`` with ``turn_mask`` and ``token_turn`` after it.
      turn_mask: ``bool[B, K]`` with ``scores``; ``None`` with a layout.
      token_turn: ``int[B, L]`` with ``scores``; ``None`` with a layout.
      completion_mask: ``[B, L]`` booleans or 0/1 integers (``TrainExample.completion_mask``).
      num_generations: ``G``, consecutive rows per prompt.
      method: a name of :data:`TURN_METHODS` (``"tcpo"``, ``"mt_grpo"``, ``"gigpo"``,
        ``"turn_baseline"``), or a function ``(scores, turn_mask, groups) -> [B, K]``; a credax
        estimator's result (``credax.tcpo_advantages`` returns a ``TCPO``) gives its
        ``.advantages``, another tuple is refused (``TypeError``).

    Returns:
      ``(advantages float32[B, L], completion_mask)``, the mask in JAX's dtype for the one given
      (Tunix's int mask stays int, bool stays bool).

    Raises:
      ValueError: shapes that disagree, ``num_generations`` not dividing ``B``, non-finite
        scores on valid turns, an index beyond int32, a ``method`` output of the wrong shape or
        non-finite on a valid turn, an unknown method name, a method whose inputs are missing.
      TypeError: a mask that is neither boolean nor 0/1 integers, a float ``token_turn``, a
        ``method`` output that is not floating.

    Examples:
      >>> import numpy as np
      >>> from credax.tunix import turn_advantages, turns_from_mask
      >>> mask = np.array([[1, 1, 0, 1], [1, 0, 0, 1]])
      >>> t = turns_from_mask(mask, [[0.0, 1.0], [1.0, 1.0]])
      >>> adv, m = turn_advantages(t, completion_mask=mask, num_generations=2, method="turn_baseline")
      >>> adv.tolist()           # return to go minus the other row's, per turn index
      [[-1.0, -1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    """
    from .._validate import validate_turns

    layout = _as_layout(turns, turn_mask, token_turn)
    cm = _host(completion_mask, "completion_mask")
    cm_bool = _bool_mask(cm, "completion_mask")
    tt = _index(layout.token_turn, "token_turn")
    if tt.shape != cm.shape:
        raise ValueError(f"`token_turn` must have the completion's shape [B, L] = "
                         f"{tuple(cm.shape)}; got {tuple(tt.shape)}.")
    tm = _host(layout.turn_mask, "turn_mask")
    if tm.dtype != np.bool_:
        raise TypeError(f"`turn_mask` must be a boolean array (true = real turn); got dtype {tm.dtype}.")
    s = _real(layout.scores, "scores", ndim=2, where=tm if tm.shape == np.shape(layout.scores) else None)
    _, groups = _groups(np.zeros(s.shape[0]), num_generations)
    validate_turns(s, tm, groups, token_turn=tt, score_range=None, row_mask=tm.any(axis=1))
    if isinstance(method, str):
        if method not in TURN_METHODS:
            raise ValueError(f"`method` must be one of {sorted(TURN_METHODS)} or a function; got {method!r}.")
        if method == "tcpo":
            _check_verifier_scores(s, tm)
        clean = dataclasses.replace(layout, scores=s.astype(np.float32), turn_mask=tm, token_turn=tt)
        per_turn, name = TURN_METHODS[method](clean, groups), repr(method)
    elif callable(method):
        per_turn = method(jnp.asarray(s, jnp.float32), jnp.asarray(tm), groups)
        name = getattr(method, "__name__", type(method).__name__)
    else:
        raise TypeError(f"`method` must be a name of TURN_METHODS or a function; got "
                        f"{type(method).__name__}.")
    per_turn = _check_method_output(per_turn, name, tuple(s.shape), tm)
    tokens = broadcast_to_tokens(jnp.asarray(per_turn, jnp.float32), jnp.asarray(tt))
    narrowed = cm_bool & (tt >= 0)
    return tokens, jnp.asarray(narrowed.astype(cm.dtype))

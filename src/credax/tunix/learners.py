"""Tunix's learners with credax's turn-level credit: :class:`TurnCreditGRPOLearner` (Tunix's
``GRPOLearner``) and :class:`AgenticTurnCreditGRPOLearner` (its agentic, multi-turn learner)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from tunix.rl.agentic import agentic_grpo_learner as _agentic
from tunix.rl.agentic.trajectory import trajectory_collect_engine as _engine
from tunix.rl.grpo import grpo_learner as _grpo_learner

from .._group_ids import Groups
from .turns import (
    TURN_METHODS,
    TurnLayout,
    _scores_option,
    turn_advantages,
    turns_from_mask,
    turns_from_steps,
)


def _layout_from(result) -> TurnLayout:
    if isinstance(result, TurnLayout):
        return result
    if isinstance(result, tuple) and len(result) == 3:
        return TurnLayout(*result)
    raise TypeError(f"`turns` must return a TurnLayout or (scores, turn_mask, token_turn); got "
                    f"{type(result).__name__}.")


class TurnCreditGRPOLearner(_grpo_learner.GRPOLearner):
    """Tunix's ``GRPOLearner`` with per-turn credit: advantages ``[B, L]`` per completion token.

    Tunix generates, scores and builds its ``TrainExample`` as usual; then the turns of each
    completion are laid out, ``method`` gives per-turn advantages grouped by prompt, each
    completion token gets its turn's advantage (:func:`credax.broadcast_to_tokens`), and tokens
    outside every turn leave the loss (the completion mask is narrowed to ``token_turn >= 0``).
    Both Tunix's own ``grpo`` loss and the credax losses take the ``[B, L]`` advantages.

    Give one of:

    * ``turn_rewards(train_example, training_input)``: ``B`` sequences of per-turn rewards; the
      turns are the runs of true tokens of ``train_example.completion_mask``
      (:func:`turns_from_mask`, holes handled: ``[0, 0, 0, 1, 0, 0]`` is one turn).
    * ``turns(train_example, training_input)``: a :class:`TurnLayout`, or ``(scores [B, K],
      turn_mask [B, K], token_turn [B, L])`` over the completion tokens (``B`` = prompts ×
      ``num_generations`` in Tunix's order, ``L`` the padded completion length).

    Every other argument is ``tunix.rl.grpo.grpo_learner.GRPOLearner``'s.

    Args:
      turns: ``(train_example, training_input) -> TurnLayout | (scores, turn_mask, token_turn)``.
      turn_rewards: ``(train_example, training_input) -> B`` sequences of per-turn rewards.
      method: a name of :data:`TURN_METHODS` (default ``"tcpo"``), or ``(scores, turn_mask,
        groups) -> [B, K]``.

    Raises:
      TypeError: neither or both of ``turns`` and ``turn_rewards``, or one that is not callable.
    """

    def __init__(self, *args, turns: Callable[[Any, Any], Any] | None = None,
                 turn_rewards: Callable[[Any, Any], Any] | None = None,
                 method: str | Callable[[jax.Array, jax.Array, Groups], jax.Array] = "tcpo", **kwargs):
        if (turns is None) == (turn_rewards is None):
            raise TypeError("give exactly one of `turns` (the layout) and `turn_rewards` (per-turn "
                            "rewards, turns from the completion mask).")
        given, label = (turns, "turns") if turns is not None else (turn_rewards, "turn_rewards")
        if not callable(given):
            raise TypeError(f"`{label}` must be a function (train_example, training_input) -> ...; "
                            f"got {type(given).__name__}.")
        super().__init__(*args, **kwargs)
        self._turns, self._turn_rewards, self._method = turns, turn_rewards, method

    def _generate_and_compute_advantage(self, training_input, mode=None):
        kwargs = {} if mode is None else {"mode": mode}
        example = super()._generate_and_compute_advantage(training_input, **kwargs)
        if self._turns is not None:
            layout = _layout_from(self._turns(example, training_input))
        else:
            layout = turns_from_mask(example.completion_mask, self._turn_rewards(example, training_input))
        advantages, mask = turn_advantages(layout, completion_mask=example.completion_mask,
                                           num_generations=self.algo_config.num_generations,
                                           method=self._method)
        return dataclasses.replace(example, advantages=advantages, completion_mask=mask)


# --------------------------------------------------------------------------------------------
# Tunix's agentic (multi-turn) learner with per-step rewards.
# --------------------------------------------------------------------------------------------


class _StepRecordingEngine(_engine.TrajectoryCollectEngine):
    """Tunix's trajectory engine; its ``"Token"`` output also keeps what it drops: each step's
    token counts and reward (``credax_steps``) and the state each step acted on
    (``credax_states``: the reset observation, then each step's observation)."""

    async def collect(self, mode: str = "Conversation"):
        out = await super().collect(mode)
        if mode == "Token" and isinstance(out, dict):
            steps = self.agent.trajectory.steps
            out["credax_steps"] = [dict(assistant_tokens=np.asarray(s.assistant_tokens if s.assistant_tokens
                                                                    is not None else [], np.int64),
                                        env_tokens=np.asarray(s.env_tokens if s.env_tokens is not None
                                                              else [], np.int64),
                                        reward=float(s.reward)) for s in steps]
            states = [self.agent.trajectory.task] + [s.observation for s in steps[:-1]]
            out["credax_states"] = [repr(state) for state in states[:len(steps)]]
        return out


class AgenticTurnCreditGRPOLearner(_agentic.GRPOLearner):
    """Tunix's agentic (multi-turn) ``GRPOLearner`` with credax's turn-level credit.

    Tunix's agentic learner collects each trajectory step by step (a reward per step, the
    model's and the environment's tokens per step), then flattens it into one completion and one
    ``trajectory_reward`` before its estimator runs. This learner keeps the steps (its trajectory
    engine records them), lays them out over the completion (:func:`turns_from_steps`: step
    ``k``'s model tokens are turn ``k``, environment tokens ``-1``) and replaces the group's
    advantages by per-token ones from ``method``, over the ``G`` trajectories of the group:

    ====================  ==================================================================
    ``method``            per turn ``k`` of trajectory ``i``
    ====================  ==================================================================
    ``"tcpo"``            :func:`credax.tcpo_advantages` of the step rewards as per-turn
                          verifier scores in ``[0, 1]`` (``scores=``)
    ``"mt_grpo"``         :func:`credax.mt_grpo_advantages` (step rewards, trajectory reward)
    ``"gigpo"``           :func:`credax.gigpo_advantages`, anchors = the observation each
                          step acted on (the reset observation, then the previous step's)
    ``"turn_baseline"``   :func:`credax.unbiased_turn_advantages` of the step rewards
    ====================  ==================================================================

    The trajectory reward used is Tunix's: the sum of the step rewards, the environment's final
    reward included. A trajectory whose mask Tunix emptied (its overlong filter, or
    ``degenerate_group_masking``, which looks at Tunix's outcome advantages) is not trained on;
    its steps still enter the group's statistics, as its reward enters Tunix's own estimator.
    Tunix's own estimator still runs (its advantages are logged as before);
    what is trained on is the per-token advantage. Every other argument is
    ``tunix.rl.agentic.agentic_grpo_learner.GRPOLearner``'s.

    Args:
      method: a name of :data:`TURN_METHODS` (default ``"tcpo"``) or ``(scores, turn_mask,
        groups) -> [B, K]``.
      scores: the turns' scores from the step rewards (:func:`turns_from_steps`): ``"reward"``
        (default) each step's reward, the environment's score of the state after the step;
        ``"total"`` their running total (rewards that are increments). TCPO refuses scores
        outside ``[0, 1]`` by name (a running total of per-step rewards exceeds 1).
    """

    def __init__(self, *args, method: str | Callable[[jax.Array, jax.Array, Groups], jax.Array] = "tcpo",
                 scores: str = "reward", **kwargs):
        if not (callable(method) or method in TURN_METHODS):
            raise ValueError(f"`method` must be one of {sorted(TURN_METHODS)} or a function; got {method!r}.")
        _scores_option(scores)
        super().__init__(*args, **kwargs)
        self._method, self._scores = method, scores

    def _build_orchestrator(self):
        orchestrator = super()._build_orchestrator()
        orchestrator.engine_cls = _StepRecordingEngine
        return orchestrator

    def _process_results(self, trajectories, *args, **kwargs):
        examples = super()._process_results(trajectories, *args, **kwargs)
        steps = [item.traj["credax_steps"] for item in trajectories]
        states = [item.traj["credax_states"] for item in trajectories]
        out = []
        for example in examples:
            advantages, narrowed = group_advantages(steps, states, example.completion_mask,
                                                    method=self._method, scores=self._scores)
            out.append(dataclasses.replace(example, advantages=advantages, completion_mask=narrowed))
        return out


def group_advantages(steps, states, completion_mask, *, method="tcpo", scores: str = "reward"):
    """What :class:`AgenticTurnCreditGRPOLearner` trains one group on: the steps laid out over
    Tunix's completion (checked against its mask), then :func:`turn_advantages` of ``method``
    over the group's ``len(steps)`` trajectories; ``(advantages [B, L], narrowed mask)``."""
    mask = np.asarray(completion_mask)
    layout = turns_from_steps(steps, length=mask.shape[1], anchors=states, completion_mask=mask,
                              scores=scores)
    return turn_advantages(layout, completion_mask=mask, num_generations=len(steps), method=method)

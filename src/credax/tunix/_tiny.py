"""A tiny Tunix set-up, runnable on a laptop CPU: Tunix's own toy transformer, vocabulary and mesh.

The Tunix guide (``docs/guides/tunix.md``) and ``tests/tunix_worker.py`` train on it, so every
block of the guide runs as printed from a wheel with the ``tunix`` extra. It is Tunix's own test
scaffolding (``tunix.tests.test_common``: ``ToyTransformer``, ``MockVocab``, shipped in the
``google-tunix`` wheel) and the ``vanilla`` rollout engine on the default JAX mesh, as Tunix's
learner tests build it: a few seconds a step, random text, nothing learnt. Replace
:func:`tiny_cluster` by your model, tokenizer and mesh; the learner code stays the same.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np
from tunix.rl.agentic.environments import base_environment as _env

WORDS = ("hello", "world", "there", "My", "name", "is", "Tunix")  # all in Tunix's MockVocab


def tiny_cluster(*, max_steps: int = 1, max_tokens: int = 6, max_prompt_length: int = 16, seed: int = 0,
                 return_logprobs: bool = False):
    """An ``RLCluster`` over Tunix's toy transformer (actor and reference) on the default mesh.

    Args:
      max_steps: training steps (``RLTrainingConfig.max_steps``).
      max_tokens: tokens generated per model call (``RolloutConfig.max_tokens_to_generate``).
      max_prompt_length: prompt tokens kept (left-padded).
      seed: the models' ``nnx.Rngs`` seed (actor and reference start equal).
      return_logprobs: the sampler returns its log-probs (Tunix's agentic learner requires it,
        with ``max_tokens`` equal to its ``max_response_length``).

    Returns:
      ``tunix.rl.rl_cluster.RLCluster`` with ``rollout_engine="vanilla"``, SGD at ``1e-3``, no CPU
      offload, evaluation off; each model call samples with the next seed (``seed``, ``seed + 1``,
      ...), where Tunix's sampler would reuse ``PRNGKey(0)``.
    """
    import optax
    from flax import nnx
    from jax.interpreters import pxla
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.rollout import base_rollout
    from tunix.tests import test_common

    vocab = test_common.MockVocab()

    def toy():
        return test_common.ToyTransformer(config=test_common.ModelConfig(vocab_size=vocab.GetPieceSize()),
                                          rngs=nnx.Rngs(seed))

    mesh = pxla.thread_resources.env.physical_mesh
    roles = (rl_cluster_lib.Role.ACTOR, rl_cluster_lib.Role.REFERENCE, rl_cluster_lib.Role.ROLLOUT)
    config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={role: mesh for role in roles}, rollout_engine="vanilla", offload_to_cpu=False,
        training_config=rl_cluster_lib.RLTrainingConfig(
            actor_optimizer=optax.sgd(1e-3), eval_every_n_steps=10**6, max_steps=max_steps),
        rollout_config=base_rollout.RolloutConfig(max_tokens_to_generate=max_tokens,
                                                  max_prompt_length=max_prompt_length, kv_cache_size=256,
                                                  return_logprobs=return_logprobs))
    cluster = rl_cluster_lib.RLCluster(actor=toy(), reference=toy(), tokenizer=vocab, cluster_config=config)
    # Tunix's sampler uses PRNGKey(0) when RolloutConfig.seed is None, so every call would sample the
    # same text; the agentic learner calls once per trajectory, and its G generations would be
    # identical. Each call gets the next seed instead.
    rollout, seeds = cluster.rollout, itertools.count(seed)
    generate = rollout.generate

    def generate_with_fresh_seed(prompts, rollout_config, **kwargs):
        if rollout_config.seed is None:
            rollout_config = dataclasses.replace(rollout_config, seed=next(seeds))
        return generate(prompts, rollout_config, **kwargs)

    rollout.generate = generate_with_fresh_seed
    return cluster


def tiny_dataset(prompts=("hello world", "My name is", "hello there", "Tunix"), *, batch_size: int = 2):
    """Tunix's input: a ``grain.MapDataset`` of ``{"prompts": [...], "answer": [...]}`` batches."""
    from grain import python as grain

    items = list(prompts)

    class Source(grain.RandomAccessDataSource):
        def __getitem__(self, i):
            return items[i]

        def __len__(self):
            return len(items)

    return grain.MapDataset.source(Source()).batch(batch_size).map(lambda x: {"prompts": x, "answer": x})


class TinyChatParser:
    """The chat template of the tiny set-up: a message is its text (the toy vocabulary has no role
    tokens). Tunix's agentic learner needs a parser to tokenize each step's messages."""

    assistant_token = ""

    def parse(self, messages: list[dict[str, str]], add_generation_prompt: bool = False,
              is_first_msg: bool = False) -> str:
        del add_generation_prompt, is_first_msg
        return " ".join(m["content"] for m in messages if m.get("content"))


class TinyTurnsEnv(_env.BaseTaskEnv):
    """A small multi-turn task: ``max_steps`` turns (default 3); each step's reward is the number
    of distinct words of its response not said in an earlier turn, over the response's length, so
    trajectories and turns differ in credit. The environment answers each turn with two words of
    the toy vocabulary, so the completion Tunix builds has holes (model tokens ``1``,
    environment tokens ``0``)."""

    def __init__(self, entry: dict[str, Any], *, max_steps: int = 3, **kwargs):
        super().__init__(task=dict(entry), max_steps=max_steps, **kwargs)
        self._seen: set[str] = set()

    def _initial_observation(self):
        prompts = self.task.get("prompts")
        return prompts if isinstance(prompts, str) else str(np.ravel(np.asarray(prompts, dtype=object))[0])

    def _step_impl(self, action):
        words = str(getattr(action, "action", action)).split()
        reward = len(set(words) - self._seen) / len(words) if words else 0.0
        self._seen.update(words)
        return _env.EnvStepResult(observation=f"{WORDS[self.step_count % len(WORDS)]} there",
                                  reward=float(reward), done=False, info={})

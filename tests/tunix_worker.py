"""The real-Tunix half of tests/test_tunix.py; not a test module itself (imports nothing at import).

    python tests/tunix_worker.py OUT.json

Runs in a fresh interpreter (Tunix's code runs under JAX's standard promotion and its own
threads, not the suite's strict settings) on Tunix's own toy setup (``tunix.tests.test_common``:
``ToyTransformer``, ``MockVocab``, the ``vanilla`` rollout engine, as Tunix's grpo_learner_test
builds it). Writes, as JSON:

* ``loss``: for several ``GRPOConfig`` settings, Tunix's ``grpo`` loss and the registered
  ``credax`` loss on the same model and ``TrainExample``: loss, aux metrics, the largest gradient
  difference;
* ``presets``: the preset losses' values on the same example;
* ``grpo_run``: a ``GRPOLearner`` trained 2 steps with ``credax_rloo`` (spied) and ``credax``:
  the rewards and advantages of each call, and how far the parameters moved;
* ``turn_run``: a ``TurnCreditGRPOLearner`` trained 1 step with a hand-checkable ``method``:
  the ``TrainExample`` it produced and the turn layout it was given;
* ``turn_rewards_run``: the same learner with ``turn_rewards=`` only (turns from the completion
  mask), ``method="turn_baseline"``: the mask, the rewards given and the advantages;
* ``agentic_run``: ``AgenticTurnCreditGRPOLearner`` trained 1 step on ``TinyTurnsEnv`` (3 turns,
  per-step rewards) with ``method="turn_baseline"``: per group, each step's token counts and
  reward as Tunix's engine recorded them, Tunix's completion mask, the advantages and the mask
  trained on.
"""

from __future__ import annotations

import json
import sys


def _cluster(max_steps):
    import optax
    from flax import nnx
    from jax.interpreters import pxla
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.rollout import base_rollout
    from tunix.tests import test_common as tc

    vocab = tc.MockVocab()
    model = tc.ToyTransformer(config=tc.ModelConfig(vocab_size=vocab.GetPieceSize()), rngs=nnx.Rngs(0))
    ref = tc.ToyTransformer(config=tc.ModelConfig(vocab_size=vocab.GetPieceSize()), rngs=nnx.Rngs(0))
    mesh = pxla.thread_resources.env.physical_mesh
    roles = (rl_cluster_lib.Role.ACTOR, rl_cluster_lib.Role.REFERENCE, rl_cluster_lib.Role.ROLLOUT)
    config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={r: mesh for r in roles}, rollout_engine="vanilla", offload_to_cpu=False,
        training_config=rl_cluster_lib.RLTrainingConfig(
            actor_optimizer=optax.sgd(1e-3), eval_every_n_steps=100, max_steps=max_steps),
        rollout_config=base_rollout.RolloutConfig(max_tokens_to_generate=6, max_prompt_length=16,
                                                  kv_cache_size=64))
    return rl_cluster_lib.RLCluster(actor=model, reference=ref, tokenizer=vocab,
                                    cluster_config=config), model


def _dataset():
    from grain import python as grain

    prompts = ["input string", "hello world", "My name", "hello there"]

    class Source(grain.RandomAccessDataSource):
        def __getitem__(self, i):
            return prompts[i % 4]

        def __len__(self):
            return 8

    return grain.MapDataset.source(Source()).batch(2).map(lambda x: {"prompts": x, "answer": x})


def _reward(completions, **kwargs):
    import numpy as np

    return np.arange(len(completions), dtype=np.float32) % 3  # 0, 1, 2, 0: groups (0, 1), (2, 0)


def losses(out):
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from tunix.rl import algo_core, common, function_registry
    from tunix.rl.grpo import grpo_learner
    from tunix.tests import test_common as tc

    import credax
    import credax.tunix  # noqa: F401  (registers the names)

    vocab = tc.MockVocab()
    model = tc.ToyTransformer(config=tc.ModelConfig(vocab_size=vocab.GetPieceSize()), rngs=nnx.Rngs(0))
    pad, eos, vsize = vocab.pad_id(), vocab.eos_id(), vocab.GetPieceSize()
    mask = jnp.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]], bool)
    completion = jnp.where(mask, jax.random.randint(jax.random.key(1), (4, 5), 3, vsize), pad)
    example = common.TrainExample(
        prompt_ids=jax.random.randint(jax.random.key(0), (4, 3), 3, vsize),
        prompt_mask=jnp.ones((4, 3), bool), completion_ids=completion, completion_mask=mask,
        advantages=jnp.array([1.0, -0.5, 0.25, -2.0]),
        ref_per_token_logps=jax.random.normal(jax.random.key(3), (4, 5)) * 0.3 - 2.0,
        old_per_token_logps=jax.random.normal(jax.random.key(2), (4, 5)) * 0.3 - 2.0)

    def run(fn, config):
        def f(m):
            return fn(m, example, config, pad, eos)

        (loss, aux), grads = nnx.value_and_grad(f, has_aux=True)(model)
        return float(loss), {k: float(v) for k, v in aux.items()}, jax.tree.leaves(grads)

    credax_loss = function_registry.get_policy_loss_fn("credax")
    results = []
    settings = [dict(), dict(loss_agg_mode="token-mean", kl_loss_mode="low_var_kl", beta=0.1),
                dict(loss_algo="gspo-token", epsilon=0.1),
                dict(loss_agg_mode="sequence-mean-token-sum-norm", beta=0.0, epsilon_c=3.0)]
    for setting in settings:
        setting = dict(setting)
        extra = {k: setting.pop(k) for k in ("epsilon_c",) if k in setting}  # not a field in 0.1.7
        config = grpo_learner.GRPOConfig(**setting)
        config.temperature = 1.0
        for k, v in extra.items():
            setattr(config, k, v)
        t_loss, t_aux, t_grads = run(algo_core.grpo_loss_fn, config)
        c_loss, c_aux, c_grads = run(credax_loss, config)
        diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(t_grads, c_grads, strict=True))
        scale = max(float(jnp.max(jnp.abs(a))) for a in t_grads)
        results.append(dict(setting={**setting, **extra}, tunix=t_loss, credax=c_loss, tunix_aux=t_aux,
                            credax_aux=c_aux, grad_diff=diff, grad_scale=scale))
    out["loss"] = results
    config = grpo_learner.GRPOConfig(beta=0.0)
    config.temperature = 1.0
    out["presets"] = {name: run(function_registry.get_policy_loss_fn(name), config)[0]
                      for name in ("credax_verl", "credax_verl_gspo", "credax_trl_grpo", "credax_trl_bnpo",
                                   "credax_trl_dr_grpo", "credax_trl_dapo")}
    # The same example straight through credax.policy_loss with the preset: the registry adds
    # nothing but the log-probs (computed here with Tunix's function, as the loss does).
    graphdef, state = nnx.split(model)
    logp = common.compute_per_token_logps(graphdef, state, prompt_tokens=example.prompt_ids,
                                          completion_tokens=completion, pad_id=pad, eos_id=eos)
    out["preset_direct"] = {
        "credax_verl": float(credax.policy_loss(logp, example.old_per_token_logps,
                                                example.advantages, mask,
                                                options=credax.presets.VERL_LOSS).loss),
        "credax_trl_dr_grpo": float(credax.policy_loss(
            logp, example.old_per_token_logps, example.advantages, mask,
            options=credax.presets.trl_loss("dr_grpo", num_rows=4, max_completion_length=5)).loss),
    }


def runs(out):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from tunix.rl import function_registry
    from tunix.rl.grpo import grpo_learner

    import credax.tunix as ct

    calls = []
    estimator = function_registry.get_advantage_estimator("credax_rloo")

    def spy(rewards, num_generations):
        advantages = estimator(rewards=rewards, num_generations=num_generations)
        calls.append(dict(rewards=np.asarray(rewards).tolist(), G=num_generations,
                          advantages=np.asarray(advantages).tolist()))
        return advantages

    function_registry.register_advantage_estimator("spy_credax_rloo")(spy)
    cluster, model = _cluster(max_steps=2)
    before = jax.tree.map(jnp.copy, nnx.state(model, nnx.Param))
    config = grpo_learner.GRPOConfig(num_generations=2, num_iterations=1,
                                     advantage_estimator="spy_credax_rloo", policy_loss_fn="credax")
    learner = grpo_learner.GRPOLearner(rl_cluster=cluster, reward_fns=_reward, algo_config=config)
    learner.train(_dataset())
    after = nnx.state(model, nnx.Param)
    moved = max(float(jnp.max(jnp.abs(a - b)))
                for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True))
    out["grpo_run"] = dict(calls=calls, moved=moved, steps=learner._iter_steps)

    seen = {}

    def turns(example, training_input):
        # Two turns per completion: its first 3 tokens, then the rest; scores per row.
        b, length = example.completion_ids.shape
        token_turn = np.where(np.arange(length) < 3, 0, 1)[None].repeat(b, 0)
        token_turn[0, 4:] = -1  # row 0: tokens 4, 5 belong to no turn
        scores = np.array([[0.0, 1.0], [0.5, 0.5], [0.25, 1.0], [1.0, 0.0]], np.float32)
        seen["layout"] = dict(token_turn=token_turn.tolist(), scores=scores.tolist(),
                              completion_mask=np.asarray(example.completion_mask).tolist())
        return scores, np.ones((b, 2), bool), token_turn

    def method(scores, turn_mask, groups):  # hand-checkable: score + 10 × prompt group
        return scores + 10.0 * groups.index[:, None].astype(scores.dtype)

    class Recording(ct.TurnCreditGRPOLearner):
        def _generate_and_compute_advantage(self, *args, **kwargs):
            example = super()._generate_and_compute_advantage(*args, **kwargs)
            seen.setdefault("examples", []).append(dict(
                advantages=np.asarray(example.advantages).tolist(),
                completion_mask=np.asarray(example.completion_mask).tolist()))
            return example

    cluster, model = _cluster(max_steps=1)
    before = jax.tree.map(jnp.copy, nnx.state(model, nnx.Param))
    config = grpo_learner.GRPOConfig(num_generations=2, num_iterations=1, policy_loss_fn="credax",
                                     beta=0.0)
    learner = Recording(rl_cluster=cluster, reward_fns=_reward, algo_config=config, turns=turns,
                        method=method)
    learner.train(_dataset())
    after = nnx.state(model, nnx.Param)
    seen["moved"] = max(float(jnp.max(jnp.abs(a - b)))
                        for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True))
    out["turn_run"] = seen


def turn_rewards_run(out):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from tunix.rl.grpo import grpo_learner

    import credax.tunix as ct

    seen = {}

    def turn_rewards(example, training_input):
        # One turn per run of the completion mask (Tunix's plain mask: one run, or none); the
        # reward of a row's turn: its row index, so the groups are (0, 1) and (2, 3).
        mask = np.asarray(example.completion_mask)
        runs = (mask & ~np.pad(mask, ((0, 0), (1, 0)))[:, :-1].astype(bool)).sum(axis=1)
        rewards = [[float(b)] * int(n) for b, n in enumerate(runs)]
        seen["mask"], seen["rewards"] = mask.astype(int).tolist(), rewards
        return rewards

    class Recording(ct.TurnCreditGRPOLearner):
        def _generate_and_compute_advantage(self, *args, **kwargs):
            example = super()._generate_and_compute_advantage(*args, **kwargs)
            seen["advantages"] = np.asarray(example.advantages).tolist()
            seen["completion_mask"] = np.asarray(example.completion_mask).astype(int).tolist()
            return example

    cluster = ct.tiny_cluster(max_steps=1)
    model = cluster.actor_trainer.model
    before = jax.tree.map(jnp.copy, nnx.state(model, nnx.Param))
    config = grpo_learner.GRPOConfig(num_generations=2, num_iterations=1, policy_loss_fn="credax", beta=0.0)
    learner = Recording(rl_cluster=cluster, reward_fns=_reward, algo_config=config, turn_rewards=turn_rewards,
                        method="turn_baseline")
    learner.train(ct.tiny_dataset())
    after = nnx.state(model, nnx.Param)
    seen["moved"] = max(float(jnp.max(jnp.abs(a - b)))
                        for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True))
    out["turn_rewards_run"] = seen


def agentic_run(out):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from tunix.rl.agentic import agentic_grpo_learner

    import credax.tunix as ct

    groups = []

    class Recording(ct.AgenticTurnCreditGRPOLearner):
        def _process_results(self, trajectories, *args, **kwargs):
            examples = super()._process_results(trajectories, *args, **kwargs)
            (example,) = examples
            groups.append(dict(
                steps=[[[len(s["assistant_tokens"]), len(s["env_tokens"]), s["reward"]]
                        for s in item.traj["credax_steps"]] for item in trajectories],
                states=[item.traj["credax_states"] for item in trajectories],
                trajectory_reward=[item.traj["trajectory_reward"] for item in trajectories],
                tunix_mask=[np.asarray(item.traj["conversation_masks"]).astype(int).tolist()
                            for item in trajectories],
                advantages=np.asarray(example.advantages).tolist(),
                completion_mask=np.asarray(example.completion_mask).astype(int).tolist()))
            return examples

    cluster = ct.tiny_cluster(max_steps=1, max_tokens=64, return_logprobs=True)
    model = cluster.actor_trainer.model
    before = jax.tree.map(jnp.copy, nnx.state(model, nnx.Param))
    config = agentic_grpo_learner.GRPOConfig(num_generations=2, max_response_length=64, beta=0.0,
                                             max_concurrency=1)  # Tunix's grpo loss
    learner = Recording(rl_cluster=cluster, algo_config=config, chat_parser=ct.TinyChatParser(),
                        env_class=ct.TinyTurnsEnv, env_kwargs={"max_steps": 3}, method="turn_baseline")
    learner.train(ct.tiny_dataset(batch_size=1))
    after = nnx.state(model, nnx.Param)
    moved = max(float(jnp.max(jnp.abs(a - b)))
                for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True))
    out["agentic_run"] = dict(groups=groups, moved=moved)


def main(path):
    import os

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    out = {}
    losses(out)
    runs(out)
    turn_rewards_run(out)
    agentic_run(out)
    with open(path, "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main(sys.argv[1])

"""credax.trl: TRL 1.16's GRPOTrainer trained two real steps on CPU with credax's turn credit.

A tiny Llama and a word-level tokenizer are built here from a config (nothing is downloaded: the
hub is switched off). The per-token advantages that reach TRL's loss are captured by wrapping the
trainer's ``_compute_loss`` and compared with credax's functions called directly on the same
turns (or, for ``credit="grpo"``, with TRL's own rule written out in NumPy). TRL shuffles the rows
of a generation batch before the loss, so captured rows are matched by their token ids.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

for _key, _value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                     "TRL_EXPERIMENTAL_SILENCE": "1", "WANDB_DISABLED": "true",
                     "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_key, _value)

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import credax  # noqa: E402
import credax.trl  # noqa: E402
from credax.trl import CreditGRPOTrainer, TurnMap  # noqa: E402

WORDS = ["<pad>", "<eos>", "<unk>"] + [f"w{i}" for i in range(29)]
PAD, EOS = 0, 1


def tiny_tokenizer():
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>")


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None))


def config(tmp_path, **overrides):
    kwargs = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                  max_completion_length=8, max_steps=2, report_to="none", use_cpu=True,
                  save_strategy="no", logging_steps=1, learning_rate=1e-2, disable_tqdm=True,
                  seed=0)
    return GRPOConfig(**{**kwargs, **overrides})


PROMPTS = Dataset.from_dict({"prompt": ["w1 w2", "w3 w4"]})

# Multi-turn rollouts, as a rollout_func returns them: completion ids (unique per row), TRL's
# env_mask (1 model tokens, 0 tool results) and one verifier score per model turn. Rows 0-1 are
# prompt 0's two generations, rows 2-3 prompt 1's (TRL's RepeatSampler order).
LAYOUTS = [
    # ids                          env_mask                   turn scores
    ([3, 4, 5, 6, 7, 8, EOS],      [1, 1, 0, 0, 1, 1, 1],     [0.5, 1.0]),
    ([9, 10, EOS],                 [1, 1, 1],                 [0.0]),
    ([11, 12, 13, 14, 15, EOS],    [1, 0, 1, 0, 1, 1],        [0.0, 0.5, 0.5]),
    ([16, 17, 18, 19, EOS],        [1, 1, 0, 1, 1],           [1.0, 0.0]),
]
# The token turns of each layout, by hand: runs of env_mask == 1.
TOKEN_TURNS = [[0, 0, -1, -1, 1, 1, 1], [0, 0, 0], [0, -1, 1, -1, 2, 2], [0, 0, -1, 1, 1]]


def rollout_func(prompts, trainer):
    assert len(prompts) == len(LAYOUTS)
    return {"prompt_ids": [trainer.processing_class(p)["input_ids"] for p in prompts],
            "completion_ids": [ids for ids, _, _ in LAYOUTS], "logprobs": None,
            "env_mask": [mask for _, mask, _ in LAYOUTS],
            "turn_scores": [scores for _, _, scores in LAYOUTS]}


def final_score(completions, turn_scores, **kwargs):
    """The outcome reward: the last turn's score."""
    return [row[-1] for row in turn_scores]


def capture(trainer):
    """Record what reaches TRL's loss each step (and check that the step trains)."""
    seen = []
    original = trainer._compute_loss

    def wrapped(model, inputs):
        seen.append({k: v.detach().clone() for k, v in inputs.items()
                     if isinstance(v, torch.Tensor)})
        return original(model, inputs)

    trainer._compute_loss = wrapped
    return seen


def params(model):
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def by_completion(batch):
    """Captured rows keyed by their completion ids (without padding)."""
    out = {}
    for b in range(batch["completion_ids"].shape[0]):
        n = int(batch["completion_mask"][b].sum())
        out[tuple(batch["completion_ids"][b, :n].tolist())] = b
    return out


def expected_tokens(turn_values, token_turns):
    """Per-turn values on each token of the turn, 0 off the turns (written out per row)."""
    return [[0.0 if k < 0 else float(turn_values[b][k]) for k in row]
            for b, row in enumerate(token_turns)]


def assert_rows(batch, expected, ids_of_row):
    rows = by_completion(batch)
    assert batch["advantages"].shape == batch["completion_ids"].shape  # (B, T), not (B,)
    for b, values in enumerate(expected):
        got = batch["advantages"][rows[tuple(ids_of_row[b])]]
        np.testing.assert_allclose(got[: len(values)].numpy(), values, rtol=1e-5, atol=1e-6)
        assert not got[len(values):].any()  # padding: exactly 0


def test_tcpo_from_tool_turns_reaches_trls_loss_for_two_steps(tmp_path):
    trainer = CreditGRPOTrainer(model=tiny_model(), reward_funcs=final_score,
                                args=config(tmp_path), train_dataset=PROMPTS,
                                processing_class=tiny_tokenizer(), rollout_func=rollout_func,
                                credit="tcpo")
    seen = capture(trainer)
    before = params(trainer.model)
    trainer.train()
    assert len(seen) == 2 and not torch.equal(before, params(trainer.model))
    # credax's own TCPO on the same turns, called directly (not through the bridge).
    scores = np.zeros((4, 4), np.float32)
    turn_mask = np.zeros((4, 4), bool)
    for b, (_, _, s) in enumerate(LAYOUTS):
        scores[b, : len(s)], turn_mask[b, : len(s)] = s, True
    tcpo = np.asarray(credax.tcpo_advantages(scores, turn_mask, np.array([0, 0, 1, 1])).advantages)
    expected = expected_tokens(tcpo, TOKEN_TURNS)
    assert any(v != 0 for row in expected for v in row)
    for batch in seen:
        assert_rows(batch, expected, [ids for ids, _, _ in LAYOUTS])


def test_grpo_credit_gives_trls_own_advantages_on_every_turn_token(tmp_path):
    trainer = CreditGRPOTrainer(model=tiny_model(), reward_funcs=final_score,
                                args=config(tmp_path, max_steps=1), train_dataset=PROMPTS,
                                processing_class=tiny_tokenizer(), rollout_func=rollout_func,
                                credit="grpo")
    seen = capture(trainer)
    trainer.train()
    # TRL's rule (grpo_trainer.py, scale_rewards="group"): (r - mean_g) / (std_g + 1e-4), the
    # unbiased std of the prompt's generations, in float64.
    r = np.array([s[-1] for _, _, s in LAYOUTS], np.float64).reshape(2, 2)
    trl_adv = ((r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)).ravel()
    # Rows 0-1: rewards 1.0, 0.0 -> ±0.5 / (0.70711 + 1e-4); rows 2-3: 0.5, 0.0 -> ±0.25 / ...
    assert trl_adv[0] == pytest.approx(0.5 / (np.sqrt(0.5) + 1e-4))
    expected = [[0.0 if k < 0 else trl_adv[b] for k in row] for b, row in enumerate(TOKEN_TURNS)]
    assert_rows(seen[0], expected, [ids for ids, _, _ in LAYOUTS])


def split_turns(prompts, completions, completion_ids, completion_mask, token_turn, **kwargs):
    """A turn map: turns of two tokens; a turn's score = its share of even token ids."""
    width = completion_mask.shape[1]
    turns = torch.where(completion_mask != 0, torch.arange(width) // 2, -1)
    scores = [[float(np.mean([t % 2 == 0 for t in ids[k: k + 2]])) for k in range(0, len(ids), 2)]
              for ids in completion_ids]
    split_turns.calls.append((completion_ids, turns, scores))
    return TurnMap(token_turn=turns, turn_scores=scores)


def score_sum(completion_ids, **kwargs):
    return [float(sum(t % 2 == 0 for t in ids)) for ids in completion_ids]


def test_mt_grpo_from_a_turn_map_on_generated_completions(tmp_path):
    split_turns.calls = []
    trainer = CreditGRPOTrainer(model=tiny_model(1), reward_funcs=score_sum,
                                args=config(tmp_path, max_completion_length=6),
                                train_dataset=PROMPTS, processing_class=tiny_tokenizer(),
                                credit="mt_grpo", turn_map=split_turns,
                                credit_options={"turn_coef": 0.5})
    seen = capture(trainer)
    trainer.train()
    assert len(seen) == len(split_turns.calls) == 2
    for batch, (ids, turns, scores) in zip(seen, split_turns.calls, strict=True):
        k = max(len(s) for s in scores)
        turn_rewards = np.array([s + [0.0] * (k - len(s)) for s in scores], np.float32)
        turn_mask = np.array([[j < len(s) for j in range(k)] for s in scores])
        outcome = np.array(score_sum(ids), np.float32)
        mt = np.asarray(credax.mt_grpo_advantages(turn_rewards, outcome, turn_mask,
                                                  np.array([0, 0, 1, 1]), turn_coef=0.5))
        token_turns = [turns[b, : len(row)].tolist() for b, row in enumerate(ids)]
        expected = expected_tokens(mt, token_turns)
        # Rows are matched by prompt and completion: two equal completions of one prompt share
        # their values, so either match is right.
        assert_rows(batch, expected, ids)


# ------------------------------------------------------------------------------------------
# Refusals: each names the argument.
# ------------------------------------------------------------------------------------------

MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])  # TRL's completion_mask: padding only
TOOLS = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1]])


def test_unknown_method_and_option_are_refused_before_the_model_loads():
    with pytest.raises(ValueError, match="`credit` must name a credax method"):
        CreditGRPOTrainer(model="never-loaded", credit="ppo")
    with pytest.raises(ValueError, match=r"`credit_options`: 'gama' is not an option of "
                                         r"credax.tcpo_advantages"):
        CreditGRPOTrainer(model="never-loaded", credit="tcpo", credit_options={"gama": 0.9})
    with pytest.raises(TypeError, match="`turn_map` must be a callable"):
        CreditGRPOTrainer(model="never-loaded", turn_map=[[0, 1]])
    with pytest.raises(ValueError, match="outcome_options.*no outcome part"):
        credax.trl.token_advantages("tcpo", torch.ones(2), MASK, num_generations=2,
                                    credit_options={"outcome_options": {}})


def test_a_method_reading_per_turn_fields_trl_lacks_names_them():
    with pytest.raises(ValueError, match="'tcpo' reads per-turn `turn_scores`"):
        credax.trl.token_advantages("tcpo", torch.ones(2), MASK, num_generations=2)
    with pytest.raises(ValueError, match="'triage' reads per-turn `turn_roles`"):
        credax.trl.token_advantages("triage", torch.ones(2), MASK, num_generations=2)
    with pytest.raises(ValueError, match="'gigpo' reads per-turn `turn_scores`"):
        credax.trl.token_advantages("gigpo", torch.ones(2), MASK, num_generations=2,
                                    anchor_ids=[["a"], ["a"]])


def test_turn_fields_that_disagree_with_the_completions_are_refused():
    # Row 0 has two turns around the tool result: one score is not enough.
    with pytest.raises(ValueError, match="`turn_scores` row 0 has 1 values; completion 0 has 2"):
        credax.trl.token_advantages("tcpo", torch.ones(2), MASK, num_generations=2,
                                    tool_mask=TOOLS, turn_scores=[[1.0], [1.0]])
    with pytest.raises(ValueError, match="`turn_scores` has 3 rows; TRL's batch has 2"):
        credax.trl.token_advantages("tcpo", torch.ones(2), MASK, num_generations=2,
                                    turn_scores=[[1.0]] * 3)
    with pytest.raises(TypeError, match="`turn_scores` row 1 is|`turn_scores` row 1 must be"):
        credax.trl.token_advantages("tcpo", torch.ones(2), MASK, num_generations=2,
                                    turn_scores=[[1.0], 1.0])
    with pytest.raises(ValueError, match=r"`turn_scores` row 1, turn 0 must be finite"):
        credax.trl.token_advantages("tcpo", torch.ones(2), MASK, num_generations=2,
                                    turn_scores=[[1.0], [float("nan")]])
    with pytest.raises(ValueError, match=r"token_turn has shape \(2, 3\); TRL's completions are "
                                         r"\(2, 4\)"):
        credax.trl.token_advantages("tcpo", torch.ones(2), MASK, num_generations=2,
                                    token_turn=torch.zeros(2, 3, dtype=torch.long),
                                    turn_scores=[[1.0], [1.0]])
    with pytest.raises(ValueError, match="reaches turn 1 in row 0, but `turn_scores` row 0 has 1"):
        credax.trl.token_advantages("tcpo", torch.ones(2), MASK, num_generations=2,
                                    token_turn=torch.tensor([[0, 1, -1, -1], [0, 0, 0, -1]]),
                                    turn_scores=[[1.0], [1.0]])
    with pytest.raises(ValueError, match="holds -2 at row 1, token 0"):
        credax.trl.token_advantages("grpo", torch.ones(2), MASK, num_generations=2,
                                    token_turn=torch.tensor([[0, 0, 0, 0], [-2, 0, 0, 0]]))
    with pytest.raises(ValueError, match="token_turn must be a \\[B, T\\] integer tensor"):
        credax.trl.token_advantages("grpo", torch.ones(2), MASK, num_generations=2,
                                    token_turn=[[0, 0, 0, 0], [0, 0]])  # ragged
    with pytest.raises(TypeError, match="token_turn must hold integers"):
        credax.trl.token_advantages("grpo", torch.ones(2), MASK, num_generations=2,
                                    token_turn=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="`num_generations` must be a positive int dividing"):
        credax.trl.token_advantages("grpo", torch.ones(2), MASK, num_generations=3)


def test_turn_map_tokens_off_the_completion_and_unscorable_rows_get_zero():
    # Hand-worked: GRPO (TRL preset) over rows 0, 1 of one prompt; row 2 unscorable (NaN) is
    # left out of prompt 1's statistics, so row 3 is a group of one: 0 (TRL gives it 0 too).
    # Rows 0, 1: rewards 2, 0 -> mean 1, unbiased std sqrt(2) -> ±1 / (sqrt(2) + 1e-4).
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]])
    token_turn = torch.tensor([[0, -1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]])  # row 1: a pad turn
    adv = credax.trl.token_advantages("grpo", torch.tensor([2.0, 0.0, float("nan"), 1.0]), mask,
                                      num_generations=2, token_turn=token_turn)
    a = 1 / (np.sqrt(2) + 1e-4)
    np.testing.assert_allclose(adv.numpy(), [[a, 0, a], [-a, -a, 0], [0, 0, 0], [0, 0, 0]],
                               rtol=1e-6)


def test_trainer_settings_it_cannot_honour_are_refused(tmp_path):
    with pytest.raises(ValueError, match="`multi_objective_aggregation` must be"):
        CreditGRPOTrainer(model=tiny_model(), reward_funcs=final_score,
                          args=config(tmp_path, multi_objective_aggregation="normalize_then_sum"),
                          train_dataset=PROMPTS, processing_class=tiny_tokenizer())
    trainer = CreditGRPOTrainer(model=tiny_model(), reward_funcs=final_score, args=config(tmp_path),
                                train_dataset=PROMPTS, processing_class=tiny_tokenizer(),
                                rollout_func=rollout_func, turn_map=lambda **kw: [[0.0]] * 4)
    with pytest.raises(TypeError, match="`turn_map` must return a credax.trl.TurnMap; got list"):
        trainer.train()


def test_credax_loss_equals_trls_loss_value_and_gradients(tmp_path):
    # One real step through credax's loss, then both losses on its captured batch, per loss type.
    trainer = CreditGRPOTrainer(model=tiny_model(), reward_funcs=final_score,
                                args=config(tmp_path, max_steps=1),
                                train_dataset=PROMPTS, processing_class=tiny_tokenizer(),
                                rollout_func=rollout_func, credit="tcpo", loss="credax")
    seen = capture(trainer)
    before = params(trainer.model)
    trainer.train()
    assert not torch.equal(before, params(trainer.model))
    inputs, model = seen[0], trainer.model
    model.train()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        logp = trainer._get_per_token_logps_and_entropies(model, ids, attention,
                                                          inputs["completion_ids"].size(1))[0]
    # Old and reference log-probs off the policy: ratios clip on both sides, and the KL term acts
    # (beta is set after construction: with beta > 0 TRL would load a reference model by name).
    trainer.beta = trainer.args.beta = 0.04
    # As inside an accumulation window of two micro-batches (TRL divides grpo/bnpo/dr_grpo by it
    # and rescales dapo's token count by it).
    trainer.current_gradient_accumulation_steps = 2
    gen = torch.Generator().manual_seed(0)
    inputs["old_per_token_logps"] = logp + 0.3 * torch.randn(logp.shape, generator=gen)
    inputs["ref_per_token_logps"] = logp + 0.3 * torch.randn(logp.shape, generator=gen)
    token_level = dict(inputs)
    # GSPO: at sequence level credax's token form equals TRL's sequence form when the advantage is
    # constant within a completion (credit="grpo"); here each row's first-token value.
    sequence_level = {**inputs, "advantages": inputs["advantages"][:, :1].expand_as(logp).clone()}
    for level, batch in (("token", token_level), ("sequence", sequence_level)):
        trainer.importance_sampling_level = trainer.args.importance_sampling_level = level
        for loss_type in credax.presets.TRL_LOSS_TYPES:
            trainer.loss_type = trainer.args.loss_type = loss_type
            results = {}
            for name, compute in (("trl", lambda b: GRPOTrainer._compute_loss(trainer, model, b)),
                                  ("credax", lambda b: trainer._compute_loss(model, b))):
                model.zero_grad()
                value = compute(batch)
                value.backward()
                results[name] = (float(value.detach()),
                                 torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
            (trl_value, trl_grad), (cx_value, cx_grad) = results["trl"], results["credax"]
            where = f"{loss_type}, {level} level"
            assert cx_value == pytest.approx(trl_value, rel=1e-5, abs=1e-7), where
            scale = float(trl_grad.abs().max())
            assert scale > 0
            torch.testing.assert_close(cx_grad, trl_grad, rtol=1e-4, atol=1e-6 * scale, msg=where)


def test_credax_loss_refuses_what_it_does_not_reproduce(tmp_path):
    with pytest.raises(ValueError, match="`loss` must be one of"):
        CreditGRPOTrainer(model="never-loaded", loss="liger")
    with pytest.raises(ValueError, match="does not reproduce TRL's `top_entropy_quantile`"):
        CreditGRPOTrainer(model=tiny_model(), reward_funcs=final_score,
                          args=config(tmp_path, top_entropy_quantile=0.5), train_dataset=PROMPTS,
                          processing_class=tiny_tokenizer(), loss="credax")
    args = config(tmp_path)
    args.loss_type = "ppo"
    with pytest.raises(ValueError, match="`loss_type`='ppo': credax computes TRL's"):
        credax.trl.trl_loss_options(args, num_rows=4)


def test_every_explained_method_runs_on_trls_batch():
    # The bridge reads its methods from credax's registry: each method credax.explain shows is
    # reachable, and gives finite per-token values that are exactly 0 off the turns.
    from credax import _registry
    from credax.explain import EXPLAINED

    explained = {short for short, call in EXPLAINED.items()
                 if call.name in _registry.ESTIMATORS}
    assert explained <= set(credax.trl.credit_methods())
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    tools = torch.tensor([[1, 0, 1, 0, 1], [1, 1, 1, 1, 1], [1, 1, 0, 1, 1], [1, 1, 1, 1, 1]])
    turns = {"turn_scores": [[0.2, 0.5, 1.0], [0.0], [0.5, 0.5], [1.0]],
             "turn_roles": [["D", "E", "N"], ["R"], ["E", "D"], ["N"]],
             "anchor_ids": [["s0", "s1", "s2"], ["s0"], ["s0", "s2"], ["s0"]]}
    for method in sorted(explained):
        adv = credax.trl.token_advantages(method, torch.tensor([1.0, 0.0, 0.5, 1.0]), mask,
                                          num_generations=2, tool_mask=tools, **turns)
        assert adv.shape == (4, 5) and adv.dtype == torch.float32, method
        assert torch.isfinite(adv).all(), method
        assert not adv[(mask * tools) == 0].any(), method

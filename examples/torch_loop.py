"""A plain torch training loop (TRL-style: sample a group per prompt, score, advantages, clipped
surrogate, optimizer step) whose per-turn credit comes from credax through ``credax.torch``.

The task: for each of 4 prompts, a hidden 3-step answer over 4 actions. A trajectory takes 3
turns; each turn writes one action token followed by one observation token (the environment's
reply, which gets no credit), and after every turn a verifier scores the answer so far in [0, 1]
(the fraction of the answer already right). The policy is a table of logits — a stand-in for the
language model; everything else is what a torch trainer does with one.

credax does the credit: ``tcpo_advantages`` turns the per-turn verifier scores into per-turn
advantages (retrospective + hindsight credit, z-scored per prompt and turn), and
``broadcast_to_tokens`` puts each turn's advantage on that turn's tokens. Tensors go in and come
back as torch tensors on their device; the loss, the gradient and the optimizer stay torch.

Run: python examples/torch_loop.py
"""

import torch

import credax.torch as ct

PROMPTS, TURNS, ACTIONS, GROUP = 4, 3, 4, 8
STEPS, LR, CLIP = 12, 0.5, 0.2


def rollout(policy: torch.Tensor, gen: torch.Generator, answer: torch.Tensor):
    """GROUP trajectories per prompt: tokens, their turn index, per-turn scores, old log-probs."""
    prompt = torch.arange(PROMPTS).repeat_interleave(GROUP)  # uid of each row
    batch = prompt.shape[0]
    with torch.no_grad():
        probs = torch.softmax(policy[prompt], dim=-1)  # [B, TURNS, ACTIONS]
        actions = torch.multinomial(probs.reshape(-1, ACTIONS), 1, generator=gen).reshape(batch, TURNS)
        right = actions == answer[prompt]
        scores = right.cumsum(dim=1).float() / TURNS  # verifier score after each turn
    turn_mask = torch.ones(batch, TURNS, dtype=torch.bool)
    # token layout per row: [action 0, obs, action 1, obs, action 2, obs]; obs tokens get turn -1
    token_turn = torch.full((batch, 2 * TURNS), -1, dtype=torch.int64)
    token_turn[:, 0::2] = torch.arange(TURNS)
    return prompt, actions, scores, turn_mask, token_turn, right.all(dim=1)


def token_logprobs(policy, prompt, actions):
    """log pi(action) on action tokens, 0 on observation tokens: [B, 2*TURNS]."""
    logp = torch.log_softmax(policy[prompt], dim=-1).gather(-1, actions[..., None])[..., 0]
    out = torch.zeros(prompt.shape[0], 2 * TURNS)
    out[:, 0::2] = logp
    return out


def main() -> None:
    gen = torch.Generator().manual_seed(0)
    answer = torch.randint(0, ACTIONS, (PROMPTS, TURNS), generator=gen)
    policy = torch.zeros(PROMPTS, TURNS, ACTIONS, requires_grad=True)
    opt = torch.optim.Adam([policy], lr=LR)
    for step in range(STEPS):
        prompt, actions, scores, turn_mask, token_turn, solved = rollout(policy, gen, answer)
        if step % 4 == 0 or step == STEPS - 1:
            print(f"step {step:3d}  success {solved.float().mean().item():.3f}")
        # credit in credax (JAX), tensors in and out
        turn_adv = ct.tcpo_advantages(scores, turn_mask, prompt, gamma=1.0).advantages  # [B, K]
        adv = ct.broadcast_to_tokens(turn_adv, token_turn)  # [B, T], 0 on observation tokens
        loss_mask = token_turn >= 0
        old = token_logprobs(policy, prompt, actions).detach()
        for _ in range(2):  # two clipped-surrogate epochs on the batch, as PPO/GRPO trainers do
            ratio = torch.exp(token_logprobs(policy, prompt, actions) - old)
            surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv)
            loss = -torch.where(loss_mask, surrogate, 0.0).sum() / loss_mask.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()

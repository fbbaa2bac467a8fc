"""The ablation ladder of TCPO's Table 3, rung by rung, on four hand-written refinement trajectories.

One prompt; after every turn a verifier scores the current answer in [0, 1] and the model refines:

    A: 0 → 0.5 → 1 → 1     steady progress, then holds the solution
    B: 0 → 0   → 1         a stall, repaired on the next turn
    C: 1 → 0.5 → 1         solved at once, breaks it, repairs it
    D: 0 → 0   → 0         never gets anywhere

Each rung turns the same scores into per-turn credit differently; the last block is the advantage
each turn trains on (credit z-scored against the same turn of the other trajectories of the
prompt, as TCPO does; rung 1 is GRPO's per-prompt z-score broadcast to every turn).

Run: python examples/tcpo_ladder.py
"""

import jax.numpy as jnp
import numpy as np

import credax

TRAJECTORIES = {"A": [0.0, 0.5, 1.0, 1.0], "B": [0.0, 0.0, 1.0], "C": [1.0, 0.5, 1.0],
                "D": [0.0, 0.0, 0.0]}
K = max(len(t) for t in TRAJECTORIES.values())
scores = np.zeros((len(TRAJECTORIES), K), np.float32)
turn_mask = np.zeros((len(TRAJECTORIES), K), bool)
for b, t in enumerate(TRAJECTORIES.values()):
    scores[b, : len(t)], turn_mask[b, : len(t)] = t, True
group_ids = jnp.zeros(len(TRAJECTORIES), jnp.int32)  # one prompt
g = credax.groups(group_ids)

# Rung 6 needs counterfactuals: M alternatives resampled at the same history of a few
# high-surprisal turns. Surprisal would come from credax.turn_surprisal(token_logprobs, ...);
# here it is written by hand, as are the verifier scores of the alternatives.
surprisal = np.array([[0.4, 0.9, 0.2, 0.1],
                      [0.5, 1.3, 0.3, 0.0],    # B's stall: the least expected turn
                      [0.2, 0.8, 0.6, 0.0],
                      [1.1, 0.7, 0.6, 0.0]], np.float32)
eligible = credax.hindsight_credit(scores, turn_mask, g).eligible  # stalls before success
selected = credax.select_top_surprisal(surprisal, eligible, budget=2)  # -> B1 and D0
alt_scores = np.zeros((len(TRAJECTORIES), K, 4), np.float32)
alt_mask = np.zeros((len(TRAJECTORIES), K, 4), bool)
alt_scores[1, 1], alt_mask[1, 1] = [0.0, 0.0, 0.5, 0.0], True  # B1's siblings: mean .125
alt_scores[3, 0], alt_mask[3, 0] = [1.0, 0.5, 0.0, 1.0], True  # D0's siblings: mean .625

final = scores[np.arange(len(TRAJECTORIES)), turn_mask.sum(1) - 1]  # the trajectory's last score
broadcast = lambda per_row: np.where(turn_mask, np.asarray(per_row)[:, None], 0.0)
z = lambda credit: credax.group_normalize(credit, g, turn_mask)       # per (prompt, turn)

raw = credax.raw_score_credit(scores, turn_mask)
delta = credax.adjacent_delta_credit(scores, turn_mask)
retro = credax.tcpo_advantages(scores, turn_mask, g, hindsight_weight=0.0)
hind = credax.tcpo_advantages(scores, turn_mask, g)
full = credax.tcpo_advantages(scores, turn_mask, g, alt_scores=alt_scores, alt_mask=alt_mask,
                              selected=selected)

rungs = {  # name: (credit, advantage)
    "1 trajectory reward": (broadcast(final), broadcast(credax.grpo_advantages(final, g))),
    "2 raw turn score": (raw, z(raw)),
    "3 adjacent delta": (delta, z(delta)),
    "4 retrospective": (retro.credit, retro.advantages),
    "5 + hindsight": (hind.credit, hind.advantages),
    "6 + counterfactual": (full.credit, full.advantages),
}


def cells(row, values):
    out = []
    for k in range(K):
        out.append(f"{float(values[row, k]):+6.2f}" if turn_mask[row, k] else "     ·")
    return " ".join(out)


print("counterfactual turns selected (top-2 surprisal among hindsight-eligible turns):",
      [f"{'ABCD'[b]}{k}" for b, k in zip(*np.nonzero(np.asarray(selected)), strict=True)])
header = f"{'':22s}{'credit per turn':^27s}   {'advantage per turn':^27s}".rstrip()
for b, (label, traj) in enumerate(TRAJECTORIES.items()):
    print()
    print(f"{label}: " + " → ".join(f"{s:g}" for s in traj))
    print(header)
    for name in rungs:
        credit, advantage = rungs[name]
        print(f"  {name:20s}{cells(b, credit)}   {cells(b, advantage)}")

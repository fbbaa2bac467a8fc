"""A readable tour of credax's outcome advantages and turn tools on a built-in batch.

Run with ``.venv/bin/python examples/foundation_tour.py``. The batch has four prompts with ragged
groups, a singleton and a constant group, so every degenerate case of SPEC §1 shows up.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import credax

# Eight trajectories, four prompts (ids are arbitrary integers, deliberately unsorted):
#   prompt 17: three rollouts, mixed outcomes      prompt -4: two rollouts, both 0.35 (constant)
#   prompt 9:  two rollouts                        prompt 2**20: one rollout (singleton)
GROUP_IDS = np.array([17, -4, 17, 9, 2**20, -4, 9, 17], dtype=np.int32)
SCORES = np.array(  # per-turn verifier scores, K = 4 turns, padded with NaN
    [
        [0.0, 0.5, 1.0, 1.0],
        [0.35, 0.35, np.nan, np.nan],
        [0.0, 0.0, 1.0, np.nan],
        [1.0, 0.5, 1.0, np.nan],
        [0.2, 0.6, np.nan, np.nan],
        [0.0, 0.35, np.nan, np.nan],
        [0.0, 0.0, 0.0, 0.0],
        [0.5, 0.0, np.nan, np.nan],
    ],
    dtype=np.float32,
)
TURN_MASK = ~np.isnan(SCORES)


def _row(cells, width=9):
    return "".join(f"{c:>{width}}" if isinstance(c, str) else f"{c:>{width}.3f}" for c in cells)


def _turn_cells(values, mask):
    return " ".join(f"{v:5.2f}" if m else "    ." for v, m in zip(values, mask, strict=True))


def main() -> None:
    credax.validate_turns(SCORES, TURN_MASK, GROUP_IDS)
    last = TURN_MASK.sum(axis=1) - 1
    outcome = SCORES[np.arange(len(SCORES)), last]  # final score of each trajectory

    g = credax.groups(GROUP_IDS)  # densify once, reuse everywhere below
    columns = {
        "GRPO": credax.grpo_advantages(outcome, g),
        "verl": credax.grpo_advantages(outcome, g, normalization=credax.presets.VERL),
        "TRL": credax.grpo_advantages(outcome, g, normalization=credax.presets.TRL),
        "Dr.GRPO": credax.grpo_advantages(outcome, g, normalization=credax.Normalization(scale="none")),
        "RLOO": credax.rloo_advantages(outcome, g),
        "degen.": credax.degenerate_groups(outcome, g),
    }
    print("Outcome advantages (one reward per trajectory = its final score)\n")
    print(_row(["row", "prompt", "reward", *columns]))
    for i in range(len(outcome)):
        cells = [str(i), str(GROUP_IDS[i]), float(outcome[i])]
        for name, col in columns.items():
            cells.append(str(bool(col[i])) if name == "degen." else float(col[i]))
        print(_row(cells))
    print(
        "\n  prompt -4 is constant (0.35, 0.35): exactly 0 whatever eps; prompt 2**20 is a"
        "\n  singleton: 0 by default, its raw score under verl's convention.\n"
    )

    scores = jnp.asarray(SCORES)
    mask = jnp.asarray(TURN_MASK)
    tools = {
        "score": scores,
        "best prior m_k": credax.best_prior(scores, mask),
        "future best u_k": credax.future_best(scores, mask),
        "return γ=0.9": credax.discounted_returns(scores, mask, gamma=0.9),
        "z per (prompt,turn)": credax.group_normalize(scores, g, mask),
    }
    print("Turn tools on the padded [B, K] batch ('.' = padded turn; NaN there never leaks)\n")
    for name, values in tools.items():
        print(f"{name}")
        for i in range(len(SCORES)):
            print(f"  row {i} (prompt {GROUP_IDS[i]:>8}): {_turn_cells(np.asarray(values[i]), TURN_MASK[i])}")
    print(f"\ndiscount weights γ^k, γ=0.9: {np.round(np.asarray(credax.discount_weights(4, 0.9)), 3)}")

    token_turn = jnp.array([[-1, -1, 0, 0, -1, 1, 1, -1, 2, 3]])
    adv = credax.broadcast_to_tokens(tools["z per (prompt,turn)"][:1], token_turn)
    print("token broadcast of row 0 (-1 = prompt/observation token, gets 0):")
    print("  token_turn:", np.asarray(token_turn[0]).tolist())
    print("  advantage :", [round(float(a), 3) for a in adv[0]])


if __name__ == "__main__":
    main()

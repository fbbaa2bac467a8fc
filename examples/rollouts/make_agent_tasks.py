"""Writes agent_tasks.jsonl: a small, deterministic rollouts file in credax's JSONL schema
(docs/guides/rollouts.md). The package ships it (src/credax/data/agent_tasks.jsonl, the path in
`credax.explain.EXAMPLE`, what `python -m credax.explain --example` reads); the guide and the tests
use it.

Four tasks of a toy tool-using agent, four rollouts each, 1-6 turns. Every turn has action
tokens, most have tool-output tokens (observations), a verifier score of the state after the
turn (0 = nothing solved, 1 = solved), a judge label, an environment reward, and an anchor (the
name of the state the turn acted in). Prompt ids mix strings and a 64-bit integer.
Run: python examples/rollouts/make_agent_tasks.py [OUT]   (default: the clone's shipped copy)
"""

import os
import sys

import numpy as np

import credax

TASKS = ["fix-the-failing-test", "find-the-config-key", 2**40 + 7, "sum-the-csv-column"]


def rollouts(seed: int = 0) -> list[credax.Rollout]:
    rng = np.random.default_rng(seed)
    out = []
    for task in TASKS:
        prompt = rng.integers(1, 1000, 12).tolist()
        for _ in range(4):
            score, turns, state = 0.0, [], "start"
            for k in range(int(rng.integers(1, 7))):
                step = float(rng.choice([0.0, 0.0, 0.25, 0.5, -0.25]))
                new = float(min(1.0, max(0.0, score + step)))
                role = "D" if new > score else "R" if new < score else ("E" if rng.random() < 0.5
                                                                         else "N")
                turns.append(credax.Turn(
                    action=rng.integers(1, 1000, int(rng.integers(3, 9))).tolist(),
                    score=new,
                    observation=rng.integers(1, 1000, int(rng.integers(0, 6))).tolist(),
                    role=role,
                    reward=1.0 if new >= 1.0 else 0.0,
                    anchor=f"{state}@{k}",
                ))
                state = f"s{int(new * 4)}"
                score = new
                if new >= 1.0:
                    break
            out.append(credax.Rollout(task, turns, prompt=prompt))
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "src", "credax", "data", "agent_tasks.jsonl")
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(default)
    credax.write_rollouts(path, rollouts())
    print("wrote", path)

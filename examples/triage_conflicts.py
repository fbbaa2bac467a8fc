"""GRPO vs TRIAGE on the four conflict cells, on one small batch.

GRPO gives every turn of a rollout its outcome advantage A_i. TRIAGE adds λ·c[role] per turn, so
the four cells where a turn's role and its rollout's outcome meet get different credit:

* exploration in failure    — useful, yet GRPO punishes it fully: TRIAGE punishes it less;
* regression in success     — harmful, yet GRPO rewards it fully: TRIAGE rewards it less;
* decisive in success       — the cause of success: TRIAGE rewards it more;
* no-progress / regression in failure — TRIAGE punishes them a little / more.

Run: python examples/triage_conflicts.py
"""

import jax.numpy as jnp
import numpy as np

import credax

# One prompt, four rollouts: two succeed (reward 1), two fail (reward 0). The judge's labels per
# turn, as it emitted them (None: it gave no answer for that turn).
REWARDS = [1.0, 1.0, 0.0, 0.0]
JUDGE = [
    ["exploration", "Decisive progress", "regression", "decisive"],  # success with a detour
    ["D", "no-progress infrastructure"],  # clean success
    ["useful exploration", "no_progress", "R"],  # failure that learned something
    ["E", None, "Regression"],  # failure, one turn unlabeled
]
LAM = 0.2

CELLS = {
    (True, credax.Role.DECISIVE): "decisive in success",
    (True, credax.Role.REGRESSION): "regression in success",
    (False, credax.Role.EXPLORATION): "exploration in failure",
    (False, credax.Role.NO_PROGRESS): "no-progress in failure",
    (False, credax.Role.REGRESSION): "regression in failure",
}


def conflict_table():
    """Rows (rollout, outcome, turn, role name, GRPO credit, TRIAGE credit, cell)."""
    roles = credax.parse_roles(JUDGE)  # int32[4, 4], -1 = unlabeled or padding
    turn_mask = np.array([[k < len(row) for k in range(roles.shape[1])] for row in JUDGE])
    credax.validate_roles(roles, turn_mask)
    rewards = jnp.array(REWARDS)
    group_ids = jnp.zeros(len(REWARDS), jnp.int32)
    grpo = credax.grpo_advantages(rewards, group_ids)  # one A_i per rollout
    triage = credax.triage_advantages(grpo, roles, turn_mask, lam=LAM)
    rows = []
    for b, k in zip(*np.nonzero(turn_mask), strict=True):
        code = int(roles[b, k])
        name = credax.Role(code).name.lower() if code >= 0 else "unlabeled"
        cell = CELLS.get((REWARDS[b] > 0, code), "")
        rows.append((int(b), REWARDS[b], int(k), name, float(grpo[b]), float(triage[b, k]), cell))
    return rows


def main():
    print(f"λ = {LAM}, constants (D, E, N, R) = {credax.TRIAGE_ROLE_CONSTANTS}")
    print(f"{'rollout':>7} {'outcome':>7} {'turn':>4}  {'role':<12} {'GRPO':>7} {'TRIAGE':>7}  cell")
    for b, r, k, name, g, t, cell in conflict_table():
        print(f"{b:>7} {r:>7.0f} {k:>4}  {name:<12} {g:>+7.3f} {t:>+7.3f}  {cell}".rstrip())


if __name__ == "__main__":
    main()

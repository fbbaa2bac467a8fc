"""NumPy float64 loop reference for ``credax.vetta_advantages``.

Written from its docstring's formulas, row by row over explicit token lists; values off the
action tokens are never read. Nothing here imports credax or JAX.
"""

from __future__ import annotations

import numpy as np


def _gae_list(rewards, values, gamma, lam, bootstrap=0.0):
    """GAE over one list of steps: δ_j = r_j + γ V_{j+1} - V_j, A_j = δ_j + γλ A_{j+1}."""
    adv, nxt_v, nxt_a = [0.0] * len(rewards), bootstrap, 0.0
    for j in reversed(range(len(rewards))):
        nxt_a = rewards[j] + gamma * nxt_v - values[j] + gamma * lam * nxt_a
        adv[j], nxt_v = nxt_a, values[j]
    return adv


def vetta(turn_rewards, turn_values, token_rewards, token_values, token_turn, turn_mask, *,
          gamma=1.0, lam=1.0, token_gamma=1.0, token_lam=1.0, token_mask=None):
    rk, vt = np.asarray(turn_rewards, np.float64), np.asarray(turn_values, np.float64)
    rt, vk = np.asarray(token_rewards, np.float64), np.asarray(token_values, np.float64)
    tt, km = np.asarray(token_turn), np.asarray(turn_mask, bool)
    tm = np.ones(tt.shape, bool) if token_mask is None else np.asarray(token_mask, bool)
    batch, num_turns = km.shape
    adv, turn_adv, resid = np.zeros(tt.shape), np.zeros(km.shape), np.zeros(tt.shape)
    for b in range(batch):
        tokens = {k: [j for j in range(tt.shape[1]) if tm[b, j] and tt[b, j] == k]
                  for k in range(num_turns) if km[b, k]}
        steps = [k for k in sorted(tokens) if tokens[k]]  # valid turns with an action token
        a = _gae_list([rk[b, k] for k in steps], [vt[b, tokens[k][0]] for k in steps], gamma, lam)
        for k, value in zip(steps, a, strict=True):
            turn_adv[b, k] = value
        for k in steps:
            js = tokens[k]
            a_tok = _gae_list([rt[b, j] for j in js], [vk[b, j] for j in js], token_gamma,
                              token_lam)
            mean = sum(a_tok) / len(a_tok)
            for j, value in zip(js, a_tok, strict=True):
                resid[b, j] = value - mean
                adv[b, j] = turn_adv[b, k] + value - mean
    return adv, turn_adv, resid

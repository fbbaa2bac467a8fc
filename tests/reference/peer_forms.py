"""Peers' estimators re-stated in NumPy from their public source, for side-by-side parity tests.

None of these peers installs here without torch and a GPU stack, so each function below re-states
the peer's computation in NumPy, following its loop structure and masking conventions step by
step (written from reading the source, not pasted). Each names the file and function it re-states.
Nothing here imports credax or JAX.
"""

from __future__ import annotations

import numpy as np


def verl_gae(token_level_rewards, values, response_mask, gamma, lam):
    """verl ``trainer/ppo/core_algos.py::compute_gae_advantage_return`` before ``masked_whiten``.

    A reverse loop over every position: the TD error is formed everywhere, but the running value
    and running advantage are only updated where ``response_mask`` is 1 (observation tokens are
    skipped). Returns ``(advantages, returns)`` with verl's values at *every* position.
    """
    r, v, m = (np.asarray(x, np.float64) for x in (token_level_rewards, values, response_mask))
    nextvalues = np.zeros(r.shape[0])
    lastgaelam = np.zeros(r.shape[0])
    out = []
    for t in reversed(range(r.shape[1])):
        delta = r[:, t] + gamma * nextvalues - v[:, t]
        new = delta + gamma * lam * lastgaelam
        nextvalues = v[:, t] * m[:, t] + (1 - m[:, t]) * nextvalues
        lastgaelam = new * m[:, t] + (1 - m[:, t]) * lastgaelam
        out.append(lastgaelam)
    adv = np.stack(out[::-1], axis=1)
    return adv, adv + v


def areal_token_gae(rewards, values, loss_mask, seq_no_eos_mask, bootstrap_values, discount, lam):
    """AReaL ``areal/trainer/ppo/gae.py::_compute_token_level_gae``.

    Its loop runs over ``range(T - 1)`` in reverse (the last position of a next-token loss mask is
    never a step) and starts from ``bootstrap_values × seq_no_eos_mask``; ``lam`` is per row.
    """
    r, v, m = (np.asarray(x, np.float64) for x in (rewards, values, loss_mask))
    bs, length = r.shape
    lam = np.broadcast_to(np.asarray(lam, np.float64), (bs,))
    out = [np.zeros(bs)]
    last = np.zeros(bs)
    nextvalues = np.asarray(bootstrap_values, np.float64) * np.asarray(seq_no_eos_mask, np.float64)
    for t in reversed(range(length - 1)):
        delta = r[:, t] + discount * nextvalues - v[:, t]
        new = delta + discount * lam * last
        nextvalues = nextvalues * (1 - m[:, t]) + v[:, t] * m[:, t]
        last = last * (1 - m[:, t]) + new * m[:, t]
        out.append(last)
    adv = np.stack(out[::-1], axis=1)
    return adv, adv + v


def areal_turn_gae(rewards, values, loss_mask, turn_ids, seq_no_eos_mask, bootstrap_values,
                   discount, lam):
    """AReaL ``areal/trainer/ppo/gae.py::_compute_turn_level_gae``.

    Token rewards are summed per turn id; a turn's value is the value at its first valid token;
    the recursion runs over turn slots in reverse, skipping slots without a valid token; the turn
    advantage and return are gathered back to tokens (advantages × loss_mask; returns are the
    token values off the mask).
    """
    r, v, m = (np.asarray(x, np.float64) for x in (rewards, values, loss_mask))
    tid = np.asarray(turn_ids)
    bs, length = r.shape
    lam = np.broadcast_to(np.asarray(lam, np.float64), (bs,))
    valid = m.astype(bool)
    safe = np.clip(tid, 0, length - 1)
    turn_rewards = np.zeros((bs, length))
    first = np.full((bs, length), length)
    for b in range(bs):
        for t in range(length):
            turn_rewards[b, safe[b, t]] += r[b, t] * valid[b, t]
            if valid[b, t]:
                first[b, safe[b, t]] = min(first[b, safe[b, t]], t)
    valid_turn = first < length
    tv = np.take_along_axis(v, np.minimum(first, length - 1), axis=1) * valid_turn
    turn_adv = np.zeros((bs, length))
    last = np.zeros(bs)
    nextvalues = np.asarray(bootstrap_values, np.float64) * np.asarray(seq_no_eos_mask, np.float64)
    active = np.where(valid, safe, -1)
    num_slots = int(active.max()) + 1
    for k in reversed(range(num_slots)):
        delta = turn_rewards[:, k] + discount * nextvalues - tv[:, k]
        new = delta + discount * lam * last
        mk = valid_turn[:, k]
        turn_adv[:, k] = np.where(mk, new, 0.0)
        nextvalues = np.where(mk, tv[:, k], nextvalues)
        last = np.where(mk, new, last)
    turn_ret = turn_adv + tv
    adv = np.take_along_axis(turn_adv, safe, axis=1) * m
    ret = np.take_along_axis(turn_ret, safe, axis=1)
    ret = ret * m + v * (1 - m)
    return adv, ret


def areal_vapo_lambda(timestep_lengths, alpha):
    """AReaL ``areal/trainer/ppo/lambda_fn.py::vapo_length_adaptive_gae``."""
    lengths = np.asarray(timestep_lengths)
    lam = np.maximum(1.0 - 1.0 / (alpha * np.maximum(lengths.astype(np.float64), 1.0)), 0.0)
    return np.where(lengths > 0, lam, 0.0)


def verl_value_loss(vpreds, returns, values, response_mask, cliprange_value):
    """verl ``core_algos.py::compute_value_loss`` with ``loss_agg_mode="token-mean"``."""
    vp, ret, v, m = (np.asarray(x, np.float64) for x in (vpreds, returns, values, response_mask))
    clipped = np.clip(vp, v - cliprange_value, v + cliprange_value)
    l1, l2 = (vp - ret) ** 2, (clipped - ret) ** 2
    loss = 0.5 * (np.maximum(l1, l2) * m).sum() / m.sum()
    clipfrac = ((l2 > l1) * m).sum() / m.sum()
    return loss, clipfrac


def verl_agent_hgpo(token_scores, step_returns, anchor_obs, index, traj_index, history_length,
                    epsilon=1e-6, mode="mean_std_norm", length_weight_alpha=1.0, base_group=False):
    """verl-agent ``recipe/hgpo/core_hgpo.py::hgpo_advantage_estimate`` on flat step rows.

    Inputs are one entry per step row (in trajectory order): ``token_scores`` the summed token
    reward of the row (the episode score, for the base group), ``step_returns`` the discounted
    step return, ``anchor_obs`` the observation, ``index`` the prompt uid, ``traj_index`` the
    trajectory uid. Clusters are keyed by ``(k, last k observations)`` inside each prompt uid;
    clusters of one member are skipped; population std; items with advantage exactly 0 are dropped;
    weights ``(k + 1)^α / (Σ + ε)``; the base group is item ``k = 0`` computed with
    ``trajectory_advantages(compute_mean_std_cross_steps=True)`` (one copy per step row, unbiased
    std, a singleton prompt gets mean 0 and std 1).
    """
    scores = np.asarray(token_scores, np.float64)
    rewards = np.asarray(step_returns, np.float64)
    index, traj_index = list(index), list(traj_index)
    n = len(index)
    out = np.zeros(n)
    base = None
    if base_group:
        by_id: dict = {}
        for i in range(n):
            by_id.setdefault(index[i], []).append(scores[i])
        base = np.zeros(n)
        for i in range(n):
            vals = np.array(by_id[index[i]])
            mean, std = (0.0, 1.0) if len(vals) == 1 else (vals.mean(), vals.std(ddof=1))
            base[i] = scores[i] - mean if mode == "mean_norm" else (scores[i] - mean) / (std + epsilon)

    def aggregate(items):
        items = [(k, a) for k, a in items if a != 0]
        if not items:
            return 0.0
        w = np.array([(k + 1.0) ** length_weight_alpha for k, _ in items])
        w = w / (w.sum() + epsilon)
        return float((w * np.array([a for _, a in items])).sum())

    for gid in dict.fromkeys(index):
        rows = [i for i in range(n) if index[i] == gid]
        trajs = list(dict.fromkeys(traj_index[i] for i in rows))
        positions = [[i for i in rows if traj_index[i] == tr] for tr in trajs]
        clusters: dict = {}
        for ti, pos in enumerate(positions):
            obs = [anchor_obs[i] for i in pos]
            for si in range(len(pos)):
                for k in range(1, min(history_length + 1, si + 1) + 1):
                    clusters.setdefault((k, tuple(obs[si - k + 1: si + 1])), []).append((ti, si))
        items: dict = {}
        for (k, _), members in clusters.items():
            if len(members) <= 1:
                continue
            r = np.array([rewards[positions[ti][si]] for ti, si in members])
            a = (r - r.mean()) / (r.std() + epsilon) if mode == "mean_std_norm" else r - r.mean()
            for j, member in enumerate(members):
                items.setdefault(member, []).append((k, a[j]))
        for ti, pos in enumerate(positions):
            for si, row in enumerate(pos):
                its = items.get((ti, si), [])
                if base is not None:
                    its = [(0, base[row])] + its
                out[row] = aggregate(its)
    return out


def verl_rollout_is_weights(log_ratio, response_mask, rollout_is, threshold):
    """verl ``trainer/ppo/rollout_corr_helper.py::compute_rollout_correction_weights`` (no batch
    normalisation) and the token-level metrics of ``compute_is_metrics``.

    ``log_ratio = old_log_prob - rollout_log_prob``. Token: ``exp(clamp(log_ratio, ±20))``;
    sequence: ``exp(clamp(Σ_t masked log_ratio, ±20))`` broadcast; times the mask; metrics on the
    untruncated weights (token level: fraction above ``threshold`` / below ``1/threshold``); then
    truncated at ``threshold``; mean of the truncated weights over valid tokens. Sequence-level
    fractions as ``compute_is_metrics`` counts them: the unclamped row log-ratio sums against
    ``log threshold``, averaged over every row (empty rows included).
    """
    lr, m = np.asarray(log_ratio, np.float64), np.asarray(response_mask, np.float64)
    if rollout_is == "token":
        w = np.exp(np.clip(lr, -20, 20))
    else:
        w = np.broadcast_to(np.exp(np.clip((lr * m).sum(-1, keepdims=True), -20, 20)), lr.shape)
    w = w * m
    if rollout_is == "token":
        metrics = {"frac_high": ((w > threshold) * m).sum() / m.sum(),
                   "frac_low": ((w < 1 / threshold) * m).sum() / m.sum()}
    else:  # compute_is_metrics: the unclamped row sums, a plain mean over every row
        sums = (np.where(m > 0, lr, 0.0)).sum(-1)
        metrics = {"frac_high": np.mean(sums > np.log(threshold)),
                   "frac_low": np.mean(sums < np.log(1 / threshold))}
    w = np.minimum(w, threshold)
    metrics["mean"] = (w * m).sum() / m.sum()
    return w, metrics


def verl_vanilla_pg_losses(log_prob, old_log_prob, advantages, clip_low, clip_high):
    """verl ``core_algos.py::compute_policy_loss_vanilla`` per-token losses (no dual clip)."""
    ratio = np.exp(np.clip(np.asarray(log_prob) - np.asarray(old_log_prob), -20, 20))
    adv = np.asarray(advantages, np.float64)
    return np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - clip_low, 1 + clip_high))


def verl_entropy_from_logits(logits):
    """verl ``utils/torch_functional.py::entropy_from_logits``: logsumexp − Σ softmax · logits."""
    z = np.asarray(logits, np.float64)
    top = z.max(-1, keepdims=True)
    lse = (top + np.log(np.exp(z - top).sum(-1, keepdims=True)))[..., 0]
    p = np.exp(z - lse[..., None])
    return lse - (p * z).sum(-1)


def verl_policy_loss(logp, old, adv, mask, ref, *, kl_coef, gspo=False, clip=0.2, clip_c=3.0):
    """verl ``compute_policy_loss_vanilla`` (token) or ``compute_policy_loss_gspo`` surrogate,
    ``agg_loss`` token-mean / seq-mean-token-mean, ``kl_penalty`` k3 KL loss (core_algos.py)."""
    a = np.broadcast_to(adv[:, None], logp.shape)
    m = mask.astype(np.float64)
    if gspo:
        n = np.maximum(m.sum(-1), 1)
        seq = (((logp - old) * m).sum(-1) / n)[:, None]
        log_r = np.minimum(seq + 0 * logp, 10.0)  # value of sg(s) + logp - sg(logp)
    else:
        log_r = np.clip(logp - old, -20, 20)
    r = np.exp(log_r)
    l1, l2 = -a * r, -a * np.clip(r, 1 - clip, 1 + clip)
    c1 = np.maximum(l1, l2)
    loss_tok = c1 if gspo else np.where(a < 0, np.minimum(-a * clip_c, c1), c1)
    kl = np.clip(ref - logp, -20, 20)
    kld = np.clip(np.exp(kl) - kl - 1, -10, 10)

    def agg(v):
        if gspo:  # seq-mean-token-mean over non-empty rows
            rows = m.sum(-1)
            per = (v * m).sum(-1) / (rows + 1e-8)
            return per[rows > 0].sum() / (rows > 0).sum()
        return (v * m).sum() / m.sum()

    return agg(loss_tok) + kl_coef * agg(kld)


def verl_gspo_grad(logp, old, adv, mask, *, clip=0.2):
    """GSPO's gradient is that of the GSPO-token form (sg on the sequence ratio), which finite
    differences of the value cannot see: d/dlogp_t = -A·s_b (unclipped) / (n_b · S)."""
    m = mask.astype(np.float64)
    n = m.sum(-1)
    seq = ((logp - old) * m).sum(-1) / np.maximum(n, 1)
    s = np.exp(np.minimum(seq, 10.0))
    a = adv
    l1, l2 = -a * s, -a * np.clip(s, 1 - clip, 1 + clip)
    unclipped = l1 >= l2
    rows = (n > 0).sum()
    per_token = np.where(unclipped, -a * s, 0.0)[:, None] / np.maximum(n, 1)[:, None] / rows
    return per_token * m


def trl_policy_loss(logp, old, adv, mask, ref, *, loss_type, beta, bias_kl=True, eps=0.2,
                    max_len=None, level="token", delta=None):
    """TRL 1.16 ``_compute_loss`` (``use_bias_correction_kl`` defaults to True there);
    ``max_len``: ``max_completion_length`` of ``dr_grpo`` (default: ``logp``'s length)."""
    a = adv[:, None]
    m = mask.astype(np.float64)
    log_ratio = logp - old
    if level == "sequence":
        log_ratio = ((log_ratio * m).sum(-1) / np.maximum(m.sum(-1), 1.0))[:, None]
    coef_1 = np.exp(log_ratio)
    coef_2 = np.clip(coef_1, 1 - eps, 1 + eps)
    capped = coef_1 if delta is None else np.minimum(coef_1, delta)  # TRL: torch.clamp(max=delta)
    ptl = -np.minimum(capped * a, coef_2 * a)
    kl = np.exp(ref - logp) - (ref - logp) - 1
    if bias_kl:
        kl = kl * coef_1
    ptl = ptl + beta * kl
    if loss_type == "grpo":
        return ((ptl * m).sum(-1) / np.maximum(m.sum(-1), 1.0)).mean()
    if loss_type == "bnpo":
        return (ptl * m).sum() / max(m.sum(), 1.0)
    if loss_type == "dr_grpo":
        return (ptl * m).sum() / (ptl.shape[0] * (ptl.shape[1] if max_len is None else max_len))
    return (ptl * m).sum() / max(m.sum(), 1.0)  # dapo, one process, num_items = local tokens

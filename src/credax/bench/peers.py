"""The implementations credax is timed against, and the float64 references every case is checked on.

The peers are written here in the style of the public implementations people run today (no code is
copied from them); each docstring names the convention it follows:

===============================  ==================================================================
peer                             style of
===============================  ==================================================================
``torch_grpo_loop``              verl's default GRPO estimator: a per-sample Python loop that files
                                 0-d score tensors into a dict keyed by uid, then mean/std per uid
``torch_grpo_vectorized``        verl's ``grpo_vectorized``: ``torch.unique(return_inverse=True)``
                                 and ``index_add_`` sums, centred two-pass variance
``torch_grpo_reshape``           TRL's ``GRPOTrainer``: ``view(-1, G)`` over contiguous, equal-sized
                                 groups (input must be pre-sorted), ``repeat_interleave`` back
``numpy_grpo``                   plain NumPy: ``np.unique`` + ``np.bincount``
``torch_tcpo_loop``              the public TCPO reimplementations: ``cummax`` for best prior and
                                 future best, then a Python loop over turn indices with
                                 ``scatter_add_`` per turn for the hindsight baseline and the
                                 per-(prompt, turn) z-score
``torch_tcpo_reshape``           the same fully vectorised over TRL's layout: ``view(-1, G, K)``
                                 over contiguous, equal-sized groups (input pre-sorted), each
                                 per-(prompt, turn) statistic a reduction over the ``G`` axis
``torch_triage_gather``          role credit by table lookup, ``torch.gather`` to tokens
``numpy_triage_take``            the same with ``np.take_along_axis``
``copy_floor``                   not a peer but the floor: ``src.copy()`` of a float32 ``[B, T]``
                                 array reads and writes as many bytes as a token broadcast must
``torch_lm_head_chunked``        Liger-Kernel's chunked PPO/GRPO loss (``fused_linear_ppo``): an
                                 ``autograd.Function`` whose forward walks chunks of tokens and, per
                                 chunk, computes the logits, log-softmax, the clipped surrogate and
                                 ``autograd.grad`` of it, accumulating the unembedding gradient in
                                 place; its backward only scales the stored gradients
===============================  ==================================================================

torch is optional (the ``bench`` extra, ``torch==2.13.0``): without it ``HAVE_TORCH`` is false and the
torch peers are skipped by the caller. torch is imported lazily (:func:`load_torch`), so importing
this module costs nothing until a run asks for the peers. Every peer takes its inputs in its native
form (torch tensors, uid strings for the verl loop, int64 index tensors for ``torch.gather``),
prepared outside the timed region.

The ``reference_*`` functions are slow, obviously correct float64 loops (no credax, no torch): every
implementation, credax included, must agree with them before it is timed.
"""

from __future__ import annotations

import collections
import math

import numpy as np

torch = None
HAVE_TORCH = False
TORCH_IMPORT_ERROR = "not attempted"


def load_torch():
    """Import torch once (a peer, not a dependency); ``None`` when it is not installed."""
    global torch, HAVE_TORCH, TORCH_IMPORT_ERROR
    if torch is None and TORCH_IMPORT_ERROR == "not attempted":
        try:
            import torch as _torch
        except Exception as exc:  # pragma: no cover - depends on the environment
            TORCH_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"
        else:
            torch, HAVE_TORCH, TORCH_IMPORT_ERROR = _torch, True, ""
    return torch


# ------------------------------------------------------------------------------------------------
# float64 references (slow loops, no vectorisation tricks)
# ------------------------------------------------------------------------------------------------


def reference_grpo(rewards, ids, *, eps: float = 1e-6) -> np.ndarray:
    """``(r - mean) / (std_unbiased + eps)`` per id; a singleton keeps its raw score (verl); a
    group whose rewards are all equal gets exactly 0."""
    rewards = np.asarray(rewards, dtype=np.float64)
    members = collections.defaultdict(list)
    for row, gid in enumerate(np.asarray(ids).tolist()):
        members[gid].append(row)
    out = np.zeros_like(rewards)
    for rows in members.values():
        vals = rewards[rows]
        if len(rows) == 1:
            out[rows] = vals
            continue
        if np.all(vals == vals[0]):  # zero spread: exactly 0, whatever eps
            out[rows] = 0.0
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        out[rows] = (vals - mean) / (std + eps)
    return out


def reference_tcpo(
    scores,
    turn_mask,
    ids,
    *,
    success_threshold: float = 1.0,
    progress_weight: float = 1.0,
    preservation_weight: float = 0.1,
    regression_weight: float = 1.0,
    hindsight_weight: float = 1.0,
    initial: float = 0.0,
    gamma: float = 1.0,
    eps: float = 1e-6,
) -> np.ndarray:
    """TCPO retrospective + hindsight credit, z-scored per (prompt, turn), times ``γ^k``.

    The z-score follows the public reimplementation: population variance, ``eps`` inside the
    square root, sets of fewer than two valid entries keep their raw credit.
    """
    s = np.asarray(scores, dtype=np.float64)
    valid = np.asarray(turn_mask, dtype=bool)
    batch, num_turns = s.shape
    m = np.zeros((batch, num_turns))
    u = np.zeros((batch, num_turns))
    for i in range(batch):
        best = initial
        for k in range(num_turns):
            if valid[i, k]:
                m[i, k] = best
                best = max(best, s[i, k])
        future = -math.inf
        for k in reversed(range(num_turns)):
            if valid[i, k]:
                future = max(future, s[i, k])
                u[i, k] = future
    credit = np.zeros((batch, num_turns))
    eligible = np.zeros((batch, num_turns), dtype=bool)
    for i in range(batch):
        for k in range(num_turns):
            if not valid[i, k]:
                continue
            delta = max(s[i, k] - m[i, k], 0.0)
            success = m[i, k] >= success_threshold
            preserved = success and delta == 0.0 and s[i, k] >= m[i, k]
            regression = max(m[i, k] - s[i, k], 0.0) if success else 0.0
            credit[i, k] = (
                progress_weight * delta
                + preservation_weight * float(preserved)
                - regression_weight * regression
            )
            eligible[i, k] = (not success) and delta == 0.0
    members = collections.defaultdict(list)
    for row, gid in enumerate(np.asarray(ids).tolist()):
        members[gid].append(row)
    out = np.zeros((batch, num_turns))
    for rows in members.values():
        for k in range(num_turns):
            elig = [i for i in rows if eligible[i, k]]
            for i in elig:
                peers = [j for j in elig if j != i]
                if peers:
                    credit[i, k] += hindsight_weight * (u[i, k] - sum(u[j, k] for j in peers) / len(peers))
            live = [i for i in rows if valid[i, k]]
            if not live:
                continue
            vals = np.array([credit[i, k] for i in live])
            if len(live) < 2:
                z = vals
            else:
                mean = vals.sum() / len(vals)
                var = ((vals - mean) ** 2).sum() / len(vals)
                z = (vals - mean) / math.sqrt(var + eps)
            out[live, k] = z * gamma**k
    return out


def reference_triage(outcome_advantages, roles, turn_mask, *, lam: float, constants) -> np.ndarray:
    """``A_i + λ c[role]`` on valid turns, ``A_i`` where unlabeled (role ``-1``), ``0`` on padding."""
    a = np.asarray(outcome_advantages, dtype=np.float64)
    roles = np.asarray(roles)
    valid = np.asarray(turn_mask, dtype=bool)
    out = np.zeros(roles.shape)
    for i in range(roles.shape[0]):
        for k in range(roles.shape[1]):
            if valid[i, k]:
                bonus = constants[roles[i, k]] if roles[i, k] >= 0 else 0.0
                out[i, k] = a[i] + lam * bonus
    return out


def reference_broadcast(turn_values, token_turn) -> np.ndarray:
    """``out[b, t] = turn_values[b, token_turn[b, t]]``, ``0`` where ``token_turn == -1``."""
    turn_values = np.asarray(turn_values, dtype=np.float64)
    token_turn = np.asarray(token_turn)
    out = np.zeros(token_turn.shape)
    for b in range(token_turn.shape[0]):  # a loop over rows; per row, plain fancy indexing
        row = token_turn[b]
        inside = row >= 0
        out[b, inside] = turn_values[b, row[inside]]
    return out


def reference_policy_loss(logp, old_logp, token_advantages, mask, *, clip_low=0.2, clip_high=0.2):
    """PPO/GRPO clipped surrogate, token-mean over valid tokens, log-ratio clamped to ±20."""
    logp = np.asarray(logp, dtype=np.float64)
    old = np.asarray(old_logp, dtype=np.float64)
    adv = np.asarray(token_advantages, dtype=np.float64)
    mask = np.asarray(mask, dtype=bool)
    ratio = np.exp(np.clip(logp - old, -20.0, 20.0))
    unclipped = -adv * ratio
    clipped = -adv * np.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = np.maximum(unclipped, clipped)
    return float(per_token[mask].sum() / mask.sum())


def reference_lm_head_logp(hidden, unembedding, tokens, *, rows: int = 256) -> np.ndarray:
    """``log softmax(hidden @ unembedding)[token]`` in float64, ``[B, T]``, in blocks of ``rows``."""
    batch, length, dim = np.shape(hidden)
    h = np.asarray(hidden, dtype=np.float64).reshape(-1, dim)
    w = np.asarray(unembedding, dtype=np.float64)
    tok = np.asarray(tokens).reshape(-1)
    out = np.empty(h.shape[0])
    for start in range(0, h.shape[0], rows):
        logits = h[start : start + rows] @ w
        top = logits.max(axis=1, keepdims=True)
        lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
        out[start : start + rows] = logits[np.arange(logits.shape[0]), tok[start : start + rows]] - lse
    return out.reshape(batch, length)


def reference_lm_head_loss(hidden, unembedding, tokens, old_logp, advantages, mask, *,
                           clip_low: float = 0.2, clip_high: float = 0.2, rows: int = 256):
    """The policy loss from hidden states and its gradients, in float64: ``(loss, d hidden, d W)``.

    ``logits = hidden @ unembedding`` (``[B, T, D] @ [D, V]``), ``logp = logits[token] -
    logsumexp(logits)``, then :func:`reference_policy_loss` (token-mean over ``mask``) with a
    per-row advantage ``advantages[b]``. The gradient is written out by hand: per valid token
    ``dℓ/dlogp = -A·r`` where the unclipped term is the larger one (inside the clip range both are
    equal; a ratio exactly on a bound gets the full gradient), ``0`` where the clipped term binds,
    divided by the number of valid tokens; ``d logits = dℓ/dlogp · (onehot - softmax)``,
    ``d hidden = d logits @ Wᵀ``, ``d W = Σ hiddenᵀ @ d logits``. Walked in blocks of ``rows``
    tokens so the float64 logits of the whole batch never exist at once.
    """
    batch, length, dim = np.shape(hidden)
    h = np.asarray(hidden, dtype=np.float64).reshape(-1, dim)
    w = np.asarray(unembedding, dtype=np.float64)
    tok = np.asarray(tokens).reshape(-1)
    old = np.asarray(old_logp, dtype=np.float64).reshape(-1)
    adv = np.repeat(np.asarray(advantages, dtype=np.float64), length)
    valid = np.asarray(mask, dtype=bool).reshape(-1)
    count = max(int(valid.sum()), 1)
    loss, dh, dw = 0.0, np.zeros_like(h), np.zeros_like(w)
    for start in range(0, h.shape[0], rows):
        sl = slice(start, start + rows)
        logits = h[sl] @ w
        top = logits.max(axis=1, keepdims=True)
        lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
        logp = logits[np.arange(logits.shape[0]), tok[sl]] - lse
        ratio = np.exp(np.clip(logp - old[sl], -20.0, 20.0))
        unclipped = -adv[sl] * ratio
        clipped = -adv[sl] * np.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
        loss += float(np.maximum(unclipped, clipped)[valid[sl]].sum()) / count
        g = np.where(valid[sl] & (unclipped >= clipped), -adv[sl] * ratio, 0.0) / count
        dlogits = -np.exp(logits - lse[:, None]) * g[:, None]
        dlogits[np.arange(logits.shape[0]), tok[sl]] += g
        dh[sl] = dlogits @ w.T
        dw += h[sl].T @ dlogits
    return loss, dh.reshape(batch, length, dim), dw


# ------------------------------------------------------------------------------------------------
# NumPy peers
# ------------------------------------------------------------------------------------------------


def numpy_grpo(rewards: np.ndarray, ids: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """GRPO with ``np.unique(return_inverse=True)`` and ``np.bincount``; singleton → raw score."""
    _, inv = np.unique(ids, return_inverse=True)
    inv = inv.reshape(-1)
    count = np.bincount(inv).astype(rewards.dtype)
    mean = (np.bincount(inv, weights=rewards) / count).astype(rewards.dtype)
    centred = rewards - mean[inv]
    dof = np.maximum(count - 1, 1)
    std = np.sqrt(np.bincount(inv, weights=centred * centred).astype(rewards.dtype) / dof)
    single = count[inv] < 2
    return np.where(single, rewards, centred / (std[inv] + rewards.dtype.type(eps)))


def numpy_triage_take(outcome_adv, roles, turn_mask, token_turn, lam, constants):
    """Role credit by lookup, then ``np.take_along_axis`` to tokens."""
    bonus = np.where(roles >= 0, constants[np.maximum(roles, 0)], np.float32(0))
    turn_adv = np.where(turn_mask, outcome_adv[:, None] + np.float32(lam) * bonus, np.float32(0))
    picked = np.take_along_axis(turn_adv, np.maximum(token_turn, 0), axis=1)
    return np.where(token_turn >= 0, picked, np.float32(0))


def copy_floor(src: np.ndarray) -> np.ndarray:
    """The memory floor: a fresh float32 ``[B, T]`` array written from one read of ``[B, T]``."""
    return src.copy()


# ------------------------------------------------------------------------------------------------
# torch peers
# ------------------------------------------------------------------------------------------------


def torch_grpo_loop(scores, index, eps: float = 1e-6):
    """verl-style GRPO: per-sample Python loop over uid dictionaries.

    ``scores`` is a float tensor ``[B]``, ``index`` a sequence of hashable uids (verl passes uid
    strings). Singletons get mean 0 and std 1, i.e. keep their raw score.
    """
    scores = scores.clone()
    by_uid = collections.defaultdict(list)
    uid_mean, uid_std = {}, {}
    with torch.no_grad():
        n = scores.shape[0]
        for i in range(n):
            by_uid[index[i]].append(scores[i])
        for uid, members in by_uid.items():
            if len(members) == 1:
                uid_mean[uid] = torch.tensor(0.0)
                uid_std[uid] = torch.tensor(1.0)
            else:
                stacked = torch.stack(members)
                uid_mean[uid] = torch.mean(stacked)
                uid_std[uid] = torch.std(stacked)
        for i in range(n):
            scores[i] = (scores[i] - uid_mean[index[i]]) / (uid_std[index[i]] + eps)
    return scores


def torch_grpo_vectorized(scores, index, eps: float = 1e-6):
    """verl ``grpo_vectorized`` style: dense ids by ``torch.unique``, sums by ``index_add_``."""
    with torch.no_grad():
        _, inv = torch.unique(index, return_inverse=True)
        num = int(inv.max().item()) + 1
        count = torch.zeros(num, dtype=scores.dtype, device=scores.device)
        count.index_add_(0, inv, torch.ones_like(scores))
        total = torch.zeros(num, dtype=scores.dtype, device=scores.device)
        total.index_add_(0, inv, scores)
        mean = total / count
        centred = scores - mean[inv]
        sq = torch.zeros(num, dtype=scores.dtype, device=scores.device)
        sq.index_add_(0, inv, centred * centred)
        std = torch.sqrt(sq / (count - 1).clamp_min(1))
        single = count < 2
        mean = torch.where(single, torch.zeros_like(mean), mean)
        std = torch.where(single, torch.ones_like(std), std)
        return (scores - mean[inv]) / (std[inv] + eps)


def torch_grpo_reshape(scores, group_size: int, eps: float = 1e-6):
    """TRL style: ``view(-1, G)`` over contiguous, equal-sized groups (input sorted by prompt)."""
    with torch.no_grad():
        grouped = scores.view(-1, group_size)
        mean = grouped.mean(dim=1).repeat_interleave(group_size, dim=0)
        std = grouped.std(dim=1).repeat_interleave(group_size, dim=0)
        return (scores - mean) / (std + eps)


def _torch_tcpo_turn_terms(scores, turn_mask, *, success_threshold, progress_weight,
                           preservation_weight, regression_weight, initial):
    """The per-row part both torch TCPO peers share: ``cummax`` for the best prior and the future
    best, then the retrospective credit and the hindsight eligibility, all ``[B, K]``."""
    neg_inf = torch.tensor(-math.inf, dtype=scores.dtype, device=scores.device)
    masked = torch.where(turn_mask, scores, neg_inf)
    running = torch.cummax(masked, dim=1).values
    before = torch.cat([torch.full_like(running[:, :1], -math.inf), running[:, :-1]], dim=1)
    best_prior = before.clamp_min(initial)
    future_best = torch.cummax(masked.flip(1), dim=1).values.flip(1)
    delta = (scores - best_prior).clamp_min(0.0)
    success = best_prior >= success_threshold
    preserved = success & (delta == 0) & (scores >= best_prior)
    regression = torch.where(success, (best_prior - scores).clamp_min(0.0), 0.0)
    retro = (
        progress_weight * delta
        + preservation_weight * preserved.to(scores.dtype)
        - regression_weight * regression
    )
    eligible = turn_mask & ~success & (delta == 0)
    return retro, eligible, future_best


def torch_tcpo_loop(
    scores,
    turn_mask,
    uids,
    *,
    success_threshold: float = 1.0,
    progress_weight: float = 1.0,
    preservation_weight: float = 0.1,
    regression_weight: float = 1.0,
    hindsight_weight: float = 1.0,
    initial: float = 0.0,
    gamma: float = 1.0,
    eps: float = 1e-6,
):
    """TCPO in the style of its public reimplementations: vectorised over rows, looped over turns.

    Retrospective credit from ``cummax``; per turn index ``k``, the leave-one-out hindsight
    baseline over eligible peers and the per-(prompt, turn) z-score (population variance, ``eps``
    inside the square root, fewer than two entries keep raw credit) by ``scatter_add_``.
    """
    with torch.no_grad():
        num_turns = scores.shape[1]
        retro, eligible, future_best = _torch_tcpo_turn_terms(
            scores, turn_mask, success_threshold=success_threshold,
            progress_weight=progress_weight, preservation_weight=preservation_weight,
            regression_weight=regression_weight, initial=initial)
        _, inv = torch.unique(uids, return_inverse=True)
        num = int(inv.max().item()) + 1
        out = torch.zeros_like(scores)
        for k in range(num_turns):
            elig = eligible[:, k]
            fb = torch.where(elig, future_best[:, k], 0.0)
            e_cnt = torch.zeros(num, dtype=scores.dtype).scatter_add_(0, inv, elig.to(scores.dtype))
            e_sum = torch.zeros(num, dtype=scores.dtype).scatter_add_(0, inv, fb)
            peers = e_cnt[inv] - 1
            baseline = (e_sum[inv] - fb) / peers.clamp_min(1)
            hindsight = torch.where(elig & (peers > 0), fb - baseline, 0.0)
            credit = torch.where(turn_mask[:, k], retro[:, k] + hindsight_weight * hindsight, 0.0)
            live = turn_mask[:, k].to(scores.dtype)
            n = torch.zeros(num, dtype=scores.dtype).scatter_add_(0, inv, live)
            mean = torch.zeros(num, dtype=scores.dtype).scatter_add_(0, inv, credit) / n.clamp_min(1)
            centred = torch.where(turn_mask[:, k], credit - mean[inv], 0.0)
            var = torch.zeros(num, dtype=scores.dtype).scatter_add_(0, inv, centred * centred)
            z = centred / torch.sqrt(var[inv] / n[inv].clamp_min(1) + eps)
            z = torch.where(n[inv] < 2, credit, z)
            out[:, k] = torch.where(turn_mask[:, k], z * gamma**k, 0.0)
        return out


def torch_tcpo_reshape(
    scores,
    turn_mask,
    group_size: int,
    *,
    success_threshold: float = 1.0,
    progress_weight: float = 1.0,
    preservation_weight: float = 0.1,
    regression_weight: float = 1.0,
    hindsight_weight: float = 1.0,
    initial: float = 0.0,
    gamma: float = 1.0,
    eps: float = 1e-6,
):
    """TCPO fully vectorised over the trainer layout: ``view(-1, G, K)`` over contiguous,
    equal-sized groups (input sorted by prompt, as TRL's GRPO), no loop over turns.

    The same quantities as :func:`torch_tcpo_loop`, each per-(prompt, turn) statistic a reduction
    over the ``G`` axis of ``[B / G, G, K]``: the best a torch user gets from the layout promise.
    """
    with torch.no_grad():
        batch, num_turns = scores.shape
        retro, eligible, future_best = _torch_tcpo_turn_terms(
            scores, turn_mask, success_threshold=success_threshold,
            progress_weight=progress_weight, preservation_weight=preservation_weight,
            regression_weight=regression_weight, initial=initial)
        shape = (-1, group_size, num_turns)
        elig = eligible.view(shape)
        live = turn_mask.view(shape)
        fb = torch.where(elig, future_best.view(shape), 0.0)
        peers = elig.sum(dim=1, keepdim=True).to(scores.dtype) - 1
        baseline = (fb.sum(dim=1, keepdim=True) - fb) / peers.clamp_min(1)
        hindsight = torch.where(elig & (peers > 0), fb - baseline, 0.0)
        credit = torch.where(live, retro.view(shape) + hindsight_weight * hindsight, 0.0)
        n = live.sum(dim=1, keepdim=True).to(scores.dtype)
        centred = torch.where(live, credit - credit.sum(dim=1, keepdim=True) / n.clamp_min(1), 0.0)
        var = (centred * centred).sum(dim=1, keepdim=True)
        z = torch.where(n < 2, credit, centred / torch.sqrt(var / n.clamp_min(1) + eps))
        discount = gamma ** torch.arange(num_turns, dtype=scores.dtype, device=scores.device)
        return torch.where(live, z * discount, 0.0).view(batch, num_turns)


def torch_triage_gather(outcome_adv, roles, turn_mask, token_turn, lam: float, constants):
    """Role credit by table lookup on ``[B, K]``, then ``torch.gather`` to ``[B, T]`` tokens.

    ``token_turn`` is an int64 tensor (``torch.gather`` requires int64 indices).
    """
    with torch.no_grad():
        bonus = torch.where(roles >= 0, constants[roles.clamp_min(0)], 0.0)
        turn_adv = torch.where(turn_mask, outcome_adv[:, None] + lam * bonus, 0.0)
        picked = torch.gather(turn_adv, 1, token_turn.clamp_min(0))
        return torch.where(token_turn >= 0, picked, 0.0)


_LM_HEAD_FUNCTION = None


def _lm_head_function():
    """The ``torch.autograd.Function`` of :func:`torch_lm_head_chunked`, built once torch is loaded."""
    global _LM_HEAD_FUNCTION
    if _LM_HEAD_FUNCTION is not None:
        return _LM_HEAD_FUNCTION

    class ChunkedPolicyLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hidden, weight, tokens, old_logp, advantages, mask, chunk, clip_low,
                    clip_high):
            count = mask.sum().clamp_min(1)
            loss_acc = torch.zeros((), dtype=torch.float32, device=hidden.device)
            grad_weight = torch.zeros_like(weight)
            grad_inputs = []
            for h_c, t_c, o_c, a_c, m_c in zip(*(x.split(chunk) for x in (
                    hidden, tokens, old_logp, advantages, mask)), strict=True):
                with torch.enable_grad():
                    h_c = h_c.detach().requires_grad_(True)
                    w = weight.detach().requires_grad_(True)
                    logits = (h_c @ w.t()).float()
                    logp = torch.log_softmax(logits, dim=-1).gather(-1, t_c[:, None])[:, 0]
                    ratio = torch.exp(torch.clamp(logp - o_c, -20.0, 20.0))
                    per_token = torch.maximum(-a_c * ratio,
                                              -a_c * torch.clamp(ratio, 1 - clip_low, 1 + clip_high))
                    chunk_loss = (per_token * m_c).sum() / count
                    g_h, g_w = torch.autograd.grad(chunk_loss, [h_c, w])
                grad_weight.add_(g_w)
                grad_inputs.append(g_h)
                loss_acc.add_(chunk_loss.detach())
            ctx.save_for_backward(torch.cat(grad_inputs), grad_weight)
            return loss_acc

        @staticmethod
        def backward(ctx, grad_output):
            grad_input, grad_weight = ctx.saved_tensors
            return (grad_input * grad_output, grad_weight * grad_output, *([None] * 7))

    _LM_HEAD_FUNCTION = ChunkedPolicyLoss
    return _LM_HEAD_FUNCTION


def torch_lm_head_chunked(hidden, weight, tokens, old_logp, advantages, mask, chunk: int, *,
                          clip_low: float = 0.2, clip_high: float = 0.2):
    """The clipped policy loss from hidden states in chunks of ``chunk`` tokens, and its gradients.

    In the style of Liger-Kernel's chunked PPO loss (``LigerFusedLinearPPOBase``): the forward pass
    of an ``autograd.Function`` walks the flattened tokens chunk by chunk and, for each, computes the
    logits ``h @ Wᵀ`` (the ``nn.Linear`` layout, ``weight`` is ``[V, D]``), ``log_softmax`` +
    ``gather``, the clipped surrogate summed over the chunk's valid tokens and divided by the
    batch's valid count, and ``torch.autograd.grad`` of that chunk loss; the unembedding gradient is
    accumulated in place, the input gradients are kept. The backward pass scales them. Arguments
    are flattened over tokens: ``hidden [N, D]`` and ``weight`` require grad; ``tokens`` int64
    ``[N]``; ``old_logp``, ``advantages`` (per token), ``mask`` (float) ``[N]``.

    Returns ``(loss, d hidden [N, D], d weight [V, D])`` as a training step would read them.
    """
    fn = _lm_head_function()
    loss = fn.apply(hidden, weight, tokens, old_logp, advantages, mask, chunk, clip_low, clip_high)
    grad_hidden, grad_weight = torch.autograd.grad(loss, [hidden, weight])
    return loss.detach(), grad_hidden, grad_weight

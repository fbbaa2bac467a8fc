"""Slow float64 loop references for the policy-loss family (credax/_losses.py).

Plain Python loops over rows, tokens and vocabulary entries; nothing here imports credax or jax.
Masked entries are skipped (never read), so whatever they hold cannot matter.
"""

from __future__ import annotations

import math

import numpy as np

CLAMP = 20.0


def token_logprobs(logits, tokens, mask=None):
    logits = np.asarray(logits, np.float64)
    batch, length, vocab = logits.shape
    out = np.zeros((batch, length))
    for b in range(batch):
        for t in range(length):
            if mask is not None and not mask[b][t]:
                continue
            row = logits[b, t]
            top = max(row)
            lse = top + math.log(sum(math.exp(v - top) for v in row))
            tok = int(tokens[b][t])
            out[b, t] = row[tok] - lse if 0 <= tok < vocab else math.nan
    return out


def token_logprobs_from_hidden(hidden, unembedding, tokens, mask=None):
    hidden = np.asarray(hidden, np.float64)
    unembedding = np.asarray(unembedding, np.float64)
    logits = np.einsum("btd,dv->btv", hidden, unembedding)
    return token_logprobs(logits, tokens, mask)


def kl(logp, ref, estimator):
    """One token's estimate of KL(π || π_ref) from δ = logp - ref."""
    delta = float(logp) - float(ref)
    if estimator == "k1":
        return delta
    if estimator == "k2":
        return 0.5 * delta * delta
    if estimator == "abs":
        return abs(delta)
    x = min(max(-delta, -CLAMP), CLAMP)
    return math.expm1(x) - x  # exact enough in float64 for the tested magnitudes


def aggregate(values, mask, mode, normalizer=None):
    values = np.asarray(values, np.float64)
    batch, length = values.shape
    rows = []  # (sum, count) of each row with at least one valid token
    for b in range(batch):
        total, count = 0.0, 0
        for t in range(length):
            if mask[b][t]:
                total += values[b, t]
                count += 1
        if count:
            rows.append((total, count))
    tokens = sum(c for _, c in rows)
    if mode == "token-sum":
        return sum(s for s, _ in rows)
    if mode == "token-mean":
        num, den = sum(s for s, _ in rows), tokens
    elif mode == "seq-mean-token-mean":
        num, den = sum(s / c for s, c in rows), len(rows)
    elif mode == "seq-mean-token-sum":
        num, den = sum(s for s, _ in rows), len(rows)
    elif mode == "seq-mean-token-sum-norm":
        num, den = sum(s for s, _ in rows), None
    else:
        raise ValueError(mode)
    if normalizer is not None:
        den = normalizer
    return num / den if den else 0.0


def policy_token_losses(logp, old, adv, mask, *, clip_low, clip_high, dual_clip, ratio):
    """Per-token clipped surrogate and the ratio used, 0 / 1 at masked tokens."""
    logp, old, adv = (np.asarray(x, np.float64) for x in (logp, old, adv))
    batch, length = logp.shape
    losses = np.zeros((batch, length))
    ratios = np.ones((batch, length))
    for b in range(batch):
        valid = [t for t in range(length) if mask[b][t]]
        if ratio == "sequence" and valid:
            seq = sum(logp[b, t] - old[b, t] for t in valid) / len(valid)
        for t in valid:
            log_r = seq if ratio == "sequence" else logp[b, t] - old[b, t]
            r = math.exp(min(max(log_r, -CLAMP), CLAMP))
            a = adv[b, t]
            clipped = min(max(r, 1 - clip_low), 1 + clip_high)
            loss = max(-a * r, -a * clipped)
            if dual_clip is not None and a < 0:
                loss = min(loss, -a * dual_clip)
            losses[b, t] = loss
            ratios[b, t] = r
    return losses, ratios


def policy_loss(logp, old, adv, mask, *, clip_low=0.2, clip_high=0.2, dual_clip=None,
                agg="token-mean", normalizer=None, ref=None, kl_coef=0.0, kl_estimator="k3",
                ratio="token"):
    """(loss, metrics dict) of the clipped surrogate, as documented in credax.policy_loss."""
    losses, ratios = policy_token_losses(logp, old, adv, mask, clip_low=clip_low,
                                         clip_high=clip_high, dual_clip=dual_clip, ratio=ratio)
    pg = aggregate(losses, mask, agg, normalizer)
    kl_value = 0.0
    if ref is not None:
        batch, length = losses.shape
        kls = np.zeros((batch, length))
        for b in range(batch):
            for t in range(length):
                if mask[b][t]:
                    kls[b, t] = kl(logp[b][t], ref[b][t], kl_estimator)
        kl_value = aggregate(kls, mask, agg, normalizer)
    adv = np.asarray(adv, np.float64)
    low = high = dual = approx = ratio_sum = 0.0
    count = 0
    for b in range(losses.shape[0]):
        for t in range(losses.shape[1]):
            if not mask[b][t]:
                continue
            count += 1
            r, a = ratios[b, t], adv[b, t]
            low += a < 0 and r < 1 - clip_low
            high += a > 0 and r > 1 + clip_high
            dual += dual_clip is not None and a < 0 and r > dual_clip
            x = min(max(float(logp[b][t]) - float(old[b][t]), -CLAMP), CLAMP)
            approx += math.expm1(x) - x
            ratio_sum += r
    frac = (lambda v: v / count) if count else (lambda v: 0.0)
    metrics = dict(policy_loss=pg, kl=kl_value, clip_frac_low=frac(low), clip_frac_high=frac(high),
                   dual_clip_frac=frac(dual), approx_kl=frac(approx), mean_ratio=frac(ratio_sum))
    return pg + kl_coef * kl_value, metrics

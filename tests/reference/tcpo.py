"""NumPy loop references for TCPO (SPEC §4) and MT-GRPO (SPEC §6).

Plain Python loops over rows, prompts and turns in float64, written from the formulas of SPEC.md
and independently of credax (nothing here imports it). Padded turns are skipped by index, so their
values (NaN, inf) are never read.
"""

from __future__ import annotations

import math

import numpy as np


def _valid_turns(mask_row):
    return [k for k in range(len(mask_row)) if mask_row[k]]


def best_prior(scores, mask, initial=0.0):
    scores, mask = np.asarray(scores, np.float64), np.asarray(mask, bool)
    out = np.zeros(scores.shape)
    for b in range(scores.shape[0]):
        best = initial
        for k in _valid_turns(mask[b]):
            out[b, k] = best
            best = max(best, scores[b, k])
    return out


def retrospective(scores, mask, *, tau=1.0, w_progress=1.0, w_preserve=0.1, w_regress=1.0,
                  initial=0.0):
    scores, mask = np.asarray(scores, np.float64), np.asarray(mask, bool)
    shape = scores.shape
    credit, m_out, delta_out = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    preserved, regression = np.zeros(shape, bool), np.zeros(shape)
    for b in range(shape[0]):
        best = initial
        for k in _valid_turns(mask[b]):
            s = scores[b, k]
            m = best
            delta = max(s - m, 0.0)
            success = m >= tau
            pres = success and delta == 0 and s >= m
            reg = max(m - s, 0.0) if success else 0.0
            m_out[b, k], delta_out[b, k] = m, delta
            preserved[b, k], regression[b, k] = pres, reg
            credit[b, k] = w_progress * delta + w_preserve * float(pres) - w_regress * reg
            best = max(best, s)
    return dict(credit=credit, best_prior=m_out, improvement=delta_out, preserved=preserved,
                regression=regression)


def hindsight(scores, mask, ids, *, tau=1.0, initial=0.0):
    scores, mask = np.asarray(scores, np.float64), np.asarray(mask, bool)
    ids = [int(i) for i in np.asarray(ids)]
    nb, nk = scores.shape
    retro = retrospective(scores, mask, tau=tau, initial=initial)
    eligible = np.zeros((nb, nk), bool)
    future = np.zeros((nb, nk))
    for b in range(nb):
        turns = _valid_turns(mask[b])
        for k in turns:
            eligible[b, k] = retro["best_prior"][b, k] < tau and retro["improvement"][b, k] == 0
            future[b, k] = max(scores[b, t] for t in turns if t >= k)
    credit, count, baseline = np.zeros((nb, nk)), np.zeros((nb, nk), np.int64), np.zeros((nb, nk))
    for b in range(nb):
        for k in range(nk):
            if not eligible[b, k]:
                continue
            peers = [future[j, k] for j in range(nb)
                     if j != b and ids[j] == ids[b] and eligible[j, k]]
            count[b, k] = len(peers)
            if peers:
                baseline[b, k] = sum(peers) / len(peers)
                credit[b, k] = future[b, k] - baseline[b, k]
    return dict(credit=credit, future_best=future, eligible=eligible, peer_count=count,
                baseline=baseline)


def counterfactual(scores, alt, alt_mask):
    scores, alt = np.asarray(scores, np.float64), np.asarray(alt, np.float64)
    alt_mask = np.asarray(alt_mask, bool)
    nb, nk, nm = alt.shape
    credit, mean, count = np.zeros((nb, nk)), np.zeros((nb, nk)), np.zeros((nb, nk), np.int64)
    informative = np.zeros((nb, nk), bool)
    for b in range(nb):
        for k in range(nk):
            vals = [alt[b, k, j] for j in range(nm) if alt_mask[b, k, j]]
            count[b, k] = len(vals)
            if vals:
                mean[b, k] = sum(vals) / len(vals)
                credit[b, k] = scores[b, k] - mean[b, k]
                informative[b, k] = any(v != scores[b, k] for v in vals)
    return dict(credit=credit, alt_mean=mean, alt_count=count, informative=informative)


def select_top(surprisal, candidates, budget, scope="batch", ids=None):
    surprisal = np.asarray(surprisal, np.float64)
    candidates = np.asarray(candidates, bool)
    nb, nk = surprisal.shape

    def scope_of(b):
        if scope == "batch":
            return 0
        if scope == "trajectory":
            return b
        return int(ids[b])

    chosen = np.zeros((nb, nk), bool)
    for sc in {scope_of(b) for b in range(nb)}:
        entries = [(b, k) for b in range(nb) for k in range(nk)
                   if scope_of(b) == sc and candidates[b, k]]

        def priority(e):
            v = surprisal[e]
            # Highest surprisal first, NaN after every number, ties by flat index.
            return (1 if math.isnan(v) else 0, 0.0 if math.isnan(v) else -v, e[0] * nk + e[1])

        for e in sorted(entries, key=priority)[:budget]:
            chosen[e] = True
    return chosen


def group_z(x, ids, mask, *, center=True, scale=True, ddof=1, eps=1e-6, eps_mode="add",
            singleton="zero", leave_one_out=False):
    """Per (group, turn) normalisation of SPEC §1 on ``x[B, K]``.

    ``scale``: "group"/"none", or their deprecated spellings True/False.
    """
    x, mask = np.asarray(x, np.float64), np.asarray(mask, bool)
    ids = [int(i) for i in np.asarray(ids)]
    nb, nk = x.shape
    out = np.zeros((nb, nk))
    for b in range(nb):
        for k in range(nk):
            if not mask[b, k]:
                continue
            vals = [x[j, k] for j in range(nb) if ids[j] == ids[b] and mask[j, k]]
            n = len(vals)
            if n == 1 or n - ddof <= 0:
                mean = sum(vals) / n
                out[b, k] = {"zero": 0.0, "raw": x[b, k], "center": x[b, k] - mean}[singleton]
                continue
            mean = sum(vals) / n
            if leave_one_out:
                mu = (sum(vals) - x[b, k]) / (n - 1)
            else:
                mu = mean
            num = x[b, k] - mu if center else x[b, k]
            if max(vals) == min(vals):
                out[b, k] = 0.0 if center else num
                continue
            if scale in (False, "none"):
                out[b, k] = num
                continue
            var = sum((v - mean) ** 2 for v in vals) / (n - ddof)
            den = math.sqrt(var) + eps if eps_mode == "add" else math.sqrt(var + eps)
            out[b, k] = num / den
    return out


def tcpo(scores, mask, ids, *, tau=1.0, w_progress=1.0, w_preserve=0.1, w_regress=1.0,
         w_hindsight=1.0, w_counter=1.0, initial=0.0, alt=None, alt_mask=None, selected=None,
         normalize=True, gamma=1.0, **z_options):
    scores, mask = np.asarray(scores, np.float64), np.asarray(mask, bool)
    nb, nk = scores.shape
    retro = retrospective(scores, mask, tau=tau, w_progress=w_progress, w_preserve=w_preserve,
                          w_regress=w_regress, initial=initial)
    hind = hindsight(scores, mask, ids, tau=tau, initial=initial)
    credit = np.zeros((nb, nk))
    if alt is not None:
        alt = np.asarray(alt, np.float64)
        alt_mask = np.ones(alt.shape, bool) if alt_mask is None else np.asarray(alt_mask, bool)
        alt_mask = alt_mask & mask[:, :, None]
        clean = np.where(mask, scores, 0.0)
        cf = counterfactual(clean, alt, alt_mask)
        selected = np.ones((nb, nk), bool) if selected is None else np.asarray(selected, bool)
    for b in range(nb):
        for k in _valid_turns(mask[b]):
            use = (alt is not None and selected[b, k] and hind["eligible"][b, k]
                   and cf["informative"][b, k])
            extra = w_counter * cf["credit"][b, k] if use else w_hindsight * hind["credit"][b, k]
            credit[b, k] = retro["credit"][b, k] + extra
    z = group_z(credit, ids, mask, **z_options) if normalize else credit
    adv = np.zeros((nb, nk))
    for b in range(nb):
        for k in _valid_turns(mask[b]):
            adv[b, k] = (gamma ** k if k > 0 else 1.0) * z[b, k]
    return dict(advantages=adv, credit=credit)


def raw_score(scores, mask):
    scores, mask = np.asarray(scores, np.float64), np.asarray(mask, bool)
    out = np.zeros(scores.shape)
    for b in range(scores.shape[0]):
        for k in _valid_turns(mask[b]):
            out[b, k] = scores[b, k]
    return out


def adjacent_delta(scores, mask, initial=0.0):
    scores, mask = np.asarray(scores, np.float64), np.asarray(mask, bool)
    out = np.zeros(scores.shape)
    for b in range(scores.shape[0]):
        prev = initial
        for k in _valid_turns(mask[b]):
            out[b, k] = scores[b, k] - prev
            prev = scores[b, k]
    return out


def mt_grpo(turn_rewards, outcome, mask, ids, *, turn_coef=1.0, **z_options):
    turn_rewards = np.asarray(turn_rewards, np.float64)
    mask = np.asarray(mask, bool)
    has_turn = mask.any(axis=1)
    a_o = group_z(np.asarray(outcome, np.float64)[:, None], ids, has_turn[:, None], **z_options)
    a_t = group_z(turn_rewards, ids, mask, **z_options)
    out = np.zeros(turn_rewards.shape)
    for b in range(turn_rewards.shape[0]):
        for k in _valid_turns(mask[b]):
            out[b, k] = a_o[b, 0] + turn_coef * a_t[b, k]
    return out

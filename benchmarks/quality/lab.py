"""The credit lab's compiled checkpoint evaluation: every method's credit next to the ground truth.

At a checkpoint, one batch is drawn from the current policy exactly as a training step draws it
(``train.make_context``). On that batch:

- every method computes its per-turn advantages (the value baseline with the policy's own value
  head, TCPO full with its own counterfactual samples);
- ``pairs`` (trajectory, turn) pairs are drawn uniformly among the valid turns and their true
  advantage ``A*`` is estimated with ``branches`` common-random-number branch pairs
  (``groundtruth.estimate``); the "true advantage" control's credit there *is* that estimate;
- the per-pair policy-gradient rows ``J[p] = ∇θ Σ_tokens log π(a_p | s_p)`` are taken once, so
  each method's policy gradient on the pairs is ``g_m = Σ_p A_m[p] J[p] / P`` and the
  ground-truth gradient ``g* = Σ_p A*[p] J[p] / P``: their cosine, and the relative variance
  ``E_b ||g_b - g||² / ||g||²`` of each under bootstrap resampling of the batch's trajectories
  (exact, from the Gram matrix ``J Jᵀ``).

The device part (:func:`core`: pairs, ground truth, Gram matrix, judges) is one jitted function
vmapped over every (method, seed) instance; the methods' credits come from the training step's
own credit program (``train.Runner.lab``); the gradient statistics and everything after are
host-side NumPy (here and in ``metrics.py``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import credax

from . import groundtruth, judges
from .policy import final_score

JUDGES = [
    ("oracle", "oracle", judges.oracle),
    ("p02", "noisy p=0.2", judges.noisy(0.2)),
    ("p04", "noisy p=0.4", judges.noisy(0.4)),
    ("blind", "regression-blind", judges.regression_blind),
]


class LabCore(NamedTuple):
    """What the lab measures on one instance's batch, independent of any method's credit."""

    gt: groundtruth.GroundTruth  # fields f32[P]
    used: jax.Array  # bool[P]
    row: jax.Array  # i32[P]
    turn: jax.Array  # i32[P]
    role: jax.Array  # i32[P] oracle role
    judged: jax.Array  # i32[J, P] role from each judge of JUDGES
    success: jax.Array  # bool[P] the pair's trajectory ends solved
    returns: jax.Array  # f32[B] episode returns of the batch
    sigma: jax.Array  # f32[] pooled within-prompt std of the returns (GRPO's scale)
    gram: jax.Array  # f32[P, P] J Jᵀ of the per-pair policy-gradient rows (0 off the used pairs)


class LabBatch(NamedTuple):
    """What the host-side metrics need, per seed (leading seed axis; NumPy)."""

    names: tuple  # the credit rows' method names
    credit: np.ndarray  # f32[S, R, P] each row's advantage at the pairs (true_adv: Â*)
    gt: groundtruth.GroundTruth  # fields f32[S, P]
    used: np.ndarray  # bool[S, P]
    row: np.ndarray  # i32[S, P]
    turn: np.ndarray  # i32[S, P]
    role: np.ndarray  # i32[S, P] oracle role
    judged: np.ndarray  # i32[S, J, P]
    success: np.ndarray  # bool[S, P]
    returns: np.ndarray  # f32[S, B]
    sigma: np.ndarray  # f32[S]
    grad_cos: np.ndarray  # f32[S, R] cosine(g_m, g*)
    grad_relvar: np.ndarray  # f32[S, R] bootstrap relative variance of g_m (true_adv: of g*)

    def index(self, name: str) -> int:
        return self.names.index(name)


def _pair_gradients(model, obs, tokens, mask) -> jax.Array:
    """``f32[P, D]``: ∇θ of each pair's summed action-token log-probability (flattened params)."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def logp(p, o, t, m):
        mdl = nnx.merge(graphdef, p, rest)
        lg = mdl(o[None], t[None])[0]  # [S, vocab]
        lp = jnp.take_along_axis(jax.nn.log_softmax(lg, axis=-1), t[:, None], axis=-1)[:, 0]
        return jnp.sum(jnp.where(m, lp, 0.0))

    g = jax.vmap(jax.grad(logp), in_axes=(None, 0, 0, 0))(params, obs, tokens, mask)
    leaves = jax.tree.leaves(g)
    return jnp.concatenate([x.reshape(x.shape[0], -1) for x in leaves], axis=1)


def gradient_stats(gram, credit, a_star, row, used, num_rows):
    """Cosine with the ground-truth gradient and bootstrap relative variance, from the Gram matrix
    (NumPy, on the host).

    With ``u_m = Σ_p A_m[p] J[p]`` (the method's gradient up to ``1/P``) and ``G = J Jᵀ``:
    ``cos(g_m, g*) = A_mᵀ G A* / sqrt(A_mᵀ G A_m · A*ᵀ G A*)``. Resampling the batch's ``B``
    trajectories with replacement gives each row a count ``c_r`` (multinomial: ``Var = 1 - 1/B``,
    ``Cov = -1/B``), so the exact (infinitely many resamples) bootstrap variance of the gradient is
    ``E||Σ_r (c_r - 1) u_r||² = Σ_r ||u_r||² - ||Σ_r u_r||² / B`` with ``u_r`` the sum over the
    pairs of row ``r``: ``A_mᵀ (G ⊙ same_row) A_m - A_mᵀ G A_m / B``. Returned relative to
    ``||u_m||²`` (the inverse of a signal-to-noise ratio; scale-free).
    """
    gram, credit, a_star = (np.asarray(x, np.float64) for x in (gram, credit, a_star))
    row, used = np.asarray(row), np.asarray(used, bool)
    G = np.where(used[:, None] & used[None, :], gram, 0.0)
    same = row[:, None] == row[None, :]
    quad = lambda a, M: np.einsum("mp,pq,mq->m", a, M, a)
    sq = quad(credit, G)
    ss = a_star @ G @ a_star
    cos = (credit @ G @ a_star) / np.sqrt(np.maximum(sq * ss, 1e-30))
    relvar = (quad(credit, np.where(same, G, 0.0)) - sq / num_rows) / np.maximum(sq, 1e-30)
    return cos, relvar


def core(graphdef, state, ctx, key: jax.Array, cfg) -> LabCore:
    """The lab's device part on one instance's batch ``ctx`` (``train.rollout_phase``): pairs,
    their ground truth, the Gram matrix of their policy gradients, the judges' roles."""
    model, _ = nnx.merge(graphdef, state)
    r = ctx.rollout
    B, K = r.scores.shape
    k_pairs, k_gt, k_judge = jax.random.split(jax.random.fold_in(key, 1), 3)
    row, turn, used = groundtruth.sample_pairs(r.turn_mask, k_pairs, cfg.lab_pairs)
    at = lambda x: groundtruth.take_pairs(x, row, turn)
    tokens, tmask = at(r.tokens), at(r.token_mask)
    gt = groundtruth.estimate(model, at(r.before), tokens, k_gt, cfg.lab_branches)
    J = _pair_gradients(model, at(r.obs), tokens, tmask)  # [P, D]
    judged = jnp.stack([j(r.roles, r.turn_mask, jax.random.fold_in(k_judge, i))
                        for i, (_, _, j) in enumerate(JUDGES)])
    centred = ctx.outcome - credax.group_mean(ctx.outcome, ctx.groups)
    G = ctx.groups.num_groups  # every prompt has `group` rows (train.make_context)
    sigma = jnp.sqrt(jnp.sum(jnp.square(centred)) / jnp.maximum(B - G, 1))
    return LabCore(
        gt=gt, used=used, row=row, turn=turn, role=at(r.roles), judged=judged[:, row, turn],
        success=(final_score(r) >= 1.0)[row], returns=ctx.outcome, sigma=sigma,
        gram=jax.lax.stop_gradient(J @ J.T),
    )


def assemble(core: LabCore, rows, *, true_adv: bool = False) -> LabBatch:
    """A :class:`LabBatch` from the core (host arrays, leading seed axis) and the credit rows
    ``[(name, f32[S, B, K])]``: each row read at the pairs, its gradient statistics from the Gram
    matrix. ``true_adv``: the first row is the true-advantage control, whose credit in the lab is
    the ground truth itself."""
    S = core.used.shape[0]
    a_star = np.where(core.used, core.gt.advantage, 0.0)
    credit = np.zeros((S, len(rows), core.used.shape[1]), np.float32)
    for j, (_, c) in enumerate(rows):
        for s in range(S):
            credit[s, j] = np.where(core.used[s], np.asarray(c)[s, core.row[s], core.turn[s]], 0.0)
    if true_adv:
        credit[:, 0] = a_star
    cos, relvar = zip(*(gradient_stats(core.gram[s], credit[s], a_star[s], core.row[s], core.used[s],
                                       core.returns.shape[1]) for s in range(S)), strict=True)
    return LabBatch(
        names=tuple(n for n, _ in rows), credit=credit, gt=core.gt, used=core.used, row=core.row,
        turn=core.turn, role=core.role, judged=core.judged, success=core.success,
        returns=core.returns, sigma=core.sigma, grad_cos=np.stack(cos), grad_relvar=np.stack(relvar),
    )


# --- host side: from a LabBatch (leading seed axis, NumPy) to the reported statistics ---------


def method_metrics(lb: LabBatch, index: int) -> dict:
    """Per-seed credit metrics of method ``index``'s credit on the batch ``lb``: lists over seeds."""
    from . import metrics as X

    out = {k: [] for k in ["pearson", "spearman", "sign_agree", "affine_mse", "grad_cos",
                           "grad_relvar", "raw_mse", "err_var", "raw_mse_first"]}
    for s in range(lb.used.shape[0]):
        u = lb.used[s]
        a, se, c = lb.gt.advantage[s][u], lb.gt.se[s][u], lb.credit[s, index][u]
        first = lb.turn[s][u] == 0
        # In the return's units, without rescaling (meaningful for the unscaled outcome baselines:
        # Dr. GRPO, RLOO, their shrinkage forms, the value baseline).
        out["raw_mse"].append(float(np.mean(np.square(c - a))))
        out["err_var"].append(float(np.var(c - a)))
        out["raw_mse_first"].append(float(np.mean(np.square(c[first] - a[first]))) if first.any()
                                    else float("nan"))
        out["pearson"].append(X.pearson(c, a))
        out["spearman"].append(X.spearman(c, a))
        out["sign_agree"].append(X.sign_agreement(c, a, se)[0])
        out["affine_mse"].append(X.affine_mse(c, a))
        out["grad_cos"].append(float(lb.grad_cos[s, index]))
        out["grad_relvar"].append(float(lb.grad_relvar[s, index]))
    return out


def role_metrics(lb: LabBatch, index: int) -> dict:
    """Role × outcome cells of method ``index``, pairs pooled over seeds."""
    from . import metrics as X

    u = lb.used
    return X.role_cells(lb.role[u], lb.success[u], lb.gt.advantage[u], lb.credit[:, index][u])


def ground_truth_quality(lb: LabBatch) -> dict:
    """Per seed: spread of Â* over the pairs, mean SE, the noise share ``mean(SE²) / Var(Â*)``
    (how much of the observed spread is estimation noise) and the share of pairs with
    ``|Â*| > 2 SE``."""
    out = {"sd": [], "se": [], "noise_share": [], "clear": [], "pairs": []}
    for s in range(lb.used.shape[0]):
        u = lb.used[s]
        a, se = lb.gt.advantage[s][u], lb.gt.se[s][u]
        out["sd"].append(float(np.std(a)))
        out["se"].append(float(np.mean(se)))
        out["noise_share"].append(float(np.mean(se**2) / max(np.var(a), 1e-30)))
        out["clear"].append(float(np.mean(np.abs(a) > 2 * se)))
        out["pairs"].append(int(u.sum()))
    return out


def triage_metrics(lb: LabBatch, grpo_index: int, *, lam: float) -> dict:
    """Per judge of ``JUDGES``, per seed: TRIAGE's Cov(c, δ), λ* (with credax's
    ``optimal_mixing_weight`` next to the lab's own NumPy value) and the MSE change."""
    from . import metrics as X

    out = {}
    for j, (key, label, _) in enumerate(JUDGES):
        per = {"label": label, "cov": [], "lambda_star": [], "lambda_star_credax": [], "mse_change": []}
        for s in range(lb.used.shape[0]):
            u = lb.used[s]
            a, g, roles = lb.gt.advantage[s][u], lb.credit[s, grpo_index][u], lb.judged[s, j][u]
            t = X.triage_theory(a, float(lb.sigma[s]), g, roles, lam=lam)
            if not float(lb.sigma[s]) > 0:  # every return of the batch equal: no scale for A*
                for q in ("cov", "lambda_star", "lambda_star_credax", "mse_change"):
                    per[q].append(float("nan"))
                continue
            delta = a / float(lb.sigma[s]) - g
            lam_cx = credax.optimal_mixing_weight(
                jnp.asarray(delta, jnp.float32)[None], jnp.asarray(roles, jnp.int32)[None],
                jnp.ones((1, delta.size), bool))
            per["cov"].append(t["cov"])
            per["lambda_star"].append(t["lambda_star"])
            per["lambda_star_credax"].append(float(lam_cx))
            per["mse_change"].append(t["mse_change"])
        out[key] = per
    return out

"""The credit lab's compiled checkpoint evaluation: every method's credit next to the ground truth.

At a checkpoint, one batch is drawn from the current policy exactly as a training step draws it
(``train.make_context``). On that batch:

- every method computes its per-turn advantages (the value baseline with the policy's own value
  head, TCPO full with its own counterfactual samples);
- ``pairs`` (trajectory, turn) pairs are drawn uniformly among the valid turns and their true
  advantage ``A*`` is estimated with ``branches`` common-random-number branch pairs
  (``groundtruth.estimate``); the true-advantage controls' credit there is their own
  per-turn estimate with their own branch noise (``groundtruth.per_turn_estimate``);
- the per-turn policy-gradient rows ``J[t] = ∇θ Σ_tokens log π(a_t | s_t)`` are taken once at every
  turn of the batch; on the pairs, each method's policy gradient is ``g_m = Σ_p A_m[p] J[p] / P``
  and the
  ground-truth gradient ``g* = Σ_p A*[p] J[p] / P``: their cosine, and the relative variance
  ``E_b ||g_b - g||² / ||g||²`` of each under bootstrap resampling of the batch's trajectories
  (exact, from the Gram matrix ``J Jᵀ``);
- the same gradient rows at *every* turn of the batch give each method's policy gradient at the
  training batch size (the credit on all its turns, not only the pairs): its signal-to-noise
  ratio under resampling the trajectories, and its progress along ``g*`` over the bootstrap
  standard deviation of that progress (:func:`batch_gradient_stats`).

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

STOP = 0  # the stop action's type token, on both tasks (env.STOP, refine.STOP)

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
    unchanged: jax.Array  # bool[P] the turn left the score where it was (s_k == s_{k-1}, s_{-1} = 0)
    stop: jax.Array  # bool[P] the turn's action is the stop action (ends the episode)
    returns: jax.Array  # f32[B] episode returns of the batch
    sigma: jax.Array  # f32[] pooled within-prompt std of the returns (GRPO's scale)
    jac: jax.Array  # f32[B·K, D] ∇θ log π of every turn's action (0 on padded turns), row b·K + k


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
    unchanged: np.ndarray  # bool[S, P]
    stop: np.ndarray  # bool[S, P]
    returns: np.ndarray  # f32[S, B]
    sigma: np.ndarray  # f32[S]
    grad_cos: np.ndarray  # f32[S, R] cosine(g_m, g*) on the pairs
    grad_relvar: np.ndarray  # f32[S, R] bootstrap relative variance of g_m on the pairs
    grad_snr: np.ndarray  # f32[S, R] 1 / relative variance of the whole batch's gradient
    grad_t: np.ndarray  # f32[S, R] the whole batch's gradient along g*, over its bootstrap sd

    def index(self, name: str) -> int:
        return self.names.index(name)


def _turn_gradients(model, obs, tokens, mask) -> jax.Array:
    """``f32[N, D]``: ∇θ of each turn's summed action-token log-probability (flattened params);
    a turn with no valid token (padding) has the zero row."""
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


def batch_gradient_stats(jac, credit, pair_index, a_star, num_rows):
    """The policy gradient of each credit row at the training batch size (NumPy, on the host).

    ``jac``: ``f32[B·K, D]`` the per-turn score-function rows ``J_t``; ``credit``: ``f32[R, B·K]``
    each row's advantage at every turn (0 on padding); ``pair_index``/``a_star``: the used pairs'
    flat turn index and ``Â*``. With ``u_{m,b} = Σ_{t ∈ b} A_m[t] J_t`` (trajectory ``b``'s share of
    the gradient) and ``U_m = Σ_b u_{m,b}``, resampling the ``B`` trajectories (exact bootstrap, as
    in :func:`gradient_stats`) gives ``Var = Σ_b ||u_{m,b}||² − ||U_m||² / B``, so

    - ``snr = ||U_m||² / Var``: how far the batch gradient stands above its own sampling noise
      (direction-blind: a confidently wrong gradient scores high);
    - ``t = x / sd(x)`` with ``x_b = u_{m,b} · ĝ*`` (``ĝ*`` the unit ground-truth gradient on the
      pairs, ``Σ_p Â*_p J_p``), ``x = Σ_b x_b``, ``sd² = Σ_b x_b² − x² / B``: the expected progress of
      one gradient step along the true direction in units of its noise (signed).

    Returns ``(snr f64[R], t f64[R])``.
    """
    jac = np.asarray(jac, np.float32)
    credit = np.asarray(credit, np.float32)
    R, N = credit.shape
    K = N // num_rows
    u = np.einsum("rbk,bkd->rbd", credit.reshape(R, num_rows, K), jac.reshape(num_rows, K, -1),
                  optimize=True).astype(np.float64)
    U = u.sum(axis=1)
    UU = np.einsum("rd,rd->r", U, U)
    var = np.einsum("rbd,rbd->r", u, u) - UU / num_rows
    snr = UU / np.maximum(var, 1e-30)
    g_star = np.asarray(a_star, np.float64) @ jac[np.asarray(pair_index)].astype(np.float64)
    norm = np.sqrt(g_star @ g_star)
    if not norm > 0:
        return snr, np.full(R, np.nan)
    x = u @ (g_star / norm)  # [R, B]
    xs = x.sum(axis=1)
    sd = np.sqrt(np.maximum(np.sum(x * x, axis=1) - xs * xs / num_rows, 1e-30))
    return snr, xs / sd


def core(graphdef, state, ctx, key: jax.Array, cfg) -> LabCore:
    """The lab's device part on one instance's batch ``ctx`` (``train.rollout_phase``): pairs,
    their ground truth, the Gram matrix of their policy gradients, the judges' roles."""
    model, _ = nnx.merge(graphdef, state)
    r = ctx.rollout
    B, K = r.scores.shape
    k_pairs, k_gt, k_judge = jax.random.split(jax.random.fold_in(key, 1), 3)
    row, turn, used = groundtruth.sample_pairs(r.turn_mask, k_pairs, cfg.lab_pairs)
    at = lambda x: groundtruth.take_pairs(x, row, turn)
    gt = groundtruth.estimate(model, at(r.before), at(r.tokens), k_gt, cfg.lab_branches)
    flat = lambda x: x.reshape(B * K, *x.shape[2:])
    J = _turn_gradients(model, flat(r.obs), flat(r.tokens), flat(r.token_mask))  # [B·K, D]
    prev = jnp.concatenate([jnp.zeros_like(r.scores[:, :1]), r.scores[:, :-1]], axis=1)
    judged = jnp.stack([j(r.roles, r.turn_mask, jax.random.fold_in(k_judge, i))
                        for i, (_, _, j) in enumerate(JUDGES)])
    centred = ctx.outcome - credax.group_mean(ctx.outcome, ctx.groups)
    G = ctx.groups.num_groups  # every prompt has `group` rows (train.make_context)
    sigma = jnp.sqrt(jnp.sum(jnp.square(centred)) / jnp.maximum(B - G, 1))
    return LabCore(
        gt=gt, used=used, row=row, turn=turn, role=at(r.roles), judged=judged[:, row, turn],
        success=(final_score(r) >= 1.0)[row], unchanged=at(r.scores == prev),
        stop=at(r.tokens[..., 0] == STOP), returns=ctx.outcome, sigma=sigma,
        jac=jax.lax.stop_gradient(J),
    )


def assemble(core: LabCore, rows) -> LabBatch:
    """A :class:`LabBatch` from the core (host arrays, leading seed axis) and the credit rows
    ``[(name, f32[S, B, K])]``: each row read at the pairs, its gradient statistics from the
    per-turn gradient rows (which are then dropped: they are the big part of the core). Every
    row's credit, the true-advantage controls' included, is the credit the method computes."""
    S, P = core.used.shape
    a_star = np.where(core.used, core.gt.advantage, 0.0)
    B = core.returns.shape[1]
    full = np.stack([np.asarray(c, np.float32) for _, c in rows], axis=1)  # [S, R, B, K]
    K = full.shape[-1]
    credit = np.zeros((S, len(rows), P), np.float32)
    cos, relvar, snr, tstat = [], [], [], []
    for s in range(S):
        credit[s] = np.where(core.used[s], full[s][:, core.row[s], core.turn[s]], 0.0)
        index = core.row[s] * K + core.turn[s]
        jac = np.asarray(core.jac[s], np.float32)
        pj = np.where(core.used[s][:, None], jac[index], 0.0)
        c, v = gradient_stats(pj @ pj.T, credit[s], a_star[s], core.row[s], core.used[s], B)
        u = core.used[s]
        n, t = batch_gradient_stats(jac, full[s].reshape(len(rows), -1), index[u], a_star[s][u], B)
        cos.append(c), relvar.append(v), snr.append(n), tstat.append(t)
    return LabBatch(
        names=tuple(n for n, _ in rows), credit=credit, gt=core.gt, used=core.used, row=core.row,
        turn=core.turn, role=core.role, judged=core.judged, success=core.success,
        unchanged=core.unchanged, stop=core.stop, returns=core.returns, sigma=core.sigma,
        grad_cos=np.stack(cos), grad_relvar=np.stack(relvar), grad_snr=np.stack(snr),
        grad_t=np.stack(tstat),
    )


# --- host side: from a LabBatch (leading seed axis, NumPy) to the reported statistics ---------


# Credit metrics per method (``method_metrics``), in table order; ``True``: higher is better.
METRICS = {
    "pearson": True, "spearman": True, "sign_agree": True, "affine_mse": False,
    "pearson_unchanged": True, "rank_acc": True,
    "pearson_decisive": True, "pearson_exploration": True, "pearson_no_progress": True,
    "pearson_regression": True,
    "grad_cos": True, "grad_relvar": False, "grad_snr": True, "grad_t": True,
}


def method_metrics(lb: LabBatch, index: int) -> dict:
    """Per-seed credit metrics of method ``index``'s credit on the batch ``lb``: lists over seeds.

    The accuracy metrics (``METRICS``) and the biases: ``bias_<role>`` per oracle role and
    ``bias_stop`` / ``bias_continue`` on the turns whose action stops the episode or not
    (``metrics.residual_bias``: the credit ``Â*`` does not explain, in the method's own credit
    sd), and ``length_bonus = bias_continue − bias_stop``: the extra credit a method gives taking
    another turn over stopping, beyond what ``Â*`` says (the hidden per-turn bonus of verl
    RFC #7244 when it is positive). ``pearson_state_value``: the credit's correlation with the
    state value ``V̂(h_k)`` (the ground truth's resampled-action half, ``GroundTruth.v``): an
    action's advantage carries none of its state's value, so a credit that does has a
    state-dependent offset (unbiased when the offset is independent of the action, but noise).
    """
    from . import metrics as X

    keys = [*METRICS, "raw_mse", "err_var", "raw_mse_first",
            *(f"bias_{r}" for r in X.ROLE_NAMES), "bias_stop", "bias_continue", "length_bonus",
            "pearson_state_value"]
    out = {k: [] for k in keys}
    for s in range(lb.used.shape[0]):
        u = lb.used[s]
        a, se, c = lb.gt.advantage[s][u], lb.gt.se[s][u], lb.credit[s, index][u]
        role, stop = lb.role[s][u], lb.stop[s][u]
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
        out["pearson_unchanged"].append(X.pearson_where(c, a, lb.unchanged[s][u]))
        out["rank_acc"].append(X.pairwise_rank_accuracy(c, a, se, lb.row[s][u])[0])
        for r, name in enumerate(X.ROLE_NAMES):
            out[f"pearson_{name}"].append(X.pearson_where(c, a, role == r))
            out[f"bias_{name}"].append(X.residual_bias(c, a, role == r))
        out["bias_stop"].append(X.residual_bias(c, a, stop))
        out["bias_continue"].append(X.residual_bias(c, a, ~stop))
        out["length_bonus"].append(out["bias_continue"][-1] - out["bias_stop"][-1])
        out["pearson_state_value"].append(X.pearson(c, lb.gt.v[s][u]))
        out["grad_cos"].append(float(lb.grad_cos[s, index]))
        out["grad_relvar"].append(float(lb.grad_relvar[s, index]))
        out["grad_snr"].append(float(lb.grad_snr[s, index]))
        out["grad_t"].append(float(lb.grad_t[s, index]))
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


def metric_vs_learning(task: dict, controls, *, step: str = "0") -> dict:
    """Which credit metric predicts learning: per metric of ``METRICS`` at ``step`` (where every
    method shares the initial policy and, per seed, the batch), the rank correlation across the
    methods (``controls`` left out) of the metric with final held-out success and with final
    return, with a bootstrap interval over seeds (``metrics.across_method_rank_correlation``).
    Lower-is-better metrics are negated first, so a positive ``rho`` always means "the better the
    credit by this metric, the more the method learns". ``task``: a task record of ``lab.json``.
    """
    from . import metrics as X

    names = [n for n in task["methods"] if n not in set(controls)]
    credit = task["lab"]["credit"][step]
    # The seeds every method has (the headline methods run more): the pairing needs the same ones.
    common = min([len(credit[n]["pearson"]["per_seed"]) for n in names]
                 + [len(task["methods"][n]["success"]["per_seed"]) for n in names], default=0)
    seeds = lambda stat: [np.nan if v is None else v for v in stat["per_seed"][:common]]
    out = {"methods": names, "step": int(step), "seeds": common, "metrics": {}}
    for metric, higher in METRICS.items():
        if any(metric not in credit[n] for n in names):
            continue
        sign = 1.0 if higher else -1.0
        m = np.array([seeds(credit[n][metric]) for n in names], np.float64) * sign
        row = {"higher_is_better": higher}
        for outcome in ("success", "ret"):
            o = np.array([seeds(task["methods"][n][outcome]) for n in names], np.float64)
            rho, lo, hi = X.across_method_rank_correlation(m, o)
            row[outcome] = {"mean": rho, "interval": [lo, hi]}
        out["metrics"][metric] = row
    return out

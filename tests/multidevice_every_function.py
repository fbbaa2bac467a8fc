"""Run by tests/test_multidevice.py in a subprocess with 8 forced CPU devices: every public array
function on batch-sharded inputs (auto and explicit mesh axes) equals its single-device result."""

# ruff: noqa: E501
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import credax
from credax import presets

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
assert len(jax.devices()) == 8
B, K, T, M, V, D = 16, 4, 12, 3, 7, 5
rng = np.random.default_rng(0)
ids = rng.integers(0, 5, B).astype(np.int32)
r = rng.random(B).astype(np.float32)
s = rng.random((B, K)).astype(np.float32)
tm = np.arange(K)[None] < rng.integers(1, K + 1, (B, 1))
tt = np.where(np.arange(T)[None] % 3 == 0, -1, np.minimum(np.arange(T)[None] // 3, K - 1)).repeat(B, 0).astype(np.int32)
lp = -rng.random((B, T)).astype(np.float32)
tokm = np.ones((B, T), bool)
roles = rng.integers(-1, 4, (B, K)).astype(np.int32)
alt = rng.random((B, K, M)).astype(np.float32)
altm = np.ones((B, K, M), bool)
logits = rng.normal(size=(B, T, V)).astype(np.float32)
tok = rng.integers(0, V, (B, T)).astype(np.int32)
hid = rng.normal(size=(B, T, D)).astype(np.float32)
W = rng.normal(size=(D, V)).astype(np.float32)
anchors = rng.integers(0, 3, (B, K)).astype(np.int32)
vals = rng.normal(size=(B, T)).astype(np.float32)

def calls(a):
    g = a
    return {
        "group_normalize": lambda: credax.group_normalize(g["r"], g["ids"]),
        "group_mean": lambda: credax.group_mean(g["s"], g["ids"], g["tm"]),
        "group_count": lambda: credax.group_count(g["ids"], g["tm"]),
        "peer_mean": lambda: credax.peer_mean(g["s"], g["ids"], g["tm"]),
        "grpo": lambda: credax.grpo_advantages(g["r"], g["ids"], normalization=presets.TRL_BATCH),
        "rloo": lambda: credax.rloo_advantages(g["r"], g["ids"]),
        "gdpo": lambda: credax.gdpo_advantages(g["s"][:, :2], g["ids"], weights=jnp.ones(2)),
        "degenerate": lambda: credax.degenerate_groups(g["r"], g["ids"]),
        "best_prior": lambda: credax.best_prior(g["s"], g["tm"]),
        "future_best": lambda: credax.future_best(g["s"], g["tm"]),
        "discounted_returns": lambda: credax.discounted_returns(g["s"], g["tm"], gamma=0.9),
        "broadcast_to_tokens": lambda: credax.broadcast_to_tokens(g["s"], g["tt"]),
        "turn_surprisal": lambda: credax.turn_surprisal(g["lp"], g["tt"], num_turns=K),
        "retrospective": lambda: credax.retrospective_credit(g["s"], g["tm"]),
        "hindsight": lambda: credax.hindsight_credit(g["s"], g["tm"], g["ids"]),
        "counterfactual": lambda: credax.counterfactual_credit(g["s"], g["alt"], g["altm"]),
        "select_top": lambda: credax.select_top_surprisal(g["s"], g["tm"], budget=3),
        "select_top_group": lambda: credax.select_top_surprisal(g["s"], g["tm"], g["ids"], budget=2, scope="group"),
        "tcpo": lambda: credax.tcpo_advantages(g["s"], g["tm"], g["ids"], alt_scores=g["alt"], alt_mask=g["altm"]),
        "raw_score": lambda: credax.raw_score_credit(g["s"], g["tm"]),
        "adjacent": lambda: credax.adjacent_delta_credit(g["s"], g["tm"]),
        "role_credit": lambda: credax.role_credit(g["roles"], g["tm"]),
        "triage": lambda: credax.triage_advantages(g["r"], g["roles"], g["tm"]),
        "triage_whiten": lambda: credax.triage_advantages(g["r"], g["roles"], g["tm"], whiten=True),
        "scalar_process": lambda: credax.scalar_process_advantages(g["r"], g["s"], g["tm"], lam=0.5),
        "fit_role": lambda: credax.fit_role_constants(g["s"], g["roles"], g["tm"]),
        "mixing": lambda: credax.optimal_mixing_weight(g["s"], g["roles"], g["tm"]),
        "judge_windows": lambda: credax.judge_windows(g["tm"], before=2, after=1),
        "mt_grpo": lambda: credax.mt_grpo_advantages(g["s"], g["r"], g["tm"], g["ids"]),
        "gigpo": lambda: credax.gigpo_advantages(g["r"], g["s"], g["anchors"], g["tm"], g["ids"]),
        "unbiased_turn": lambda: credax.unbiased_turn_advantages(g["s"], g["tm"], g["ids"], gamma=0.9),
        "reinforce_pp": lambda: credax.reinforce_pp_advantages(g["lp"], g["tokm"], gamma=0.9),
        "reinforce_pp_baseline": lambda: credax.reinforce_pp_baseline_advantages(g["r"], g["ids"], g["tokm"]),
        "gpg": lambda: credax.gpg_advantages(g["r"], g["ids"]),
        "g2po": lambda: credax.g2po_advantages(g["r"], g["anchors"], g["tm"], g["ids"]).advantages,
        "hgpo": lambda: credax.hgpo_advantages(g["r"], g["s"], g["anchors"], g["tm"], g["ids"]),
        "token_logprobs": lambda: credax.token_logprobs(g["logits"], g["tok"], mask=g["tokm"]),
        "from_hidden": lambda: credax.token_logprobs_from_hidden(g["hid"], W, g["tok"], chunk_size=5),
        "from_hidden_mask": lambda: credax.token_logprobs_from_hidden(g["hid"], W, g["tok"], mask=g["tokm"], chunk_size=4, with_entropy=True),
        "kl": lambda: credax.kl_divergence(g["lp"], g["lp"] * 0.5, mask=g["tokm"]),
        "aggregate": lambda: credax.aggregate(g["lp"], g["tokm"], mode="seq-mean-token-mean"),
        "policy_loss": lambda: credax.policy_loss(g["lp"], g["lp"] * 0.9, g["r"], g["tokm"], ref_logp=g["lp"], kl_coef=0.1),
        "policy_loss_turns": lambda: credax.policy_loss(g["lp"], g["lp"], g["s"], g["tokm"], token_turn=g["tt"], ratio="sequence"),
        "gae": lambda: credax.gae_advantages(g["lp"], g["vals"], g["tokm"], gamma=0.9, lam=0.9),
        "gae_rows": lambda: credax.gae_advantages(g["lp"], g["vals"], g["tokm"], gamma=0.9, lam=g["r"], bootstrap=g["r"]),
        "turn_gae": lambda: credax.turn_gae_advantages(g["s"], g["vals"], g["tt"], g["tm"]),
        "turn_values": lambda: credax.turn_values(g["vals"], g["tt"], num_turns=K),
        "vapo": lambda: credax.vapo_lambda(g["tokm"]),
        "value_loss": lambda: credax.value_loss(g["vals"], g["vals"] * 0.9, g["lp"], g["tokm"]),
        "discount_weights": lambda: credax.discount_weights(K, 0.9),
    }

host = dict(ids=ids, r=r, s=s, tm=tm, tt=tt, lp=lp, tokm=tokm, roles=roles, alt=alt, altm=altm,
            logits=logits, tok=tok, hid=hid, anchors=anchors, vals=vals)
single = {k: jax.tree.map(np.asarray, f()) for k, f in calls({k: jnp.asarray(v) for k, v in host.items()}).items()}

def put(mesh):
    out = {}
    for k, v in host.items():
        spec = P("batch", *([None] * (v.ndim - 1)))
        out[k] = jax.device_put(v, NamedSharding(mesh, spec))
    return out

def check(label, thunks, wrap=lambda f: f()):
    bad = []
    for name, f in thunks.items():
        try:
            out = wrap(f)
            for a, b in zip(jax.tree.leaves(jax.tree.map(np.asarray, out)), jax.tree.leaves(single[name]), strict=True):
                np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-5, atol=1e-5, err_msg=name)
        except Exception as e:
            bad.append(name)
            print(label, name, "FAIL", type(e).__name__, str(e).splitlines()[0][:200], flush=True)
    print(label, "ALL OK" if not bad else "FAILED " + ",".join(bad), len(thunks), flush=True)


auto = jax.make_mesh((8,), ("batch",), axis_types=(AxisType.Auto,))
check("AUTO_EAGER", calls(put(auto)))
explicit = jax.make_mesh((8,), ("batch",), axis_types=(AxisType.Explicit,))
a = put(explicit)
check("EXPLICIT_EAGER", calls(a))


def in_mesh_jit(f):
    with jax.set_mesh(explicit):
        return jax.jit(f)()


check("EXPLICIT_SET_MESH_JIT", calls(a), in_mesh_jit)

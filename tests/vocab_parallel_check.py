"""Run by tests/test_vocab_parallel.py in a subprocess with 8 forced CPU devices: the fused head
with its vocabulary split over a mesh axis against the single-device call.

Prints one JSON object a line: ``{"check": name, "value": d, "grads": [d, ...], "gathers": k}``
(``d`` the largest absolute difference from the single-device call, relative to the largest
magnitude of the reference where ``rel`` says so; ``gathers`` the all-gathers in the compiled
program), or ``{"check": name, "error": ...}``.
"""

# ruff: noqa: E501
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import credax
import credax.nnx

assert len(jax.devices()) == 8, jax.devices()
rng = np.random.default_rng(0)
B, T, D, V = 4, 10, 8, 48  # T = 10 with chunks of 4: a padded last chunk
h = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
w = jnp.asarray(rng.normal(size=(D, V)) * 0.7, jnp.float32)
tok = jnp.asarray(rng.integers(0, V, (B, T)), jnp.int32)
mask = jnp.asarray(rng.random((B, T)) < 0.8).at[-1].set(False)  # one row all masked
old = jnp.asarray(rng.normal(size=(B, T)) * 0.1 - 4.0, jnp.float32)
adv = jnp.asarray(rng.normal(size=(B,)), jnp.float32)
ref = old - 0.05
credax.token_logprobs_from_hidden(h, w, tok)  # the entry warm: this script tests the head


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def gathers(fn, *args) -> int:
    return jax.jit(fn).lower(*args).compile().as_text().count("all-gather")


def report(name, thunk):
    try:
        print(json.dumps({"check": name, **thunk()}), flush=True)
    except Exception as e:  # noqa: BLE001 - reported to the test
        print(json.dumps({"check": name, "error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)


# -- inside shard_map, the vocabulary over a 1-D mesh of 4 and of 8 devices ----------------------

def logprobs_case(n, chunk, temperature, entropy):
    mesh = jax.make_mesh((n,), ("v",), devices=jax.devices()[:n])
    ws = jax.device_put(w, NamedSharding(mesh, P(None, "v")))
    hr = jax.device_put(h, NamedSharding(mesh, P()))
    kw = dict(mask=mask, chunk_size=chunk, temperature=temperature, with_entropy=entropy)

    def scalar(o):  # a weighted sum of every output: its gradient reaches each one
        lp = o.logprobs if entropy else o
        out = jnp.sum(lp * jnp.linspace(0.5, 1.5, T))
        return out + (jnp.sum(o.entropy * jnp.linspace(1.5, 0.5, T)) if entropy else 0.0)

    def one(h, w):
        return scalar(credax.token_logprobs_from_hidden(h, w, tok, **kw))

    def par(h, w):
        return scalar(credax.token_logprobs_from_hidden(h, w, tok, vocab_axis="v", **kw))

    def par_out(h, w):
        o = credax.token_logprobs_from_hidden(h, w, tok, vocab_axis="v", **kw)
        return jax.tree.leaves(o)

    specs = (P(), P(None, "v"))
    out = jax.shard_map(par_out, mesh=mesh, in_specs=specs, out_specs=P())(hr, ws)
    ref_out = jax.tree.leaves(credax.token_logprobs_from_hidden(h, w, tok, **kw))
    vg = jax.shard_map(jax.value_and_grad(par, argnums=(0, 1)), mesh=mesh, in_specs=specs,
                       out_specs=(P(), (P(), P(None, "v"))))
    v, g = vg(hr, ws)
    v0, g0 = jax.value_and_grad(one, argnums=(0, 1))(h, w)
    return {"value": max(rel(a, b) for a, b in zip(out, ref_out, strict=True)),
            "grads": [rel(a, b) for a, b in zip(g, g0, strict=True)] + [rel(v, v0)],
            "gathers": gathers(vg, hr, ws)}


for n, chunk, temperature, entropy in ((4, None, None, False), (4, 4, None, False),
                                       (4, 3, 1.3, True), (8, 4, 0.7, True)):
    report(f"logprobs n={n} chunk={chunk} T={temperature} entropy={entropy}",
           lambda n=n, c=chunk, t=temperature, e=entropy: logprobs_case(n, c, t, e))


def loss_case(n, chunk, temperature, options):
    mesh = jax.make_mesh((n,), ("v",), devices=jax.devices()[:n])
    ws = jax.device_put(w, NamedSharding(mesh, P(None, "v")))
    rep = lambda x: jax.device_put(x, NamedSharding(mesh, P()))  # noqa: E731
    kw = dict(chunk_size=chunk, options=options, ref_logp=ref)

    def one(h, w, t):
        return credax.policy_loss_from_hidden(h, w, tok, old, adv, mask, temperature=t, **kw)

    def par(h, w, t):
        return credax.policy_loss_from_hidden(h, w, tok, old, adv, mask, temperature=t,
                                              vocab_axis="v", **kw)

    t = jnp.float32(temperature)
    vg = jax.shard_map(jax.value_and_grad(lambda *a: par(*a).loss, argnums=(0, 1, 2)), mesh=mesh,
                       in_specs=(P(), P(None, "v"), P()), out_specs=(P(), (P(), P(None, "v"), P())))
    v, g = vg(rep(h), ws, rep(t))
    v0, g0 = jax.value_and_grad(lambda *a: one(*a).loss, argnums=(0, 1, 2))(h, w, t)
    metrics = jax.shard_map(lambda *a: par(*a).metrics, mesh=mesh,
                            in_specs=(P(), P(None, "v"), P()), out_specs=P())(rep(h), ws, rep(t))
    m0 = one(h, w, t).metrics
    return {"value": max([rel(v, v0)] + [rel(a, b) for a, b in zip(metrics, m0, strict=True)]),
            "grads": [rel(a, b) for a, b in zip(g, g0, strict=True)],
            "gathers": gathers(vg, rep(h), ws, rep(t))}


for n, chunk, temperature, options in (
        (4, 4, 1.0, credax.LossOptions(kl_coef=0.1)),
        (8, 3, 0.7, credax.LossOptions(agg="seq-mean-token-mean", dual_clip=3.0, kl_coef=0.1)),
        # The losses that couple a row (a forward-only pass first): its log-sum-exp is the axis's.
        (4, 3, 1.0, credax.LossOptions(ratio="sequence", agg="seq-mean-token-sum")),
        (4, 4, 0.7, credax.LossOptions(surrogate="vespo"))):
    report(f"loss n={n} chunk={chunk} T={temperature} agg={options.agg} "
           f"ratio={options.ratio} surrogate={options.surrogate}",
           lambda n=n, c=chunk, t=temperature, o=options: loss_case(n, c, t, o))


def two_axes():
    # Rows over "data" (2), vocabulary over "vocab" (4): the loss's global token normaliser
    # (axis_name="data") and the vocabulary-parallel head together; the unembedding slice's
    # gradient is summed over the data shards, as autodiff does for a replicated parameter.
    mesh = jax.make_mesh((2, 4), ("data", "vocab"))
    ws = jax.device_put(w, NamedSharding(mesh, P(None, "vocab")))
    rows = lambda x: jax.device_put(x, NamedSharding(mesh, P("data")))  # noqa: E731
    kw = dict(chunk_size=4, options=credax.LossOptions(kl_coef=0.1), ref_logp=ref)

    def par(h, w, tok, old, adv, mask, ref_):
        return credax.policy_loss_from_hidden(h, w, tok, old, adv, mask, chunk_size=4,
                                              options=kw["options"], ref_logp=ref_,
                                              vocab_axis="vocab", axis_name="data").loss

    vg = jax.shard_map(jax.value_and_grad(par, argnums=(0, 1)), mesh=mesh,
                       in_specs=(P("data"), P(None, "vocab"), P("data"), P("data"), P("data"), P("data"), P("data")),
                       out_specs=(P(), (P("data"), P(None, "vocab"))))
    args = (rows(h), ws, rows(tok), rows(old), rows(adv), rows(mask), rows(ref))
    v, g = vg(*args)
    v0, g0 = jax.value_and_grad(
        lambda h, w: credax.policy_loss_from_hidden(h, w, tok, old, adv, mask, **kw).loss,
        argnums=(0, 1))(h, w)
    return {"value": rel(v, v0), "grads": [rel(a, b) for a, b in zip(g, g0, strict=True)],
            "gathers": gathers(vg, *args)}


report("loss data x vocab", two_axes)


def rows_only():
    # Rows over "data" (2), the unembedding whole and replicated, no axis argument: each shard's
    # loss is its own rows'; the replicated unembedding's gradient is the sum of the shards'
    # (autodiff's transpose of the broadcast), the hidden states' each shard's own.
    mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
    rows = lambda x: jax.device_put(x, NamedSharding(mesh, P("data")))  # noqa: E731
    kw = dict(chunk_size=4, temperature=0.8)

    def loss(h, w, tok, old, adv, mask):
        return credax.policy_loss_from_hidden(h, w, tok, old, adv, mask, **kw).loss

    vg = jax.shard_map(lambda *a: jax.value_and_grad(loss, argnums=(0, 1))(*a)[1], mesh=mesh,
                       in_specs=(P("data"), P(), P("data"), P("data"), P("data"), P("data")),
                       out_specs=(P("data"), P()))
    args = (rows(h), jax.device_put(w, NamedSharding(mesh, P())), rows(tok), rows(old), rows(adv),
            rows(mask))
    g = vg(*args)
    half = B // 2
    parts = [jax.grad(loss, argnums=(0, 1))(h[i:i + half], w, tok[i:i + half], old[i:i + half],
                                            adv[i:i + half], mask[i:i + half]) for i in (0, half)]
    g0 = (jnp.concatenate([p[0] for p in parts]), parts[0][1] + parts[1][1])
    return {"value": 0.0, "grads": [rel(a, b) for a, b in zip(g, g0, strict=True)],
            "gathers": gathers(vg, *args)}


report("loss rows only", rows_only)


def nnx_case():
    # credax.nnx with a model whose pair output holds this device's unembedding slice.
    mesh = jax.make_mesh((4,), ("v",), devices=jax.devices()[:4])
    ws = jax.device_put(w, NamedSharding(mesh, P(None, "v")))
    table = jnp.asarray(rng.normal(size=(V, D)), jnp.float32)
    old_ = jnp.concatenate([jnp.zeros((B, 1)), old[:, 1:]], axis=1)
    batch = credax.nnx.PolicyBatch(tok, mask, old_, adv)

    def model_of(w):
        return lambda tokens: (table[tokens], w)

    def par(w, fused):
        return credax.nnx.policy_loss_fn(model_of(w), batch, fused=fused, chunk_size=4,
                                         vocab_axis="v")[0]

    out = []
    for fused in (False, True):
        g = jax.shard_map(jax.value_and_grad(lambda w, f=fused: par(w, f)), mesh=mesh,
                          in_specs=P(None, "v"), out_specs=(P(), P(None, "v")))(ws)
        g0 = jax.value_and_grad(lambda w, f=fused: credax.nnx.policy_loss_fn(
            model_of(w), batch, fused=f, chunk_size=4)[0])(w)
        out.append((rel(g[0], g0[0]), rel(g[1], g0[1])))
    return {"value": max(a for a, _ in out), "grads": [b for _, b in out], "gathers": 0}


report("nnx policy_loss_fn", nnx_case)


def explicit_jit():
    # No shard_map: jit with the unembedding sharded over the vocabulary on an Explicit mesh.
    mesh = jax.make_mesh((4,), ("v",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:4])
    ws = jax.device_put(w, NamedSharding(mesh, P(None, "v")))
    rep = lambda x: jax.device_put(x, NamedSharding(mesh, P()))  # noqa: E731
    args = [rep(h), ws, rep(tok), rep(old), rep(adv), rep(mask)]

    def loss(h, w, tok, old, adv, mask):
        return credax.policy_loss_from_hidden(h, w, tok, old, adv, mask, chunk_size=4).loss

    def logprobs(h, w, tok, old, adv, mask):
        return jnp.sum(credax.token_logprobs_from_hidden(h, w, tok, mask=mask, chunk_size=4,
                                                         with_entropy=True).entropy)

    worst_v, worst_g, count = 0.0, [], 0
    for f in (loss, logprobs):
        vg = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))
        v, g = vg(*args)
        assert g[1].sharding.spec == P(None, "v"), g[1].sharding
        v0, g0 = jax.value_and_grad(f, argnums=(0, 1))(h, w, tok, old, adv, mask)
        worst_v = max(worst_v, rel(v, v0))
        worst_g += [rel(a, b) for a, b in zip(g, g0, strict=True)]
        count += gathers(vg, *args)
    return {"value": worst_v, "grads": worst_g, "gathers": count}


report("explicit mesh jit", explicit_jit)

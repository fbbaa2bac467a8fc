"""credax.torch: torch tensors in and out, DLPack without copies, exact 64-bit ids, the traps.

The bridge adds no math, so most expected values are credax's own on the same data as NumPy
(the math itself is tested against NumPy references elsewhere); the 64-bit id, mutation and
stride cases have hand-worked expectations.

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

import pathlib
import re
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.probes import Probes, raises

torch = pytest.importorskip("torch")

import credax  # noqa: E402
import credax.torch as ct  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
B, K, T, M = 8, 4, 12, 3


def _batch(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, K + 1, size=B)
    turn_mask = np.arange(K)[None, :] < lengths[:, None]
    token_turn = np.full((B, T), -1, dtype=np.int32)
    for b in range(B):
        for k in range(int(lengths[b])):
            token_turn[b, 2 + 2 * k: 4 + 2 * k] = k
    return dict(
        rewards=rng.choice([0.0, 0.35, 0.5, 1.0], size=B).astype(np.float32),
        rewards2=rng.random((B, 2), dtype=np.float32),
        ids=np.array([3, 3, -1, -1, 10**6, 10**6, 10**6, 42], dtype=np.int32),
        scores=np.where(turn_mask, rng.choice([0.0, 1 / 3, 0.5, 1.0], size=(B, K)), 0).astype(np.float32),
        turn_mask=turn_mask,
        alt_scores=rng.random((B, K, M), dtype=np.float32),
        alt_mask=rng.random((B, K, M)) < 0.6,
        roles=np.where(turn_mask, rng.integers(-1, 4, size=(B, K)), -1).astype(np.int32),
        anchors=rng.integers(0, 3, size=(B, K)).astype(np.int32),
        token_turn=token_turn,
        logp=(-rng.random((B, T)) * 2).astype(np.float32),
        outcome_adv=rng.standard_normal(B).astype(np.float32),
        values=rng.standard_normal((B, K)).astype(np.float32),
    )


def _calls(f, a):
    """Every bridged function on batch ``a`` (NumPy or torch), through namespace ``f``."""
    return {
        "grpo_advantages": f.grpo_advantages(a.rewards, a.ids, normalization=credax.presets.VERL),
        "rloo_advantages": f.rloo_advantages(a.rewards, a.ids),
        "gdpo_advantages": f.gdpo_advantages(a.rewards2, a.ids, weights=(1.0, 0.5)),
        "degenerate_groups": f.degenerate_groups(a.rewards, a.ids),
        "group_normalize": f.group_normalize(a.scores, a.ids, a.turn_mask,
                                             normalization=credax.Normalization(ddof=0)),
        "group_mean": f.group_mean(a.scores, a.ids, a.turn_mask),
        "group_count": f.group_count(a.ids, a.turn_mask),
        "peer_mean": f.peer_mean(a.scores, a.ids, a.turn_mask),
        "best_prior": f.best_prior(a.scores, a.turn_mask),
        "future_best": f.future_best(a.scores, a.turn_mask),
        "discount_weights": f.discount_weights(K, 0.9),
        "discounted_returns": f.discounted_returns(a.scores, a.turn_mask, gamma=0.9),
        "broadcast_to_tokens": f.broadcast_to_tokens(a.scores, a.token_turn),
        "turn_surprisal": f.turn_surprisal(a.logp, a.token_turn, num_turns=K),
        "retrospective_credit": f.retrospective_credit(a.scores, a.turn_mask),
        "hindsight_credit": f.hindsight_credit(a.scores, a.turn_mask, a.ids),
        "counterfactual_credit": f.counterfactual_credit(a.scores, a.alt_scores, a.alt_mask),
        "select_top_surprisal": f.select_top_surprisal(a.scores, a.turn_mask, a.ids, budget=2,
                                                       scope="group"),
        "tcpo_advantages": f.tcpo_advantages(a.scores, a.turn_mask, a.ids, alt_scores=a.alt_scores,
                                             alt_mask=a.alt_mask, selected=a.turn_mask, gamma=0.9),
        "raw_score_credit": f.raw_score_credit(a.scores, a.turn_mask),
        "adjacent_delta_credit": f.adjacent_delta_credit(a.scores, a.turn_mask),
        "role_credit": f.role_credit(a.roles, a.turn_mask),
        "triage_advantages": f.triage_advantages(a.outcome_adv, a.roles, a.turn_mask, lam=0.2),
        "scalar_process_advantages": f.scalar_process_advantages(a.outcome_adv, a.scores,
                                                                 a.turn_mask, lam=0.3),
        "fit_role_constants": f.fit_role_constants(a.scores, a.roles, a.turn_mask),
        "optimal_mixing_weight": f.optimal_mixing_weight(a.scores, a.roles, a.turn_mask),
        "judge_windows": f.judge_windows(a.turn_mask, before=1, after=1),
        "mt_grpo_advantages": f.mt_grpo_advantages(a.scores, a.rewards, a.turn_mask, a.ids),
        "gigpo_advantages": f.gigpo_advantages(a.rewards, a.scores, a.anchors, a.turn_mask, a.ids),
        "validate_turns": f.validate_turns(a.scores, a.turn_mask, a.ids, token_turn=a.token_turn),
        "validate_roles": f.validate_roles(a.roles, a.turn_mask),
        "gae_advantages": f.gae_advantages(a.scores, a.values, a.turn_mask, gamma=0.9, lam=0.8),
        "turn_values": f.turn_values(a.logp, a.token_turn, num_turns=K),
        "turn_gae_advantages": f.turn_gae_advantages(a.scores, a.logp, a.token_turn, a.turn_mask,
                                                     gamma=0.9, lam=0.8),
        "vapo_lambda": f.vapo_lambda(a.turn_mask, alpha=0.3),
        "hgpo_advantages": f.hgpo_advantages(a.rewards, a.scores, a.anchors, a.turn_mask, a.ids),
        "shrinkage_advantages": f.shrinkage_advantages(a.rewards, a.ids),
        "shrinkage_baseline": f.shrinkage_baseline(a.rewards, a.ids, leave_one_out=True),
    }


def _as_torch(batch: dict, int_dtype=torch.int64) -> types.SimpleNamespace:
    out = {}
    for name, x in batch.items():
        t = torch.from_numpy(np.ascontiguousarray(x))
        if t.dtype == torch.int32:
            t = t.to(int_dtype)  # torch code holds int64 ids and indices
        out[name] = t
    return types.SimpleNamespace(**out)


def test_every_bridged_function_matches_credax_and_returns_torch():
    batch = _batch()
    want = _calls(credax, types.SimpleNamespace(**batch))
    got = _calls(ct, _as_torch(batch))
    # Every public function of credax is bridged unless deliberately JAX-only or host-side;
    # those in _calls (all of credax's functions when it was written) are checked value by value.
    # A function added to credax later is bridged automatically; give it a line in _calls.
    functions = {n for n in credax.__all__ if callable(getattr(credax, n))
                 and not isinstance(getattr(credax, n), type)}
    bridged = functions - ct.JAX_ONLY - ct.HOST_SIDE
    assert bridged <= set(ct.__all__)
    assert set(got) <= bridged and len(got) == 38
    for name in want:
        w, g = want[name], got[name]
        if isinstance(w, tuple):
            assert type(g) is type(w), name  # NamedTuples keep their type
        else:
            assert (w is None) == (g is None), name
        leaves_w, leaves_g = jax.tree_util.tree_leaves(w), jax.tree_util.tree_leaves(g)
        assert len(leaves_w) == len(leaves_g), name
        for lw, lg in zip(leaves_w, leaves_g, strict=True):
            assert isinstance(lg, torch.Tensor) and lg.device.type == "cpu", name
            assert str(lg.dtype).removeprefix("torch.") == str(lw.dtype), name
            np.testing.assert_array_equal(lg.numpy(), np.asarray(lw), err_msg=name)


def test_hand_worked_grpo_through_torch():
    # Group 2**40: rewards {1, 0}: mean .5, unbiased std sqrt(.5); (1-.5)/(.7071+1e-6) = .70711.
    # Group 7: {.5, .5} has zero spread -> exactly 0 (credax's rule, whatever eps).
    out = ct.grpo_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), torch.tensor([2**40, 2**40, 7, 7]))
    np.testing.assert_allclose(out.numpy(), [0.5 / (0.5**0.5 + 1e-6), -0.5 / (0.5**0.5 + 1e-6), 0, 0],
                               rtol=1e-6)
    assert out.dtype == torch.float32


def test_64_bit_ids_that_differ_only_above_bit_32_stay_apart():
    base = 123
    ids = torch.tensor([base, base + 2**32, base, base + 2**32, base + 2**40, base + 2**40])
    # The trap this guards against: JAX without x64 narrows int64 to int32 and merges them.
    assert not jax.config.jax_enable_x64
    narrowed = np.asarray(jax.dlpack.from_dlpack(ids))
    assert (narrowed == base).all()
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.25, 0.75])
    # Three groups of two, {1, 0}, {0, 1}, {.25, .75}: each gives +-.5/(sqrt(.5)*... ) pairs.
    s = 0.5 ** 0.5
    want = [0.5 / (s + 1e-6), -0.5 / (s + 1e-6), -0.5 / (s + 1e-6), 0.5 / (s + 1e-6),
            -0.25 / (0.25 * 2**0.5 + 1e-6), 0.25 / (0.25 * 2**0.5 + 1e-6)]
    np.testing.assert_allclose(ct.grpo_advantages(rewards, ids).numpy(), want, rtol=1e-5)
    g = ct.groups(ids)
    assert g.num_groups == 6 and len(set(np.asarray(g.index).tolist())) == 3
    # anchor ids (GiGPO) are densified the same way: two anchors differing above bit 32 give
    # singleton anchor groups (step advantage 0); equal anchors form one group.
    step = torch.tensor([[1.0], [0.0], [0.0], [1.0], [0.0], [0.0]])
    anchors = torch.tensor([[base], [base + 2**32], [base], [base + 2**32], [7], [7]])
    mask = torch.ones(6, 1, dtype=torch.bool)
    one = torch.zeros(6, dtype=torch.int64)
    got = ct.gigpo_advantages(torch.zeros(6), step, anchors, mask, one, omega=1.0)
    want_step = credax.gigpo_advantages(np.zeros(6, np.float32), step.numpy(),
                                        np.array([[0], [1], [0], [1], [2], [2]], np.int32),
                                        mask.numpy(), np.zeros(6, np.int32))
    np.testing.assert_array_equal(got.numpy(), np.asarray(want_step))
    assert got.abs().sum() > 0  # anchor groups {0, 2} and {1, 3} have spread


def test_int64_non_id_inputs_are_checked_then_narrowed():
    tv = torch.tensor([[1.0, 2.0]])
    assert ct.broadcast_to_tokens(tv, torch.tensor([[1, 0, -1]])).tolist() == [[2.0, 1.0, 0.0]]
    with pytest.raises(ValueError, match="`token_turn` holds values in .*outside int32"):
        ct.broadcast_to_tokens(tv, torch.tensor([[2**32, 0, -1]]))  # would wrap to turn 0


def test_zero_copy_both_ways_and_outputs_never_alias_inputs():
    x = torch.rand(64, 16)
    a = ct.to_jax(x)
    assert a.unsafe_buffer_pointer() == x.data_ptr()
    y = jnp.arange(32.0)
    assert ct.to_torch(y).data_ptr() == y.unsafe_buffer_pointer()
    mask = torch.ones(64, 16, dtype=torch.bool)
    with pytest.warns(DeprecationWarning, match="`center=False` is deprecated"):  # the identity
        identity = credax.Normalization(center=False, scale="none")
        out = ct.group_normalize(x, torch.arange(64) // 4, mask, normalization=identity)
    np.testing.assert_array_equal(out.numpy(), x.numpy())
    assert out.data_ptr() != x.data_ptr()


def test_non_contiguous_inputs():
    batch = _batch(1)
    want = credax.tcpo_advantages(batch["scores"], batch["turn_mask"], batch["ids"]).advantages
    # a transposed copy and a strided view of a wider buffer hold the same values
    scores_t = torch.from_numpy(batch["scores"].T.copy()).T
    wide = torch.zeros(B, 2 * K)
    wide[:, ::2] = torch.from_numpy(batch["scores"])
    strided = wide[:, ::2]
    assert not scores_t.is_contiguous() and not strided.is_contiguous()
    mask = torch.from_numpy(batch["turn_mask"])
    ids = torch.from_numpy(batch["ids"]).to(torch.int64)
    with pytest.raises(Exception, match="striding"):  # the trap: DLPack refuses strided views
        jax.dlpack.from_dlpack(strided)
    for scores in (scores_t, strided):
        got = ct.tcpo_advantages(scores, mask, ids).advantages
        np.testing.assert_array_equal(got.numpy(), np.asarray(want))


def test_overwriting_the_input_right_after_the_call_is_safe():
    # JAX dispatches asynchronously and reads the aliased torch buffer; the bridge waits for the
    # results before returning, so refilling the input right away cannot change them.
    n = 1 << 18
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        rewards = torch.rand(n, generator=gen)
        ids = torch.arange(n) // 8
        want = credax.grpo_advantages(rewards.numpy().copy(), (ids // 1).numpy().astype(np.int32))
        got = ct.grpo_advantages(rewards, ids)
        rewards.fill_(0.5)  # the producer reuses its buffer
        np.testing.assert_array_equal(got.numpy(), np.asarray(want))


def test_dtypes_follow_credax():
    r = torch.tensor([1.0, 0.0, 0.5, 0.25])
    ids = torch.tensor([0, 0, 1, 1])
    for dtype, jdtype in ((torch.bfloat16, jnp.bfloat16), (torch.float16, jnp.float16)):
        out = ct.grpo_advantages(r.to(dtype), ids)
        assert out.dtype == dtype
        want = credax.grpo_advantages(jnp.asarray(r.numpy()).astype(jdtype), ids.numpy())
        np.testing.assert_array_equal(out.float().numpy(), np.asarray(want).astype(np.float32))
    # float64 without x64: computed in float32, as for a float64 NumPy array
    assert ct.grpo_advantages(r.double(), ids).dtype == torch.float32
    # int and bool rewards give float32 (credax's rule for non-floating inputs)
    assert ct.grpo_advantages(torch.tensor([1, 0, 1, 1]), ids).dtype == torch.float32
    # a tensor that requires grad is detached, not refused
    assert not ct.grpo_advantages(r.clone().requires_grad_(), ids).requires_grad


def test_errors_are_clear():
    r, ids = torch.rand(4), torch.tensor([0, 0, 1, 1])
    with pytest.raises(TypeError, match=re.escape("credax.torch.grpo_advantages")):
        credax.grpo_advantages(r, ids)
    with pytest.raises(TypeError, match="`group_ids` is a torch.Tensor.*credax.torch.groups"):
        credax.groups(ids)
    with pytest.raises(TypeError, match="`turn_mask` is a torch.Tensor"):
        credax.best_prior(np.zeros((1, 2), np.float32), torch.ones(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="`group_ids` is a meta tensor"):  # no data to compute on
        ct.grpo_advantages(r, torch.empty(4, dtype=torch.int64, device="meta"))
    with pytest.raises(TypeError, match="`group_ids` must be an integer tensor"):
        ct.grpo_advantages(r, ids.float())
    # credax's own checks still speak through the bridge
    with pytest.raises(ValueError, match="`rewards`"):
        ct.grpo_advantages(torch.rand(3), ids)


def test_import_credax_never_imports_torch():
    code = "import sys, credax; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


def test_torch_loop_example_runs(capsys):
    import runpy

    runpy.run_path(str(ROOT / "examples" / "torch_loop.py"), run_name="__main__")
    out = capsys.readouterr().out
    # the example trains a tiny policy; it prints the success rate before and after
    first, last = re.findall(r"success ([0-9.]+)", out)[0], re.findall(r"success ([0-9.]+)", out)[-1]
    assert float(last) > float(first)


def test_bridge_benchmark_smoke(tmp_path, capsys):
    # toy sizes, not a timing claim: every implementation agrees with the float64 reference and
    # the bridge's ratios to the jitted call alone are reported
    import json

    from benchmarks import bridge

    assert bridge.main(["--preset", "quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "bridge-cpu.json").read_text())
    assert [c["case"] for c in data["cases"]] == ["grpo", "grpo", "tcpo"]
    for case in data["cases"]:
        assert all(a["ok"] for a in case["agreement"].values())
        assert {"bridge_int64", "bridge_groups", "credax_jit"} <= set(case["results"])
        assert "bridge_int64/credax_jit" in case["ratios"]
    assert "bridge_int64 / credax_jit" in capsys.readouterr().out


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


R4 = np.array([1.0, 0.0, 0.5, 0.5], np.float32)
cv = None


def _verl():
    global cv
    if cv is None:
        pytest.importorskip("torch")
        pytest.importorskip("verl")
        import credax.verl as module
        cv = module
    return cv


def _obj(values):
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _ct():
    pytest.importorskip("torch")
    import credax.torch as ct
    return ct


for _dt, _vals in (("uint8", [200, 200, 7, 7]), ("uint16", [60000, 60000, 7, 7]),
                   ("uint32", [2**32 - 1, 2**32 - 1, 7, 7]), ("uint64", [2**63, 2**63, 7, 7])):

    def _p(dt=_dt, vals=_vals):
        torch = pytest.importorskip("torch")  # skip without the extra, never an ImportError
        ids = torch.tensor(vals, dtype=getattr(torch, dt))
        out = _ct().grpo_advantages(torch.tensor(R4), ids)
        np.testing.assert_allclose(out.numpy(), [0.7071, -0.7071, 0.0, 0.0], atol=1e-4)

    probe("torch", f"unsigned_group_ids_{_dt}")(_p)


for _dt in ("uint8", "uint16", "uint32", "uint64"):

    def _p(dt=_dt):
        # Before: uint32 / uint64 raised NotImplementedError ("aminmax_cpu" not implemented).
        torch = pytest.importorskip("torch")  # skip without the extra, never an ImportError
        tt = torch.tensor([[0, 1, 1, 0]], dtype=getattr(torch, dt))
        out = _ct().broadcast_to_tokens(torch.tensor([[3.0, 4.0]]), tt)
        assert out.tolist() == [[3.0, 4.0, 4.0, 3.0]]

    probe("torch", f"unsigned_token_turn_{_dt}")(_p)


for _dt, _big in (("uint32", 2**32 - 1), ("uint64", 2**64 - 1), ("uint64_top", 2**63)):

    def _p(dt=_dt, big=_big):
        torch = pytest.importorskip("torch")  # skip without the extra, never an ImportError
        tt = torch.tensor([[0, 1, big]], dtype=getattr(torch, dt.removesuffix("_top")))
        raises(ValueError, r"`token_turn`.*int32", _ct().broadcast_to_tokens,
               torch.tensor([[3.0, 4.0]]), tt)

    probe("torch", f"unsigned_token_turn_beyond_int32_{_dt}")(_p)


def _meta_calls():
    torch = pytest.importorskip("torch")  # skip without the extra, never an ImportError
    ct = _ct()
    meta = torch.empty(4, device="meta")
    meta_ids = torch.empty(4, dtype=torch.int64, device="meta")
    return {
        "rewards": lambda: ct.grpo_advantages(meta, torch.tensor([0, 0, 1, 1])),
        "group_ids": lambda: ct.grpo_advantages(torch.tensor(R4), meta_ids),
        "both": lambda: ct.grpo_advantages(meta, meta_ids),
        "groups": lambda: ct.groups(meta_ids),
        "to_jax": lambda: ct.to_jax(meta, "rewards"),
        "dense_ids": lambda: ct.dense_ids(meta_ids, "group_ids"),
        "turns_from_response_mask": lambda: _verl().turns_from_response_mask(
            torch.ones(2, 3, device="meta")),
        "from_verl": lambda: _verl().from_verl(torch.zeros(2, 3, device="meta"),
                                               torch.ones(2, 3, device="meta"), _obj(["a", "b"])),
    }


for _label in ("rewards", "group_ids", "both", "groups", "to_jax", "dense_ids",
               "turns_from_response_mask", "from_verl"):

    def _p(label=_label):
        # Before: "all tensors must be on one device", "Unknown device type meta for Dlpack" or
        # "Tensor.item() cannot be called on meta tensors".
        raises(ValueError, r"`\w+` is a meta tensor", _meta_calls()[label])

    probe("torch", f"meta_{_label}")(_p)


@probe("torch", "float64_beyond_float32")
def _():
    torch = pytest.importorskip("torch")  # skip without the extra, never an ImportError
    x = torch.tensor([1e39, 0.0, 0.5, 0.5], dtype=torch.float64)
    raises(ValueError, r"`rewards` holds 1e\+39.*float32", _ct().grpo_advantages, x,
           torch.tensor([0, 0, 1, 1]))


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

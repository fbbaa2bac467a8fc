"""credax inside verl: the estimators registered in verl's own registry, run through verl's own code.

verl is installed without its training stack (``make test``: the ``verl`` extra, then
``pip install --no-deps verl==0.9.1``). Its pipeline function ``compute_advantage`` lives in
``verl/trainer/ppo/ray_trainer.py``, whose module imports Ray workers, datasets and the rollout
stack; so that function (and its helper ``compute_response_mask``) is compiled from verl's
installed source file, unchanged, into a namespace holding the few names it uses. Everything it
calls — ``DataProto``, ``core_algos.compute_grpo_outcome_advantage``, ``get_adv_estimator_fn`` —
is verl's real code.

Bad input: the probes of this module's functions are the table ``probe`` at the end, run by
``test_bad_input`` (the rule, in tests/probes.py: a subject's probes in its own test file, a
sweep of one kind of bad input across many functions in tests/test_bad_input.py).
"""

import ast
import pathlib

import numpy as np
import pytest

from tests.probes import NAN, Probes, raises

torch = pytest.importorskip("torch")
verl = pytest.importorskip("verl")

from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

import credax  # noqa: E402
import credax.verl as cv  # noqa: E402

PARITY_CASES = 400
# Batch sizes the parity cases draw from: credax compiles once per batch size (the outcome is
# [B]; the response length is verl's torch side only and stays free), so a few fixed sizes from
# the smallest (2) to the largest (64) keep the 400 random group structures while compiling ~15
# programs instead of one per case.
PARITY_BATCHES = (2, 3, 16, 33, 64)


def _verl_pipeline():
    """verl's ``compute_advantage`` and ``compute_response_mask``, from its installed source."""
    path = pathlib.Path(core_algos.__file__).with_name("ray_trainer.py")
    tree = ast.parse(path.read_text())
    wanted = {"compute_advantage", "compute_response_mask"}
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {n.name for n in nodes} == wanted
    module = ast.Module(body=nodes, type_ignores=[])
    namespace = {"DataProto": DataProto, "core_algos": core_algos, "AlgoConfig": AlgoConfig,
                 "AdvantageEstimator": core_algos.AdvantageEstimator, "Optional": __import__(
                     "typing").Optional}
    exec(compile(module, str(path), "exec"), namespace)  # noqa: S102
    return namespace["compute_advantage"]


compute_advantage = _verl_pipeline()


def _outcome_batch(rng, batch, length, ties: str):
    """``batch`` rows: random prompts of random group sizes (1..8, singletons included; the last
    group cut to fit), responses of random length with the score on the last response token, as
    verl's reward managers write it."""
    sizes = []
    while sum(sizes) < batch:
        sizes.append(int(rng.integers(1, 9)))
    sizes[-1] -= sum(sizes) - batch
    uid_of_group = [f"uid-{rng.integers(10**9)}-{g}" for g in range(len(sizes))]
    uids = np.array([u for u, n in zip(uid_of_group, sizes, strict=True) for _ in range(n)],
                    dtype=object)
    rng.shuffle(uids)
    b = len(uids)
    if ties == "continuous":
        scores = rng.random(b)
    elif ties == "binary":
        scores = rng.integers(0, 2, size=b).astype(float)
    else:  # dyadic levels: ties whose mean is exact in float32
        scores = rng.choice([0.0, 0.25, 0.5, 1.0], size=b)
    lengths = rng.integers(1, length + 1, size=b)
    mask = np.arange(length)[None, :] < lengths[:, None]
    rewards = np.zeros((b, length), np.float32)
    rewards[np.arange(b), lengths - 1] = scores
    tensors = {"token_level_rewards": torch.from_numpy(rewards),
               "response_mask": torch.from_numpy(mask.astype(np.int64))}
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids})


def _copy(data):
    return DataProto.from_dict(tensors={k: v.clone() for k, v in data.batch.items()},
                               non_tensors=dict(data.non_tensor_batch))


def test_all_estimators_are_in_verls_registry():
    for method in cv.METHODS:
        fn = core_algos.get_adv_estimator_fn(f"credax_{method}")
        assert fn is cv.ESTIMATORS[f"credax_{method}"]
        assert core_algos.ADV_ESTIMATOR_REGISTRY[f"credax_{method}"] is fn


def test_grpo_reproduces_verls_own_estimator_through_verls_pipeline():
    rng = np.random.default_rng(2026)
    worst = 0.0
    cases = 0
    for case in range(PARITY_CASES):
        ties = ("continuous", "binary", "dyadic")[case % 3]
        norm = case % 4 != 3  # a quarter of the cases are Dr. GRPO (no std)
        config = AlgoConfig(norm_adv_by_std_in_grpo=norm)
        data = _outcome_batch(rng, int(rng.choice(PARITY_BATCHES)), int(rng.integers(1, 12)), ties)
        assert len(data) in PARITY_BATCHES
        theirs = compute_advantage(_copy(data), core_algos.AdvantageEstimator.GRPO,
                                   norm_adv_by_std_in_grpo=norm, config=config)
        ours = compute_advantage(_copy(data), "credax_grpo", norm_adv_by_std_in_grpo=norm,
                                 config=config)
        a, b = theirs.batch["advantages"].numpy(), ours.batch["advantages"].numpy()
        assert a.shape == b.shape and ours.batch["advantages"].dtype == torch.float32
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg=f"case {case}")
        np.testing.assert_array_equal(ours.batch["returns"].numpy(), b)
        worst = max(worst, float(np.max(np.abs(a - b))))
        cases += 1
    print(f"verl GRPO parity: {cases} cases, max |credax - verl| = {worst:.3g}")
    assert cases == PARITY_CASES


def test_zero_spread_groups_are_exactly_zero_where_verl_keeps_float_residue():
    # Seven identical scores of 0.95: verl's float32 mean leaves a residue (torch 2.13.0 here),
    # which it divides by (std 0 + 1e-6) into a spurious advantage of about 0.056; credax compares
    # the group's max and min and returns exactly 0 (its documented rule). Ties at exact (dyadic)
    # values agree exactly, as the parity test shows.
    rewards = torch.zeros(7, 2)
    rewards[:, -1] = 0.95
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards,
                                        "response_mask": torch.ones(7, 2, dtype=torch.int64)},
                               non_tensors={"uid": np.array(["p"] * 7, dtype=object)})
    ours = compute_advantage(_copy(data), "credax_grpo", config=AlgoConfig())
    assert (ours.batch["advantages"] == 0).all()
    theirs = compute_advantage(_copy(data), core_algos.AdvantageEstimator.GRPO)
    assert 0 < theirs.batch["advantages"].abs().max() < 0.1


def _multi_turn(rng, prompts=5, group=4, max_turns=4, obs=2, tok=(1, 3)):
    """A multi-turn response batch built turn by turn: each turn is a run of model tokens (mask 1)
    followed by an observation (mask 0, except after the last turn); the turn's verifier score
    sits on its last model token. Returns the DataProto and the per-turn truth."""
    b = prompts * group
    uids = np.array([f"q{p}" for p in range(prompts) for _ in range(group)], dtype=object)
    n_turns = rng.integers(1, max_turns + 1, size=b)
    scores = np.zeros((b, max_turns), np.float32)
    layouts = []
    for i in range(b):
        level = 0.0
        row = []
        for k in range(n_turns[i]):
            level = float(np.clip(level + rng.choice([-1, 0, 1, 2]) / 4, 0, 1))
            scores[i, k] = level
            row += [k] * int(rng.integers(*tok) + 1)
            if k + 1 < n_turns[i]:
                row += [-1] * obs
        layouts.append(row)
    length = max(len(r) for r in layouts) + 1
    token_turn = np.full((b, length), -1, np.int64)
    for i, row in enumerate(layouts):
        token_turn[i, : len(row)] = row
    rewards = np.zeros((b, length), np.float32)
    for i in range(b):
        for k in range(n_turns[i]):
            last = np.flatnonzero(token_turn[i] == k)[-1]
            rewards[i, last] = scores[i, k]
    turn_mask = np.arange(max_turns)[None, :] < n_turns[:, None]
    tensors = {"token_level_rewards": torch.from_numpy(rewards),
               "response_mask": torch.from_numpy((token_turn >= 0).astype(np.int64))}
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids})
    group_ids = np.repeat(np.arange(prompts), group).astype(np.int32)
    return data, dict(scores=scores, turn_mask=turn_mask, token_turn=token_turn,
                      group_ids=group_ids, n_turns=n_turns)


def _to_tokens(turn_values, token_turn):
    """Hand broadcast: token t of row b gets turn_values[b, token_turn[b, t]], 0 off the turns."""
    out = np.zeros(token_turn.shape, np.float32)
    for b in range(token_turn.shape[0]):
        for t in range(token_turn.shape[1]):
            if token_turn[b, t] >= 0:
                out[b, t] = turn_values[b, token_turn[b, t]]
    return out


def test_tcpo_end_to_end_through_verls_pipeline():
    rng = np.random.default_rng(7)
    for _ in range(5):
        data, truth = _multi_turn(rng)
        out = compute_advantage(data, "credax_tcpo", config=AlgoConfig())
        want_turns = credax.tcpo_advantages(truth["scores"], truth["turn_mask"],
                                            truth["group_ids"]).advantages
        want = _to_tokens(np.asarray(want_turns), truth["token_turn"])
        np.testing.assert_allclose(out.batch["advantages"].numpy(), want, rtol=1e-6, atol=1e-6)
        assert out.batch["advantages"].abs().sum() > 0


def _ragged(rows):
    out = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        out[i] = list(r)
    return out


def test_triage_end_to_end_through_the_registry_with_labels():
    rng = np.random.default_rng(11)
    data, truth = _multi_turn(rng)
    labels = [[str(rng.choice(["D", "exploration", "No progress", "regression"]))
               for _ in range(n)] for n in truth["n_turns"]]
    data.non_tensor_batch["turn_roles"] = _ragged(labels)
    out = cv.compute_advantage(data, "credax_triage", config=AlgoConfig())
    # the outcome is the response's total reward (verl's score): the sum of its turn scores
    outcome = np.where(truth["turn_mask"], truth["scores"], 0).sum(axis=1).astype(np.float32)
    a = credax.grpo_advantages(outcome, truth["group_ids"], normalization=credax.presets.VERL)
    roles = credax.parse_roles(labels, num_turns=4)
    want_turns = credax.triage_advantages(a, roles, truth["turn_mask"], lam=0.2)
    want = _to_tokens(np.asarray(want_turns), truth["token_turn"])
    np.testing.assert_allclose(out.batch["advantages"].numpy(), want, rtol=1e-6, atol=1e-6)
    # verl's own pipeline does not forward the labels: a clear error says what to call instead
    data.non_tensor_batch.pop("turn_roles")
    with pytest.raises(ValueError, match=r"turn_roles.*credax\.verl\.compute_advantage"):
        compute_advantage(data, "credax_triage", config=AlgoConfig())


def test_mt_grpo_and_gigpo_end_to_end():
    rng = np.random.default_rng(3)
    data, truth = _multi_turn(rng)
    outcome = np.where(truth["turn_mask"], truth["scores"], 0).sum(axis=1).astype(np.float32)
    out = compute_advantage(_copy(data), "credax_mt_grpo", config=AlgoConfig())
    want = credax.mt_grpo_advantages(truth["scores"], outcome, truth["turn_mask"],
                                     truth["group_ids"])
    np.testing.assert_allclose(out.batch["advantages"].numpy(),
                               _to_tokens(np.asarray(want), truth["token_turn"]), atol=1e-6)
    # GiGPO anchors: hashable observations (strings), equal strings = one anchor state
    obs = [[f"state-{int(s * 4)}" for s in truth["scores"][i, :n]]
           for i, n in enumerate(truth["n_turns"])]
    data.non_tensor_batch["anchor_ids"] = _ragged(obs)
    out = cv.compute_advantage(data, "credax_gigpo", config=AlgoConfig())
    codes = {}
    anchors = np.array([[codes.setdefault(o, len(codes)) for o in row] + [-1] * (4 - len(row))
                        for row in obs], np.int32)
    want = credax.gigpo_advantages(outcome, truth["scores"], anchors, truth["turn_mask"],
                                   truth["group_ids"])
    np.testing.assert_allclose(out.batch["advantages"].numpy(),
                               _to_tokens(np.asarray(want), truth["token_turn"]), atol=1e-6)


def test_turn_scores_from_the_non_tensor_batch_and_rloo():
    rng = np.random.default_rng(5)
    data, truth = _multi_turn(rng)
    other = np.where(truth["turn_mask"], 1 - truth["scores"], 0).astype(np.float32)
    data.non_tensor_batch["turn_scores"] = _ragged(
        [other[i, :n] for i, n in enumerate(truth["n_turns"])])
    out = cv.compute_advantage(_copy(data), "credax_tcpo", config=AlgoConfig())
    want = credax.tcpo_advantages(other, truth["turn_mask"], truth["group_ids"]).advantages
    np.testing.assert_allclose(out.batch["advantages"].numpy(),
                               _to_tokens(np.asarray(want), truth["token_turn"]), atol=1e-6)
    out = compute_advantage(_copy(data), "credax_rloo", config=AlgoConfig())
    outcome = np.where(truth["turn_mask"], truth["scores"], 0).sum(axis=1).astype(np.float32)
    rloo = np.asarray(credax.rloo_advantages(outcome, truth["group_ids"]))
    mask = truth["token_turn"] >= 0
    np.testing.assert_allclose(out.batch["advantages"].numpy(), np.where(mask, rloo[:, None], 0),
                               atol=1e-6)


def test_adapter_rules():
    # turns are runs of response_mask == 1; K rounds up to a power of two
    tt, tm = cv.turns_from_response_mask(torch.tensor([[1, 1, 0, 1, 0, 1], [0, 1, 0, 0, 0, 0]]))
    assert tt.tolist() == [[0, 0, -1, 1, -1, 2], [-1, 0, -1, -1, -1, -1]]
    assert tm.tolist() == [[True, True, True, False], [True, False, False, False]]
    with pytest.raises(ValueError, match="row 0 has 3 turns, more than num_turns=2"):
        cv.turns_from_response_mask(torch.tensor([[1, 0, 1, 0, 1]]), num_turns=2)
    # uids of any width or type are densified exactly: ints differing only above bit 32
    ids = cv.uid_to_group_ids(np.array([5, 5 + 2**32, 5], dtype=np.int64))
    assert ids.tolist() == [0, 1, 0]
    # a reward outside every turn is refused, not dropped
    with pytest.raises(ValueError, match="row 0, token 1.*response_mask"):
        cv.from_verl(torch.tensor([[0.0, 1.0]]), torch.tensor([[1, 0]]), np.array(["a"]))
    # per-turn fields must have one value per turn
    with pytest.raises(ValueError, match=r"'turn_scores'\] row 0 has 1 values.*2 turns"):
        cv.from_verl(torch.zeros(1, 3), torch.tensor([[1, 0, 1]]), np.array(["a"]),
                     {"turn_scores": _ragged([[0.5]])})
    with pytest.raises(ValueError, match="`index`"):
        cv.from_verl(torch.zeros(1, 3), torch.ones(1, 3), None)
    with pytest.raises(ValueError, match="`method` must be one of"):
        cv.make_estimator("ppo")


def test_register_a_variant_and_verls_duplicate_rule():
    fn = cv.register("credax_tcpo_test_variant", "tcpo", gamma=0.5, normalize=False)
    assert core_algos.get_adv_estimator_fn("credax_tcpo_test_variant") is fn
    with pytest.raises(ValueError, match="already been registered"):
        cv.register("credax_tcpo_test_variant", "tcpo", gamma=0.9)
    # the variant's options reach credax: progress-only credit with gamma = 0.5
    response_mask = torch.tensor([[1, 0, 1], [1, 0, 1]])
    rewards = torch.tensor([[0.5, 0.0, 1.0], [0.0, 0.0, 0.0]])
    adv, _ = fn(token_level_rewards=rewards, response_mask=response_mask,
                index=np.array(["a", "a"], dtype=object))
    # row 0: Δ = (.5, .5), hindsight 0 (not eligible); times γ^k = (1, .5) -> (.5, .25).
    # row 1: scores 0, 0: eligible stalls, future best 0 = peer (row 0 is not eligible) -> 0.
    assert adv.tolist() == [[0.5, 0.0, 0.25], [0.0, 0.0, 0.0]]


# ============================================================================================
# Bad input: this module's probes (tests/probes.py), by kind of bad input.
# ============================================================================================

probe = Probes()


def _verl():
    return cv  # credax.verl (imported above, after torch and verl)


def _uids(values):
    return _verl().uid_to_group_ids(values).tolist()


def _obj(values):
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


_nan = float("nan")


NAN_UIDS = {
    "same_object": _obj([_nan, _nan, "b"]),
    "distinct_objects": _obj([float("nan"), float("nan"), "b"]),
    "float_array": np.array([np.nan, np.nan, 1.0]),
    "numpy_nan": _obj([np.float32("nan"), "a", "a"]),
    "nan_in_tuple": [(1, _nan), (1, _nan), (2, 0)],
    "nan_deep_in_tuple": [("a", (1, float("nan"))), ("a", (1, 2.0)), "b"],
}


for _label, _values in NAN_UIDS.items():

    def _p(values=_values):
        # Before: the same NaN object merged rows, distinct ones split them (NaN != NaN).
        raises(ValueError, r"`index`.*row \d.*NaN", _uids, values)

    probe("ids", f"verl_nan_uid_{_label}")(_p)


# (uids, dense ids by type and value: 1, 1.0, True and "1" are four prompts; NumPy scalars count
# as the Python values they hold; tuples compare element by element the same way).
EXACT_UIDS = {
    "bool_int_float_str": (_obj([True, 1, 1.0, "1", 1]), [0, 1, 2, 3, 1]),
    "numpy_int_is_int": (_obj([np.int64(5), 5, np.uint8(5)]), [0, 0, 0]),
    "numpy_str_is_str": (_obj([np.str_("a"), "a"]), [0, 0]),
    "numpy_bool_is_bool": (_obj([np.bool_(True), True, 1]), [0, 0, 1]),
    "numpy_float_is_float": (_obj([np.float64(0.5), 0.5, np.float32(0.5)]), [0, 0, 0]),
    "bytes_vs_str": (_obj([b"a", "a"]), [0, 1]),
    "tuple_list_is_1d": ([(1, "a"), (1, "a"), (2, "a")], [0, 0, 1]),
    "tuple_mixed_numeric": ([(1, "a"), (1.0, "a"), (True, "a"), (np.int64(1), "a")], [0, 1, 2, 0]),
    "nested_tuples": ([(1, (2, 3)), (1, (2.0, 3)), (1, (2, 3))], [0, 1, 0]),
    "huge_ints": (_obj([2**70, 2**70 + 1, 2**70]), [0, 1, 0]),
    "negative_zero": (_obj([0.0, -0.0]), [0, 0]),
}


for _label, (_values, _want) in EXACT_UIDS.items():

    def _p(values=_values, want=_want):
        assert _uids(values) == want

    probe("ids", f"verl_uid_exact_{_label}")(_p)


@probe("ids", "verl_uid_unhashable_named")
def _():
    raises(TypeError, r"`index` row 1.*hashable", _uids, _obj(["a", ["b"], "a"]))


@probe("ids", "verl_uid_string_not_a_sequence")
def _():
    raises(TypeError, r"`index`.*string", _uids, "aabb")


def _verl_batch():
    torch = pytest.importorskip("torch")
    rm = torch.tensor([[1, 1, 0, 1], [1, 0, 1, 1]])
    tlr = torch.zeros(2, 4)
    tlr[:, -1] = torch.tensor([1.0, 0.0])
    return tlr, rm, _obj(["a", "a"])


NON_TENSOR_FAILS = {
    "roles_row_string": ({"turn_roles": ["DE", ["D", "E"]]}, TypeError,
                         r"non_tensor_batch\['turn_roles'\] row 0.*string"),
    "roles_field_string": ({"turn_roles": "DE"}, TypeError, r"non_tensor_batch\['turn_roles'\]"),
    "scores_row_string": ({"turn_scores": ["01", [0.0, 1.0]]}, TypeError,
                          r"non_tensor_batch\['turn_scores'\] row 0.*string"),
    "scores_row_scalar": ({"turn_scores": [0.5, 0.5]}, TypeError,
                          r"non_tensor_batch\['turn_scores'\] row 0"),
    "scores_beyond_float32": ({"turn_scores": [[1e39, 0.0], [0.0, 0.0]]}, ValueError,
                              r"non_tensor_batch\['turn_scores'\] row 0, turn 0.*1e\+39"),
    "scores_nan": ({"turn_scores": [[0.0, 0.0], [0.0, NAN]]}, ValueError,
                   r"non_tensor_batch\['turn_scores'\] row 1, turn 1.*nan"),
    "scores_not_numbers": ({"turn_scores": [["a", 0.0], [0.0, 1.0]]}, TypeError,
                           r"non_tensor_batch\['turn_scores'\] row 0, turn 0"),
    "anchors_nan": ({"anchor_ids": [[_nan, 1], [_nan, 1]]}, ValueError,
                    r"non_tensor_batch\['anchor_ids'\] row 0, turn 0.*NaN"),
    "anchors_unhashable": ({"anchor_ids": [[[1], 1], [2, 1]]}, TypeError,
                           r"non_tensor_batch\['anchor_ids'\] row 0, turn 0.*hashable"),
    "anchors_row_string": ({"anchor_ids": ["ab", [1, 2]]}, TypeError,
                           r"non_tensor_batch\['anchor_ids'\] row 0.*string"),
}


for _label, (_extra, _exc, _match) in NON_TENSOR_FAILS.items():

    def _p(extra=_extra, exc=_exc, match=_match):
        tlr, rm, uid = _verl_batch()
        raises(exc, match, _verl().from_verl, tlr, rm, uid, extra)

    probe("ids", f"verl_{_label}")(_p)


@probe("ids", "verl_anchors_exact_by_type")
def _():
    # True, 1 and 1.0 are three states (as pad_rollouts compares anchors); np.int64(1) is 1.
    tlr, rm, uid = _verl_batch()
    out = _verl().from_verl(tlr, rm, uid, {"anchor_ids": [[True, 1], [1.0, np.int64(1)]]})
    assert out.anchor_ids.tolist() == [[0, 1], [2, 1]]


@probe("ids", "verl_num_turns_checked")
def _():
    torch = pytest.importorskip("torch")
    for bad, exc in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)):
        raises(exc, "`num_turns`", _verl().turns_from_response_mask, torch.ones(1, 3),
               num_turns=bad)
        raises(exc, "`num_turns`", _verl().make_estimator, "grpo", num_turns=bad)


@probe("ids", "verl_nan_uid_in_estimator")
def _():
    # The registered estimator refuses it too (before: two NaN rows of one object merged and got
    # ±0.7071).
    tlr, rm, _ = _verl_batch()
    raises(ValueError, "NaN", _verl().ESTIMATORS["credax_grpo"], token_level_rewards=tlr,
           response_mask=rm, index=_obj([_nan, _nan]))


@probe("ids", "verl_response_mask_int8")
def _():
    torch = pytest.importorskip("torch")
    tt, tm = _verl().turns_from_response_mask(torch.tensor([[1, 1, 0, 1]], dtype=torch.int8))
    assert tt.tolist() == [[0, 0, -1, 1]] and tm.tolist() == [[True, True]]


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(probe))
def test_bad_input(name):
    probe[name]()

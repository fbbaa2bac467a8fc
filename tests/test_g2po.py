"""G2PO: the hand-worked docstring case, a NumPy restatement of ``g2po/core_g2po.py``
(``tests/reference/g2po.py``) on random batches, and the code itself when a checkout of
``Nala-YN/G2PO`` is named by ``CREDAX_G2PO_REPO`` (it needs torch and verl's ``DataProto``)."""

import importlib.util
import os
import pathlib
import types

import numpy as np
import pytest

import credax
from tests.reference import g2po as ref

MODES = {"mean_std_norm": credax.Normalization(), "mean_norm": credax.Normalization(scale="none")}


def random_batch(rng, batch=8, turns=4, states=3):
    """Prompts of 2-4 rollouts, prefix masks of 1..K turns, few states (shared nodes, revisits),
    outcomes with successes (10), failures and partial rewards, some invalid actions."""
    sizes = []
    while sum(sizes) < batch:
        sizes.append(int(rng.integers(2, 5)))
    ids = np.repeat(np.arange(len(sizes)) * 7 - 3, sizes)[:batch].astype(np.int32)
    if np.sum(ids == ids[-1]) == 1:  # no prompt of one rollout here (test_degenerate_and_errors)
        ids[-1] = ids[-2]
    lengths = rng.integers(1, turns + 1, size=batch)
    mask = np.arange(turns)[None] < lengths[:, None]
    anchors = rng.integers(0, states, size=(batch, turns)).astype(np.int32)
    outcome = rng.choice([10.0, 0.0, 0.0, 4.5], size=batch).astype(np.float32)
    valid = rng.random((batch, turns)) > 0.2
    return outcome, anchors, mask, ids, valid


def _padded(values, where, shape):
    out = np.zeros(shape)
    for v, (b, t) in zip(values, where, strict=True):
        out[b, t] = v
    return out


@pytest.mark.parametrize("mode", list(MODES))
def test_matches_the_numpy_restatement(mode):
    rng = np.random.default_rng(11)
    for case in range(10):
        outcome, anchors, mask, ids, valid = random_batch(rng)
        rows, where = ref.rows_from_padded(outcome, anchors, mask, ids, valid)
        want = _padded(ref.g2po_rows(*rows, mode=mode), where, mask.shape)
        got = credax.g2po_advantages(outcome, anchors, mask, ids, valid, normalization=MODES[mode])
        assert np.isfinite(want).all(), case
        np.testing.assert_allclose(got.advantages, want, rtol=2e-5, atol=2e-4, err_msg=f"case {case}")


def test_parts_hand_worked():
    # The docstring's case with the parts: V(1) = 4.5125, V(2) = 9.5, V(3) = 0.
    out = credax.g2po_advantages(np.array([10.0, 0.0]), np.array([[1, 2], [1, 3]]),
                                 np.ones((2, 2), bool), np.zeros(2, np.int32),
                                 normalization=credax.Normalization(scale="none"))
    np.testing.assert_allclose(out.node_value, [[4.5125, 9.5], [4.5125, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(out.next_score, [[4.75, 0.0], [-4.75, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(out.score_gain, [[4.74375, 0.25625], [-4.75625, -0.24375]],
                               rtol=1e-5)
    np.testing.assert_allclose(out.episode, [[5.0, 5.0], [-5.0, -5.0]], rtol=1e-6)
    # An invalid action at row 1, turn 0 lowers its next score by .1: node 1 now (9.5, -.1),
    # mean 4.7: C1 = ±4.8.
    bad = credax.g2po_advantages(np.array([10.0, 0.0]), np.array([[1, 2], [1, 3]]),
                                 np.ones((2, 2), bool), np.zeros(2, np.int32),
                                 np.array([[True, True], [False, True]]),
                                 normalization=credax.Normalization(scale="none"))
    np.testing.assert_allclose(bad.next_score[:, 0], [4.8, -4.8], rtol=1e-6)


def test_degenerate_and_errors():
    # One rollout of one step: node and prompt of one step -> C1 = C2 = 0; the episode keeps its
    # raw reward (the code's mean 0, std 1; its torch.std of one gain is NaN).
    one = credax.g2po_advantages(np.array([10.0]), np.array([[4]]), np.ones((1, 1), bool),
                                 np.zeros(1, np.int32))
    np.testing.assert_allclose(one.advantages, [[10.0]])
    # Padding garbage (anchors) never matters; K = 0 is empty.
    a = np.array([[1, 2], [1, 3]])
    m = np.array([[True, True], [True, False]])
    x = credax.g2po_advantages(np.array([10.0, 0.0]), a, m, np.zeros(2, np.int32))
    y = credax.g2po_advantages(np.array([10.0, 0.0]), np.where(m, a, 99), m, np.zeros(2, np.int32))
    np.testing.assert_array_equal(x.advantages, y.advantages)
    assert credax.g2po_advantages(np.zeros(2), np.zeros((2, 0), int), np.ones((2, 0), bool),
                                  np.zeros(2, int)).advantages.shape == (2, 0)
    with pytest.raises(ValueError, match="gamma"):
        credax.g2po_advantages(np.zeros(2), a, m, np.zeros(2, int), gamma=2.0)
    with pytest.raises(ValueError, match="episode_pooling"):
        credax.g2po_advantages(np.zeros(2), a, m, np.zeros(2, int), episode_pooling="rows")
    with pytest.raises(TypeError, match="action_valid"):
        credax.g2po_advantages(np.zeros(2), a, m, np.zeros(2, int), np.ones((2, 2)))


def _load_peer():
    repo = os.environ.get("CREDAX_G2PO_REPO")
    if not repo:
        pytest.skip("set CREDAX_G2PO_REPO to a checkout of Nala-YN/G2PO to run its code")
    pytest.importorskip("torch")
    pytest.importorskip("verl")
    path = pathlib.Path(repo) / "g2po" / "core_g2po.py"
    spec = importlib.util.spec_from_file_location("core_g2po", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mode", list(MODES))
def test_matches_the_g2po_code(mode):
    core = _load_peer()
    import torch

    rng = np.random.default_rng(12)
    for case in range(10):
        outcome, anchors, mask, ids, valid = random_batch(rng)
        (uid, traj, anchor, reward, act), where = ref.rows_from_padded(outcome, anchors, mask, ids,
                                                                      valid)
        n, length = len(uid), 3
        obj = lambda v: np.array(v, dtype=object)  # noqa: E731
        batch = types.SimpleNamespace(
            batch={"responses": torch.zeros((n, length))},
            non_tensor_batch={"episode_rewards": np.array(reward), "anchor_obs": obj(anchor),
                              "traj_uid": obj(traj), "uid": obj(uid)})
        step_rewards, group_idx, next_group_idx = core.compute_group_aggregation_values(batch)
        token_rewards = torch.zeros((n, length))
        token_rewards[:, -1] = torch.tensor(reward)
        theirs, _ = core.compute_g2po_outcome_advantage(
            token_rewards, step_rewards, torch.ones((n, length)), obj(uid), obj(traj), group_idx,
            next_group_idx, np.array(act, dtype=float), mode=mode)
        want = _padded(theirs[:, 0].numpy(), where, mask.shape)
        got = credax.g2po_advantages(outcome, anchors, mask, ids, valid, normalization=MODES[mode])
        np.testing.assert_allclose(got.advantages, want, rtol=2e-5, atol=2e-4, err_msg=f"case {case}")
        np.testing.assert_allclose(_padded(ref.g2po_rows(uid, traj, anchor, reward, act, mode=mode),
                                           where, mask.shape), want, rtol=1e-5, atol=1e-4)


def test_episode_pooling():
    # R = (10, 0), row 0 takes 2 steps, row 1 one. "step" (the code): mean over the 3 steps
    # (10 + 10 + 0)/3 = 6.667 -> E = 3.333, -6.667; "trajectory": mean 5 -> E = ±5.
    none = credax.Normalization(scale="none")
    args = (np.array([10.0, 0.0]), np.array([[1, 2], [1, 0]]), np.array([[True, True], [True, False]]),
            np.zeros(2, np.int32))
    step = credax.g2po_advantages(*args, normalization=none).episode
    traj = credax.g2po_advantages(*args, normalization=none, episode_pooling="trajectory").episode
    np.testing.assert_allclose(step, [[10 / 3, 10 / 3], [-20 / 3, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(traj, [[5.0, 5.0], [-5.0, 0.0]], rtol=1e-6)
    # step_discount (credax's, off in the code): the step part of turn t is scaled by d^t.
    out = credax.g2po_advantages(*args, normalization=none, step_discount=0.5, omega=2.0)
    part = np.asarray(out.next_score) + np.asarray(out.score_gain)
    want = np.asarray(out.episode) + 2.0 * np.array([[1.0, 0.5]]) * part
    np.testing.assert_allclose(out.advantages, np.where(args[2], want, 0.0), rtol=1e-6)

"""credax._readers: credax's JSONL schema and verl's rollout dump (issue 16 §3)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import credax
from credax import Rollout, RolloutFormatError, Turn, read_rollouts, write_rollouts

# Laid out exactly as verl's RayPPOTrainer._dump_generations writes `trainer.rollout_data_dir`
# (volcengine/verl, verl/trainer/ppo/ray_trainer.py, commit
# 3d9df73353a546a98235b38653c2c163efb51420): one file "{global_steps}.jsonl" per step; per line
# json.dumps(entry, ensure_ascii=False) of input, output, gts, score, step, then every
# reward_extra_infos_dict key whose length is n (so "too_short" with one value is dropped);
# "\n".join(lines) + "\n". Prompts are repeated rollout.n times with the same decoded text.
VERL_DIR = pathlib.Path(__file__).parent / "fixtures" / "verl_rollout_data"


def _sample() -> list[Rollout]:
    return [
        Rollout("task-1", [Turn([5, 6], 0.5, observation=[9, 9], role="E", reward=0.1, anchor="s0"),
                           Turn([7], 1.0, role="D", anchor=3)], prompt=[1, 2]),
        Rollout(2**63 - 1, [Turn([8], 0.0)], outcome=0.25, meta={"note": "été"}),
        Rollout(("task", 2), [Turn([], 1 / 3, role=None)]),
        Rollout(-(2**63), [Turn([4], 1.0, role=2)]),
    ]


def test_credax_round_trip(tmp_path):
    path = tmp_path / "r.jsonl"
    write_rollouts(path, _sample())
    got = read_rollouts(path)
    assert len(got) == 4
    for a, b in zip(got, _sample(), strict=True):
        assert a.prompt_id == b.prompt_id and type(a.prompt_id) is type(b.prompt_id)
        assert list(a.prompt) == list(b.prompt) and a.outcome == b.outcome
        for ta, tb in zip(a.turns, b.turns, strict=True):
            assert (list(ta.action), ta.score, list(ta.observation), ta.role, ta.reward, ta.anchor) \
                == (list(tb.action), tb.score, list(tb.observation), tb.role, tb.reward, tb.anchor)
    assert got[1].meta["note"] == "été" and got[1].meta["source"].endswith("r.jsonl:2")
    # 2**63 - 1 and -2**63 survive exactly and stay two groups.
    batch, layout = credax.pad_rollouts(got)
    assert layout.prompt_keys[1] == 2**63 - 1 and layout.prompt_keys[3] == -(2**63)
    assert len(set(np.asarray(batch.group_ids).tolist())) == 4


def test_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "r.jsonl"
    line = json.dumps({"prompt_id": "a", "turns": [{"action": [1], "score": 1}]})
    path.write_text(f"\n{line}\n   \n{line}\n")
    got = read_rollouts(path)
    assert [r.meta["source"].rsplit(":", 1)[1] for r in got] == ["2", "4"]


GOOD = {"prompt_id": "a", "turns": [{"action": [1, 2], "score": 0.5}]}


@pytest.mark.parametrize(
    "line, field, message",
    [
        ("{not json", None, "not valid JSON"),
        ("[1, 2]", None, "JSON object"),
        ('{"turns": [{"action": [1], "score": 1}]}', "prompt_id", "missing"),
        ('{"prompt_id": "a"}', "turns", "missing"),
        ('{"prompt_id": "a", "turns": []}', "turns", "non-empty"),
        ('{"prompt_id": "a", "turn": []}', "turn", "unknown key"),
        ('{"prompt_id": 1.5, "turns": [{"action": [1], "score": 1}]}', "prompt_id", "string"),
        ('{"prompt_id": null, "turns": [{"action": [1], "score": 1}]}', "prompt_id", "string"),
        ('{"prompt_id": "a", "turns": [{"action": [1]}]}', "turns[0].score", "missing"),
        ('{"prompt_id": "a", "turns": [{"action": [1], "score": NaN}]}', "turns[0].score", "finite"),
        ('{"prompt_id": "a", "turns": [{"action": [1], "score": "1"}]}', "turns[0].score", "number"),
        ('{"prompt_id": "a", "turns": [{"action": [1], "score": true}]}', "turns[0].score", "number"),
        ('{"prompt_id": "a", "turns": [{"action": [1, -2], "score": 1}]}', "turns[0].action[1]",
         "token id"),
        ('{"prompt_id": "a", "turns": [{"action": [true], "score": 1}]}', "turns[0].action[0]",
         "token id"),
        ('{"prompt_id": "a", "turns": [{"action": "12", "score": 1}]}', "turns[0].action", "array"),
        ('{"prompt_id": "a", "turns": [{"action": [1], "score": 1, "obs": [2]}]}', "turns[0].obs",
         "unknown key"),
        ('{"prompt_id": "a", "turns": [{"action": [1], "score": 1, "role": 1.0}]}', "turns[0].role",
         "label"),
        ('{"prompt_id": "a", "turns": [{"action": [1], "score": 1, "anchor": [1]}]}',
         "turns[0].anchor", "string"),
        ('{"prompt_id": "a", "turns": [{"action": [1], "score": 1, "reward": Infinity}]}',
         "turns[0].reward", "finite"),
        ('{"prompt_id": "a", "prompt": [0.5], "turns": [{"action": [1], "score": 1}]}', "prompt[0]",
         "token id"),
        ('{"prompt_id": "a", "outcome": "x", "turns": [{"action": [1], "score": 1}]}', "outcome",
         "number"),
        ('{"prompt_id": "a", "meta": 3, "turns": [{"action": [1], "score": 1}]}', "meta", "object"),
    ],
)
def test_bad_line_names_file_line_and_field(tmp_path, line, field, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n" + line + "\n")
    with pytest.raises(RolloutFormatError, match=message) as info:
        read_rollouts(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 3, field)
    assert str(err).startswith(f"{path}:3")
    if field:
        assert f"field `{field}`" in str(err)


def test_directory_and_missing_paths(tmp_path):
    (tmp_path / "b.jsonl").write_text(json.dumps({**GOOD, "prompt_id": "b"}) + "\n")
    (tmp_path / "a.jsonl").write_text(json.dumps(GOOD) + "\n")
    (tmp_path / "notes.txt").write_text("ignored")
    assert [r.prompt_id for r in read_rollouts(tmp_path)] == ["a", "b"]
    with pytest.raises(FileNotFoundError, match="path"):
        read_rollouts(tmp_path / "nope.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no rollout files"):
        read_rollouts(tmp_path / "empty")
    with pytest.raises(ValueError, match="format"):
        read_rollouts(tmp_path, format="trl")


def test_progress_reports_bytes(tmp_path):
    path = tmp_path / "r.jsonl"
    write_rollouts(path, _sample() * 6000)  # ~3 MB: several reports
    calls = []
    read_rollouts(path, progress=lambda done, total: calls.append((done, total)))
    size = path.stat().st_size
    assert len(calls) >= 2 and calls[-1] == (size, size)
    assert all(a <= b for (a, _), (b, _) in zip(calls, calls[1:], strict=False))


def test_non_utf8_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"prompt_id": "\xff"}\n')
    with pytest.raises(RolloutFormatError, match=r"r\.jsonl:2: not UTF-8"):
        read_rollouts(path)


def test_write_refuses_what_json_cannot_carry(tmp_path):
    with pytest.raises(TypeError, match="ids"):
        write_rollouts(tmp_path / "x.jsonl", [Rollout(1.5, [Turn([1], 0.0)])])
    with pytest.raises(ValueError):
        write_rollouts(tmp_path / "x.jsonl", [Rollout("a", [Turn([1], 0.0)], outcome=float("nan"))])


# ------------------------------------------------------------------------------------------
# verl's rollout_data_dir.
# ------------------------------------------------------------------------------------------


def test_verl_dump_directory():
    got = read_rollouts(VERL_DIR, format="verl")
    # Step order is numeric (3 before 10), lines in file order.
    assert [r.meta["step"] for r in got] == [3] * 6 + [10] * 4
    assert [r.outcome for r in got] == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, -0.5]
    assert all(len(r.turns) == 1 and len(r.turns[0].action) == 0 for r in got)
    assert got[0].meta["output"] == "3×4 = \\boxed{12}" and got[0].meta["acc"] is True
    assert got[3].meta["gts"] is None and "too_short" not in got[0].meta
    assert got[6].meta["request_id"] == "a1"
    assert got[0].meta["source"].endswith("3.jsonl:1")
    batch, layout = credax.pad_rollouts(got)
    # Groups: (step, prompt text). The same prompt at step 10 is a new group.
    np.testing.assert_array_equal(batch.group_ids, [0, 0, 0, 1, 1, 1, 2, 2, 3, 3])
    adv = layout.per_rollout(credax.grpo_advantages(batch.outcome, batch.groups, batch.row_mask))
    # Group 0 scores (1, 0, 1): mean 2/3, unbiased std sqrt(1/3); the zero-spread group 2 gives 0.
    s = np.sqrt(1 / 3)
    np.testing.assert_allclose(adv[:3], [(1 / 3) / (s + 1e-6), (-2 / 3) / (s + 1e-6),
                                         (1 / 3) / (s + 1e-6)], rtol=1e-5)
    np.testing.assert_array_equal(adv[6:8], [0.0, 0.0])


def test_verl_single_file_and_bad_lines(tmp_path):
    one = read_rollouts(VERL_DIR / "10.jsonl", format="verl")
    assert len(one) == 4
    lines = (VERL_DIR / "3.jsonl").read_text().splitlines()
    # verl's json.dumps writes NaN scores as the bare token NaN; a NaN reward is no credit.
    bad = json.loads(lines[1])
    bad["score"] = float("nan")
    path = tmp_path / "7.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(bad, ensure_ascii=False)]) + "\n")
    with pytest.raises(RolloutFormatError, match=r"7\.jsonl:2: field `score`: expected a finite"):
        read_rollouts(path, format="verl")
    missing = json.loads(lines[0])
    del missing["step"]
    path.write_text(json.dumps(missing) + "\n")
    with pytest.raises(RolloutFormatError, match=r"7\.jsonl:1: field `step`: missing"):
        read_rollouts(path, format="verl")
    wrong = json.loads(lines[0])
    wrong["output"] = [1, 2]
    path.write_text(json.dumps(wrong) + "\n")
    with pytest.raises(RolloutFormatError, match="field `output`"):
        read_rollouts(path, format="verl")


def test_throughput_benchmark_runs_at_toy_size(capsys):
    from benchmarks import rollouts_io

    result = rollouts_io.main(300)
    assert result["turns"] == 300 and result["read_rollouts_per_s"] > 0
    assert "read_turns_per_s" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# Tunix trajectories: one TrajectoryItem a line (format="tunix"), or Tunix's objects in memory.
# --------------------------------------------------------------------------------------------

def _tunix_item(group_id, rewards, *, logprobs=True, prompt=(1, 2)):
    steps = [{"assistant_tokens": [10 + k, 11 + k], "env_tokens": [90 + k] if k < len(rewards) - 1 else None,
              "reward": r, "logprobs": [-0.5, -0.25] if logprobs else None, "done": k == len(rewards) - 1,
              "observation": f"obs {k}"} for k, r in enumerate(rewards)]
    return {"pair_index": 0, "group_id": group_id, "start_step": 0, "metadata": {},
            "traj": {"task": {"prompts": ["q"]}, "steps": steps, "reward": float(sum(rewards)),
                     "status": "SUCCEEDED", "prompt_tokens": list(prompt)}}


def test_tunix_trajectories_hand_worked(tmp_path):
    path = tmp_path / "tunix.jsonl"
    items = [_tunix_item(3, [0.25, 0.0, 0.75]), _tunix_item(3, [1.0], logprobs=False),
             _tunix_item("q2", [0.5])]
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    rollouts = credax.read_rollouts(path, format="tunix")
    first = rollouts[0]
    assert first.prompt_id == 3 and list(first.prompt) == [1, 2] and first.outcome == 1.0
    # One turn per step: action = assistant tokens, observation = env tokens (none on the last).
    assert [list(t.action) for t in first.turns] == [[10, 11], [11, 12], [12, 13]]
    assert [list(t.observation) for t in first.turns] == [[90], [91], []]
    # score = the running total of the step rewards: 0.25, 0.25 + 0, 0.25 + 0 + 0.75.
    assert [t.score for t in first.turns] == [0.25, 0.25, 1.0]
    assert [t.reward for t in first.turns] == [0.25, 0.0, 0.75]
    assert [list(t.logprobs) for t in first.turns] == [[-0.5, -0.25]] * 3
    assert rollouts[1].turns[0].logprobs is None
    assert first.meta["status"] == "SUCCEEDED" and first.meta["pair_index"] == 0
    assert first.meta["source"].endswith("tunix.jsonl:1")
    # Padded: the log-probs at the action tokens' positions (after the 2 prompt tokens), groups by
    # group_id (pad_rollouts wants log-probs on every turn or none: rows 0 and 2 have them).
    batch, _ = credax.pad_rollouts([rollouts[0], rollouts[2], rollouts[0]])
    assert np.asarray(batch.group_ids).tolist() == [0, 1, 0]
    assert np.asarray(batch.old_logp)[0, 2:4].tolist() == [-0.5, -0.25]
    # The same from memory.
    again = credax.rollouts_from_tunix(items)
    assert [[t.score for t in r.turns] for r in again] == [[t.score for t in r.turns] for r in rollouts]
    assert again[2].meta["source"] == "items[2]"


@pytest.mark.parametrize("mutate, field, message", [
    (lambda i: i.pop("group_id"), "group_id", "missing"),
    (lambda i: i["traj"].update(steps=[]), "traj.steps", "non-empty array of steps"),
    (lambda i: i["traj"]["steps"][1].pop("reward"), "traj.steps[1].reward", "missing"),
    (lambda i: i["traj"]["steps"][0].update(reward=float("nan")), "traj.steps[0].reward", "finite"),
    (lambda i: i["traj"]["steps"][0].update(assistant_tokens=[1.5]), "traj.steps[0].assistant_tokens[0]",
     "token id"),
    (lambda i: i["traj"]["steps"][0].update(logprobs=[-1.0]), "traj.steps[0].logprobs", "2 numbers"),
    (lambda i: i.update(traj=[1]), "traj", "expected the Trajectory as an object"),
])
def test_tunix_bad_item_names_the_field(tmp_path, mutate, field, message):
    item = _tunix_item(1, [0.5, 0.5])
    mutate(item)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_tunix_item(1, [1.0])) + "\n" + json.dumps(item) + "\n")
    with pytest.raises(credax.RolloutFormatError, match=message) as err:
        credax.read_rollouts(path, format="tunix")
    assert (err.value.line, err.value.field) == (2, field)
    with pytest.raises(credax.RolloutFormatError, match=message) as err:
        credax.rollouts_from_tunix([item])
    assert err.value.field == field and str(err.value).startswith("items[0]")

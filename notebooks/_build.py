# ruff: noqa: E501  (markdown tables in the cell sources)
"""Generate the notebooks under notebooks/ from the cell sources below, outputs stripped.

    python notebooks/_build.py          # rewrite every notebook
    python notebooks/_build.py 02       # only those whose name contains "02"

Edit the cells here, not in Jupyter: the .ipynb files are build products, committed without
outputs (tests/test_notebooks.py executes them and checks they are stripped).
"""

from __future__ import annotations

import pathlib
import sys
import textwrap

import nbformat

HERE = pathlib.Path(__file__).resolve().parent


def md(text: str):
    return nbformat.v4.new_markdown_cell(textwrap.dedent(text).strip("\n"))


def code(text: str):
    return nbformat.v4.new_code_cell(textwrap.dedent(text).strip("\n"))


# ------------------------------------------------------------------------------------------------
# 01 — credit blind spots
# ------------------------------------------------------------------------------------------------

NB01 = [
    md(r"""
    # Credit blind spots: what each estimator says about each turn

    A multi-turn rollout succeeds or fails as a whole, but it is made of turns that helped, turns
    that hurt and turns that did nothing. An advantage estimator decides which of them the policy
    gradient pushes up and which down. This notebook takes **one hand-built batch** — refinement
    trajectories (a verifier scores the answer after every turn) and agent trajectories (a coding
    agent whose tests are run after every tool call) — and shows, turn by turn, what GRPO, MT-GRPO,
    GiGPO, TRIAGE and every rung of TCPO's ablation ladder give each turn.

    Four cells of the (turn role × trajectory outcome) table are where estimators disagree:

    | cell | what happened | what a good credit does |
    |---|---|---|
    | **exploration in failure** | a useful step inside a rollout that failed anyway | punish it less than the failure |
    | **regression in success** | a step that broke things, in a rollout that recovered and succeeded | do not reward it |
    | **decisive in success** | the step that actually solved the task | reward it most |
    | **no-progress in failure** | a stalled step of a rollout that failed | punish it |

    Why you care: every method below trains *something* on this batch. Which turns it pushes in
    the wrong direction is what your agent learns on top of the outcome — a model trained with
    outcome-only credit is told that breaking a working solution is good, as long as it repaired it
    later. Everything here runs on CPU in a few seconds.
    """),
    code(r"""
    import jax.numpy as jnp
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    import credax

    np.set_printoptions(precision=2, suppress=True)
    %matplotlib inline
    """),
    md(r"""
    ## The batch

    Two prompts, four rollouts each. Every turn has: the action taken, the verifier's score of the
    state *after* it (in `[0, 1]`; `1` = solved), the label a judge gave it (decisive, exploration,
    no-progress, regression — TRIAGE's four roles) and the environment state it acted on (GiGPO's
    anchor: identical states across rollouts of a prompt form one group).

    * `refine`: answer refinement. R1 makes steady progress; R2 solves the task at once, "simplifies"
      the answer into a wrong one and reverts; R3 rephrases without progress; R4 gets halfway and
      stalls.
    * `agent`: fix a failing test in a repository. A1 explores (`ls`, `cat`) then edits the right
      file; A2 edits the right file at once, breaks another one and reverts it; A3 explores like A1
      but then edits the wrong file; A4 runs `ls` three times.
    """),
    code(r"""
    # name: (prompt, [(action, score after the turn, judge's label, state the turn acted on), ...])
    TRAJECTORIES = {
        "R1": ("refine", [("draft", 0.0, "exploration", "task"),
                          ("fix step 2", 0.5, "exploration", "R1-a"),
                          ("fix step 4", 1.0, "decisive", "R1-b"),
                          ("re-check", 1.0, "no-progress", "R1-c")]),
        "R2": ("refine", [("draft", 1.0, "decisive", "task"),
                          ("'simplify'", 0.5, "regression", "R2-a"),
                          ("revert", 1.0, "decisive", "R2-b")]),
        "R3": ("refine", [("draft", 0.0, "exploration", "task"),
                          ("rephrase", 0.0, "no-progress", "R3-a"),
                          ("rephrase", 0.0, "no-progress", "R3-b")]),
        "R4": ("refine", [("draft", 0.0, "exploration", "task"),
                          ("fix step 2", 0.5, "exploration", "R4-a"),
                          ("rephrase", 0.5, "no-progress", "R4-b"),
                          ("rephrase", 0.5, "no-progress", "R4-c")]),
        "A1": ("agent", [("ls", 0.0, "exploration", "repo"),
                         ("cat parse.py", 0.0, "exploration", "ls output"),
                         ("edit parse.py", 1.0, "decisive", "parse.py shown")]),
        "A2": ("agent", [("cat parse.py", 0.0, "exploration", "repo"),
                         ("edit parse.py", 1.0, "decisive", "parse.py shown"),
                         ("edit util.py", 0.5, "regression", "tests pass"),
                         ("revert util.py", 1.0, "decisive", "util.py broken")]),
        "A3": ("agent", [("ls", 0.0, "exploration", "repo"),
                         ("cat parse.py", 0.0, "exploration", "ls output"),
                         ("edit util.py", 0.0, "no-progress", "parse.py shown"),
                         ("run tests", 0.0, "no-progress", "A3 after edit")]),
        "A4": ("agent", [("ls", 0.0, "exploration", "repo"),
                         ("ls", 0.0, "no-progress", "ls output"),
                         ("ls", 0.0, "no-progress", "ls output")]),
    }
    names = list(TRAJECTORIES)
    B, K = len(names), max(len(turns) for _, turns in TRAJECTORIES.values())

    # Pad to [B, K]: one row per trajectory, a prefix of real turns per row.
    scores = np.zeros((B, K), np.float32)
    turn_mask = np.zeros((B, K), bool)
    states = np.full((B, K), "", object)
    labels = []
    for b, (prompt, turns) in enumerate(TRAJECTORIES.values()):
        for k, (_, score, _, state) in enumerate(turns):
            scores[b, k], turn_mask[b, k], states[b, k] = score, True, f"{prompt}/{state}"
        labels.append([label for _, _, label, _ in turns])

    prompt_index = {"refine": 0, "agent": 1}
    group_ids = np.array([prompt_index[p] for p, _ in TRAJECTORIES.values()], np.int32)
    roles = credax.parse_roles(labels, num_turns=K)   # judge strings -> Role codes, -1 = padding
    credax.validate_turns(scores, turn_mask, group_ids)  # eager checks: ranges, prefix masks, ids
    credax.validate_roles(roles, turn_mask)

    final = scores[np.arange(B), turn_mask.sum(1) - 1]
    outcome = (final >= 1.0).astype(np.float32)        # the trajectory's reward: solved or not
    print("outcome:", dict(zip(names, outcome.astype(int).tolist(), strict=True)))
    print("roles:\n", roles)
    """),
    md(r"""
    ## Every estimator on the same batch

    What each method needs beyond the outcome, and what we feed it here:

    * **GRPO** — the outcome only, normalised per prompt; every turn of a rollout gets the same
      value. TCPO's rung 1 ("trajectory reward") is the same thing.
    * **MT-GRPO** — a turn reward per turn, normalised per (prompt, turn index), added to GRPO's
      outcome advantage. Here the turn reward is the verifier's score after the turn.
    * **GiGPO** — the episode (outcome) advantage plus a *step* advantage: the discounted return
      of the step rewards (here the change of the score, `s_k − s_{k−1}`), normalised among all
      steps of the prompt that acted on the same state (the anchor ids; hash your observations).
    * **TRIAGE** — GRPO's advantage plus `λ·c[role]` from the judge's label, `λ = 0.2`,
      `c = (decisive 1, exploration 0.5, no-progress −0.1, regression −0.5)`.
    * **TCPO rungs 2–6** — turn credit from the score history, z-scored per (prompt, turn): the raw
      score; the adjacent delta `s_k − s_{k−1}`; retrospective credit (progress over the best score
      so far, a bonus for holding a solved state, a penalty for falling back); plus hindsight (a
      stall before success is judged by the best score reached after it, against the other
      stalled rollouts of the prompt at that turn); plus counterfactuals (on the two most surprising
      stalls, alternatives resampled at the same history replace the hindsight estimate).

    `credax.groups` densifies the prompt ids once; every call below reuses it.
    """),
    code(r"""
    g = credax.groups(group_ids)
    per_turn = lambda per_row: jnp.where(turn_mask, per_row[:, None], 0.0)  # [B] -> [B, K]
    z = lambda credit: credax.group_normalize(credit, g, turn_mask)         # per (prompt, turn)

    # GRPO: one advantage per rollout.
    grpo = credax.grpo_advantages(outcome, g)

    # MT-GRPO: turn reward = the verifier's score after the turn.
    mt_grpo = credax.mt_grpo_advantages(scores, outcome, turn_mask, g)

    # GiGPO: step reward = score change; anchors = the state each turn acted on, as int32 ids.
    previous = np.concatenate([np.zeros((B, 1), np.float32), scores[:, :-1]], axis=1)
    step_rewards = np.where(turn_mask, scores - previous, 0.0).astype(np.float32)
    state_ids = {s: i for i, s in enumerate(sorted(set(states[turn_mask])))}
    anchor_ids = np.array([[state_ids.get(s, -1) for s in row] for row in states], np.int32)
    gigpo = credax.gigpo_advantages(outcome, step_rewards, anchor_ids, turn_mask, g)

    # TRIAGE: GRPO + lambda * c[role].
    triage = credax.triage_advantages(grpo, roles, turn_mask, lam=0.2)

    # TCPO's ladder, rungs 2-5.
    raw = z(credax.raw_score_credit(scores, turn_mask))
    delta = z(credax.adjacent_delta_credit(scores, turn_mask))
    retrospective = credax.tcpo_advantages(scores, turn_mask, g, hindsight_weight=0.0)
    hindsight = credax.tcpo_advantages(scores, turn_mask, g)
    print("hindsight-eligible turns (non-improving, before success):\n",
          np.asarray(hindsight.hindsight.eligible).astype(int))
    """),
    md(r"""
    Rung 6 needs counterfactuals: for the `L` most surprising hindsight-eligible turns, your
    rollout code resamples `M` alternative turns at the same history and scores them. Surprisal
    would come from `credax.turn_surprisal(token_logprobs, token_turn, num_turns=K)` (mean token
    NLL of the turn); it is written by hand here, as are the alternatives' scores.
    """),
    code(r"""
    surprisal = np.array([[.4, .9, .2, .1], [.2, .8, .6, 0], [.5, 1.3, .3, 0], [.3, .7, .5, .4],
                          [.3, .6, .9, 0], [.5, .8, .6, .7], [.4, 1.2, .9, .3], [.2, .3, .2, 0]],
                         np.float32)
    selected = credax.select_top_surprisal(surprisal, hindsight.hindsight.eligible, budget=2)
    print("selected:", [f"{names[b]} turn {k}" for b, k in np.argwhere(np.asarray(selected))])

    M = 4
    alt_scores = np.zeros((B, K, M), np.float32)
    alt_mask = np.zeros((B, K, M), bool)
    # R3's second rephrase: two of four alternatives fixed half of the answer.
    alt_scores[names.index("R3"), 1], alt_mask[names.index("R3"), 1] = [0, .5, 0, .5], True
    # A3 after `ls`: one alternative edited parse.py blind and passed the tests.
    alt_scores[names.index("A3"), 1], alt_mask[names.index("A3"), 1] = [0, 1, 0, 0], True
    counterfactual = credax.tcpo_advantages(scores, turn_mask, g, alt_scores=alt_scores,
                                            alt_mask=alt_mask, selected=selected)

    methods = {
        "GRPO (= TCPO rung 1)": per_turn(grpo),
        "MT-GRPO": mt_grpo,
        "GiGPO": gigpo,
        "TRIAGE": triage,
        "TCPO 2: raw score": raw,
        "TCPO 3: adjacent delta": delta,
        "TCPO 4: retrospective": retrospective.advantages,
        "TCPO 5: + hindsight": hindsight.advantages,
        "TCPO 6: + counterfactual": counterfactual.advantages,
    }
    methods = {name: np.asarray(v) for name, v in methods.items()}
    """),
    md(r"""
    ## Side by side

    One heatmap per method: rows are rollouts (✓ solved, ✗ failed; the line separates the two
    prompts), columns are turns, grey is padding. The coloured frames mark the four conflict
    cells. All panels share one colour scale.
    """),
    code(r"""
    CELLS = {  # (outcome, role) -> cell name, frame colour
        (0.0, credax.Role.EXPLORATION): ("exploration in failure", "tab:green"),
        (1.0, credax.Role.REGRESSION): ("regression in success", "tab:purple"),
        (1.0, credax.Role.DECISIVE): ("decisive in success", "gold"),
        (0.0, credax.Role.NO_PROGRESS): ("no-progress in failure", "black"),
    }
    cell = np.full((B, K), "", object)
    for b, k in np.argwhere(turn_mask):
        cell[b, k] = CELLS.get((float(outcome[b]), int(roles[b, k])), ("", None))[0]

    vmax = max(np.abs(v).max() for v in methods.values())
    fig, axes = plt.subplots(3, 3, figsize=(14, 13), sharex=True, sharey=True,
                             layout="constrained")
    for ax, (title, v) in zip(axes.flat, methods.items(), strict=True):
        shown = np.ma.masked_where(~turn_mask, v)
        im = ax.imshow(shown, cmap="RdBu", vmin=-vmax, vmax=vmax, aspect="auto")
        ax.set_facecolor("0.85")
        for b, k in np.argwhere(turn_mask):
            ax.text(k, b, f"{v[b, k]:+.2f}", ha="center", va="center", fontsize=9)
        for (_, _), (name, colour) in CELLS.items():
            for b, k in np.argwhere(cell == name):
                ax.add_patch(Rectangle((k - .45, b - .43), .9, .86, fill=False, lw=2.5, ec=colour))
        ax.axhline(3.5, color="k", lw=1.5)
        ax.set_title(title)
        ax.set_xticks(range(K))
        ax.set_yticks(range(B), [f"{n} {'✓' if o else '✗'}" for n, o in zip(names, outcome, strict=True)])
    for ax in axes[-1]:
        ax.set_xlabel("turn")
    fig.colorbar(im, ax=axes, shrink=0.5, label="advantage")
    fig.legend(handles=[Rectangle((0, 0), 1, 1, fill=False, lw=2.5, ec=c, label=n)
                        for n, c in CELLS.values()], loc="outside lower center", ncol=4)
    plt.show()
    """),
    md(r"""
    The same numbers, averaged over the turns of each conflict cell:
    """),
    code(r"""
    cell_names = [name for name, _ in CELLS.values()]
    short = [m.split(" (")[0].split(":")[0] for m in methods]   # "GRPO", ..., "TCPO 6"
    print(f"{'':24s}" + "".join(f"{m:>9s}" for m in short))
    for c in cell_names:
        print(f"{c:24s}" + "".join(f"{v[cell == c].mean():+9.2f}" for v in methods.values()))
    """),
    md(r"""
    What to read off it:

    * **GRPO** gives every cell the sign of the outcome and nothing else: breaking a working
      answer (R2 turn 1, A2 turn 2) earns `+0.87`, exactly what solving it earned.
    * **TRIAGE** moves each turn within its rollout's sign by at most `λ = 0.2`: exploration in
      failure is punished less (`−0.77`), decisive turns are rewarded more (`+1.07`), and
      regression in success is rewarded *less* — but still rewarded (`+0.77`). Its judge tells
      A3's `cat parse.py` (useful, score unchanged) from A4's second `ls` by what the turn *was*,
      not by what happened after it.
    * **MT-GRPO** compares raw scores at the same turn index: R2's broken answer at turn 1 (0.5) is
      above its peers' average there, so the regression is rewarded more than GRPO rewards it.
    * **GiGPO** only sees extra structure where states repeat. On the agent prompt, three rollouts
      acted on the state "parse.py shown": the two that edited `parse.py` get a large step bonus,
      A3's edit of `util.py` a large penalty. On the refinement prompt no state repeats after the
      first turn, so it is GRPO plus a turn-0 term.
    * **TCPO** from rung 3 on is the only family here that makes *regression in success* negative
      (rung 5: R2 turn 1 `−1.31`, A2 turn 2 `−0.99`). Its credit is relative, though: with
      hindsight, R4's stall at turn 2 is compared only with the other stalled rollout at that turn
      (R3, which never got anywhere) and comes out positive (`+0.74`) although R4 failed; and a
      score-only credit cannot see that reading a file was useful — at rung 5, A3's `cat parse.py`
      gets exactly what A4's second `ls` gets (`−0.87`). The counterfactual moves that one turn
      (`−0.87 → −0.70`), because a blind edit at the same history worked only once in four.

    The claims above, checked (so this notebook fails if the library ever says otherwise):
    """),
    code(r"""
    at = lambda method, name, k: float(methods[method][names.index(name), k])
    regression = cell == "regression in success"
    assert np.allclose(methods["GRPO (= TCPO rung 1)"][regression], 0.866, atol=1e-3)
    assert (methods["TRIAGE"][regression] > 0).all()
    assert (methods["TCPO 4: retrospective"][regression] < 0).all()
    assert (methods["TCPO 6: + counterfactual"][regression] < 0).all()
    assert at("MT-GRPO", "R2", 1) > at("GRPO (= TCPO rung 1)", "R2", 1)
    assert at("GiGPO", "A3", 2) < at("GRPO (= TCPO rung 1)", "A3", 2)   # wrong file, same state
    assert at("TCPO 5: + hindsight", "R4", 2) > 0                       # a stall in failure, > 0
    assert at("TCPO 5: + hindsight", "A3", 1) == at("TCPO 5: + hindsight", "A4", 1) < 0
    assert at("TCPO 5: + hindsight", "A3", 1) < at("TCPO 6: + counterfactual", "A3", 1) < 0
    assert at("TRIAGE", "A3", 1) > at("TRIAGE", "A4", 1)                  # exploration vs stall
    print("all claims hold")
    """),
    md(r"""
    ## From turns to tokens

    The policy loss needs one value per token. `token_turn[b, t]` names the turn that generated
    token `t`, or `-1` for tokens that get no credit: the prompt, tool or verifier observations,
    padding. `credax.broadcast_to_tokens` gathers the turn values; in a training step pass the
    `[B, K]` advantages with `token_turn` straight to `credax.policy_loss`, which gathers inside the
    loss, so the `[B, T]` tensor never exists.

    Here is A2 — the agent rollout that breaks `util.py` and reverts it — under three estimators.
    """),
    code(r"""
    PROMPT_TOKENS, OBSERVATION_TOKENS = 5, 3
    token_rows = []
    for _, turns in TRAJECTORIES.values():
        row = [-1] * PROMPT_TOKENS
        for k, (action, *_) in enumerate(turns):
            row += [k] * (len(action) // 3 + 2)            # the turn's generated tokens
            if k < len(turns) - 1:
                row += [-1] * OBSERVATION_TOKENS            # the tool's reply: no credit
        token_rows.append(row)
    T = max(map(len, token_rows))
    token_turn = np.full((B, T), -1, np.int32)
    for b, row in enumerate(token_rows):
        token_turn[b, : len(row)] = row
    credax.validate_turns(scores, turn_mask, group_ids, token_turn=token_turn)

    b = names.index("A2")
    n = len(token_rows[b])
    shown = ["GRPO (= TCPO rung 1)", "TRIAGE", "TCPO 6: + counterfactual"]
    fig, axes = plt.subplots(len(shown), 1, figsize=(12, 6), sharex=True, sharey=True,
                             layout="constrained")
    for ax, name in zip(axes, shown, strict=True):
        tokens = np.asarray(credax.broadcast_to_tokens(methods[name], token_turn))[b, :n]
        ax.bar(np.arange(n), tokens, width=1.0, color=np.where(tokens >= 0, "tab:blue", "tab:red"))
        for t in np.nonzero(token_turn[b, :n] < 0)[0]:
            ax.axvspan(t - .5, t + .5, color="0.92", lw=0, zorder=0)
        ax.axhline(0, color="k", lw=.6)
        ax.set_ylabel(name.split(" (")[0].replace(": + counterfactual", ""))
    for k, (action, *_) in enumerate(TRAJECTORIES["A2"][1]):
        axes[0].text(np.nonzero(token_turn[b] == k)[0].mean(), 1.25, action, ha="center")
    axes[0].set_ylim(-1.3, 1.5)
    axes[-1].set_xlabel("token position (grey: prompt and tool observations, no credit)")
    plt.show()
    print("token_turn of A2:", token_turn[b, :n])
    """),
    md(r"""
    ## What to try next

    * Change a score or a judge label in `TRAJECTORIES` and re-run: which panels move?
    * Give TRIAGE a larger `lam` (e.g. `1.0`): at which value does regression in success flip sign?
      Then read `credax.optimal_mixing_weight`, which estimates the best `λ` from per-turn targets.
    * Make every rollout take the same number of turns and compare TCPO 5 again: the per-turn
      baselines are action-dependent when the policy decides when to stop (see the TCPO section of
      the README).
    * Try `credax.presets.VERL` / `credax.presets.TRL` (`**credax.presets.VERL` in any call that
      takes `group_normalize` options) to see what the peer frameworks' conventions change.
    * Notebook 02 trains a policy with these estimators; notebook 03 property-tests your own.
    """),
]


# ------------------------------------------------------------------------------------------------
# 02 — a custom training loop, then data-parallel
# ------------------------------------------------------------------------------------------------

NB02 = [
    md(r"""
    # A complete training loop in plain JAX: rollout, credit, loss, update

    credax is a library of functions, not a trainer: it never owns your model, your optimizer or
    your rollout code. This notebook writes a whole RL training loop for a small multi-turn agent
    with **Flax NNX** (the policy), **optax** (the optimizer) and **credax** (credit and loss),
    every step visible:

    1. **rollout** — the policy plays a batch of episodes, 8 per prompt, and a verifier scores
       every turn;
    2. **credit** — one credax call turns scores into per-turn advantages (GRPO or TCPO here; any
       estimator of notebook 01 drops in);
    3. **loss** — `credax.policy_loss`, the clipped surrogate, on the action tokens, with the
       `[B, K]` turn advantages gathered to tokens inside the loss;
    4. **update** — `nnx.value_and_grad` and an `nnx.Optimizer` wrapping `optax.adamw`.

    Then the **same loop runs data-parallel over 8 devices** with `jax.sharding`, rows shuffled so
    that each prompt's rollouts are spread across devices, and produces the same numbers. That is
    the property that matters when you scale out: credax computes group statistics from the
    `group_ids` you pass, never from positions or shards, so sharding changes where the work runs,
    not what it computes.

    The 8 devices are CPU devices forced by `XLA_FLAGS`, which has to be set before JAX starts —
    so the first cell does it, and the whole notebook runs with 8 CPU devices. The whole notebook
    takes well under a minute on a laptop CPU.
    """),
    code(r"""
    import os
    import pathlib
    import sys

    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"  # before importing jax
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # The toy task lives in the repository's benchmarks package: put the repository on the path.
    ROOT = next(p for p in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents]
                if (p / "benchmarks" / "quality").is_dir())
    sys.path.insert(0, str(ROOT))

    import jax
    import jax.numpy as jnp
    import matplotlib.pyplot as plt
    import numpy as np
    import optax
    from flax import nnx
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import credax
    from benchmarks.quality import env as E
    from benchmarks.quality.policy import SLOTS, Policy, final_score, rollout

    %matplotlib inline
    print(jax.devices())
    """),
    md(r"""
    ## The task

    The credit-quality benchmark's toy task (`benchmarks/quality/env.py`), at a small size: each
    prompt is a hidden code of `L = 2` symbols over `V = 6` letters. The agent starts from a blank
    answer and has `K = 6` turns. Each turn it emits one action, spelled as up to three tokens like
    an LLM's tool call:

    * `probe i` reveals the hidden symbol at position `i` (the score does not move: pure
      information — an *exploration* turn);
    * `write i v` sets position `i` of the answer to `v` (the score rises, stays or falls);
    * `stop` ends the episode.

    After every turn the verifier scores the answer: the fraction of positions that are right.
    Success is a score of 1 at the end. The policy (`benchmarks/quality/policy.py`) is a small
    NNX MLP that decodes the three tokens autoregressively; `rollout` plays all episodes with a
    `lax.scan` over turns and returns `[B, K]` scores and masks and `[B, K, 3]` tokens with their
    log-probs under the rollout policy. One in five codes is held out for evaluation.

    Here is what the untrained policy does:
    """),
    code(r"""
    TASK = E.Task(length=2, alphabet=6, turns=6)
    PROMPTS, GROUP = 16, 8                  # 16 prompts x 8 rollouts = 128 trajectories per step
    B, K = PROMPTS * GROUP, TASK.turns
    HIDDEN, LR, EPOCHS, CLIP = 64, 3e-3, 2, 0.2
    train_pool, eval_pool = E.split_targets(TASK)
    print(f"{len(train_pool)} training codes, {len(eval_pool)} held-out codes")

    LETTERS = "ABCDEFGH"


    def describe(r, b):
        # One trajectory of a Rollout, as text.
        steps = []
        for k in range(K):
            if not r.turn_mask[b, k]:
                break
            kind, pos, val = np.asarray(r.tokens[b, k])
            pos, val = pos - TASK.pos_offset, val - TASK.val_offset
            action = {E.STOP: "stop", E.PROBE: f"probe {pos}", E.WRITE: f"write {pos} {LETTERS[val]}"}
            steps.append(f"{action[int(kind)]} ({float(r.scores[b, k]):.1f})")
        code = "".join(LETTERS[v] for v in np.asarray(r.before.target[b, 0]))
        return f"code {code}: " + " -> ".join(steps)


    @nnx.jit
    def play(model, key):
        # 32 episodes of every held-out code: the rollout, and the fraction solved at the end.
        r = rollout(model, jnp.repeat(eval_pool, 32, axis=0), key)
        return r, jnp.mean((final_score(r) >= 1.0).astype(jnp.float32))


    untrained = Policy(TASK, HIDDEN, rngs=nnx.Rngs(0))
    r, success = play(untrained, jax.random.key(0))
    print(f"held-out success of the untrained policy: {float(success):.3f}")
    for b in (0, 1, 32, 64):
        print(describe(r, b))
    """),
    md(r"""
    ## Credit, loss, update

    Two credit functions with the same signature, `(rollout, groups) -> [B, K]` advantages:
    GRPO's outcome advantage on every turn, and TCPO's turn credit from the score history
    (retrospective + hindsight). The loss recomputes the log-probs of the sampled tokens under the
    current policy (`credax.token_logprobs`, from the logits without a full log-softmax), and
    `credax.policy_loss` takes the `[B, K]` advantages with `token_turn` — the turn of each token,
    `-1` for token slots an action did not use — so the per-token tensor is never built.

    The training step is one `nnx.jit` function: rollout, credit, and two optimisation epochs on
    the batch. Targets and group ids come in as arguments, so that the data-parallel run below can
    hand them in sharded.
    """),
    code(r"""
    def grpo_credit(r, groups):
        advantage = credax.grpo_advantages(final_score(r), groups)      # [B]: outcome, per prompt
        return jnp.where(r.turn_mask, advantage[:, None], 0.0)         # every turn gets it


    def tcpo_credit(r, groups):
        return credax.tcpo_advantages(r.scores, r.turn_mask, groups).advantages   # [B, K]


    def loss_fn(model, r, advantages, token_turn):
        logits = model(r.obs, r.tokens)                                  # [B, K, 3, vocab]
        logp = credax.token_logprobs(logits.reshape(B, K * SLOTS, -1), r.tokens.reshape(B, -1))
        out = credax.policy_loss(logp, r.logp.reshape(B, -1), advantages,
                                 r.token_mask.reshape(B, -1), token_turn=token_turn,
                                 clip_low=CLIP, clip_high=CLIP)
        return out.loss, out.metrics


    def make_train_step(credit):
        @nnx.jit
        def train_step(model, optimizer, targets, group_ids, key):
            r = rollout(model, targets, key)                                   # 1. rollout
            groups = credax.groups(group_ids, num_groups=PROMPTS)  # densify once, reuse
            advantages = credit(r, groups)                                     # 2. credit
            turn_of_slot = jnp.arange(K, dtype=jnp.int32)[None, :, None]
            token_turn = jnp.where(r.token_mask, turn_of_slot, -1).reshape(B, -1)
            grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
            for _ in range(EPOCHS):
                (loss, metrics), grads = grad_fn(model, r, advantages, token_turn)   # 3. loss
                optimizer.update(model, grads)                                       # 4. update
            final = final_score(r)
            return dict(loss=loss, score=jnp.mean(final),
                        success=jnp.mean((final >= 1.0).astype(jnp.float32)),
                        clip_frac=metrics.clip_frac_low + metrics.clip_frac_high)

        return train_step


    STEP = {"GRPO": make_train_step(grpo_credit), "TCPO": make_train_step(tcpo_credit)}
    """),
    md(r"""
    ## The outer loop

    Each step draws 16 training codes and repeats each 8 times. The rows are then **shuffled**
    (one fixed permutation): a prompt's rollouts are not adjacent, which a correct credit function
    must not care about — and which spreads each prompt over several devices later on.
    `place(x, spec)` is how an array reaches the devices; on one device it is the identity.
    """),
    code(r"""
    SHUFFLE = np.random.default_rng(0).permutation(B)
    # One optax object for every run: nnx.jit's cache key includes the optimizer's structure, and
    # a freshly built optax.chain would not compare equal, so each run would compile again.
    TX = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(LR, weight_decay=1e-4))


    def batches(seed, steps):
        key = jax.random.key(seed)
        for step in range(steps):
            k_targets, k_rollout = jax.random.split(jax.random.fold_in(key, step))
            codes = E.sample_train_targets(TASK, k_targets, PROMPTS, train_pool)
            targets = jnp.repeat(codes, GROUP, axis=0)[SHUFFLE]
            group_ids = jnp.repeat(jnp.arange(PROMPTS, dtype=jnp.int32), GROUP)[SHUFFLE]
            yield targets, group_ids, k_rollout


    def train(credit, *, seed=0, steps=110, eval_every=10, place=lambda x, spec: x):
        model = Policy(TASK, HIDDEN, rngs=nnx.Rngs(seed))
        optimizer = nnx.Optimizer(model, TX, wrt=nnx.Param)
        nnx.update(model, place(nnx.state(model), P()))          # parameters: replicated
        nnx.update(optimizer, place(nnx.state(optimizer), P()))  # optimizer state: replicated
        log, evals = [], []
        for step, (targets, group_ids, key) in enumerate(batches(seed, steps)):
            if eval_every and step % eval_every == 0:
                evals.append((step, float(play(model, jax.random.key(10_000 + step))[1])))
            stats = STEP[credit](model, optimizer, place(targets, P("data")),   # rows: sharded
                                 place(group_ids, P("data")), key)
            log.append(jax.device_get(stats))
        if eval_every:
            evals.append((steps, float(play(model, jax.random.key(10_000 + steps))[1])))
        return model, {k: np.array([s[k] for s in log]) for k in log[0]}, evals


    runs = {credit: train(credit) for credit in ("GRPO", "TCPO")}
    """),
    code(r"""
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4), layout="constrained")
    for credit, (_, log, evals) in runs.items():
        steps, success = zip(*evals, strict=True)
        left.plot(steps, success, marker="o", label=credit)
        smooth = np.convolve(log["score"], np.ones(10) / 10, mode="valid")
        right.plot(np.arange(len(smooth)) + 9, smooth, label=credit)
    left.set(xlabel="training step", ylabel="success on held-out codes", ylim=(-0.02, 1.02),
             title="held-out success (32 episodes per code)")
    right.set(xlabel="training step", ylabel="final score (10-step mean)", ylim=(0, 1.02),
              title="training batch: verifier score at the end")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    plt.show()
    """),
    md(r"""
    What did each policy learn to do? The mix of actions on held-out codes, and a few episodes:
    """),
    code(r"""
    for credit, (model, _, _) in runs.items():
        r, success = play(model, jax.random.key(7))
        kind = np.asarray(r.tokens[..., 0])[np.asarray(r.turn_mask)]   # action type of real turns
        mix = {name: np.mean(kind == code) for name, code in
               [("probe", E.PROBE), ("write", E.WRITE), ("stop", E.STOP)]}
        print(f"{credit}: held-out success {float(success):.2f}; share of turns: "
              + ", ".join(f"{name} {share:.2f}" for name, share in mix.items()))
        for b in (0, 32, 64):
            print("   ", describe(r, b))
    """),
    md(r"""
    One seed of one small configuration proves nothing about which estimator is better: runs are
    noisy, and another seed can reorder them. The action mix shows *what* each credit taught, and
    it is the first thing to look at when a curve disappoints: how often the agent probes
    (gathers information the score cannot see) and how often it writes (moves the score). Turn
    credit built from the score history pays a write the moment it helps, while a probe is worth
    something only through what followed it — notebook 01's *exploration* cells.
    `python -m benchmarks.quality` compares every estimator on this task over several seeds, with
    confidence intervals.

    ## The same loop, data-parallel over 8 devices

    A `jax.sharding.Mesh` with one axis, `data`, over the 8 devices. Parameters and optimizer
    state are replicated (`P()`); targets and group ids are split by rows (`P("data")`): each
    device rolls out 16 of the 128 episodes. Nothing else changes — `train_step` is the same
    function, and XLA (GSPMD) inserts the cross-device reductions that the group statistics, the
    token-mean of the loss and the gradient need. Because the rows were shuffled, every prompt's
    8 rollouts live on several devices, so a statistic taken per shard would be wrong.

    (`jax.make_mesh` defaults to `Explicit` axes in recent JAX; `Auto` lets the compiler propagate
    shardings through code written without them, like this loop.)
    """),
    code(r"""
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    sharded = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))

    targets, group_ids, _ = next(batches(0, 1))
    shown = sharded(group_ids, P("data"))
    print(shown.sharding)
    for shard in shown.addressable_shards[:3]:
        prompts = sorted(set(np.asarray(shard.data).tolist()))
        print(f"  {shard.device}: rows {shard.index[0]}, prompts {prompts}")
    print("  ...")

    STEPS_DP = 12
    one_model, one_log, _ = train("GRPO", steps=STEPS_DP, eval_every=None)
    dp_model, dp_log, _ = train("GRPO", steps=STEPS_DP, eval_every=None, place=sharded)
    """),
    code(r"""
    print(f"{'step':>4} {'loss, 1 device':>15} {'loss, 8 devices':>16} {'score 1':>8} {'score 8':>8}")
    for step in range(0, STEPS_DP, 3):
        print(f"{step:4d} {one_log['loss'][step]:+15.8f} {dp_log['loss'][step]:+16.8f} "
              f"{one_log['score'][step]:8.4f} {dp_log['score'][step]:8.4f}")

    params = lambda m: jax.tree.leaves(nnx.state(m, nnx.Param))
    param_diff = max(float(jnp.max(jnp.abs(a - b)))
                     for a, b in zip(params(one_model), params(dp_model), strict=True))
    print()
    print("rollouts identical on every step:", all(np.array_equal(one_log[k], dp_log[k])
                                                for k in ("score", "success")))
    print(f"largest loss difference: {np.abs(one_log['loss'] - dp_log['loss']).max():.1e}")
    print(f"largest parameter difference after {STEPS_DP} steps: {param_diff:.1e}")
    print("parameters live on", len(params(dp_model)[0].sharding.device_set), "devices")

    np.testing.assert_array_equal(one_log["score"], dp_log["score"])
    np.testing.assert_allclose(one_log["loss"], dp_log["loss"], atol=1e-6)
    assert param_diff < 1e-5
    """),
    md(r"""
    Every rollout of every step is the same on 1 and on 8 devices (JAX's random bits do not depend
    on how an array is sharded), and the losses and parameters agree to float32 rounding: a sum
    split over 8 devices is added in a different order, which moves the last bits. On real
    accelerators, replace the forced CPU devices by `jax.devices()` and keep the rest.

    If you write the step with `jax.shard_map` instead (explicit per-device code), the per-device
    loss must be normalised by the *global* token count: pass
    `normalizer=jax.lax.psum(jnp.sum(mask), "data")` to `credax.policy_loss`, and compute group
    statistics on the gathered rows or keep each prompt's rollouts on one device.

    ## What to try next

    * Swap the credit: `credax.triage_advantages(grpo, roles, turn_mask)` with the environment's
      oracle roles (`r.roles`, masked by `r.turn_mask`), `credax.gigpo_advantages` with `r.anchors`
      as anchor states, or `credax.mt_grpo_advantages` with the score change as turn reward —
      each is one line in a new credit function.
    * Change the loss: `clip_high=0.28` (DAPO's clip-higher), `agg="seq-mean-token-mean"`, or a
      KL term against a frozen reference (`ref_logp=`, `kl_coef=`).
    * Use `credax.nnx.policy_loss_fn` with a `credax.nnx.PolicyBatch` for a language model that
      maps `tokens` to logits, and `credax.nnx.sequence_logprobs` for the old log-probs.
    * Run `python -m benchmarks.quality --tiny` (seconds) or the default demo (every method, 5
      seeds) to compare estimators properly.
    """),
]


# ------------------------------------------------------------------------------------------------
# 03 — invariants and speed
# ------------------------------------------------------------------------------------------------

NB03 = [
    md(r"""
    # Testing your own credit code, and reading the speed benchmark

    **Part 1.** Credit-assignment bugs rarely crash. A baseline taken over the whole batch instead
    of the prompt's group, group ids used as array indices, NaN padding leaking through a mask
    that was multiplied instead of selected: each of these still trains — only worse, and nobody
    notices. `credax.testing` is the property-test suite credax runs on its own estimators, made
    public: hypothesis draws adversarial batches (ragged masks, negative and sparse ids, singleton
    and constant groups, NaN at padded entries) and each checker asserts one invariant every
    correct credit function satisfies. Here we write a credit function of our own, watch it pass,
    and then break it in two realistic ways and read what the checkers say.

    **Part 2.** The speed benchmark (`python -m benchmarks.speed`) times credax against the
    implementations people use today (verl's and TRL's GRPO, a torch TCPO, torch `gather`) and
    writes everything it measured to JSON. We read the committed CPU run into plots and say how to
    produce the same file on a GPU or TPU.

    Runs on CPU in well under a minute (`credax.testing` needs `hypothesis`:
    `pip install 'credax[testing]'`).
    """),
    code(r"""
    import json
    import pathlib

    import hypothesis
    import jax
    import jax.numpy as jnp
    import matplotlib.pyplot as plt
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    import credax.testing as ct

    %matplotlib inline
    print("jax", jax.__version__, "| hypothesis", hypothesis.__version__)
    """),
    md(r"""
    ## Part 1 — a credit function of our own

    "Gain over the best score so far, centred among the same turn of the prompt's other
    rollouts": a few lines of plain JAX, the way one would write it inside a training script.
    The signature is the checkers' default, `fn(scores [B, K], turn_mask [B, K], group_ids [B])
    -> [B, K]`; anything else goes through an `adapter` (see `help(ct)`).
    """),
    code(r"""
    def my_credit(scores, turn_mask, group_ids):
        B, K = scores.shape
        s = jnp.where(turn_mask, scores, 0.0)                  # select, never multiply, a mask
        best_so_far = jax.lax.cummax(s, axis=1)
        prior_best = jnp.concatenate([jnp.zeros((B, 1), s.dtype), best_so_far[:, :-1]], axis=1)
        gain = jnp.where(turn_mask, jnp.maximum(s - prior_best, 0.0), 0.0)
        # Ids are labels (any int32: negative, sparse, hashes): densify them before indexing.
        _, dense = jnp.unique(group_ids, return_inverse=True, size=B)
        dense = dense.reshape(B)
        count = jax.ops.segment_sum(turn_mask.astype(s.dtype), dense, num_segments=B)  # [G, K]
        total = jax.ops.segment_sum(gain, dense, num_segments=B)
        mean = total[dense] / jnp.maximum(count[dense], 1.0)    # per (prompt, turn)
        return jnp.where(turn_mask, gain - mean, 0.0)


    scores = jnp.array([[0.0, 0.5, 1.0], [1.0, 0.5, 1.0], [0.0, 0.0, 0.0], [0.35, 0.95, 0.0]])
    turn_mask = jnp.array([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 0]], bool)
    print(my_credit(scores, turn_mask, jnp.array([7, 7, -3, -3])))
    """),
    md(r"""
    Every checker is a complete hypothesis test: call it, and it either returns or raises an
    `AssertionError` with the minimal counterexample. Runs are derandomized, so a failure repeats
    exactly. `max_examples` defaults to 50; 20 keeps this notebook quick.
    `check_group_zero_mean` is opt-in because only centred outputs should pass it — ours are.
    """),
    code(r"""
    CHECKS = [ct.check_padding_invariance, ct.check_permutation_equivariance,
              ct.check_group_isolation, ct.check_masked_zero, ct.check_finite_gradients,
              ct.check_jit_matches_eager, ct.check_group_zero_mean]
    for check in CHECKS:
        check(my_credit, max_examples=20)
        print(f"{check.__name__:32s} passed")
    """),
    md(r"""
    The strategies behind the checkers are public too. Properties that are specific to *your*
    function go in your own `@given` test: ours is positively homogeneous (scaling every score by
    `c > 0` scales the credit by `c`). `ct.turn_batches` hands us batches with NaN and inf at the
    padded entries, so the test also exercises the masking.
    """),
    code(r"""
    @settings(max_examples=20, derandomize=True, deadline=None, database=None)
    @given(batch=ct.turn_batches(), c=st.sampled_from([0.25, 1 / 3, 0.95]))
    def test_my_credit_is_homogeneous(batch, c):
        scaled = jnp.where(batch.turn_mask, batch.scores * c, batch.scores)
        out = my_credit(batch.scores, batch.turn_mask, batch.group_ids)
        out_scaled = my_credit(scaled, batch.turn_mask, batch.group_ids)
        np.testing.assert_allclose(out_scaled, c * out, rtol=1e-5, atol=1e-6)


    test_my_credit_is_homogeneous()
    print("homogeneity holds")
    """),
    md(r"""
    ### Bug 1: group ids used as indices

    A shortcut that looks harmless: skip the densification and index the segment sums with the
    ids themselves. It works as long as the ids happen to be `0..B-1` — which is exactly what a
    hand-written unit test uses. Real ids are hashes of prompts.
    """),
    code(r"""
    def ids_as_indices(scores, turn_mask, group_ids):
        B, K = scores.shape
        s = jnp.where(turn_mask, scores, 0.0)
        best_so_far = jax.lax.cummax(s, axis=1)
        prior_best = jnp.concatenate([jnp.zeros((B, 1), s.dtype), best_so_far[:, :-1]], axis=1)
        gain = jnp.where(turn_mask, jnp.maximum(s - prior_best, 0.0), 0.0)
        count = jax.ops.segment_sum(turn_mask.astype(s.dtype), group_ids, num_segments=B)  # bug
        total = jax.ops.segment_sum(gain, group_ids, num_segments=B)                      # bug
        mean = total[group_ids] / jnp.maximum(count[group_ids], 1.0)
        return jnp.where(turn_mask, gain - mean, 0.0)


    try:
        ct.check_group_isolation(ids_as_indices, max_examples=20)
    except AssertionError as err:
        print(err)
    else:
        raise RuntimeError("the checker should have caught this")
    """),
    md(r"""
    Hypothesis shrank the failure to four rows in two groups, `-1` and `0`, and only *renamed*
    them (`-1 ↔ 0`): row 3's output changed. Nothing raised: `segment_sum` silently drops rows
    whose id is out of range (`-1`), and `total[-1]` wraps around to the last segment, so the
    rows of group `-1` got another segment's statistics.

    ### Bug 2: a multiplied mask

    `x * mask` instead of `jnp.where(mask, x, 0)`: NaN at a padded entry times `0` is NaN. Under
    `jax.jit`, XLA simplifies the multiply by a 0/1 mask into a select (jax 0.10, CPU), so the
    compiled function looks clean — `check_masked_zero`, which runs it under `jit`, passes — and
    the bug only shows when the same code runs eagerly (a debugging session, a NumPy port,
    another backend). `check_jit_matches_eager` is the checker that sees it:
    """),
    code(r"""
    def multiplied_mask(scores, turn_mask, group_ids):
        B, K = scores.shape
        m = turn_mask.astype(scores.dtype)
        s = scores * m                                                       # bug: NaN * 0
        best_so_far = jax.lax.cummax(s, axis=1)
        prior_best = jnp.concatenate([jnp.zeros((B, 1), s.dtype), best_so_far[:, :-1]], axis=1)
        gain = jnp.maximum(s - prior_best, 0.0) * m
        _, dense = jnp.unique(group_ids, return_inverse=True, size=B)
        dense = dense.reshape(B)
        count = jax.ops.segment_sum(m, dense, num_segments=B)
        mean = jax.ops.segment_sum(gain, dense, num_segments=B)[dense] / jnp.maximum(count[dense], 1.0)
        return (gain - mean) * m


    ct.check_masked_zero(multiplied_mask, max_examples=20)   # passes: jit hides the NaN
    try:
        ct.check_jit_matches_eager(multiplied_mask, max_examples=20)
    except AssertionError as err:
        print(err)
    else:
        raise RuntimeError("the checker should have caught this")
    """),
    md(r"""
    Put the checkers in your test suite next to your credit code (credax's own
    `tests/test_dogfood.py` runs every checker on every estimator). In CI, `shrink=False`
    reports the first failure without hypothesis's shrinking passes.

    ## Part 2 — the speed benchmark's JSON

    `python -m benchmarks.speed` writes `benchmarks/results/speed-<device>.json` (with a `.md`
    table and a `.png`). The file holds everything needed to redraw or re-judge the results:

    * `meta` — the command, date, device, machine (CPU model, core count, load average, library
      versions, git commit);
    * `cases` — one record per (case, size): `params`, `size`, and per implementation in
      `results` the median, quartiles, min, max and every sample of the time per call;
      `ratios` are per-repetition ratios of pairs (the two samples of a ratio were taken back to
      back, so load on a shared machine hits both alike);
    * `compile` — cold compile time and first-call time per entry point, steady-state time, and
      whether a second call or a changed numeric hyperparameter compiled again;
    * `targets` — the goals the project set itself, with the measured value and whether it was met.
    """),
    code(r"""
    root = next(p for p in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents]
                if (p / "benchmarks" / "results").is_dir())
    RESULT = root / "benchmarks" / "results" / "speed-cpu.json"   # or speed-gpu.json
    data = json.loads(RESULT.read_text())
    meta, machine = data["meta"], data["meta"]["machine"]
    print(f"{meta['command']}  ({meta['date']}, {meta['wall_s']:.0f} s)")
    print(f"device {meta['device']}: {machine['nproc']} CPUs ({machine['cpu_model']}), "
          f"load average {machine.get('load_average')}, jax {machine['jax']}, torch {machine['torch']}")
    print("cases:", sorted({c["case"] for c in data["cases"]}))
    """),
    code(r"""
    PANELS = [("grpo", "GRPO advantages, groups of 8"), ("tcpo", "TCPO full pipeline"),
              ("triage_broadcast", "TRIAGE + broadcast to tokens"),
              ("policy_loss_grad", "policy_loss value_and_grad")]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9), layout="constrained")
    for ax, (case, title) in zip(axes.flat, PANELS, strict=True):
        records = sorted((c for c in data["cases"] if c["case"] == case), key=lambda c: c["size"])
        if case == "tcpo":   # several K per B: keep one K so the x axis is one sweep
            records = [c for c in records if c["params"]["K"] == 16]
        for name in dict.fromkeys(n for c in records for n in c["results"]):
            rows = [(c["size"], c["results"][name]) for c in records if name in c["results"]]
            x = [size for size, _ in rows]
            y = np.array([r["median_s"] for _, r in rows])
            spread = [y - [r["q25_s"] for _, r in rows], [r["q75_s"] for _, r in rows] - y]
            label = records[0].get("labels", {}).get(name, name)
            ax.errorbar(x, y, yerr=spread, marker="o", capsize=2, label=label,
                        lw=2.5 if name.startswith("credax") else 1.2)
        ax.set(xscale="log", yscale="log", title=title, ylabel="median time per call (s)",
               xlabel=records[0]["size_label"] if records else "")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{meta['command']} — {machine['cpu_model']}, {machine['nproc']} CPUs")
    plt.show()
    """),
    md(r"""
    Ratios are the numbers to trust on a shared machine: each is the median over repetitions of
    two samples taken back to back. Below, every ratio at the largest size of each case (above 1:
    the numerator is slower; whiskers: min and max over repetitions), then the targets.
    """),
    code(r"""
    largest = {}
    for c in data["cases"]:
        if c["size"] >= largest.get(c["case"], {"size": -1})["size"]:
            largest[c["case"]] = c
    bars = [(f"{case} ({c['size']:,} {c['size_label']}): {pair}", r["median"], r["min"], r["max"])
            for case, c in largest.items() for pair, r in c["ratios"].items()]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(bars) + 1), layout="constrained")
    y = np.arange(len(bars))
    med = np.array([b[1] for b in bars])
    ax.barh(y, med, color=np.where(med > 1, "tab:orange", "tab:blue"))
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color="tab:blue", label="numerator faster"),
                       plt.Rectangle((0, 0), 1, 1, color="tab:orange", label="numerator slower")],
              loc="lower right")
    ax.errorbar(med, y, xerr=[med - [b[2] for b in bars], [b[3] for b in bars] - med],
                fmt="none", ecolor="k", capsize=2)
    ax.axvline(1, color="k", lw=0.8)
    ax.set(xscale="log", yticks=y, xlabel="time ratio (numerator / denominator)")
    ax.set_yticklabels([b[0] for b in bars], fontsize=8)
    ax.invert_yaxis()
    plt.show()

    for t in data["targets"]:
        measured = t["measured"]
        shown = f"{measured:.3g}" if isinstance(measured, float) else str(measured)
        print(f"{'met ' if t['met'] else 'MISS'}  {t['target']:62s} {shown:>8s} "
              f"(goal {t['op']} {t['threshold']})")
    """),
    code(r"""
    comp = data["compile"]
    fig, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    y = np.arange(len(comp))
    ax.barh(y - 0.2, [c["first_call_s"] for c in comp], height=0.4, label="first call (compile)")
    ax.barh(y + 0.2, [c["steady_median_s"] for c in comp], height=0.4, label="steady call")
    ax.set(xscale="log", yticks=y, xlabel="seconds")
    ax.set_yticklabels([c["fn"] for c in comp])
    ax.invert_yaxis()
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
    plt.show()
    recompiled = [c["fn"] for c in comp if c["compiles_on_second_call"]
                  or c.get("compiles_on_changed_hyperparameter")]
    print("entry points that recompiled on a second call or a changed hyperparameter:", recompiled)
    """),
    md(r"""
    ## Running the benchmark on your hardware

    From a clone of the repository:

    | command | what it does |
    |---|---|
    | `make bench` | installs the `bench` extra (torch, for the peers) into `.venv` and runs `python -m benchmarks.speed`: the full CPU run, writing `benchmarks/results/speed-cpu.{json,md,png}` |
    | `python -m benchmarks.speed --threads 1` | the same, pinned to one core and one torch thread (`meta["command"]` above says how the committed file was made); on a shared machine an oversubscribed torch thread pool makes ratios meaningless |
    | `python -m benchmarks.speed --quick` | toy sizes in a few seconds, written to a temporary directory (CI uses it) |
    | `python -m benchmarks.speed --only grpo,tcpo` | a subset of `grpo,tcpo,triage,loss,compile` |
    | `python -m benchmarks.speed --device gpu` | JAX on `jax.devices()[0]`, torch peers on CUDA; writes `speed-gpu.*` |

    On a **GPU** install a CUDA JAX (`pip install -U "jax[cuda12]"`) and a CUDA build of torch
    for the torch peers; without CUDA torch the peers are skipped and noted in the JSON, and the
    credax timings still run. There is no `--device tpu`: on a **TPU** VM (`pip install -U
    "jax[tpu]"`) `--device gpu` times JAX on `jax.devices()[0]`, which is the TPU, and skips the
    torch peers — the files are still named `speed-gpu.*` (we have not run it on a TPU). Point
    `RESULT` above at the new JSON and re-run this part.

    Every implementation is checked against a float64 reference before it is timed; one that
    disagrees is not timed and the run exits non-zero.

    ## What to try next

    * Run all seven checkers on the estimator you actually train with, through an `adapter` if its
      signature differs (`ct.check_group_isolation(fn, adapter=lambda fn: lambda b: fn(b.rewards,
      b.group_ids, b.row_mask))` for a per-trajectory one).
    * Write a third buggy variant — a baseline over the whole batch (`scores.mean(axis=0)`) — and
      guess which checker catches it before running them.
    * Run `python -m benchmarks.speed --quick --only grpo` and point `RESULT` at the JSON it prints.
    * Notebook 01 compares estimators on one batch; notebook 02 trains with them.
    """),
]


NOTEBOOKS = {
    "01_credit_blind_spots.ipynb": NB01,
    "02_custom_training_loop.ipynb": NB02,
    "03_invariants_and_speed.ipynb": NB03,
}


def build(name: str, cells) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):  # stable ids: rebuilding an unchanged notebook is a no-op
        cell["id"] = f"{pathlib.Path(name).stem[:2]}-{i:02d}"
    nbformat.validate(nb)
    nbformat.write(nb, HERE / name)


if __name__ == "__main__":
    wanted = sys.argv[1:]
    for name, cells in NOTEBOOKS.items():
        if not wanted or any(w in name for w in wanted):
            build(name, cells)
            print("wrote", HERE / name)

# %% [markdown]
# # Credit blind spots: what each estimator says about each turn
#
# A multi-turn rollout succeeds or fails as a whole, but it is made of turns that helped, turns
# that hurt and turns that did nothing. An advantage estimator decides which of them the policy
# gradient pushes up and which down. This notebook takes **one hand-built batch** — refinement
# trajectories (a verifier scores the answer after every turn) and agent trajectories (a coding
# agent whose tests are run after every tool call) — and shows, turn by turn, what GRPO, MT-GRPO,
# GiGPO, TRIAGE and every rung of TCPO's ablation ladder give each turn.
#
# Four cells of the (turn role × trajectory outcome) table are where estimators disagree:
#
# | cell | what happened | what a good credit does |
# |---|---|---|
# | **exploration in failure** | a useful step inside a rollout that failed anyway | punish it less than the failure |
# | **regression in success** | a step that broke things, in a rollout that recovered and succeeded | do not reward it |
# | **decisive in success** | the step that actually solved the task | reward it most |
# | **no-progress in failure** | a stalled step of a rollout that failed | punish it |
#
# Why you care: every method below trains *something* on this batch. Which turns it pushes in
# the wrong direction is what your agent learns on top of the outcome — a model trained with
# outcome-only credit is told that breaking a working solution is good, as long as it repaired it
# later. Everything here runs on CPU in a few seconds.

# %%
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

import credax

np.set_printoptions(precision=2, suppress=True)
# %matplotlib inline

# %% [markdown]
# ## The batch
#
# Two prompts, four rollouts each. Every turn has: the action taken, the verifier's score of the
# state *after* it (in `[0, 1]`; `1` = solved), the label a judge gave it (decisive, exploration,
# no-progress, regression — TRIAGE's four roles) and the environment state it acted on (GiGPO's
# anchor: identical states across rollouts of a prompt form one group).
#
# * `refine`: answer refinement. R1 makes steady progress; R2 solves the task at once, "simplifies"
#   the answer into a wrong one and reverts; R3 rephrases without progress; R4 gets halfway and
#   stalls.
# * `agent`: fix a failing test in a repository. A1 explores (`ls`, `cat`) then edits the right
#   file; A2 edits the right file at once, breaks another one and reverts it; A3 explores like A1
#   but then edits the wrong file; A4 runs `ls` three times.

# %%
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

# %% [markdown]
# ## Every estimator on the same batch
#
# What each method needs beyond the outcome, and what we feed it here:
#
# * **GRPO** — the outcome only, normalised per prompt; every turn of a rollout gets the same
#   value. TCPO's rung 1 ("trajectory reward") is the same thing.
# * **MT-GRPO** — a turn reward per turn, normalised per (prompt, turn index), added to GRPO's
#   outcome advantage. Here the turn reward is the verifier's score after the turn.
# * **GiGPO** — the episode (outcome) advantage plus a *step* advantage: the discounted return
#   of the step rewards (here the change of the score, `s_k − s_{k−1}`), normalised among all
#   steps of the prompt that acted on the same state (the anchor ids; hash your observations).
# * **TRIAGE** — GRPO's advantage plus `λ·c[role]` from the judge's label, `λ = 0.2`,
#   `c = (decisive 1, exploration 0.5, no-progress −0.1, regression −0.5)`.
# * **TCPO rungs 2–6** — turn credit from the score history, z-scored per (prompt, turn): the raw
#   score; the adjacent delta `s_k − s_{k−1}`; retrospective credit (progress over the best score
#   so far, a bonus for holding a solved state, a penalty for falling back); plus hindsight (a
#   stall before success is judged by the best score reached after it, against the other
#   stalled rollouts of the prompt at that turn); plus counterfactuals (on the two most surprising
#   stalls, alternatives resampled at the same history replace the hindsight estimate).
#
# `credax.groups` densifies the prompt ids once; every call below reuses it.

# %%
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

# %% [markdown]
# Rung 6 needs counterfactuals: for the `L` most surprising hindsight-eligible turns, your
# rollout code resamples `M` alternative turns at the same history and scores them. Surprisal
# would come from `credax.turn_surprisal(token_logprobs, token_turn, num_turns=K)` (mean token
# NLL of the turn); it is written by hand here, as are the alternatives' scores.

# %%
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

# %% [markdown]
# ## Side by side
#
# One heatmap per method: rows are rollouts (✓ solved, ✗ failed; the line separates the two
# prompts), columns are turns, grey is padding. The coloured frames mark the four conflict
# cells. All panels share one colour scale.

# %%
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

# %% [markdown]
# The same numbers, averaged over the turns of each conflict cell:

# %%
cell_names = [name for name, _ in CELLS.values()]
short = [m.split(" (")[0].split(":")[0] for m in methods]   # "GRPO", ..., "TCPO 6"
print(f"{'':24s}" + "".join(f"{m:>9s}" for m in short))
for c in cell_names:
    print(f"{c:24s}" + "".join(f"{v[cell == c].mean():+9.2f}" for v in methods.values()))

# %% [markdown]
# What to read off it:
#
# * **GRPO** gives every cell the sign of the outcome and nothing else: breaking a working
#   answer (R2 turn 1, A2 turn 2) earns `+0.87`, exactly what solving it earned.
# * **TRIAGE** moves each turn within its rollout's sign by at most `λ = 0.2`: exploration in
#   failure is punished less (`−0.77`), decisive turns are rewarded more (`+1.07`), and
#   regression in success is rewarded *less* — but still rewarded (`+0.77`). Its judge tells
#   A3's `cat parse.py` (useful, score unchanged) from A4's second `ls` by what the turn *was*,
#   not by what happened after it.
# * **MT-GRPO** compares raw scores at the same turn index: R2's broken answer at turn 1 (0.5) is
#   above its peers' average there, so the regression is rewarded more than GRPO rewards it.
# * **GiGPO** only sees extra structure where states repeat. On the agent prompt, three rollouts
#   acted on the state "parse.py shown": the two that edited `parse.py` get a large step bonus,
#   A3's edit of `util.py` a large penalty. On the refinement prompt no state repeats after the
#   first turn, so it is GRPO plus a turn-0 term.
# * **TCPO** from rung 3 on is the only family here that makes *regression in success* negative
#   (rung 5: R2 turn 1 `−1.31`, A2 turn 2 `−0.99`). Its credit is relative, though: with
#   hindsight, R4's stall at turn 2 is compared only with the other stalled rollout at that turn
#   (R3, which never got anywhere) and comes out positive (`+0.74`) although R4 failed; and a
#   score-only credit cannot see that reading a file was useful — at rung 5, A3's `cat parse.py`
#   gets exactly what A4's second `ls` gets (`−0.87`). The counterfactual moves that one turn
#   (`−0.87 → −0.70`), because a blind edit at the same history worked only once in four.
#
# The claims above, checked (so this notebook fails if the library ever says otherwise):

# %%
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

# %% [markdown]
# ## From turns to tokens
#
# The policy loss needs one value per token. `token_turn[b, t]` names the turn that generated
# token `t`, or `-1` for tokens that get no credit: the prompt, tool or verifier observations,
# padding. `credax.broadcast_to_tokens` gathers the turn values; in a training step pass the
# `[B, K]` advantages with `token_turn` straight to `credax.policy_loss`, which gathers inside the
# loss, so the `[B, T]` tensor never exists.
#
# Here is A2 — the agent rollout that breaks `util.py` and reverts it — under three estimators.

# %%
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

# %% [markdown]
# ## What to try next
#
# * Change a score or a judge label in `TRAJECTORIES` and re-run: which panels move?
# * Give TRIAGE a larger `lam` (e.g. `1.0`): at which value does regression in success flip sign?
#   Then read `credax.optimal_mixing_weight`, which estimates the best `λ` from per-turn targets.
# * Make every rollout take the same number of turns and compare TCPO 5 again: the per-turn
#   baselines are action-dependent when the policy decides when to stop (see the known bias in
#   `docs/guides/tcpo.md`).
# * Try `normalization=credax.presets.VERL` / `credax.presets.TRL` in any call that normalises
#   within groups to see what the peer frameworks' conventions change.
# * Notebook 02 trains a policy with these estimators; notebook 03 property-tests your own.

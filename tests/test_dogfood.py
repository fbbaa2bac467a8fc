"""The sweeps of every public function: the invariants users check, checked on us, and compile once.

Each public estimator runs through every checker that its contract promises (SPEC §0: masked
entries are exactly 0 and never matter, rows are trajectories in any order, groups come from ids
only, jit == eager, finite gradients). Zero mean per (group, turn) is checked only where the output
is a centred, group-normalised quantity. Adapters are module-level functions, so the checkers run
on one function share its compilations (credax.testing caches the jit on (fn, adapter)).

Compile once: every entry of the call table (every public array function, and the other forms of
a call) traces its body once for repeated calls with new values, new ids, a precomputed ``Groups``
and a schedule of every numeric hyperparameter (the traced-once fixture of tests/conftest.py).
These sweeps own both properties: a module's own tests keep its goldens and references.
"""

import inspect

import pytest

import credax
import credax.testing as ct
from credax.bench.sweep import SCHEDULE, default_schedule, scheduled
from credax.testing import calls

EXAMPLES = 8
SHAPES = ((6, 3),)  # one shape: each checker compiles at most three programs per function
# One reward per row, a row valid when it has a real turn: GRPO's call, for other functions of
# the same arguments.
OUTCOME = calls.CALLS["grpo_advantages"].adapter


# The call table's entries that state the invariants their output satisfies (Call.checks); the
# adapter is the entry's own (one object per entry, so the checkers on one function share its
# compilations). Public array functions without checks, and why (the checkers need [B] or [B, K]
# outputs of a batch): token-level ([B, T]: broadcast_to_tokens, token_logprobs*, turn_values,
# the token GAEs), scalars or fits (aggregate, policy_loss, value_loss,
# fit_role_constants, optimal_mixing_weight, vapo_lambda, discount_weights), windows/labels
# (judge_windows, parse_roles, the validators), a ranking whose ties break by row index
# (select_top_surprisal: not permutation-equivariant on ties), alternatives [B, K, M]
# (counterfactual_credit), turn_surprisal (token log-probs in, tested in test_turns.py), group_count
# (integer counts, no float input), and the batch-statistic estimators reinforce_pp_advantages,
# reinforce_pp_baseline_advantages ([B, T], whitened over the batch's tokens) and gpg_advantages (α
# counts the batch's nonzero rewards): not group-isolated by design.
SPECS = [(label, c) for label, c in calls.ALL.items() if c.checks]

CASES = [
    pytest.param(label, check, id=f"{label}-{check}")
    for label, c in SPECS
    for check in c.checks
]


def test_every_estimator_with_invariants_is_checked():
    # The estimators the invariant checks cannot state (see above: not one value per row or turn,
    # or a batch statistic) are the only ones left out; the rest get COMMON at least.
    unchecked = {name for name, c in calls.ESTIMATORS.items() if not c.checks}
    assert unchecked <= {name for name, c in calls.ESTIMATORS.items()
                         if c.level not in ("row", "turn") or not c.group_local}
    assert {"counterfactual_credit", "gpg_advantages"} <= unchecked


@pytest.mark.parametrize("label, check", CASES)
def test_invariant(label, check):
    c = calls.ALL[label]
    # Eager execution (jax.disable_jit) dispatches every op from Python: fewer examples there.
    examples = 4 if check == "jit_matches_eager" else EXAMPLES
    getattr(ct, f"check_{check}")(getattr(credax, c.name), adapter=c.adapter, shapes=SHAPES,
                                  max_examples=examples)


def test_group_normalize_on_outcomes_with_verl_singletons():
    # verl keeps a singleton's raw score: centred sets of two or more still average to zero, so
    # min_size=2 (the default) is the right check, and the raw singletons stay masked correctly.
    fn = lambda r, g, m: credax.group_normalize(r, g, m, normalization=credax.presets.VERL)  # noqa: E731
    ct.check_group_zero_mean(fn, adapter=OUTCOME, shapes=SHAPES, max_examples=EXAMPLES)
    ct.check_masked_zero(fn, adapter=OUTCOME, shapes=SHAPES, max_examples=EXAMPLES)


def test_batch_scale_is_not_group_isolated():
    # TRL's scale_rewards="batch" divides by the batch std: by design a group's output depends on
    # the other groups, and the checker says so.
    fn = lambda r, g, m: credax.group_normalize(r, g, m, normalization=credax.presets.TRL_BATCH)  # noqa: E731
    with pytest.raises(AssertionError, match="^group isolation violated"):
        ct.check_group_isolation(fn, adapter=OUTCOME, shapes=SHAPES, max_examples=40,
                                 shrink=False)


# --------------------------------------------------------------------------------------------
# Compile once: new values, new ids, a Groups and new hyperparameters reuse the program.
# --------------------------------------------------------------------------------------------

# The one schedule of hyperparameter values (the bench's too): credax.bench.sweep.SCHEDULE, with a
# default of three values derived from a float default for a hyperparameter it does not name.
ENTRIES = [label for label, c in calls.ALL.items()
           if hasattr(getattr(credax, c.name), "with_body")]


def test_every_entry_but_the_host_ones_is_swept():
    host = {c.name for c in calls.ALL.values()} - {calls.ALL[label].name for label in ENTRIES}
    assert host == set()  # discount_weights too is a public function (issue #43)


def test_every_numeric_hyperparameter_is_scheduled():
    # A hyperparameter with a float (or a tuple of floats) as its default gets three distinct values
    # (SCHEDULE's, or the default, its half and its quarter), so the sweep changes it; int
    # defaults are static options (history, before, num_roles).
    assert default_schedule(0.5) == (0.5, 0.25, 0.125)
    assert default_schedule(0.0) == (0.0, 0.1, 0.2)
    assert default_schedule((1.0, -2.0)) == ((1.0, -2.0), (0.5, -1.0), (0.25, -0.5))
    assert default_schedule(2) is None and default_schedule(None) is None
    for label in ENTRIES:
        for name, p in inspect.signature(getattr(credax, calls.ALL[label].name)).parameters.items():
            values = SCHEDULE.get(name) or default_schedule(p.default)
            if type(p.default) is float or (type(p.default) is tuple and p.default):
                assert values is not None and len(set(values)) == 3, (label, name, values)


@pytest.mark.parametrize("label", ENTRIES)
def test_traces_once(label, traced_once):
    # `lower` is the call's own path (host checks, id conversion, static rewrites, then the jit's
    # trace cache) without XLA's compile, which a trace count does not need.
    c = calls.ALL[label]
    public = getattr(credax, c.name)
    fn = traced_once(public)  # its body traced more than once raises AssertionError
    signature = inspect.signature(public)
    for i in range(3):
        batch = calls.example_batch(seed=i)  # new values and new ids, the same shapes
        args, kwargs = scheduled(signature, *c.args(batch), i)
        fn.lower(*args, **kwargs)
    # A Groups computed once hits the program of the raw ids (the conversion the call does).
    batch = batch._replace(group_ids=credax.groups(batch.group_ids))
    args, kwargs = scheduled(signature, *c.args(batch), 2)
    fn.lower(*args, **kwargs)

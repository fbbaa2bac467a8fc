"""Machine independence, tested (issue #35 part 2): a fresh run of ``--preset ci`` must find the
committed ordering again at the committed seed count, and reproduce the committed step-0 lab.

What is bitwise reproducible and what only distributionally is the guide's section *What is
reproducible on another machine*: the step-0 lab (ground truth and every method's credit
metrics, measured before any training step) is the same on any machine value for value; trained
outcomes are chaotic (a change of the last bits, ``--perturb 1e-6``, moves single seeds), so
what a fresh run must reproduce is the committed *ordering*, which the preset resolves at its
seed count. The fresh run is about a minute of CPU; this file runs on its own xdist worker
(``make test`` distributes by file).
"""

import json

import numpy as np
import pytest

from benchmarks.lab import __main__ as cli
from benchmarks.lab import metrics as X
from benchmarks.lab import report, tables


@pytest.fixture(scope="module")
def committed():
    if not tables.CI_RESULTS.exists():
        pytest.skip("no committed ci run (benchmarks/lab/results/ci/lab.json)")
    return json.loads(tables.CI_RESULTS.read_text()), json.loads(tables.CI_ORDERING.read_text())


@pytest.fixture(scope="module")
def fresh(tmp_path_factory, committed):
    out = tmp_path_factory.mktemp("ci")
    assert cli.main(["--preset", "ci", "--out", str(out)]) == 0
    return json.loads((out / "lab.json").read_text())


def _holds(record, ordering) -> dict:
    m = record["tasks"][ordering["task"]]["methods"]
    return X.paired_difference(m[ordering["better"]]["success"]["per_seed"],
                               m[ordering["worse"]]["success"]["per_seed"])


def test_the_committed_ordering_is_resolved_in_the_committed_run(committed):
    record, ordering = committed
    assert len(record["seeds"]) == ordering["seeds"]
    d = _holds(record, ordering)
    assert d["n"] == ordering["seeds"] and d["resolved"] and d["mean"] > 0


def test_a_fresh_run_finds_the_committed_ordering_at_the_committed_seed_count(fresh, committed):
    _, ordering = committed
    assert len(fresh["seeds"]) == ordering["seeds"]
    d = _holds(fresh, ordering)
    assert d["resolved"] and d["mean"] > 0, (
        f"{ordering['better']} - {ordering['worse']} on {ordering['task']}: {d['mean']:+.3f} "
        f"{d['interval']} over {d['n']} seeds no longer resolves the committed ordering")


def test_a_fresh_run_reproduces_the_step_0_lab_value_for_value(fresh, committed):
    # Before the first update every number comes from the initial parameters and the seed's keys:
    # no accumulated float chaos, so a fresh run on any machine gives the committed values (the
    # JSON keeps 5 decimals; the tolerance is that rounding).
    record, ordering = committed
    for part in ("ground_truth", "credit"):
        a = tables._flat(record["tasks"][ordering["task"]]["lab"][part]["0"])
        b = tables._flat(fresh["tasks"][ordering["task"]]["lab"][part]["0"])
        assert set(a) == set(b)
        for k in a:
            assert (a[k] is None) == (b[k] is None), k
            if a[k] is not None:
                np.testing.assert_allclose(b[k], a[k], atol=2e-5, err_msg=k)


def test_the_committed_run_records_its_environment(committed):
    # Issue 47 item 3: versions, processor, threads, C library, and the XLA / glibc variables.
    record, _ = committed
    env = record["environment"]
    assert set(report.MATCH) <= set(env) and all(env[k] for k in report.MATCH)
    assert {"cpu_count", "cpus_allowed", "libc", "env"} <= set(env)


def test_a_fresh_run_reproduces_the_trained_values_where_the_machine_record_matches(fresh, committed):
    # Value for value (every seed's held-out success and return) where the committed run's machine
    # record (report.MATCH: package versions, Python, processor model) is this machine's; where it
    # is not, only the step-0 lab is compared (above) and the trained values are distributional
    # (the guide's "What is reproducible on another machine"). The suite's XLA_FLAGS (conftest.py)
    # are not in the record's match: they were measured not to move this preset's trained values.
    record, ordering = committed
    differ = report.machine_match(record.get("environment"), fresh["environment"])
    if differ:
        pytest.skip(f"the committed run's machine record differs here on {differ}: trained "
                    "values are compared only on a matching machine")
    a = record["tasks"][ordering["task"]]["methods"]
    b = fresh["tasks"][ordering["task"]]["methods"]
    assert set(a) == set(b)
    for name in a:
        for key in ("success", "ret"):
            assert b[name][key]["per_seed"] == a[name][key]["per_seed"], (name, key)

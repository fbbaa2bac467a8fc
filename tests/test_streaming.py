"""Per-group streaming (issue #38): a call on one prompt group's rows alone equals those rows of
the call on the whole batch, for every registry entry declared ``group_local``, as
docs/guides/reproducibility.md tabulates it.

* Every registry entry declares ``group_local`` (``True`` or ``False``), and each row of the
  guide's table agrees with it (the group-local column is the registry's, regenerated here). An
  entry added since the guide's last measurement has no row yet: it is held to the default claim,
  ``bitwise`` where group-local, so a new estimator needs no edit of the guide unless it rounds.
* A group-local entry, called on each group's rows of one batch (5 prompt groups of 4 rows, rows
  interleaved, arbitrary ids, rewards 0 / 0.5 / 1), gives the batch call's rows bit for bit where
  the guide says ``bitwise``, and within twice the guide's measured largest difference where it
  gives one (float32 rounding: XLA compiles another program for another number of rows).
* A batch statistic (``group_local=False``) really is one: on the same batch some group's call
  differs from its rows by more than 1e-3, so the flag cannot be ``False`` for a group-local
  entry unnoticed (nor ``True`` for a batch statistic: the check above would fail).

The comparison (which outputs are per row, the bitwise test) is ``streaming_difference`` of
benchmarks/reproducibility.py, whose ``--streaming`` run measured the guide's figures.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.reproducibility import streaming_batch, streaming_difference
from credax.testing import calls

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "reproducibility.md"
ROW = re.compile(r"^\| `([^`]+)` \| (yes|no) \| ([^|]+) \|$", flags=re.M)
BATCH = streaming_batch((4,) * 5, seed=0)


def documented() -> dict[str, tuple[bool, str]]:
    """The guide's per-group table: ``{label: (group-local, what a group alone gives)}``."""
    text = GUIDE.read_text()
    section = text[text.index("## Per-group streaming"):]
    rows = ROW.findall(section)
    labels = [label for label, _, _ in rows]
    assert len(labels) == len(set(labels)), "a label listed twice in the guide's table"
    return {label: (local == "yes", claim.strip()) for label, local, claim in rows}


def test_every_registry_entry_declares_group_local():
    undeclared = [label for label, c in calls.REGISTRY.items() if c.group_local is None]
    assert undeclared == [], (
        f"{undeclared}: declare group_local=True or False in credax/_registry.py (does one "
        "prompt group's call equal its rows in the batch?); benchmarks/reproducibility.py "
        "--streaming measures it for the per-group table of docs/guides/reproducibility.md.")


def claim(label: str) -> str:
    """The guide's claim for ``label``; an entry without a row: ``bitwise`` if group-local."""
    table = documented()
    return table[label][1] if label in table else "bitwise"


def test_the_guide_tabulates_entries_as_the_registry_declares_them():
    table = documented()
    assert set(table) <= set(calls.REGISTRY), f"rows of no entry: {sorted(set(table) - set(calls.REGISTRY))}"
    wrong = {label: table[label][0] for label, c in calls.REGISTRY.items()
             if label in table and table[label][0] is not c.group_local}
    assert wrong == {}, f"the guide's group-local column disagrees with the registry: {wrong}"
    for label, (local, claim) in table.items():
        assert (claim == "bitwise" or re.fullmatch(r"≤ \d\.\de-\d\d", claim)) if local else (
            re.fullmatch(r"\d\.\de[-+]\d\d", claim)), (label, claim)


GROUP_LOCAL = [label for label, c in calls.REGISTRY.items() if c.group_local is True]
BATCH_STATISTICS = [label for label, c in calls.REGISTRY.items() if c.group_local is False]


def test_the_test_batch_has_several_interleaved_groups():
    ids = BATCH.group_ids.tolist()
    assert len(set(ids)) == 5 and all(ids.count(g) == 4 for g in ids)
    assert ids != sorted(ids)  # rows interleaved, not one block per group
    assert GROUP_LOCAL and BATCH_STATISTICS


@pytest.mark.parametrize("label", GROUP_LOCAL)
def test_a_group_alone_equals_its_rows_in_the_batch(label):
    said = claim(label)
    difference = streaming_difference(calls.REGISTRY[label], BATCH)
    if said == "bitwise":
        assert difference == 0.0, f"{label}: the guide says bitwise; largest difference {difference}"
    else:
        bound = float(said.removeprefix("≤ "))
        assert difference <= 2 * bound, f"{label}: {difference} against the guide's {said}"


@pytest.mark.parametrize("label", BATCH_STATISTICS)
def test_a_batch_statistic_differs_for_a_group_alone(label):
    difference = streaming_difference(calls.REGISTRY[label], BATCH)
    assert difference > 1e-3, (
        f"{label} is declared a batch statistic (group_local=False), but each group's call alone "
        f"gives its rows of the batch call (largest difference {difference}): is it group-local?")

"""The credit lab's published tables are generated from the committed results JSON, not copied:
the block between the lab-results markers of the guide and of the README is exactly what
``python -m benchmarks.quality.tables`` writes from ``benchmarks/quality/results/lab.json``."""

import json

import pytest

from benchmarks.quality import tables


def _block(path):
    text = path.read_text()
    i, j = text.index(tables.START) + len(tables.START), text.index(tables.END)
    return text[i:j].strip("\n")


@pytest.fixture(scope="module")
def record():
    if not tables.RESULTS.exists():
        pytest.skip("no committed results yet (benchmarks/quality/results/lab.json)")
    return json.loads(tables.RESULTS.read_text())


def test_guide_tables_match_the_results_json(record):
    assert _block(tables.GUIDE) == tables.render(record)


def test_readme_block_matches_the_results_json(record):
    if tables.START not in tables.README.read_text():
        pytest.skip("README.md has no lab-results markers")
    assert _block(tables.README) == tables.summary(record)


def test_committed_results_cover_both_tasks_every_method_and_the_controls(record):
    assert set(record["tasks"]) == {"probe", "refine"} and len(record["seeds"]) >= 5
    for task in record["tasks"].values():
        assert {"true_adv", "shuffled", "grpo", "tcpo_full", "triage_blind"} <= set(task["methods"])
        assert len(task["lab"]["credit"]) >= 3  # the initial policy and two later checkpoints

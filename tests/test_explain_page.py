"""`credax.explain` as a new user meets it (#29 item 4, #27's explain bullets).

The page says in one sentence what each method computes and what a colour means; padded cells
are distinct (hatched grey, in the legend) instead of looking like zeros; prompt ids are shown as
written in the file (JSON), never as Python reprs, and a `$...$` id is text, not mathtext; bad
`--out` / `--max-rollouts` and a missing matplotlib fail before anything is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import credax
from credax import Rollout, Turn
from credax import explain as cx


def _rollouts():
    # Prompt ("a", 1) has rollouts of 2 and 1 turns: the second row's turn 1 is padding.
    return [Rollout(("a", 1), [Turn([1], 0.0, role="E"), Turn([2], 1.0, role="D")]),
            Rollout(("a", 1), [Turn([3], 0.5)]),
            Rollout("$\\frac{x$", [Turn([4], 0.0)]), Rollout("$\\frac{x$", [Turn([5], 1.0)]),
            Rollout(2**40 + 7, [Turn([6], 1.0)])]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("explain")
    ex = cx.explain(_rollouts(), list(cx.METHODS))
    images = cx.write_outputs(ex, str(out), name="probe")
    return ex, out, images, (out / "index.html").read_text()


def test_one_sentence_per_method_and_the_colour_legend(page):
    ex, _, _, text = page
    assert set(cx.METHOD_NOTES) == set(cx.METHODS)
    for m in cx.METHODS:
        note = cx.METHOD_NOTES[m]
        assert note.count(". ") == 0 and note.endswith(".")  # one sentence
        assert f"<li><b>{m}</b> — " in text
    assert "blue = the method pushes the turn" in text
    assert "hatched grey = the rollout has no such turn" in text
    # What each sentence says it normalises over is what the method does (spot checks).
    assert "divided by the group's standard deviation" in cx.METHOD_NOTES["grpo"]
    assert "no division" in cx.METHOD_NOTES["rloo"]
    assert "same anchor state" in cx.METHOD_NOTES["gigpo"]


def test_no_debug_lines_on_the_page(page):
    *_, text = page
    # Before: a visible "images: loading" paragraph, rewritten by a script to "images loaded: n/m".
    assert 'id="status"' not in text and "images: loading" not in text
    assert "data-images-loaded" in text  # the check the browser test reads, not shown


def test_padded_cells_are_marked_in_the_tables(page):
    ex, _, _, text = page
    # Group 0: rollout #0 has 2 turns, #1 has 1: each of #1's method rows ends in a padded cell.
    rows = [line for line in text.splitlines() if line.startswith("<tr><th>#1</th>")]
    assert len(rows) == len(cx.METHODS)
    assert all(row.endswith('<td class="pad" title="no such turn">–</td></tr>') for row in rows)
    assert not any('class="pad"' in line for line in text.splitlines() if line.startswith("<tr><th>#0</th>"))


def test_padded_cells_are_hatched_grey_and_in_the_legend(page):
    ex, out, images, _ = page
    rows = ex.groups()[0]
    fig = cx.heatmap_figure(ex, rows, "t")
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["no such turn"]
    # One hatched patch per padded cell per panel (one padded cell, six panels).
    hatched = [p for ax in fig.axes for p in ax.patches if p.get_hatch() == "///"]
    assert len(hatched) == len(cx.METHODS)
    # In the PNG the padding grey is present (before: #eeeeee, next to RdBu's #f7f7f7 zero).
    import matplotlib.image

    png = matplotlib.image.imread(out / images[0])[..., :3]
    grey = np.all(np.abs(png - 0xBD / 255) < 0.02, axis=-1)
    assert grey.sum() > 100
    # A group without padding has no legend.
    assert not cx.heatmap_figure(ex, ex.groups()[2], "t").legends


def test_ids_are_shown_as_written_in_the_file(page, tmp_path):
    ex, out, _, text = page
    assert cx.prompt_label(("a", 1)) == '["a", 1]'
    assert cx.prompt_label("$\\frac{x$") == '"$\\\\frac{x$"'
    assert cx.prompt_label(2**40 + 7) == "1099511627783"
    # Before: Group 0: <code>(&#x27;a&#x27;, 1)</code> (a Python tuple repr).
    assert "Group 0: <code>[&quot;a&quot;, 1]</code>" in text
    assert "Group 2: <code>1099511627783</code>" in text
    assert "(&#x27;a&#x27;, 1)" not in text
    # The file form round-trips: what the page shows is the JSON of the prompt_id key.
    credax.write_rollouts(tmp_path / "r.jsonl", _rollouts()[:1])
    written = json.loads((tmp_path / "r.jsonl").read_text())["prompt_id"]
    assert written == json.loads(cx.prompt_label(("a", 1)))


def test_mathtext_ids_are_text(page):
    ex, *_ = page
    fig = cx.heatmap_figure(ex, ex.groups()[1], 'group 1: "$\\frac{x$"')
    fig.canvas.draw()  # before: matplotlib parsed "$\frac{x$" as mathtext and raised ValueError
    assert fig.get_suptitle() == 'group 1: "$\\frac{x$"'


def test_write_outputs_checks_before_writing(tmp_path):
    ex = cx.explain(_rollouts(), ["grpo"])
    target = tmp_path / "a-file"
    target.write_text("keep me")
    with pytest.raises(ValueError, match="`out` must be a directory.*is a file"):
        cx.write_outputs(ex, str(target), name="x")
    assert target.read_text() == "keep me"
    for bad in (0, -1):
        with pytest.raises(ValueError, match="`max_rollouts` must be an int >= 1"):
            cx.write_outputs(ex, str(tmp_path / "o"), name="x", max_rollouts=bad)
    with pytest.raises(ValueError, match="`max_groups` must be an int >= 0"):
        cx.write_outputs(ex, str(tmp_path / "o"), name="x", max_groups=-1)
    assert not (tmp_path / "o").exists()
    assert cx.write_outputs(ex, str(tmp_path / "o"), name="x", max_groups=0) == {}


@pytest.mark.parametrize("args, message", [
    (["--max-rollouts", "0"], "--max-rollouts: must be >= 1, got 0"),
    (["--max-rollouts", "-2"], "--max-rollouts: must be >= 1, got -2"),
    (["--max-groups", "-1"], "--max-groups: must be >= 0"),
    (["--max-rows", "x"], "--max-rows: expected an integer"),
])
def test_cli_bad_limits_exit_2(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cx.main(["--example", "--out", str(tmp_path / "o"), *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_out_naming_a_file_exits_2_and_writes_nothing(tmp_path, capsys):
    target = tmp_path / "report.html"
    target.write_text("keep me")
    # Before: a FileExistsError traceback from os.makedirs after the table was printed.
    assert cx.main(["--example", "--out", str(target), "--methods", "grpo"]) == 2
    captured = capsys.readouterr()
    assert "`out` must be a directory" in captured.err and captured.out == ""
    assert target.read_text() == "keep me"


def test_cli_example_and_argument_rules(tmp_path, capsys):
    assert cx.main(["--example", "--methods", "grpo,tcpo", "--out", str(tmp_path / "o"),
                    "--max-groups", "1", "--quiet"]) == 0
    assert len(list((tmp_path / "o").glob("group_*.png"))) == 1
    assert "16 rollouts" in (tmp_path / "o" / "index.html").read_text()
    assert os.path.samefile(cx.EXAMPLE, credax.explain.EXAMPLE)
    for argv in ([], ["--example", cx.EXAMPLE]):
        with pytest.raises(SystemExit):
            cx.main([*argv, "--out", str(tmp_path / "p")])
        assert "give a ROLLOUTS file or directory, or --example" in capsys.readouterr().err


BLOCK_MATPLOTLIB = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'matplotlib':
            raise ImportError(name)
sys.meta_path.insert(0, Block())
import importlib.util
_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split('.')[0] == 'matplotlib' else _find(name, *a)
from credax.explain import main
sys.exit(main(sys.argv[1:]))
"""


def test_cli_without_matplotlib_stops_before_writing(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-c", BLOCK_MATPLOTLIB, *args], capture_output=True,
                              text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})

    # Before: the table was printed and credit.json written, then the heatmap import died.
    done = run("--example", "--out", str(tmp_path / "o"), "--methods", "grpo")
    assert done.returncode == 2, done.stderr
    assert "the heatmaps need matplotlib" in done.stderr and "--no-heatmaps" in done.stderr
    assert done.stdout == "" and not (tmp_path / "o").exists()
    done = run("--example", "--out", str(tmp_path / "o"), "--methods", "grpo", "--no-heatmaps")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["credit.json", "index.html"]
    assert "0 heatmaps" in done.stdout

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
    # Prompt ("a", 1) has rollouts of 2 and 1 turns: the second row's turn 1 is padding. It has
    # roles, anchors and a step reward, so every method is computed there; the other two groups
    # have none of them.
    return [Rollout(("a", 1), [Turn([1], 0.0, role="E", anchor="s"),
                               Turn([2], 1.0, role="D", reward=1.0, anchor="t")]),
            Rollout(("a", 1), [Turn([3], 0.5, anchor="s")]),
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
        assert f"<b>{m}</b> — " in text
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


# ------------------------------------------------------------------------------------------
# #39 part 5: a method whose inputs are not in the file is not computed, and says why.
# ------------------------------------------------------------------------------------------

EXAMPLE_ROLLOUTS = credax.read_rollouts(cx.EXAMPLE)


def _bare(rollouts):
    """The rollouts with scores only: no role, anchor, step reward or outcome."""
    return [Rollout(r.prompt_id, [Turn(t.action, t.score) for t in r.turns]) for r in rollouts]


def _filled(rollouts, seed=0):
    """The bare rollouts with random roles, anchors and step rewards on every turn."""
    rng = np.random.default_rng(seed)
    return [Rollout(r.prompt_id, [Turn(t.action, t.score, role=str(rng.choice(list("DENR"))),
                                       reward=float(rng.normal()), anchor=int(rng.integers(3)))
                                  for t in r.turns]) for r in _bare(rollouts)]


# What each method's formula reads beyond scores and outcomes (SPEC / the method notes):
# TRIAGE the judge roles, MT-GRPO and the turn baseline the step rewards, GiGPO and HGPO both
# step rewards and anchor states, G2PO anchor states. Before the fix all of them were drawn: as
# zeros (HGPO, the turn baseline) or as a copy of GRPO (GiGPO, MT-GRPO, TRIAGE).
NEEDS = {"triage": ["role"], "mt_grpo": ["reward"], "unbiased_turn": ["reward"],
         "gigpo": ["anchor", "reward"], "hgpo": ["anchor", "reward"], "g2po": ["anchor"],
         "pgpo": ["anchor", "reward"], "redistribute": ["reward"], "faca": ["reward"]}


def test_a_method_without_its_inputs_is_not_computed():
    ex = cx.explain(_bare(EXAMPLE_ROLLOUTS), list(cx.METHODS))
    for m, keys in NEEDS.items():
        why = ex.not_computed[m]
        assert all(f"`{key}`" in why for key in keys), (m, why)
        assert "in the file" in why
        assert all(np.isnan(v).all() for v in ex.credit[m])  # never a number
        assert set(ex.missing[m]) == set(range(len(ex.prompt_keys)))
    for m in ("grpo", "rloo", "gpg", "tcpo"):  # outcomes and scores only: computed
        assert m not in ex.not_computed and not ex.missing[m]
        assert all(np.isfinite(v).all() for v in ex.credit[m])
    # The terminal table says n/a, never +0.00.
    line = cx.table(ex).splitlines()[2]
    assert line.split()[4:6] != ["n/a"] and "n/a" in line


def test_what_is_computed_does_not_depend_on_what_the_file_lacks():
    # Decided from what each call reads: a method shown on the bare file gives the same credit
    # when the file has random roles, anchors and step rewards (it does not read them), for every
    # method in the call table, present or future.
    bare = cx.explain(_bare(EXAMPLE_ROLLOUTS), list(cx.METHODS))
    for seed in (0, 1):
        filled = cx.explain(_filled(EXAMPLE_ROLLOUTS, seed), list(cx.METHODS))
        assert not filled.not_computed
        for m in cx.METHODS:
            if m in bare.not_computed:
                continue
            for a, b in zip(bare.credit[m], filled.credit[m], strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=m)
    # ... and a method greyed on the bare file does read them: its credit changes.
    filled = cx.explain(_filled(EXAMPLE_ROLLOUTS, 0), list(NEEDS))
    other = cx.explain(_filled(EXAMPLE_ROLLOUTS, 1), list(NEEDS))
    for m in NEEDS:
        assert not all(np.allclose(a, b) for a, b in zip(filled.credit[m], other.credit[m],
                                                          strict=True)), m


def test_missing_in_some_groups_is_greyed_there_only(page):
    ex, out, images, text = page
    # Group 0 has roles, anchors and a reward; groups 1 and 2 have none.
    for m in NEEDS:
        assert set(ex.missing[m]) == {1, 2}, m
        assert "in 2 of the 3 prompt groups" in ex.not_computed[m]
        assert np.isfinite(np.concatenate([ex.credit[m][i] for i in ex.groups()[0]])).all()
        assert all(np.isnan(ex.credit[m][i]).all() for g in (1, 2) for i in ex.groups()[g])
    data = json.loads((out / "credit.json").read_text())
    assert set(data["not_computed"]) == set(NEEDS)
    for rec in data["rollouts"]:
        for m in NEEDS:
            assert (rec["credit"][m] is None) == (rec["group"] != 0)
            assert (m in rec["not_computed"]) == (rec["group"] != 0)
    # The page: greyed with the reason in the method list, per group, and in the summary.
    assert '<li class="not-computed" data-method="gigpo"><b>gigpo</b>' in text
    assert "computed in 1 groups of 3" in text
    sections = text.split('<h2 id="group-')[1:]
    assert len(sections) == 3
    assert 'class="not-computed"' not in sections[0]
    for section in sections[1:]:
        for m in NEEDS:
            assert f'<li data-method="{m}"><b>{m}</b> not computed for this group: ' in section
            assert f"<th>{m}</th>" not in section  # no rows of numbers for it
    assert "no turn in this group has a judge <code>role</code>" in sections[1]


def test_not_computed_panels_are_grey_with_the_reason(page):
    ex, *_ = page
    fig = cx.heatmap_figure(ex, ex.groups()[1], "t")
    titles = [ax.get_title() for ax in fig.axes[:len(cx.METHODS)]]
    for m in cx.METHODS:
        assert (f"{m}: not computed" in titles) == (m in NEEDS), m
    grey = [ax for ax in fig.axes if ax.get_title().endswith("not computed")]
    for ax in grey:
        assert not ax.images  # no colours: nothing that reads as a value
        (label,) = ax.texts
        m = ax.get_title().split(":")[0]
        assert label.get_text().replace("\n", " ") == ex.missing[m][1].replace("`", "")


def test_stderr_warns_for_each_method_not_computed(tmp_path, capsys):
    credax.write_rollouts(tmp_path / "bare.jsonl", _bare(EXAMPLE_ROLLOUTS))
    assert cx.main([str(tmp_path / "bare.jsonl"), "--methods", "grpo,tcpo,hgpo,triage",
                    "--out", str(tmp_path / "o"), "--no-heatmaps", "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split()[2] for line in err] == ["hgpo", "triage"]
    assert err[1] == ("credax.explain: warning: triage not computed (no turn in the file has a "
                      "judge `role`): greyed out on the page, null in credit.json.")


def test_one_colour_scale_for_every_group(page):
    ex, out, images, text = page
    data = json.loads((out / "credit.json").read_text())
    # The largest |advantage| of the file, read back from credit.json (nulls skipped).
    largest = max(abs(v) for rec in data["rollouts"] for c in rec["credit"].values() if c
                  for v in c)
    scales = set()
    for rows in ex.groups():
        fig = cx.heatmap_figure(ex, rows, "t")
        norms = {(im.norm.vmin, im.norm.vmax) for ax in fig.axes for im in ax.images}
        scales |= {n for n in norms if n != (0, 1)}  # the colour bar's own axes image
    assert len(scales) == 1
    ((low, high),) = scales
    assert high == pytest.approx(largest, rel=1e-6) and low == -high
    assert f"runs from −{largest:.2f} to +{largest:.2f} on every heatmap" in text


def test_tcpo_parts_explain_a_zero(tmp_path):
    # Two rollouts of one prompt, scores (0.5, 1.0) and (0.5, 0.5). Turn 0: both went 0.00 ->
    # 0.50 (best before: the initial 0), so both have retrospective 0.5, hindsight 0 (improving
    # turns are not eligible), sum 0.5 = the group's mean: advantage 0. Turn 1: row 0 is a new best
    # (+0.5); row 1 is eligible for hindsight but its only peer (row 0) is not: hindsight 0, sum 0;
    # mean 0.25, so row 0 > 0 > row 1.
    rs = [Rollout("p", [Turn([1], 0.5), Turn([2], 1.0)]), Rollout("p", [Turn([3], 0.5), Turn([4], 0.5)])]
    ex = cx.explain(rs, ["tcpo"])
    parts = ex.parts["tcpo"]
    expected = {"best score before": [[0.0, 0.5], [0.0, 0.5]],
                "retrospective (progress)": [[0.5, 0.5], [0.5, 0.0]],
                "hindsight": [[0.0, 0.0], [0.0, 0.0]],
                "sum before the z-score": [[0.5, 0.5], [0.5, 0.0]]}
    for label, rows in expected.items():
        np.testing.assert_allclose(parts[label], rows, atol=1e-7, err_msg=label)
    assert ex.credit["tcpo"][0][0] == 0 and ex.credit["tcpo"][1][0] == 0
    assert ex.credit["tcpo"][0][1] > 0 > ex.credit["tcpo"][1][1]
    cx.write_outputs(ex, str(tmp_path), name="x")
    text = (tmp_path / "index.html").read_text()
    rows = [line for line in text.splitlines() if line.startswith('<tr class="part"><th>#0</th>')]
    assert [r.split("</th>")[1].removeprefix("<th>") for r in rows] == [
        "score", "best score before", "retrospective (progress)", "hindsight",
        "sum before the z-score", "group mean of the sum", "advantage (after the z-score)"]
    assert rows[5].endswith("<td>0.500</td><td>0.250</td></tr>")  # the group's mean sum per turn
    assert 'class="">+0.000</td>' in rows[6]


def test_cell_labels_fit_their_cells_and_are_readable(page):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    ex, *_ = page
    assert cx.LABEL_PX >= 10  # px in the PNG, shown at its own size (the browser test checks it)
    for rows in ex.groups():
        fig = cx.heatmap_figure(ex, rows, "t")
        canvas = FigureCanvasAgg(fig)  # the PNG's renderer (what savefig draws with)
        canvas.draw()
        renderer = canvas.get_renderer()
        for ax in fig.axes:
            box = ax.get_window_extent(renderer)
            labels = [t.get_window_extent(renderer) for t in ax.texts]
            if not ax.images:  # a grey panel: its reason inside it
                assert all(box.x0 <= b.x0 and b.x1 <= box.x1 for b in labels)
                continue
            n, k = ax.images[0].get_array().shape
            cell_w, cell_h = box.width / k, box.height / n
            for b in labels:
                assert b.width < cell_w and b.height < cell_h, (b, cell_w, cell_h)
            for i, a in enumerate(labels):  # and none overlaps another
                assert not any(a.overlaps(b) for b in labels[i + 1:])
            assert all(t.get_fontsize() * fig.dpi / 72 >= 10 for t in ax.texts)


def test_out_below_a_file_exits_2_before_printing(tmp_path, capsys):
    target = tmp_path / "report.html"
    target.write_text("keep me")
    # Before: the table was printed, then os.makedirs raised NotADirectoryError.
    for out in (target / "sub", target / "a" / "b"):
        assert cx.main(["--example", "--out", str(out), "--methods", "grpo"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert f"{str(target)!r} above it is a file, not a directory" in captured.err
    assert target.read_text() == "keep me"


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as exit_:
        cx.main(["--help"])
    assert exit_.value.code == 0
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines at hyphens
    assert "(default:credax-explain)" in text and "(default:grpo,tcpo,triage)" in text


def test_the_docstring_table_lists_every_method_shown():
    # The module docstring's method table (what `help(credax.explain)` and the API page show) names
    # exactly the methods of SHOWN, in its order (#43 item 3: it listed 11 of the 13); method m
    # is credax.<m>_advantages.
    import re

    rows = re.findall(r"^``(\w+)``\s{2,}(.*)$", cx.__doc__, flags=re.M)
    assert [m for m, _ in rows] == list(cx.SHOWN)
    assert all(cx.EXPLAINED[m].name == f"{m}_advantages" for m in cx.SHOWN)


def test_explain_accepts_the_cli_comma_form():
    # #44 item 5: a string was iterated ("unknown method 'g'"); the CLI's "grpo,tcpo" is the same
    # request as ["grpo", "tcpo"], and a string naming an unknown method is refused by its name.
    rs = _rollouts()
    by_string, by_list = cx.explain(rs, "grpo, tcpo"), cx.explain(rs, ["grpo", "tcpo"])
    assert by_string.methods == ["grpo", "tcpo"]
    for m in by_list.methods:
        for a, b in zip(by_string.credit[m], by_list.credit[m], strict=True):
            np.testing.assert_array_equal(a, b)
    assert cx.explain(rs, "rloo").methods == ["rloo"]
    with pytest.raises(ValueError, match="unknown method 'grpoo'"):
        cx.explain(rs, "grpoo")

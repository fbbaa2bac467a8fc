"""`python -m credax.explain` end to end on the shipped example, and its HTML in real Chromium.

The browser check needs Debian's `chromium`; the fixture installs it (apt-get, as root, CI too)
when /usr/bin/chromium is missing.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import credax

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "src" / "credax" / "data" / "agent_tasks.jsonl"
GENERATOR = ROOT / "examples" / "rollouts" / "make_agent_tasks.py"
METHODS = "grpo,rloo,tcpo,triage,gigpo,mt_grpo"
CHROMIUM = "/usr/bin/chromium"


def _run(*args, check=True):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-m", "credax.explain", *map(str, args)],
                         capture_output=True, text=True, env=env, timeout=600)
    if check:
        assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def explained(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("explain")
    proc = _run(EXAMPLE, "--methods", METHODS, "--out", out_dir)
    return out_dir, proc


def test_example_file_is_what_its_generator_writes(tmp_path):
    # The shipped file is reproducible from the script next to it.
    import runpy

    gen = runpy.run_path(str(GENERATOR))
    credax.write_rollouts(tmp_path / "x.jsonl", gen["rollouts"]())
    assert (tmp_path / "x.jsonl").read_text() == EXAMPLE.read_text()


def test_cli_writes_table_json_heatmaps_and_page(explained):
    out_dir, proc = explained
    rollouts = credax.read_rollouts(EXAMPLE)
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:4] == ["group", "row", "turns", "outcome"]
    assert lines[0].split()[4:] == METHODS.split(",")
    assert sum(1 for line in lines if line[:5].strip().isdigit()) == len(rollouts) == 16
    assert "wrote" in lines[-1]
    data = json.loads((out_dir / "credit.json").read_text())
    assert data["methods"] == METHODS.split(",")
    assert len(data["rollouts"]) == 16
    groups = {r["group"] for r in data["rollouts"]}
    for g in groups:
        png = out_dir / f"group_{g:03d}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out_dir / "index.html").exists()


def test_cli_credit_equals_the_credax_functions(explained):
    out_dir, _ = explained
    data = json.loads((out_dir / "credit.json").read_text())
    batch, layout = credax.pad_rollouts(credax.read_rollouts(EXAMPLE))
    grpo = layout.per_rollout(credax.grpo_advantages(batch.outcome, batch.groups, batch.row_mask))
    tcpo = layout.per_turn(credax.tcpo_advantages(batch.scores, batch.turn_mask,
                                                  batch.groups).advantages)
    for rec, g, t in zip(data["rollouts"], grpo, tcpo, strict=True):
        # GRPO: the rollout's outcome advantage on each of its turns.
        np.testing.assert_allclose(rec["credit"]["grpo"], [g] * len(rec["scores"]), rtol=1e-6)
        np.testing.assert_allclose(rec["credit"]["tcpo"], t, rtol=1e-6, atol=1e-7)
        # TRIAGE with λ = 0.2: GRPO + 0.2 * c[role], c = (1, .5, -.1, -.5), 0 unlabeled.
        c = np.array([1.0, 0.5, -0.1, -0.5, 0.0])[np.array(rec["roles"])]
        np.testing.assert_allclose(rec["credit"]["triage"], g + 0.2 * c, rtol=1e-5, atol=1e-6)
    # The 64-bit prompt id is its own group, kept exactly.
    assert 2**40 + 7 in [r["prompt_id"] for r in data["rollouts"]]


def test_bad_input_exits_2_naming_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(EXAMPLE.read_text().splitlines()[0] + '\n{"prompt_id": "x", "turns": 3}\n')
    out = _run(bad, "--out", tmp_path / "o", check=False)
    assert out.returncode == 2
    assert f"{bad}:2: field `turns`" in out.stderr
    out = _run(EXAMPLE, "--methods", "grpo,ppo", "--out", tmp_path / "o", check=False)
    assert out.returncode == 2 and "unknown method 'ppo'" in out.stderr
    assert not (tmp_path / "o").exists()  # nothing written from a failed read


def test_progress_on_large_files(tmp_path):
    rollouts = credax.read_rollouts(EXAMPLE) * 700  # ~5 MiB: more than the 4 MiB threshold
    big = tmp_path / "big.jsonl"
    credax.write_rollouts(big, rollouts)
    assert big.stat().st_size > 4 << 20
    out = _run(big, "--methods", "grpo,tcpo", "--out", tmp_path / "o", "--max-groups", "2",
               "--max-rows", "5")
    reads = [line for line in out.stderr.splitlines() if line.startswith("reading")]
    assert len(reads) >= 4 and "100.0%" in reads[-1]
    assert "more rollouts in credit.json" in out.stdout
    page = (tmp_path / "o" / "index.html").read_text()
    assert "2 more groups are in credit.json" in page  # 4 groups, 2 drawn
    assert "(first 24 of 2800 rollouts)" not in page  # the cap is in the PNG titles
    assert len(list((tmp_path / "o").glob("group_*.png"))) == 2


def test_import_credax_needs_no_matplotlib():
    code = "import sys, credax; credax.read_rollouts; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------------------------
# The page in a real headless Chromium.
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium():
    if not os.path.exists(CHROMIUM):
        if shutil.which("apt-get") is None:
            pytest.skip("Chromium is missing and there is no apt-get to install it")
        done = subprocess.run("apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                              "chromium", shell=True, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0 or not os.path.exists(CHROMIUM):
            pytest.skip(f"Chromium is missing and `apt-get install chromium` failed "
                        f"(exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return CHROMIUM


def _chromium(binary, tmp_path, *args):
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def half(tmp_path_factory):
    """The example with its first two prompt groups as shipped and the other two stripped to
    scores (no roles, anchors or step rewards): a page with greyed methods in two groups. One
    rollout of 16 turns makes group 0's heatmap 12 inches (1200 px) wide: wider than the window."""
    from credax import explain as cx

    work = tmp_path_factory.mktemp("half")
    rollouts = credax.read_rollouts(EXAMPLE)
    keep = list(dict.fromkeys(r.prompt_id for r in rollouts))[:2]
    long = credax.Rollout(keep[0], [credax.Turn([k], (k % 5) / 4, role="E", anchor=f"s{k % 3}")
                                    for k in range(16)])
    credax.write_rollouts(work / "half.jsonl", [long] + [
        r if r.prompt_id in keep else credax.Rollout(
            r.prompt_id, [credax.Turn(t.action, t.score) for t in r.turns]) for r in rollouts])
    assert cx.main([str(work / "half.jsonl"), "--methods", METHODS + ",unbiased_turn",
                    "--out", str(work / "out"), "--quiet"]) == 0
    return work / "out"


def test_html_page_in_headless_chromium(half, chromium, tmp_path):
    url = (half / "index.html").as_uri()
    # 800 px wide: the page's own load handler records what the browser laid out.
    dom = _chromium(chromium, tmp_path, "--dump-dom", "--window-size=800,2000", url)
    assert dom.returncode == 0, dom.stderr
    n_groups = len(list(half.glob("group_*.png")))
    assert n_groups == 4
    (body,) = re.findall(r"<body [^>]*>", dom.stdout)
    attrs = dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', body))
    assert attrs["data-images-loaded"] == f"{n_groups}/{n_groups}"  # each PNG decoded
    # The smallest cell label as drawn on screen (its PNG size times the image's on-screen
    # scale; before: heatmaps were shrunk to the window, labels ~5 px) and no page-wide
    # horizontal scroll (a wide heatmap or table scrolls in its own box).
    assert float(attrs["data-min-label-px"]) >= 10.5, attrs
    width, window = map(int, attrs["data-page-width"].split("/"))
    assert window == 800 and width <= window, attrs
    assert '<table id="summary">' in dom.stdout
    for m in ("grpo", "rloo", "tcpo"):
        assert f"<tr><th>{m}</th>" in dom.stdout
    # Greyed with the reason: in the method list, and in the two stripped groups only.
    for m in ("triage", "gigpo", "mt_grpo", "unbiased_turn"):
        assert f'<li class="not-computed" data-method="{m}"><b>{m}</b>' in dom.stdout
    groups = dom.stdout.split('<h2 id="group-')[1:]
    assert ['<ul class="not-computed">' in g for g in groups] == [False, False, True, True]
    assert "no turn in this group has a judge <code>role</code>" in groups[2]
    assert "tcpo: its parts" in groups[0]
    shot = tmp_path / "page.png"
    res = _chromium(chromium, tmp_path, f"--screenshot={shot}", "--window-size=800,3000",
                    "--hide-scrollbars", url)
    assert res.returncode == 0, res.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    # The screenshot is 800 px wide and shows the greyed rows' background (#eeeeee) and the
    # heatmaps' colours: what was laid out was drawn.
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[1] == 800
    grey = np.all(np.abs(pixels - 0xEE / 255) < 0.004, axis=-1)
    assert grey.sum() > 5_000
    keep = os.environ.get("CREDAX_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)

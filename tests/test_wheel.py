"""The wheel a user builds installs into a fresh virtual environment and runs the README quickstart,
the example scripts and `python -m credax.explain --example` (its shipped data, no matplotlib).

Built from a copy of the sources (so the working tree gets no build/ or egg-info, and xdist workers
never share a build folder), installed with its dependencies from the same indexes and pip cache
the project venv uses, and run from an unrelated folder that holds an empty ``credax/`` directory
(a clone seen from its parent). About a minute on 2 loaded cores, most of it installing jax.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# What the wheel's programs run with: this environment less PYTHONPATH (the suite is run with
# PYTHONPATH=<checkout>/src, which would make a clone's sources what `import credax` finds).
WHEEL_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
QUICKSTART = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)[0]

# After the quickstart: what the user's environment sees.
REPORT = """
import importlib.metadata, json, pathlib
import credax
print(json.dumps({
    "file": credax.__file__,
    "version": credax.__version__,
    "metadata_version": importlib.metadata.version("credax"),
    "typed": (pathlib.Path(credax.__file__).parent / "py.typed").is_file(),
    "license": any(f.name == "LICENSE" for f in importlib.metadata.files("credax")),
    "adv": [round(float(a), 5) for a in adv],
}))
"""


def _pip(*args, cwd):
    # The project venv's pip drives the fresh venv (`pip --python`): no pip bootstrap inside it.
    cmd = [sys.executable, "-m", "pip", *args]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src",
                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(src), cwd=src)
    (path,) = dist.glob("credax-*.whl")
    return path


@pytest.fixture(scope="module")
def wheel_venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel and its runtime dependencies only (no matplotlib, no torch)."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    _pip("--python", str(python), "install", "--quiet", "--no-compile", str(wheel), cwd=venv.parent)
    return venv, python


def test_wheel_contents(wheel):
    import credax

    assert wheel.name == f"credax-{credax.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "credax/py.typed" in names
    assert "credax/data/agent_tasks.jsonl" in names  # python -m credax.explain --example
    assert f"credax-{credax.__version__}.dist-info/licenses/LICENSE" in names
    assert not any(n.startswith(("tests/", "benchmarks/", "src/")) for n in names)


def test_wheel_installs_and_runs_the_quickstart(wheel_venv, tmp_path):
    venv, python = wheel_venv
    work = tmp_path / "elsewhere"
    (work / "credax").mkdir(parents=True)  # the import trap: must not be what `import credax` finds
    script = work / "quickstart.py"
    script.write_text(QUICKSTART + REPORT)
    done = subprocess.run([str(python), str(script)], cwd=work, capture_output=True, text=True,
                          env=WHEEL_ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])

    assert pathlib.Path(got["file"]).is_relative_to(venv), got["file"]
    assert got["version"] == got["metadata_version"]
    assert got["typed"] and got["license"]
    # Prompt 17 = (1, 0, 1): μ = 2/3, unbiased σ = sqrt((1/9 + 4/9 + 1/9) / 2) = sqrt(1/3);
    # the constant group (0.35, 0.35) and the singleton get exactly 0.
    sigma = (1 / 3) ** 0.5
    expected = [(1 / 3) / sigma, (-2 / 3) / sigma, (1 / 3) / sigma, 0.0, 0.0, 0.0]
    assert got["adv"] == [round(e, 5) for e in expected]


def test_wheel_runs_the_benchmark_cli(wheel_venv, tmp_path):
    """`python -m credax.bench` ships with the package: it runs from the installed wheel alone
    (no repository, no torch, no matplotlib: JSON and markdown, and a note that the plot is
    skipped), from an unrelated folder."""
    venv, python = wheel_venv
    work = tmp_path / "elsewhere"
    work.mkdir()
    out = work / "bench-out"
    done = subprocess.run(
        [str(python), "-m", "credax.bench", "--quick", "--entries", "grpo_advantages",
         "--no-torch", "--out", str(out)],
        cwd=work, capture_output=True, text=True, env=WHEEL_ENV, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (report,) = out.glob("*.json")
    data = json.loads(report.read_text())
    assert data, "empty benchmark report"
    assert "matplotlib is not installed" in done.stdout


def _run_from_elsewhere(python, work, *args):
    done = subprocess.run([str(python), *map(str, args)], cwd=work, capture_output=True, text=True,
                          env=WHEEL_ENV, timeout=600)
    return done


@pytest.mark.parametrize("script", ["foundation_tour.py", "tcpo_ladder.py", "triage_conflicts.py"])
def test_wheel_runs_the_examples(wheel_venv, tmp_path, script):
    """The example scripts need the wheel alone: copied out of the clone, run from elsewhere."""
    _, python = wheel_venv
    work = tmp_path / "elsewhere"
    (work / "credax").mkdir(parents=True)  # the import trap, as for the quickstart
    shutil.copy(ROOT / "examples" / script, work / script)
    done = _run_from_elsewhere(python, work, script)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.strip()


def test_wheel_ships_the_example_rollouts_and_explain_runs_without_matplotlib(wheel_venv, tmp_path):
    _, python = wheel_venv
    work = tmp_path / "elsewhere"
    work.mkdir()
    # The shipped file is what the clone's generator writes, and the generator runs from a wheel.
    shutil.copy(ROOT / "examples" / "rollouts" / "make_agent_tasks.py", work / "make_agent_tasks.py")
    done = _run_from_elsewhere(python, work, "make_agent_tasks.py", work / "tasks.jsonl")
    assert done.returncode == 0, done.stderr[-3000:]
    shipped = (ROOT / "src" / "credax" / "data" / "agent_tasks.jsonl").read_text()
    assert (work / "tasks.jsonl").read_text() == shipped
    # No matplotlib in this venv: explain says so and writes nothing, or writes without heatmaps.
    done = _run_from_elsewhere(python, work, "-m", "credax.explain", "--example", "--out", "o")
    assert done.returncode == 2 and "need matplotlib" in done.stderr and not (work / "o").exists()
    done = _run_from_elsewhere(python, work, "-m", "credax.explain", "--example", "--out", "o",
                               "--no-heatmaps", "--methods", "grpo,tcpo")
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (work / "o").iterdir()) == ["credit.json", "index.html"]
    assert len(json.loads((work / "o" / "credit.json").read_text())["rollouts"]) == 16


README = (ROOT / "README.md").read_text()


def test_readme_installs_the_wheel_with_extras(wheel, tmp_path):
    """The README's `pip install '<wheel>[extras]'` line, run as printed (the wheel's real path in
    place of /path/to/credax) into an empty venv: pip resolves the extras from the wheel's
    metadata. A dry run (--report): what it would install, without the minutes of installing."""
    (line,) = [ln for ln in README.splitlines() if re.match(r"pip install '.*\.whl\[", ln)]
    target, extras = re.match(r"pip install '/path/to/credax/dist/(\S+\.whl)\[([\w,]+)\]'", line).groups()
    assert target == wheel.name  # the file name the README shows is the one a build writes
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    report = tmp_path / "report.json"
    _pip("--python", str(venv / "bin" / "python"), "install", "--dry-run", "--quiet", "--report",
         str(report), f"{wheel}[{extras}]", cwd=tmp_path)
    install = {item["metadata"]["name"].lower(): item for item in json.loads(report.read_text())["install"]}
    assert sorted(install["credax"]["requested_extras"]) == sorted(extras.split(",")) == ["explain", "nnx"]
    assert {"flax", "optax", "matplotlib", "jax"} <= set(install)


def test_readme_runs_the_examples_from_a_copy(wheel_venv, tmp_path):
    """The README's two lines that get the example scripts and run one, as printed (the clone's
    path and the wheel venv's python substituted), from an unrelated folder."""
    (block,) = [b for b in re.findall(r"```bash\n(.*?)```", README, flags=re.S) if "credax-examples" in b]
    _, python = wheel_venv
    work = tmp_path / "elsewhere"
    (work / "credax").mkdir(parents=True)  # the import trap, as for the quickstart
    for line in block.strip().splitlines():
        command = line.split("#")[0].strip().replace("/path/to/credax", str(ROOT))
        command = re.sub(r"^python ", f"{python} ", command)
        done = subprocess.run(command, shell=True, cwd=work, capture_output=True, text=True,
                              env=WHEEL_ENV, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert (work / "credax-examples" / "foundation_tour.py").is_file()
    assert done.stdout.strip()  # the tour printed
    where = _run_from_elsewhere(python, work, "-c", "import credax; print(credax.__file__)")
    assert pathlib.Path(where.stdout.strip()).is_relative_to(python.parents[1])  # the wheel's

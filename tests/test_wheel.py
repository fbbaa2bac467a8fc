"""The wheel a user builds installs into a fresh virtual environment and runs the README quickstart.

Built from a copy of the sources (so the working tree gets no build/ or egg-info, and xdist workers
never share a build folder), installed with its dependencies from the same indexes and pip cache
the project venv uses, and run from an unrelated folder that holds an empty ``credax/`` directory
(a clone seen from its parent). About a minute on 2 loaded cores, most of it installing jax.
"""

import json
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
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


def test_wheel_contents(wheel):
    import credax

    assert wheel.name == f"credax-{credax.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "credax/py.typed" in names
    assert f"credax-{credax.__version__}.dist-info/licenses/LICENSE" in names
    assert not any(n.startswith(("tests/", "benchmarks/", "src/")) for n in names)


def test_wheel_installs_and_runs_the_quickstart(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    _pip("--python", str(python), "install", "--quiet", "--no-compile", str(wheel), cwd=tmp_path)

    work = tmp_path / "elsewhere"
    (work / "credax").mkdir(parents=True)  # the import trap: must not be what `import credax` finds
    script = work / "quickstart.py"
    script.write_text(QUICKSTART + REPORT)
    done = subprocess.run([str(python), str(script)], cwd=work, capture_output=True, text=True,
                          timeout=300)
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


def test_wheel_runs_the_benchmark_cli(wheel, tmp_path):
    """`python -m credax.bench` ships with the package: it runs from the installed wheel alone
    (no repository, no torch, no matplotlib: JSON and markdown, and a note that the plot is
    skipped), from an unrelated folder."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    _pip("--python", str(python), "install", "--quiet", "--no-compile", str(wheel), cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    out = work / "bench-out"
    done = subprocess.run(
        [str(python), "-m", "credax.bench", "--quick", "--entries", "grpo_advantages",
         "--no-torch", "--out", str(out)],
        cwd=work, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (report,) = out.glob("*.json")
    data = json.loads(report.read_text())
    assert data, "empty benchmark report"
    assert "matplotlib is not installed" in done.stdout

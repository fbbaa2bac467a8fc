"""Every ```python block of README.md runs as written, so the documentation cannot rot."""

import pathlib
import re

import jax
import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index):
    # A reader runs these with JAX's standard promotion (optax's adamw, for one, mixes a Python
    # float with an int32 step count, which the suite's strict mode rejects).
    with jax.numpy_dtype_promotion("standard"):
        exec(compile(BLOCKS[index], f"README.md[block {index}]", "exec"), {"__name__": "readme"})


def test_quickstart_values():
    ns = {"__name__": "readme"}
    exec(compile(BLOCKS[0], "README.md[quickstart]", "exec"), ns)
    # Prompt 17 = (1, 0, 1): μ = 2/3, unbiased σ = sqrt((1/9 + 4/9 + 1/9) / 2) = sqrt(1/3).
    sigma = (1 / 3) ** 0.5
    expected = [(1 / 3) / sigma, (-2 / 3) / sigma, (1 / 3) / sigma, 0.0, 0.0, 0.0]
    assert [round(float(a), 5) for a in ns["adv"]] == [round(e, 5) for e in expected]

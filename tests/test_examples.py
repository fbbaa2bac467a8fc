"""The example scripts run, and the foundation tour prints the degenerate cases it promises."""

import pathlib
import runpy

import jax

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_foundation_tour(capsys):
    with jax.numpy_dtype_promotion("standard"):
        runpy.run_path(str(ROOT / "examples" / "foundation_tour.py"), run_name="__main__")
    out = capsys.readouterr().out
    # Prompt -4 holds two rewards of 0.35: constant, so every normalised column is exactly 0.
    row1 = next(line for line in out.splitlines() if line.split()[:2] == ["1", "-4"])
    assert row1.split()[3:8] == ["0.000"] * 5 and row1.split()[-1] == "True"
    # The singleton prompt 2**20 (reward 0.6): 0 by default, its raw score under verl's preset.
    row4 = next(line for line in out.splitlines() if line.split()[:2] == ["4", "1048576"])
    assert row4.split()[3:5] == ["0.000", "0.600"]


def test_nnx_step_benchmark_runs(capsys):
    from benchmarks import nnx_step

    with jax.numpy_dtype_promotion("standard"):  # optax's adamw mixes float and int32 scalars
        nnx_step.main(steps=2)
    assert "median step" in capsys.readouterr().out


def test_nnx_step_head_reports_the_credit_share_with_conditions(capsys):
    # plumbing only (the quick head size): the fused head step, TCPO + GRPO on its turn tensors,
    # their share of the step and the conditions it was measured under
    from benchmarks import nnx_step

    with jax.numpy_dtype_promotion("standard"):
        out = nnx_step.head(1, **nnx_step.HEAD_SIZES["quick"])
    text = capsys.readouterr().out
    assert "fused" in text and "conditions:" in text and "load average" in text
    assert "both" in text and "goal < 1%" in text
    assert 0 < out["credit_share"] == (out["tcpo_s"] + out["grpo_s"]) / out["step_s"]


def test_memory_benchmark_runs(capsys):
    from benchmarks import memory

    memory.main(["1,64,8,128,16"])
    out = capsys.readouterr().out
    assert "chunk_size=None" in out and "chunk_size=16" in out

"""``credax.bench``: the speed benchmark, installed with the package (``python -m credax.bench``).

Not imported by ``import credax``. Modules: ``credax.bench.harness`` (agreement checks,
interleaved timing, compile events, the device copy that sets the roofline),
``credax.bench.cases`` (presets, data, the peer cases, the sweep over every public entry point),
``credax.bench.report`` (JSON, markdown, plot), ``credax.bench.peers`` (the
torch / NumPy implementations credax is compared with, and float64 references),
``credax.bench.profile`` (``kernel_profile``: a compiled call's time per kernel, from
``jax.profiler``; ``--profile`` adds it to the sweep). Compiled memory is measured in one place,
``credax.bench.harness.compiled_memory``. The project's own targets are not here: they live in
the clone, ``benchmarks/targets.py`` (``main(targets=...)`` takes them). The user guide is
``docs/guides/speed.md``. torch and
matplotlib come with the ``bench`` extra: ``pip install '/path/to/credax[bench]'``.
"""


def main(argv=None, *, presets=None, targets=None) -> int:
    """Run the benchmark with command-line arguments ``argv`` (see ``python -m credax.bench -h``);
    ``presets`` and ``targets``: one's own presets and goals (``credax.bench.__main__.main``)."""
    from .__main__ import main as run

    return run(argv, presets=presets, targets=targets)

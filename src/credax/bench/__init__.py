"""``credax.bench``: the speed benchmark, installed with the package (``python -m credax.bench``).

Not imported by ``import credax``. Modules: ``credax.bench.harness`` (agreement checks,
interleaved timing, compile events, the device copy that sets the roofline),
``credax.bench.cases`` (presets, data, the peer cases, the sweep over every public entry point,
the targets), ``credax.bench.report`` (JSON, markdown, plot), ``credax.bench.peers`` (the
torch / NumPy implementations credax is compared with, and float64 references),
``credax.bench.profile`` (``kernel_profile``: a compiled call's time per kernel, from
``jax.profiler``; ``--profile`` adds it to the sweep). The user guide is
``docs/guides/speed.md``. torch and
matplotlib come with the ``bench`` extra: ``pip install '/path/to/credax[bench]'``.
"""


def main(argv=None) -> int:
    """Run the benchmark with command-line arguments ``argv`` (see ``python -m credax.bench -h``)."""
    from .__main__ import main as run

    return run(argv)

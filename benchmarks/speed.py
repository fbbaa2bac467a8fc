"""Speed of credax against the implementations people use today: the repository's entry to
:mod:`credax.bench` (the same harness, cases and report) with the project's own targets
(``benchmarks/targets.py``: the report's Targets table, the ``targets`` preset), writing to
``benchmarks/results``.

    python -m benchmarks.speed                 # full CPU run -> benchmarks/results/speed-cpu.{json,png,md}
    python -m benchmarks.speed --quick         # toy sizes (CI), written to a temporary directory
    python -m benchmarks.speed --platform gpu  # JAX on the GPU, torch peers on CUDA
    python -m benchmarks.speed --preset targets --threads 1   # only the sizes the targets are read at

``make bench`` runs it with glibc's hugetlb tunable and ``make bench-nohuge`` without (both are
reported); every option of ``python -m credax.bench`` applies.
"""

from __future__ import annotations

import sys
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def main(argv=None) -> int:
    from credax.bench.__main__ import main as bench_main

    from . import targets

    argv = sys.argv[1:] if argv is None else list(argv)
    quick = "--quick" in argv or "quick" in argv
    chosen = any(a.split("=")[0] in ("--platform", "--device") for a in argv)
    if not chosen:
        argv = ["--platform", "cpu", *argv]  # the committed results are CPU results
    return bench_main(argv, prog="python -m benchmarks.speed",
                      default_out=None if quick else RESULTS_DIR, presets=targets.PRESETS,
                      targets=targets.evaluate_targets)


if __name__ == "__main__":
    sys.exit(main())

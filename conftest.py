"""Repository-root pytest configuration: the suite's XLA backend level, and optional-dependency
modules collected only where their dependency is installed (``make test`` installs torch and verl,
so CI collects both)."""

import importlib.util
import os

# The suite compiles thousands of small, distinct XLA programs and runs most of them a few times,
# so LLVM's optimisation of the generated CPU code (XLA's default, level 3) costs more CPU than it
# saves: at level 0 all 2015 tests pass and the suite takes 2217 CPU seconds instead of 2641 (-16%;
# each file run at both levels at once, one process each, loaded 2-core machine, 2026-12-01: the
# training-loop files lab_tiny and notebooks -1% and -4%, the others -5% to -31%, none slower).
# Level 0 changes LLVM's code generation only, not the HLO program: fast-math stays off; results
# can differ in the last bit, e.g. where level 3 fuses a*b+c into one FMA (one rounding fewer).
# Set here, before any test initialises JAX's backend, so that one file run with pytest, the
# doctests, and every subprocess a test starts (they inherit os.environ) get it too. A level
# already in XLA_FLAGS wins: XLA_FLAGS=--xla_backend_optimization_level=3 make test runs the suite
# with the code users get.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(
        filter(None, [os.environ.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"]))

collect_ignore = [
    path
    for path, dependency in (("src/credax/torch.py", "torch"), ("src/credax/verl.py", "verl"))
    if importlib.util.find_spec(dependency) is None
]

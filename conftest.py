"""Repository-root pytest configuration: the suite's XLA code-generation flags, and the modules of
optional extras collected (as doctests) only where their dependency is installed (``make test``
installs torch, verl, tunix and trl, so CI collects them all)."""

import importlib.util
import os

# The suite compiles thousands of small, distinct XLA programs and runs most of them a few times,
# so XLA's CPU code generation costs more CPU than the code it generates saves. Two XLA_FLAGS cut
# it, each added unless XLA_FLAGS already names it:
# - `--xla_backend_optimization_level=0`: LLVM's optimisation of the generated code off (XLA's
#   default is 3). The suite took 2217 CPU seconds instead of 2641 (-16%; each file run at both
#   levels at once, one process each, loaded 2-core machine, 2026-12-01: the training-loop files
#   lab_tiny and notebooks -1% and -4%, the others -5% to -31%, none slower).
# - `--xla_cpu_use_fusion_emitters=false`: fusions through XLA's classic elemental IR emitter
#   instead of the MLIR fusion emitters, whose lowering pipeline is most of a small program's
#   compile. Compiling every entry of the call table once: 10.4 -> 6.4 s; six of the longest
#   files (groups, outcome, normalization, tcpo, docs, dogfood; two workers, quiet 2-core machine,
#   2026-12-07): XLA compile 181 -> 78 s summed over both workers, pytest 186 -> 123 s wall.
# Neither changes the math of the HLO program (fast-math stays off): they change how it becomes
# machine code (the classic emitter also fuses a little less, docs/speed-log.md), so results can
# differ from the default in the last bit (level 0 does not fuse a*b+c into one FMA). Set here,
# before any test initialises JAX's backend, so that one file run with pytest, the doctests, and
# every subprocess a test starts (they inherit os.environ) get them too. The code users get:
# XLA_FLAGS="--xla_backend_optimization_level=3 --xla_cpu_use_fusion_emitters=true" make test
SUITE_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
_flags = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = " ".join(filter(None, [_flags] + [
    flag for flag in SUITE_XLA_FLAGS if flag.split("=")[0] not in _flags]))

# The package's modules that import an optional extra at module level, and the module that extra
# provides (tests/test_dependencies.py checks this list against the package's optional modules).
OPTIONAL_MODULES = (("src/credax/torch.py", "torch"), ("src/credax/verl.py", "verl"),
                    ("src/credax/tunix", "tunix"), ("src/credax/trl.py", "trl"))
collect_ignore = [path for path, dependency in OPTIONAL_MODULES
                  if importlib.util.find_spec(dependency) is None]

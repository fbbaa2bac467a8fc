"""Test configuration for the whole suite: strict JAX numerics and hypothesis profiles.

Strict rank and dtype promotion turn silent broadcasting or float64 leaks inside credax into
errors (rlax sets these only under ``__main__``, which pytest never runs — here they always apply).
Hypothesis: ``ci`` (default) is derandomized so CI is reproducible; ``dev`` is faster. Select with
``HYPOTHESIS_PROFILE=dev``.
"""

import os

import chex
import jax
import pytest
from hypothesis import HealthCheck, settings

# Scripts that the tests run in subprocesses (8 forced CPU devices, jax.distributed workers):
# importing them here, as --doctest-modules would, runs their module-level asserts.
collect_ignore = ["multidevice_every_function.py", "multiprocess_worker.py", "shard_map_every_function.py",
                  "vocab_parallel_check.py"]

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def traced_once():
    """A public credax entry rebuilt around its body wrapped in ``chex.assert_max_traces``.

    ``traced_once(credax.f, n=1)`` is ``credax.f.with_body(...)``: ``f``'s own entry (static
    arguments, group-id conversion, pre-trace checks) that raises ``AssertionError`` when its body
    is traced more than ``n`` times, so the compile-once tests count traces with chex instead of
    private jit caches.
    """

    def rebuild(public, n=1):
        chex.clear_trace_counter()
        return public.with_body(chex.assert_max_traces(public.body, n=n))

    return rebuild


# ``make test`` deals whole files to the two xdist workers (``--dist loadfile``) in collection order
# (``--no-loadscope-reorder``; xdist's default deals the files with the most tests first, which put
# the 7-test, 130-CPU-second test_lab_tiny near the end). Dealing the longest files first keeps one
# long file from running alone at the end while the other worker idles. The order: the files of
# 10 s or more, longest first, by their tests' summed time in a full `make test` (quiet 2-core
# machine, 2026-12-07, with the suite's XLA flags of the repository-root conftest.py; test_recipe,
# added later, 101 s on a loaded machine); files not listed keep their order after these.
SLOW_FIRST = ("test_dogfood", "test_lab_tiny", "test_bench_quick", "test_multidevice", "test_recipe",
              "test_hgpo",
              "test_notebooks", "test_docs", "test_wheel", "test_groups", "test_tunix",
              "test_losses", "test_tcpo", "test_explain", "test_streaming", "test_outcome",
              "test_lab_ci", "test_reproducibility", "test_normalization",
              "test_policy_loss_from_hidden", "test_lab", "test_testing", "test_nnx",
              "test_explain_page", "test_torch", "test_shape_contract", "test_rollouts",
              "test_bad_input", "test_turns", "test_gigpo", "test_lab_onestep")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: ties keep order


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    # Every XLA:CPU executable keeps memory mappings until it is freed, and a pytest-xdist worker
    # compiles thousands of programs: on 2026-12-03 a worker reached 47,508 of the kernel's
    # 65,530 maps (vm.max_map_count) and XLA's compiler then segfaulted or aborted in whichever
    # test compiled next. Dropping JAX's caches after each module lets the programs be freed;
    # a module's own compile-once checks run within it and are unaffected.
    yield
    jax.clear_caches()

# Every target bootstraps its own virtual environment from pyproject.toml: a fresh clone needs
# nothing installed by hand. The stamp file re-installs when pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP  := $(VENV)/.installed-test
VERL_PIN    := verl==0.9.1
LIGER_PIN   := liger-kernel==0.8.5

.PHONY: test demo lab-lm bench bench-nohuge bench-gpu bench-gpu-host lint clean docs docs-serve notebooks

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

# The suite also tests credax.torch, credax.verl, credax.tunix and credax.trl against the real
# torch, verl, Tunix and TRL, and the loss types against TRL and Liger: the torch, verl, tunix and
# trl extras, then verl and Liger themselves without their declared (heavy, GPU-training)
# dependencies.
$(TEST_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,torch,verl,tunix,trl]'
	$(PY) -m pip install --quiet --no-deps '$(VERL_PIN)' '$(LIGER_PIN)'
	touch $(TEST_STAMP)

# A worker compiles thousands of XLA programs, each holding memory mappings: at the kernel's
# default vm.max_map_count (65,530) a worker reached 47,508 maps and XLA's compiler segfaulted
# (tests/conftest.py also frees compiled programs after each module). As root (CI is), raise the
# limit for the run; otherwise leave it and say so.
test: $(TEST_STAMP)
	@if [ "$$(cat /proc/sys/vm/max_map_count 2>/dev/null || echo 0)" -lt 262144 ]; then \
	  sysctl -q -w vm.max_map_count=262144 2>/dev/null || echo "note: vm.max_map_count is $$(cat /proc/sys/vm/max_map_count) (not root: left as it is)"; fi
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder

# The demo installs only what it needs (the `demo` extra), not the dev tools.
$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(PY) -m benchmarks.lab

# The lab's transformer tier (benchmarks/lab/lm.py): 9 methods x 12 seeds, 150 SFT + 80 RL steps
# (SGD lr 0.1), two task variants: about 32 CPU-minutes per variant (0.21 CPU-s per (method, seed,
# step), measured loaded on the declared run; docs/guides/credit-lab.md, "The transformer tier");
# peak resident memory about 12 GB (ps); two variants run in parallel exhausted 24 GB.
lab-lm: $(DEMO_STAMP)
	$(PY) -m benchmarks.lab --tier lm --out demo-results/lm

# glibc's hugetlb tunable lets XLA's fresh output buffers use transparent huge pages, as NumPy's
# allocator already does (madvise): otherwise every new 32 MiB output costs ~8k page faults, and the
# memory-floor comparison would measure the allocator rather than the kernel. Both runs are reported.
bench: $(BENCH_STAMP)
	GLIBC_TUNABLES=glibc.malloc.hugetlb=1 $(PY) -m benchmarks.speed $(BENCH_ARGS)
	$(PY) -m benchmarks.nnx_step head  # the credit computation's share of a head-dominated step

# The default environment (no glibc tunables), where every fresh XLA output pays its page faults.
bench-nohuge: $(BENCH_STAMP)
	$(PY) -m benchmarks.speed --out benchmarks/results/nohuge $(BENCH_ARGS)

# The whole benchmark on one GPU in under 5 minutes: JAX with CUDA (the `gpu` extra), the gpu
# preset's sizes, torch peers on CUDA when the installed torch has CUDA (the pinned CPU wheel has
# not: they are then skipped and the report says so). Fails at once unless JAX sees a GPU; the same
# command without `--require gpu` runs on a CPU.
GPU_STAMP := $(VENV)/.installed-gpu
$(GPU_STAMP): pyproject.toml $(BENCH_STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench,gpu]'
	touch $(GPU_STAMP)

# Then, on a host with two or more GPUs, the vocabulary-parallel head against the gathered and the
# single-device paths at the LM head's GPU sizes (benchmarks/vocab_parallel.py; skipped on one).
VOCAB_PARALLEL_GPU := --tokens 4,512 --dim 2048 --chunk 512 --min-devices 2
bench-gpu: $(GPU_STAMP)
	timeout 600 $(PY) -m benchmarks.speed --platform gpu --preset gpu --require gpu --out benchmarks/results $(BENCH_ARGS)
	timeout 300 $(PY) -m benchmarks.vocab_parallel $(VOCAB_PARALLEL_GPU) > benchmarks/results/vocab-parallel-gpu.md
	cat benchmarks/results/vocab-parallel-gpu.md

# The same run on a GPU host that cannot install anything (no package index; its own python3
# already holds JAX with CUDA): credax from src/, no venv, the host's versions in host.txt.
bench-gpu-host:
	bash benchmarks/gpu_host.sh benchmarks/results $(BENCH_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples notebooks/build.py notebooks/src docs/hooks

# The documentation site (mkdocs.yml; API pages generated from the docstrings) into site/.
# --strict: a broken link, a missing include or a docstring that disagrees with its signature fails.
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

docs-serve: $(STAMP)
	$(PY) -m mkdocs serve

# The notebooks are built from their plain-Python sources (notebooks/src/*.py, percent format).
notebooks: $(STAMP)
	$(PY) notebooks/build.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site

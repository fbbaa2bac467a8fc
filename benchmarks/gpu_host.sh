#!/usr/bin/env bash
# The accelerator benchmark on a GPU host that cannot install anything (no package index, e.g. a
# lent machine whose image already holds JAX with CUDA): `make bench-gpu` without the venv.
#
#   bash benchmarks/gpu_host.sh OUT_DIR            # from the repository root
#
# The Python already on the host (HOST_PY, default python3) must import jax (with its CUDA
# plugin), numpy and jaxtyping; torch with CUDA adds the torch peers and matplotlib the plot, each
# skipped (and said so in the report) when absent. credax is imported from src/: nothing is
# installed. OUT_DIR receives host.txt (GPU, driver, versions), speed-gpu.{json,md,png} and
# bench.log. The benchmark stops after BENCH_TIMEOUT seconds (default 540); on a host whose JAX
# sees no GPU it exits 2 before timing anything (`--require gpu`). Arguments after OUT_DIR go to
# `python -m credax.bench`; PRESET and REQUIRE (default gpu, gpu) exist for the suite's CPU check.
# The bench includes the `lm_head` case (the gpu preset: B=4, T=512, D=2048, V=32k and 128k, credax
# fused and chunked, naive JAX, torch chunked, the 3-GEMM floor). Then, when flax and optax import,
# the NNX step with a head-dominated model and the credit computation's share of it
# (`benchmarks/nnx_step.py head --head-size NNX_SIZE`: gpu, or quick with PRESET=quick; NNX_TIMEOUT
# seconds, default 240) goes to nnx_step.log; without them, or when the bench refused the host
# (exit 2: no GPU), the log says it was skipped. Last, on two or more GPUs, the vocabulary-parallel
# head (benchmarks/vocab_parallel.py, VOCAB_ARGS, VOCAB_TIMEOUT) goes to vocab_parallel.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: bash benchmarks/gpu_host.sh OUT_DIR}"
py="${HOST_PY:-python3}"
mkdir -p "$out"

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  command -v nvidia-smi >/dev/null \
    && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    || echo "nvidia-smi: not found"
  PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" "$py" - <<'EOF'
import importlib.metadata as md, platform
print("python", platform.python_version())
for name in ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin", "numpy", "jaxtyping",
             "torch", "matplotlib"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "not installed")
import credax  # last: if it fails on this host's jax, the versions above are already written

print("credax", credax.__version__, "from", credax.__file__)
EOF
} > "$out/host.txt" 2>&1
cat "$out/host.txt"

PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
  timeout "${BENCH_TIMEOUT:-540}" "$py" -m credax.bench --preset "${PRESET:-gpu}" --require "${REQUIRE:-gpu}" \
  --out "$out" "${@:2}" 2>&1 | tee "$out/bench.log"
status="${PIPESTATUS[0]}"

nnx_size="${NNX_SIZE:-$([ "${PRESET:-gpu}" = quick ] && echo quick || echo gpu)}"
if [ "$status" = 2 ]; then
  echo "nnx_step: skipped (the benchmark refused this host)" | tee "$out/nnx_step.log"
elif PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" "$py" -c "import flax.nnx, optax" >/dev/null 2>&1; then
  PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
    timeout "${NNX_TIMEOUT:-240}" "$py" -m benchmarks.nnx_step head --head-size "$nnx_size" \
    2>&1 | tee "$out/nnx_step.log"
else
  echo "nnx_step: skipped (flax or optax does not import on this host)" | tee "$out/nnx_step.log"
fi

# The vocabulary-parallel head (benchmarks/vocab_parallel.py) on a host with two or more GPUs:
# per-device memory and time against the gathered and the single-device paths at the LM head's GPU
# sizes; skipped (and said so in vocab_parallel.log) on one GPU or when the bench refused the host.
if [ "$status" = 2 ]; then
  echo "vocab_parallel: skipped (the benchmark refused this host)" | tee "$out/vocab_parallel.log"
else
  PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
    timeout "${VOCAB_TIMEOUT:-240}" "$py" -m benchmarks.vocab_parallel \
    ${VOCAB_ARGS:---tokens 4,512 --dim 2048 --chunk 512 --min-devices 2} 2>&1 | tee "$out/vocab_parallel.log"
fi
exit "$status"

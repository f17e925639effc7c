#!/usr/bin/env bash
# Run ON the GPU machine from the repository root, e.g. through the device tool:
#   bash bench/gpu/run.sh      (carry: bench/gpu/wheels)
# Installs nothing beyond the carried wheels, then runs the benchmark (< 8 minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-index --no-deps bench/gpu/wheels/*.whl
python3 -m pip install -q --no-deps --no-build-isolation -e .
export PYTHONUNBUFFERED=1
# the GPU tests first (compile with CUDA graphs, pinned copies, out-of-memory, device binding)
timeout 150 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -o addopts="" \
  | tee "${OUT:-.}/gpu_tests.txt" || true
timeout 320 python3 bench/gpu_bench.py "$@"

#!/usr/bin/env bash
# Run ON the GPU machine from the repository root, e.g. through the device tool:
#   bash bench/gpu/run.sh      (carry: bench/gpu/wheels)
# Installs nothing beyond the carried wheels, then runs the benchmark (< 8 minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-index --no-deps bench/gpu/wheels/*.whl
# an editable install needs the image's setuptools; where it fails, the package is importable
# from its source folder all the same (kennel has no entry points the GPU run needs)
python3 -m pip install -q --no-deps --no-build-isolation -e . \
  || export PYTHONPATH="$PWD/workflow${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import sys, torch, kennel; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'NO CUDA DEVICE')"
export PYTHONUNBUFFERED=1
# the GPU tests first (compile with CUDA graphs, pinned copies, out-of-memory, device binding)
# (their failures are read from the output; the benchmark runs either way)
set +e
timeout 200 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -o addopts="" \
  | tee "${OUT:-.}/gpu_tests.txt"
tests_status=${PIPESTATUS[0]}
set -e
if [ "$tests_status" = 124 ]; then
  echo "run.sh: the GPU tests were cut off at 200 s; the results above are partial"
fi
timeout 270 python3 bench/gpu_bench.py "$@"
echo "run.sh: GPU tests exit status $tests_status"

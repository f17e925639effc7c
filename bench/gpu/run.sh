#!/usr/bin/env bash
# Run ON the GPU machine from the repository root, e.g. through the device tool:
#   bash bench/gpu/run.sh      (carry: bench/gpu/wheels)
# Installs nothing beyond the carried wheels, then runs the GPU tests and the benchmark, each
# time-boxed so the whole stays under 8 minutes (the tests 170 s, the benchmark 250 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
# the logs go where gpu_bench.py writes its report
out="${OUT:-bench/out/gpu}"
mkdir -p "$out"
if ! compgen -G "bench/gpu/wheels/*.whl" > /dev/null; then
  # without them nothing below imports: say so in seconds, not after minutes of device time
  echo "run.sh: no wheels in bench/gpu/wheels: run 'bash bench/gpu/prepare.sh' where there is" \
    "a network, then run this with carry bench/gpu/wheels" >&2
  exit 2
fi
python3 -m pip install -q --no-index --no-deps --disable-pip-version-check bench/gpu/wheels/*.whl
# an editable install needs the image's setuptools; where it fails, the package is importable
# from its source folder all the same (kennel has no entry points the GPU run needs)
python3 -m pip install -q --no-index --no-deps --no-build-isolation --disable-pip-version-check \
  -e . || export PYTHONPATH="$PWD/workflow${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import sys, torch, kennel; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'NO CUDA DEVICE')"
export PYTHONUNBUFFERED=1
# a hung test is named and cut at 90 s where pytest-timeout is installed (the GPU image has it);
# the test's own call only: the first test also builds the shared fixtures (simulate, extract,
# train), which the 170 s box bounds
per_test=()
if python3 -c "import pytest_timeout" 2>/dev/null; then
  per_test=(--timeout 90 -o timeout_func_only=true)
fi
# the GPU tests first (compile with CUDA graphs, pinned copies, out-of-memory, device binding);
# their failures are read from the output, and the benchmark runs either way
set +e
timeout -k 10 170 python3 -m pytest -v -ra --durations=0 ${per_test[@]+"${per_test[@]}"} \
  -m gpu tests/gpu \
  -p no:cacheprovider -o addopts="" 2>&1 | tee "$out/gpu_tests.txt"
tests_status=${PIPESTATUS[0]}
if [ "$tests_status" = 124 ] || [ "$tests_status" = 137 ]; then
  echo "run.sh: the GPU tests were cut off at 170 s; the results above are partial"
fi
# the benchmark saves its report after each part, so a cut-off run keeps what it measured
timeout -k 10 250 python3 bench/gpu_bench.py "$@" 2>&1 | tee "$out/gpu_bench.log"
bench_status=${PIPESTATUS[0]}
echo "run.sh: GPU tests exit status $tests_status, benchmark exit status $bench_status"
[ "$tests_status" = 0 ] && [ "$bench_status" = 0 ]

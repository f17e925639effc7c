#!/usr/bin/env bash
# Run HERE (with network) before a GPU lease: fetch the wheels the GPU machine lacks, for its
# Python (3.12, x86-64). The GPU image (the device tool's KINDS.md) already has torch, numpy,
# h5py, pandas, pyarrow, matplotlib, pyyaml, attrs, wrapt, pytest with its plugins, setuptools
# and nvidia-ml-py: those are not shipped (a pytest without the image's pluggy would not start);
# polars (50 MB) is left out: kennel's pod5 use never imports it. pod5 needs pytz, which the
# image lacks (checked by running this script's wheels over the image's package list), and
# borzoi-pytorch (with intervaltree) for the Borzoi vs Flashzoi rows; its transformers,
# einops and pandas are the image's.
set -euo pipefail
cd "$(dirname "$0")"
rm -rf wheels && mkdir -p wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d wheels escapepod pod5 lib_pod5 vbz_h5py_plugin iso8601 more_itertools deprecated pysam \
  jsonschema jsonschema_specifications referencing rpds_py pytz borzoi-pytorch intervaltree
du -sh wheels

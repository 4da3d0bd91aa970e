#!/usr/bin/env bash
# The wheels the GPU machine lacks, into .whl/ (git-ignored; named in the device call's `carry`).
# That machine has Python 3.12 with torch, CuPy (cupy-cuda13x), numpy, ml_dtypes, safetensors, pytest and
# hypothesis, and no network; luminal's compile path also imports egglog, and egglog imports black, graphviz,
# opentelemetry-api, platformdirs and pytokens when it loads. The pins are this project's venv's versions.
# About 52 MB: the device call carries at most 64 MiB with the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
PINS=(egglog==13.2.0 black==26.10.1 pytokens==0.4.1 graphviz==0.21 opentelemetry-api==1.45.2 platformdirs==4.14.8)
rm -rf .whl
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${PINS[@]}"
ls .whl
du -sh .whl

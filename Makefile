# Two commands: `make test` (set up, lint, run every test) and `make run` (set up, run the platform locally with an
# example model deployed; it keeps serving until Ctrl-C).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: test test-compiled test-cuda-shim test-metal-shim test-cuda run quickstart lint format bench bench-gpu gpu-wheels clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required (set PYTHON=...)")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch first: a later unpinned request would pull several GB of CUDA packages.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q -n 2 --durations=25 tests
	$(MAKE) --no-print-directory test-compiled
	$(MAKE) --no-print-directory test-cuda-shim
	$(MAKE) --no-print-directory test-metal-shim

# The op suite again through lm.compile(target="cpu"), against the same torch results: each test's checks
# compile into one C program (tests/opcheck.py), a few minutes cold on 2 cores; .cache/ keeps reruns warm.
test-compiled: $(STAMP)
	LUMINAL_CACHE_DIR=.cache LUMINAL_OPCHECK_TARGET=cpu $(PY) -m pytest -q -n 2 tests/ops

# The op suite compiled for h100 and run on the CPU through the CUDA host shim (runtime/cuda/shim.py): what the
# generated CUDA means, checked without a GPU, each program first compiled by NVRTC for sm_80 and sm_90 (about 10
# minutes cold on 2 cores).
test-cuda-shim: $(STAMP)
	LUMINAL_CACHE_DIR=.cache LUMINAL_OPCHECK_TARGET=h100-shim $(PY) -m pytest -q -n 2 tests/ops

# The same for the MSL of the op suite compiled for m2, run on the CPU through the Metal shim (runtime/metal/shim.py)
# (about 3 minutes cold).
test-metal-shim: $(STAMP)
	LUMINAL_CACHE_DIR=.cache LUMINAL_OPCHECK_TARGET=m2-shim $(PY) -m pytest -q -n 2 tests/ops

# On a machine with an NVIDIA GPU: the CUDA runtime's device tests, then the op suite compiled for h100 and run on
# the GPU, against the same torch results. Not part of `make test` (it needs CuPy and a device; without them the
# device tests skip and the op suite stops at RuntimeUnavailable).
test-cuda: $(STAMP)
	$(PY) -m pip install -q -e ".[cuda]"
	LUMINAL_CACHE_DIR=.cache $(PY) -m pytest -q tests/runtime/cuda tests/compiler/cuda/test_target.py
	LUMINAL_CACHE_DIR=.cache LUMINAL_OPCHECK_TARGET=h100 $(PY) -m pytest -q -n 2 tests/ops

run: $(STAMP)
	$(PY) examples/platform_demo.py

# The core alone: build a model, save and load it, run it in the interpreter and compiled.
quickstart: $(STAMP)
	$(PY) examples/quickstart.py

bench: $(STAMP)
	$(PY) bench/reference.py

# The luminal CUDA runtime beside torch eager, torch.compile and cuBLAS on this machine's GPU (bench/gpu.py);
# BENCH_GPU_ARGS=--small runs tiny models anywhere. GPU_PYTHON: a Python whose torch has CUDA (the venv's torch is
# the CPU build) and with luminal installed. The lent GPU machine runs it through bench/device_session.sh
# (bench/gpu_runbook.md).
GPU_PYTHON ?= $(PY)
bench-gpu:
	$(GPU_PYTHON) bench/gpu.py $(BENCH_GPU_ARGS)

# The wheels the lent GPU machine lacks (egglog, the platform, tritonclient), into .whl/ for the device call's carry.
gpu-wheels: $(STAMP)
	bash bench/build_wheels.sh

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

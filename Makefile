# Two commands: `make test` (set up, lint, run every test) and `make run` (set up, run the platform locally with an
# example model deployed; it keeps serving until Ctrl-C).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: test test-fast test-compiled test-cuda-shim test-metal-shim test-cuda run quickstart lint format bench bench-gpu gpu-wheels clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required (set PYTHON=...)")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch first: a later unpinned request would pull several GB of CUDA packages.
	# Installed modules are byte-compiled here, not on first import: where PYTHONDONTWRITEBYTECODE is set nothing
	# would keep them, and every worker process, CLI run and test child would compile torch's again (a cold
	# `make test` with pip's --no-compile was on course for 40 minutes instead of 27).
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

# The tests' compile caches (C libraries, CUBINs, programs) live in the checkout, so a fresh clone runs cold, as
# CI does; reruns here are warm. One session runs everything, the op suite once per target among the rest
# (tests/ops/conftest.py), so both workers stay busy to the end; worksteal hands a long test's neighbours on.
PYTEST := LUMINAL_CACHE_DIR=$(CURDIR)/.cache $(PY) -m pytest
WORKERS ?= 2

# Where PYTHONDONTWRITEBYTECODE is set (this machine's environment sets it) no process keeps the bytecode of what
# it imports: the project's modules compiled once here save each worker process, CLI run and test child the
# compile (importing the gateway and a worker process: 1.8 s of CPU without bytecode, 1.5 s with).
BYTECODE := $(PY) -m compileall -q -j 0 luminal compiler runtime store gateway scheduler batching provisioner cli tests bench

test: $(STAMP)
	$(PY) -m tests.prerequisites
	$(BYTECODE)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PYTEST) -q -n $(WORKERS) --dist worksteal --durations=25 tests

# What to run between edits (a few minutes): lint, then every test but the op suite's compiled targets and the
# tests marked slow (tests/conftest.py): `make test` runs those too.
test-fast: $(STAMP)
	$(BYTECODE)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	LUMINAL_OPCHECK_TARGET=reference $(PYTEST) -q -n $(WORKERS) --dist worksteal -m "not slow" tests

# The op suite on one compiled target alone, against the same torch results: generated C (`test-compiled`); the
# CUDA compiled for h100 and run on the CPU through the host shim (runtime/cuda/shim.py), each program first
# compiled by NVRTC for sm_80 and sm_90 with no kernel spilling registers (`test-cuda-shim`); the MSL compiled for
# m2 and run through the Metal shim (runtime/metal/shim.py, `test-metal-shim`). `make test` runs all of them.
test-compiled: $(STAMP)
	LUMINAL_OPCHECK_TARGET=cpu $(PYTEST) -q -n $(WORKERS) --dist worksteal tests/ops

test-cuda-shim: $(STAMP)
	LUMINAL_OPCHECK_TARGET=h100-shim $(PYTEST) -q -n $(WORKERS) --dist worksteal tests/ops

test-metal-shim: $(STAMP)
	LUMINAL_OPCHECK_TARGET=m2-shim $(PYTEST) -q -n $(WORKERS) --dist worksteal tests/ops

# On a machine with an NVIDIA GPU: the CUDA runtime's device tests, then the op suite compiled for h100 and run on
# the GPU, against the same torch results. Not part of `make test` (it needs CuPy and a device; without them the
# device tests skip and the op suite stops at RuntimeUnavailable).
test-cuda: $(STAMP)
	$(PY) -m pip install -q -e ".[cuda]"
	$(PYTEST) -q tests/runtime/cuda tests/compiler/cuda/test_target.py
	LUMINAL_OPCHECK_TARGET=h100 $(PYTEST) -q -n $(WORKERS) tests/ops

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
	rm -rf $(VENV) .pytest_cache .ruff_cache .cache

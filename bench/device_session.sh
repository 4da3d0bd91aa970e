#!/usr/bin/env bash
# The GPU programme on the lent GPU machine, run from the repository root by the device tool's `run`:
#   bash bench/device_session.sh [env] [tests] [bench] [opcheck] [platform]      (no stage named: all five)
# In that order, the cheapest and most telling first: what the machine has; the tests that need a GPU (stopping at
# the first failure, its traceback short); bench/gpu.py without torch.compile (TORCH_COMPILE=1 adds it); the op
# suite through the CUDA runtime; the platform last. Installs the carried wheels (.whl/, from
# bench/build_wheels.sh) and luminal itself (editable, as here, so the compiler version matches programs compiled
# here; where the system Python refuses that (PEP 668), into a venv that sees the system's packages), then runs
# each named stage under its own timeout, writing one log per stage and summary.txt under $OUT. Programs come
# compiled from here when carried: the compile cache .device-cache/ (the op suite's and the device tests'
# programs) and the bench's .programs/. See bench/gpu_runbook.md.
set -u
OUT=${OUT:-/tmp/luminal-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LUMINAL_CACHE_DIR=/tmp/luminal-cache
[ -d .device-cache ] && export LUMINAL_CACHE_DIR=$PWD/.device-cache # programs compiled here: egglog idles there
PY=${PY:-python3}
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(env tests bench opcheck platform)

if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "installing the carried wheels failed" | tee -a "$OUT/summary.txt"; exit 1; }
    export PYTHONPATH=/tmp/site
fi
if [ -z "${SKIP_INSTALL:-}" ]; then # SKIP_INSTALL=1: luminal is installed already (a dry run in the venv)
    install="pip install -q --no-index --no-deps --no-build-isolation -e ."
    if ! $PY -m $install >"$OUT/install.log" 2>&1; then
        installed=false
        if grep -q externally-managed "$OUT/install.log"; then # PEP 668: a venv over the system's packages
            $PY -m venv --system-site-packages /tmp/luminal-venv >>"$OUT/install.log" 2>&1 \
                && PY=/tmp/luminal-venv/bin/python && $PY -m $install >>"$OUT/install.log" 2>&1 && installed=true
        fi
        $installed || { echo "installing luminal ($install) failed: see install.log" | tee -a "$OUT/summary.txt"; exit 1; }
    fi
fi

# The device call's own limit is 600 s: every stage is cut to what is left of BUDGET (from the script's start),
# so a slow stage costs its own log's end, never the summary or the other stages' logs.
BUDGET=${BUDGET:-570}

# stage NAME SECONDS COMMAND...: the command's output into $OUT/NAME.log, its exit status into summary.txt.
stage() {
    local name=$1 seconds=$2
    shift 2
    local left=$((BUDGET - SECONDS - 5))
    if [ "$left" -lt 10 ]; then
        echo "$name: skipped, the ${BUDGET} s budget is spent" | tee -a "$OUT/summary.txt"
        return
    fi
    [ "$seconds" -gt "$left" ] && seconds=$left
    local start=$SECONDS
    timeout "$seconds" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc in $((SECONDS - start)) s (limit $seconds s)" | tee -a "$OUT/summary.txt"
}

# The tests that need a CUDA device; the rest of the CUDA tests run on any CPU machine, in `make test`.
DEVICE_TESTS=(tests/runtime/cuda/test_device.py tests/runtime/cuda/test_device_cublas.py
    tests/runtime/cuda/test_device_derived.py tests/runtime/cuda/test_cublas_library.py
    tests/compiler/cuda/test_target.py)

for s in "${STAGES[@]}"; do
    case $s in
    env) # GPU, driver, CuPy, NVRTC and the headers it compiles against, libcublas, numpy, ml_dtypes, torch
        nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
        stage env 60 $PY bench/device_env.py
        ;;
    tests) # the CUDA runtime's device tests, up to the first failure
        stage tests "${TESTS_TIMEOUT:-180}" $PY -m pytest -x --tb=short -ra -q "${DEVICE_TESTS[@]}"
        ;;
    bench)
        args=()
        [ -d .programs ] && args+=(--programs .programs)
        [ -z "${TORCH_COMPILE:-}" ] && args+=(--no-torch-compile) # its builds would take minutes of device time
        stage gpu_bench "${BENCH_TIMEOUT:-300}" $PY bench/gpu.py "${args[@]}" ${BENCH_ARGS:-}
        ;;
    opcheck) # the op suite compiled for h100 and run by the CUDA runtime, against torch
        stage opcheck "${OPCHECK_TIMEOUT:-240}" env LUMINAL_OPCHECK_TARGET=h100 \
            $PY -m pytest -x --tb=short -q -n "${OPCHECK_WORKERS:-12}" tests/ops
        ;;
    platform) # `luminal serve`, `luminal deploy --gpu TYPE`, Triton client requests, billing: as processes, on the GPU
        stage platform "${PLATFORM_TIMEOUT:-120}" $PY -m pytest -x --tb=short -ra -q tests/cli/test_platform_processes.py
        ;;
    *)
        echo "unknown stage $s (env, tests, bench, opcheck, platform)" | tee -a "$OUT/summary.txt"
        ;;
    esac
done

# The device tool returns the end of the output: each log's tail, then the summary, last.
for s in "${STAGES[@]}"; do
    log="$OUT/$s.log"
    [ "$s" = bench ] && log="$OUT/gpu_bench.log"
    [ -f "$log" ] && { echo "==== $s"; tail -n 60 "$log"; }
done
echo "==== summary"
cat "$OUT/summary.txt"

#!/usr/bin/env bash
# The GPU programme on the lent GPU machine, run from the repository root by the device tool's `run`:
#   bash bench/device_session.sh [env] [tests] [platform] [opcheck] [bench]      (no stage named: all five)
# Installs the carried wheels (.whl/, from bench/build_wheels.sh) and luminal itself (editable, as here, so
# the compiler version matches programs precompiled here), then runs each named stage under its own timeout,
# writing one log per stage and summary.txt under $OUT. bench reads .programs/ when it was carried (written
# here by `bench/gpu.py --precompile .programs`), and compiles on the device otherwise. See bench/gpu_runbook.md.
set -u
OUT=${OUT:-/tmp/luminal-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LUMINAL_CACHE_DIR=/tmp/luminal-cache
PY=${PY:-python3}
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(env tests platform opcheck bench)

if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "installing the carried wheels failed" | tee -a "$OUT/summary.txt"; exit 1; }
    export PYTHONPATH=/tmp/site
fi
if [ -z "${SKIP_INSTALL:-}" ]; then # SKIP_INSTALL=1: luminal is installed already (a dry run in the venv)
    $PY -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
        || { echo "installing luminal (pip install -e .) failed: see install.log" | tee -a "$OUT/summary.txt"; exit 1; }
fi

ENV_CHECK='
import importlib.util
import cupy, ml_dtypes, numpy, torch
import luminal.compiler
from luminal.runtime.cuda import missing
print("torch", torch.__version__, torch.cuda.get_device_name(), "| cupy", cupy.__version__, "| numpy", numpy.__version__)
egglog = "egglog found" if importlib.util.find_spec("egglog") else "no egglog: nothing can compile here"
print("ml_dtypes", ml_dtypes.__version__, "|", egglog, "| compiler", luminal.compiler.COMPILER_VERSION)
print("luminal CUDA runtime:", missing() or "CuPy sees a device")
'

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

for s in "${STAGES[@]}"; do
    case $s in
    env) # what the machine has, and whether luminal's CUDA runtime sees the device
        nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
        stage env 60 $PY -c "$ENV_CHECK"
        ;;
    tests) # the CUDA runtime's own tests and the compiler's CUDA tests (nvcc, host shim), on the GPU
        dirs=$(ls -d tests/runtime/cuda tests/compiler/cuda 2>/dev/null)
        if [ -z "$dirs" ]; then # never an empty list: pytest would run the whole suite
            echo "tests: neither tests/runtime/cuda nor tests/compiler/cuda exists" | tee -a "$OUT/summary.txt"
        else
            stage tests "${TESTS_TIMEOUT:-240}" $PY -m pytest -q -n 8 -rs $dirs
        fi
        ;;
    platform) # `luminal serve`, `luminal deploy --gpu TYPE`, Triton client requests, billing: as processes, on the GPU
        stage platform "${PLATFORM_TIMEOUT:-120}" $PY -m pytest -q -rs tests/cli/test_platform_processes.py
        ;;
    opcheck) # the op suite compiled for h100 and run by the CUDA runtime, against torch
        stage opcheck "${OPCHECK_TIMEOUT:-300}" env LUMINAL_OPCHECK_TARGET=h100 $PY -m pytest -q -n 12 tests/ops
        ;;
    bench)
        programs=()
        [ -d .programs ] && programs=(--programs .programs)
        stage gpu_bench "${BENCH_TIMEOUT:-540}" $PY bench/gpu.py "${programs[@]}" ${BENCH_ARGS:-}
        ;;
    *)
        echo "unknown stage $s (env, tests, platform, opcheck, bench)" | tee -a "$OUT/summary.txt"
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

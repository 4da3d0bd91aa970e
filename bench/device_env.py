"""What a machine offers the CUDA runtime, one line each: the first thing a device session prints
(bench/device_session.sh's env stage), so a failure later reads against it. Runs anywhere: what is missing says
"unavailable" and why.

    python bench/device_env.py
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess


def line(name: str, probe) -> None:
    try:
        print(f"{name}: {probe()}")
    except Exception as e:  # every row is printed, whatever the others found
        print(f"{name}: unavailable ({type(e).__name__}: {str(e)[:300]})")


def gpu() -> str:
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    return subprocess.run(query, capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def cupy() -> str:
    import cupy as cp

    from luminal.runtime.cuda.executable import has_bfloat16

    runtime = cp.cuda.runtime.runtimeGetVersion()
    return (f"{cp.__version__}, CUDA runtime {runtime // 1000}.{runtime % 1000 // 10}, "
            f"device {cp.cuda.Device().compute_capability}, bfloat16 arrays: {has_bfloat16(cp)}")  # fmt: skip


def nvrtc() -> str:
    from luminal.runtime.cuda import nvrtc as lib

    return f"{lib.version_text()}, include flags {list(lib.include_flags())}, header folders {lib.header_folders()}"


def cublas() -> str:
    from luminal.runtime.cuda import cublas_library

    return str(cublas_library.load()._name)


def version(module: str):
    return lambda: getattr(importlib.import_module(module), "__version__", "installed")


def luminal_runtime() -> str:
    from luminal.compiler import COMPILER_VERSION
    from luminal.runtime.cuda import missing

    egglog = "egglog found" if importlib.util.find_spec("egglog") else "no egglog: programs must come precompiled"
    return f"{missing() or 'CuPy sees a device'}; compiler {COMPILER_VERSION}; {egglog}"


if __name__ == "__main__":
    line("GPU (name, driver, memory)", gpu)
    line("CuPy", cupy)
    line("NVRTC", nvrtc)
    line("libcublas", cublas)
    for module in ("numpy", "ml_dtypes", "torch"):
        line(module, version(module))
    line("luminal CUDA runtime", luminal_runtime)

"""What bench/gpu.py times: the luminal CUDA runtime, torch eager and torch.compile, each a call of fixed
inputs that returns its outputs, plus the device's measured copy bandwidth and a device-wide sync."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import ml_dtypes
import numpy as np
import torch

from luminal.compiler.program import CompiledProgram
from luminal.runtime.registry import RuntimeUnavailable, runtime_for


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def sync() -> None:
    """Wait for all work on the device: cudaDeviceSynchronize covers CuPy's streams as well as torch's."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "cpu (no CUDA device: torch rows only, the luminal CUDA runtime reports why it cannot run)"


def copy_bandwidth(nbytes: int, repeats: int = 20) -> float:
    """Bytes per second of a large device-to-device copy, counting bytes read plus bytes written (the figure a
    memory-bound kernel's traffic is compared with); the median of `repeats` copies."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device())
    src.random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        sync()
        times.append(time.perf_counter() - start)
    return 2 * nbytes / float(np.median(times))


def on_device(t: torch.Tensor) -> Any:
    """A torch tensor as a CuPy array sharing its memory (DLPack), converted once here rather than in every run;
    the tensor itself (a DLPack array the runtime also takes) where this CuPy cannot import its dtype (bf16
    needs CuPy 14 with ml_dtypes)."""
    import cupy

    try:
        return cupy.from_dlpack(t)
    except (TypeError, NotImplementedError, BufferError, ValueError):
        return t


def to_host(value: Any, like: Any = None) -> np.ndarray:
    """An output as float64 numpy, whatever produced it (torch tensor, CuPy array, numpy incl. bfloat16).
    bf16 outputs that come back as their uint16 bits (CuPy without bfloat16) are read as bf16 when `like`, the
    anchor's output, is bf16."""
    if isinstance(value, torch.Tensor):
        return value.detach().float().cpu().numpy().astype(np.float64)
    if hasattr(value, "get") and not isinstance(value, np.ndarray):  # a CuPy array
        value = value.get()
    value = np.asarray(value)
    if value.dtype == np.uint16 and _is_bfloat16(like):
        value = value.view(ml_dtypes.bfloat16)
    return value.astype(np.float32).astype(np.float64)


def _is_bfloat16(x: Any) -> bool:
    return getattr(x, "dtype", None) in (torch.bfloat16, np.dtype(ml_dtypes.bfloat16))


def fail(error: Exception) -> dict:
    """A runner's call that raises what broke it, so its row says FAILED with the error."""
    raise error


@dataclass
class Runner:
    """One side of a comparison: `call()` runs it on fixed inputs and returns {output name: array}."""

    name: str
    call: Callable[[], dict[str, Any]] | None
    unavailable: str | None = None  # why it cannot run here (then call is None)
    note: str = ""
    timed: bool = True  # False: checked only (the reference interpreter's time means nothing here)


def luminal_cuda(prog: CompiledProgram, weights: dict, inputs: dict[str, torch.Tensor], launches: dict) -> list[Runner]:
    """The program loaded once by the CUDA runtime, one runner per launch mode ({runner name: graph}: one CUDA
    graph launch or kernel-by-kernel launches), with device-resident inputs (shared with torch through DLPack)
    and outputs left on the device, so a timed call is the program's launches alone."""
    try:
        exe = runtime_for("cuda").load(prog, weights)
        feed = {k: on_device(v) for k, v in inputs.items()}
    except RuntimeUnavailable as e:
        return [Runner(name, None, f"unavailable: {e}") for name in launches]
    except Exception as e:  # a broken load fails its rows (the table says so), not the rest of the session
        return [Runner(name, lambda e=e: fail(e)) for name in launches]
    return [Runner(name, lambda g=g: exe.run(feed, device_outputs=True, graph=g)) for name, g in launches.items()]


def torch_runner(name: str, fn: Callable[..., Any], args: tuple, outputs: Callable[[Any], dict]) -> Runner:
    """`fn(*args)` under inference mode, its result named by `outputs`."""

    def call() -> dict[str, Any]:
        with torch.inference_mode():
            return outputs(fn(*args))

    return Runner(name, call)


def compiled(module: torch.nn.Module) -> Callable[..., Any]:
    """torch.compile(mode="reduce-overhead"): Inductor's kernels replayed as CUDA graphs (on a CPU, Inductor's
    C++ kernels alone)."""
    return torch.compile(module, mode="reduce-overhead")


def keep(outputs: dict[str, Any]) -> dict[str, Any]:
    """Copies of a call's outputs: a CUDA-graph replay overwrites the previous call's in place."""
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in outputs.items()}

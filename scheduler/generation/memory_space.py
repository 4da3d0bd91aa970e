"""Where a language model's paged programs keep the KV pools: the memory space of the runtime that runs them.

On the host (the CPU runtime, or a model without a paged step) the pools are numpy arrays and a program's outputs
come back as numpy arrays. On a CUDA device the pools are device arrays, allocated once and zeroed, given to the
step and the prefill chunk as donated inputs that they write in place: the pools never cross to the host, and
neither do the logits, which the device sampler reads where they are (choosers.py). Per step the only host ->
device traffic is the step's small host inputs (token ids, positions, block tables, slots) and each row's
sampling parameters; device -> host, the token ids (and log-probabilities when asked). `bytes_in` / `bytes_out`
count what crossed, for benchmarks and tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from luminal import dtypes as dt
from luminal.runtime.cuda.executable import CudaExecutable, storage
from luminal.scheduler.programs import LoadedProgram


class HostMemory:
    """numpy arrays; programs hand back numpy outputs."""

    on_device = False

    def __init__(self) -> None:
        self.bytes_in = self.bytes_out = 0  # nothing crosses: the host is where everything lives

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.zeros(shape, dtype)

    def write(self, array: np.ndarray, index: tuple, values: np.ndarray) -> None:
        array[index] = values

    def run(self, program: LoadedProgram, feed: dict[str, Any]) -> dict[str, Any]:
        return program.run(feed)


class DeviceMemory:
    """Device arrays of a CUDA executable's device; programs hand back device outputs (donated pools: the very
    arrays given)."""

    on_device = True

    def __init__(self, executable: CudaExecutable):
        self.cp, self.device, self.bfloat16 = executable.cp, executable.device, executable.bfloat16
        self.bytes_in = self.bytes_out = 0  # host -> device and device -> host bytes of program runs

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """Zeroed device memory (a masked position multiplies a zero weight, and 0 * nan is nan); bfloat16 held as
        its uint16 bits where this CuPy has no bfloat16, as the executable binds it."""
        with self.device:
            return self.cp.zeros(shape, storage(dt.dtype_of(dtype), self.bfloat16))

    def write(self, array: Any, index: tuple, values: np.ndarray) -> None:
        """Host values into part of a device array (a one-go prefill's caches into their blocks, at admission)."""
        host = np.ascontiguousarray(values).view(array.dtype)
        self.bytes_in += host.nbytes
        with self.device:
            array[index] = self.cp.asarray(host)

    def run(self, program: LoadedProgram, feed: dict[str, Any]) -> dict[str, Any]:
        self.bytes_in += sum(v.nbytes for v in feed.values() if isinstance(v, np.ndarray))
        return program.run(feed, device_outputs=True)


def memory_for(program: LoadedProgram) -> HostMemory | DeviceMemory:
    """The memory space `program`'s runtime keeps its arrays in."""
    executable = program.program.executable
    return DeviceMemory(executable) if isinstance(executable, CudaExecutable) else HostMemory()

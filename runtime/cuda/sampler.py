"""Tokens chosen on the device: runtime/cuda/sampling.cu (its meaning: luminal/runtime/sampling.py) compiled by
NVRTC once per device architecture, one block per row of logits. The logits never leave the device; what
crosses per call is each row's parameters in (a few dozen bytes) and its token id out, plus the log-probabilities
of the rows that asked for them. `bytes_in` / `bytes_out` count that traffic.

CuPy is passed in (`cp`), never imported here at module import.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from luminal.runtime.cuda import arrays, nvrtc
from luminal.runtime.cuda.executable import architecture
from luminal.runtime.sampling import MASK64, Chosen, RowSampling

SOURCE = Path(__file__).with_name("sampling.cu")
KERNEL = "lm_sample_rows"
THREADS = 256  # per row: enough to stream a 150k vocabulary a few dozen times per token


def source(threads: int = THREADS) -> str:
    """The kernel source with its block size fixed (the reductions' shared arrays are that long)."""
    if threads < 1 or threads & (threads - 1):
        raise ValueError(f"the sampler's block size must be a power of two, got {threads}")
    return f"#define LM_SAMPLE_THREADS {threads}\n" + SOURCE.read_text()


class CudaSampler:
    def __init__(self, cp: Any, threads: int = THREADS):
        self.cp, self.threads = cp, threads
        self.device = cp.cuda.Device()  # the current device at load: every call runs there
        self.module = cp.cuda.function.Module()
        self.module.load(nvrtc.compile_cubin(source(threads), architecture(cp)))
        self.kernel = self.module.get_function(KERNEL)
        self.nothing = cp.zeros(1, np.int64)  # stands for an absent bias or bitmask (the kernel never reads it)
        self.bytes_in = self.bytes_out = 0  # host -> device and device -> host bytes over every call

    def choose(self, logits: Any, rows: Sequence[RowSampling], bias: Any = None, allowed: Any = None,
               logits_rows: Sequence[int] | None = None) -> Chosen:  # fmt: skip
        """Each row's token from `logits` [n, vocab] (a device array; a host one is copied over first), row r from
        logits row `logits_rows[r]` (default: r), under its RowSampling; `bias` float32 [rows, vocab] is added
        first, and `allowed` (uint32 bitmask words [rows, ceil(vocab / 32)], runtime/sampling.pack_allowed) leaves
        only its tokens; either may be host or device arrays. Only the outputs the rows asked for come back."""
        with self.device:
            return self._choose(logits, rows, bias, allowed, logits_rows)

    def _choose(self, logits: Any, rows: Sequence[RowSampling], bias: Any, allowed: Any,
                logits_rows: Sequence[int] | None) -> Chosen:  # fmt: skip
        cp = self.cp
        logits = self._float32(self._on_device(logits))
        count, vocab = len(rows), logits.shape[1]
        sources = list(range(count)) if logits_rows is None else list(logits_rows)
        if len(sources) != count or not all(0 <= s < logits.shape[0] for s in sources):
            raise ValueError(f"{len(rows)} rows of sampling parameters for logits rows {sources[:8]} of "
                             f"{logits.shape[0]}")  # fmt: skip
        capacity = max([1, *(r.logprobs for r in rows)])
        floats = np.array([[r.temperature, r.top_p] for r in rows], np.float32)
        keys = np.array([r.key & MASK64 for r in rows], np.uint64).view(np.int64)
        ints = np.array([[r.top_k, 0, r.counter, r.logprobs, s] for r, s in zip(rows, sources)], np.int64)
        ints[:, 1] = keys
        dims = np.array([vocab, vocab, capacity, bias is not None, allowed is not None], np.int64)
        extras = [self._on_device(x) if x is not None else self.nothing for x in (bias, allowed)]
        tokens, chosen = cp.empty(count, np.int64), cp.empty(count, np.float32)
        top_ids, top_logprobs = cp.empty((count, capacity), np.int64), cp.empty((count, capacity), np.float32)
        inputs = [self._on_device(x) for x in (floats, ints, dims)]
        args = (tokens, chosen, top_ids, top_logprobs, logits, inputs[0], inputs[1], *extras, inputs[2])
        self.kernel((count,), (self.threads,), args)
        host_tokens = tokens.get()
        self.bytes_out += host_tokens.nbytes
        if not any(r.logprobs >= 0 for r in rows):
            return Chosen(host_tokens, np.zeros(count, np.float32), np.zeros((count, 1), np.int64),
                          np.zeros((count, 1), np.float32))  # fmt: skip
        fetched = [x.get() for x in (chosen, top_ids, top_logprobs)]
        self.bytes_out += sum(x.nbytes for x in fetched)
        return Chosen(host_tokens, *fetched)

    def _on_device(self, x: Any) -> Any:
        if arrays.on_device(x):
            return self.cp.from_dlpack(x)
        host = np.ascontiguousarray(x)
        self.bytes_in += host.nbytes
        return self.cp.asarray(host)

    def _float32(self, logits: Any) -> Any:
        """Logits as float32: bfloat16 ones held as their uint16 bits (a CuPy without bfloat16) widened by a
        shift, other dtypes converted."""
        if logits.dtype == np.float32:
            return logits
        if logits.dtype == np.uint16:
            return (logits.astype(np.uint32) << 16).view(np.float32)
        return logits.astype(np.float32)

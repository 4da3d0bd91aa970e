"""llama.cpp (through llama-cpp-python's C API) decoding bench/llm.py's prompts greedily, as its server does with
one slot per stream: every prompt prefilled in one batch (one sequence id each), then one batch of a token per
stream per step, argmax of each stream's logits.

`pip install -e '.[llamacpp]'` builds llama.cpp from its source on PyPI (minutes on 2 cores); without
it bench/llm.py leaves this anchor out and says so.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import numpy as np


def available() -> str | None:
    """None when llama.cpp can run here, else why not."""
    try:
        import gguf  # noqa: F401
        import llama_cpp  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed (pip install -e '.[llamacpp]')"
    return None


class LlamaCpp:
    def __init__(self, path: Path, streams: int, positions: int):
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        self._quiet = L.llama_log_callback(lambda level, text, data: None)  # held: llama.cpp keeps calling it
        L.llama_log_set(self._quiet, ctypes.c_void_p())
        params = L.llama_model_default_params()
        # No extra weight buffers: on a CPU with AMX they hold Q8_0 weights for llama.cpp's AMX kernels, whose
        # tile configuration GCC 12 compiles away (its _tile_loadconfig declares an 8-byte read of the 64-byte
        # config, so the stores of rows and columns are dropped as dead and ldtilecfg faults: a segmentation
        # fault at the first Q8_0 batch of more than one token). On x86 nothing else uses them (llama.cpp
        # repacks Q8_0 for ARM and RISC-V only), so llama.cpp runs its ordinary kernels, as without AMX.
        params.use_extra_bufts = False
        self.model = L.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        ctx = L.llama_context_default_params()
        ctx.n_ctx = streams * positions
        ctx.n_batch = ctx.n_ubatch = max(streams * positions, 512)
        ctx.n_seq_max = streams
        ctx.n_threads = ctx.n_threads_batch = os.cpu_count() or 1
        self.ctx = L.llama_init_from_model(self.model, ctx)
        self.vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(ctx.n_batch, 0, streams)
        self.streams = streams

    def _decode(self, rows: list[tuple[int, int, int, bool]]) -> None:
        """One llama_decode over (token, position, sequence, wants logits) rows."""
        b = self.batch
        b.n_tokens = len(rows)
        for i, (token, pos, seq, logits) in enumerate(rows):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, logits
            b.seq_id[i][0] = seq
        if self.L.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")

    def _argmax(self, i: int) -> int:
        logits = np.ctypeslib.as_array(self.L.llama_get_logits_ith(self.ctx, i), shape=(self.vocab,))
        return int(logits.argmax())

    def generate(self, prompts: np.ndarray, new: int) -> tuple[float, float, float, list[list[int]]]:
        """(seconds to first token, tokens per second, decode tokens per second, the tokens) for the prompts
        decoded together, greedily, `new` tokens each."""
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        start = time.perf_counter()
        rows, last = [], []
        for s, prompt in enumerate(prompts):
            rows += [(int(t), p, s, p == len(prompt) - 1) for p, t in enumerate(prompt)]
            last.append(len(rows) - 1)
        self._decode(rows)
        tokens = [[self._argmax(i)] for i in last]
        ttft = time.perf_counter() - start
        for step in range(1, new):
            self._decode([(seq[-1], len(prompts[s]) + step - 1, s, True) for s, seq in enumerate(tokens)])
            for s, seq in enumerate(tokens):
                seq.append(self._argmax(s))
        total = time.perf_counter() - start
        n = len(prompts)
        return ttft, n * new / total, n * (new - 1) / (total - ttft), tokens

    def close(self) -> None:
        self.L.llama_batch_free(self.batch)
        self.L.llama_free(self.ctx)
        self.L.llama_model_free(self.model)

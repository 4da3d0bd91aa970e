"""What a single-stream decode is weighed against (issue 47: at least 80% of the machine's memory bandwidth): the
read bandwidth this machine gives torch's sum over an array far larger than its caches, on torch's threads, and
the bytes of weights one decode step reads for one token, by weight format.

A decode step at one stream multiplies one row by every projection, so it reads each projection's matrix once
per token (and, for the embedding, one row); the KV cache it also reads is left out (under 1% of the weights at
the benches' contexts), so the fraction printed slightly understates the traffic.
"""

from __future__ import annotations

import statistics
import time

import torch

# Bytes each weight value takes, with its share of the block's scale: Q8_0 keeps 32 int8 values per scale, a
# float32 scale in luminal's format (luminal/quantize.py), a float16 one in llama.cpp's.
BYTES_PER_VALUE = {"float32": 4.0, "luminal Q8_0": 36 / 32, "llama.cpp Q8_0": 34 / 32}


def read_bandwidth(megabytes: int = 1024, repeats: int = 11) -> tuple[float, float, int]:
    """(median GB/s, best GB/s, threads): the rates at which torch.sum reads `megabytes` of float32, on torch's
    threads. Both are printed: on this virtual machine two calls a second apart once gave 31 and 58 GB/s."""
    values = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    values.sum()  # the pages are touched by ones(); this warms the threads
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        values.sum()
        seconds.append(time.perf_counter() - start)
    rate = values.numel() * 4 / 1e9
    return rate / statistics.median(seconds), rate / min(seconds), torch.get_num_threads()


def weight_bytes_per_token(model: torch.nn.Module, fmt: str) -> float:
    """Bytes of weights a one-row decode step reads: every Linear's matrix in `fmt` (the quantised formats turn
    exactly the Linears into Q8_0, as both luminal's int8 and bench/gguf_llama.py do), every other parameter in
    float32, except the input embedding, of which one row is read. The head is taken to be a Linear of its own, as
    in bench/llm.py's models: a head tied to the embedding stays float32 in luminal's int8."""
    embedding = model.get_input_embeddings().weight
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    linear_ids = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    other = sum(p.numel() for p in model.parameters() if id(p) not in linear_ids and p is not embedding)
    return linear * BYTES_PER_VALUE[fmt] + (other + embedding.shape[1]) * 4.0

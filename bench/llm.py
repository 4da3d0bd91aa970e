"""Language-model serving on this machine: time to first token and decode tokens per second of the generation
engine (compiled prefill + decode programs, continuous batching, resident KV cache) for one stream and for 16
concurrent streams, against transformers' generate() on the same weights (one prompt, then the 16 prompts as one
batch) and, where llama-cpp-python is installed, llama.cpp on the same weights converted to GGUF (float32, and
Q8_0 beside the int8 deployment: bench/gguf_llama.py, bench/llama_cpp_runner.py), in one run.

The model is Llama-shaped with random weights (default ~100M parameters: 12 layers, hidden 768, GQA 12/4 heads,
vocab 32000); the tokenizer is a word-level one over the vocabulary, since the bench feeds token ids.
The same model deployed with int8 (Q8_0) weights runs beside it (`--no-int8` skips it), and deployed with w8a8 (the
same weights, each projection's input rows quantised to Q8_0 too: int8 x int8 GEMMs; `--no-w8a8` skips it).
`--contiguous` adds the anchor of the paged KV cache: the same float32 model compiled with the step that takes and
returns whole caches (as packages built before paged steps are), its rows printed beside the paged ones with their
ratio.
`--redis URL` adds the rows through worker processes on that Redis beside the in-process engine's, and the
routing row: 16 streams sharing a system prompt over 2 worker processes, with prefix-cache affinity and without
(bench/llm_workers.py).
`python bench/llm.py [--layers N] [--hidden N] [--new-tokens N] [--prompt N] [--no-int8] [--no-w8a8]
[--contiguous] [--redis redis://127.0.0.1:6379/0]`.
Each single-stream decode rate is also printed as the weight bytes it reads per second against the machine's read
bandwidth measured in the same run (bench/memory_bandwidth.py; goal, issue 47: at least 80%).
Goals (issue 18): 16 streams give >= 6x the tokens per second of one stream; single-stream decode faster than
transformers; int8 decode at least 1.6x float32 decode; (issue 47) w8a8 at 16 streams at least 1.5x float32.
Each rate is printed twice: over the whole run (prefill included) and over the decode steps alone (after every
stream's first token), with the ratios of both.
The machine is shared: the load average is printed with the figures. libgomp's spin count is bounded as in a
serving process (scheduler/openmp_spin.py; torch shares the one libgomp, so generate() runs under it too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from luminal.scheduler.openmp_spin import bound_openmp_spinning  # noqa: E402

# The engine runs as served: `luminal serve` and the worker processes bound libgomp's spinning before any program
# loads. libgomp reads it once, when loaded, and torch loads it (the one the programs then share): so before torch.
bound_openmp_spinning()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, models  # noqa: E402

from luminal.llm_package import build_package, save_package  # noqa: E402
from luminal.scheduler.generation.engine import GenerationEngine  # noqa: E402
from luminal.scheduler.generation.language_model import compile_package, load_language_model  # noqa: E402
from luminal.scheduler.generation.sampling import SamplingParams  # noqa: E402

STREAMS = 16
WORKERS = ("thread worker", "worker process")  # bench/llm_workers.py's rows through the HTTP API


def write_folder(folder: Path, args: argparse.Namespace) -> transformers.LlamaForCausalLM:
    config = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
        num_hidden_layers=args.layers, num_attention_heads=12, num_key_value_heads=4,
        max_position_embeddings=args.prompt + args.new_tokens + 8, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    vocab = {f"t{i}": i for i in range(args.vocab)}
    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "t1"}))
    return model


def engine_run(engine: GenerationEngine, prompts: np.ndarray, new: int) -> tuple[float, float, float]:
    """(mean seconds to first token, generated tokens per second, decode tokens per second) for `prompts` submitted
    at once. The second counts the whole run, prefill included (as vLLM's output throughput does); the third only
    the steps after every stream has its first token, when the engine does nothing but decode."""
    loop = asyncio.new_event_loop()
    params = SamplingParams(max_tokens=new, temperature=0, ignore_eos=True)
    start = time.perf_counter()
    streams = [engine.submit(p.tolist(), params, loop) for p in prompts]
    first: dict[int, float] = {}
    decoding = None  # (time, tokens generated) when the last stream got its first token
    while engine.busy:
        engine.run_once()
        now = time.perf_counter()
        for k, s in enumerate(streams):
            if s.sequence.tokens and k not in first:
                first[k] = now - start
        if decoding is None and len(first) == len(streams):
            decoding = now, sum(len(s.sequence.tokens) for s in streams)
    total = time.perf_counter() - start
    loop.close()
    generated = len(prompts) * new
    decode_rate = (generated - decoding[1]) / (start + total - decoding[0])
    return float(np.mean(list(first.values()))), generated / total, decode_rate


def hf_run(model, prompts: np.ndarray, new: int) -> tuple[float, float, float]:
    """As engine_run for generate(): its decode rate is the tokens after the first over the time after the first
    token's generate() (the prompt's prefill taken out)."""
    ids = torch.from_numpy(prompts)
    kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        start = time.perf_counter()
        model.generate(ids, max_new_tokens=1, **kwargs)
        ttft = time.perf_counter() - start
        start = time.perf_counter()
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, **kwargs)
        total = time.perf_counter() - start
    return ttft, len(prompts) * new / total, len(prompts) * (new - 1) / max(total - ttft, 1e-9)


def model_arguments(parser: argparse.ArgumentParser, layers: int = 12, hidden: int = 768, vocab: int = 32000) -> None:
    """The model's and the run's shape options, which write_folder reads."""
    parser.add_argument("--layers", type=int, default=layers)
    parser.add_argument("--hidden", type=int, default=hidden)
    parser.add_argument("--vocab", type=int, default=vocab)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)


def main() -> None:
    parser = argparse.ArgumentParser()
    model_arguments(parser)
    parser.add_argument("--no-int8", dest="int8", action="store_false", help="skip the int8 (Q8_0) deployment")
    parser.add_argument("--no-w8a8", dest="w8a8", action="store_false", help="skip the w8a8 (Q8_0 x Q8_0) deployment")
    parser.add_argument("--contiguous", action="store_true", help="add the concatenating-cache anchor")
    parser.add_argument("--redis", help="add the rows through worker processes on this Redis")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        hf = write_folder(folder, args)
        params = sum(p.numel() for p in hf.parameters())
        print(f"Llama-shaped model: {params / 1e6:.0f}M parameters, {args.layers} layers, hidden {args.hidden}")
        print(f"load average at start: {load()}")
        engines = {"": deployed(folder, "m", None)}
        if args.int8:
            engines[" int8"] = deployed(folder, "q", "int8")
        if args.w8a8:
            engines[" w8a8"] = deployed(folder, "w", "w8a8")
        if args.contiguous:
            engines[" contiguous cache"] = deployed(folder, "c", None, paged=False)
        rng = np.random.default_rng(0)
        prompts = rng.integers(2, args.vocab, (STREAMS, args.prompt)).astype(np.int64)
        for engine in engines.values():
            engine_run(engine, prompts[:1], 2)  # warm-up: first runs load kernels
        hf_run(hf, prompts[:1], 2)
        rows = {}
        for kind, engine in engines.items():  # float32 and int8 one after the other, each at 1 then 16 streams
            rows[f"luminal{kind}, 1 stream"] = engine_run(engine, prompts[:1], args.new_tokens)
            rows[f"luminal{kind}, {STREAMS} streams"] = engine_run(engine, prompts, args.new_tokens)
        rows["transformers generate(), 1 prompt"] = hf_run(hf, prompts[:1], args.new_tokens)
        rows[f"transformers generate(), batch of {STREAMS}"] = hf_run(hf, prompts, args.new_tokens)
        rows.update(llama_cpp_rows(hf, folder, prompts, args))
        if args.redis:
            from llm_workers import routing_rows, worker_rows  # bench/ scripts, beside this one

            hop = worker_rows(folder / "m.lpkg", prompts.tolist(), args.new_tokens, args.redis)
            system, tails = prompts[0, 8:].tolist(), prompts[:, :8].tolist()  # (prompt - 8) shared, 8 each its own
            routed = routing_rows(folder / "m.lpkg", system, tails, args.new_tokens, args.redis)
    print(f"{'':44s} {'TTFT ms':>9s} {'tokens/s':>9s} {'decode tokens/s':>16s}")
    for name, (ttft, tps, decode) in rows.items():
        print(f"{name:44s} {ttft * 1e3:9.1f} {tps:9.1f} {decode:16.1f}")
    print("(tokens/s: the whole run, prefill included; decode tokens/s: once every stream has its first token)")
    for column, label in ((1, "tokens/s"), (2, "decode tokens/s")):
        ratios(rows, column, label, args)
    print_bandwidth(hf, rows)
    if args.redis:
        print_worker_rows(rows, hop, routed)
    from machine import cpu_model  # bench/ scripts, beside this one

    print(f"load average at end: {load()}; CPU: {cpu_model()}")


def print_bandwidth(hf, rows: dict) -> None:
    """Each single-stream decode rate as the weight bytes it reads per second, beside the machine's read bandwidth
    measured now (bench/memory_bandwidth.py)."""
    from memory_bandwidth import read_bandwidth, weight_bytes_per_token  # bench/ scripts, beside this one

    median, best, threads = read_bandwidth()
    print(f"\nmemory read bandwidth, torch.sum over 1 GiB on {threads} threads: {median:.1f} GB/s (best {best:.1f})")
    formats = {"luminal": "float32", "luminal int8": "luminal Q8_0", "luminal w8a8": "luminal Q8_0",
               "llama.cpp f32": "float32",
               "llama.cpp Q8_0": "llama.cpp Q8_0", "transformers generate(), 1 prompt": "float32"}  # fmt: skip
    for name, fmt in formats.items():
        key = name if name.startswith("transformers") else f"{name}, 1 stream"
        if key in rows:
            per_token = weight_bytes_per_token(hf, fmt)
            rate = rows[key][2] * per_token / 1e9
            print(f"{key + ', decode':44s} {per_token / 1e6:7.1f} MB/token {rate:6.1f} GB/s "
                  f"{rate / median:5.0%} of the median (goal >= 80%)")  # fmt: skip


def print_worker_rows(rows: dict, hop: dict, routed: dict) -> None:
    """The worker hop beside the in-process engine (whose inter-token latency is streams over its decode rate),
    and the routing rows."""
    many = f"{STREAMS} streams"
    print("\nthrough the HTTP API (thread worker: memory; worker process: Redis), beside the in-process engine:")
    print(f"{'':44s} {'TTFT ms':>9s} {'ITL ms':>9s} {'tokens/s':>9s}")
    for streams, n in (("1 stream", 1), (many, STREAMS)):
        ttft, tps, decode = rows[f"luminal, {streams}"]
        print(f"{'in-process engine, ' + streams:44s} {ttft * 1e3:9.1f} {n / decode * 1e3:9.2f} {tps:9.1f}")
        for kind in WORKERS:
            ttft, itl, tps = hop[f"{kind}, {streams}"]
            print(f"{kind + ' (HTTP), ' + streams:44s} {ttft * 1e3:9.1f} {itl * 1e3:9.2f} {tps:9.1f}")
    engine_ratio = rows[f"luminal, {many}"][1] / rows["luminal, 1 stream"][1]
    hop_ratios = [f"{kind} {hop[f'{kind}, {many}'][2] / hop[f'{kind}, 1 stream'][2]:.2f}x" for kind in WORKERS]
    print(f"{many} / 1 stream, tokens/s: in-process engine {engine_ratio:.2f}x, {', '.join(hop_ratios)}")
    print(f"\n{many} sharing a system prompt, 2 worker processes: {'TTFT ms':>9s} {'prompt tokens prefilled':>24s}")
    for name, (ttft, prefilled, total) in routed.items():
        print(f"{name:44s} {ttft * 1e3:9.1f} {f'{prefilled} of {total}':>24s}")


def ratios(rows: dict[str, tuple[float, float, float]], column: int, label: str, args: argparse.Namespace) -> None:
    """The goals' ratios on one column of the rows (1: tokens/s, 2: decode tokens/s)."""

    def rate(name: str) -> float:
        return rows[name][column]

    many = f"{STREAMS} streams"
    print(f"{many} / 1 stream, {label}: {rate(f'luminal, {many}') / rate('luminal, 1 stream'):.2f}x (goal >= 6x)")
    versus = rate("luminal, 1 stream") / rate("transformers generate(), 1 prompt")
    print(f"single stream vs transformers, {label}: {versus:.2f}x (goal > 1x)")
    for streams in ("1 stream", many) if args.int8 else ():
        ratio = rate(f"luminal int8, {streams}") / rate(f"luminal, {streams}")
        print(f"int8 / float32, {streams}, {label}: {ratio:.2f}x (goal >= 1.6x)")
    for streams in ("1 stream", many) if args.w8a8 else ():
        ratio = rate(f"luminal w8a8, {streams}") / rate(f"luminal, {streams}")
        print(f"w8a8 / float32, {streams}, {label}: {ratio:.2f}x" + (" (goal >= 1.5x)" if streams == many else ""))
    for ours, theirs in (("luminal", "llama.cpp f32"), ("luminal int8", "llama.cpp Q8_0")):
        for streams in ("1 stream", many) if f"{theirs}, 1 stream" in rows else ():
            ratio = rate(f"{ours}, {streams}") / rate(f"{theirs}, {streams}")
            print(f"{ours} / {theirs}, {streams}, {label}: {ratio:.2f}x")
    for streams in ("1 stream", many) if args.contiguous else ():
        ratio = rate(f"luminal, {streams}") / rate(f"luminal contiguous cache, {streams}")
        print(f"paged / contiguous KV cache, {streams}, {label}: {ratio:.2f}x")


def llama_cpp_rows(hf, folder: Path, prompts: np.ndarray, args: argparse.Namespace) -> dict:
    """llama.cpp on the same weights (GGUF, float32 and, with int8, Q8_0): 1 stream, then all streams at once.
    Its greedy tokens for the first prompt are checked against transformers' (the GGUF conversion's test)."""
    import llama_cpp_runner  # bench/ scripts, beside this one

    missing = llama_cpp_runner.available()
    if missing:
        print(f"llama.cpp anchor left out: {missing}")
        return {}
    from gguf_llama import write_gguf

    with torch.no_grad():
        ids = torch.from_numpy(prompts[:1])
        want = hf.generate(ids, max_new_tokens=8, do_sample=False, attention_mask=torch.ones_like(ids), pad_token_id=0)
    rows = {}
    for kind, q8_0 in (("f32", False), ("Q8_0", True))[: 2 if args.int8 else 1]:
        path = write_gguf(hf, folder / f"{kind}.gguf", q8_0=q8_0)
        runner = llama_cpp_runner.LlamaCpp(path, STREAMS, args.prompt + args.new_tokens)
        first = runner.generate(prompts[:1], 8)[3][0]  # also the warm-up
        same = sum(a == b for a, b in zip(first, want[0, prompts.shape[1] :].tolist()))
        print(f"llama.cpp {kind}: {same} of the first prompt's 8 greedy tokens equal transformers'")
        rows[f"llama.cpp {kind}, 1 stream"] = runner.generate(prompts[:1], args.new_tokens)[:3]
        rows[f"llama.cpp {kind}, {STREAMS} streams"] = runner.generate(prompts, args.new_tokens)[:3]
        runner.close()
    return rows


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg()) + f" ({os.cpu_count()} CPUs)"


def deployed(folder: Path, stem: str, quantize: str | None, paged: bool = True) -> GenerationEngine:
    """The folder built (weights as `quantize` says), compiled for the CPU and loaded into an engine; without
    `paged`, with the step that concatenates whole caches."""
    package = build_package(folder, max_batch=STREAMS, quantize=quantize)
    if not paged:
        package.paged = package.block_size = package.chunk = None
    save_package(package, folder / f"{stem}.lpkg")
    start = time.perf_counter()
    compile_package(folder / f"{stem}.lpkg", "cpu", folder / f"{stem}.llmprog")
    print(f"compile (prefill + decode, cpu, {quantize or 'float32'}): {time.perf_counter() - start:.1f} s")
    return GenerationEngine(load_language_model(folder / f"{stem}.llmprog"))


if __name__ == "__main__":
    main()

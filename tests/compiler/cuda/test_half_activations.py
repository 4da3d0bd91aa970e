"""Half-precision models keep their activations in their half type on CUDA (compiler/cuda/half_activations.py):
the buffers shrink, the GEMMs see half operands (tensor cores, cuBLAS), and the results do not change.

Storing is exact (the graph rounds there already), so the host shim's results must match the reference
interpreter's within the comparison's own half tolerances (compare.py: bf16 1e-2, fp16 1e-3, relative and
absolute). The fair outside anchor is PyTorch running the same model in bf16 on the CPU (bench/torch_models.py):
its sums run in other orders (and its attention is another kernel), so each of its bf16 results may differ by a
few bf16 steps; the test asks for the logits within 3% of their largest magnitude.
"""

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.compiler.analysis.gemm_plan import plan
from luminal.compiler.cuda.gemm_choice import library_variant
from luminal.compiler.cuda.half_operands import tensor_core_type
from luminal.compiler.kernels import ir
from luminal.nn.models import BertConfig, bert_graph
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))  # the bench's models and torch anchors
from gpu_models import SMALL, as_numpy, llama_graphs, random_weights, shapes_of  # noqa: E402

needs_gxx = pytest.mark.needs("g++")


def _temps(p: ir.KernelProgram) -> dict[str, lm.DType]:
    return {name: b.dtype for name, b in p.buffers.items() if b.role == "temp"}


def _two_linears(rows: int = 128, dtype=lm.bfloat16) -> lm.Graph:
    """A prefill's shape: a linear layer whose result (rounded to the model's type) feeds the next one."""
    import luminal.functional as F

    g = lm.Graph()
    x = g.input("x", (rows, 256), dtype)
    h = F.linear(x, g.weight("w1", (512, 256), dtype))
    F.linear(h, g.weight("w2", (256, 512), dtype)).output("out")
    return bind_random(g)


def test_a_linear_layers_result_is_stored_in_bf16_and_the_next_gemm_reads_it_as_is():
    g = _two_linears()
    half = lm.compile(g, "h100", cache=False, gemm_library="never").kernels
    wide = lm.compile(g, "h100", cache=False, gemm_library="never", activation_dtype="float32").kernels
    assert lm.float32 in _temps(wide).values() and set(_temps(half).values()) == {lm.bfloat16}
    assert half.buffers[half.outputs["out"][0]].dtype == lm.bfloat16  # the declared output type stays
    second = half.kernels[-1]
    assert tensor_core_type(half, second, plan(second)) == lm.bfloat16
    a = plan(second).contract.a  # the activation operand: a widening of a bf16 load, no conversion kernel
    assert isinstance(a, ir.Apply) and a.op == "Cast" and a.args[0].dtype == lm.bfloat16


def test_with_half_activations_both_gemms_may_go_to_cublas():
    g = _two_linears()
    half = lm.compile(g, "h100", cache=False, gemm_library="never").kernels
    wide = lm.compile(g, "h100", cache=False, gemm_library="never", activation_dtype="float32").kernels
    assert len(library_variant(half, "h100", "always").library) == 2
    assert len((library_variant(wide, "h100", "always") or wide).library) < 2


def test_the_option_is_checked_and_leaves_the_cpu_target_alone():
    g = _two_linears(rows=8)
    with pytest.raises(ValueError, match="activation_dtype"):
        lm.compile(g, "h100", cache=False, activation_dtype="half")
    cpu = [lm.compile(g, "cpu", cache=False, activation_dtype=m).source for m in ("auto", "float32")]
    assert cpu[0] == cpu[1]


@needs_gxx
@pytest.mark.parametrize("half", [lm.float16, lm.bfloat16])
def test_a_widened_half_output_keeps_its_float32_type(half):
    """An output that only widens a half input holds half values, but it is the graph's output: float32 stays."""
    g = lm.Graph()
    x = g.input("x", (4, 5), half)
    x.float().output("y")
    program = lm.compile(g, "h100", cache=False)
    assert program.kernels.buffers[program.kernels.outputs["y"][0]].dtype == lm.float32
    feed = {"x": np.linspace(-2, 2, 20, dtype=np.float32).reshape(4, 5).astype(half.np)}
    assert_matches(ShimRuntime().load(program).run(feed), lm.run(g, feed))


def _llama_case():
    """The tiny Llama's prefill and decode step bound to one set of bf16 weights, and PyTorch's model of them."""
    import torch
    from torch_models import TorchLlama

    graphs = llama_graphs(SMALL)
    weights = random_weights(shapes_of(graphs.prefill), "cpu", seed=0)
    numpy_weights = {k: as_numpy(v) for k, v in weights.items()}
    return graphs, numpy_weights, TorchLlama(SMALL.llama, weights).eval(), torch


def _shim_and_reference(graph: lm.Graph, feed: dict) -> tuple[dict, dict, ir.KernelProgram]:
    program = lm.compile(graph, "h100", cache=False)
    return ShimRuntime().load(program).run(feed), lm.run(graph, feed), program.kernels


def _close_to_torch(got: np.ndarray, torch_value) -> None:
    want = as_numpy(torch_value).astype(np.float64)
    scale = np.abs(want).max()
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=0.03 * scale)


@needs_gxx
def test_a_tiny_llama_prefill_and_decode_step_in_bf16():
    graphs, weights, model, torch = _llama_case()
    ids = np.random.default_rng(4).integers(0, SMALL.llama.vocab_size, (1, 4))
    got, want, prefill = _shim_and_reference(graphs.prefill.bind(weights), {"input_ids": ids})
    assert_matches(got, want)
    assert set(_temps(prefill).values()) == {lm.bfloat16}  # every activation of the prefill in bf16
    with torch.no_grad():
        logits, caches = model(torch.from_numpy(ids))
    _close_to_torch(got["logits"], logits)

    step_feed = {"input_ids": np.array([[5]])}
    for k in range(SMALL.llama.num_hidden_layers):
        step_feed[f"past.{k}.key"], step_feed[f"past.{k}.value"] = (got[f"present.{k}.{p}"] for p in ("key", "value"))
    got_step, want_step, step = _shim_and_reference(graphs.step.bind(weights), step_feed)
    assert_matches(got_step, want_step)
    assert lm.bfloat16 in _temps(step).values()
    with torch.no_grad():
        logits, _ = model(torch.tensor([[5]]), [tuple(torch.from_numpy(c.view(np.int16)).view(torch.bfloat16)
                                                   for c in (step_feed[f"past.{k}.key"], step_feed[f"past.{k}.value"]))
                                             for k in range(SMALL.llama.num_hidden_layers)])  # fmt: skip
    _close_to_torch(got_step["logits"], logits)


@needs_gxx
def test_a_minilm_shaped_encoder_in_fp16():
    config = BertConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=32, dtype=lm.float16,
    )  # fmt: skip
    graph = bind_random(bert_graph(config, max_batch=2, max_seq=16), seed=3)
    rng = np.random.default_rng(5)
    feed = {
        "input_ids": rng.integers(0, 128, (1, 4)),
        "attention_mask": np.ones((1, 4), np.int64),
        "token_type_ids": np.zeros((1, 4), np.int64),
    }
    got, want, program = _shim_and_reference(graph, feed)
    assert_matches(got, want)
    assert lm.float16 in _temps(program).values()


@pytest.mark.needs("nvcc")
def test_the_half_activation_programs_compile_for_sm80_and_sm90_without_spills():
    graphs = llama_graphs(SMALL)
    for graph in (graphs.prefill, _two_linears()):
        bound = graph if not graph.unbound_weights() else graph.bind(
            {k: np.zeros(s, ml_dtypes.bfloat16) for k, s in shapes_of(graph).items()}
        )  # fmt: skip
        usages = nvcc.compile_cuda(lm.compile(bound, "h100", cache=False).source)
        assert usages and all(u.spill_bytes == 0 for u in usages), [u for u in usages if u.spill_bytes]

"""On a GPU target each LayerNorm of a bf16 MiniLM-shaped encoder is one row kernel (compiler/fusion/fuse.py's
`repeats_reductions`): its mean and variance are computed once per row by the threadgroup, so fusing them into
the normalisation repeats no reduction, only the per-element arithmetic that reads them. Its indices are folded
before that is judged: unfolded, a mean inlined into the variance's sum seemed to depend on the sum's variable.
Planned for m3, the mean, the variance and the normalisation were three dispatches per norm."""

import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan as cuda_launch_plan
from luminal.compiler.metal.program import launch_plan as metal_launch_plan
from luminal.nn.models.bert import BertConfig, bert_graph
from tests.compiler.cuda.graphs import bind_random

LAYERS = 2
MINILM = BertConfig(
    vocab_size=50, hidden_size=384, num_hidden_layers=LAYERS, num_attention_heads=12, intermediate_size=1536,
    max_position_embeddings=128, dtype=lm.bfloat16,
)  # fmt: skip


@pytest.mark.parametrize("target,plan", [("m3", metal_launch_plan), ("h100", cuda_launch_plan)])
def test_every_layer_norm_is_one_row_kernel(target, plan):
    graph = bind_random(bert_graph(MINILM, max_batch=32, max_seq=128))  # rows enough for the roofline to matter
    shapes = [launch.shape for launch in plan(lm.compile(graph, target, cache=False).kernels)]
    assert shapes.count("row") == 1 + 2 * LAYERS, shapes  # the embeddings', then two per layer
    assert not {"warp", "warps", "thread", "threads"} & set(shapes), shapes

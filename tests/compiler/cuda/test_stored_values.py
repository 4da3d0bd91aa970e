"""A stored value is read back where a reader would recompute it (compiler/kernels/stored_values.py): in a bf16 BERT,
the residual after each projection reads the stored LayerNorm output instead of recomputing it from the row
statistics, so each LayerNorm is one row kernel (statistics and application) instead of a "warps" launch and a
thread launch; through the host shim the outputs are the reference interpreter's."""

from collections import Counter

import numpy as np
import pytest

import luminal as lm
from luminal import dtypes as dt
from luminal.compiler.cuda.program import launch_plan
from luminal.compiler.gpu import passes as gpu_passes
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.stored_values import read_stored_values
from luminal.nn.models.bert import BertConfig, bert_graph
from luminal.runtime.cuda.shim import ShimRuntime
from luminal.symbolic import const
from luminal.view import idx
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

LAYERS = 2


def bert() -> lm.Graph:
    config = BertConfig(vocab_size=50, hidden_size=128, num_hidden_layers=LAYERS, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64, dtype=dt.bfloat16)  # fmt: skip
    return bind_random(bert_graph(config, max_batch=4, max_seq=64))


def feed(rows: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seq)
    mask = np.ones((rows, seq), np.int64)
    mask[-1, seq // 2 :] = 0
    ids = rng.integers(1, 50, (rows, seq))
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros((rows, seq), np.int64)}


def test_each_layer_norm_is_one_row_kernel(monkeypatch):
    g = bert()
    shapes = Counter(launch.shape for launch in launch_plan(lm.compile(g, "h100", cache=False).kernels))
    assert shapes["row"] == 1 + 2 * LAYERS and "warps" not in shapes and "thread" not in shapes
    monkeypatch.setattr(gpu_passes, "read_stored_values", lambda p: p)
    before = Counter(launch.shape for launch in launch_plan(lm.compile(g, "h100", cache=False).kernels))
    assert before["warps"] == before["thread"] == 2 * LAYERS  # statistics, then their application
    assert sum(before.values()) - sum(shapes.values()) == 2 * LAYERS  # a launch fewer per LayerNorm


RUNTIMES = {"plain": {}, "reversed": {"reversed_blocks": True}, "bucketed": {"buckets": True}}


@pytest.mark.needs("g++")
@pytest.mark.parametrize("runtime", RUNTIMES.values(), ids=RUNTIMES.keys())
def test_matches_the_reference(runtime):
    g = bert()
    loaded = ShimRuntime(**runtime).load(lm.compile(g, "h100", cache=False))
    for rows, seq in ((1, 5), (3, 37)):
        assert_matches(loaded.run(feed(rows, seq)), lm.run(g, feed(rows, seq)))


SHAPE = (const(3), const(4))


def _kernel(name: str, body: ir.Value, shape=SHAPE) -> ir.LoopKernel:
    return ir.LoopKernel(name, name.replace("k", "b"), shape, body)


def _reused(stored: ir.Value, reader: ir.Value, shape=SHAPE) -> bool:
    """Whether a reader of `reader` (over `shape`) reads the buffer of a kernel storing `stored`."""
    x, y = (ir.Buffer(n, dt.float32, const(12), "input") for n in ("x", "y"))
    kernels = [_kernel("k1", stored), _kernel("k2", reader, shape)]
    buffers = {b.name: b for b in (x, y)} | {k.out: ir.Buffer(k.out, k.body.dtype, const(12), "temp") for k in kernels}
    p = read_stored_values(ir.KernelProgram(buffers, kernels))
    return "b1" in ir.buffers_read(p.kernels[1])


def test_a_value_is_read_back_at_the_same_positions_and_through_an_exact_widening_only():
    position = idx(0, 3) * 4 + idx(1, 4)
    value = ir.Apply("Add", (ir.Load("x", position, dt.float32), ir.Load("y", position, dt.float32)), dt.float32)
    half = ir.Apply("Cast", (value,), dt.bfloat16)
    twice = lambda v: ir.Apply("Mul", (v, ir.Const(2.0, v.dtype)), v.dtype)  # noqa: E731
    assert _reused(value, twice(value))
    assert not _reused(value, twice(value), shape=(const(4), const(3)))  # other positions
    assert _reused(ir.Apply("Cast", (half,), dt.float32), twice(half))  # bf16 -> float32 -> bf16 is exact
    assert not _reused(half, twice(value))  # the stored value is rounded: not the reader's float32 value

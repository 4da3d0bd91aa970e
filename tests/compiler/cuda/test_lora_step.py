"""The multi-LoRA paged decode step (luminal/nn/lora.py) compiled for h100: rows with different adapters and the
base in one step, their slots' factors gathered per row, compute through the host shim what the reference
interpreter does, and the adapters change the logits; the generated CUDA compiles for sm_80 and sm_90."""

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.lora_adapter import LoraAdapter
from luminal.lora_bank import LoraBank
from luminal.nn.lora import LoraLayout, adapted_shapes, attach_lora
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.paged_decoding import DEFAULT_BLOCK_SIZE, paged_step_graph, pool_name
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random
from tests.compiler.cuda.test_decode import CONFIG, LAYERS

POOL_BLOCKS, LAYOUT = 16, LoraLayout(slots=3, rank=8)


@pytest.fixture(scope="module")
def step():
    model = LlamaForCausalLM(CONFIG)
    attach_lora(model, LAYOUT)
    graph = bind_random(paged_step_graph(model, max_batch=4, max_positions=128))
    bank = LoraBank(LAYOUT, adapted_shapes(model), ml_dtypes.bfloat16)  # CONFIG's activations
    rng = np.random.default_rng(7)
    for name, rank in (("a", 8), ("b", 4)):  # rank 4 zero-padded to the layout's 8
        factors = {path: (rng.standard_normal((n_in, rank)).astype(np.float32) * 0.3,
                          rng.standard_normal((rank, n_out)).astype(np.float32) * 0.3)
                   for path, (n_in, n_out) in bank.shapes.items()}  # fmt: skip
        bank.install(name, LoraAdapter("", rank, factors))
    return graph, lm.compile(graph, "h100", cache=False), bank


def _feed(lengths: list[int], slots: list[int], bank: LoraBank) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    row_blocks = max(n // DEFAULT_BLOCK_SIZE + 1 for n in lengths)
    table = rng.permutation(POOL_BLOCKS)[: len(lengths) * row_blocks].reshape(len(lengths), row_blocks)
    lengths_ = np.array(lengths, np.int64).reshape(-1, 1)
    where = np.take_along_axis(table, lengths_ // DEFAULT_BLOCK_SIZE, 1) * DEFAULT_BLOCK_SIZE
    feed = {"input_ids": rng.integers(0, 96, (len(lengths), 1)), "position_ids": lengths_,
            "block_table": table.astype(np.int64), "slots": where + lengths_ % DEFAULT_BLOCK_SIZE}  # fmt: skip
    for k in range(LAYERS):
        for part in ("key", "value"):
            pool = rng.standard_normal((POOL_BLOCKS, 2, DEFAULT_BLOCK_SIZE, 16))
            feed[pool_name(k, part)] = pool.astype(ml_dtypes.bfloat16)
    return {**feed, **bank.feed(slots)}


@pytest.mark.needs("g++")
def test_two_adapters_and_the_base_in_one_step_match_the_reference(step):
    graph, program, bank = step
    feed = _feed([5, 40, 17], [bank.slots["a"], 0, bank.slots["b"]], bank)
    want = lm.run(graph, {name: value.copy() for name, value in feed.items()})
    got = ShimRuntime().load(program).run({name: value.copy() for name, value in feed.items()})
    assert_matches(got, want)
    base = lm.run(graph, {**{n: v.copy() for n, v in feed.items()}, **bank.feed([0, 0, 0])})
    changed = np.abs(base["logits"].astype(np.float32) - want["logits"].astype(np.float32)).max(axis=1)
    assert changed[0] > 1e-2 and changed[1] == 0 and changed[2] > 1e-2  # the base row is the base's


@pytest.mark.needs("nvcc")
def test_compiles_for_sm80_and_sm90(step):
    _, program, _ = step
    assert {u.arch for u in nvcc.compile_cuda(program.source)} == {"80", "90"}

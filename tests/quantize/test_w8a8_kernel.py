"""The CPU's int8 x int8 kernel for W8A8 projections (compiler/cpu/codegen_w8a8.py) against the reference
interpreter and a torch statement of Q8_0 x Q8_0, each block's max found once while packing, and weight-only int8
programs left on their own kernel."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.search.stage import SearchOptions
from luminal.quantize import dequantize, quantize_activations, quantize_q8_0
from tests.quantize.q8_0_rows import extreme_rows, extreme_weight, torch_w8a8

ROWS = lm.sym("rows", max=16)


def compiled(g: lm.Graph):
    # The search's wall-time deadline lifted: on a loaded machine it cut the search short of the GEMM candidate.
    return lm.compile(g, target="cpu", cache=False, search_options=SearchOptions(deadline_s=1e9))


def projection(n: int, k: int, quantised_rows: bool = True) -> lm.Graph:
    g = lm.Graph()
    x = g.input("x", (ROWS, k))
    w = dequantize(g.weight("q", (n, k), lm.int8), g.weight("s", (n, k // 32)))
    ((quantize_activations(x) if quantised_rows else x) @ w.t() + g.weight("b", (n,))).output("y")
    return g


@pytest.mark.parametrize("n, k", [(256, 256), (262, 224)])
@pytest.mark.parametrize("rows", [1, 5, 16])
def test_compiled_projection_is_int8_by_int8_and_matches_the_reference_and_torch(rows, n, k):
    """Rows 1 (a decode step's one row), 5 (a group of 4 and one alone) and 16, with the edge blocks; 262 x 224: a
    last tile of 6 weight rows (4, then one at a time) and an odd number of blocks (AVX-512's half-width tail)."""
    rng = np.random.default_rng(rows)
    q, s = extreme_weight(n, k, rng)
    b = rng.standard_normal(n).astype(np.float32)
    x = np.concatenate([extreme_rows(k, rng), rng.standard_normal((10, k)).astype(np.float32)])[:rows]
    g = projection(n, k)
    g.bind({"q": q, "s": s, "b": b})
    program = compiled(g)
    assert "lm_q8q8dot4x4(" in program.source, program.report["choice"]
    want = torch_w8a8(x, q, s) + b
    tolerance = 1e-5 * np.abs(want).max()
    np.testing.assert_allclose(lm.run(g, {"x": x})["y"], want, atol=tolerance)
    np.testing.assert_allclose(program.run({"x": x})["y"], want, atol=tolerance)


def test_rows_under_two_sizes_are_int8_by_int8_and_match_the_reference_and_torch():
    """A prefill's rows: batch x sequence, both symbolic. The block scale's index then passes through
    `(256*s + k) // (256*seq)` (0 since s < seq), which must fold for the int8 x int8 kernel to take the operand."""
    n, k = 256, 256
    rng = np.random.default_rng(4)
    q, s = extreme_weight(n, k, rng)
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", max=4), lm.sym("seq", max=64), k))
    w = dequantize(g.weight("q", (n, k), lm.int8), g.weight("s", (n, k // 32)))
    (quantize_activations(x) @ w.t()).output("y")
    g.bind({"q": q, "s": s})
    program = compiled(g)
    assert "lm_q8q8dot4x4(" in program.source, program.report["choice"]
    for batch, seq in [(1, 1), (1, 6), (3, 5), (2, 64)]:
        rows = np.concatenate([extreme_rows(k, rng), rng.standard_normal((batch * seq, k)).astype(np.float32)])
        x = rows[rng.permutation(len(rows))[: batch * seq]].reshape(batch, seq, k)
        want = torch_w8a8(x.reshape(-1, k), q, s).reshape(batch, seq, n)
        tolerance = 1e-5 * np.abs(want).max()
        np.testing.assert_allclose(lm.run(g, {"x": x})["y"], want, atol=tolerance)
        np.testing.assert_allclose(program.run({"x": x})["y"], want, atol=tolerance)


def test_a_compiled_rows_result_is_the_same_bits_alone_as_in_a_batch():
    """Batch invariance through the kernel's tile shapes: 16 rows take tiles of 4 weight rows x 4 rows, and the last
    tile's 6 weight rows 4 then 1 at a time; one row alone takes one weight row at a time."""
    n, k = 262, 224
    rng = np.random.default_rng(7)
    q, s = extreme_weight(n, k, rng)
    g = projection(n, k)
    g.bind({"q": q, "s": s, "b": rng.standard_normal(n).astype(np.float32)})
    program = compiled(g)
    x = np.concatenate([extreme_rows(k, rng), rng.standard_normal((10, k)).astype(np.float32)])
    together = program.run({"x": x})["y"]
    for r in range(len(x)):
        np.testing.assert_array_equal(program.run({"x": x[r : r + 1]})["y"][0], together[r])


def test_weight_only_int8_programs_keep_their_kernel():
    """A float input times a Q8_0 weight stays the weight-only kernel (no int8 x int8 prelude or calls)."""
    g = projection(256, 256, quantised_rows=False)
    q, s = quantize_q8_0(np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32))
    g.bind({"q": q, "s": s, "b": np.zeros(256, np.float32)})
    source = compiled(g).source
    assert "lm_qdot4(" in source and "q8q8" not in source and "LM_I8PAIRS" not in source


def test_each_block_max_is_computed_once_for_its_scale_and_values():
    """Packing a row, a block's max |x| is one loop that both its scale and its int8 values read (it was two)."""
    g = projection(256, 256)
    q, s = extreme_weight(256, 256, np.random.default_rng(4))
    g.bind({"q": q, "s": s, "b": np.zeros(256, np.float32)})
    source = compiled(g).source
    assert "lm_q8q8dot4x4(" in source and source.count("reduction(max:") == 1, source

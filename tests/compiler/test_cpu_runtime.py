"""Compiled CPU programs compute what the reference interpreter computes (random graphs and real blocks)."""

import re

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from tests.graph_fuzz import random_graph


def _assert_close(got, want, what):
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, f"{what}: {k}"
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-6, equal_nan=True, err_msg=f"{what}: {k}")


@pytest.mark.parametrize("seed", range(60))
def test_compiled_random_graphs_match_the_interpreter(seed):
    g, feed = random_graph(seed)
    _assert_close(lm.compile(g, target="cpu").run(feed), lm.run(g, feed), f"seed {seed}")


def test_a_transformer_block_and_new_symbol_values():
    g = lm.Graph()
    b, s = lm.sym("b", max=8), lm.sym("s", max=64)
    x = g.input("x", (b, s, 16))
    w = g.weight("w", (48, 16))
    q, k, v = F.linear(F.layer_norm(x, (16,)), w).reshape(b, s, 3, 2, 8).permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, 16)
    (x + F.gelu(y)).output("y")
    g.bind({"w": np.random.default_rng(0).standard_normal((48, 16)).astype(np.float32) / 4})
    prog = lm.compile(g, target="cpu")
    for shape in [(2, 5, 16), (1, 9, 16), (2, 5, 16)]:  # the arena is per symbol binding; reuse must stay right
        x_val = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
        _assert_close(prog.run({"x": x_val}), lm.run(g, {"x": x_val}), f"shape {shape}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "int64"])
def test_dtypes_round_like_the_reference(dtype):
    g = lm.Graph()
    x = g.input("x", (4, 6), dtype=dtype)
    y = (x * 3 + x.sum(-1, keepdim=True)).amax(0) if dtype.startswith("int") else (x.exp() * x).softmax(-1)
    y.output("y")
    rng = np.random.default_rng(1)
    data = rng.integers(-50, 50, (4, 6)) if dtype.startswith("int") else rng.standard_normal((4, 6))
    feed = {"x": data.astype(lm.dtypes.dtype_of(dtype).np)}
    _assert_close(lm.compile(g).run(feed), lm.run(g, feed), dtype)


def test_integer_extremes_compile_like_the_reference():
    """Every integer type's minimum and maximum as C literals (int64's minimum and uint64's maximum have no
    plain literal), an empty max reduction's identity, and products that overflow int inside C's promotion."""
    g, feed = lm.Graph(), {}
    for d in lm.dtypes.INTEGERS:
        x = g.input(f"x_{d.name}", (3, 5), dtype=d)
        lo, hi = g.constant(d.min, d), g.constant(d.max, d)
        (x + hi).output(f"plus_max_{d.name}")
        (x * lo - hi).output(f"times_min_{d.name}")
        (x * x).output(f"square_{d.name}")  # uint16: 65535^2 overflows a (promoted) int
        F.maximum(x, hi).output(f"max_{d.name}")
        x[:, :0].amax(1).output(f"empty_max_{d.name}")
        feed[f"x_{d.name}"] = np.array([[d.min, d.max, 0, 1, d.max - 1]] * 3, d.np)
    want, got = lm.run(g, feed), lm.compile(g).run(feed)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_gather_out_of_range_raises_and_errors_name_inputs():
    g = lm.Graph()
    table = g.weight("table", (5, 3))
    ids = g.input("ids", (lm.sym("n"),), dtype=lm.int64)
    F.embedding(ids, table).output("e")
    g.bind({"table": np.arange(15, dtype=np.float32).reshape(5, 3)})
    prog = lm.compile(g)
    assert prog.run({"ids": np.array([4, 0])})["e"].tolist() == [[12, 13, 14], [0, 1, 2]]
    with pytest.raises(IndexError, match="out of range"):
        prog.run({"ids": np.array([7])})
    with pytest.raises(lm.runtime.reference.ExecutionError, match="must be int64"):
        prog.run({"ids": np.array([1], np.int32)})


def test_identical_layers_share_their_kernel_functions():
    """Kernels that differ only in their buffers are one C function called with different slots: a stack of
    equal layers costs the C compiler one layer. Six layers, so each is searched as a segment of its own (in
    four, a layer's residual spans a quarter of the graph and the graph is searched whole, where fusion may
    recompute an earlier layer's cheap residual sum in a later layer, and the layers differ)."""

    LAYERS = 6
    rng = np.random.default_rng(5)
    g = lm.Graph()
    h = g.input("x", (lm.sym("batch", max=8), 24))
    for layer in range(LAYERS):
        w, b = g.weight(f"w{layer}", (24, 24)), g.weight(f"b{layer}", (24,))
        g.bind(
            {
                f"w{layer}": rng.standard_normal((24, 24)).astype(np.float32) / 5,
                f"b{layer}": rng.standard_normal(24).astype(np.float32),
            }
        )
        h = h + F.gelu(F.linear(F.layer_norm(h, 24), w, b))
    h.output("y")
    prog = lm.compile(g, "cpu", cache=False)
    functions = prog.source.count("static int lm_f")
    calls = re.findall(r"if \((lm_f\d+)\(B, D, ", prog.source)
    # Buffers are passed in the order each kernel reads them, so even the first layer (which reads the input)
    # and the last (which writes the output) run the same functions as the layers between.
    per_layer = len(calls) // LAYERS
    assert len(calls) % LAYERS == 0 and functions == len(set(calls)) <= per_layer
    assert all(calls.count(f) % LAYERS == 0 for f in set(calls))
    feed = {"x": rng.standard_normal((5, 24)).astype(np.float32)}
    np.testing.assert_allclose(prog.run(feed)["y"], lm.run(g, feed)["y"], rtol=1e-4, atol=1e-4)


def test_a_value_read_in_several_places_is_written_out_once():
    # Each link reads its input three times: written out at every read, the C text would be 3**6 loads of x
    g = lm.Graph()
    y = g.input("x", (lm.sym("n", max=64), 7))
    for _ in range(6):
        y = y * y * 0.25 + y
    y.output("y")
    prog = lm.compile(g, target="cpu", cache=False)
    assert len(prog.kernels.kernels) == 1
    assert len(re.findall(r"_q1\[", prog.source)) == 3  # _q1 is x: read by the first link only
    xs = np.random.default_rng(5).uniform(-1, 1, (5, 7)).astype(np.float32)
    np.testing.assert_array_equal(prog.run({"x": xs})["y"], lm.run(g, {"x": xs})["y"])


def test_an_input_given_again_is_read_where_it_is_now():
    # The same array every run (a LoRA stack) keeps its bound address: changes made in place are read, and a
    # new array, even one at a dead array's address, or a non-contiguous one, is bound afresh.
    g = lm.Graph()
    x, s = g.input("x", (lm.sym("n", max=8), 4)), g.input("s", (4,))
    (x * s).output("y")
    prog = lm.compile(g, target="cpu", cache=False)
    xs, scale = np.ones((3, 4), np.float32), np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(prog.run({"x": xs, "s": scale})["y"], xs * scale)
    scale[:] = 7  # written in place, as a bank installs an adapter
    np.testing.assert_array_equal(prog.run({"x": xs, "s": scale})["y"], xs * 7)
    for k in range(3):
        del scale
        scale = np.full(4, k, np.float32)
        np.testing.assert_array_equal(prog.run({"x": xs, "s": scale})["y"], xs * k)
    strided = np.arange(8, dtype=np.float32)[::2]
    np.testing.assert_array_equal(prog.run({"x": xs, "s": strided})["y"], xs * strided)
    strided[:] = -1  # the runtime read a contiguous copy of it, not this memory
    np.testing.assert_array_equal(prog.run({"x": xs, "s": strided})["y"], xs * -1)

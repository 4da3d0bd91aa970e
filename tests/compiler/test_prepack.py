"""GEMM operands: functions of weights alone are packed once when a program is loaded (prepack.py), strided
activations are read in place (gemm_operands.py), and the micro-kernel for CPUs without AVX-512 (6x16) gives
the same results as the AVX-512 one (12x32)."""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.cpu import prepack
from luminal.runtime import cpu
from luminal.runtime.cpu import CpuRuntime

RNG = np.random.default_rng(3)


def _linear_block() -> lm.Graph:
    """Linear (weight transposed, as torch stores it), GELU, a second linear, and x @ x^T (no weight)."""
    g = lm.Graph()
    x = g.input("x", (lm.sym("b", max=4), 37, 50))
    w1, w2 = g.weight("w1", (70, 50)), g.weight("w2", (70, 33))
    h = F.gelu(F.linear(x, w1)) @ w2
    h.output("h")
    (x @ F.transpose(x, -1, -2)).output("gram")
    return g


def _weights(scale: float) -> dict[str, np.ndarray]:
    return {
        "w1": (scale * RNG.standard_normal((70, 50))).astype(np.float32),
        "w2": (scale * RNG.standard_normal((70, 33))).astype(np.float32),
    }


def test_weight_operands_get_packed_buffers_and_activations_do_not():
    g = _linear_block()
    g.bind(_weights(0.1))
    prog = lm.compile(g, "cpu", cache=False)
    packed = [b for b in prog.kernels.buffers.values() if b.role == prepack.ROLE]
    assert len(packed) == 2  # the two weights; the gram matrix's operands are both the input
    assert {b.size.evaluate({}) for b in packed} == {50 * 96, 70 * 64}  # K by N rounded up to 32-column panels


def test_each_loaded_program_packs_its_own_weights():
    """Two executables of one compiled library with different weights: packed panels are per executable,
    never shared through the library's static state."""
    g = _linear_block()
    g.bind(_weights(0.1))
    prog = lm.compile(g, "cpu", cache=False)
    x = RNG.standard_normal((3, 37, 50)).astype(np.float32)
    first, second = _weights(0.1), _weights(0.5)
    exe1, exe2 = CpuRuntime().load(prog, first), CpuRuntime().load(prog, second)
    for exe, weights in ((exe1, first), (exe2, second), (exe1, first)):
        g.bind(weights)
        want = lm.run(g, {"x": x})
        got = exe.run({"x": x})
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("flags", [[], ["-mno-avx512f"]], ids=["native", "avx2-tile"])
def test_both_micro_kernel_shapes_match_the_interpreter(monkeypatch, tmp_path, flags):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "CFLAGS", cpu.CFLAGS + flags)
    g = _linear_block()
    g.bind(_weights(0.2))
    prog = lm.compile(g, "cpu", cache=False)
    for batch in (1, 4):
        x = RNG.standard_normal((batch, 37, 50)).astype(np.float32)
        want, got = lm.run(g, {"x": x}), prog.run({"x": x})
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [1, 12, 13, 37, 200])
def test_row_major_a_is_read_in_place_and_a_transposed_one_packed(rows):
    """Row counts on and off the 12-row panel (the edge panel is copied with zero rows under both readings)."""
    g = lm.Graph()
    x = g.input("x", (rows, 50))
    xt = g.input("xt", (50, rows))
    w = g.weight("w", (50, 40))
    g.bind({"w": RNG.standard_normal((50, 40)).astype(np.float32)})
    (x @ w).output("direct")
    (F.transpose(xt, 0, 1) @ w).output("packed")
    prog = lm.compile(g, "cpu", cache=False)
    if rows > 1:  # one row has no M index left: a vector-matrix product, emitted as loops
        assert prog.source.count("lm_micro_rows(lm_kl") == 1
    feed = {"x": RNG.standard_normal((rows, 50)).astype(np.float32)}
    feed["xt"] = np.ascontiguousarray(feed["x"].T)
    got, want = prog.run(feed), lm.run(g, feed)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def _linear_and_lookup() -> lm.Graph:
    """A linear layer (its weight read only as packed panels), a table read by a gather, and a bias added."""
    g = lm.Graph()
    x = g.input("x", (lm.sym("b", max=4), 37, 50))
    ids = g.input("ids", (lm.sym("b", max=4), 5), dtype=lm.int32)
    w, table, bias = g.weight("w", (70, 50)), g.weight("table", (9, 70)), g.weight("bias", (70,))
    (F.linear(x, w) + bias).output("y")
    F.embedding(ids, table).output("z")
    return g


def test_weights_read_only_as_packed_panels_can_be_released():
    g = _linear_and_lookup()
    weights = {"w": RNG.standard_normal((70, 50)), "table": RNG.standard_normal((9, 70)), "bias": RNG.random(70)}
    g.bind({k: v.astype(np.float32) for k, v in weights.items()})
    prog = lm.compile(g, "cpu", cache=False).prepare()
    feed = {"x": RNG.standard_normal((3, 37, 50)).astype(np.float32), "ids": RNG.integers(0, 9, (3, 5), np.int32)}
    want = lm.run(g, feed)
    unread = prepack.read_only_packed(prog.kernels)
    assert unread == {prog.kernels.weights["w"]}  # the table and the bias are read by every run
    exe = prog._executable
    with pytest.raises(ValueError, match="'table' is read by the program"):
        exe.rebind_weights({"bias": weights["bias"].astype(np.float32)})
    kept = {k: g.weight_data[k].copy() for k in ("table", "bias")}
    exe.rebind_weights(kept)
    for array in g.weight_data.values():  # the released weight is never read again (its panels are), nor the
        array[:] = np.nan  # arrays the others were bound to before
    got = exe.run(feed)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)

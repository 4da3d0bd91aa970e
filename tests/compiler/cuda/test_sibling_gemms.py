"""GEMMs of one input run as one GEMM over their weights side by side (compiler/gpu/sibling_gemms.py): the
side-by-side weights are made at load, each reader reads its member's columns of the merged output, and through
the host shim (tensor-core kernels or cuBLAS's stand-in; blocks in either order, at a bucket's grids) the outputs
are the reference interpreter's; biases are set side by side too. A GEMM whose output is the program's stays
apart."""

import numpy as np
import pytest

import luminal as lm
from luminal import dtypes as dt
from luminal.compiler.cuda.program import launch_plan, load_plan
from luminal.compiler.gpu.sibling_gemms import merge_sibling_gemms
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.derived_weights import ROLE
from luminal.nn.models.generation import decoder_graphs
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM
from luminal.runtime.cuda.shim import ShimRuntime
from luminal.symbolic import const, var
from luminal.view import idx
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

ROWS = lm.sym("m", max=512)  # GEMMs tiled, not GEMVs


def projections(bias: bool = False, exported: bool = False) -> lm.Graph:
    """A query, key and value projection of one bf16 input (the key and value half the query's width), read as a
    prefill's attention would: heads split off, and the keys also transposed. `bias`: each has its own bias;
    `exported`: the key projection is itself an output."""
    g = lm.Graph()
    h = (g.input("x", (ROWS, 256)) * 2.0).bfloat16().float()
    out = []
    for name, width in (("q", 256), ("k", 128), ("v", 128)):
        y = h @ g.weight(f"w{name}", (width, 256), dtype=lm.bfloat16).float().t()
        out.append(y + g.weight(f"b{name}", (width,)) if bias else y)
    q, k, v = out
    (q.reshape((ROWS, 2, 128)) * k.reshape((ROWS, 1, 128)) + v.reshape((ROWS, 1, 128))).output("y")
    (k.t() * 3.0).output("kt")
    if exported:
        k.output("k")
    return bind_random(g)


def feed(rows: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(rows).standard_normal((rows, 256)).astype(np.float32)}


def compiled(g: lm.Graph, library: str = "auto"):
    return lm.compile(g, "h100", cache=False, gemm_library=library)


def _gemm_launches(prog) -> int:
    return sum(launch.shape in ("mma", "cublas", "gemm") for launch in launch_plan(prog.kernels))


@pytest.mark.parametrize("library", ["auto", "always"])
def test_the_key_and_value_projections_are_one_gemm_over_weights_made_at_load(library):
    prog = compiled(projections(), library)
    p = prog.kernels
    assert _gemm_launches(prog) == 2  # the query's GEMM is fused into its reader; the key's and value's are one
    (once,) = load_plan(p)
    (derived,) = [name for name, b in p.buffers.items() if b.role == ROLE]
    assert once.buffers[0] == derived and p.buffers[derived].size.evaluate({}) == 256 * 256
    (merged,) = [k for k in p.kernels if derived in ir.buffers_read(k)]
    assert merged.shape[-1] == 256
    read = {buf for launch in launch_plan(p) for buf in launch.buffers}
    assert p.weights["wk"] not in read and p.weights["wv"] not in read  # the runtime lets them go after the load


def test_gemms_with_an_exported_output_stay_apart():
    prog = compiled(projections(exported=True))
    assert load_plan(prog.kernels) == [] and _gemm_launches(prog) == 3


def test_biases_are_side_by_side_too():
    prog = compiled(projections(bias=True))
    assert _gemm_launches(prog) == 2
    derived = sorted(int(b.size.evaluate({})) for b in prog.kernels.buffers.values() if b.role == ROLE)
    assert derived == [256, 256 * 256]  # the key's and value's biases, and their weights


RUNTIMES = {"plain": {}, "reversed": {"reversed_blocks": True}, "bucketed": {"buckets": True}}


@pytest.mark.needs("g++")
@pytest.mark.parametrize("case", [("auto", False), ("always", False), ("auto", True)], ids=["mma", "cublas", "bias"])
@pytest.mark.parametrize("runtime", RUNTIMES.values(), ids=RUNTIMES.keys())
def test_matches_the_reference(case, runtime):
    library, bias = case
    g = projections(bias=bias)
    loaded = ShimRuntime(**runtime).load(compiled(g, library))
    for rows in (3, 70):
        assert_matches(loaded.run(feed(rows)), lm.run(g, feed(rows)))


@pytest.mark.needs("nvcc")
def test_compiles_without_spills():
    for u in nvcc.compile_cuda(compiled(projections()).source):
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"


@pytest.mark.needs("g++")
def test_a_qwen2_shaped_prefill_merges_its_biased_projections_and_matches_the_reference():
    config = LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, qkv_bias=True, dtype=lm.bfloat16)  # fmt: skip
    g = bind_random(decoder_graphs(LlamaForCausalLM(config), max_batch=1, max_positions=512).prefill)
    prog = compiled(g)
    side_by_side = [name for name, b in prog.kernels.buffers.items() if b.role == ROLE and name.endswith("_weights")]
    assert len(side_by_side) == 2  # each layer's q, k and v weights (and biases) side by side
    ids = np.random.default_rng(3).integers(0, 256, (1, 19))
    feed = {"input_ids": ids}
    assert_matches(ShimRuntime().load(prog).run(feed), lm.run(g, feed))


def _gemm(name: str, a: str, w: str, n: int) -> ir.LoopKernel:
    """out[m, n] = a[m, :] . w[n, :] over 256 (bf16 weights widened), a GEMM over up to 512 rows."""
    r = var(f"_r{name}", 0, 255)  # the contraction's variable: fusion names each apart
    a_value = ir.Load(a, idx(0, ROWS) * 256 + r, dt.float32)
    b_value = ir.Apply("Cast", (ir.Load(w, idx(1, n) * 256 + r, dt.bfloat16),), dt.float32)
    return ir.LoopKernel(
        name, f"b{name}", (ROWS, const(n)), ir.Contract(f"_r{name}", const(256), a_value, b_value, dt.float32)
    )


def test_a_group_reading_another_groups_outputs_merges_after_it():
    """x -> (w1, w2); w1's output -> (w3, w4): the second group's A is rewritten by the first merge, then merged."""
    kernels = [_gemm("k1", "x", "w1", 256), _gemm("k2", "x", "w2", 128), _gemm("k3", "bk1", "w3", 128),
               _gemm("k4", "bk1", "w4", 128)]  # fmt: skip
    at = idx(0, ROWS) * 128 + idx(1, 128)
    loads = [ir.Load(f"bk{j}", at, dt.float32) for j in (2, 3, 4)]
    total = ir.Apply("Add", (ir.Apply("Add", tuple(loads[:2]), dt.float32), loads[2]), dt.float32)
    kernels.append(ir.LoopKernel("k5", "o", (ROWS, const(128)), total))
    buffers = {"x": ir.Buffer("x", dt.float32, ROWS * 256, "input")}
    buffers["o"] = ir.Buffer("o", dt.float32, ROWS * 128, "output")
    for j, n in ((1, 256), (2, 128), (3, 128), (4, 128)):
        buffers[f"w{j}"] = ir.Buffer(f"w{j}", dt.bfloat16, const(n * 256), "weight")
        buffers[f"bk{j}"] = ir.Buffer(f"bk{j}", dt.float32, ROWS * n, "temp")
    weights, outputs = {f"w{j}": f"w{j}" for j in range(1, 5)}, {"o": ("o", (ROWS, const(128)))}
    merged = merge_sibling_gemms(ir.KernelProgram(buffers, kernels, {"x": "x"}, weights, outputs, {"m": ROWS}))
    assert [k.shape[-1] for k in merged.kernels if isinstance(k.body, ir.Contract)] == [const(384), const(256)]
    for k in merged.kernels:  # every buffer read is one the program has
        assert ir.buffers_read(k) <= merged.buffers.keys(), k.name

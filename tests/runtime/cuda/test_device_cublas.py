"""cuBLAS steps on a real device (runtime/cuda/cublas.py, cuBLAS's C API on CuPy's memory and stream): every
shape of call against the reference interpreter and torch.matmul, inside a captured CUDA graph and launched alone,
across shape buckets, and a prefill-sized bf16 linear layer against torch.matmul and the generated tensor-core
GEMM. Skipped where CuPy sees no device; torch's checks where torch has no CUDA."""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.runtime.cuda import CudaRuntime, missing
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.gemm_cases import GEMMS
from tests.compiler.cuda.graphs import bind_random

pytestmark = pytest.mark.skipif(missing() is not None, reason=f"no CUDA here: {missing()}")


def load(g: lm.Graph, gemm_library: str = "always"):
    program = lm.compile(g, "h100", cache=False, gemm_library=gemm_library)
    return program, CudaRuntime().load(program)


def torch_or_skip():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch build has no CUDA")
    return torch


def as_torch(torch, x: np.ndarray):
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(x).cuda()


def as_float(torch, t) -> np.ndarray:
    return t.float().cpu().numpy()


@pytest.mark.parametrize("case", list(GEMMS))
@pytest.mark.parametrize("graph", [True, False], ids=["graph", "launches"])
def test_matches_the_reference(case, graph):
    g, feed = GEMMS[case]()
    program, exe = load(g)
    assert program.kernels.library
    assert_matches(exe.run(feed, graph=graph), lm.run(g, feed))


def test_buckets_replay_the_captured_call():
    g, feed = GEMMS["linear_bf16"]()
    _, exe = load(g)
    for rows in (37, 64, 40, 5, 1):
        x = feed["x"][:rows] if rows <= 37 else np.resize(feed["x"], (rows, 128))
        assert_matches(exe.run({"x": x}), lm.run(g, {"x": x}))


def test_against_torch_matmul():
    torch = torch_or_skip()
    g, feed = GEMMS["batched"]()
    _, exe = load(g)
    want = torch.matmul(as_torch(torch, feed["a"]), as_torch(torch, feed["b"]))
    np.testing.assert_allclose(exe.run(feed)["y"], as_float(torch, want), rtol=1e-4, atol=1e-4)


def test_a_prefill_linear_layer_against_torch_and_the_generated_gemm():
    torch = torch_or_skip()
    g = lm.Graph()
    x = g.input("x", (lm.sym("tokens", max=512), 2048), lm.bfloat16)
    F.linear(x, g.weight("w", (2048, 2048), lm.bfloat16)).output("y")
    g = bind_random(g)
    feed = {"x": (np.random.default_rng(0).standard_normal((512, 2048)) * 0.5).astype(g.weight_data["w"].dtype)}
    library, with_cublas = load(g, "auto")
    assert library.report["kernels"]["library_gemm"] == 1  # the roofline gives this one to cuBLAS
    generated, with_mma = load(g, "never")
    assert "mma" in generated.source and not generated.kernels.library
    want = as_float(torch, torch.nn.functional.linear(as_torch(torch, feed["x"]), as_torch(torch, g.weight_data["w"])))
    ours = with_cublas.run(feed)["y"].astype(np.float32)
    np.testing.assert_allclose(ours, want, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(with_mma.run(feed)["y"].astype(np.float32), want, rtol=2e-2, atol=5e-2)

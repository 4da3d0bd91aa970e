"""Models quantized by ONNX Runtime's own tools import and match ONNX Runtime on the same file: dynamic
quantization (DynamicQuantizeLinear + MatMulInteger), and static quantization in both of its formats (QDQ:
QuantizeLinear/DequantizeLinear around float ops; QOperator: QLinearConv, QLinearMatMul), interpreted and
compiled for the CPU."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

import luminal as lm
from luminal.compiler.analysis import int_gemm_plan

BATCH = 3


class Net(torch.nn.Module):
    """A small CNN with a linear head: convolutions and matmuls are what the quantizers rewrite."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2)
        # Without biases on a 3-D input the linear layers export as plain MatMul, which the QOperator format
        # turns into QLinearMatMul (with a bias it becomes ONNX Runtime's contrib QGemm, outside ONNX).
        self.fc = torch.nn.Linear(8 * 3 * 3, 16, bias=False)
        self.out = torch.nn.Linear(16, 5, bias=False)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv(x))))
        return self.out(torch.relu(self.fc(x.flatten(1).unsqueeze(1))))


def _inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((BATCH, 3, 8, 8)).astype(np.float32)


class _Calibration(CalibrationDataReader):
    def __init__(self) -> None:
        self.batches = iter([{"x": _inputs(seed)} for seed in range(4)])

    def get_next(self):
        return next(self.batches, None)


@pytest.fixture(scope="module")
def float_model(tmp_path_factory) -> str:
    torch.manual_seed(0)
    path = str(tmp_path_factory.mktemp("quantized") / "net.onnx")
    torch.onnx.export(Net().eval(), (torch.from_numpy(_inputs(0)),), path, input_names=["x"], dynamo=False)
    return path


def _quantized(float_model: str, how: str) -> str:
    path = float_model.replace(".onnx", f"_{how}.onnx")
    if how == "dynamic":
        quantize_dynamic(float_model, path, weight_type=QuantType.QUInt8)
    else:
        fmt = QuantFormat.QDQ if how == "qdq" else QuantFormat.QOperator
        # 7-bit weights (reduce_range): without VNNI, ONNX Runtime's uint8 x int8 kernels add products in
        # saturating int16 (vpmaddubsw), so full-range weights make its answers depend on the CPU; ONNX Runtime's
        # documentation recommends reduce_range there, and it keeps the anchor exact on every x86 machine.
        quantize_static(
            float_model, path, _Calibration(), quant_format=fmt, activation_type=QuantType.QUInt8, reduce_range=True
        )
    return path


EXPECTED_OPS = {
    "dynamic": {"DynamicQuantizeLinear", "MatMulInteger"},
    "qdq": {"QuantizeLinear", "DequantizeLinear"},
    "qoperator": {"QLinearConv", "QLinearMatMul", "QuantizeLinear", "DequantizeLinear"},
}


COMPILED = {
    "dynamic",
    "qoperator",
}  # the integer ops' generated C; QDQ's float ops are compiled elsewhere (~1 min each)


# MatMulInteger's two and QLinearMatMul's two (the QLinearConvs' contractions stay loops: see int_gemm.py)
INTEGER_GEMMS = {"dynamic": 2, "qoperator": 2}


@pytest.mark.parametrize("how", list(EXPECTED_OPS))
def test_quantized_model_matches_onnx_runtime(float_model, how):
    path = _quantized(float_model, how)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert EXPECTED_OPS[how] <= ops, f"{how}: the quantizer wrote {sorted(ops)}"
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    g = lm.onnx.load(path)
    (name,) = g.outputs
    program = lm.compile(g, target="cpu") if how in COMPILED else None
    if program is not None:  # the integer matmuls run as integer GEMMs (compiler/cpu/int_gemm.py), not loops
        assert sum(int_gemm_plan.plan(k) is not None for k in program.kernels.kernels) >= INTEGER_GEMMS[how]
    for seed in (10, 11):
        x = _inputs(seed)
        (want,) = session.run(None, {"x": x})
        results = [lm.run(g, {"x": x})[name]] + ([program.run({"x": x})[name]] if program else [])
        for got in results:
            assert got.shape == want.shape and got.dtype == want.dtype
            # The integer work is exact and every rounding is ONNX's (half to even of a correctly rounded
            # quotient): what is left is float rounding order in the last dequantizing multiply (3e-8 here).
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=f"{how}, seed {seed}")

"""Linear and Embedding, with torch.nn's parameter names and layouts (weight [out, in]; embedding [num, dim])."""

from __future__ import annotations

from typing import Any

from luminal import dtypes as dt
from luminal import functional as F
from luminal.nn.module import Module
from luminal.quantize import BLOCK, SCALE_SUFFIX, dequantize, quantize_activations
from luminal.tensor import Tensor
from luminal.view import ShapeError, format_shape


class Linear(Module):
    """y = x @ weight.T + bias (torch.nn.Linear)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype: Any = dt.float32) -> None:
        super().__init__()
        self.in_features, self.out_features, self.has_bias = in_features, out_features, bias
        self.declare("weight", (out_features, in_features), dtype)
        if bias:
            self.declare("bias", (out_features,), dtype)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.in_features:
            raise ShapeError(f"Linear({self.in_features}, {self.out_features}): got input {format_shape(x.shape)}")
        bias = self.param(x.graph, "bias") if self.has_bias else None
        y = F.linear(input_of(self, x), weight_of(self, x.graph), bias)
        lora = getattr(self, "lora", None)  # a LoRA site (luminal/nn/lora.py): per-row adapters' low-rank term
        return y if lora is None else y + lora.delta(self, x)

    def extra_repr(self) -> str:
        q = f", quantized={'w8a8' if self.q8_0_inputs else 'int8'}" if is_quantized(self) else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.has_bias}{q}"


# Q8_0 (luminal/quantize.py): a projection's weight [out, in] stored as int8 "weight" beside float32
# "weight_scale" [out, in / 32]; the graph reads it through `dequantize`, which the CPU GEMM does in its loads.
def quantizable(in_features: int) -> bool:
    return in_features % BLOCK == 0


def quantize_in_place(module: Module, out_features: int, in_features: int, inputs: bool = False) -> None:
    """Redeclare `module`'s weight [out, in] as Q8_0 (int8 values and per-block scales) before any graph uses it;
    with `inputs`, its input rows are quantised to Q8_0 too (w8a8: luminal/quantize.py)."""
    module.declare("weight", (out_features, in_features), dt.int8)
    module.declare("weight" + SCALE_SUFFIX, (out_features, in_features // BLOCK), dt.float32)
    module.q8_0_inputs = inputs


def is_quantized(module: Module) -> bool:
    return "weight" + SCALE_SUFFIX in module._params


def input_of(module: Module, x: Tensor) -> Tensor:
    """The projection's input as it multiplies the weight: `x`, or its Q8_0 rows where the inputs are quantised."""
    return quantize_activations(x) if getattr(module, "q8_0_inputs", False) else x


def weight_of(module: Module, graph) -> Tensor:
    """The weight as [out, in] float: the parameter itself, or its Q8_0 pair dequantised."""
    if is_quantized(module):
        return dequantize(module.param(graph, "weight"), module.param(graph, "weight" + SCALE_SUFFIX))
    return module.param(graph, "weight")


class Embedding(Module):
    """Row `i` of weight for every integer id `i` (torch.nn.Embedding); ids are graph inputs of any shape."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: Any = dt.float32) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.declare("weight", (num_embeddings, embedding_dim), dtype)

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.param(ids.graph, "weight"))

    def attend(self, x: Tensor) -> Tensor:
        """x @ weight.T: the output projection of a language model whose head is tied to this embedding."""
        return F.linear(x, self.param(x.graph, "weight"))

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"

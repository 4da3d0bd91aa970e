"""Linear and Embedding, with torch.nn's parameter names and layouts (weight [out, in]; embedding [num, dim])."""

from __future__ import annotations

from typing import Any

from luminal import dtypes as dt
from luminal import functional as F
from luminal.nn.module import Module
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
        return F.linear(x, self.param(x.graph, "weight"), bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.has_bias}"


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

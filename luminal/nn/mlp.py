"""Feed-forward blocks: the two-layer MLP of BERT/GPT-style transformers and Llama's gated SwiGLU."""

from __future__ import annotations

from typing import Any

from luminal import dtypes as dt
from luminal.nn.activation import activation_fn
from luminal.nn.linear import Linear
from luminal.nn.module import Module
from luminal.tensor import Tensor


class MLP(Module):
    """fc2(act(fc1(x))); `act` is a Hugging Face activation name ("gelu", "gelu_new", "relu", "silu", ...)."""

    def __init__(self, dim: int, hidden: int, act: str = "gelu", bias: bool = True, dtype: Any = dt.float32) -> None:
        super().__init__()
        self.act_name, self.act = act, activation_fn(act)
        self.fc1 = Linear(dim, hidden, bias, dtype)
        self.fc2 = Linear(hidden, dim, bias, dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))

    def extra_repr(self) -> str:
        return f"act={self.act_name!r}"


class SwiGLU(Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)), with Llama's parameter names (no biases by default)."""

    def __init__(self, dim: int, hidden: int, bias: bool = False, act: str = "silu", dtype: Any = dt.float32) -> None:
        super().__init__()
        self.act_name, self.act = act, activation_fn(act)
        self.gate_proj = Linear(dim, hidden, bias, dtype)
        self.up_proj = Linear(dim, hidden, bias, dtype)
        self.down_proj = Linear(hidden, dim, bias, dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))

    def extra_repr(self) -> str:
        return f"act={self.act_name!r}"

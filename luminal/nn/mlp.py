"""Feed-forward blocks: the two-layer MLP of BERT/GPT-style transformers and Llama's gated SwiGLU, with its gate
and up projections apart (Llama) or in one weight (Phi-3)."""

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


class FusedSwiGLU(Module):
    """down_proj(silu(gate) * up) with gate and up from one projection, gate_up_proj [2 * hidden, dim]: its first
    `hidden` rows are the gate's, the rest the up projection's (Phi-3's Phi3MLP, no biases). One GEMM, whose
    output the graph splits with two slices."""

    def __init__(self, dim: int, hidden: int, act: str = "silu", dtype: Any = dt.float32) -> None:
        super().__init__()
        self.act_name, self.act, self.hidden = act, activation_fn(act), hidden
        self.gate_up_proj = Linear(dim, 2 * hidden, False, dtype)
        self.down_proj = Linear(hidden, dim, False, dtype)

    def forward(self, x: Tensor) -> Tensor:
        gate_up = self.gate_up_proj(x)
        return self.down_proj(self.act(gate_up[..., : self.hidden]) * gate_up[..., self.hidden :])

    def extra_repr(self) -> str:
        return f"act={self.act_name!r}"

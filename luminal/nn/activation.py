"""Activation modules, and the Hugging Face `hidden_act` names (ACT2FN's keys) mapped to luminal functions."""

from __future__ import annotations

from typing import Callable

from luminal import functional as F
from luminal.nn.module import Module
from luminal.tensor import Tensor

# "gelu_new", "gelu_pytorch_tanh" and "gelu_fast" are three spellings of GPT-2's tanh approximation:
# x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); "gelu" is the exact erf form.
HF_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "quick_gelu": lambda x: x * F.sigmoid(x * 1.702),  # x sigmoid(1.702 x)
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": F.tanh,
    "sigmoid": F.sigmoid,
}


def activation_fn(name: str) -> Callable[[Tensor], Tensor]:
    """The function a Hugging Face config's `hidden_act` / `activation_function` names."""
    try:
        return HF_ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; known: {sorted(HF_ACTIVATIONS)}") from None


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)

"""The sparse mixture-of-experts feed-forward of Mixtral and Qwen3-MoE, routed inside the graph.

A router (`gate`, a bias-free [experts, hidden] projection) scores every expert per token; the softmax of those
scores, in float32, gives probabilities, of which each token keeps its `top_k` largest (`top_k` below, made of
comparisons and sums, since the primitive ops have no sort), optionally renormalised to sum to 1. The experts are
SwiGLUs stored stacked, as transformers 5 holds them: `experts.gate_up_proj` [experts, 2 * intermediate, hidden]
(the gate's rows, then the up projection's) and `experts.down_proj` [experts, hidden, intermediate]. Each token
gathers its k experts' matrices, [..., k, out, in], and applies them as a batched matrix-vector product; the
k results are weighted by their probabilities and summed. Nothing loops over experts in Python, and a token
reads only the weights of the experts it chose.
"""

from __future__ import annotations

from typing import Any

from luminal import dtypes as dt
from luminal.hl import prim
from luminal.nn.activation import activation_fn
from luminal.nn.linear import quantizable
from luminal.nn.module import Module
from luminal.quantize import BLOCK, SCALE_SUFFIX, dequantize
from luminal.tensor import Tensor
from luminal.view import idx


def top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(values, indices) [..., k] of the k largest entries along the last dim, largest first (torch.topk).

    An entry's rank is how many entries beat it: a larger value, or an equal value at a lower index. Ranks are
    then a permutation, so the entry of rank j is found by one comparison per entry. Of equal values the lower
    index ranks first; torch.topk leaves that choice unspecified (on the CPU, topk([1, 2, 2, 2], 2) gives
    indices 1 and 3), so only ties can differ, and a router's float probabilities tie with probability ~0.
    """
    n = x.shape[-1]
    mine, rival = x.unsqueeze(-1), x.unsqueeze(-2)  # [..., n, 1] against [..., 1, n]
    rival_first = prim.cast(prim.iota(x.graph, idx(1, n) < idx(0, n), (n, n)), dt.bool_)  # rival's index is lower
    # [..., n (entry), n (rival)]: rival beats entry; `not rival < entry` is >= without equality's inf checks
    beaten = (mine < rival) | (rival_first & ~(rival < mine))
    rank = beaten.to(dt.int64).sum(-1)  # [..., n]
    slots = prim.iota(x.graph, idx(1, k), (1, k))
    at_rank = rank.unsqueeze(-1) == slots  # [..., n, k]: entry e holds rank j
    entries = prim.iota(x.graph, idx(0, n), (n, 1))
    indices = (at_rank.to(dt.int64) * entries).sum(-2)
    values = (at_rank.to(x.dtype) * x.unsqueeze(-1)).sum(-2)  # exact: one term is the value, the rest are 0
    return values, indices


class TopKRouter(Module):
    """weight [experts, hidden] (kept float under int8: a flipped choice would change a token's experts).
    x [..., hidden] -> (probabilities [..., k], experts [..., k] int64), most probable first."""

    def __init__(self, hidden: int, experts: int, k: int, renormalize: bool, dtype: Any = dt.float32) -> None:
        super().__init__()
        self.experts, self.k, self.renormalize = experts, k, renormalize
        self.declare("weight", (experts, hidden), dtype)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        logits = x @ self.param(x.graph, "weight").transpose(0, 1)
        probs, chosen = top_k(logits.to(dt.float32).softmax(-1), self.k)
        if self.renormalize:  # Mixtral always; Qwen3-MoE with norm_topk_prob
            probs = probs / probs.sum(-1, keepdim=True)
        return probs.to(x.dtype), chosen

    def extra_repr(self) -> str:
        return f"experts={self.experts}, k={self.k}, renormalize={self.renormalize}"


class Experts(Module):
    """Stacked SwiGLU experts: gate_up_proj [experts, 2 * intermediate, hidden], down_proj [experts, hidden,
    intermediate]. x [..., hidden] and chosen [..., k] -> each chosen expert's output [..., k, hidden].
    `quantize()` redeclares both stacks as Q8_0 (int8 beside float32 "<name>_scale", blocks of 32 along each
    matrix's input): a token then gathers its experts' int8 rows and scales and dequantises only those."""

    STACKS = ("gate_up_proj", "down_proj")

    def __init__(self, hidden: int, intermediate: int, experts: int, act: str = "silu", dtype: Any = dt.float32):
        super().__init__()
        self.intermediate, self.act = intermediate, activation_fn(act)
        self.declare("gate_up_proj", (experts, 2 * intermediate, hidden), dtype)
        self.declare("down_proj", (experts, hidden, intermediate), dtype)

    def quantizable(self) -> bool:
        return all(quantizable(self._params[name][0][-1]) for name in self.STACKS)

    def quantize(self) -> None:
        """Both stacks as Q8_0, before any graph reads them (`quantizable()` must hold)."""
        for name in self.STACKS:
            shape, _ = self._params[name]
            self.declare(name, shape, dt.int8)
            self.declare(name + SCALE_SUFFIX, (*shape[:-1], shape[-1] // BLOCK), dt.float32)

    def is_quantized(self) -> bool:
        return "gate_up_proj" + SCALE_SUFFIX in self._params

    def forward(self, x: Tensor, chosen: Tensor) -> Tensor:
        gate_up = _apply(self._gathered(x.graph, "gate_up_proj", chosen), x.unsqueeze(-2))
        gate, up = gate_up[..., : self.intermediate], gate_up[..., self.intermediate :]
        return _apply(self._gathered(x.graph, "down_proj", chosen), self.act(gate) * up)

    def _gathered(self, graph, name: str, chosen: Tensor) -> Tensor:
        """The stack's matrices of the chosen experts, [experts, out, in] gathered per token to [..., k, out, in],
        as float: int8 ones are dequantised after the gather, so a token reads only its experts' bytes."""
        if not self.is_quantized():
            return self.param(graph, name)[chosen]
        return dequantize(self.param(graph, name)[chosen], self.param(graph, name + SCALE_SUFFIX)[chosen])

    def extra_repr(self) -> str:
        return "quantized=int8" if self.is_quantized() else ""


def _apply(weights: Tensor, x: Tensor) -> Tensor:
    """Gathered weights [..., k, out, in] times x [..., k or 1, in] as a batched matrix-vector product ->
    [..., k, out]."""
    return (weights @ x.unsqueeze(-1)).squeeze(-1)


class SparseMoeBlock(Module):
    """sum over the k chosen experts of probability * expert(x): Mixtral's block_sparse_moe (transformers 5 names
    it mlp) and Qwen3-MoE's mlp, with their parameter names (gate.weight, experts.gate_up_proj, experts.down_proj)."""

    def __init__(
        self,
        hidden: int,
        intermediate: int,
        experts: int,
        k: int,
        renormalize: bool,
        act: str = "silu",
        dtype: Any = dt.float32,
    ) -> None:
        super().__init__()
        self.gate = TopKRouter(hidden, experts, k, renormalize, dtype)
        self.experts = Experts(hidden, intermediate, experts, act, dtype)

    def forward(self, x: Tensor) -> Tensor:
        probs, chosen = self.gate(x)
        return (self.experts(x, chosen) * probs.unsqueeze(-1)).sum(-2)

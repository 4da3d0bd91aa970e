"""Multi-LoRA in the graph: each adapted projection adds `(x A[slot]) B[slot]` to its output, with A and B the
stacks of every adapter's low-rank factors and `slot` a per-row integer input, so rows with different adapters
(and the base, slot 0, whose factors are zero) share one step, as S-LoRA and Punica batch them.

Why stacks as graph inputs, gathered per row: the weights are never merged per request, one compiled program
serves any mix of adapters, and adding or removing an adapter only writes a slot of the stacks (no recompile).
A row reads its slot's A [in, rank] and B [rank, out]; the product goes through the narrow rank, so the extra
work per row is (in + out) * rank multiply-adds, against in * out for the base projection. Ranks below the
layout's `rank` are zero-padded and each adapter's scale (alpha / r) is folded into its B
(luminal/lora_bank.py).

Inputs a graph gains (created on first use by each adapted projection):
  lora_slot [batch] int64                        each row's adapter (0: the base model)
  lora.{path}.A [slots, in, rank], .B [slots, rank, out]  the activations' dtype, per adapted projection (path:
                                                 its module)
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal import dtypes as dt
from luminal.hl.indexing import index_select
from luminal.nn.module import Module
from luminal.tensor import Tensor

SLOT_INPUT = "lora_slot"
# The projections an adapter may target, by module name (PEFT's target_modules spell them so).
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraLayout:
    """What a package reserves for adapters: `slots` stacks entries (slot 0 is the base, so slots - 1 adapters
    at once), the widest `rank` an adapter may have, and the projections (module names) adapters may target."""

    slots: int
    rank: int
    targets: tuple[str, ...] = PROJECTIONS

    def __post_init__(self) -> None:
        if self.slots < 2 or self.rank < 1:
            raise ValueError(f"LoRA layout: need slots >= 2 (slot 0 is the base) and rank >= 1, got {self}")
        unknown = sorted(set(self.targets) - set(PROJECTIONS))
        if unknown:
            raise ValueError(f"LoRA layout: targets {unknown} are not adaptable projections ({', '.join(PROJECTIONS)})")

    def to_json(self) -> dict:
        return {"slots": self.slots, "rank": self.rank, "targets": list(self.targets)}

    @classmethod
    def from_json(cls, raw: dict) -> LoraLayout:
        return cls(int(raw["slots"]), int(raw["rank"]), tuple(raw["targets"]))


def factor_names(path: str) -> tuple[str, str]:
    """The A and B stack inputs of the projection at module path `path` ("model.layers.0.self_attn.q_proj")."""
    return f"lora.{path}.A", f"lora.{path}.B"


class LoraSite:
    """One adapted projection's low-rank term, recorded into whatever graph the projection runs in."""

    def __init__(self, layout: LoraLayout, in_features: int, out_features: int) -> None:
        self.layout, self.in_features, self.out_features = layout, in_features, out_features

    def delta(self, module: Module, x: Tensor) -> Tensor:
        """scale * (x A[slot]) B[slot] for x [batch, ..., in], each row with its own slot."""
        g, path = x.graph, module._path.rstrip(".")
        a_name, b_name = factor_names(path)
        slots, rank = self.layout.slots, self.layout.rank
        # The activations' dtype (a bfloat16 model's stacks are bfloat16), as PyTorch multiplies one dtype.
        a = _shared_input(g, a_name, (slots, self.in_features, rank), x.dtype)
        b = _shared_input(g, b_name, (slots, rank, self.out_features), x.dtype)
        slot = _shared_input(g, SLOT_INPUT, (x.shape[0],), dt.int64)
        rows = x.reshape(x.shape[0], -1, self.in_features)  # [batch, tokens, in]: one matrix per row
        low = rows @ index_select(a, 0, slot)  # [batch, tokens, rank]
        out = low @ index_select(b, 0, slot)  # [batch, tokens, out]
        return out.reshape(*x.shape[:-1], self.out_features)


def _shared_input(g, name: str, shape: tuple, dtype) -> Tensor:
    """The graph's input `name`, declared by the first projection that asks (every site shares the slot)."""
    return g.tensor(name) if name in g.inputs else g.input(name, shape, dtype)


def attach_lora(model: Module, layout: LoraLayout) -> list[str]:
    """Give every Linear of `model` named in `layout.targets` a LoRA site; the adapted module paths, in order.
    Call before the model records a graph; the weights it binds are unchanged (the stacks are inputs)."""
    from luminal.nn.linear import Linear  # linear.py reads LoraSite through the attribute only

    model.assign_names()
    adapted = []
    for path, m in model.named_modules():
        if isinstance(m, Linear) and path.rsplit(".", 1)[-1] in layout.targets:
            object.__setattr__(m, "lora", LoraSite(layout, m.in_features, m.out_features))
            adapted.append(path)
    if not adapted:
        raise ValueError(f"LoRA: the model has none of the projections {list(layout.targets)}")
    return adapted


def adapted_shapes(model: Module) -> dict[str, tuple[int, int]]:
    """{module path: (in, out)} of every projection `attach_lora` adapted."""
    from luminal.nn.linear import Linear

    return {
        p: (m.in_features, m.out_features)
        for p, m in model.named_modules()
        if isinstance(m, Linear) and getattr(m, "lora", None) is not None
    }

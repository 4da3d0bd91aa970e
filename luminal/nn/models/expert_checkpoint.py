"""Mixture-of-experts checkpoints as the graph declares them: one stacked tensor per expert projection.

Published Mixtral and Qwen3-MoE checkpoints (and transformers 5's save_pretrained, which writes the original
layout back) hold every expert apart: Mixtral's `block_sparse_moe.experts.{e}.w1 / w3 / w2.weight` (gate, up,
down), Qwen3-MoE's `mlp.experts.{e}.gate_proj / up_proj / down_proj.weight`. The graph declares transformers 5's
in-memory names, `mlp.experts.gate_up_proj` [experts, 2 * intermediate, hidden] (each expert's gate rows, then
its up rows) and `mlp.experts.down_proj` [experts, hidden, intermediate], because a token gathers its experts from
one tensor. This is transformers' own conversion (conversion_mapping.py: MergeModulelist, then Concatenate).
"""

from __future__ import annotations

import re

import numpy as np

# The per-expert projection names of each layout: (gate, up, down).
LAYOUTS = (("w1", "w3", "w2"), ("gate_proj", "up_proj", "down_proj"))
_EXPERT = re.compile(r"^(?P<block>.+\.experts)\.(?P<e>\d+)\.(?P<proj>\w+)\.weight$")


def stack_experts(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`weights` with each block's per-expert projections replaced by the stacked gate_up_proj and down_proj
    (and Mixtral's block_sparse_moe renamed mlp); a checkpoint without per-expert tensors comes back as it is."""
    out: dict[str, np.ndarray] = {}
    blocks: dict[str, dict[str, dict[int, np.ndarray]]] = {}
    for name, value in weights.items():
        name = name.replace(".block_sparse_moe.", ".mlp.")
        m = _EXPERT.match(name)
        if m and any(m["proj"] in layout for layout in LAYOUTS):
            blocks.setdefault(m["block"], {}).setdefault(m["proj"], {})[int(m["e"])] = value
        else:
            out[name] = value
    for block, projs in blocks.items():
        gate, up, down = next(layout for layout in LAYOUTS if layout[0] in projs or layout[2] in projs)
        stacked = {p: _stack(block, p, projs.get(p, {})) for p in (gate, up, down)}
        out[block + ".gate_up_proj"] = np.concatenate([stacked[gate], stacked[up]], axis=1)
        out[block + ".down_proj"] = stacked[down]
    return out


def _stack(block: str, proj: str, experts: dict[int, np.ndarray]) -> np.ndarray:
    """The experts' matrices stacked in expert order; every expert from 0 up must be there."""
    if not experts or sorted(experts) != list(range(len(experts))):
        have = sorted(experts)
        raise ValueError(f"{block}: experts {have} hold {proj}.weight; every expert 0..n-1 must have one")
    return np.stack([experts[e] for e in range(len(experts))])

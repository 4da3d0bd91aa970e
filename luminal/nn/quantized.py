"""Q8_0 models: which projections of a built model hold int8 weights, and the checkpoint that binds to them.

`quantize_modules(model, "int8")` turns every Linear (and GPT-2's Conv1D) whose input width is a multiple of 32,
and every mixture's stacked experts whose matrices' input widths are, into Q8_0 before the model records any
graph ("w8a8": the same weights, and each such projection's input rows quantised to Q8_0 in the graph too);
embeddings (a gather, and the tied head that reads the same table) and a mixture's router (a flipped choice
would change a token's experts) stay float32. `quantize_checkpoint` then turns the float checkpoint, under the
graph's names, into what those declare: int8 "x.weight" [out, in] beside float32 "x.weight_scale" (for experts,
"experts.gate_up_proj" [experts, out, in] beside "experts.gate_up_proj_scale").
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from luminal.nn.linear import Linear, is_quantized, quantizable, quantize_in_place
from luminal.nn.module import Module
from luminal.quantize import ACTIVATIONS, SCALE_SUFFIX, check_quantize, quantize_q8_0


def _projections(model: Module):
    """(module, stored transposed) for each projection: Linear is [out, in]; GPT-2's Conv1D is [in, out]."""
    from luminal.nn.models.gpt2 import Conv1D  # the nn layer must not import the models above it at load

    for _, m in model.named_modules():
        if isinstance(m, (Linear, Conv1D)):
            yield m, isinstance(m, Conv1D)


def _expert_stacks(model: Module):
    """Each mixture's stacked experts (luminal/nn/moe.py), which are Q8_0 with the projections."""
    from luminal.nn.moe import Experts  # as above: loaded when a model is quantised, not with this module

    for _, m in model.named_modules():
        if isinstance(m, Experts):
            yield m


def quantize_modules(model: Module, quantize: str | None) -> Module:
    """`model` with its projections and expert stacks declared as Q8_0 when `quantize` is "int8" or "w8a8" (None:
    unchanged); with "w8a8" the projections' input rows are quantised too (the experts' stay float)."""
    if check_quantize(quantize) is None:
        return model
    for m, _ in _projections(model):
        if quantizable(m.in_features):
            quantize_in_place(m, m.out_features, m.in_features, inputs=quantize in ACTIVATIONS)
    for m in _expert_stacks(model):
        if m.quantizable():
            m.quantize()
    return model


def quantize_checkpoint(model: Module, weights: Mapping[str, Any]) -> dict[str, Any]:
    """Float weights (under the graph's names, after the model recorded a graph) with every Q8_0 weight replaced
    by its int8 values and scales; a weight already int8 with its scale is kept as it is."""
    out = dict(weights)
    for name, transposed in _q8_0_weights(model):
        if name not in out or (name + SCALE_SUFFIX in out and np.asarray(out[name]).dtype == np.int8):
            continue  # missing: reported by the caller's unbound-weight check
        w = np.asarray(out[name])
        out[name], out[name + SCALE_SUFFIX] = quantize_q8_0(w.T if transposed else w)  # a stack: expert by expert
    return out


def _q8_0_weights(model: Module):
    """(graph name, stored transposed) of each weight the model declares as Q8_0: projections and expert stacks."""
    for m, transposed in _projections(model):
        if is_quantized(m) and m._path is not None:
            yield m._path + "weight", transposed
    for m in _expert_stacks(model):
        if m.is_quantized() and m._path is not None:
            yield from ((m._path + stack, False) for stack in m.STACKS)


__all__ = ["quantize_checkpoint", "quantize_modules"]

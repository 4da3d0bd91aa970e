"""Padding declarations: which input dims a server may pad (and with what value), which output dims follow them.

A sequence model says `g.input("input_ids", (b, s), dtype=lm.int64, pad={1: pad_token_id})` and
`g.input("attention_mask", (b, s), dtype=lm.int64, pad={1: 0})`. A batcher may then stack requests of
different lengths by padding dim 1 of every input whose dim is `s` up to a common length; every output dim that
is `s` itself follows the padding (last_hidden_state [b, s, h] is cut back to each request's length), while an
output without `s` (a pooled embedding [b, h]) is returned as it is.

Declaring padding is a promise the graph cannot check: the answers for the real positions do not change when
padded positions are appended. That holds when the model masks padded keys (BERT with its attention_mask, mean
pooling weighted by the mask) or is causal (GPT-2, Llama: a position never sees later ones). A graph without
declarations is never padded.

The rules checked here: a padded dim is a plain symbol of that input; every input dim that is a padded symbol
declares a value (so every input can be padded to the common length); no input or output dim is an expression
of a padded symbol (`s + 1` could not be cut back); pad values fit the input's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from luminal.symbolic import Expr, as_expr

if TYPE_CHECKING:
    from luminal.dtypes import DType
    from luminal.graph import Graph

PadValue = int | float | bool


class PaddingError(ValueError):
    """A padding declaration the graph cannot honour: the message names the input, the dim and why."""


def _symbol(dim: Any) -> str | None:
    e = as_expr(dim)
    return e.args[0] if e.op == "var" else None


def _mentions(dim: Any, names: set[str]) -> set[str]:
    found: set[str] = set()

    def walk(e: Expr) -> None:
        if e.op == "var" and e.args[0] in names:
            found.add(e.args[0])
        elif e.op not in ("var", "const"):
            for a in e.args:
                walk(a)

    walk(as_expr(dim))
    return found


def pad_value(value: Any, dtype: DType, where: str) -> PadValue:
    """`value` as the Python number a pad of `dtype` holds; PaddingError when it does not fit."""
    if dtype.name == "bool":
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return bool(value)
        raise PaddingError(f"{where}: a bool input pads with True/False or 0/1, got {value!r:.40}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PaddingError(f"{where}: the pad value must be a number, got {value!r:.40}")
    if dtype.is_int:
        if isinstance(value, float) and not value.is_integer():
            raise PaddingError(f"{where}: an integer input pads with an integer, got {value!r}")
        info = np.iinfo(dtype.np)
        if not info.min <= value <= info.max:
            raise PaddingError(f"{where}: pad value {value!r:.40} does not fit {dtype.name}")
        return int(value)
    if not math.isfinite(value):
        raise PaddingError(f"{where}: the pad value must be finite, got {value!r}")
    return float(value)


def normalize(name: str, shape: tuple, dtype: DType, pad: Mapping[Any, Any]) -> dict[int, PadValue]:
    """`pad` ({dim: value}, negative dims allowed) checked against the input's shape, with dims made >= 0."""
    if not isinstance(pad, Mapping):
        raise PaddingError(f"input {name!r}: pad must map dims to pad values, e.g. {{1: 0}}, got {pad!r:.60}")
    out: dict[int, PadValue] = {}
    for dim, value in pad.items():
        if isinstance(dim, bool) or not isinstance(dim, int) or not -len(shape) <= dim < len(shape):
            raise PaddingError(f"input {name!r}: pad dim {dim!r:.20} is not a dim of its shape (rank {len(shape)})")
        axis = dim % len(shape)
        if axis in out:
            raise PaddingError(f"input {name!r}: dim {axis} is given two pad values")
        if _symbol(shape[axis]) is None:
            raise PaddingError(
                f"input {name!r}: dim {axis} is {as_expr(shape[axis])}, not a symbol; only a symbolic dim can be padded"
            )
        out[axis] = pad_value(value, dtype, f"input {name!r} dim {axis}")
    return out


def padded_symbols(graph: Graph) -> set[str]:
    names = set()
    for name, pads in graph.padding.items():
        shape = graph.nodes[graph.inputs[name]].shape
        names.update(_symbol(shape[axis]) for axis in pads)
    return names


def check_padding(graph: Graph) -> set[str]:
    """The graph's padded symbols, after checking every input and output against them (PaddingError)."""
    symbols = padded_symbols(graph)
    if not symbols:
        return symbols
    for name, node_id in graph.inputs.items():
        pads = graph.padding.get(name, {})
        for axis, dim in enumerate(graph.nodes[node_id].shape):
            plain = _symbol(dim)
            if plain in symbols and axis not in pads:
                raise PaddingError(
                    f"input {name!r} dim {axis} is {plain!r}, which another input pads: declare its pad value too"
                )
            if plain is None and _mentions(dim, symbols):
                raise PaddingError(f"input {name!r} dim {axis} is {as_expr(dim)}: padded symbols must appear alone")
    for name in graph.outputs:
        output_dims(graph, name, symbols)
    return symbols


def output_dims(graph: Graph, name: str, symbols: set[str]) -> list[int]:
    """The dims of output `name` that follow a padded input dim (they are that dim's symbol)."""
    node = graph.nodes[graph.outputs[name]]
    follows = []
    for axis, dim in enumerate(node.shape):
        if _symbol(dim) in symbols:
            follows.append(axis)
        elif _mentions(dim, symbols):
            raise PaddingError(
                f"output {name!r} dim {axis} is {as_expr(dim)}: an expression of a padded symbol cannot be unpadded"
            )
    return follows


# ---- the signature's JSON form: {"pad": [{"dim": 1, "value": 0}]} on inputs, {"unpad": [1]} on outputs ----


def input_pad_json(pads: Mapping[int, PadValue]) -> list[dict[str, Any]]:
    return [{"dim": axis, "value": value} for axis, value in sorted(pads.items())]


def pads_from_json(name: str, raw: Any, rank: int) -> dict[int, Any]:
    """An input entry's "pad" list as {dim: value}, read from an untrusted manifest (values checked later)."""
    if not isinstance(raw, list) or not raw or len(raw) > rank:
        raise PaddingError(f"input {name!r:.80}: pad must be a list of 1 to {rank} {{dim, value}} objects")
    pads: dict[int, Any] = {}
    for item in raw:
        if not isinstance(item, dict) or set(item) != {"dim", "value"}:
            raise PaddingError(f"input {name!r:.80}: each pad entry must be {{'dim': int, 'value': number}}")
        dim = item["dim"]
        if type(dim) is not int or dim in pads:
            raise PaddingError(f"input {name!r:.80}: pad dim {dim!r:.20} is not an integer or appears twice")
        pads[dim] = item["value"]
    return pads


def apply_manifest_padding(graph: Graph, signature: Any) -> None:
    """Declare on `graph` the pads a manifest's signature lists (a file without any is "no padding"); the
    loader then compares the whole signature, "unpad" lists included. PaddingError names a malformed entry."""
    entries = signature.get("inputs") if isinstance(signature, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or "pad" not in entry:
            continue
        name = entry.get("name")
        if name not in graph.inputs:
            raise PaddingError(f"pad declared for {name!r:.80}, which is not an input of the graph")
        node = graph.nodes[graph.inputs[name]]
        graph.declare_padding(name, pads_from_json(name, entry["pad"], len(node.shape)))
    check_padding(graph)


# Inputs of Hugging Face-style sequence models and what a padded position holds. Only graphs whose every input
# carrying the sequence symbol is one of these are padded by `declare_masked_sequence_padding`.
MASKED_SEQUENCE_INPUTS = {"input_ids": None, "attention_mask": 0, "token_type_ids": 0}


def declare_masked_sequence_padding(graph: Graph, pad_token_id: int = 0) -> bool:
    """For an imported model (ONNX, torch.export) that takes attention_mask [batch, seq]: declare dim 1 of
    input_ids (with `pad_token_id`: a masked position's id only has to be valid), attention_mask and
    token_type_ids paddable. Returns whether it did. It declares nothing unless input_ids shares the mask's
    length symbol, no other input carries that symbol, and every output can be cut back: a mask over past + new
    tokens, or another input of that length (position ids, a cache), could not be padded safely."""
    if "attention_mask" not in graph.inputs:
        return False
    shape = graph.nodes[graph.inputs["attention_mask"]].shape
    seq = _symbol(shape[1]) if len(shape) == 2 else None
    if seq is None or _symbol(shape[0]) == seq:
        return False
    pads: dict[str, dict[int, PadValue]] = {}
    for name, node_id in graph.inputs.items():
        axes = [axis for axis, dim in enumerate(graph.nodes[node_id].shape) if _mentions(dim, {seq})]
        if not axes:
            continue
        if name not in MASKED_SEQUENCE_INPUTS or axes != [1] or _symbol(graph.nodes[node_id].shape[1]) != seq:
            return False
        value = MASKED_SEQUENCE_INPUTS[name]
        pads[name] = {1: pad_token_id if value is None else value}
    if "input_ids" not in pads:  # a mask of its own length (past + new tokens, exported as one symbol)
        return False
    before = dict(graph.padding)
    for name, pad in pads.items():
        graph.declare_padding(name, pad)
    try:
        check_padding(graph)
    except PaddingError:
        graph.padding = before  # an output the declaration cannot cut back: the graph stays unpadded
        return False
    return True

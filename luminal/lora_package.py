"""LoRA in an LLM package and its compiled model: the layout the graphs were built with (manifest field "lora")
and the adapters deployed with it, their checked factors in one safetensors entry (`ENTRY`) named
"{adapter}/{module path}/A" and ".../B" (B with its scale folded in), so a worker installs them without PEFT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from luminal.graph import Graph
from luminal.lora_adapter import LoraAdapter, LoraRefused, check_adapter, load_adapter
from luminal.lora_bank import LoraBank
from luminal.nn.lora import SLOT_INPUT, LoraLayout

ENTRY = "lora_adapters.safetensors"
# Adapters one deployment serves at once unless told: slot 0 is the base, so 8 adapters. Each slot costs
# (in + out) * rank floats per adapted projection in every stack, whether an adapter fills it or not.
DEFAULT_SLOTS = 9
DEFAULT_RANK = 16  # PEFT's common ranks are 8 and 16; --lora-rank raises it for wider adapters
ADAPTER_NAME_CHARS = 64


def check_adapter_name(name: str) -> str:
    """Adapter names are model names in the OpenAI API: path-safe, and no "/" (which splits the safetensors names)."""
    ok = name and len(name) <= ADAPTER_NAME_CHARS and all(c.isalnum() or c in "-_." for c in name)
    if not ok or name[0] in "-_.":
        raise LoraRefused(f"LoRA adapter name {name!r:.80}: letters, digits, '-', '_' and '.' only, at most "
                          f"{ADAPTER_NAME_CHARS}, not starting with a symbol")  # fmt: skip
    return name


def read_adapters(folders: dict[str, Path]) -> dict[str, LoraAdapter]:
    """The PEFT folders by adapter name, read (LoraRefused naming the adapter for what does not fit PEFT's LoRA)."""
    out = {}
    for name, folder in folders.items():
        check_adapter_name(name)
        try:
            out[name] = load_adapter(folder)
        except LoraRefused as e:
            raise LoraRefused(f"{name}: {e}") from None
    return out


def layout_for(adapters: dict[str, LoraAdapter], slots: int | None, rank: int | None) -> LoraLayout:
    """The layout to build: room for the adapters given (and more, DEFAULT_SLOTS), their widest rank or more."""
    widest = max((a.rank for a in adapters.values()), default=1)
    return LoraLayout(slots or max(DEFAULT_SLOTS, len(adapters) + 1), rank or max(DEFAULT_RANK, widest))


def lora_shapes(graph: Graph) -> dict[str, tuple[int, int]]:
    """{module path: (in, out)} of every adapted projection, read off the graph's lora.{path}.A inputs."""
    out = {}
    for name, node in graph.inputs.items():
        if name.startswith("lora.") and name.endswith(".A") and name[:-1] + "B" in graph.inputs:
            a, b = graph.nodes[node].shape, graph.nodes[graph.inputs[name[:-1] + "B"]].shape
            out[name[len("lora.") : -len(".A")]] = (int(a[1]), int(b[2]))  # A [slots, in, r], B [slots, r, out]
    return out


def lora_inputs(graph: Graph) -> set[str]:
    """The graph's LoRA inputs (slot and stacks), which packages and compiled models check apart."""
    return {n for n in graph.inputs if n == SLOT_INPUT or n.startswith("lora.")}


def check_all(adapters: dict[str, LoraAdapter], layout: LoraLayout, graph: Graph, base: str) -> None:
    shapes = lora_shapes(graph)
    for name, adapter in adapters.items():
        try:
            check_adapter(adapter, layout, shapes, base)
        except LoraRefused as e:
            raise LoraRefused(f"{name}: {e}") from None


def encode_adapters(adapters: dict[str, LoraAdapter]) -> bytes:
    from safetensors.numpy import save

    tensors = {}
    for name, adapter in adapters.items():
        for path, (a, b) in adapter.factors.items():
            tensors[f"{name}/{path}/A"], tensors[f"{name}/{path}/B"] = np.ascontiguousarray(a), np.ascontiguousarray(b)
    metadata = {name: f"{adapter.rank}|{adapter.base}" for name, adapter in adapters.items()}
    return save(tensors, metadata=metadata) if tensors else b""


def decode_adapters(blob: Any) -> dict[str, LoraAdapter]:
    """The entry's adapters; ValueError for names that do not pair up."""
    from luminal.graph_file import read_safetensors

    if not blob:
        return {}
    arrays = read_safetensors(bytearray(blob))
    grouped: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for key, array in arrays.items():
        parts = key.split("/")
        if len(parts) != 3 or parts[2] not in ("A", "B"):
            raise ValueError(f"{ENTRY}: tensor {key!r:.80} is not adapter/path/A or B")
        grouped.setdefault(parts[0], {}).setdefault(parts[1], {})[parts[2]] = np.array(array, np.float32)
    out = {}
    for name, paths in grouped.items():
        if any(set(f) != {"A", "B"} for f in paths.values()):
            raise ValueError(f"{ENTRY}: adapter {name!r} has an A without its B")
        factors = {path: (f["A"], f["B"]) for path, f in paths.items()}
        out[check_adapter_name(name)] = LoraAdapter("", max(a.shape[1] for a, _ in factors.values()), factors)
    return out


def bank_for(layout: LoraLayout, graph: Graph, adapters: dict[str, LoraAdapter]) -> LoraBank:
    """A bank for `graph`'s stacks with `adapters` installed (each checked again: the entry is read as hostile)."""
    stacks = [graph.nodes[node].dtype.np for name, node in graph.inputs.items() if name.startswith("lora.")]
    bank = LoraBank(layout, lora_shapes(graph), stacks[0] if stacks else np.float32)
    for name, adapter in adapters.items():
        check_adapter(adapter, layout, bank.shapes, base="")
        bank.install(name, adapter)
    return bank

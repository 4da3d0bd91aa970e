"""A PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) read and checked against what a
package reserves (luminal/nn/lora.py's LoraLayout): refused, naming why, when its rank, targets, base model or
PEFT features do not fit. Read as plain data: nothing in the folder is executed."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from luminal.nn.lora import LoraLayout

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # PEFT's wrapper path in front of the base model's module paths
MAX_CONFIG_BYTES = 1 << 20


class LoraRefused(ValueError):
    """The adapter cannot be served by this deployment; the message names why."""


@dataclass(frozen=True)
class LoraAdapter:
    """An adapter's factors per module path: A [in, r] and B [r, out] with the scale already folded into B."""

    base: str  # base_model_name_or_path as PEFT recorded it ("" when absent)
    rank: int
    factors: dict[str, tuple[np.ndarray, np.ndarray]]


def load_adapter(folder: Path) -> LoraAdapter:
    """Read a PEFT LoRA folder; LoraRefused for what it is not (not LoRA, DoRA, biases, saved modules, ...)."""
    from safetensors.numpy import load_file

    folder = Path(folder)
    config_path, weights_path = folder / CONFIG, folder / WEIGHTS
    for p in (config_path, weights_path):
        if not p.is_file():
            raise LoraRefused(f"LoRA adapter {folder}: {p.name} is missing (PEFT's save_pretrained writes it)")
    if config_path.stat().st_size > MAX_CONFIG_BYTES:
        raise LoraRefused(f"LoRA adapter {folder}: {CONFIG} is over {MAX_CONFIG_BYTES} bytes")
    try:
        config = json.loads(config_path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise LoraRefused(f"LoRA adapter {folder}: {CONFIG} is not JSON: {e}") from None
    _check_features(config)
    rank, alpha = int(config.get("r", 8)), float(config.get("lora_alpha", 8))
    scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank  # PEFT's two scalings
    tensors = load_file(str(weights_path))
    factors = {}
    for name, a in tensors.items():
        if not name.endswith(".lora_A.weight"):
            continue
        path = name[: -len(".lora_A.weight")]
        path = path[len(PEFT_PREFIX) :] if path.startswith(PEFT_PREFIX) else path
        b = tensors.get(name.replace(".lora_A.", ".lora_B."))
        if b is None or a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise LoraRefused(f"LoRA adapter: {path} has no lora_B of matching rank beside its lora_A")
        # C order: a transposed view would be written by safetensors in its memory order, i.e. transposed.
        factors[path] = (np.ascontiguousarray(a.T, np.float32), np.ascontiguousarray(b.T * scale, np.float32))
    if not factors:
        raise LoraRefused(f"LoRA adapter {folder}: {WEIGHTS} holds no lora_A/lora_B pairs")
    return LoraAdapter(str(config.get("base_model_name_or_path") or ""), rank, factors)


def _check_features(config: dict) -> None:
    """Refuse the PEFT options whose arithmetic the graph's x A B term does not compute."""
    kind = config.get("peft_type", "LORA")
    if kind != "LORA":
        raise LoraRefused(f"LoRA adapter: peft_type {kind!r} is not LoRA")
    refusals = {
        "use_dora": "DoRA (use_dora) rescales the merged weight's columns, which a low-rank term cannot",
        "modules_to_save": "modules_to_save replaces whole modules (e.g. lm_head) per adapter",
        "fan_in_fan_out": "fan_in_fan_out adapters target [in, out] (Conv1D) weights, which are not adapted",
        "rank_pattern": "rank_pattern (per-module ranks) is not read",
        "alpha_pattern": "alpha_pattern (per-module alphas) is not read",
        "layers_to_transform": "layers_to_transform is not read (the factors present decide the layers)",
    }
    for key, why in refusals.items():
        if config.get(key):
            raise LoraRefused(f"LoRA adapter: {why}")
    if config.get("bias", "none") != "none":
        raise LoraRefused(f"LoRA adapter: bias={config['bias']!r} trains biases, which are not served")


def check_adapter(adapter: LoraAdapter, layout: LoraLayout, shapes: dict[str, tuple[int, int]], base: str) -> None:
    """Refuse `adapter` unless every factor lands on an adapted projection of the right shape within the
    layout's rank, and its base model (when it names one) is `base` (when the package knows one)."""
    if adapter.base and base and _model_name(adapter.base) != _model_name(base):
        raise LoraRefused(f"LoRA adapter: trained on base model {adapter.base!r}, this deployment serves {base!r}")
    if adapter.rank > layout.rank:
        raise LoraRefused(f"LoRA adapter: rank {adapter.rank} is over this deployment's maximum rank {layout.rank}")
    for path, (a, b) in adapter.factors.items():
        if path not in shapes:
            module = path.rsplit(".", 1)[-1]
            targets = ", ".join(layout.targets)
            raise LoraRefused(f"LoRA adapter: target {path} ({module}) is not an adapted projection ({targets})")
        want = shapes[path]
        if (a.shape[0], b.shape[1]) != want or a.shape[1] > layout.rank:
            raise LoraRefused(
                f"LoRA adapter: {path} has A {a.shape[::-1]} and B {b.shape[::-1]}; the base's projection is "
                f"[{want[1]}, {want[0]}] with rank at most {layout.rank}"
            )


def _model_name(name: str) -> str:
    """A model reference compared by its last path part: "org/Model" and "/models/Model" are one model."""
    return name.rstrip("/").rsplit("/", 1)[-1]


def upload_body(name: str, folder: Path) -> dict:
    """The management API's body adding the PEFT folder's adapter as `name` (POST /v1/deployments/{id}/adapters):
    its two files as they are, the weights in base64; the server checks them."""
    import base64

    folder = Path(folder)
    for p in (folder / CONFIG, folder / WEIGHTS):
        if not p.is_file():
            raise LoraRefused(f"LoRA adapter {folder}: {p.name} is missing (PEFT's save_pretrained writes it)")
    config = json.loads((folder / CONFIG).read_text())
    weights = base64.b64encode((folder / WEIGHTS).read_bytes()).decode()
    return {"name": name, "config": config, "weights_base64": weights}

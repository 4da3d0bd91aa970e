"""Reading Hugging Face checkpoints: every *.safetensors shard of a folder, half precision widened to the
float32 the models declare, and names matched to the graph's when the checkpoint was saved one module
level up or down."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np


def read_checkpoint(folder: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of the folder's *.safetensors files (sharded checkpoints are several files)."""
    from safetensors.numpy import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors file in {folder}")
    weights: dict[str, np.ndarray] = {}
    for f in files:
        weights.update(load_file(f))
    return weights


def widen_to_float32(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float16 / bfloat16 tensors as float32, the dtype the models declare (many Llama-family checkpoints are
    stored in bfloat16); integer buffers are left alone."""
    half = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}
    return {k: v.astype(np.float32) if v.dtype in half else v for k, v in weights.items()}


def align_names(wanted: list[str], checkpoint: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Checkpoint tensors under the graph's names, where the checkpoint saved the model one level up or down:
    a GPT2Model checkpoint (wte.weight) for GPT2LMHeadModel (transformer.wte.weight), or a BertForMaskedLM
    one (bert.embeddings...) for BertModel. Only unambiguous matches are taken."""
    out = {}
    for name in wanted:
        if name in checkpoint:
            out[name] = checkpoint[name]
            continue
        inner = name.split(".", 1)[-1]
        outer = [k for k in checkpoint if k.endswith("." + name)]
        if "." in name and inner in checkpoint:
            out[name] = checkpoint[inner]
        elif len(outer) == 1:
            out[name] = checkpoint[outer[0]]
    return out

"""PEFT adapters for the multi-LoRA tests: made and merged by PEFT itself, the reference our per-row term matches."""

from __future__ import annotations

import copy
from pathlib import Path

import peft
import torch

ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# name -> (rank, alpha, targets): different ranks (one below the layouts' 8) and different targets
ADAPTERS = {"terse": (4, 8, ["q_proj", "v_proj"]), "chatty": (8, 4, ALL_PROJECTIONS)}


def make_adapter(hf, folder: Path, rank: int, alpha: float, targets: list[str], seed: int, **extra):
    """A PEFT adapter on a copy of `hf` with random factors (PEFT starts B at zero, which would hide a misapplied
    term), saved to `folder`; the merged transformers model it stands for."""
    torch.manual_seed(seed)
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, **extra)
    model = peft.get_peft_model(copy.deepcopy(hf), config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "lora_A" in name:
                p.normal_(0, 0.5)
    model.save_pretrained(str(folder))
    return model.merge_and_unload().eval()


def make_adapters(hf, root: Path) -> dict:
    """ADAPTERS saved under `root`/name; their merged models by name."""
    return {name: make_adapter(hf, root / name, *spec, seed=k) for k, (name, spec) in enumerate(ADAPTERS.items())}

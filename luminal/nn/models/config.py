"""Reading a Hugging Face config (a config.json path, a directory holding one, a dict, or a transformers
PretrainedConfig) into the plain dict each model's config dataclass picks its fields from."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


def load_config(config: Any) -> dict[str, Any]:
    if isinstance(config, (str, Path)):
        path = Path(config)
        if path.is_dir():
            path = path / "config.json"
        return json.loads(path.read_text())
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):  # a transformers PretrainedConfig, without importing transformers here
        return config.to_dict()
    raise TypeError(f"expected a config.json path, a dict or a PretrainedConfig, got {type(config).__name__}")


def pick(cls: type[T], raw: Mapping[str, Any], **overrides: Any) -> T:
    """cls(**the fields of cls present in raw), then overrides; unknown keys of raw are ignored, and a
    null value keeps the field's default (Hugging Face writes null for "derive it", e.g. n_inner)."""
    names = {f.name for f in fields(cls)}
    values = {k: v for k, v in raw.items() if k in names and v is not None}
    values.update(overrides)
    return cls(**values)


def pad_token_of(raw: Mapping[str, Any]) -> int:
    """The token id a padded position holds: the config's pad_token_id, else its (first) eos_token_id (GPT-2
    and Llama have no pad token; a masked position's id only has to be a valid one), else 0."""
    for key in ("pad_token_id", "eos_token_id"):
        value = raw.get(key)
        value = value[0] if isinstance(value, list) and value else value
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


def sequence_pads(raw: Mapping[str, Any]) -> dict[str, dict[int, int]]:
    """The padding a masked sequence model's inputs declare (see `luminal.padding`): dim 1 (the sequence) of
    input_ids with the pad token, of attention_mask and token_type_ids with 0."""
    return {"input_ids": {1: pad_token_of(raw)}, "attention_mask": {1: 0}, "token_type_ids": {1: 0}}

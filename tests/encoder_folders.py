"""A tiny Hugging Face BERT folder as `save_pretrained` writes it (random weights from a config) with a WordPiece
tokenizer made by `tokenizers`, and transformers' embeddings of it under each pooling. Nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

WORDS = ("the a man is eating food girl carrying baby two men pushed carts through woods compilers search over "
         "programs rain expected tomorrow fast light deep learning graph kernel").split()  # fmt: skip
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MAX_POSITIONS = 24
CONFIG = dict(vocab_size=len(SPECIALS) + len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=48, max_position_embeddings=MAX_POSITIONS)  # fmt: skip


def wordpiece_tokenizer() -> Tokenizer:
    vocab = {token: k for k, token in enumerate([*SPECIALS, *WORDS])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    return tok


def bert_folder(folder: Path, seed: int = 0) -> transformers.BertModel:
    """Write the folder (config.json, model.safetensors, tokenizer.json, tokenizer_config.json); returns the model."""
    torch.manual_seed(seed)
    model = transformers.BertModel(transformers.BertConfig(**CONFIG), add_pooling_layer=False).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    wordpiece_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 16}))
    return model


def pooled(model: transformers.BertModel, ids: list[list[int]], pooling: str, normalize: bool) -> np.ndarray:
    """transformers' embeddings of each sequence alone (no padding), pooled as `pooling` says."""
    rows = []
    with torch.no_grad():
        for seq in ids:
            hidden = model(torch.tensor([seq])).last_hidden_state[0]
            row = {"mean": hidden.mean(0), "cls": hidden[0], "last": hidden[-1]}[pooling]
            rows.append(torch.nn.functional.normalize(row, dim=-1) if normalize else row)
    return torch.stack(rows).numpy()

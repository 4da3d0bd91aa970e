"""BERT (Hugging Face's BertModel), so that checkpoints such as all-MiniLM-L6-v2 bind by name.

Post-norm encoder: embeddings (word + position + token type, then LayerNorm), then per layer
x = LayerNorm(x + attention(x)); x = LayerNorm(x + dense(act(dense(x)))). Inference only: dropout is omitted.
The module tree below mirrors Hugging Face's so every parameter path is the checkpoint's name
(embeddings.word_embeddings.weight, encoder.layer.0.attention.self.query.weight, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import luminal as lm
from luminal import dtypes as dt
from luminal import functional as F
from luminal.nn.activation import activation_fn
from luminal.nn.attention import merge_heads, padding_mask, split_heads
from luminal.nn.linear import Embedding, Linear
from luminal.nn.models.config import load_config, pick, sequence_pads
from luminal.nn.module import Module, ModuleList
from luminal.nn.normalization import LayerNorm
from luminal.tensor import Tensor


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    # Only absolute learned positions are built; relative-key variants would need another attention score term.
    position_embedding_type: str = "absolute"
    # Parameters' and activations' dtype (torch's model.to(torch.bfloat16)); from_hf keeps float32, the dtype
    # checkpoints are widened to when loaded.
    dtype: dt.DType = dt.float32
    pad_token_id: int = 0  # what padded positions hold when a server pads requests to batch them

    @classmethod
    def from_hf(cls, config: Any) -> BertConfig:
        cfg = pick(cls, load_config(config), dtype=dt.float32)
        if cfg.position_embedding_type != "absolute":
            raise NotImplementedError(f"BERT: position_embedding_type {cfg.position_embedding_type!r}")
        return cfg


class BertEmbeddings(Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = Embedding(cfg.vocab_size, cfg.hidden_size, cfg.dtype)
        self.position_embeddings = Embedding(cfg.max_position_embeddings, cfg.hidden_size, cfg.dtype)
        self.token_type_embeddings = Embedding(cfg.type_vocab_size, cfg.hidden_size, cfg.dtype)
        self.LayerNorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, dtype=cfg.dtype)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        g, seq = input_ids.graph, input_ids.shape[1]
        # Positions 0..seq-1 are the first seq rows of the table: a view instead of a gather.
        positions = self.position_embeddings.param(g, "weight").narrow(0, 0, seq)
        if token_type_ids is None:  # Hugging Face's default: every token is of type 0
            types = self.token_type_embeddings.param(g, "weight")[0]
        else:
            types = self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(self.word_embeddings(input_ids) + positions + types)


class BertSelfAttention(Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.heads = cfg.num_attention_heads
        self.query = Linear(cfg.hidden_size, cfg.hidden_size, dtype=cfg.dtype)
        self.key = Linear(cfg.hidden_size, cfg.hidden_size, dtype=cfg.dtype)
        self.value = Linear(cfg.hidden_size, cfg.hidden_size, dtype=cfg.dtype)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        q, k, v = (split_heads(proj(x), self.heads) for proj in (self.query, self.key, self.value))
        return merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


class BertResidualOutput(Module):
    """LayerNorm(residual + dense(x)): Hugging Face's BertSelfOutput and BertOutput (same shape of code)."""

    def __init__(self, in_features: int, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(in_features, cfg.hidden_size, dtype=cfg.dtype)
        self.LayerNorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, dtype=cfg.dtype)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(residual + self.dense(x))


class BertAttention(Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(cfg)  # "self" is the checkpoint's name: attention.self.query.weight
        self.output = BertResidualOutput(cfg.hidden_size, cfg)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(cfg.hidden_size, cfg.intermediate_size, dtype=cfg.dtype)
        self.act = activation_fn(cfg.hidden_act)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.dense(x))


class BertLayer(Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertResidualOutput(cfg.intermediate_size, cfg)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class BertEncoder(Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.layer = ModuleList([BertLayer(cfg) for _ in range(cfg.num_hidden_layers)])

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertPooler(Module):
    """tanh(dense(hidden state of the first token)): BERT's [CLS] summary."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(cfg.hidden_size, cfg.hidden_size, dtype=cfg.dtype)

    def forward(self, hidden: Tensor) -> Tensor:
        return F.tanh(self.dense(hidden[:, 0]))


class BertModel(Module):
    """input_ids [batch, seq] (int64) -> last hidden state [batch, seq, hidden]; `model.pooler(hidden)` gives
    the pooled output. attention_mask [batch, seq] is 1 for tokens, 0 for padding (keys only are masked, so
    padded positions still get a hidden state, as in Hugging Face)."""

    def __init__(self, config: Any, add_pooling_layer: bool = True) -> None:
        super().__init__()
        self.config = config if isinstance(config, BertConfig) else BertConfig.from_hf(config)
        self.embeddings = BertEmbeddings(self.config)
        self.encoder = BertEncoder(self.config)
        if add_pooling_layer:
            self.pooler = BertPooler(self.config)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        mask = None if attention_mask is None else padding_mask(attention_mask)
        return self.encoder(self.embeddings(input_ids, token_type_ids), mask)


def bert_graph(config: Any, max_batch: int = 64, max_seq: int | None = None, pooled: bool = False) -> lm.Graph:
    """A graph with inputs input_ids, attention_mask, token_type_ids ([batch, seq] int64, both dims symbols)
    and output last_hidden_state (and pooler_output with `pooled`), weights unbound under Hugging Face names."""
    model = BertModel(config, add_pooling_layer=pooled)
    g = lm.Graph()
    shape = (lm.sym("batch", max=max_batch), lm.sym("seq", max=max_seq or model.config.max_position_embeddings))
    # Padded keys are masked, so requests of different lengths can share a batch (see `luminal.padding`).
    pads = sequence_pads({"pad_token_id": model.config.pad_token_id})
    names = ("input_ids", "attention_mask", "token_type_ids")
    ids, mask, types = (g.input(n, shape, lm.int64, pad=pads[n]) for n in names)
    hidden = model(ids, mask, types).output("last_hidden_state")
    if pooled:
        model.pooler(hidden).output("pooler_output")
    return g

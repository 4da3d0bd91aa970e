"""Sentence embeddings as sentence-transformers computes them: a BERT encoder, a pooling of its token states,
and optionally an L2 normalisation (all-MiniLM-L6-v2: mean pooling, then Normalize).

A sentence-transformers folder says which modules it chains in modules.json and how it pools in
1_Pooling/config.json; `sentence_graph(folder)` reads both, so the graph is the folder's model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import luminal as lm
from luminal import functional as F
from luminal.folder_files import read_folder_json
from luminal.nn.models.bert import BertModel
from luminal.nn.models.checkpoint import read_checkpoint, widen_to_float32
from luminal.nn.models.config import sequence_pads
from luminal.nn.pooling import last_token_pool, mean_pool
from luminal.tensor import Tensor

# The pooling modes built, by the sentence-transformers flag that selects each.
POOLING_KEYS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token",
                "last": "pooling_mode_lasttoken"}  # fmt: skip
POOLS = {"mean": mean_pool, "cls": lambda hidden, _mask: hidden[:, 0], "last": last_token_pool}


@dataclass(frozen=True)
class SentenceConfig:
    pooling: str = "mean"
    normalize: bool = True

    @classmethod
    def from_folder(cls, folder: str | Path) -> SentenceConfig:
        """A sentence-transformers folder's chain (modules.json) and pooling (its Pooling module's config.json),
        read as hostile JSON: a module's path must stay inside the folder."""
        folder = Path(folder)
        modules = read_folder_json(folder, "modules.json")
        if not isinstance(modules, list) or not all(
            isinstance(m, dict) and isinstance(m.get("type"), str) and isinstance(m.get("path"), str) for m in modules
        ):
            raise ValueError("modules.json must list modules, each with a string type and path")
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
            raise NotImplementedError(f"sentence model: only Transformer, Pooling[, Normalize] is built, got {kinds}")
        if modules[0]["path"] not in ("", "."):  # its config.json and weights would be in that folder, not read
            raise NotImplementedError(f"sentence model: the Transformer module in {modules[0]['path']!r:.80} is not "
                                      "built; only one at the folder's root")  # fmt: skip
        pooling_path = modules[1]["path"]
        flags = read_folder_json(folder, f"{pooling_path}/config.json" if pooling_path else "config.json")
        if not isinstance(flags, dict):
            raise ValueError(f"{pooling_path}/config.json must be a JSON object")
        chosen = [mode for mode, key in POOLING_KEYS.items() if flags.get(key) is True]
        others = [
            k for k, on in flags.items() if k.startswith("pooling_mode") and on and k not in POOLING_KEYS.values()
        ]
        if len(chosen) != 1 or others:
            built = " / ".join(POOLING_KEYS)
            raise NotImplementedError(f"sentence model: exactly one of {built} pooling is built, got {flags}")
        return cls(pooling=chosen[0], normalize="Normalize" in kinds)


class SentenceEncoder(BertModel):
    """input_ids, attention_mask [batch, seq] -> sentence embeddings [batch, hidden].

    A BertModel itself (not a module holding one): the checkpoint is a bare BertModel state dict
    (embeddings.*, encoder.*), so the encoder's paths must start at the root.
    """

    def __init__(self, bert_config: Any, sentence: SentenceConfig = SentenceConfig()) -> None:
        super().__init__(bert_config, add_pooling_layer=False)
        if sentence.pooling not in POOLING_KEYS:
            raise ValueError(f"pooling must be one of {list(POOLING_KEYS)}, got {sentence.pooling!r}")
        self.sentence = sentence

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        hidden = super().forward(input_ids, attention_mask)
        pooled = POOLS[self.sentence.pooling](hidden, attention_mask)
        return F.normalize(pooled, dim=-1) if self.sentence.normalize else pooled


def sentence_graph(
    folder: str | Path, max_batch: int = 64, max_seq: int | None = None, sentence: SentenceConfig | None = None
) -> lm.Graph:
    """The folder's sentence model as a graph: inputs input_ids and attention_mask ([batch, seq] int64,
    symbolic), output sentence_embedding; weights bound from the folder's safetensors. `sentence` is the pooling
    of a plain Hugging Face encoder folder; a sentence-transformers folder's own modules say it otherwise."""
    folder = Path(folder)
    sentence = sentence or SentenceConfig.from_folder(folder)
    encoder = SentenceEncoder(read_folder_json(folder, "config.json"), sentence)
    g = lm.Graph()
    limit = max_seq or encoder.config.max_position_embeddings
    shape = (lm.sym("batch", max=max_batch), lm.sym("seq", max=limit))
    # Padded keys are masked and mean pooling weighs by the mask: padding changes no embedding.
    pads = sequence_pads({"pad_token_id": encoder.config.pad_token_id})
    ids, mask = (g.input(n, shape, lm.int64, pad=pads[n]) for n in ("input_ids", "attention_mask"))
    encoder(ids, mask).output("sentence_embedding")
    return g.bind(widen_to_float32(read_checkpoint(folder)))

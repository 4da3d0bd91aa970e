"""BERT built from a Hugging Face config against transformers' BertModel with the same random weights."""

import numpy as np
import torch
import transformers

import luminal as lm
from luminal.nn.models.bert import BertModel, bert_graph
from tests.nn.hf import max_error, tiny_model, token_batch

CONFIG = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
              max_position_embeddings=16, type_vocab_size=2, layer_norm_eps=1e-12)  # fmt: skip


def test_bert_matches_hugging_face():
    hf, weights = tiny_model(transformers.BertModel, transformers.BertConfig(**CONFIG))
    g = bert_graph(CONFIG, pooled=True)
    assert set(g.weights) <= set(weights)
    g.bind(weights)
    assert not g.unbound_weights()
    ids, mask = token_batch(40, 3, 7, pad_tail=3)
    types = np.random.default_rng(1).integers(0, 2, ids.shape).astype(np.int64)
    got = lm.run(g, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    with torch.no_grad():
        want = hf(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types))
    # Padded positions (keys masked, queries not) are compared too: Hugging Face computes them the same way.
    assert max_error(got["last_hidden_state"], want.last_hidden_state.numpy()) < 1e-4
    assert max_error(got["pooler_output"], want.pooler_output.numpy()) < 1e-4


def test_bert_without_mask_or_token_types():
    hf, weights = tiny_model(transformers.BertModel, transformers.BertConfig(**CONFIG, hidden_act="gelu_new"))
    g = lm.Graph()
    ids = g.input("ids", (2, 5), lm.int64)
    BertModel({**CONFIG, "hidden_act": "gelu_new"}, add_pooling_layer=False)(ids).output("hidden")
    g.bind(weights)
    x, _ = token_batch(40, 2, 5, seed=2)
    with torch.no_grad():
        want = hf(torch.from_numpy(x)).last_hidden_state.numpy()
    assert max_error(lm.run(g, {"ids": x})["hidden"], want) < 1e-4

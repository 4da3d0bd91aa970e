"""Small PyTorch models exported with torch.onnx.export, imported with luminal.onnx.load, run by the reference
interpreter and compared with PyTorch's own outputs."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.onnx
from tests.torch.models import MLP  # the same MLP the torch.export tests use

TOLERANCE = 1e-4


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.fc = torch.nn.Linear(8 * 3 * 3, 10)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2, ceil_mode=True)
        y = torch.nn.functional.avg_pool2d(torch.sigmoid(self.conv2(torch.nn.functional.pad(y, (1, 0, 1, 0)))), 1)
        return torch.softmax(self.fc(y.flatten(1)), -1)


class Block(torch.nn.Module):
    """A pre-norm transformer encoder block: multi-head self-attention and an MLP, both residual."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
        attn = torch.softmax(scores.masked_fill(causal, float("-inf")), -1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


def _export(model: torch.nn.Module, x: torch.Tensor, dynamo: bool, dynamic: dict[int, str] | None = None) -> bytes:
    """The ONNX bytes of `model`; `dynamic` names the input dims exported as dynamic ({axis: name})."""
    f = io.BytesIO()
    kwargs: dict = {}
    if dynamic and dynamo:
        kwargs["dynamic_shapes"] = {"x": {k: torch.export.Dim(v, min=2, max=64) for k, v in dynamic.items()}}
    elif dynamic:
        kwargs["dynamic_axes"] = {"x": dynamic, "y": {0: dynamic[0]}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), f, input_names=["x"], output_names=["y"], dynamo=dynamo, **kwargs)
    return f.getvalue()


def _check(model: torch.nn.Module, x: torch.Tensor, data: bytes) -> lm.Graph:
    graph = luminal.onnx.load(data)
    got = lm.run(graph, {"x": x.numpy()})
    with torch.no_grad():
        want = model(x).numpy()
    assert list(got) == ["y"]
    assert got["y"].shape == want.shape and got["y"].dtype == want.dtype
    np.testing.assert_allclose(got["y"], want, rtol=TOLERANCE, atol=TOLERANCE)
    return graph


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize(
    "make, shape", [(MLP, (5, 16)), (ConvNet, (2, 3, 12, 12)), (Block, (2, 7, 32))], ids=["mlp", "convnet", "block"]
)
def test_exported_model_matches_torch(make, shape, dynamo):
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape)
    _check(model, x, _export(model, x, dynamo))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize(
    "make, shape, dynamic",
    [
        (MLP, (3, 16), {0: "batch"}),
        (ConvNet, (2, 3, 12, 12), {0: "batch"}),
        (Block, (2, 7, 32), {0: "batch", 1: "seq"}),
    ],
    ids=["mlp", "convnet", "block"],
)
def test_dynamic_dims_become_symbols(make, shape, dynamic, dynamo):
    """Dynamic axes import as symbols, the exporters' shape arithmetic (Shape -> Gather -> Concat -> Reshape)
    folded into expressions of them, so one graph runs at every size."""
    torch.manual_seed(0)
    model = make().eval()
    data = _export(model, torch.randn(*shape), dynamo, dynamic)
    graph = _check(model, torch.randn(*shape), data)
    assert set(dynamic.values()) <= set(graph.symbols)
    other = [n + 3 if k in dynamic else n for k, n in enumerate(shape)]
    got = lm.run(graph, {"x": (x := torch.randn(*other)).numpy()})["y"]
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=TOLERANCE, atol=TOLERANCE)


def test_weights_are_named_and_bound():
    torch.manual_seed(0)
    model = MLP().eval()
    graph = luminal.onnx.load(_export(model, torch.randn(2, 16), dynamo=False))
    assert not graph.unbound_weights()
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    for name, value in state.items():  # the exporter keeps torch's parameter names on its initializers
        if name in graph.weights:
            np.testing.assert_array_equal(graph.weight_data[name], value)
    assert set(graph.weights) & set(state)


def test_imported_graph_compiles_for_the_cpu():
    torch.manual_seed(0)
    model = MLP().eval()
    graph = luminal.onnx.load(_export(model, torch.randn(3, 16), dynamo=False, dynamic={0: "batch"}))
    program = lm.compile(graph, "cpu", cache=False)
    x = torch.randn(6, 16)
    with torch.no_grad():
        np.testing.assert_allclose(program.run({"x": x.numpy()})["y"], model(x).numpy(), rtol=1e-4, atol=1e-4)

"""torch.compile(model, backend=luminal.torch.backend) against PyTorch eager: the compiled C programs give the
same outputs, are compiled once per input shape signature, and anything untranslatable is an error."""

from __future__ import annotations

import pytest
import torch

import luminal.torch
import luminal.torch.dynamo_backend as luminal_backend
from tests.torch.models import MLP, seeded
from tests.torch.test_export import CASES, Unsupported, _floats

RTOL, ATOL = 1e-4, 1e-5


def _outputs(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in out.values() if isinstance(t, torch.Tensor)]  # a transformers ModelOutput


def _compare(model, *inputs):
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=luminal.torch.backend)
    with torch.no_grad():
        want, got = _outputs(model(*inputs)), _outputs(compiled(*inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_model_matches_eager(case):
    factory, example = CASES[case]
    _compare(seeded(factory), example())


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_fast_path_with_gelu(norm_first):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 24, 0.0, "gelu", batch_first=True, norm_first=norm_first)
    _compare(layer.eval(), _floats((3, 4, 16)))


def test_programs_are_compiled_once_per_shape_signature(monkeypatch):
    compiles = []
    real = luminal_backend.lm.compile
    monkeypatch.setattr(luminal_backend.lm, "compile", lambda g, **kw: compiles.append(g) or real(g, **kw))
    torch._dynamo.reset()
    model = seeded(MLP)
    compiled = torch.compile(model, backend=luminal.torch.backend)
    with torch.no_grad():
        for n in (3, 3, 5, 5, 7, 7):
            x = _floats((n, 16))
            torch.testing.assert_close(compiled(x), model(x), rtol=RTOL, atol=ATOL)
    assert len(compiles) == 3  # one per batch size, none for the repeated calls


def test_unsupported_operators_fail_at_compile_time():
    torch._dynamo.reset()
    compiled = torch.compile(Unsupported(), backend=luminal.torch.backend)
    with torch.no_grad(), pytest.raises(Exception, match="aten.sort.default") as err:
        compiled(_floats((2, 5)))
    assert "aten.topk.default" in str(err.value)


def test_training_is_refused():
    torch._dynamo.reset()
    compiled = torch.compile(seeded(MLP), backend=luminal.torch.backend)
    with pytest.raises(Exception, match="inference only"):
        compiled(_floats((3, 16)))


class SizeArithmetic(torch.nn.Module):
    """Once dynamo makes the batch dynamic, sizes reach the backend as int arguments and outputs."""

    def forward(self, x):
        return x.reshape(x.shape[0] * 2, -1).softmax(-1), x.shape[0]


def test_graphs_made_dynamic_by_dynamo_take_their_sizes_as_arguments():
    torch._dynamo.reset()
    model = SizeArithmetic()
    compiled = torch.compile(model, backend=luminal.torch.backend)
    with torch.no_grad():
        for n in (2, 3, 4):
            x = _floats((n, 6))
            (got, size), (want, want_size) = compiled(x), model(x)
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
            assert size == want_size == n

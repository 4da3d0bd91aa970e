"""Each luminal.nn layer against its torch.nn counterpart with the same weights (float32, rtol 1e-5, atol 1e-4)."""

import pytest
import torch

import luminal as lm
from luminal import nn
from tests.nn.modcheck import check_module


def test_linear():
    check_module(nn.Linear(8, 5), torch.nn.Linear(8, 5), [(2, 3, 8)])
    check_module(nn.Linear(8, 5, bias=False), torch.nn.Linear(8, 5, bias=False), [(4, 8)])


def test_linear_with_symbolic_batch():
    check_module(nn.Linear(6, 3), torch.nn.Linear(6, 3), [((lm.sym("batch"), 5), 7, 6)])


def test_embedding():
    ids = torch.randint(0, 11, (2, 5)).numpy()
    check_module(nn.Embedding(11, 4), torch.nn.Embedding(11, 4), inputs=[ids])


def test_layer_norm():
    check_module(nn.LayerNorm(6), torch.nn.LayerNorm(6), [(2, 3, 6)])
    check_module(nn.LayerNorm((3, 6), eps=1e-12), torch.nn.LayerNorm((3, 6), eps=1e-12), [(2, 3, 6)])
    check_module(nn.LayerNorm(6, bias=False), torch.nn.LayerNorm(6, bias=False), [(2, 6)])
    check_module(nn.LayerNorm(6, elementwise_affine=False), torch.nn.LayerNorm(6, elementwise_affine=False), [(2, 6)])


def test_rms_norm():
    check_module(nn.RMSNorm(6), torch.nn.RMSNorm(6), [(2, 3, 6)])
    check_module(nn.RMSNorm(6, eps=1e-6), torch.nn.RMSNorm(6, eps=1e-6), [(2, 3, 6)])


def test_batch_norm():
    check_module(nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4), [(3, 4, 5)])
    check_module(nn.BatchNorm1d(4, affine=False), torch.nn.BatchNorm1d(4, affine=False), [(3, 4)])
    check_module(nn.BatchNorm2d(3, eps=1e-3), torch.nn.BatchNorm2d(3, eps=1e-3), [(2, 3, 4, 5)])


def test_conv():
    check_module(nn.Conv1d(3, 4, 3, padding=1), torch.nn.Conv1d(3, 4, 3, padding=1), [(2, 3, 7)])
    check_module(nn.Conv1d(4, 6, 2, stride=2, groups=2), torch.nn.Conv1d(4, 6, 2, stride=2, groups=2), [(1, 4, 8)])
    check_module(nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(3, 4, 3, padding=1), [(2, 3, 5, 5)])
    check_module(
        nn.Conv2d(2, 4, (2, 3), stride=2, dilation=(1, 2), bias=False),
        torch.nn.Conv2d(2, 4, (2, 3), stride=2, dilation=(1, 2), bias=False),
        [(1, 2, 6, 7)],
    )


@pytest.mark.parametrize(
    "ours,theirs,shape",
    [
        (nn.MaxPool1d(2), torch.nn.MaxPool1d(2), (2, 3, 8)),
        (nn.MaxPool2d(3, stride=2, padding=1), torch.nn.MaxPool2d(3, stride=2, padding=1), (1, 2, 7, 7)),
        (nn.AvgPool1d(3, stride=1), torch.nn.AvgPool1d(3, stride=1), (2, 3, 8)),
        (nn.AvgPool2d(2), torch.nn.AvgPool2d(2), (1, 2, 6, 6)),
        (nn.AdaptiveAvgPool1d(3), torch.nn.AdaptiveAvgPool1d(3), (2, 3, 8)),
        (nn.AdaptiveAvgPool2d((1, 1)), torch.nn.AdaptiveAvgPool2d((1, 1)), (2, 3, 5, 4)),
    ],
)
def test_pooling(ours, theirs, shape):
    check_module(ours, theirs, [shape])


def test_activations():
    for ours, theirs in [(nn.ReLU(), torch.nn.ReLU()), (nn.GELU(), torch.nn.GELU()),
                         (nn.GELU("tanh"), torch.nn.GELU("tanh")), (nn.SiLU(), torch.nn.SiLU()),
                         (nn.Tanh(), torch.nn.Tanh())]:  # fmt: skip
        check_module(ours, theirs, [(3, 7)])


def test_sequential_names_children_by_position():
    seq = nn.Sequential([nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 2)])
    ref = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    check_module(seq, ref, [(3, 5)])

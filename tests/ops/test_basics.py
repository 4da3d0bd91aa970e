"""A first set of ops through the PyTorch check helper (the op groups extend this in their own files)."""

import torch

from tests.opcheck import check


def test_add_broadcast():
    check("add", torch.add, lambda a, b: a + b, shapes=[(4, 5), (5,)])


def test_mul_scalar():
    check("mul", lambda a: a * 3, lambda a: a * 3, shapes=[(3, 4)])


def test_exp():
    check("exp", torch.exp, lambda a: a.exp(), shapes=[(6, 7)])


def test_sum_dims():
    check(
        "sum",
        lambda a: a.sum((0, 2), keepdim=True),
        lambda a: a.sum((0, 2), keepdim=True),
        shapes=[(3, 4, 5)],
        reduction=True,
    )

"""Factories against PyTorch. They take no tensor, so each check feeds one input only to reach the graph
(`x.graph`) and, where a shape is read from it, to make that shape symbolic in the symbolic variant."""

import pytest
import torch

import luminal as lm
import luminal.functional as F
from tests.opcheck import check

ANY = [(2, 3)]  # the input that carries the graph


@pytest.mark.parametrize(
    "args", [(5,), (2, 11, 3), (10, 2, -3), (-4, 4), (3, 3), (5, 2, -1), (0.5, 3.0), (1, 2.5, 0.25), (3.0, -1.0, -0.7)]
)
def test_arange(args):
    check("arange", lambda x: torch.arange(*args), lambda x: F.arange(x.graph, *args), shapes=ANY)


def test_arange_dtype_and_graph_method():
    check(
        "arange",
        lambda x: torch.arange(2, 9, 2, dtype=torch.float32),
        lambda x: x.graph.arange(2, 9, 2, dtype=lm.float32),
        shapes=ANY,
    )
    check(
        "arange",
        lambda x: torch.arange(6, dtype=torch.int32),
        lambda x: F.arange(x.graph, 6, dtype="int32"),
        shapes=ANY,
    )
    check(
        "arange",
        lambda x: torch.arange(0, 2, 0.5, dtype=torch.float16),
        lambda x: F.arange(x.graph, 0, 2, 0.5, dtype=lm.float16),
        shapes=ANY,
    )


def test_arange_symbolic_end():
    # the symbolic variant makes x.shape[0] a symbol: the length is an expression of it
    check("arange", lambda x: torch.arange(x.shape[0]), lambda x: F.arange(x.graph, x.shape[0]), shapes=[(7, 2)])
    check(
        "arange",
        lambda x: torch.arange(1, x.shape[0], 2),
        lambda x: F.arange(x.graph, 1, x.shape[0], 2),
        shapes=[(8, 2)],
    )
    check(
        "arange",
        lambda x: torch.arange(x.shape[0], 0, -3),
        lambda x: F.arange(x.graph, x.shape[0], 0, -3),
        shapes=[(7, 2)],
    )
    check(
        "arange", lambda x: x + torch.arange(x.shape[1]), lambda x: x + F.arange(x.graph, x.shape[1]), shapes=[(3, 4)]
    )


@pytest.mark.parametrize(
    "value, dtype",
    [(2.5, None), (3, None), (True, None), (1, torch.float16), (-2.0, torch.int32), (float("-inf"), None)],
)
def test_full(value, dtype):
    lm_dtype = None if dtype is None else str(dtype)
    check(
        "full",
        lambda x: torch.full((2, x.shape[0], 3), value, dtype=dtype),
        lambda x: F.full(x.graph, (2, x.shape[0], 3), value, lm_dtype),
        shapes=[(4, 2)],
    )


def test_zeros_ones_graph_methods():
    check("zeros", lambda x: torch.zeros(x.shape[0], 3), lambda x: x.graph.zeros((x.shape[0], 3)), shapes=[(4, 2)])
    check("ones", lambda x: torch.ones(2, dtype=torch.int64), lambda x: F.ones(x.graph, [2], "int64"), shapes=ANY)
    check("full", lambda x: torch.full((3,), 7), lambda x: x.graph.full((3,), 7, lm.int64), shapes=ANY)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_like(dtype):
    tdt = getattr(torch, dtype)
    check("zeros_like", torch.zeros_like, F.zeros_like, shapes=[(3, 4)], dtype=dtype)
    check("ones_like", torch.ones_like, F.ones_like, shapes=[(3, 4)], dtype=dtype)
    check("full_like", lambda x: torch.full_like(x, 3), lambda x: F.full_like(x, 3), shapes=[(3, 4)], dtype=dtype)
    check(
        "full_like",
        lambda x: torch.full_like(x, 2, dtype=torch.float32),
        lambda x: F.full_like(x, 2, "float32"),
        shapes=[(3, 4)],
        dtype=dtype,
    )
    check("zeros_like", lambda x: torch.zeros_like(x, dtype=tdt), lambda x: F.zeros_like(x, dtype), shapes=[(2, 2)])
    empty = F.empty_like(lm.Graph().input("x", (2, 3), dtype=dtype))
    assert empty.shape == (2, 3) and empty.dtype.name == dtype


def test_new_factories():
    check("new_zeros", lambda x: x.new_zeros((2, 5)), lambda x: x.new_zeros((2, 5)), shapes=[(3, 4)], dtype="int32")
    check("new_ones", lambda x: x.new_ones((x.shape[0],)), lambda x: x.new_ones((x.shape[0],)), shapes=[(3, 4)])
    check(
        "new_full",
        lambda x: x.new_full((2,), 4, dtype=torch.bool),
        lambda x: x.new_full((2,), 4, dtype="bool"),
        shapes=[(3, 4)],
    )
    check("new_empty", lambda x: x.new_zeros((3,)), lambda x: x.new_empty((3,)), shapes=[(3, 4)])


@pytest.mark.parametrize(
    "args",
    [(0.0, 1.0, 5), (-3.5, 10.0, 7), (2.0, -2.0, 6), (1.0, 1.0, 3), (4.0, 5.0, 1), (0.0, 1.0, 0), (-1.0, 100.0, 1000)],
)
def test_linspace(args):
    check("linspace", lambda x: torch.linspace(*args), lambda x: F.linspace(x.graph, *args), shapes=ANY)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int64"])
def test_linspace_dtypes(dtype):
    check(
        "linspace",
        lambda x: torch.linspace(-3, 10, 7, dtype=getattr(torch, dtype)),
        lambda x: F.linspace(x.graph, -3, 10, 7, dtype=dtype),
        shapes=ANY,
        dtype=dtype,
    )


def test_linspace_int_from_float_ends():
    # integer linspace converts the ends first, as torch does
    check(
        "linspace",
        lambda x: torch.linspace(0.5, 7.25, 9, dtype=torch.int64),
        lambda x: F.linspace(x.graph, 0.5, 7.25, 9, dtype="int64"),
        shapes=ANY,
    )


@pytest.mark.parametrize("args, dtype", [((3,), None), ((2, 4), None), ((4, 2), "int64"), ((3, 3), "bool")])
def test_eye(args, dtype):
    kw = {} if dtype is None else {"dtype": getattr(torch, dtype)}
    lkw = {} if dtype is None else {"dtype": dtype}
    check("eye", lambda x: torch.eye(*args, **kw), lambda x: F.eye(x.graph, *args, **lkw), shapes=ANY)


def test_eye_symbolic():
    check("eye", lambda x: torch.eye(x.shape[0], 3), lambda x: F.eye(x.graph, x.shape[0], 3), shapes=[(4, 2)])


@pytest.mark.parametrize(
    "data",
    [
        [3, 1, 4, 1, 5],
        [[0, 2], [4, 6]],
        [[True, False], [False, True]],
        [1.5, -2.0, 0.0],
        [[float("inf"), 1.0]],
        [7],
        [],
    ],
)
def test_tensor(data):
    check("tensor", lambda x: torch.tensor(data), lambda x: F.tensor(x.graph, data), shapes=ANY)


def test_creation_errors():
    g = lm.Graph()
    with pytest.raises(lm.ShapeError, match="arange: step must be nonzero"):
        F.arange(g, 0, 5, 0)
    with pytest.raises(lm.ShapeError, match="arange: bounds 5, 2 and step 1 go opposite ways"):
        F.arange(g, 5, 2)  # torch raises here too
    with pytest.raises(lm.ShapeError, match="arange: a symbolic bound needs integer start and step"):
        F.arange(g, 0.5, lm.sym("n"))
    with pytest.raises(lm.ShapeError, match=r"full: shape \(2, -1\) has a negative dimension"):
        F.full(g, (2, -1), 1.0)
    with pytest.raises(lm.ShapeError, match="linspace: steps must be a non-negative int"):
        F.linspace(g, 0, 1, -2)
    with pytest.raises(lm.ShapeError, match=r"eye: shape \(-1, -1\) has a negative dimension"):
        F.eye(g, -1)
    with pytest.raises(TypeError, match="tensor: cannot make a tensor of <U1 data"):
        F.tensor(g, ["a"])

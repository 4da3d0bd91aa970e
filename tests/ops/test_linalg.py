"""Matrix products against PyTorch: 1-D / 2-D / batched / broadcast matmul, mm, bmm, mv, dot, outer, linear,
addmm, baddbmm, einsum; half and integer dtypes; symbolic dims; the GEMM shape the compiler relies on; errors."""

import numpy as np
import pytest
import torch

import luminal as lm
from luminal import functional as F
from luminal import ops
from tests.opcheck import check

MATMUL_SHAPES = [  # (a, b, symbolic): check's symbolic variant makes the leading dim of the highest-rank inputs
    ((3, 4), (4, 5), True),  # plain 2-D (leading dims differ, so check runs no symbolic variant)
    ((2, 3, 4), (2, 4, 5), True),  # batched, symbolic batch
    ((2, 1, 3, 4), (5, 4, 2), True),  # batch dims broadcast both ways
    ((3, 4), (2, 4, 5), True),  # a 2-D operand broadcast over a batch
    ((4,), (2, 4, 5), True),  # vector @ batch of matrices
    ((2, 4, 5), (5,), True),  # batch of matrices @ vector
    ((4,), (4, 3), False),  # symbolic would make only b's contracted dim symbolic, not a's
    ((3, 4), (4,), True),
    ((4,), (4,), True),  # dot: a 0-d result; symbolic: a contraction over a symbolic length
]


@pytest.mark.parametrize("a_shape,b_shape,symbolic", MATMUL_SHAPES)
def test_matmul_shapes(a_shape, b_shape, symbolic):
    check("matmul", torch.matmul, lambda a, b: a @ b, shapes=[a_shape, b_shape], reduction=True, symbolic=symbolic)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matmul_half(dtype):
    check(
        "matmul", torch.matmul, F.matmul, shapes=[(2, 3, 32), (32, 5)], dtype=dtype
    )  # long sums: float32 accumulation


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_matmul_integer(dtype):
    check("matmul", torch.matmul, lambda a, b: a.matmul(b), shapes=[(2, 3, 4), (4, 5)], dtype=dtype, low=-5, high=5)


def test_matmul_symbolic_sequence_dim():
    s = lm.sym("s", max=64)
    g = lm.Graph()
    x = g.input("x", (2, s, 4))
    w = g.weight("w", (4, 3))
    (x @ w).output("y")
    rng = np.random.default_rng(0)
    wv = rng.standard_normal((4, 3)).astype(np.float32)
    g.bind({"w": wv})
    for n in (1, 5):
        xv = rng.standard_normal((2, n, 4)).astype(np.float32)
        np.testing.assert_allclose(lm.run(g, {"x": xv})["y"], xv @ wv, rtol=1e-5, atol=1e-5)


def test_matmul_records_the_gemm_pattern():
    """expand -> Mul -> SumReduce over the LAST axis: a[.., m, 1, k] and b^T[.., 1, n, k] at [.., m, n, k]."""
    g = lm.Graph()
    a, b = g.input("a", (2, 3, 4)), g.input("b", (4, 5))
    y = a @ b
    reduce_node = g.nodes[y.node]
    mul_node = g.nodes[reduce_node.inputs[0][0]]
    assert isinstance(reduce_node.op, ops.SumReduce) and reduce_node.op.axis == 3
    assert isinstance(mul_node.op, ops.Mul)
    assert [view.shape for _, view in mul_node.inputs] == [(2, 3, 5, 4), (2, 3, 5, 4)]
    assert [src for src, _ in mul_node.inputs] == [a.node, b.node]  # both operands are views: nothing is copied
    assert y.shape == (2, 3, 5)


def test_mm_bmm_mv_dot_outer():
    check("mm", torch.mm, F.mm, shapes=[(3, 4), (4, 5)], reduction=True)
    check("bmm", torch.bmm, lambda a, b: a.bmm(b), shapes=[(2, 3, 4), (2, 4, 5)], reduction=True)
    check("mv", torch.mv, F.mv, shapes=[(3, 4), (4,)], reduction=True)
    check("dot", torch.dot, F.dot, shapes=[(6,), (6,)], reduction=True)
    check("outer", torch.outer, lambda a, b: a.outer(b), shapes=[(3,), (5,)])


def test_linear():
    tf = torch.nn.functional
    check("linear", tf.linear, F.linear, shapes=[(2, 3, 4), (5, 4), (5,)], reduction=True)
    check("linear", tf.linear, F.linear, shapes=[(3, 4), (5, 4)], reduction=True)
    check("linear", tf.linear, F.linear, shapes=[(3, 4), (4,)], reduction=True)  # 1-D weight: one output
    check("linear", tf.linear, F.linear, shapes=[(3, 8), (5, 8), (5,)], dtype="bfloat16")


def test_addmm_baddbmm():
    check("addmm", torch.addmm, F.addmm, shapes=[(3, 5), (3, 4), (4, 5)], reduction=True)
    check(
        "addmm",
        lambda x, a, b: torch.addmm(x, a, b, beta=0.5, alpha=2.0),
        lambda x, a, b: x.addmm(a, b, beta=0.5, alpha=2.0),
        shapes=[(5,), (3, 4), (4, 5)],
        reduction=True,
    )
    nan_input = np.full((3, 5), np.nan, np.float32)  # beta=0 ignores the input, nan included (torch)
    rng = np.random.default_rng(0)
    mats = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4, 5))]
    check(
        "addmm",
        lambda x, a, b: torch.addmm(x, a, b, beta=0),
        lambda x, a, b: F.addmm(x, a, b, beta=0),
        inputs=[nan_input, *mats],
        reduction=True,
    )
    check(
        "baddbmm",
        lambda x, a, b: torch.baddbmm(x, a, b, beta=2, alpha=0.5),
        lambda x, a, b: x.baddbmm(a, b, beta=2, alpha=0.5),
        shapes=[(2, 3, 5), (2, 3, 4), (2, 4, 5)],
        reduction=True,
    )


EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),  # attention scores
    ("...ij,jk", [(2, 3, 4), (4, 5)]),  # ellipsis, implicit output
    ("ij,ij->i", [(3, 4), (3, 4)]),  # row-wise dot
    ("i,j->ij", [(3,), (4,)]),  # outer
    ("abc,cba->b", [(2, 3, 4), (4, 3, 2)]),  # two contracted labels, merged into one axis
    ("ij->ji", [(3, 4)]),  # one operand: a permutation
    ("ij->j", [(3, 4)]),  # one operand: a sum
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),  # three operands
    ("bi,i->b", [(3, 4), (1,)]),  # a size-1 dim broadcasts
    ("...ii->...i", [(2, 4, 4)]),  # a repeated subscript: the diagonal
    ("bii,bij->bj", [(2, 3, 3), (2, 3, 4)]),  # a diagonal, then contracted with another operand
]
# A repeated subscript over the leading dim: the symbolic variant (leading dim a symbol, the other 4) cannot be
# proved square, and is refused (test_errors), so these run with concrete dims.
DIAGONALS = [
    ("ii", [(4, 4)]),  # implicit output: the trace
    ("iji->j", [(3, 2, 3)]),  # the repeated dims apart
    ("iii->i", [(3, 3, 3)]),  # three times
]


@pytest.mark.parametrize(
    "equation,shapes,symbolic", [(*case, True) for case in EINSUMS] + [(*case, False) for case in DIAGONALS]
)
def test_einsum(equation, shapes, symbolic):
    check(
        "einsum",
        lambda *xs: torch.einsum(equation, *xs),
        lambda *xs: F.einsum(equation, *xs),
        shapes=shapes,
        reduction=True,
        symbolic=symbolic,
    )


def test_einsum_half():
    eq = "bij,bjk->bik"
    check(
        "einsum",
        lambda a, b: torch.einsum(eq, a, b),
        lambda a, b: F.einsum(eq, a, b),
        [(2, 3, 32), (2, 32, 4)],
        dtype="float16",
    )


def test_einsum_accepts_a_list_of_operands():
    check(
        "einsum", lambda a, b: torch.einsum("ij,jk", [a, b]), lambda a, b: F.einsum("ij,jk", [a, b]), [(3, 4), (4, 2)]
    )


def test_errors():
    g = lm.Graph()
    a, b = g.input("a", (2, 3, 4)), g.input("b", (5, 6))
    with pytest.raises(lm.ShapeError, match=r"matmul.*\(2, 3, 4\).*\(5, 6\)"):
        a @ b
    with pytest.raises(lm.ShapeError, match=r"matmul.*\(4,\).*\(5,\)"):
        F.matmul(g.input("v", (4,)), g.input("w", (5,)))
    with pytest.raises(lm.ShapeError, match="matmul.*broadcast"):
        F.matmul(g.input("c", (2, 3, 4)), g.input("d", (3, 4, 5)))
    with pytest.raises(lm.ShapeError, match="matmul"):
        F.matmul(g.constant(1.0), b)
    with pytest.raises(lm.DTypeError, match="matmul.*float32 and int64"):
        F.matmul(g.input("e", (3, 4)), g.input("f", (4, 5), dtype="int64"))
    with pytest.raises(lm.ShapeError, match="mm: expects 2-D"):
        F.mm(a, b)
    with pytest.raises(lm.ShapeError, match="bmm: batch sizes"):
        F.bmm(a, g.input("h", (3, 4, 5)))
    with pytest.raises(lm.ShapeError, match="dot"):
        F.dot(g.input("i", (3,)), g.input("j", (4,)))
    with pytest.raises(lm.ShapeError, match="einsum"):
        F.einsum("ij,jk->ik", a, b)
    with pytest.raises(lm.ShapeError, match="einsum: subscript 'i' repeats over dims of sizes 5 and 6"):
        F.einsum("ii->i", b)

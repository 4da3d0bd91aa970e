"""Fusion keeps the subtrees a value tree shares shared: inlining a producer read in several places makes one copy
of it where that copy holds no reduction (each reducing copy stays its own object: the GPU row kernels' hoisting
tells them apart by identity), settling keeps shared subtrees shared, and `ir.distinct` meets each object once."""

from luminal import dtypes as dt
from luminal.compiler.fusion.fuse import inline
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.settle import settle
from luminal.symbolic import as_expr, var

F32 = dt.float32
AXIS = var("_i0", 0, 7)


def _load(buffer: str) -> ir.Load:
    return ir.Load(buffer, AXIS, F32)


def _square_of(buffer: str) -> ir.LoopKernel:
    """A consumer reading `buffer` twice at one position, through two separate load objects (as lowering does)."""
    return ir.LoopKernel("k2", "c", (8,), ir.Apply("Mul", (_load(buffer), _load(buffer)), F32))


def test_a_producer_read_twice_is_inlined_as_one_copy():
    producer = ir.LoopKernel("k1", "p", (8,), ir.Apply("Exp2", (_load("x"),), F32))
    fused = inline(producer, _square_of("p"))
    left, right = fused.body.args
    assert left == right == ir.Apply("Exp2", (_load("x"),), F32)
    assert left is right
    assert len(list(ir.distinct(fused.body))) == 3 and ir.summary(fused.body).size == 5


def test_a_reducing_producer_read_twice_is_inlined_as_two_objects():
    total = ir.Reduce("sum", "_r0", as_expr(8), ir.Load("x", var("_r0", 0, 7), F32), F32)
    producer = ir.LoopKernel("k1", "p", (8,), ir.Apply("Exp2", (total,), F32))
    fused = inline(producer, _square_of("p"))
    left, right = fused.body.args
    assert left == right and left.args[0].var.startswith("_r") and left.args[0].var != "_r0"
    assert left is not right and left.args[0] is not right.args[0]


def test_settling_keeps_a_shared_subtree_shared():
    shared = ir.Guard(AXIS < 8, ir.Apply("Neg", (_load("x"),), F32), F32)  # a guard that always holds
    out = settle(ir.Apply("Add", (shared, shared), F32))
    assert out.args[0] == ir.Apply("Neg", (_load("x"),), F32)
    assert out.args[0] is out.args[1]


def test_distinct_meets_each_object_once_in_walk_order():
    shared = ir.Apply("Neg", (_load("y"),), F32)
    tree = ir.Apply("Add", (ir.Apply("Mul", (shared, _load("x")), F32), shared), F32)
    first_seen = list(dict.fromkeys(map(id, ir.walk(tree))))
    assert [id(n) for n in ir.distinct(tree)] == first_seen
    assert len(first_seen) == 5 and ir.summary(tree).size == 7

"""Interning a value tree (compiler/kernels/interning.py) keeps its value and makes equal subtrees one object,
except where identity means something: reductions (and what holds one), and fields that compare equal without
being the same (-0.0 and 0.0, variables with other ranges). `ir.distinct` meets each object once."""

import random

from luminal import dtypes as dt
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.interning import interned
from luminal.symbolic import var

F32 = dt.float32
AXIS = var("_i0", 0, 7)


def _load(name: str = "x") -> ir.Load:
    return ir.Load(name, AXIS, F32)


def _random_tree(rng: random.Random, depth: int) -> ir.Value:
    """A tree of fresh objects only: equal subtrees, where they occur, are separate copies."""
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([_load(f"b{rng.randrange(3)}"), ir.Const(1.0, F32), ir.IndexValue(AXIS + 1, dt.int32)])
    kind = rng.randrange(4)
    child = _random_tree(rng, depth - 1)
    if kind == 0:
        return ir.Apply("Add", (child, _random_tree(rng, depth - 1)), F32)
    if kind == 1:
        return ir.Guard(AXIS < 4, child, F32)
    if kind == 2:
        return ir.Reduce("sum", "_r0", 3, child, F32)
    return ir.Apply("Neg", (child,), F32)


def _objects(v: ir.Value) -> int:
    return len({id(n) for n in ir.walk(v)})


def test_interning_keeps_the_value_and_merges_only_reduction_free_copies():
    rng = random.Random(0)
    merged = 0
    for _ in range(200):
        tree = _random_tree(rng, 7)
        out = interned(tree)
        assert out == tree and ir.summary(out) == ir.summary(tree)
        walked, original = list(ir.walk(out)), list(ir.walk(tree))
        reductions = [n for n in walked if ir.holds(n, ir.Reduce)]
        # Reduction-holding nodes stay one object per object of the tree; the rest one per value.
        assert len({id(n) for n in reductions}) == len({id(n) for n in original if ir.holds(n, ir.Reduce)})
        free = [n for n in walked if not ir.holds(n, ir.Reduce)]
        assert len({id(n) for n in free}) == len(set(free))
        merged += _objects(tree) - _objects(out)
    assert merged > 0  # the random trees did hold equal copies


def test_equal_copies_become_one_object():
    square = ir.Apply("Mul", (_load(), _load()), F32)
    tree = ir.Apply("Add", (square, ir.Apply("Mul", (_load(), _load()), F32)), F32)
    out = interned(tree)
    assert out == tree
    assert out.args[0] is out.args[1] and out.args[0].args[0] is out.args[0].args[1]
    assert [type(n) for n in ir.distinct(out)] == [ir.Apply, ir.Apply, ir.Load]


def test_reductions_keep_their_own_objects():
    total = ir.Reduce("sum", "_r0", 3, _load(), F32)
    tree = ir.Apply("Add", (total, ir.Reduce("sum", "_r0", 3, _load(), F32)), F32)
    out = interned(tree)
    assert out == tree and out.args[0] is not out.args[1]
    assert out.args[0].body is out.args[1].body  # the loads under them are one object still


def test_fields_equal_only_in_comparison_are_not_merged():
    negative_zero = ir.Apply("Add", (ir.Const(-0.0, F32), ir.Const(0.0, F32)), F32)
    out = interned(negative_zero)
    assert out.args[0] is not out.args[1] and str(out.args[0].value) == "-0.0"
    narrow, wide = ir.Load("x", var("_r1", 0, 3), F32), ir.Load("x", var("_r1", 0, 9), F32)
    assert narrow == wide  # expressions compare without their variables' ranges
    out = interned(ir.Apply("Add", (narrow, wide), F32))
    assert out.args[0].index.hi == 3 and out.args[1].index.hi == 9


def test_distinct_meets_each_object_once_in_walk_order():
    shared = ir.Apply("Neg", (_load("y"),), F32)
    tree = ir.Apply("Add", (ir.Apply("Mul", (shared, _load()), F32), shared), F32)
    first_seen = list(dict.fromkeys(map(id, ir.walk(tree))))
    assert [id(n) for n in ir.distinct(tree)] == first_seen
    assert len(first_seen) == 5 and ir.summary(tree).size == 7

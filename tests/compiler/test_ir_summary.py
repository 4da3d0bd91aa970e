"""A value tree's summary (its node kinds, the buffers it reads, its size) agrees with walking it, and stays with
the node, not with a pickled copy."""

import pickle
import random

from luminal import dtypes as dt
from luminal.compiler.kernels import ir
from luminal.symbolic import var

F32 = dt.float32


def _walked(v: ir.Value) -> ir.Summary:
    nodes = list(ir.walk(v))
    found = [n.buffer for n in nodes if isinstance(n, (ir.Load, ir.GatherLoad))]
    return ir.Summary(frozenset(type(n) for n in nodes), tuple(dict.fromkeys(found)), len(nodes))


def _random_tree(rng: random.Random, depth: int, pool: list[ir.Value]) -> ir.Value:
    i = var("_i0", 0, 7)
    if depth == 0 or rng.random() < 0.2:
        if pool and rng.random() < 0.3:
            return rng.choice(pool)  # a subtree read in two places, as inlining leaves them
        leaf = rng.choice([ir.Load(f"b{rng.randrange(4)}", i, F32), ir.Const(1.0, F32)])
        pool.append(leaf)
        return leaf
    kind = rng.randrange(5)
    child = _random_tree(rng, depth - 1, pool)
    if kind == 0:
        node = ir.Apply("Add", (child, _random_tree(rng, depth - 1, pool)), F32)
    elif kind == 1:
        node = ir.Guard(i < 4, child, F32)
    elif kind == 2:
        node = ir.Reduce("sum", "_r0", 3, child, F32)
    elif kind == 3:
        node = ir.Contract("_r1", 3, child, _random_tree(rng, depth - 1, pool), F32)
    else:
        at = ir.Apply("Cast", (child,), dt.int32)
        node = ir.GatherLoad(f"g{rng.randrange(2)}", at, var("_g", 0, 7), 1, 8, F32)
    pool.append(node)
    return node


def test_the_summary_is_what_a_walk_finds():
    rng = random.Random(0)
    for _ in range(200):
        tree = _random_tree(rng, 6, [])
        assert ir.summary(tree) == _walked(tree)
        for node in ir.walk(tree):  # every subtree was summarised on the way, and agrees too
            assert ir.summary(node) == _walked(node)


def test_a_deep_chain_is_summarised_without_recursion():
    v: ir.Value = ir.Load("x", var("_i0", 0, 7), F32)
    for _ in range(20_000):
        v = ir.Apply("Neg", (v,), F32)
    assert ir.summary(v).size == 20_001 and ir.summary(v).buffers == ("x",)
    assert ir.holds(v, ir.Load) and not ir.holds(v, ir.Reduce, ir.Contract)


def test_a_pickled_value_carries_no_summary():
    v = ir.Apply("Add", (ir.Load("x", var("_i0", 0, 7), F32), ir.Const(2.0, F32)), F32)
    ir.summary(v)
    copy = pickle.loads(pickle.dumps(v))
    assert "_summary" not in copy.__dict__ and copy == v and ir.summary(copy) == ir.summary(v)

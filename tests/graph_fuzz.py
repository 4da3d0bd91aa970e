"""Random primitive graphs for equivalence tests: shapes, views, reductions, constants, symbolic dims.

`random_graph(seed)` returns (graph, inputs): the same seed gives the same graph, so a failure names the seed.
Values stay finite and moderate (sin/recip of shifted values, no unguarded log of negatives) so comparisons
measure the transformation, not float overflow.
"""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.hl import prim
from luminal.symbolic import as_expr
from luminal.tensor import Tensor
from luminal.view import idx


def _concrete(shape, env) -> list[int]:
    return [int(as_expr(d).evaluate(env)) for d in shape]


def _movement(t: Tensor, rng: np.random.Generator) -> Tensor:
    st, shape = t.st, list(t.shape)
    kind = rng.choice(["permute", "reshape", "expand", "slice", "pad", "flip"])
    if kind == "permute" and len(shape) > 1:
        return t.with_view(st.permute(list(rng.permutation(len(shape)))))
    if kind == "reshape" and len(shape) > 1:
        k = int(rng.integers(0, len(shape) - 1))  # merge two neighbours (works for symbolic dims too)
        return t.with_view(st.reshape(shape[:k] + [as_expr(shape[k]) * shape[k + 1]] + shape[k + 2 :]))
    if kind == "expand":
        return t.with_view(st.reshape([1, *shape]).expand([int(rng.integers(1, 4)), *shape]))
    if kind == "slice":
        bounds = []
        for d in shape:
            if isinstance(d, int) and d > 1:
                start = int(rng.integers(0, d - 1))
                bounds.append((start, d, int(rng.integers(1, 3))))
            else:
                bounds.append((0, d, 1))
        return t.with_view(st.slice(bounds))
    if kind == "pad":
        return t.with_view(st.pad([(int(rng.integers(0, 2)), int(rng.integers(0, 2))) for _ in shape]))
    if kind == "flip" and shape:
        return t.with_view(st.flip([int(rng.integers(0, len(shape)))]))
    return t


def _same_shape_partner(t: Tensor, pool: list[Tensor], rng: np.random.Generator) -> Tensor:
    matches = [p for p in pool if p.shape == t.shape and p.dtype == t.dtype]
    if matches and rng.random() < 0.7:
        return matches[int(rng.integers(0, len(matches)))]
    return prim.full_like(t, float(np.round(rng.uniform(-2, 2), 2)))


def random_graph(seed: int, steps: int = 10, symbolic: bool | None = None) -> tuple[lm.Graph, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    g = lm.Graph()
    symbolic = bool(rng.random() < 0.4) if symbolic is None else symbolic
    env = {"n": int(rng.integers(2, 5))}
    pool: list[Tensor] = []
    feed: dict[str, np.ndarray] = {}
    for k in range(int(rng.integers(1, 4))):
        shape = [int(rng.integers(1, 5)) for _ in range(int(rng.integers(1, 4)))]
        if symbolic and k == 0:
            shape[0] = lm.sym("n", max=16)
        if rng.random() < 0.3:
            t = g.weight(f"w{k}", shape if not symbolic or k else [env["n"], *shape[1:]])
            g.bind({f"w{k}": rng.uniform(-2, 2, _concrete(t.shape, env)).astype(np.float32)})
        else:
            t = g.input(f"x{k}", shape)
            feed[f"x{k}"] = rng.uniform(-2, 2, _concrete(shape, env)).astype(np.float32)
        pool.append(t)
    for _ in range(steps):
        t = pool[int(rng.integers(0, len(pool)))]
        action = rng.choice(["unary", "binary", "binary", "movement", "reduce", "iota", "compare"])
        if action == "unary":
            op = rng.choice(["sin", "exp2", "sqrt", "recip", "log2"])
            if op == "sin":
                out = prim.sin(t)
            elif op == "exp2":
                out = prim.exp2(prim.sin(t))  # bounded exponent
            elif op == "sqrt":
                out = prim.sqrt(prim.mul(t, t))
            elif op == "log2":
                out = prim.log2(prim.add(prim.mul(t, t), prim.full_like(t, 1.0)))
            else:
                out = prim.recip(prim.add(prim.mul(t, t), prim.full_like(t, 0.5)))
        elif action == "binary":
            other = _same_shape_partner(t, pool, rng)
            out = prim.add(t, other) if rng.random() < 0.5 else prim.mul(t, other)
        elif action == "compare":
            other = _same_shape_partner(t, pool, rng)
            out = prim.cast(prim.less_than(t, other), lm.float32)
            if rng.random() < 0.5:
                out = prim.fmod(t, prim.full_like(t, 1.5))
        elif action == "movement":
            out = _movement(t, rng)
        elif action == "reduce" and t.ndim >= 1:
            axis = int(rng.integers(0, t.ndim))
            out = prim.sum_reduce(t, axis) if rng.random() < 0.5 else prim.max_reduce(t, axis)
        elif action == "iota" and t.ndim >= 1:
            ramp = prim.iota(g, idx(t.ndim - 1, t.shape[-1]) * 2 - 1, t.shape)
            out = prim.add(t, prim.cast(ramp, lm.float32))
        else:
            out = t
        pool.append(out)
    pool[-1].output("out")
    if len(pool) > 3 and rng.random() < 0.5:
        pool[int(rng.integers(len(pool) // 2, len(pool) - 1))].output("side")
    return g, feed

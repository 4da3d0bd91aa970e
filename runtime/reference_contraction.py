"""A sum over a product's axis, read as one contraction: how the interpreter runs a matmul without its products.

A matmul is primitive ops: the operands read as broadcast views of one shape (batch, rows, cols, inner), a Mul,
a SumReduce over the inner axis. Run op by op, the Mul writes every product ([rows, cols, inner] floats) before
the sum reads them: it was 13.7 of the 15.3 seconds a MiniLM test spent in `lm.run`. Every float SumReduce of a
Mul is instead computed by numpy's einsum from the Mul's two operands, each with its broadcast axes dropped, which
hands what is a matrix product to BLAS (the Mul is still written where something else reads it). The values are
the same sums of the same products; only the rounding differs (products are not rounded to the type before they
are added), which is why only float32 and float64 take this path: half types keep the op-by-op rounding they
define.
"""

from __future__ import annotations

import string

import numpy as np

from luminal import ops

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def contracts(graph, node) -> bool:
    """Whether `node` is a SumReduce of a float Mul read whole, in its own order. Whether other nodes read the Mul
    too does not matter: a graph's values must not depend on whether equal nodes were merged."""
    if not isinstance(node.op, ops.SumReduce):
        return False
    source, view = node.inputs[0]
    product = graph.nodes[source]
    return isinstance(product.op, ops.Mul) and product.dtype.np in FLOATS and view.is_identity()


def sum_of_products(a: np.ndarray, b: np.ndarray, axis: int, dtype: np.dtype) -> np.ndarray:
    """sum(a * b, axis) for `a` and `b` of one shape, computed without the products' array."""
    letters = string.ascii_letters[: a.ndim]
    out = letters[:axis] + letters[axis + 1 :]
    operands, subscripts = [], []
    for x in (a, b):
        # An axis of stride 0 (and more than one element) repeats one slice: it is left out of that operand.
        kept = [k for k in range(x.ndim) if not (x.strides[k] == 0 and x.shape[k] > 1)]
        operands.append(x[tuple(slice(None) if k in kept else 0 for k in range(x.ndim))])
        subscripts.append("".join(letters[k] for k in kept))
    # The operands in an order of their own (their subscripts): a * b and b * a give the same bits, as the Mul does.
    ordered = sorted(zip(subscripts, operands), key=lambda pair: pair[0])
    subscripts, operands = [s for s, _ in ordered], [x for _, x in ordered]
    missing = set(out) - set(subscripts[0]) - set(subscripts[1])
    if missing or letters[axis] not in subscripts[0] + subscripts[1]:
        # An axis both operands broadcast: einsum cannot name it in the output; the products are cheap anyway.
        with np.errstate(all="ignore"):
            return np.add.reduce(np.multiply(a, b, dtype=dtype), axis=axis).astype(dtype, copy=False)
    with np.errstate(all="ignore"):
        summed = np.einsum(f"{subscripts[0]},{subscripts[1]}->{out}", *operands, optimize=True)
    return np.asarray(summed, dtype=dtype, order="C")

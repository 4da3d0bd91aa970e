"""Which loop kernels are GEMMs, and how their indices split: the backend-neutral plan every GEMM generator reads.

A loop kernel whose body holds one float32 `ir.Contract` (reached from the root through element-wise ops only)
is a GEMM: each output index either feeds operand A only (an M index), B only (an N index), or both / neither
(a batch index). The rest of the body, with the Contract replaced by `Accumulated`, is the epilogue that runs
on each accumulated value (bias, activation, residual, casts). C (codegen_gemm.py) and CUDA
(compiler/gpu/gemm.py) generate their kernels from the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal import dtypes as dt
from luminal.compiler.kernels import ir
from luminal.symbolic import Expr


@ir.value_node
class Accumulated(ir.Value):
    """The GEMM's result for the current output element (a C local), standing where the Contract stood."""

    dtype: dt.DType


@dataclass(frozen=True)
class GemmPlan:
    contract: ir.Contract
    epilogue: ir.Value  # the kernel body with the Contract replaced by `Accumulated`
    batch: tuple[int, ...]  # output axes of each role, in order
    m: tuple[int, ...]
    n: tuple[int, ...]


def index_vars(v: ir.Value) -> set[str]:
    names: set[str] = set()
    for node in ir.distinct(v):
        for e in _exprs(node):
            names |= e.symbols()
    return names


def _exprs(node: ir.Value) -> list[Expr]:
    if isinstance(node, ir.Load):
        return [node.index]
    if isinstance(node, ir.Guard):
        return [node.valid]
    if isinstance(node, ir.IndexValue):
        return [node.expr]
    if isinstance(node, (ir.Reduce, ir.Contract)):
        return [node.extent]
    if isinstance(node, ir.GatherLoad):
        return [node.index, node.valid, node.limit]
    return []


def _lift(v: ir.Value, bound: frozenset[str] = frozenset()) -> tuple[ir.Value, ir.Contract | None]:
    """`v` with its one Contract replaced by Accumulated, and that Contract.

    The Contract is reached through element-wise ops, guards, and reductions over variables it does not read
    (`bound`: those enclosing it), where its value is the same at every step: an activation built on
    maximum (relu, clamp) reads a GEMM's element through a reduction over the two rows it chooses from."""
    if isinstance(v, ir.Contract):
        free = (index_vars(v.a) | index_vars(v.b)) - {v.var}  # its own variable is bound by itself
        return (Accumulated(v.dtype), v) if not free & bound else (v, None)
    if isinstance(v, ir.Apply):
        found, args = None, []
        for a in v.args:
            lifted, c = _lift(a, bound)
            args.append(lifted)
            found = found or c  # equal copies of the one Contract all become the one accumulator
        return replace(v, args=tuple(args)), found
    if isinstance(v, ir.Guard):
        lifted, c = _lift(v.value, bound)
        return replace(v, value=lifted), c
    if isinstance(v, ir.Reduce):
        lifted, c = _lift(v.body, bound | {v.var})
        return replace(v, body=lifted), c
    return v, None


def plan(kernel: ir.Kernel) -> GemmPlan | None:
    """How `kernel` runs as a float32 GEMM, or None when it is not one (it is then emitted as plain loops)."""
    found = roles(kernel)
    if found is None or not (found.contract.dtype == found.contract.a.dtype == found.contract.b.dtype == dt.float32):
        return None  # half/integer arithmetic: exact loops instead (integers: compiler/cpu/int_gemm.py)
    return found


def roles(kernel: ir.Kernel) -> GemmPlan | None:
    """How `kernel` splits into a GEMM's operands and epilogue whatever its arithmetic, or None."""
    return ir.kept(kernel, "gemm_roles", _roles)


def _roles(kernel: ir.Kernel) -> GemmPlan | None:
    if not isinstance(kernel, ir.LoopKernel) or not ir.holds(kernel.body, ir.Contract):
        return None
    if len({n for n in ir.distinct(kernel.body) if isinstance(n, ir.Contract)}) != 1:
        return None
    epilogue, c = _lift(kernel.body)
    if c is None or any(isinstance(n, ir.Contract) for n in ir.distinct(epilogue)):
        return None  # a copy under a gather, or inside a reduction over its own indices: not one accumulator
    a_vars, b_vars = index_vars(c.a), index_vars(c.b)
    axes = range(len(kernel.shape))
    m = tuple(j for j in axes if f"_i{j}" in a_vars and f"_i{j}" not in b_vars)
    n = tuple(j for j in axes if f"_i{j}" in b_vars and f"_i{j}" not in a_vars)
    if not m or not n:
        return None  # a batched dot product: nothing to tile
    batch = tuple(j for j in axes if j not in m and j not in n)
    return GemmPlan(c, epilogue, batch, m, n)

"""GEMMs that multiply the same activations by different weights, run as one GEMM over their weights side by side.

A prefill's layer multiplies its normalised rows by the query, key and value weights: three GEMMs of one M and K
(cuBLAS steps or tensor-core kernels), the key and value ones a quarter of the query's width (grouped-query
attention): 512 columns at 512 rows are 16 tiles of 128 x 128 for an H100's 132 SMs. With their weights side by
side in one matrix they are one GEMM over 3,072 columns: one launch instead of three. That matrix is computed
from weights alone, so it is made once at load (compiler/derived_weights.py), and the CUDA runtime lets go of the
three weights no run reads any more: no memory is added. Each reader of a member's output reads its columns of
the merged output instead, at an index folded back to the form it had.

Merged: GEMMs (not GEMVs: a decode step's already share launches, compiler/cuda/gemv_batch.py) with the same A
operand, contraction and output shape but for their one N axis, the last; the same epilogue, reading nothing but
the accumulated value (a cast); the same library choice; B read from weights alone, along N and K; none of them
a program output or gathered from. Runs on the chosen program: the candidates were ranked one GEMM per weight.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal.compiler import gemm_plan, ir
from luminal.compiler.bounded_index import axes_extents, fold, fold_value
from luminal.compiler.cuda.program import kernel_launches
from luminal.compiler.fuse import gathered, substitute_indices
from luminal.symbolic import Expr, const, var
from luminal.view import dims_product, idx

GEMM_SHAPES = ("gemm", "mma", "cublas")  # tiled GEMMs: a launch each


@dataclass(frozen=True)
class _Member:
    kernel: ir.LoopKernel
    casts: tuple  # the casts B's source goes through, innermost first
    source: ir.Value  # B below those casts
    width: int  # its N


def _below_casts(v: ir.Value) -> tuple[tuple, ir.Value]:
    casts = []
    while isinstance(v, ir.Apply) and v.op == "Cast":
        casts.append(v.dtype)
        v = v.args[0]
    return tuple(reversed(casts)), v


def _member(k: ir.Kernel, p: ir.KernelProgram, outputs: set[str]) -> tuple[tuple, _Member] | None:
    """What `k` must share with the GEMMs it merges with, and `k` as a member; None where it merges with none."""
    if not isinstance(k, ir.LoopKernel) or k.out in outputs:
        return None
    launches = kernel_launches(k, p)
    plan = gemm_plan.plan(k)
    last = len(k.shape) - 1
    if len(launches) != 1 or launches[0].shape not in GEMM_SHAPES or plan is None or plan.n != (last,):
        return None
    if not k.shape[last].is_const:
        return None
    if any(not isinstance(n, (ir.Apply, ir.Const, gemm_plan.Accumulated)) for n in ir.walk(plan.epilogue)):
        return None  # a bias, a residual or a position: each member's own
    c = plan.contract
    casts, source = _below_casts(c.b)
    read = {n.buffer for n in ir.walk(source) if isinstance(n, (ir.Load, ir.GatherLoad))}
    if not read or any(p.buffers[b].role != "weight" for b in read) or c.extent.symbols():
        return None
    if not gemm_plan.index_vars(source) <= {f"_i{last}", c.var}:
        return None
    key = (c.a, c.var, c.extent, k.shape[:-1], plan.epilogue, p.buffers[k.out].dtype, casts, source.dtype,
           p.library.get(k.name))  # fmt: skip
    return key, _Member(k, casts, source, int(k.shape[last].evaluate({})))


def _groups(p: ir.KernelProgram) -> list[list[_Member]]:
    outputs = {buf for buf, _ in p.outputs.values()}
    gathered_from = set().union(*(gathered(k) for k in p.kernels))
    by_key: dict[tuple, list[_Member]] = {}
    for k in p.kernels:
        found = _member(k, p, outputs)
        if found is not None and k.out not in gathered_from:
            by_key.setdefault(found[0], []).append(found[1])
    return [members for members in by_key.values() if len(members) > 1]


def _concatenation(members: list[_Member], name: str, contract: ir.Contract) -> tuple[ir.LoopKernel, ir.Buffer]:
    """A kernel writing the members' B sources side by side: [sum of N, K], row n holding column n of B."""
    total, k = sum(m.width for m in members), int(contract.extent.evaluate({}))
    row, column = idx(0, total), idx(1, k)
    body, offset = None, 0
    for m in members:
        last = len(m.kernel.shape) - 1
        piece = substitute_indices(m.source, {f"_i{last}": row - offset, contract.var: column})
        piece = ir.Guard((row >= offset) & (row < offset + m.width), piece, piece.dtype)
        body = piece if body is None else ir.Apply("Add", (body, piece), piece.dtype)
        offset += m.width
    buffer = ir.Buffer(f"{name}_weights", members[0].source.dtype, const(total * k), "temp")
    return ir.LoopKernel(f"{name}_weights", buffer.name, (const(total), const(k)), body), buffer


def _merged(members: list[_Member], name: str, weights: ir.Buffer, dtype) -> tuple[ir.LoopKernel, ir.Buffer]:
    """The first member over every member's columns, B read from the side-by-side weights."""
    first = members[0].kernel
    contract = gemm_plan.plan(first).contract
    last, total = len(first.shape) - 1, sum(m.width for m in members)
    reduced = var(contract.var, 0, max(contract.extent.hi - 1, 0))
    b: ir.Value = ir.Load(weights.name, idx(last, total) * contract.extent + reduced, weights.dtype)
    for cast in members[0].casts:
        b = ir.Apply("Cast", (b,), cast)
    body = ir.rebuilt(first.body, lambda n: replace(n, b=b) if n == contract else None)
    shape = (*first.shape[:-1], const(total))
    out = ir.Buffer(f"{name}_out", dtype, dims_product(shape), "temp")
    return ir.LoopKernel(name, out.name, shape, body), out


def _divisions(e: Expr) -> int:
    own = e.op in ("div", "mod")
    return own + sum(_divisions(a) for a in e.args if isinstance(a, Expr))


def _read_columns(k: ir.Kernel, columns: dict[str, tuple[int, int]], out: str, total: int) -> ir.Kernel | None:
    """`k` reading each member output in `columns` (buffer -> (offset, width)) as its columns of `out`, a row of
    `total` columns; None where an index would keep a division the member's own did not have."""
    made: dict[Expr, Expr] = {}  # the new index -> the member's index it replaces

    def moved(n: ir.Value) -> ir.Value | None:
        if not isinstance(n, ir.Load) or n.buffer not in columns:
            return None
        offset, width = columns[n.buffer]
        index = (n.index // width) * total + offset + n.index % width
        made[index] = n.index
        return replace(n, buffer=out, index=index)

    failed = []

    def folded(e: Expr, extents) -> Expr:
        if e not in made:
            return e
        done = fold(e, extents)
        if _divisions(done) > _divisions(made[e]):
            failed.append(e)
        return done

    if isinstance(k, ir.LoopKernel):
        new = replace(k, body=fold_value(ir.rebuilt(k.body, moved), axes_extents(k.shape), folded))
    else:
        over_src, over_dest = axes_extents(k.src_shape), axes_extents(k.shape)
        at, src = (fold_value(ir.rebuilt(v, moved), over_src, folded) for v in (k.at, k.src))
        new = replace(k, at=at, src=src, dest=fold_value(ir.rebuilt(k.dest, moved), over_dest, folded))
    return None if failed else new


def merge_sibling_gemms(p: ir.KernelProgram) -> ir.KernelProgram:
    """`p` with each group of sibling GEMMs (see the module docstring) one GEMM over side-by-side weights."""
    for members in _groups(p):
        merged = _merge(p, members)
        p = merged if merged is not None else p
    return p


def _merge(p: ir.KernelProgram, members: list[_Member]) -> ir.KernelProgram | None:
    first, names = members[0].kernel, {m.kernel.name for m in members}
    name = f"{first.name}_to_{members[-1].kernel.name}"
    contract = gemm_plan.plan(first).contract
    concatenation, weights = _concatenation(members, name, contract)
    gemm, out = _merged(members, name, weights, p.buffers[first.out].dtype)
    total, columns, offset = sum(m.width for m in members), {}, 0
    for m in members:
        columns[m.kernel.out] = (offset, m.width)
        offset += m.width
    kernels: list[ir.Kernel] = []
    for k in p.kernels:
        if k.name == first.name:
            kernels += [concatenation, gemm]
        elif k.name not in names:
            reads = ir.buffers_read(k) & columns.keys()
            moved = _read_columns(k, columns, out.name, total) if reads else k
            if moved is None:
                return None
            kernels.append(moved)
    buffers = {n: b for n, b in p.buffers.items() if n not in columns} | {weights.name: weights, out.name: out}
    library = {n: lib for n, lib in p.library.items() if n not in names}
    if first.name in p.library:
        library[gemm.name] = p.library[first.name]
    merged = replace(p, kernels=kernels, buffers=buffers, library=library)
    try:
        (launch,) = kernel_launches(gemm, merged)
    except ValueError:
        return None  # a library that cannot compute the merged GEMM alone
    return merged if launch.shape in GEMM_SHAPES else None

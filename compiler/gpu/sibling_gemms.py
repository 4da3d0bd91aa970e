"""GEMMs that multiply the same activations by different weights, run as one GEMM over their weights side by side.

A prefill's layer multiplies its normalised rows by the query, key and value weights: three GEMMs of one M and K
(cuBLAS steps or tensor-core kernels), the key and value ones a quarter of the query's width (grouped-query
attention): 512 columns at 512 rows are 16 tiles of 128 x 128 for an H100's 132 SMs. With their weights side by
side in one matrix they are one GEMM over 3,072 columns: one launch instead of three. That matrix is computed
from weights alone, so it is made once at load (compiler/kernels/derived_weights.py), and the CUDA runtime lets go of
the three weights no run reads any more: no memory is added. Each reader of a member's output reads its columns of
the merged output instead, at an index folded back to the form it had.

Merged: GEMMs (not GEMVs: a decode step's already share launches, compiler/gpu/gemv_batch.py) with the same A
operand, contraction and output shape but for their one N axis, the last; the same epilogue, reading nothing but
the accumulated value and weights along N alone (a bias, Qwen2's on q, k and v: also side by side, made at load);
the same library choice; B read from weights alone, along N and K; none of them a program output or gathered
from. Runs on the chosen program: the candidates were ranked one GEMM per weight.

A member may read B from a copy of its weight (an element-wise kernel over weights alone: Metal's SIMT GEMM
reads each weight transposed into [K, N]). The side-by-side weights then compute the copies' values from the
weights themselves, in the layout the members read ([K, N], or [N, K] as a linear layer's weights lie), and
the copies go: a Llama prefill on Metal has one derived buffer per layer's q, k and v, not three copies.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from luminal.compiler.analysis import gemm_plan
from luminal.compiler.fusion.fuse import gathered, inline_value, substitute_indices
from luminal.compiler.gpu.program import own_launches
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.affine import affine
from luminal.compiler.kernels.bounded_index import axes_extents, fold, fold_value
from luminal.symbolic import Expr, const, var
from luminal.view import dims_product, idx

GEMM_SHAPES = ("gemm", "mma", "cublas")  # tiled GEMMs: a launch each
CONTRACTED = "_r_merged"  # the members' contraction variable, in their B sources


@dataclass(frozen=True)
class _Member:
    kernel: ir.LoopKernel
    casts: tuple  # the casts B's source goes through, innermost first
    source: ir.Value  # B below those casts, from weights alone
    columns: tuple  # the epilogue's loads of weights along N alone (a bias), in the epilogue's order
    width: int  # its N
    copies: tuple  # the buffers B read, copies of weights, that `source` computes instead
    n_last: bool  # B as the GEMM reads it is [K, N] (Metal's SIMT GEMM's transposed copies), else [N, K]


def _below_casts(v: ir.Value) -> tuple[tuple, ir.Value]:
    casts = []
    while isinstance(v, ir.Apply) and v.op == "Cast":
        casts.append(v.dtype)
        v = v.args[0]
    return tuple(reversed(casts)), v


def _column_loads(epilogue: ir.Value, p: ir.KernelProgram, column: str) -> tuple | None:
    """The epilogue's loads of weights indexed by the N variable `column` alone (a bias), in order; None where it
    reads anything else (a residual, a position: each member's own)."""
    loads = []
    for n in ir.walk(epilogue):
        if isinstance(n, ir.Load) and p.buffers[n.buffer].role == "weight" and n.index.symbols() <= {column}:
            loads.append(n)
        elif not isinstance(n, (ir.Apply, ir.Const, gemm_plan.Accumulated)):
            return None
    return tuple(dict.fromkeys(loads))


def _weight_copy(k: ir.Kernel | None, p: ir.KernelProgram) -> bool:
    """Whether `k` computes each element from weights alone (a transposed copy that Metal's SIMT GEMM reads)."""
    return ir.element_wise(k) and all(p.buffers[b].role == "weight" for b in ir.buffers_read(k))


def _from_weights(source: ir.Value, p: ir.KernelProgram, producers: dict, extents: dict) -> tuple[ir.Value, tuple]:
    """B's `source` computing the weight copies it reads from the weights, and those copies' buffers."""
    copies = tuple(sorted({n.buffer for n in ir.walk(source) if isinstance(n, ir.Load)} - set(p.weights.values())))
    for buf in copies:
        if not _weight_copy(producers.get(buf), p):
            return source, ()
        source = fold_value(inline_value(producers[buf], source, extents, itertools.count()), extents)
    return source, copies


def _n_contiguous(source: ir.Value, column: str) -> bool:
    """Whether B, as the GEMM reads it, holds consecutive columns at consecutive addresses ([K, N])."""
    load = next((n for n in ir.walk(source) if isinstance(n, ir.Load)), None)
    found = None if load is None else affine(load.index, [column, CONTRACTED])
    return found is not None and found[1][column] == 1


def _member(
    k: ir.Kernel, p: ir.KernelProgram, outputs: set[str], producers: dict, kernel_launches
) -> tuple[tuple, _Member] | None:
    """What `k` must share with the GEMMs it merges with, and `k` as a member; None where it merges with none."""
    if not isinstance(k, ir.LoopKernel) or k.out in outputs:
        return None
    launches = kernel_launches(k, p)
    plan = gemm_plan.plan(k)
    last = len(k.shape) - 1
    if len(launches) != 1 or launches[0].shape not in GEMM_SHAPES or plan is None or plan.n != (last,):
        return None
    columns = _column_loads(plan.epilogue, p, f"_i{last}")
    if not k.shape[last].is_const or columns is None:
        return None
    c = plan.contract
    if c.extent.symbols():
        return None
    # Fusion names each contraction apart: the members' operands are compared under one name for theirs.
    contracted = {c.var: var(CONTRACTED, 0, c.extent.hi - 1)}
    casts, read_as = _below_casts(substitute_indices(c.b, contracted))
    extents = {f"_i{last}": k.shape[last], CONTRACTED: c.extent}
    source, copies = _from_weights(read_as, p, producers, extents)
    read = {n.buffer for n in ir.walk(source) if isinstance(n, (ir.Load, ir.GatherLoad))}
    if not read or any(p.buffers[b].role != "weight" for b in read):
        return None
    if not gemm_plan.index_vars(source) <= {f"_i{last}", CONTRACTED}:
        return None
    # The epilogue's shape, each column load standing for the same load of every member.
    placeholders = {load: ir.Load("", const(j), load.dtype) for j, load in enumerate(columns)}
    form = ir.rebuilt(plan.epilogue, lambda n: placeholders.get(n) if isinstance(n, ir.Load) else None)
    a = substitute_indices(c.a, contracted)
    n_last = _n_contiguous(read_as, f"_i{last}")  # the side-by-side weights keep the layout the GEMM read
    key = (a, c.extent, k.shape[:-1], form, p.buffers[k.out].dtype, casts, source.dtype, p.library.get(k.name))
    return (*key, n_last), _Member(k, casts, source, columns, int(k.shape[last].evaluate({})), copies, n_last)


def _groups(p: ir.KernelProgram, known: dict[int, tuple], kernel_launches) -> list[list[_Member]]:
    """The groups of two or more GEMMs that may merge; `known` keeps what each kernel was found to be, by identity
    (a merge rewrites only the kernels it touches)."""
    outputs = {buf for buf, _ in p.outputs.values()}
    gathered_from = set().union(*(gathered(k) for k in p.kernels))
    producers = {k.out: k for k in p.kernels}
    by_key: dict[tuple, list[_Member]] = {}
    for k in p.kernels:
        if known.get(id(k), (None,))[0] is not k:
            known[id(k)] = (k, _member(k, p, outputs, producers, kernel_launches))
        found = known[id(k)][1]
        if found is not None and k.out not in gathered_from:
            by_key.setdefault(found[0], []).append(found[1])
    return [members for members in by_key.values() if len(members) > 1]


def _side_by_side(
    name: str, pieces: list[ir.Value], members: list[_Member], along: tuple[str, int] | None, n_last: bool = False
):
    """A kernel writing each member's piece (a value of its N variable, and of `along`'s variable when given)
    side by side: [sum of N] or [sum of N, along's extent], row n holding the piece's value at column n; with
    `n_last`, [along's extent, sum of N]."""
    total = sum(m.width for m in members)
    row = idx(1 if n_last else 0, total)
    shape = (const(total),) if along is None else (const(total), const(along[1]))
    shape = shape[::-1] if n_last else shape
    body, offset = None, 0
    for m, piece in zip(members, pieces):
        at = {} if along is None else {along[0]: idx(0 if n_last else 1, along[1])}
        table = {f"_i{len(m.kernel.shape) - 1}": row - offset} | at
        part = ir.Guard((row >= offset) & (row < offset + m.width), substitute_indices(piece, table), piece.dtype)
        body = part if body is None else ir.Apply("Add", (body, part), piece.dtype)
        offset += m.width
    buffer = ir.Buffer(name, pieces[0].dtype, dims_product(shape), "temp")
    return ir.LoopKernel(name, name, shape, body), buffer


def _merged(members: list[_Member], name: str, weights: ir.Buffer, columns: list[ir.Buffer], dtype, n_last: bool):
    """The first member over every member's columns: B read from the side-by-side weights ([K, N] with
    `n_last`, else [N, K]), each column load of its epilogue from its side-by-side columns."""
    first = members[0].kernel
    contract = gemm_plan.plan(first).contract
    last, total = len(first.shape) - 1, sum(m.width for m in members)
    n = idx(last, total)
    reduced = var(contract.var, 0, max(contract.extent.hi - 1, 0))
    at = reduced * total + n if n_last else n * contract.extent + reduced
    b: ir.Value = ir.Load(weights.name, at, weights.dtype)
    for cast in members[0].casts:
        b = ir.Apply("Cast", (b,), cast)
    moved = {load: ir.Load(buf.name, n, load.dtype) for load, buf in zip(members[0].columns, columns)}

    def merged_value(v: ir.Value) -> ir.Value | None:
        return replace(v, b=b) if v == contract else moved.get(v) if isinstance(v, ir.Load) else None

    shape = (*first.shape[:-1], const(total))
    out = ir.Buffer(f"{name}_out", dtype, dims_product(shape), "temp")
    return ir.LoopKernel(name, out.name, shape, ir.rebuilt(first.body, merged_value)), out


def _divisions(e: Expr) -> int:
    own = e.op in ("div", "mod")
    return own + sum(_divisions(a) for a in e.args if isinstance(a, Expr))


def _read_columns(k: ir.Kernel, placed: dict[str, tuple[int, int]], out: str, total: int) -> ir.Kernel | None:
    """`k` reading each member output in `placed` (buffer -> (offset, width)) as its columns of `out`, a row of
    `total` columns; None where an index would keep a division the member's own did not have."""
    made: dict[Expr, Expr] = {}  # the new index -> the member's index it replaces

    def moved(n: ir.Value) -> ir.Value | None:
        if not isinstance(n, ir.Load) or n.buffer not in placed:
            return None
        offset, width = placed[n.buffer]
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


def merge_sibling_gemms(p: ir.KernelProgram, kernel_launches=own_launches) -> ir.KernelProgram:
    """`p` with each group of sibling GEMMs (see the module docstring) one GEMM over side-by-side weights. The
    groups are found again after each merge: one may read another's outputs, which the merge rewrites.
    `kernel_launches(k, p)` is the backend's launch planner (CUDA's: compiler/cuda/program.py)."""
    known: dict[int, tuple] = {}
    tried: set[tuple[str, ...]] = set()
    while True:
        groups = [g for g in _groups(p, known, kernel_launches) if tuple(m.kernel.name for m in g) not in tried]
        if not groups:
            return p
        tried.add(tuple(m.kernel.name for m in groups[0]))
        merged = _merge(p, groups[0], kernel_launches)
        p = merged if merged is not None else p


def _merge(p: ir.KernelProgram, members: list[_Member], kernel_launches) -> ir.KernelProgram | None:
    first, names, n_last = members[0].kernel, {m.kernel.name for m in members}, members[0].n_last
    name = f"{first.name}_to_{members[-1].kernel.name}"
    contract = gemm_plan.plan(first).contract
    along = (CONTRACTED, int(contract.extent.evaluate({})))
    made = [_side_by_side(f"{name}_weights", [m.source for m in members], members, along, n_last)]
    for j in range(len(members[0].columns)):
        made.append(_side_by_side(f"{name}_columns{j}", [m.columns[j] for m in members], members, None))
    weights, columns = made[0][1], [buffer for _, buffer in made[1:]]
    gemm, out = _merged(members, name, weights, columns, p.buffers[first.out].dtype, n_last)
    total, placed, offset = sum(m.width for m in members), {}, 0
    for m in members:
        placed[m.kernel.out] = (offset, m.width)  # where each member's output lies in the merged one's rows
        offset += m.width
    kernels: list[ir.Kernel] = []
    for k in p.kernels:
        if k.name == first.name:
            kernels += [*(kernel for kernel, _ in made), gemm]
        elif k.name not in names:
            moved = _read_columns(k, placed, out.name, total) if ir.buffers_read(k) & placed.keys() else k
            if moved is None:
                return None
            kernels.append(moved)
    copies = {buf for m in members for buf in m.copies}  # what no kernel reads any more goes with the members
    dead = copies - {b for k in kernels for b in ir.buffers_read(k)}
    kernels = [k for k in kernels if k.out not in dead]
    gone = placed.keys() | dead
    buffers = {n: b for n, b in p.buffers.items() if n not in gone} | {b.name: b for _, b in made} | {out.name: out}
    library = {n: lib for n, lib in p.library.items() if n not in names}
    if first.name in p.library:
        library[gemm.name] = p.library[first.name]
    merged = replace(p, kernels=kernels, buffers=buffers, library=library)
    try:
        (launch,) = kernel_launches(gemm, merged)
    except ValueError:
        return None  # a library that cannot compute the merged GEMM alone
    return merged if launch.shape in GEMM_SHAPES else None

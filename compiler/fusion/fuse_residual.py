"""A GEMV's output stored with what every reader adds to it: a decoder's residual sum in the GEMV's epilogue.

After fusion a decode step's residual stream is never stored: each norm recomputes it from every sum that made
it, `h = embed + o_1 + down_1 + ... `, in every later layer, and the o_proj and down_proj GEMVs store their raw
dot products. That is cheap while a norm is its own kernel (a block per row), but a norm computed in the
prologue of the GEMVs that read it (compiler/gpu/norm_prologue.py) would redo it in every block. So, on GPU
targets, each GEMV whose every reader reads it only inside one same element-wise expression (its value at the
GEMV's output position, such as `h_prev + dot`, rounded as the graph rounds) computes that expression in its
epilogue and stores it instead; the readers load it. A reader's expression found for each read by climbing from
the load through element-wise ops while they read only buffers written before the GEMV (what its epilogue can
read) and only the read position's indices; the longest climb every read agrees on is stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from luminal.compiler.analysis import gemv_plan
from luminal.compiler.fusion.fuse import _matched_axes, _variables, substitute_indices, with_kernels
from luminal.compiler.fusion.limits import within_limits
from luminal.compiler.kernels import ir
from luminal.symbolic import Expr, as_expr
from luminal.view import ShapeTracker, idx

Read = list[tuple[ir.Value, ir.Value]]  # (a node in the reader, the same node over the GEMV's indices), load first


def _loads_with_paths(v: ir.Value, buffer: str, path: list[ir.Value], extents: dict[str, Expr]) -> Iterator:
    """(the ancestors, the loop variables' extents in scope) of each plain load of `buffer` in `v`."""
    if isinstance(v, ir.Load):
        if v.buffer == buffer:
            yield [*path, v], extents
        return
    if isinstance(v, ir.Reduce):
        extents = {**extents, v.var: v.extent}
    elif isinstance(v, ir.Contract):
        extents = {**extents, v.var: v.extent}
    elif isinstance(v, ir.Attend):
        extents = {**extents, v.s_var: v.s_extent, v.e_var: v.e_extent}
    for child in ir.children(v):
        yield from _loads_with_paths(child, buffer, [*path, v], extents)


def _zero_unit_ranges(v: ir.Value, names: set[str]) -> dict[str, Expr]:
    """Loop variables among `names` whose range is the single value 0 (an axis of length 1): they read 0."""
    table = {}
    for n in ir.walk(v):
        exprs = (n.index,) if isinstance(n, ir.Load) else (n.index, n.valid) if isinstance(n, ir.GatherLoad) else ()
        for e in exprs:
            for name, node in _variables(e).items():
                if name in names and node.lo == 0 and node.hi == 0:
                    table[name] = as_expr(0)
    return table


def _to_gemv_space(load: ir.Load, extents: dict[str, Expr], gemv: ir.LoopKernel) -> dict[str, Expr] | None:
    """The substitution that writes the reader's loop variables as the GEMV's indices, where the read position
    is the GEMV's element `_i0.._in` read through one variable per axis (or None)."""
    zero = _zero_unit_ranges(load, set(extents))
    index = load.index.substitute(zero) if zero else load.index
    table = _matched_axes(index, gemv.shape, extents)
    if table is None:
        return None
    inverse = dict(zero)
    for axis, node in table.items():
        k = int(axis[2:])
        if node.op == "var":
            inverse[node.args[0]] = idx(k, gemv.shape[k])
        elif not (node.is_const and as_expr(gemv.shape[k]).hi <= 1):
            return None  # a fixed position along a longer axis: the stored value would hold only there
    return inverse


def _readable(v: ir.Value, available: set[str], mapped: set[str], loop_vars: set[str]) -> bool:
    """Whether the GEMV's epilogue can evaluate `v` (a reader's node): element-wise, reading buffers written
    before it, and reading no loop variable of the reader but those the GEMV's indices stand for (`mapped`)."""
    for n in ir.walk(v):
        if isinstance(n, (ir.Reduce, ir.Contract, ir.Attend)):
            return False
        if isinstance(n, (ir.Load, ir.GatherLoad)) and n.buffer not in available:
            return False
        exprs = (
            (n.index,)
            if isinstance(n, ir.Load)
            else (n.index, n.valid, n.limit)
            if isinstance(n, ir.GatherLoad)
            else (n.valid,)
            if isinstance(n, ir.Guard)
            else (n.expr,)
            if isinstance(n, ir.IndexValue)
            else ()
        )
        for e in exprs:
            left = e.symbols() & loop_vars
            if isinstance(n, ir.GatherLoad):
                left -= {"_g"}
            if left - mapped:
                return False
    return True


def _climb(path: list[ir.Value], inverse: dict[str, Expr], available, gemv: ir.LoopKernel, loop_vars) -> Read | None:
    """The load and each ancestor above it, while element-wise and evaluable by the GEMV's epilogue."""
    gemv_vars = {f"_i{k}" for k in range(len(gemv.shape))}
    load = path[-1]
    at = substitute_indices(load, inverse)
    own = ir.Load(load.buffer, ShapeTracker.contiguous(gemv.shape).index, load.dtype)
    if at.index != substitute_indices(own, _zero_unit_ranges(own, gemv_vars)).index:
        return None  # not provably the GEMV's own element
    chain = [(load, at)]
    for node in reversed(path[:-1]):
        if not isinstance(node, (ir.Apply, ir.Guard)):
            break
        if not _readable(node, available, set(inverse), loop_vars):
            break
        chain.append((node, substitute_indices(node, inverse)))
    return chain


def _replace_node(v: ir.Value, old: ir.Value, new: ir.Value) -> ir.Value:
    return ir.rebuilt(v, lambda n: new if n == old else None)


def _loop_vars(kernel: ir.LoopKernel) -> set[str]:
    names = {f"_i{k}" for k in range(len(kernel.shape))}
    for n in ir.walk(kernel.body):
        if isinstance(n, (ir.Reduce, ir.Contract)):
            names.add(n.var)
        elif isinstance(n, ir.Attend):
            names |= {n.s_var, n.e_var}
    return names


def _reads(program: ir.KernelProgram, kernels, j: int, readers: list[int]) -> list[Read] | None:
    """Every read of kernel j's output by `readers`, each as its climb (None where one cannot be climbed)."""
    gemv = kernels[j]
    available = {k.out for k in kernels[: j + 1]} | set(program.inputs.values()) | set(program.weights.values())
    reads = []
    for r in readers:
        reader = kernels[r]
        extents = {f"_i{k}": as_expr(d) for k, d in enumerate(reader.shape)}
        for path, scope in _loads_with_paths(reader.body, gemv.out, [], extents):
            inverse = _to_gemv_space(path[-1], scope, gemv)
            if inverse is None:
                return None
            read = _climb(path, inverse, available, gemv, _loop_vars(reader))
            if read is None:
                return None
            reads.append(read)
    return reads


def _agreed(reads: list[Read]) -> int:
    """How far above the load every read's climb goes with the same value over the GEMV's indices."""
    depth = min(len(read) for read in reads) - 1
    for d in range(1, depth + 1):
        if len({read[d][1] for read in reads}) != 1:
            return d - 1
    return depth


def store_residuals(program: ir.KernelProgram) -> ir.KernelProgram:
    """`program` with each GEMV storing the element-wise value all its readers make of its output (see above)."""
    outputs = {buf for buf, _ in program.outputs.values()}
    kernels: list[ir.Kernel] = list(program.kernels)
    buffers = dict(program.buffers)
    reading = [ir.buffers_read(k) for k in kernels]  # kept up to date as kernels are rewritten
    for j in range(len(kernels)):
        gemv = kernels[j]  # as earlier steps left it: they rewrite the readers, GEMVs among them
        if not isinstance(gemv, ir.LoopKernel) or gemv.out in outputs or gemv_plan.plan(gemv) is None:
            continue
        readers = [r for r, names in enumerate(reading) if gemv.out in names]
        if not readers or not all(isinstance(kernels[r], ir.LoopKernel) for r in readers):
            continue
        reads = _reads(program, kernels, j, readers)
        if not reads:
            continue
        depth = _agreed(reads)
        if depth == 0:
            continue
        stored = reads[0][depth][1]
        load = reads[0][0][1]
        body = _replace_node(stored, load, gemv.body)
        fused = replace(gemv, body=body)
        if gemv_plan.plan(fused) is None or not within_limits(fused):
            continue
        new = {r: _reading_stored(kernels[r], reads, depth, gemv.out, stored.dtype) for r in readers}
        if any(k is None for k in new.values()):
            continue
        kernels[j] = fused
        kernels = [new.get(r, k) for r, k in enumerate(kernels)]
        for r in [j, *new]:
            reading[r] = ir.buffers_read(kernels[r])
        buffers[gemv.out] = replace(buffers[gemv.out], dtype=stored.dtype)
    program = ir.KernelProgram(buffers, kernels, program.inputs, program.weights, program.outputs, program.symbols)
    return with_kernels(program, kernels)


PENDING = "lm_stored"  # a placeholder buffer name while the reads are replaced: no kernel's buffer has it


def _reading_stored(reader: ir.LoopKernel, reads: list[Read], depth: int, buffer: str, dtype) -> ir.LoopKernel | None:
    """`reader` loading the stored value where it computed it, or None if it still reads the raw output."""
    body = reader.body
    for read in reads:
        body = _replace_node(body, read[depth][0], ir.Load(PENDING, read[0][0].index, dtype))
    if any(isinstance(n, ir.Load) and n.buffer == buffer for n in ir.walk(body)):
        return None
    return replace(reader, body=_rename_loads(body, PENDING, buffer))


def _rename_loads(v: ir.Value, old: str, new: str) -> ir.Value:
    return ir.rebuilt(v, lambda n: replace(n, buffer=new) if isinstance(n, ir.Load) and n.buffer == old else None)

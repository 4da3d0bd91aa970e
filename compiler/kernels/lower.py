"""Lowering a primitive graph to the kernel IR: one kernel per compute node, every view folded into loads.

This is the unfused baseline every fused candidate is measured against: constants are inlined where they
are read element-wise, and movement never costs a copy (views become index arithmetic in the loads).
"""

from __future__ import annotations

from luminal import ops
from luminal.compiler.fusion.fuse import substitute_indices, with_kernels
from luminal.compiler.graph.fused_ops import Attention, Inline, MatMul
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.lower_select import select_of
from luminal.compiler.kernels.settle import settle
from luminal.graph import Graph, Node
from luminal.symbolic import Expr, as_expr, const, var
from luminal.view import ShapeTracker, contiguous_strides, dims_product, idx


def buffer_name(node_id: int) -> str:
    return f"b{node_id}"


def _remap(e: Expr, table: dict[str, Expr]) -> Expr:
    return e.substitute(table) if table else e


class Lowering:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.program = ir.KernelProgram(symbols=dict(graph.symbols))

    # ---- reads -------------------------------------------------------------------------------------------
    def read(self, src: int, view: ShapeTracker, table: dict[str, Expr] | None = None) -> ir.Value:
        """The value of input (src, view) at the consumer's indices (`table` renames the view's index vars)."""
        node = self.graph.nodes[src]
        table = table or {}
        valid = _remap(view.valid, table)
        if isinstance(node.op, ops.Constant):
            value: ir.Value = ir.Const(node.op.value, node.dtype)
        else:
            value = ir.Load(buffer_name(src), _remap(view.index, table), node.dtype)
        return value if valid == 1 else ir.Guard(valid, value, node.dtype)

    def gather(self, node: Node) -> ir.Value:
        selected = select_of(self, node)  # where(c, a, b) and its kin: element-wise, no stack stored
        if selected is not None:
            return selected
        (data, data_view), (ix, ix_view) = node.inputs
        at = self.read(ix, ix_view)
        shape = data_view.shape
        g = var("_g", 0, max(as_expr(dims_product(shape)).hi - 1, 0))
        # g is a row-major position in the logical data: unflatten it into the view's indices.
        table = {}
        for k, (d, s) in enumerate(zip(shape, contiguous_strides(shape))):
            q = g // (s if s.lo >= 1 else s.max(1))
            table[f"_i{k}"] = q if k == 0 else q % (as_expr(d) if as_expr(d).lo >= 1 else as_expr(d).max(1))
        # A contiguous view is read at g itself: its unflattening re-flattens to g, which the simplifier cannot
        # show without knowing g's range (a paged cache's pool read paid four divisions per element for it).
        contiguous = bool(data_view.is_contiguous())
        return ir.GatherLoad(
            self.materialized(data),
            at,
            g if contiguous else _remap(data_view.index, table),
            const(1) if contiguous else _remap(data_view.valid, table),
            dims_product(shape),
            self.graph.nodes[data].dtype,
        )

    def materialized(self, src: int) -> str:
        """The buffer of node `src`; a constant (otherwise inlined where read) gets a one-element kernel."""
        node = self.graph.nodes[src]
        name = buffer_name(src)
        if isinstance(node.op, ops.Constant) and name not in self.program.buffers:
            self.add_buffer(node, "temp")
            self.program.kernels.append(ir.LoopKernel(f"k{src}", name, (), ir.Const(node.op.value, node.dtype)))
        return name

    # ---- nodes -------------------------------------------------------------------------------------------
    def add_buffer(self, node: Node, role: str, label: str = "") -> str:
        name = buffer_name(node.id)
        self.program.buffers[name] = ir.Buffer(name, node.dtype, dims_product(node.shape), role, label)
        return name

    def lower(self) -> ir.KernelProgram:
        for node in self.graph.nodes:
            self.node(node)
        return without_unread_kernels(self.program)

    def node(self, node: Node) -> None:
        op, p = node.op, self.program
        if isinstance(op, ops.Weight):
            p.weights[op.label] = self.add_buffer(node, "weight", op.label)
        elif isinstance(op, ops.Input):
            p.inputs[op.label] = self.add_buffer(node, "input", op.label)
        elif isinstance(op, ops.Constant):
            pass  # inlined where read element-wise; materialized only where gathered from
        elif isinstance(op, ops.Output):
            self.output(node)
        elif isinstance(op, ops.Scatter):
            (dest, dv), (ix, iv), (src, sv) = node.inputs
            out = self.add_buffer(node, "temp")
            src_shape = tuple(as_expr(d) for d in iv.shape)
            p.kernels.append(
                ir.ScatterKernel(
                    f"k{node.id}",
                    out,
                    tuple(as_expr(d) for d in node.shape),
                    self.read(dest, dv),
                    src_shape,
                    self.read(ix, iv),
                    self.read(src, sv),
                    dims_product(node.shape),
                )
            )
        else:
            out = self.add_buffer(node, "temp")
            p.kernels.append(ir.LoopKernel(f"k{node.id}", out, tuple(as_expr(d) for d in node.shape), self.body(node)))

    def body(self, node: Node) -> ir.Value:
        op = node.op
        if isinstance(op, ops.Iota):
            return ir.IndexValue(op.expr, node.dtype)
        if isinstance(op, ops.Gather):
            return self.gather(node)
        if isinstance(op, Attention):
            return self.attend(node)
        if isinstance(op, Inline):  # a read of its producer: fusion (compiler/fusion/fuse_chosen.py) computes it there
            return self.read(*node.inputs[0])
        if isinstance(op, (ops.Reduce, MatMul)):
            view = node.inputs[0][1]
            rank = len(view.shape)
            table = {f"_i{k}": idx(k if k < op.axis else k - 1, view.shape[k]) for k in range(rank) if k != op.axis}
            table[f"_i{op.axis}"] = var("_r0", 0, max(as_expr(view.shape[op.axis]).hi - 1, 0))
            extent = as_expr(view.shape[op.axis])
            a, *b = (self.read(src, v, table) for src, v in node.inputs)
            if isinstance(op, MatMul):
                return ir.Contract("_r0", extent, a, b[0], node.dtype)
            if isinstance(op, ops.MaxReduce) and extent.is_const and 1 <= extent.value <= MAX_UNROLLED:
                return _unrolled_max(a, extent.value, node.dtype)
            return ir.Reduce("sum" if isinstance(op, ops.SumReduce) else "max", "_r0", extent, a, node.dtype)
        args = tuple(self.read(s, v) for s, v in node.inputs)
        return ir.Apply(op.name, args, node.dtype)

    def attend(self, node: Node) -> ir.Attend:
        """Attention's inputs at the output's indices [..., l, n]: the key axis is `_r0`, the head dim `_r1`."""
        (q, qv), (k, kv), (v, vv), (b, bv) = node.inputs
        rank = len(node.shape)  # q, k, v are read as rank + 1 products: [..., L, S, E] and [..., L, N, S]
        extent_s, extent_e = as_expr(qv.shape[-2]), as_expr(qv.shape[-1])
        s = var("_r0", 0, max(extent_s.hi - 1, 0))
        e = var("_r1", 0, max(extent_e.hi - 1, 0))
        out = {f"_i{j}": idx(j, node.shape[j]) for j in range(rank)}
        scores = {**{f"_i{j}": out[f"_i{j}"] for j in range(rank - 1)}, f"_i{rank - 1}": s}
        return ir.Attend(
            "_r0",
            extent_s,
            "_r1",
            extent_e,
            self.read(q, qv, {**scores, f"_i{rank}": e}),
            self.read(k, kv, {**scores, f"_i{rank}": e}),
            self.read(v, vv, {**out, f"_i{rank}": s}),
            self.read(b, bv, scores),
            float(node.op.scale),
            bool(node.op.safe),
            node.dtype,
        )

    def output(self, node: Node) -> None:
        (src, view) = node.inputs[0]
        source = self.graph.nodes[src]
        shape = tuple(as_expr(d) for d in node.shape)
        if view.is_identity() and not isinstance(source.op, ops.Constant):
            self.program.outputs[node.op.label] = (buffer_name(src), shape)
            return
        out = self.add_buffer(node, "output", node.op.label)
        self.program.kernels.append(ir.LoopKernel(f"k{node.id}", out, shape, self.read(src, view)))
        self.program.outputs[node.op.label] = (out, shape)


# A max over at most this many values is element-wise Max ops: maximum(a, b) is a max over a stack of two rows,
# and as a reduction, clamp's min of a max nested one reduction in another, which kept it out of GEMM epilogues.
MAX_UNROLLED = 4


def _unrolled_max(body: ir.Value, extent: int, dtype) -> ir.Value:
    """The max of `body` over `_r0` in [0, extent), as a chain of element-wise Max ops (nan wins, as in MaxReduce)."""
    steps = [settle(substitute_indices(body, {"_r0": const(r)})) for r in range(extent)]
    value = steps[0]
    for step in steps[1:]:
        value = ir.Apply("Max", (value, step), dtype)
    return value


def without_unread_kernels(program: ir.KernelProgram) -> ir.KernelProgram:
    """`program` without the kernels whose buffers nothing reads (a `where`'s stack, once lowered as a select)."""
    outputs = {buf for buf, _ in program.outputs.values()}
    needed = set(outputs)
    kept = []
    for kernel in reversed(program.kernels):
        if kernel.out in needed:
            kept.append(kernel)
            needed |= ir.buffers_read(kernel)
    return with_kernels(program, kept[::-1])


def lower(graph: Graph) -> ir.KernelProgram:
    return Lowering(graph).lower()


__all__ = ["buffer_name", "const", "lower"]

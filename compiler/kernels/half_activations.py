"""A GPU program (CUDA or Metal) stores the activations a half-precision model rounds to half in that half type.

A bf16 model's graph rounds where PyTorch does (a linear layer's, a norm's or an element-wise op's result is
cast to bf16) and computes in float32 between (luminal/hl/linalg.py widens matmul operands; norms and softmax
widen too). Fusion then cuts the graph into kernels wherever it likes, and a kernel boundary often falls
between the rounding and the widening that follows it: the kernel stores `float(bf16(x))` in a float32 buffer
(4 bytes for a value that needs 2), or stores float32 `x` that every reader rounds to bf16 at once. Either way
the buffer holds (or is only ever used as) values of the half type, so storing it in that type changes no
result: the producer stores the half value, each reader widens what it loads. Buffers shrink by half, and
a GEMM reading one sees a half operand (a widening cast of a half load), which is what its tensor-core kernel
(compiler/cuda/half_operands.py) and cuBLAS (compiler/cuda/library_gemm.py) multiply. Metal runs the same
kernel bodies (compiler/metal/program.py) with such buffers as MSL `half` and `bfloat`: half the bytes to
move on Apple's unified memory too.

Statistics a kernel stores without rounding (a norm's sum of squares, a softmax's max and sum, attention's
accumulators inside its kernel) keep float32: their readers use them in float32. Only temporary buffers change:
inputs, weights and outputs keep the graph's declared types.
"""

from __future__ import annotations

from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.kernels import ir

HALVES = (dt.float16, dt.bfloat16)
MODES = ("auto", "float32")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"activation_dtype must be one of {MODES}, not {mode!r}")
    return mode


def _past_guards(v: ir.Value) -> ir.Value:
    while isinstance(v, ir.Guard):
        v = v.value
    return v


def _widened_half(v: ir.Value) -> dt.DType | None:
    """The half type `v` is a float32 widening of (through guards), or None."""
    v = _past_guards(v)
    if isinstance(v, ir.Apply) and v.op == "Cast" and v.dtype == dt.float32 and v.args[0].dtype in HALVES:
        return v.args[0].dtype
    return None


def _read_roundings(v: ir.Value, found: dict[str, set], rounding: dt.DType | None = None) -> None:
    """For each buffer `v` reads, the type each read is at once rounded to (a cast, through guards), None for a
    read used otherwise, added to `found`."""
    if isinstance(v, (ir.Load, ir.GatherLoad)):
        found.setdefault(v.buffer, set()).add(rounding)
    if isinstance(v, ir.Apply) and v.op == "Cast" and v.dtype in HALVES:
        inner = v.dtype
    elif isinstance(v, ir.Guard):
        inner = rounding
    else:
        inner = None
    for kid in ir.children(v):
        _read_roundings(kid, found, inner)


def _bodies(k: ir.Kernel) -> list[ir.Value]:
    return [k.body] if isinstance(k, ir.LoopKernel) else [k.dest, k.at, k.src]


def half_buffers(p: ir.KernelProgram) -> dict[str, dt.DType]:
    """The float32 temporary buffers that hold only half values, and each one's half type: those whose loop
    kernel stores a widened half value, or whose every read is rounded at once to one half type."""
    reads: dict[str, set] = {}
    for k in p.kernels:
        for body in _bodies(k):
            _read_roundings(body, reads)
    chosen = {}
    outputs = {buffer for buffer, _ in p.outputs.values()}  # "temp" buffers too: an output keeps its graph type
    for k in p.kernels:
        buffer = p.buffers[k.out]
        if not isinstance(k, ir.LoopKernel) or buffer.role != "temp" or buffer.dtype != dt.float32 or k.out in outputs:
            continue
        half = _widened_half(k.body)
        roundings = reads.get(k.out, set())
        if half is None and len(roundings) == 1 and next(iter(roundings)) in HALVES:
            half = next(iter(roundings))
        if half is not None:
            chosen[k.out] = half
    return chosen


def narrowed(v: ir.Value, half: dt.DType) -> ir.Value:
    """`v` rounded to `half`: a widening of a `half` value (through guards) gives that value back, exactly."""
    if isinstance(v, ir.Guard):
        return ir.Guard(v.valid, narrowed(v.value, half), half)
    if isinstance(v, ir.Apply) and v.op == "Cast" and v.args[0].dtype == half and v.dtype in (dt.float32, dt.float64):
        return v.args[0]
    if v.dtype == half:
        return v
    return ir.Apply("Cast", (v,), half)


def _reading_halves(v: ir.Value, halves: dict[str, dt.DType]) -> ir.Value:
    """`v` with each read of a buffer now stored in half widened back to float32 where it is read, and each
    rounding of such a read to its own type left as the plain read."""

    def change(node: ir.Value) -> ir.Value | None:
        if isinstance(node, (ir.Load, ir.GatherLoad)) and node.buffer in halves:
            kids = tuple(_reading_halves(kid, halves) for kid in ir.children(node))
            read = replace(ir.with_children(node, kids), dtype=halves[node.buffer])
            return ir.Apply("Cast", (read,), node.dtype)
        if isinstance(node, ir.Apply) and node.op == "Cast" and node.dtype in HALVES:
            inner = _reading_halves(node.args[0], halves)
            return narrowed(inner, node.dtype) if _widened_half(inner) == node.dtype else replace(node, args=(inner,))
        return None

    return ir.rebuilt(v, change)


def _stored(body: ir.Value, half: dt.DType) -> ir.Value:
    """A kernel's body storing into a `half` buffer. An attention kernel's stays as it is (its generator needs the
    Attend at the top): every store converts its value to the buffer's type, rounding as a cast does."""
    return body if isinstance(_past_guards(body), ir.Attend) else narrowed(body, half)


def store_half_activations(p: ir.KernelProgram) -> ir.KernelProgram:
    """`p` with its temporary buffers that hold only half values stored in their half type (see the module)."""
    halves = half_buffers(p)
    if not halves:
        return p
    kernels = []
    for k in p.kernels:
        if isinstance(k, ir.LoopKernel):
            body = _reading_halves(k.body, halves)
            k = replace(k, body=_stored(body, halves[k.out]) if k.out in halves else body)
        else:
            k = replace(k, **{f: _reading_halves(getattr(k, f), halves) for f in ("dest", "at", "src")})
        kernels.append(k)
    buffers = {name: replace(b, dtype=halves[name]) if name in halves else b for name, b in p.buffers.items()}
    return replace(p, kernels=kernels, buffers=buffers)

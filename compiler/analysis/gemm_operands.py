"""How a GEMM kernel's generated C gets at its operands: read in place, or copied into micro-kernel panels.

Operand A (the M rows) is read in place when it is a float32 load whose index is affine in the rows and the
contraction, contiguous along the contraction (rows of a matrix with some row stride: a linear layer's
activations, attention's queries and probabilities); only a last panel running past the matrix edge is
copied, padded with zero rows, since the micro-kernel always reads whole panels. Anything else (a fused
element-wise producer, a gather, a transposed view) is packed into k-major panels of LM_MR rows; B is
always packed, into panels of LM_NR columns. Packing evaluates the operand's index expressions once per
element; its loop order follows the source's layout, so consecutive reads are adjacent in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal import dtypes as dt
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.affine import affine
from luminal.symbolic import Expr


@dataclass(frozen=True)
class DirectRows:
    """A's element (row, k) is buffer[offset + row * row_stride + k]; offset may use batch indices and symbols."""

    buffer: str
    offset: Expr
    row_stride: Expr


def extent(shape: tuple[Expr, ...], axes: tuple[int, ...]) -> str:
    return " * ".join(f"(int64_t)({shape[j].render_c()})" for j in axes) or "1"


NARROW = 2**31  # positions below this decode in 32-bit arithmetic


def narrow(shape: tuple[Expr, ...], axes: tuple[int, ...]) -> bool:
    """Whether every position over `axes` stays below 2**31 at the symbols' maxima."""
    total = 1
    for j in axes:
        total *= max(int(shape[j].hi), 1)
        if total >= NARROW:
            return False
    return True


def decode(flat: str, shape: tuple[Expr, ...], axes: tuple[int, ...]) -> list[str]:
    """Declare the output index variables of `axes` from their row-major position `flat` (< their product:
    the first axis needs no modulo, the last no division, so a single axis is the position itself).

    Where every position fits in 31 bits the divisions are unsigned 32-bit ones: a GPU has no integer divider,
    and a 64-bit division there is a subroutine of dozens of instructions, a 32-bit one an inline sequence of
    about twenty (x86 divides in 32 bits faster too)."""
    small = narrow(shape, axes)
    kind = "uint32_t" if small else "int64_t"
    lines = []
    for pos, j in enumerate(axes):
        value = f"({kind})({flat})" if small else f"({flat})"
        inner = axes[pos + 1 :]
        if inner:
            divisor = " * ".join(f"(uint32_t)({shape[i].render_c()})" for i in inner) if small else extent(shape, inner)
            value = f"{value} / ({divisor})"
        if pos > 0:
            value = f"{value} % ({kind})({shape[j].render_c()})"
        lines.append(f"const int64_t _i{j} = {f'(int64_t)({value})' if small else value}; (void)_i{j};")
    return lines


def direct_rows(operand: ir.Value, k: str, rows: tuple[int, ...], shape: tuple[Expr, ...]) -> DirectRows | None:
    """How to read A in place, or None when it has to be packed."""
    if not isinstance(operand, ir.Load) or operand.dtype != dt.float32:
        return None
    found = affine(operand.index, [f"_i{j}" for j in rows] + [k])
    if found is None:
        return None
    offset, coefficient = found
    if coefficient[k] != 1:
        return None
    stride = coefficient[f"_i{rows[-1]}"]
    expected = stride
    for j in reversed(rows):  # the M axes flatten row-major: each one's stride is the next one's times its extent
        if coefficient[f"_i{j}"] != expected:
            return None
        expected = expected * shape[j]
    return DirectRows(operand.buffer, offset, stride)


def _k_inner(operand: ir.Value, k: str, rows: tuple[int, ...]) -> bool:
    """Whether packing should walk the contraction innermost: when the source's next element along it lies
    closer than the next row's (B = a transposed matrix, as attention's keys are; A = heads laid out apart,
    where runs along the contraction are contiguous though the index is not affine)."""
    if not isinstance(operand, ir.Load):
        return False
    row = f"_i{rows[-1]}"  # the innermost of the row axes: the next row
    at = operand.index.substitute({row: 0, k: 0})
    along_k = operand.index.substitute({row: 0, k: 1}) - at
    along_row = operand.index.substitute({row: 1, k: 0}) - at
    return along_k.is_const and along_row.is_const and abs(along_k.value) < abs(along_row.value)


def pack_phase(
    emitter_cls, ptrs, operand: ir.Value, k: str, shape, batch, rows, side: str, edge_only=False, pairs=False
):
    """A parallel loop that packs one operand: for each (batch element it reads, panel), the panel's rows (M
    rows of A, N columns of B) over the whole contraction, k-major; rows past the edge pack as zeros. With
    `edge_only`, just A's last panel when it runs past the edge (the rest of A is read in place), one per
    batch element, at LM_MR * K floats each. With `pairs`, int16 panels of the integer GEMM
    (compiler/cpu/int_gemm.py): k-major in pairs of k, over lm_KP (K rounded up to even; an odd K's last slot 0)."""
    ctype, depth, zero = ("int16_t", "lm_KP", "0") if pairs else ("float", "lm_K", "0.0f")
    width, count, total, size, base = (
        ("LM_MR", "lm_mp", "lm_M", "lm_asz", "lm_pa") if side == "a" else ("LM_NR", "lm_np", "lm_N", "lm_bsz", "lm_pb")
    )
    e = emitter_cls(ptrs)
    e.indent = 0
    value = e.emit(operand)
    nb = "lm_NB" if batch else "1"
    if edge_only:
        lines = [
            "    #pragma omp for schedule(static)",
            f"    for (int64_t lm_t = 0; lm_t < (lm_M % LM_MR ? {nb} : 0); lm_t++) {{",
            "      const int64_t lm_bt = lm_t, lm_panel = lm_mp - 1; (void)lm_bt;",
            "      float* lm_block = lm_pa + lm_bt * LM_MR * lm_K;",
        ]
    else:
        lines = [
            "    #pragma omp for schedule(static)",
            f"    for (int64_t lm_t = 0; lm_t < {nb} * {count}; lm_t++) {{",
            f"      const int64_t lm_bt = lm_t / {count}, lm_panel = lm_t % {count}; (void)lm_bt;",
            f"      {ctype}* lm_block = {base} + lm_bt * {size} + lm_panel * {width} * {depth};",
        ]
    lines += ["      " + s for s in decode("lm_bt", shape, batch)]
    # Each row's output indices, decoded once (a row past the edge reads row 0, then packs zero).
    lines += [f"      int64_t lm_at{j}[{width}];" for j in rows]
    lines += [
        f"      uint8_t lm_inside[{width}];",
        f"      for (int64_t lm_w = 0; lm_w < {width}; lm_w++) {{",
        f"        const int64_t lm_row = lm_panel * {width} + lm_w;",
        f"        lm_inside[lm_w] = lm_row < {total};",
    ]
    lines += ["        " + s for s in decode(f"lm_row < {total} ? lm_row : 0", shape, rows)]
    lines += [f"        lm_at{j}[lm_w] = _i{j};" for j in rows]
    lines += ["      }"]
    loops = [f"for (int64_t {k} = 0; {k} < lm_K; {k}++) {{", f"for (int64_t lm_w = 0; lm_w < {width}; lm_w++) {{"]
    if _k_inner(operand, k, rows):
        loops.reverse()
    lines += ["      " + loops[0], "        " + loops[1]]
    lines += [f"          const int64_t _i{j} = lm_at{j}[lm_w];" for j in rows]
    lines += ["          " + s.strip() for s in e.lines]
    at = f"({k} >> 1) * 2 * {width} + 2 * lm_w + ({k} & 1)" if pairs else f"{k} * {width} + lm_w"
    lines += [f"          lm_block[{at}] = lm_inside[lm_w] ? {value} : {zero};", "        }", "      }"]
    if pairs:
        lines += [f"      for (int64_t lm_w = 0; lm_w < (lm_K & 1 ? {width} : 0); lm_w++)"]
        lines += [f"        lm_block[(lm_K >> 1) * 2 * {width} + 2 * lm_w + 1] = 0;"]
    return lines + ["    }"]

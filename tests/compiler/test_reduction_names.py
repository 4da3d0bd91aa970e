"""Fresh reduction numbers (compiler/kernels/reduction_names.py): above every `_r<n>` the program's kernels use, an
attention's variables and a scatter's values included."""

from luminal import dtypes as dt
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.reduction_names import fresh_reduction_numbers, highest_reduction_number
from luminal.symbolic import as_expr, var


def _sum(name: str, body: ir.Value) -> ir.Reduce:
    return ir.Reduce("sum", name, as_expr(4), body, dt.float32)


def _load(buffer: str, index) -> ir.Load:
    return ir.Load(buffer, as_expr(index), dt.float32)


def test_numbers_start_above_the_highest_in_any_kernel():
    inner = _sum("_r5", _load("x", var("_r5", 0, 3)))
    loop = ir.LoopKernel("k0", "y", (as_expr(2),), _sum("_r12", inner))
    scatter = ir.ScatterKernel(
        "k1", "z", (as_expr(8),), _load("z", var("_i0", 0, 7)), (as_expr(2),),
        ir.Const(0, dt.int64), _sum("_r1003", _load("y", var("_r1003", 0, 3))), as_expr(8),
    )  # fmt: skip
    program = ir.KernelProgram(kernels=[loop, scatter])
    assert highest_reduction_number(program) == 1003
    numbers = fresh_reduction_numbers(program)
    assert [next(numbers), next(numbers)] == [1004, 1005]


def test_an_attentions_variables_count_and_other_names_do_not():
    q = _load("q", var("_r40", 0, 15))
    attend = ir.Attend("_r77", as_expr(9), "_r40", as_expr(16), q, q, q, ir.Const(0, dt.float32), 0.25, True,
                       dt.float32)  # fmt: skip
    program = ir.KernelProgram(kernels=[ir.LoopKernel("k0", "o", (as_expr(1), as_expr(16)), attend)])
    assert highest_reduction_number(program) == 77
    plain = ir.KernelProgram(kernels=[ir.LoopKernel("k0", "o", (as_expr(3),), _load("x", var("_i0", 0, 2)))])
    assert next(fresh_reduction_numbers(plain)) == 0

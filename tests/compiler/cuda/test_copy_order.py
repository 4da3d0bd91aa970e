"""A copy into an output moves up beside a thread kernel over the same elements (compiler/gpu/copy_order.py):
the earliest one after what it reads is written, and only one it is independent of; a copy with no such partner
stays where it was."""

from luminal import dtypes as dt
from luminal.compiler.gpu.copy_order import copies_beside_partners
from luminal.compiler.kernels import ir
from luminal.symbolic import const
from luminal.view import idx

SHAPE = (const(3), const(4))
AT = idx(0, 3) * 4 + idx(1, 4)


def _times(buffer: str, k: float) -> ir.Value:
    return ir.Apply("Mul", (ir.Load(buffer, AT, dt.float32), ir.Const(k, dt.float32)), dt.float32)


def _order(*kernels: ir.LoopKernel, outputs: tuple[str, ...]) -> list[str]:
    """The kernels' names in the order the pass leaves them."""
    names = {"x", "y", *(k.out for k in kernels)}
    buffers = {n: ir.Buffer(n, dt.float32, const(12), "input" if n in "xy" else "temp") for n in names}
    program = ir.KernelProgram(buffers, list(kernels), inputs={"x": "x", "y": "y"},
                               outputs={n: (n, SHAPE) for n in outputs})  # fmt: skip
    return [k.name for k in copies_beside_partners(program).kernels]


def test_a_copy_moves_beside_the_earliest_partner_after_its_source():
    source = ir.LoopKernel("k1", "a", SHAPE, _times("x", 2.0))
    partner = ir.LoopKernel("k2", "p", SHAPE, _times("y", 3.0))
    later = ir.LoopKernel("k3", "q", SHAPE, _times("p", 4.0))
    copy = ir.LoopKernel("k4", "c", SHAPE, _times("a", 5.0))
    assert _order(source, partner, later, copy, outputs=("c", "q")) == ["k1", "k2", "k4", "k3"]
    # a copy that reads the later kernel's output runs after it: it stays
    reading = ir.LoopKernel("k4", "c", SHAPE, _times("q", 5.0))
    assert _order(source, partner, later, reading, outputs=("c",)) == ["k1", "k2", "k3", "k4"]


def test_a_copy_without_a_partner_stays():
    source = ir.LoopKernel("k1", "a", SHAPE, _times("x", 2.0))
    wide = ir.LoopKernel("k2", "w", (const(12),), ir.Load("y", idx(0, 12), dt.float32))  # other elements
    copy = ir.LoopKernel("k3", "c", SHAPE, _times("a", 5.0))
    assert _order(source, wide, copy, outputs=("c", "w")) == ["k1", "k2", "k3"]
    temp = ir.LoopKernel("k3", "c", SHAPE, _times("a", 5.0))
    partner = ir.LoopKernel("k2", "p", SHAPE, _times("y", 3.0))
    last = ir.LoopKernel("k4", "o", SHAPE, _times("c", 1.0))
    assert _order(source, partner, temp, last, outputs=("o",)) == ["k1", "k2", "k3", "k4"]  # not an output

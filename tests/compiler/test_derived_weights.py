"""Which kernels run once at load (compiler/kernels/derived_weights.py): those that read weights alone, at sizes and
positions known at compile time, into a temp at most twice what they read; what they write gets role
`derived`, and the cost of a run leaves them out."""

import luminal as lm
from luminal.compiler.analysis.cost import estimate_program
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.derived_weights import ROLE, at_load, derive_at_load
from luminal.compiler.kernels.lower import lower


def _derived(g: lm.Graph) -> tuple[ir.KernelProgram, list[str]]:
    """The program lowered (a kernel per node) and marked, and the names of its kernels that run at load."""
    p = derive_at_load(lower(g))
    return p, [k.name for k in p.kernels if at_load(k, p.buffers)]


def _ops(p: ir.KernelProgram, names: list[str]) -> list[str]:
    return [type(k.body.op).__name__ if isinstance(k.body, ir.Apply) else type(k.body).__name__
            for k in p.kernels if k.name in names]  # fmt: skip


def test_a_chain_of_kernels_over_weights_runs_at_load_and_what_reads_an_input_does_not():
    g = lm.Graph()
    w, v, x = g.weight("w", (4, 3)), g.weight("v", (4, 3)), g.input("x", (4, 3))
    (x + (w * 2.0 + v)).output("y")
    p, names = _derived(g)
    assert len(names) == 2  # w * 2.0, then + v: the second reads the first's derived buffer
    for k in p.kernels:
        buf = p.buffers[k.out]
        assert (buf.role == ROLE) == (k.name in names)
        if k.name in names:
            assert buf.label == k.name
    assert [k.name for k in p.kernels if not at_load(k, p.buffers)] == [p.kernels[-1].name]  # the add of x


def test_a_run_leaves_out_what_runs_at_load():
    g = lm.Graph()
    x, w = g.input("x", (4, 3)), g.weight("w", (4, 3))
    (x + w * 2.0).output("y")
    p, names = _derived(g)
    cost = estimate_program(p, "h100")
    assert [k.name for k in cost.kernels] == [k.name for k in p.kernels if k.name not in names]
    assert cost.bytes_read == 2 * 4 * 3 * 4  # x and the derived buffer: not the weight


def test_what_a_run_must_compute_stays_in_the_run():
    n = lm.sym("n", max=16)
    g = lm.Graph()
    w = g.weight("w", (16, 3))
    (w * 2.0).output("an_output")  # a program output is written by every run
    (w[:n] * 3.0).sum(0).output("sized_at_run_time")
    (w[n - 1 : n] * 4.0).sum(0).output("read_at_a_run_time_position")
    assert _derived(g)[1] == []


def test_a_broadcast_larger_than_twice_what_it_reads_stays_in_the_run():
    g = lm.Graph()
    x, w = g.input("x", (4, 100)), g.weight("w", (4, 1))
    wide, narrow = g.input("z", (4, 2)), g.weight("u", (4, 1))
    (x + w.expand((4, 100)) * 2.0).output("wide")  # 400 floats from 4
    (wide + narrow.expand((4, 2)) * 2.0).output("narrow")  # 8 floats from 4: twice what it reads
    p, names = _derived(g)
    assert [p.buffers[k.out].size.evaluate({}) for k in p.kernels if k.name in names] == [8]


def test_what_runs_at_load_is_charged_as_load_work_and_resident_memory():
    g = lm.Graph()
    x, w, unused_at_run = g.input("x", (4, 3)), g.weight("w", (4, 3)), g.weight("v", (4, 3))
    (x + w + unused_at_run * 2.0).output("y")
    p, names = _derived(g)
    cost = estimate_program(p, "h100")
    assert len(names) == 1 and cost.load_seconds > 0
    # w and the derived buffer stay resident; v, read only by the load's kernel, is let go by the runtime
    assert cost.resident_bytes == 2 * 4 * 3 * 4

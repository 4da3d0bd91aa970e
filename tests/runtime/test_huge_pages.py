"""A CPU program's packed weight panels lie in one mapping advised for 2 MiB pages (runtime/huge_pages.py): zeroed,
cache-line aligned, apart from each other, and eligible for transparent huge pages where the kernel offers them."""

from pathlib import Path

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.runtime import huge_pages

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _thp_eligible(address: int) -> bool:
    """The THPeligible flag of the mapping holding `address` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(v, 16) for v in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "THPeligible:":
            return line.split()[1] == "1"
    raise AssertionError(f"no mapping holds {address:#x}")


def test_arrays_are_zeroed_aligned_and_apart():
    sizes = {"a": (3, np.float32), "b": (300_000, np.float32), "c": (700_001, np.int32), "d": (5, np.uint16)}
    arrays = huge_pages.zeroed_together(sizes)
    spans = []
    for name, (count, dtype) in sizes.items():
        a = arrays[name]
        assert a.dtype == dtype and a.shape == (count,) and a.flags.writeable and not a.any()
        assert a.ctypes.data % huge_pages.ALIGN == 0
        spans.append((a.ctypes.data, a.ctypes.data + a.nbytes))
        a[:] = 7  # each is its own memory: writing one leaves the others zero
    spans.sort()
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert all((arrays[n] == 7).all() for n in sizes)


@pytest.mark.skipif(
    not THP.exists() or "[never]" in THP.read_text() or "THPeligible:" not in Path("/proc/self/smaps").read_text(),
    reason="no transparent huge pages here, or a kernel that does not say which mappings may have them",
)
def test_a_programs_packed_panels_may_lie_on_huge_pages():
    g = lm.Graph()
    x = g.input("x", (lm.sym("b", max=8), 20, 512))
    w = g.weight("w", (1536, 512))  # 3 MiB of panels: under numpy's own 4 MiB threshold for huge pages
    g.bind({"w": np.random.default_rng(0).standard_normal((1536, 512)).astype(np.float32)})
    F.linear(x, w).output("y")
    prog = lm.compile(g, "cpu", cache=False)
    exe = prog.executable
    packed = [a for n, a in exe.fixed.items() if prog.kernels.buffers[n].role == "packed"]
    assert packed and all(_thp_eligible(a.ctypes.data) for a in packed)
    xv = np.random.default_rng(1).standard_normal((2, 20, 512)).astype(np.float32)
    np.testing.assert_allclose(prog.run({"x": xv})["y"], lm.run(g, {"x": xv})["y"], rtol=1e-4, atol=1e-4)

"""A kernel's position decoded into its axes (compiler/analysis/gemm_operands.py `decode`): in 32-bit arithmetic where
every position fits in 31 bits at the symbols' maxima, in 64-bit elsewhere, and the same indices either way."""

import subprocess

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.analysis.gemm_operands import decode, narrow
from luminal.symbolic import as_expr

SEQ = lm.sym("seq", max=512)
NARROW_SHAPE = (lm.sym("batch", max=32), SEQ, as_expr(384))
WIDE_SHAPE = (lm.sym("blocks", max=1 << 24), as_expr(8), SEQ, as_expr(64))  # a paged KV pool: 2**42 at most


def test_positions_that_fit_in_31_bits_divide_in_32():
    assert narrow(NARROW_SHAPE, (0, 1, 2)) and not narrow(WIDE_SHAPE, (0, 1, 2, 3))
    assert narrow(WIDE_SHAPE, (1, 2, 3))  # the axes decoded, not the whole shape, decide
    assert all("uint32_t" in line for line in decode("lm_flat", NARROW_SHAPE, (0, 1, 2)))
    assert not any("uint32_t" in line for line in decode("lm_flat", WIDE_SHAPE, (0, 1, 2, 3)))


@pytest.mark.needs("g++")
@pytest.mark.parametrize("shape", [NARROW_SHAPE, WIDE_SHAPE], ids=["narrow", "wide"])
def test_the_indices_are_the_row_major_ones(shape, tmp_path):
    axes = tuple(range(len(shape)))
    sizes = {"batch": 3, "seq": 5, "blocks": 7}
    dims = [int(d.evaluate(sizes)) for d in shape]
    program = [
        "#include <cstdint>",
        "#include <cstdio>",
        "int main() {",
        *(f"  const int64_t {name} = {value};" for name, value in sizes.items()),
        f"  for (int64_t lm_flat = 0; lm_flat < {int(np.prod(dims))}; lm_flat++) {{",
        *("    " + line for line in decode("lm_flat", shape, axes)),
        f'    printf("{" ".join(["%lld"] * len(axes))}\\n", {", ".join(f"(long long)_i{j}" for j in axes)});',
        "  }",
        "}",
    ]
    source, binary = tmp_path / "decode.cpp", tmp_path / "decode"
    source.write_text("\n".join(program))
    subprocess.run(["g++", "-O1", "-o", str(binary), str(source)], check=True)
    got = np.loadtxt(subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.splitlines())
    want = np.stack(np.unravel_index(np.arange(int(np.prod(dims))), dims), axis=1)
    assert np.array_equal(got.astype(np.int64), want)

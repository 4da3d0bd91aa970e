"""The one helper that checks a luminal op against PyTorch (CPU).

    check("sigmoid", torch.sigmoid, lambda t: t.sigmoid(), shapes=[(45, 65)])

runs the op three ways against torch on the same random data: on plain inputs, on non-contiguous inputs
(each input is declared transposed and permuted back, so the op reads a strided view), and with the
leading dim symbolic (`lm.sym`), bound only when the graph runs. `tests/op_coverage.py` lists every op
name passed to `check` across the suite.

Each test of the op suite runs once per target (tests/ops/conftest.py), by default the four of `make test`:
"reference", the interpreter; "cpu", every variant through `lm.compile(g, target="cpu")` (generated C);
"h100-shim", through `lm.compile(g, target="h100")`, the generated CUDA run on the CPU by the host shim
(runtime/cuda/shim.py) after NVRTC has compiled the same source for sm_80 and sm_90, as the runtime would on those
GPUs, and ptxas reported no register spills in any kernel; "m2-shim", through `lm.compile(g, target="m2")`, the
generated MSL run on the CPU by the Metal shim (runtime/metal/shim.py). LUMINAL_OPCHECK_TARGET (a comma list)
picks others: "h100-shim-buckets" (grids and arena of the dims' shape bucket, as a CUDA graph launches) or "h100"
(a real GPU through the CUDA runtime), and the compiled targets check against the same torch results and
tolerances.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np
import pytest
import torch

import luminal as lm

TOLERANCE = {  # (rtol, atol) by dtype: float32 to 1e-5, float64 to 1e-12, lower precisions to their usual ones
    "float64": (1e-12, 1e-12),
    "float32": (1e-5, 1e-5),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
}
REDUCTION_RTOL = 1e-4
DEFAULT_TARGETS = ("reference", "cpu", "h100-shim", "m2-shim")
KNOWN_TARGETS = (*DEFAULT_TARGETS, "h100-shim-buckets", "h100")
TARGET = "reference"  # the running test's target (tests/ops/conftest.py sets it)


def targets() -> tuple[str, ...]:
    """The targets each op test runs on: LUMINAL_OPCHECK_TARGET's (a comma list), else DEFAULT_TARGETS."""
    chosen = tuple(t.strip() for t in os.environ.get("LUMINAL_OPCHECK_TARGET", "").split(",") if t.strip())
    unknown = [t for t in chosen if t not in KNOWN_TARGETS]
    if unknown:
        raise ValueError(f"LUMINAL_OPCHECK_TARGET: unknown target(s) {unknown}; known: {', '.join(KNOWN_TARGETS)}")
    return chosen or DEFAULT_TARGETS


def compiled() -> bool:
    """Whether the running test's checks run compiled programs (every target but the interpreter)."""
    return TARGET != "reference"


def run_compiled(g: lm.Graph, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`g` compiled for the opcheck target and run on `feed`."""
    if TARGET.startswith("h100-shim"):
        from luminal.runtime.cuda import nvrtc
        from luminal.runtime.cuda.shim import ShimRuntime

        program = lm.compile(g, target="h100")
        for arch in ("80", "90"):  # what the g++ build of the shim accepts, the device compile must accept too
            spilling = [u for u in nvrtc.kernel_usage(program.source, arch) if u.spill_bytes]
            assert not spilling, f"kernels spill registers on sm_{arch}: {spilling}"
        return ShimRuntime(buckets=TARGET.endswith("buckets")).load(program).run(feed)
    if TARGET == "m2-shim":
        from luminal.runtime.metal.shim import MetalShimRuntime

        return MetalShimRuntime().load(lm.compile(g, target="m2")).run(feed)
    return lm.compile(g, target=TARGET).run(feed)  # h100: RuntimeUnavailable where CuPy sees no device


def _random(shape: Sequence[int], dtype: str, low: float, high: float, rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith(("int", "uint")):  # the range clipped to the type's: a default (-2, 2) suits unsigned too
        info = np.iinfo(dtype)
        lo, hi = max(int(low), int(info.min)), min(int(high), int(info.max))
        return rng.integers(
            lo, hi, size=shape, dtype=np.uint64 if dtype == "uint64" else np.int64, endpoint=True
        ).astype(dtype)
    if dtype == "float64":
        return rng.uniform(low, high, size=shape)  # all 53 bits, not float32's values widened
    data = rng.uniform(low, high, size=shape).astype(np.float32)
    return data.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else data.astype(dtype)


def to_torch(a: np.ndarray) -> torch.Tensor:
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def from_torch(t: Any) -> np.ndarray:
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()


def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _record(g: lm.Graph, prefix: str, lm_fn, arrays, decl_shapes, permuted: bool, feed: dict) -> list[str]:
    """Record `lm_fn` on inputs named `<prefix>in<k>` into `g` (their values into `feed`); the output names."""
    tensors = []
    for k, (a, decl) in enumerate(zip(arrays, decl_shapes)):
        name = f"{prefix}in{k}"
        if permuted and a.ndim >= 2:
            order = list(range(a.ndim))[::-1]
            t = g.input(name, [decl[o] for o in order], dtype=lm.dtypes.dtype_of(a.dtype)).permute(order)
            feed[name] = np.ascontiguousarray(a.transpose(order))
        else:
            t = g.input(name, decl, dtype=lm.dtypes.dtype_of(a.dtype))
            feed[name] = a
        tensors.append(t)
    outs = _as_list(lm_fn(*tensors))
    names = [f"{prefix}out{k}" for k in range(len(outs))]
    for o, name in zip(outs, names):
        o.output(name)
    return names


def _run_lm(lm_fn, arrays, decl_shapes, permuted: bool) -> list[np.ndarray]:
    g, feed = lm.Graph(), {}
    names = _record(g, "", lm_fn, arrays, decl_shapes, permuted, feed)
    result = run_compiled(g, feed) if compiled() else lm.run(g, feed)
    return [result[name] for name in names]


class CompiledBatch:
    """The variants checked during one test, recorded into shared graphs compiled once each (compiled targets).

    A program per variant is ~3,600 runs of the C compiler for the suite (15 minutes on 2 cores); one per test
    is a few hundred. A graph holds at most LIMIT variants: tests that sweep many ops or dtypes would otherwise
    hand the C compiler megabytes at once. Variants keep their own input, output and symbol names, so they
    cannot interact; each failing variant is reported by op and variant name when the test ends."""

    LIMIT = 48

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.count = 0  # variants recorded so far: numbers their names
        self.unsupported = 0  # variants the target cannot run, left out
        self._start()

    def _start(self) -> None:
        self.graph, self.feed = lm.Graph(), {}
        self.checks: list[tuple[list[str], list[np.ndarray], str, float, float, str]] = []

    def add(self, name, lm_fn, arrays, decl, permuted, want, rtol, atol, variant) -> None:
        if TARGET == "m2-shim" and any(np.asarray(a).dtype == np.float64 for a in [*arrays, *want]):
            self.unsupported += 1  # MSL has no double: Metal refuses a float64 program by design (dialects.py)
            return
        self.count += 1
        outputs = _record(self.graph, f"v{self.count}_", lm_fn, arrays, decl, permuted, self.feed)
        assert len(outputs) == len(want), f"{name} ({variant}): {len(outputs)} outputs, torch gives {len(want)}"
        self.checks.append((outputs, want, name, rtol, atol, variant))
        if len(self.checks) >= self.LIMIT:
            self._run()

    def _run(self) -> None:
        if self.checks:
            result = run_compiled(self.graph, self.feed)
            for outputs, want, name, rtol, atol, variant in self.checks:
                for out, w in zip(outputs, want):
                    try:
                        compare(name, result[out], w, rtol, atol, variant)
                    except AssertionError as e:
                        self.failures.append(str(e))
        self._start()

    def finish(self) -> None:
        self._run()
        if self.unsupported and not self.count:
            pytest.skip(f"{TARGET} cannot run any of this test's {self.unsupported} variants (float64)")
        assert not self.failures, f"{len(self.failures)} compiled check(s) failed:\n" + "\n".join(self.failures)


_batch: CompiledBatch | None = None  # the current test's, while tests/ops/conftest.py has one open


@contextlib.contextmanager
def compiled_batch():
    """Collect the checks of the enclosed code into one compiled program, run and compared at the end."""
    global _batch
    _batch = CompiledBatch()
    try:
        yield
    except BaseException:
        _batch = None
        raise
    batch, _batch = _batch, None
    batch.finish()


def _symbolic_shapes(arrays: list[np.ndarray], symbol: str = "n0") -> list[list[Any]] | None:
    """Replace the leading dim of the highest-rank inputs (when > 1) by one symbol; None if none fits."""
    rank = max((a.ndim for a in arrays), default=0)
    lead = [a.shape[0] for a in arrays if a.ndim == rank and rank > 0]
    if not lead or lead[0] <= 1 or any(n != lead[0] for n in lead):
        return None
    n0 = lm.sym(symbol, max=4096)
    return [[n0, *a.shape[1:]] if a.ndim == rank else list(a.shape) for a in arrays]


def compare(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float, variant: str) -> None:
    where = f"{name} ({variant})"
    assert got.shape == want.shape, f"{where}: shape {got.shape}, torch gives {want.shape}"
    got_dtype = "bfloat16" if got.dtype == ml_dtypes.bfloat16 else str(got.dtype)
    want_dtype = "bfloat16" if want.dtype == ml_dtypes.bfloat16 else str(want.dtype)
    assert got_dtype == want_dtype, f"{where}: dtype {got_dtype}, torch gives {want_dtype}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=where)
    else:
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True, err_msg=where
        )


def check(
    name: str,
    torch_fn: Callable,
    lm_fn: Callable,
    shapes: Sequence[Sequence[int]] = (),
    *,
    inputs: Sequence[np.ndarray] | None = None,
    dtype: str = "float32",
    low: float = -2.0,
    high: float = 2.0,
    rtol: float | None = None,
    atol: float | None = None,
    reduction: bool = False,
    noncontiguous: bool = True,
    symbolic: bool = True,
    seed: int = 0,
) -> None:
    """Check `lm_fn` against `torch_fn` on random inputs of `shapes` (or the given `inputs`)."""
    rng = np.random.default_rng(seed)
    arrays = list(inputs) if inputs is not None else [_random(s, dtype, low, high, rng) for s in shapes]
    want = [from_torch(t) for t in _as_list(torch_fn(*[to_torch(a) for a in arrays]))]
    base_rtol, base_atol = TOLERANCE.get(dtype, (1e-5, 1e-5))
    if reduction:
        base_rtol, base_atol = max(base_rtol, REDUCTION_RTOL), max(base_atol, REDUCTION_RTOL)
    rtol = base_rtol if rtol is None else rtol
    atol = base_atol if atol is None else atol

    variants = [("contiguous", [list(a.shape) for a in arrays], False)]
    if noncontiguous and any(a.ndim >= 2 for a in arrays):
        variants.append(("non-contiguous", [list(a.shape) for a in arrays], True))
    batch = _batch
    symbol = f"n0_{batch.count}" if batch is not None else "n0"  # variants in one graph bind their own
    sym_shapes = _symbolic_shapes(arrays, symbol) if symbolic else None
    if sym_shapes is not None:
        variants.append(("symbolic", sym_shapes, False))
    for variant, decl, permuted in variants:
        if batch is not None:
            batch.add(name, lm_fn, arrays, decl, permuted, want, rtol, atol, variant)
            continue
        got = _run_lm(lm_fn, arrays, decl, permuted)
        assert len(got) == len(want), f"{name} ({variant}): {len(got)} outputs, torch gives {len(want)}"
        for g_, w_ in zip(got, want):
            compare(name, g_, w_, rtol, atol, variant)

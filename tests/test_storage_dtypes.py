"""int4, uint4, int2, uint2 (ONNX's sub-byte integers) and the 8- and 4-bit floats: storage types the reference
interpreter reads, writes and casts (integers wrapping modulo 2^bits as every integer cast does, floats rounded to
nearest even without saturating); any other op, a compiled target and a graph file's weights refuse them by name."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal import dtypes as dt
from luminal.graph_file import GraphFileError

STORAGE = tuple(d for d in dt.STORAGE_ONLY if d.is_int)


def _wrapped(values: np.ndarray, d: dt.DType) -> np.ndarray:
    """values (integers) wrapped into d's range: the expected result, computed apart from ml_dtypes."""
    return np.array([d.wrap(int(v)) for v in values.ravel()]).reshape(values.shape)


@pytest.mark.parametrize("d", STORAGE, ids=lambda d: d.name)
def test_casts_in_wrap_and_casts_out_are_exact(d):
    g = lm.Graph()
    f, i = g.input("f", (8,)), g.input("i", (8,), dtype=lm.int64)
    f.to(d).output("from_float")
    i.to(d).output("from_int")
    q = g.input("q", (8,), dtype=d)
    q.to("int8").output("to_int8")
    q.to("float32").output("to_float")
    floats = np.array([-9.5, 8.7, -8.2, 15.0, 16.0, 2.5, -0.9, 3.0], np.float32)
    ints = np.array([-9, 8, 300, -300, 1, 0, 2**40, -1], np.int64)
    stored = np.array([d.min, d.max, 0, 1, d.max - 1, d.min, 1, 0], np.int64)
    out = lm.run(g, {"f": floats, "i": ints, "q": stored.astype(d.np)})
    assert out["from_float"].dtype == d.np and out["from_int"].dtype == d.np
    np.testing.assert_array_equal(out["from_float"].astype(np.int64), _wrapped(np.trunc(floats).astype(np.int64), d))
    np.testing.assert_array_equal(out["from_int"].astype(np.int64), _wrapped(ints, d))
    np.testing.assert_array_equal(out["to_int8"], stored.astype(np.int8))
    np.testing.assert_array_equal(out["to_float"], stored.astype(np.float32))


@pytest.mark.parametrize("d", dt.STORAGE_FLOATS, ids=lambda d: d.name)
def test_float_casts_round_to_nearest_even_without_saturating(d):
    g = lm.Graph()
    g.input("f", (9,)).to(d).output("narrow")
    g.input("q", (9,), dtype=d).to("float32").output("wide")
    top = float(ml_dtypes.finfo(d.np).max)
    f = np.array([0.3, -1.7, top, -top, top * 4, np.inf, np.nan, 1e-9, 2.5], np.float32)
    out = lm.run(g, {"f": f, "q": f.astype(d.np)})
    want = f.astype(d.np)  # ml_dtypes: out of range is inf where the type has one, else nan
    assert out["narrow"].dtype == d.np
    np.testing.assert_array_equal(out["narrow"].astype(np.float32), want.astype(np.float32))
    np.testing.assert_array_equal(out["wide"], want.astype(np.float32))
    if d != dt.float4_e2m1fn:  # (which has no nan)
        assert np.isnan(out["narrow"].astype(np.float32)[6]) and np.isnan(out["wide"][6])


def test_ranges_and_names():
    assert [(d.min, d.max) for d in STORAGE] == [(-8, 7), (0, 15), (-2, 1), (0, 3)]
    assert dt.dtype_of("int4") == dt.int4 and dt.dtype_of(np.dtype(ml_dtypes.uint2)) == dt.uint2


@pytest.mark.parametrize("op", ["add", "mul", "lt", "amax", "neg"])  # (sum casts to int64 first, as torch)
@pytest.mark.parametrize("d, wider", [(dt.uint4, "uint8"), (dt.int2, "int8"), (dt.float8_e5m2, "float32")])
def test_any_other_op_is_refused_by_name(op, d, wider):
    g = lm.Graph()
    x = g.input("x", (4,), dtype=d)
    with pytest.raises(lm.DTypeError, match=f"{d.name} is a storage type .* cast it to {wider} first"):
        getattr(lm.functional, op)(*([x, x] if op in ("add", "mul", "lt") else [x]))


def test_compiled_targets_and_graph_file_weights_refuse_them(tmp_path):
    g = lm.Graph()
    g.input("x", (4,), dtype=lm.dtypes.int4).to("int8").output("y")
    with pytest.raises(lm.DTypeError, match="compile: int4 values are for the reference interpreter only"):
        lm.compile(g, "cpu", cache=False)
    lm.save(g, tmp_path / "in.lgraph")  # an input's dtype is a name in graph.json: it round-trips
    x = np.array([7, -8, 0, 1], ml_dtypes.int4)
    np.testing.assert_array_equal(lm.run(lm.load(tmp_path / "in.lgraph"), {"x": x})["y"], [7, -8, 0, 1])
    g.weight("w", (2,), dtype=lm.dtypes.int4).to("int8").output("z")
    g.bind({"w": np.array([1, -2], ml_dtypes.int4)})
    with pytest.raises(GraphFileError, match="weight 'w' is int4, which a graph file cannot store"):
        lm.save(g, tmp_path / "w.lgraph")

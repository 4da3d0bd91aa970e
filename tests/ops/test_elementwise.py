"""Element-wise arithmetic, math, rounding, powers and conversions against PyTorch (values and dtypes)."""

from operator import methodcaller

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.functional as F
from tests.opcheck import check

# Special values every unary op must treat as torch does (nan, infinities, signed zero, ties, huge, tiny).
SPECIAL = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-30, 3.5, -3.5, 1e-6, 7e6],
    np.float32,
)

UNARY = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan"]
UNARY += ["tanh", "erf", "abs", "sign", "neg", "square", "floor", "ceil", "trunc", "round", "frac"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_unary(dtype):
    # one line per op; each range avoids the domain's edges (special values are tested below)
    kw = {"shapes": [(5, 7)], "dtype": dtype}
    check("exp", torch.exp, lambda x: x.exp(), low=-4, high=4, **kw)
    check("exp2", torch.exp2, lambda x: x.exp2(), low=-4, high=4, **kw)
    check("expm1", torch.expm1, lambda x: x.expm1(), low=-3, high=3, **kw)
    check("log", torch.log, lambda x: x.log(), low=0.01, high=5, **kw)
    check("log2", torch.log2, lambda x: x.log2(), low=0.01, high=5, **kw)
    check("log10", torch.log10, lambda x: x.log10(), low=0.01, high=5, **kw)
    check("log1p", torch.log1p, lambda x: x.log1p(), low=-0.9, high=5, **kw)
    check("sqrt", torch.sqrt, lambda x: x.sqrt(), low=0, high=5, **kw)
    check("rsqrt", torch.rsqrt, lambda x: x.rsqrt(), low=0.01, high=5, **kw)
    check("reciprocal", torch.reciprocal, lambda x: x.reciprocal(), low=0.1, high=5, **kw)
    check("sin", torch.sin, lambda x: x.sin(), low=-7, high=7, **kw)
    check("cos", torch.cos, lambda x: x.cos(), low=-7, high=7, **kw)
    check("tan", torch.tan, lambda x: x.tan(), low=-1.2, high=1.2, **kw)
    check("tanh", torch.tanh, lambda x: x.tanh(), low=-4, high=4, **kw)
    erf_tolerance = {"atol": 2e-7} if dtype == "float64" else {}  # erf's approximation (1.5e-7) in float64 too
    check("erf", torch.erf, lambda x: x.erf(), low=-3, high=3, **kw, **erf_tolerance)
    check("abs", torch.abs, lambda x: abs(x), **kw)
    check("sign", torch.sign, lambda x: x.sign(), **kw)
    check("neg", torch.neg, lambda x: -x, **kw)
    check("square", torch.square, lambda x: x.square(), **kw)
    check("floor", torch.floor, lambda x: x.floor(), low=-5, high=5, **kw)
    check("ceil", torch.ceil, lambda x: x.ceil(), low=-5, high=5, **kw)
    check("trunc", torch.trunc, lambda x: x.trunc(), low=-5, high=5, **kw)
    check("round", torch.round, lambda x: x.round(), low=-5, high=5, **kw)
    check("frac", torch.frac, lambda x: x.frac(), low=-5, high=5, **kw)


@pytest.mark.parametrize("name", [u for u in UNARY if u not in ("tan", "sin", "cos")])
def test_unary_special_values(name):
    # sin/cos/tan of 1e30 depend on the argument reduction; every other op is defined exactly here
    check(name, getattr(torch, name), methodcaller(name), inputs=[SPECIAL])


def test_trig_special_values():
    small = SPECIAL[np.isnan(SPECIAL) | (np.abs(SPECIAL) < 1e4)]
    for name in ("sin", "cos", "tan"):
        check(name, getattr(torch, name), methodcaller(name), inputs=[small])


def test_erf_accuracy_over_a_dense_range():
    x = np.linspace(-6, 6, 4001, dtype=np.float32)
    check("erf", torch.erf, F.erf, inputs=[x], atol=1e-6, rtol=0)


def test_expm1_log1p_tiny_arguments_keep_relative_accuracy():
    x = np.array([1e-10, -1e-10, 3e-8, -3e-8, 1e-5, -1e-5, 1e-3], np.float32)
    check("expm1", torch.expm1, F.expm1, inputs=[x], rtol=1e-6, atol=0)
    check("log1p", torch.log1p, F.log1p, inputs=[x], rtol=1e-6, atol=0)


def test_tanh_keeps_relative_accuracy_near_zero():
    # 1 - 2 / (e^2x + 1) alone cancels there: tanh(1e-5) came out 1.0014e-5
    tiny = np.float32([1e-30, -1e-20, 1e-7, -1e-6, 1e-5, -3e-4, 0.01, 0.2499, 0.2501])
    dense = np.linspace(-3, 3, 4001, dtype=np.float32)
    check("tanh", torch.tanh, F.tanh, inputs=[np.concatenate([tiny, dense])], rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_unary_ops_stay_exact(dtype):
    for name in ("abs", "neg", "sign", "square", "floor", "ceil", "trunc", "round"):
        check(name, getattr(torch, name), methodcaller(name), shapes=[(4, 5)], dtype=dtype, low=-9, high=9)
    for name in ("exp", "sqrt", "sin", "reciprocal"):  # float functions of integers give float32
        check(name, getattr(torch, name), methodcaller(name), shapes=[(4, 5)], dtype=dtype, low=1, high=9)


def test_integer_extremes():
    big = np.array([2**31 - 1, -(2**31) + 1, 0, -5, 123456789], np.int32)
    check("abs", torch.abs, F.abs, inputs=[big])
    check("sign", torch.sign, F.sign, inputs=[big])
    check("neg", torch.neg, F.neg, inputs=[big])


def test_bool_unary():
    check("sign", torch.sign, F.sign, shapes=[(3, 4)], dtype="bool")
    check("square", torch.square, F.square, shapes=[(3, 4)], dtype="bool")
    check("sqrt", torch.sqrt, F.sqrt, shapes=[(3, 4)], dtype="bool")


# ---- binary arithmetic ----------------------------------------------------------------------------------

BINARY_SHAPES = [[(4, 5), (5,)], [(3, 1, 4), (2, 1)], [(2, 3), (2, 3)]]


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=["row", "outer", "same"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64"])
def test_add_sub_mul_broadcast(shapes, dtype):
    check("add", torch.add, lambda a, b: a + b, shapes=shapes, dtype=dtype, low=-9, high=9)
    check("sub", torch.sub, lambda a, b: a - b, shapes=shapes, dtype=dtype, low=-9, high=9)
    check("mul", torch.mul, lambda a, b: a * b, shapes=shapes, dtype=dtype, low=-9, high=9)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "int64", "bool"])
def test_true_division(dtype):
    low = 1 if dtype in ("int32", "int64") else -3
    check("div", torch.div, lambda a, b: a / b, shapes=[(4, 5), (4, 1)], dtype=dtype, low=low, high=7)
    check("true_divide", torch.true_divide, F.true_divide, shapes=[(4, 5), (5,)], dtype=dtype, low=low, high=7)


def test_scalar_operands_and_reflection():
    check("add", lambda a: a + 2.5, lambda a: a + 2.5, shapes=[(3, 4)], dtype="int32")  # int + float -> float32
    check("mul", lambda a: 2.0 * a, lambda a: 2.0 * a, shapes=[(3, 4)], dtype="float16")  # stays float16
    check("sub", lambda a: 3 - a, lambda a: 3 - a, shapes=[(3, 4)], dtype="int64")
    check("div", lambda a: 3 / a, lambda a: 3 / a, shapes=[(3, 4)], low=0.5, high=3)
    check("add", lambda a: a + 2, lambda a: a + 2, shapes=[(3, 4)], dtype="bool")  # bool + int -> int64
    check("add", lambda a: a + True, lambda a: a + True, shapes=[(3, 4)], dtype="bool")


def test_bool_arithmetic_is_logical():
    check("add", torch.add, lambda a, b: a + b, shapes=[(3, 4), (4,)], dtype="bool")  # or
    check("mul", torch.mul, lambda a, b: a * b, shapes=[(3, 4), (4,)], dtype="bool")  # and


def test_mixed_dtype_promotion():
    i32 = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    i64 = np.arange(12, dtype=np.int64).reshape(3, 4) * 3
    f16 = np.linspace(-2, 2, 12, dtype=np.float16).reshape(3, 4)
    f32 = np.linspace(1, 3, 4, dtype=np.float32)
    check("add", torch.add, lambda a, b: a + b, inputs=[i32, i64])
    check("mul", torch.mul, lambda a, b: a * b, inputs=[i64, f16])
    check("add", torch.add, lambda a, b: a + b, inputs=[f16, f32])
    bf = f16.astype(np.float32).astype(lm.bfloat16.np)
    check("sub", torch.sub, lambda a, b: a - b, inputs=[f16, bf])  # float16 with bfloat16 -> float32


def test_alpha_addcmul_addcdiv_lerp():
    check("add", lambda a, b: torch.add(a, b, alpha=-1.5), lambda a, b: a.add(b, alpha=-1.5), shapes=[(3, 4), (4,)])
    check(
        "sub", lambda a, b: torch.sub(a, b, alpha=3), lambda a, b: a.sub(b, alpha=3), shapes=[(3, 4)] * 2, dtype="int32"
    )
    check(
        "addcmul",
        lambda a, b, c: torch.addcmul(a, b, c, value=0.5),
        lambda a, b, c: a.addcmul(b, c, value=0.5),
        shapes=[(3, 4), (4,), (3, 1)],
    )
    check(
        "addcmul",
        lambda a, b, c: torch.addcmul(a, b, c, value=2),
        lambda a, b, c: F.addcmul(a, b, c, value=2),
        shapes=[(3, 4)] * 3,
        dtype="int64",
    )
    check(
        "addcdiv",
        lambda a, b, c: torch.addcdiv(a, b, c, value=-2),
        lambda a, b, c: F.addcdiv(a, b, c, value=-2),
        shapes=[(3, 4), (4,), (3, 4)],
        low=0.5,
        high=2,
    )
    check("lerp", lambda a, b: torch.lerp(a, b, 0.3), lambda a, b: a.lerp(b, 0.3), shapes=[(3, 4), (4,)])
    check(
        "lerp",
        lambda a, b: torch.lerp(a, b, 0.8),
        lambda a, b: a.lerp(b, 0.8),
        shapes=[(3, 4), (3, 4)],
        dtype="float16",
    )
    check("lerp", torch.lerp, F.lerp, shapes=[(3, 4), (3, 4), (4,)], low=-1, high=2)  # tensor weight, both formulas


# ---- rounding division and remainders ---------------------------------------------------------------

SIGNED_INTS = [np.array([[7, -7, 7, -7, 0, 9, -9, 1]]), np.array([[2, 2, -2, -2, 3, 3, -4, -1]])]


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float16"])
def test_floor_divide_remainder_fmod_signs(dtype):
    a, b = (v.astype(dtype) for v in SIGNED_INTS)
    a2, b2 = np.repeat(a, 2, 0), np.repeat(b, 2, 0)
    check("floor_divide", torch.floor_divide, lambda a, b: a // b, inputs=[a2, b2])
    check("remainder", torch.remainder, lambda a, b: a % b, inputs=[a2, b2])
    check("fmod", torch.fmod, F.fmod, inputs=[a2, b2])
    check(
        "div_trunc",
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda a, b: a.div(b, rounding_mode="trunc"),
        inputs=[a2, b2],
    )
    check(
        "div_floor",
        lambda a, b: torch.div(a, b, rounding_mode="floor"),
        lambda a, b: a.div(b, rounding_mode="floor"),
        inputs=[a2, b2],
    )


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_division_is_exact_at_large_magnitudes(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    a = rng.integers(info.min + 1, info.max, size=(4, 64), dtype=dtype)
    b = rng.integers(-(2**20), 2**20, size=(4, 64), dtype=dtype)
    b[:, :8] = [1, -1, 2, -3, 7, info.max, -info.max, 1 << 12]
    b[b == 0] = 5
    for name, fn in (("floor_divide", torch.floor_divide), ("remainder", torch.remainder), ("fmod", torch.fmod)):
        check(name, fn, getattr(F, name), inputs=[a, b])
    check(
        "div_trunc",
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda a, b: a.div(b, rounding_mode="trunc"),
        inputs=[a, b],
    )


def test_float_division_modes_random_and_special():
    check("floor_divide", torch.floor_divide, lambda a, b: a // b, shapes=[(5, 6), (6,)], low=-9, high=9)
    check("remainder", torch.remainder, lambda a, b: a % b, shapes=[(5, 6), (5, 1)], low=-9, high=9)
    check("remainder", lambda a: 5.5 % a, lambda a: 5.5 % a, shapes=[(5, 6)], low=-9, high=9)
    check("floor_divide", lambda a: a // 0.7, lambda a: a // 0.7, shapes=[(5, 6)], dtype="bfloat16", low=-9, high=9)
    a = np.array([1.0, -1.0, 0.0, 5.0, -5.0, np.inf, 3.0, -3.0, np.nan], np.float32)
    b = np.array([0.0, 0.0, 0.0, np.inf, np.inf, 2.0, -np.inf, 2.0, 1.0], np.float32)
    check("floor_divide", torch.floor_divide, F.floor_divide, inputs=[a, b])
    check("remainder", torch.remainder, F.remainder, inputs=[a, b])
    check(
        "div_trunc",
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda a, b: F.div(a, b, rounding_mode="trunc"),
        inputs=[a, b],
    )
    check("fmod", torch.fmod, F.fmod, inputs=[a, b])


def test_integer_remainder_with_scalar_first():
    check("remainder", lambda a: torch.remainder(5, a), lambda a: 5 % a, inputs=[np.array([3, -3, 2, -7, 1], np.int32)])
    check("floor_divide", lambda a: 17 // a, lambda a: 17 // a, inputs=[np.array([3, -3, 2, -7, 1], np.int64)])


def test_round_half_to_even_and_decimals():
    ties = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 1e7 + 1, 0.49999997], np.float32)
    check("round", torch.round, F.round, inputs=[ties])
    check(
        "round", lambda a: torch.round(a, decimals=2), lambda a: a.round(decimals=2), shapes=[(4, 5)], low=-50, high=50
    )
    check(
        "round",
        lambda a: torch.round(a, decimals=-1),
        lambda a: a.round(decimals=-1),
        shapes=[(4, 5)],
        low=-500,
        high=500,
    )


# ---- powers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("exponent", [2, 3, -2, 0, 0.5, -0.5, 2.5, 1.0, 7.0, 100, -65.0, float("inf"), float("nan")])
def test_tensor_to_scalar_power(exponent):
    check("pow", lambda a: a**exponent, lambda a: a**exponent, shapes=[(4, 5)], low=-1.5, high=1.5)


def test_integer_and_negative_base_powers_are_exact():
    check("pow", lambda a: a**3, lambda a: a**3, shapes=[(4, 5)], dtype="int32", low=-30, high=30)
    check("pow", lambda a: a**2, lambda a: a.pow(2), shapes=[(4, 5)], dtype="bool")  # bool ** int -> int64
    check("pow", lambda a: a**2.0, lambda a: a**2.0, shapes=[(4, 5)], dtype="int64", low=-9, high=9)  # -> float32
    check("pow", lambda a: a**5, lambda a: a**5, shapes=[(4, 5)], dtype="float16", low=-2, high=2)
    base = np.array([-2.0, -2.0, -3.0, -0.5, 2.0, 0.0, 0.0, -1.0, 1.0, np.nan, -1.0, -2.0, 4.0], np.float32)
    expo = np.array([3.0, 2.0, -3.0, 5.0, 0.5, 0.0, -1.0, np.inf, np.nan, 0.0, 0.5, np.inf, -0.5], np.float32)
    check("pow", torch.pow, F.pow, inputs=[base, expo])


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_tensor_powers(dtype):
    base = np.array([[2, -2, 3, -3, 0, 1, -1, 5, 0, 1, -1, 2, 7, -1]], dtype)
    expo = np.array([[10, 7, 0, 5, 3, 9, 63, 2, -1, -2, -3, -1, 40, 64]], dtype)
    check("pow", torch.pow, lambda a, b: a**b, inputs=[np.repeat(base, 2, 0), np.repeat(expo, 2, 0)])
    check("pow", lambda e: 3**e, lambda e: 3**e, shapes=[(3, 4)], dtype=dtype, low=0, high=12)


def test_scalar_base_powers():
    check("pow", lambda e: 2.0**e, lambda e: 2.0**e, shapes=[(3, 4)], low=-4, high=4)
    check("pow", lambda e: 10000.0**e, lambda e: 10000.0**e, shapes=[(3, 4)], low=-1, high=0)  # rotary frequencies
    check(
        "pow",
        lambda e: torch.pow(-2.0, e),
        lambda e: F.pow(-2.0, e),
        inputs=[np.array([2.0, 3.0, -1.0, 0.5], np.float32)],
    )
    check("pow", lambda e: 1.0**e, lambda e: 1.0**e, inputs=[np.array([np.nan, np.inf, 2.0], np.float32)])
    check("pow", lambda e: 2**e, lambda e: 2**e, shapes=[(3, 4)], dtype="float16", low=-4, high=4)


def test_tensor_power_broadcast():
    check("pow", torch.pow, lambda a, b: a**b, shapes=[(3, 4), (4,)], low=0.1, high=2)
    check("pow", torch.pow, lambda a, b: a.pow(b), shapes=[(3, 4), (3, 1)], low=0.1, high=2, dtype="bfloat16")


# ---- conversion --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
def test_conversions(dtype):
    src = np.array([[-2.7, -0.5, 0.0, 0.4, 1.5, 3.9]], np.float32).astype(dtype)
    src = np.repeat(src, 2, 0)
    check("float", lambda a: a.float(), lambda a: a.float(), inputs=[src])
    check("half", lambda a: a.half(), lambda a: a.half(), inputs=[src])
    check("bfloat16", lambda a: a.bfloat16(), lambda a: a.bfloat16(), inputs=[src])
    check("long", lambda a: a.long(), lambda a: a.long(), inputs=[src])
    check("int", lambda a: a.int(), lambda a: a.int(), inputs=[src])
    check("bool", lambda a: a.bool(), lambda a: a.bool(), inputs=[src])
    check("to", lambda a: a.to(torch.int64), lambda a: a.to(torch.int64), inputs=[src])
    check("to", lambda a: a.to("cpu", torch.float16), lambda a: a.to("cpu", torch.float16), inputs=[src])
    check("to", lambda a: a.to(dtype=torch.bfloat16), lambda a: a.to(dtype=lm.bfloat16), inputs=[src])
    check("type_as", lambda a, b: a.type_as(b), lambda a, b: a.type_as(b), inputs=[src, np.ones((2, 6), np.int32)])


# ---- errors ------------------------------------------------------------------------------------------


def test_errors_name_the_problem():
    g = lm.Graph()
    x, y = g.input("x", (3, 4)), g.input("y", (2, 4))
    b, i = g.input("b", (3, 4), dtype=lm.bool), g.input("i", (3, 4), dtype=lm.int32)
    with pytest.raises(lm.ShapeError, match=r"add.*\(3, 4\).*\(2, 4\)"):
        x + y
    with pytest.raises(lm.ShapeError, match=r"remainder.*\(3, 4\).*\(2, 4\)"):
        x % y
    with pytest.raises(lm.DTypeError, match="sub"):
        b - b
    with pytest.raises(lm.DTypeError, match="neg"):
        _ = -b
    with pytest.raises(lm.DTypeError, match="negative integer powers"):
        i**-1
    with pytest.raises(lm.DTypeError, match="alpha"):
        i.add(i, alpha=0.5)
    with pytest.raises(lm.DTypeError, match="addcdiv"):
        F.addcdiv(x, i, i)
    with pytest.raises(ValueError, match="rounding_mode"):
        x.div(x, rounding_mode="round")
    with pytest.raises(lm.DTypeError, match="frac"):
        i.frac()
    with pytest.raises(TypeError):
        x + "1"
    with pytest.raises(TypeError):
        F.add(1, 2)

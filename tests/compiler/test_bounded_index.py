"""Index folding by loop extents (compiler/kernels/bounded_index.py): a division or modulo by a symbolic size folds only
where the remainder provably stays below it."""

import itertools

import luminal as lm
from luminal import dtypes as dt
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.bounded_index import axes_extents, fold, fold_value
from luminal.symbolic import var


def _setting():
    n = lm.sym("n", max=64)
    positions = 16 * n + 1  # a KV cache's length: past blocks plus the step's own key
    i, h, s, d = var("_i0", 0, 8), var("_i1", 0, 4), var("_r0", 0, 16 * 64), var("_r1", 0, 16)
    extents = {"_i0": 8, "_i1": 4, "_r0": positions, "_r1": 16}
    flat = i * (2 * positions * 16) + (h // 2) * (positions * 16) + s * 16 + d  # [8, 2, positions, 16]
    return n, positions, (i, h, s, d), {k: lm.symbolic.as_expr(v) for k, v in extents.items()}, flat


def test_the_axes_of_a_flat_position_through_a_symbolic_length_fold_to_the_variables():
    n, positions, (i, h, s, d), extents, flat = _setting()
    assert fold(flat // (positions * 16) % 2, extents) == h // 2
    assert fold(flat // (2 * positions * 16), extents) == i
    assert fold(flat // 16 % positions, extents) == s
    assert fold(flat % 16, extents) == d
    rebuilt = (flat // (2 * positions * 16)) * (2 * positions * 16) + (flat // (positions * 16) % 2) * (positions * 16)
    rebuilt = rebuilt + (flat // 16 % positions) * 16 + flat % 16
    assert fold(rebuilt, extents) == flat


def test_a_remainder_that_may_reach_the_divisor_is_left_alone():
    n, positions, (i, h, s, d), extents, flat = _setting()
    wider = {**extents, "_r0": positions + 1}  # the variable may pass the axis: no exact split
    assert fold(flat // (positions * 16) % 2, wider) == flat // (positions * 16) % 2
    assert fold((s + 2) // positions, extents) == (s + 2) // positions


def test_folded_values_equal_the_originals_at_every_point():
    n, positions, (i, h, s, d), extents, flat = _setting()
    for e in (flat // (positions * 16) % 2, flat // 16 % positions, flat // (2 * positions * 16)):
        folded = fold(e, extents)
        for rows, a, b, c, k in itertools.product((1, 3), (0, 7), (0, 3), (0, 16 * 1, 16 * 3), (0, 15)):
            env = {"n": rows, "_i0": a, "_i1": b, "_r0": min(c, 16 * rows), "_r1": k}
            assert folded.evaluate(env) == e.evaluate(env)


def test_a_variable_modulo_a_constant_is_a_term_below_the_constant():
    """Heads merged back ([batch, seq, heads * 32] read from [batch, heads, seq, 32]): `_i2 % 32` stays below 32,
    so a row's offset within the sequence never reaches 32 * seq."""
    seq = lm.sym("seq", max=512)
    s, j = var("_i1", 0, 511), var("_i2", 0, 383)
    extents = {"_i1": seq, "_i2": lm.symbolic.as_expr(384)}
    assert fold((32 * s + j % 32) // (32 * seq), extents) == 0
    assert fold(((32 * s + j % 32) // (32 * seq) + j // 32) % 12, extents) == j // 32
    assert fold((32 * s + j % 33) // (32 * seq), extents) == (32 * s + j % 33) // (32 * seq)  # may reach it


def test_a_negative_term_that_the_others_make_up_for_folds():
    """RoPE's rotate-half reads position d + 32 of a head for d < 32 and d - 32 above: `-32 * (d // 32)` in the
    remainder, which the offset 32 makes up for. Without that offset the remainder may be negative: no fold."""
    seq = lm.sym("seq", max=512)
    h, s, d = var("_i1", 0, 7), var("_i2", 0, 511), var("_i3", 0, 63)
    extents = {"_i1": lm.symbolic.as_expr(8), "_i2": seq, "_i3": lm.symbolic.as_expr(64)}
    within = -32 * (d // 32) + 512 * s + 64 * h + d % 32
    assert fold((within + 32) // (512 * seq), extents) == 0
    assert fold((within + 32) % (512 * seq), extents) == within + 32
    assert fold((within + 31) // (512 * seq), extents) == (within + 31) // (512 * seq)


def test_a_guard_that_holds_in_every_step_of_its_loop_is_dropped_and_one_that_may_fail_is_kept():
    n = lm.sym("n", max=4096)
    i = var("_i0", 0, 4095)
    load = ir.Load("x", i * 20, dt.float32)
    always = ir.Guard(i < n, load, dt.float32)  # a padded view's check in a loop that runs to n
    assert fold(i < n, axes_extents((n, 20))) == 1
    assert fold_value(always, axes_extents((n, 20))) == load
    sometimes = ir.Guard(i < n - 1, load, dt.float32)  # the last step is padding
    assert fold_value(sometimes, axes_extents((n, 20))) == sometimes
    assert fold(i < n + 1, axes_extents((n + 2, 20))) == (i < n + 1)

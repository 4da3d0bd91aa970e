"""Attention recognition: softmax(q·kᵀ·scale + mask)·v becomes one Attention kernel, the scores never stored.

Each case runs every candidate the search extracts on the reference interpreter and compiled (the Attention
op has a numpy reference; compiled, it is the flash-attention C of compiler/cpu/codegen_attention.py), against
the reference run of the graph as built, and checks whether the attention was found.
"""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.artifact import load_program, save_program
from luminal.compiler.kernels import ir
from tests.compiler.test_matmul import check_every_candidate

RNG = np.random.default_rng(7)


def _inputs(g, shapes):
    return [g.input(name, shape) for name, shape in shapes.items()]


def _feed(shapes, **concrete):
    out = {}
    for name, shape in shapes.items():
        dims = tuple(concrete.get(str(d), d) if not isinstance(d, int) else d for d in shape)
        out[name] = RNG.standard_normal(dims).astype(np.float32)
    return out


def _found(report) -> int:
    return report["rulesets"]["attention"]["Attention"]


def _attends(program) -> list:
    return [k for k in program.kernels.kernels if isinstance(k, ir.LoopKernel) and isinstance(k.body, ir.Attend)]


# Key counts past a block (70, 130) and short of it: the narrow blocks of a quarter (3, 16) and a half (24)
@pytest.mark.parametrize(
    "seq_q, seq_k, head", [(16, 16, 8), (37, 70, 32), (1, 130, 64), (65, 3, 16), (9, 24, 16), (40, 33, 32)]
)
def test_sdpa_is_one_attention_kernel(seq_q, seq_k, head):
    shapes = {"q": (2, 3, seq_q, head), "k": (2, 3, seq_k, head), "v": (2, 3, seq_k, head)}
    g = lm.Graph()
    q, k, v = _inputs(g, shapes)
    F.scaled_dot_product_attention(q, k, v).output("o")
    report = check_every_candidate(g, _feed(shapes), f"sdpa {seq_q}x{seq_k}x{head}")
    assert _found(report) == 1
    program = lm.compile(g, cache=False)
    assert len(_attends(program)) == 1 and len(program.kernels.kernels) == 1  # no score buffer, no GEMM
    assert program.report["memory"]["naive_bytes"] == 2 * 3 * seq_q * head * 4  # the output is all it stores


def test_masks_causal_and_fully_masked_rows():
    shapes = {"q": (2, 2, 20, 8), "k": (2, 2, 20, 8), "v": (2, 2, 20, 12)}
    g = lm.Graph()
    q, k, v = _inputs(g, shapes)
    allowed = g.input("allowed", (2, 1, 20, 20), lm.bool_)
    bias = g.input("bias", (20, 20))
    F.scaled_dot_product_attention(q, k, v, attn_mask=allowed).output("masked")
    F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3).output("biased")
    F.scaled_dot_product_attention(q, k, v, is_causal=True).output("causal")
    feed = _feed(shapes)
    mask = RNG.random((2, 1, 20, 20)) > 0.4
    mask[0, 0, 3] = False  # a row that may attend to nothing: torch's SDPA gives zeros there
    feed["allowed"], feed["bias"] = mask, RNG.standard_normal((20, 20)).astype(np.float32)
    report = check_every_candidate(g, feed, "masked attention")
    assert _found(report) == 3
    out = lm.compile(g, cache=False).run(feed)
    assert np.all(out["masked"][0, 0, 3] == 0)


def test_plain_softmax_attention_written_out_and_symbolic_sequence():
    seq = lm.sym("seq", max=96)
    shapes = {"q": (4, seq, 16), "k": (4, seq, 16), "v": (4, seq, 16)}
    g = lm.Graph()
    q, k, v = _inputs(g, shapes)
    scores = (q @ k.transpose(-1, -2)) * 0.25
    (F.softmax(scores, dim=-1) @ v).output("o")
    program = lm.compile(g, cache=False)
    assert len(_attends(program)) == 1
    for n in (1, 50, 96):  # one program for every sequence length
        feed = _feed(shapes, seq=n)
        np.testing.assert_allclose(program.run(feed)["o"], lm.run(g, feed)["o"], rtol=1e-4, atol=1e-5)


def test_other_softmaxes_are_left_alone():
    """A softmax over another axis, or scores that are read elsewhere, are not the pattern or keep their buffer."""
    shapes = {"q": (2, 10, 8), "k": (2, 10, 8), "v": (2, 10, 8)}
    g = lm.Graph()
    q, k, v = _inputs(g, shapes)
    scores = q @ k.transpose(-1, -2)
    (F.softmax(scores, dim=-2) @ v).output("other_axis")
    report = check_every_candidate(g, _feed(shapes), "softmax over the query axis")
    assert _found(report) == 0


def test_attention_kernel_survives_the_artifact_round_trip(tmp_path):
    shapes = {"q": (1, 2, 24, 8), "k": (1, 2, 24, 8), "v": (1, 2, 24, 8)}
    g = lm.Graph()
    q, k, v = _inputs(g, shapes)
    F.scaled_dot_product_attention(q, k, v, is_causal=True).output("o")
    program = lm.compile(g, cache=False)
    path = tmp_path / "attention.lprog"
    save_program(program, path)
    loaded = load_program(path)
    assert loaded.kernels == program.kernels
    feed = _feed(shapes)
    np.testing.assert_array_equal(loaded.run(feed)["o"], program.run(feed)["o"])


def test_head_dims_past_the_stack_blocks_keep_the_primitive_form():
    shapes = {"q": (1, 1, 8, 300), "k": (1, 1, 8, 300), "v": (1, 1, 8, 300)}
    g = lm.Graph()
    q, k, v = _inputs(g, shapes)
    F.scaled_dot_product_attention(q, k, v).output("o")
    report = check_every_candidate(g, _feed(shapes), "head dim 300")
    assert _found(report) == 0  # codegen_attention.MAX_HEAD_DIM: the GEMMs and softmax kernels run instead


def test_found_whatever_ranges_an_earlier_compile_gave_the_same_symbols():
    """The softmax template is cached by the scores' shape and its symbols' ranges: a model whose `batch` may be 2,
    compiled first, left a template that a later model with `batch` at most 1 failed to match (expressions compare
    equal whatever their ranges), so the later model lost its attention kernel."""
    for max_batch in (2, 1, 2):
        g = lm.Graph()
        batch, seq = lm.sym("batch", max=max_batch), lm.sym("seq", max=16)
        q, k, v = (g.input(name, (batch, 4, seq, 16)) for name in "qkv")
        F.scaled_dot_product_attention(q, k, v, is_causal=True).output("o")
        assert len(_attends(lm.compile(g, cache=False))) == 1, f"batch at most {max_batch}"

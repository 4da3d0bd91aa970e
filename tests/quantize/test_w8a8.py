"""W8A8's meaning: a projection's input rows quantised to Q8_0 in the graph (luminal/quantize.py), run by the
reference interpreter, against a torch statement of llama.cpp's Q8_0 x Q8_0; and the quantize="w8a8" scheme."""

import numpy as np
import pytest

import luminal as lm
from luminal.quantize import check_quantize, dequantize, quantize_activations
from luminal.view import ShapeError
from tests.quantize.q8_0_rows import extreme_rows, extreme_weight, torch_q8_0_rows, torch_w8a8

ROWS = lm.sym("rows", max=16)


def test_quantised_rows_are_the_torch_statement():
    """The graph's Q8_0 rows (values and scales, through its dequantisation) are torch's, exactly."""
    x = extreme_rows(96, np.random.default_rng(0))
    g = lm.Graph()
    quantize_activations(g.input("x", (6, 96))).output("y")
    qa, sa = torch_q8_0_rows(x)
    got = lm.run(g, {"x": x})["y"]
    np.testing.assert_array_equal(got, (qa.float() * sa[..., None]).reshape(6, 96).numpy())
    assert qa.abs().max() == 127 and (qa[1, 0] == 127).all() and (qa[1, 1] == -127).all()
    assert (got[0, :32] == 0).all() and (got[3, :32] == 0).all()


@pytest.mark.parametrize("k", [32, 96, 256])
def test_rows_quantise_on_their_own(k):
    """A row's Q8_0 values do not depend on the other rows of the batch (batch invariance)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, k)).astype(np.float32) * np.arange(1, 6, dtype=np.float32)[:, None]
    g = lm.Graph()
    quantize_activations(g.input("x", (ROWS, k))).output("y")
    together = lm.run(g, {"x": x})["y"]
    for r in range(5):
        np.testing.assert_array_equal(lm.run(g, {"x": x[r : r + 1]})["y"][0], together[r])


def test_the_reference_projection_is_the_torch_statement():
    rng = np.random.default_rng(2)
    q, s = extreme_weight(64, 96, rng)
    x = extreme_rows(96, rng)
    g = lm.Graph()
    w = dequantize(g.weight("q", (64, 96), lm.int8), g.weight("s", (64, 3)))
    (quantize_activations(g.input("x", (ROWS, 96))) @ w.t()).output("y")
    g.bind({"q": q, "s": s})
    want = torch_w8a8(x, q, s)
    np.testing.assert_allclose(lm.run(g, {"x": x})["y"], want, atol=1e-5 * np.abs(want).max())


def test_refuses_rows_that_are_not_whole_blocks():
    with pytest.raises(ShapeError, match="K % 32"):
        quantize_activations(lm.Graph().input("x", (2, 48)))


def test_w8a8_is_a_scheme():
    assert check_quantize("w8a8") == "w8a8"

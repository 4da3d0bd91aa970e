"""The one comparison the CUDA tests make: a compiled program's outputs against the reference interpreter's."""

import numpy as np

TOLERANCE = {"float64": (1e-13, 1e-13), "float32": (2e-5, 2e-5), "float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2)}


def assert_matches(got: dict, want: dict) -> None:
    """Same names, shapes and dtypes; floats within TOLERANCE, everything else exact."""
    assert got.keys() == want.keys()
    for name, expected in want.items():
        assert got[name].dtype == expected.dtype and got[name].shape == expected.shape, name
        rtol, atol = TOLERANCE.get(expected.dtype.name, (0, 0))
        np.testing.assert_allclose(got[name].astype(np.float64), expected.astype(np.float64), rtol, atol, err_msg=name)
